"""The process table, read from ``/proc`` under the machine's root.

Every file is read with :func:`procfs.read_regular`: a FIFO, socket or device
planted where a pid's ``stat`` or ``cmdline`` should be (a crafted tree under
``SPARK_PREFLIGHT_HOST_ROOT``) is refused at once instead of blocking the
scan, and a pid that cannot be read (a symlink loop, a process that exited
mid-scan, a denied file) is skipped and counted, never fatal to the others.
psutil is not used: it opens ``/proc`` files with a plain ``open()``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pytest_spark.probes.procfs import read_regular

#: a command line longer than this is cut (a pid's cmdline can be ~2 MiB)
CMDLINE_LIMIT = 1 << 16
#: unreadable pids named in the answer (the rest are only counted)
NAMED_UNREADABLE = 5


def list_processes(root: Path | None = None) -> dict[str, Any]:
    """Every readable process: pid, ppid, name, cmdline, rss.

    The pytest process and its ancestors are flagged ``self`` so contention
    checks never count the run that is asking. ``unreadable`` counts the
    pids skipped or listed without a command line (``unreadable_examples``
    names a few, with the reason).
    """
    proc = Path(root or "/") / "proc"
    try:
        pids = sorted(int(e.name) for e in os.scandir(proc) if e.name.isdigit())
    except OSError as exc:
        return {"error": f"cannot list processes: {exc.strerror or exc}", "processes": []}
    procs: list[dict[str, Any]] = []
    unreadable: list[str] = []
    page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
    for pid in pids:
        try:
            ppid, name, rss_pages = _stat(proc / str(pid) / "stat")
        except (OSError, ValueError, IndexError) as exc:
            unreadable.append(f"pid {pid}: {_why(exc)}")
            continue
        try:
            cmdline = _cmdline(proc / str(pid) / "cmdline")
        except OSError as exc:  # listed without it: NVML may still name its memory
            cmdline = None
            unreadable.append(f"pid {pid} cmdline: {_why(exc)}")
        procs.append(
            {
                "pid": pid,
                "ppid": ppid,
                "name": name,
                "cmdline": cmdline or [],
                "rss_bytes": rss_pages * page if rss_pages is not None else None,
                "self": False,
            }
        )
    if not procs and not pids:
        return {"error": "cannot list processes: no process in /proc", "processes": []}
    _mark_self(procs)
    return {
        "error": None,
        "processes": procs,
        "unreadable": len(unreadable),
        "unreadable_examples": unreadable[:NAMED_UNREADABLE],
    }


def _stat(path: Path) -> tuple[int, str, int | None]:
    """``/proc/<pid>/stat`` -> (ppid, name, rss in pages). The name sits in
    parentheses and may itself hold spaces and parentheses: cut at the last ``)``."""
    text = read_regular(path, 4096).decode("utf-8", errors="replace")
    head, _, tail = text.rpartition(")")
    name = head.partition("(")[2]
    fields = tail.split()
    if not head or len(fields) < 2:
        raise ValueError("malformed stat")
    rss = int(fields[21]) if len(fields) > 21 and fields[21].lstrip("-").isdigit() else None
    return int(fields[1]), name, rss


def _cmdline(path: Path) -> list[str]:
    raw = read_regular(path, CMDLINE_LIMIT)
    return [a.decode("utf-8", errors="replace") for a in raw.rstrip(b"\0").split(b"\0")] if raw else []


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        return exc.strerror or str(exc) or type(exc).__name__
    return f"unparsable stat ({type(exc).__name__})"


def _mark_self(procs: list[dict[str, Any]]) -> None:
    """Flag this process and its ancestors (as far as the table shows them)."""
    by_pid = {p["pid"]: p for p in procs}
    cur: int | None = os.getpid()
    seen: set[int] = set()
    while cur is not None and cur in by_pid and cur not in seen:
        seen.add(cur)
        by_pid[cur]["self"] = True
        parent = by_pid[cur].get("ppid")
        cur = parent if isinstance(parent, int) and parent > 0 else None
