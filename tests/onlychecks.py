"""Run a module of this package with a catalog of fewer checks: ``python tests/onlychecks.py FOLDER
G1,...,G10 MODULE ARGS...`` runs ``python -m MODULE ARGS...`` as if only those check packages existed.

Why: a golden text (a README sample, an exact-lines test) shows what the released checks print for
a capture they made. A check added later prints its own line beside them and changes the verdict's
counts, which says nothing about the lines the golden text holds. Such a test runs its command
through :func:`argv` with the ids the golden text names, so a new check leaves it as it was.

How: before the package's catalog is imported, ``pytest_dgx_spark.checks.__path__`` becomes FOLDER,
which links every entry of the real folder but the check packages left out. The catalog finds the
checks by listing that path, so every name built from it (ids, span, markers, help) is the smaller
set's; the code run is the package's own, unchanged.
"""

from __future__ import annotations

import os
import runpy
import sys
from collections.abc import Iterable
from pathlib import Path

HERE = Path(__file__).resolve()


def argv(folder: Path, ids: Iterable[str], module: str, *args: str) -> list[str]:
    """The command line that runs ``python -m module args`` with the catalog of ``ids`` only."""
    return [sys.executable, str(HERE), str(folder), ",".join(ids), module, *args]


def link_checks(folder: Path, ids: set[str]) -> Path:
    """``folder``, holding a link to each entry of the real checks folder but the packages of the
    checks not in ``ids``."""
    import pytest_dgx_spark.checks as checks

    (real,) = checks.__path__
    folder.mkdir(parents=True, exist_ok=True)
    for entry in os.scandir(real):
        cid = checks.check_id(entry.name)  # the catalog's own rule
        if entry.name == "__pycache__" or (cid is not None and cid not in ids):
            continue
        link = folder / entry.name
        if not link.exists():
            link.symlink_to(entry.path, target_is_directory=entry.is_dir())
    return folder


def main() -> None:
    folder, ids, module, *args = sys.argv[1:]
    import pytest_dgx_spark.checks as checks

    assert "pytest_dgx_spark.catalog" not in sys.modules, "the catalog was read before it was narrowed"
    checks.__path__ = [str(link_checks(Path(folder), set(ids.split(","))))]
    sys.argv = [module, *args]
    sys.path[0] = os.getcwd()  # as ``python -m`` has it, not this script's folder
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
