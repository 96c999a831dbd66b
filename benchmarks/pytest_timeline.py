#!/usr/bin/env python3
"""Where a ``pytest --spark-preflight`` run spends its time, from the start of
the interpreter: pytest imported, each plugin module imported, configure,
collection done, each probe child spawned, first test set up, end.

The pytest-vs-CLI target (issue 10) is about overlap: the CLI starts its
probes at once, pytest only once its own start is done. This prints how much
of pytest's start lies before the first probe child, so a change that starts
probes earlier can be judged on the machine itself.

Usage: python benchmarks/pytest_timeline.py [pytest args...]   (run in an empty folder)
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

T0 = time.perf_counter()
#: the terminal's stderr, kept before pytest captures fd 2 around each test
ERR = os.dup(2)
WATCH = ("pytest_dgx_spark.plugin", "pytest_dgx_spark.session", "pytest_dgx_spark.engine")


def stamp(what: str) -> None:
    os.write(ERR, f"{(time.perf_counter() - T0) * 1000:8.1f} ms  {what}\n".encode())


class _Imports:
    """A meta-path finder that only notes when a watched module is first asked for."""

    def find_spec(self, name: str, path: object, target: object = None) -> None:
        if name in WATCH:
            stamp(f"import {name}")
        return None


class _Hooks:
    def pytest_configure(self) -> None:
        stamp("pytest_configure")

    def pytest_collection_finish(self) -> None:
        stamp("collection finished")

    def pytest_runtest_setup(self, item: object) -> None:
        stamp(f"setup {getattr(item, 'nodeid', item)}")

    def pytest_unconfigure(self) -> None:
        stamp("pytest_unconfigure")


_popen_init = subprocess.Popen.__init__


def _logged_init(self: subprocess.Popen, args: object, *a: object, **kw: object) -> None:
    argv = list(args) if isinstance(args, (list, tuple)) else [str(args)]
    script = next((str(x)[:60].splitlines()[0] for x in argv[1:] if str(x).startswith("#") or "\n" in str(x)), "")
    stamp(f"spawn {argv[0]} {script or ' '.join(map(str, argv[1:3]))}")
    _popen_init(self, args, *a, **kw)


def main() -> int:
    sys.meta_path.insert(0, _Imports())
    subprocess.Popen.__init__ = _logged_init  # type: ignore[method-assign]
    import pytest

    stamp("pytest imported")
    code = pytest.main(sys.argv[1:], plugins=[_Hooks()])
    stamp(f"pytest.main returned {int(code)}")
    return int(code)


if __name__ == "__main__":
    sys.exit(main())
