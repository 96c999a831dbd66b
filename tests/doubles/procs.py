"""Is a process (or a whole process group) really gone? Read from /proc.

A killed child whose parent died lingers as a zombie until PID 1 reaps it,
and in a container PID 1 may never do so; a zombie runs nothing and holds
nothing, so it counts as gone.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _stat_fields(pid: int | str) -> list[str] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()  # state, ppid, pgrp, ...


def alive(pid: int) -> bool:
    """A pid that exists and is not a zombie."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def live_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid``."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat_fields(entry)
        if fields is not None and fields[0] not in ("Z", "X") and int(fields[2]) == pgid:
            members.append(int(entry))
    return members


def group_gone(pgid: int, wait: float = 2.0) -> bool:
    """True once no live process is left in group ``pgid`` (polled up to ``wait`` s)."""
    deadline = time.monotonic() + wait
    while live_members(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@contextmanager
def running(argv: list[str], wait_s: float = 5.0) -> Iterator[subprocess.Popen[bytes]]:
    """A real process running ``argv``, once its whole command line can be
    read (a process scan right after ``Popen`` may see only the interpreter);
    killed and reaped on the way out."""
    import psutil

    proc = subprocess.Popen(argv)
    try:
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and len(psutil.Process(proc.pid).cmdline()) < len(argv):
            time.sleep(0.02)
        yield proc
    finally:
        proc.kill()
        proc.wait()
