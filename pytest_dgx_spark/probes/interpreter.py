"""The interpreter ``--python`` names (issue 33 item 1): a prolog runs as root with the system Python
while the job runs in its own venv, conda env or container, so G1, G2, G7 and G9 must judge the
job's Python. Its packages are listed by that interpreter itself, in a bounded child (another Python
version's ``importlib.metadata``, its own ``sys.path`` and ``.pth`` files), never by ours."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_dgx_spark.probes import child, packages


def source() -> str:
    """``probes/packages.py`` (standard library only) first, then the protocol and the child's main:
    the one package scan, run by the judged interpreter."""
    return Path(packages.__file__).read_text(encoding="utf-8") + "\n" + child.script_source("python_child.py")


def describe(python: str, env: Mapping[str, str], timeout: float) -> dict[str, Any]:
    """``{"ok", "python", "reason", "executable", "version", "path", "dists", "errors"}`` of ``python``."""
    ran = child.run_python(source(), env=env, python=python, step_timeout=timeout)
    d = ran.data
    ok = ran.ok and isinstance(d.get("path"), list) and isinstance(d.get("dists"), dict)
    return {
        "ok": ok, "python": python, "reason": None if ok else ran.describe(f"{python} (--python)"),
        "executable": d.get("executable"), "version": d.get("version"), "prefix": d.get("prefix"),
        "path": [str(p) for p in d.get("path") or []], "dists": d.get("dists") or {},
        "errors": d.get("errors") or 0,
    }
