"""``pytest_configure`` with ``--spark-preflight`` or a ``--spark-*`` flag: stop on the
``--spark-config PATH`` trap, say in one line when ``--spark-*`` options came without the
preflight, else hand over to :func:`.session.start` (only then are the settings imported)."""

from __future__ import annotations

import os
import shlex
from typing import Any

import pytest

from pytest_dgx_spark import options
from pytest_dgx_spark.safe_text import visible, write_line


def configure(config: pytest.Config, enabled: bool) -> None:
    """``pytest_configure`` past the markers (``enabled``: the preflight runs)."""
    if moved := value_taken_as_test_path(config):
        raise pytest.UsageError(visible(moved))
    if enabled:
        from pytest_dgx_spark import session  # lazy: the preflight's machinery, only with --spark-preflight

        session.start(config)
        return
    ignored = options_without_preflight(config)
    if ignored:  # one line at the end of the run, not a warnings-summary entry with our source line
        config.pluginmanager.register(OneLine(f"warning: {ignored}"), "dgx_spark_ignored_options")


def options_without_preflight(config: pytest.Config) -> str | None:
    """The ``--spark-*`` options given without the preflight (a CI line that forgets
    ``--spark-preflight`` would gate nothing, silently); xdist workers leave it to the controller."""
    if hasattr(config, "workerinput"):
        return None
    given = [o.flag for o in options.OPTIONS if getattr(config.option, o.dest, None) is not None]
    if not given:
        return None
    return f"{', '.join(given)} ignored: no check runs without --spark-preflight (or spark_preflight_enabled = true)"


class OneLine:
    """One yellow line in the terminal summary, visible under ``-q`` too."""

    def __init__(self, line: str) -> None:
        self.line = line

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        write_line(terminalreporter, self.line, yellow=True)


def value_taken_as_test_path(config: pytest.Config) -> str | None:
    """Say so when ``--spark-config PATH`` (space form) moved the rootdir: pytest finds the rootdir
    before it loads entry-point plugins, so ``PATH`` after a then-unknown flag reads as a test path.
    We find the setup again without our values; when it differs, the run asks for ``--flag=PATH``."""
    args = [*shlex.split(os.environ.get("PYTEST_ADDOPTS", "")), *map(str, config.invocation_params.args)]
    valued = {o.flag for o in options.OPTIONS if o.kind != "bool"}
    spaced = [(args[i], args[i + 1]) for i in range(len(args) - 1) if args[i] in valued]
    if not spaced:
        return None
    from pytest_dgx_spark import inifiles  # lazy: only when such a flag is spaced

    try:
        found = inifiles.locate(config.invocation_params.dir, [str(a) for a in config.getoption("file_or_dir") or ()],
                                config.getoption("inifilename"), config.getoption("rootdir") or None)  # fmt: skip
    except (inifiles.ConfigError, OSError, UnicodeDecodeError):  # pytest read it: do not guess, do not block
        return None
    rootpath, inipath = found.rootdir, found.inipath
    if rootpath == config.rootpath and inipath == config.inipath:
        return None
    flag, value = spaced[0]
    ini = f"{inipath} was not read" if inipath else "no ini file"
    return (f"{flag} {value}: pytest read {value!r} as a test path before this plugin loaded, so the rootdir "
            f"became {config.rootpath} ({ini}); write {flag}={value}")  # fmt: skip
