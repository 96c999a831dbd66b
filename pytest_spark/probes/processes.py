"""The process table, through psutil (imported only when a check asks)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def list_processes(root: Path | None = None) -> dict[str, Any]:
    """Every readable process: pid, ppid, name, cmdline, user, rss.

    The pytest process and its ancestors are flagged ``self`` so contention
    checks never count the run that is asking. Processes that vanish or deny
    access while being read are counted, not fatal.
    """
    try:
        import psutil
    except ImportError as exc:  # pragma: no cover - psutil is a dependency
        return {"error": f"psutil not importable: {exc}", "processes": []}
    # psutil keeps PROCFS_PATH module-global and caches Process objects in
    # process_iter(): scan under this machine's root, then put both back, so
    # a fake root (tests, SPARK_PREFLIGHT_HOST_ROOT) never leaks into other
    # psutil users in this process.
    saved = psutil.PROCFS_PATH
    clear = getattr(psutil.process_iter, "cache_clear", lambda: None)
    psutil.PROCFS_PATH = str(Path(root or "/") / "proc")
    clear()
    try:
        return _scan(psutil)
    finally:
        psutil.PROCFS_PATH = saved
        clear()


def _scan(psutil: Any) -> dict[str, Any]:
    me = os.getpid()
    mine = {me}
    try:
        for parent in psutil.Process(me).parents():
            mine.add(parent.pid)
    except (psutil.Error, OSError):
        pass
    procs: list[dict[str, Any]] = []
    denied = vanished = 0
    try:
        iterator = psutil.process_iter(["pid", "ppid", "name", "cmdline", "username", "memory_info"])
        for p in iterator:
            info = p.info
            cmdline = info.get("cmdline")
            if cmdline is None:
                denied += 1
            mem = info.get("memory_info")
            procs.append(
                {
                    "pid": info.get("pid"),
                    "ppid": info.get("ppid"),
                    "name": info.get("name") or "",
                    "cmdline": list(cmdline or []),
                    "user": info.get("username"),
                    "rss_bytes": getattr(mem, "rss", None),
                    "self": info.get("pid") in mine,
                }
            )
    except (psutil.Error, OSError, IndexError) as exc:  # IndexError: psutil on an empty /proc
        return {"error": f"cannot list processes: {exc or type(exc).__name__}", "processes": procs}
    return {"error": None, "processes": procs, "denied": denied, "vanished": vanished}
