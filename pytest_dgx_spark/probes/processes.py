"""The process table, read from ``/proc`` under the machine's root, in a probe child
(``scripts/procs_child.py``, one step per pid): a process wedged in the kernel holding its memory
lock blocks a ``cmdline`` reader forever, so a read that does not return in time is named and
the scan abandoned with what it had. psutil is not used: it reads ``/proc`` in this process.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_dgx_spark.probes.child import ChildResult, run_python, script_source

_READ_STEP = re.compile(r"^read (/proc/\d+/\w+)$")
#: how every ``error`` of an incomplete scan starts (a check never PASSes on one)
SCAN_STOPPED = "the process scan "
#: the most the scan may print: its command-line budget plus the rest of each line
SCAN_STDOUT = 40 << 20


def list_processes(
    root: Path | None = None, *, timeout: float = 10.0, env: Mapping[str, str] | None = None,
    first: Sequence[int] = (),
) -> dict[str, Any]:
    """Every readable process: pid, ppid, name, cmdline, rss_bytes, uid, sid; ``self`` and ``mine``
    (see :func:`mark`)."""
    request = json.dumps({"root": str(root or "/"), "first": [int(p) for p in first]})
    result = run_python(
        script_source("procs_child.py"), args=[request], step_timeout=timeout, total_timeout=3 * timeout,
        env=env, max_stdout=SCAN_STDOUT,
        python=sys.executable,  # only the standard library: the interpreter running us will do
    )
    procs = mark([dict(e) for e in result.events if isinstance(e, dict) and "pid" in e])
    error = result.data.get("error") if result.ok else _stopped(result, len(procs))
    cut = int(result.data.get("cut_by_budget") or 0)
    if error is None and cut:
        error = (f"{SCAN_STOPPED}read {cut} of {len(procs)} command lines only in part: "
                 f"{len(procs)} processes share its {result.data.get('budget_mib', '?')} MiB budget")
    return {"error": error, "processes": procs, "unreadable": int(result.data.get("unreadable") or 0),
            "unreadable_examples": list(result.data.get("unreadable_examples") or [])}


def _stopped(result: ChildResult, listed: int) -> str:
    """Why the scan is incomplete, in a line a check can quote."""
    step = _READ_STEP.match(result.step or "")
    if result.timed_out and step:
        why = (f"reading {step.group(1)} did not return within {result.data.get('_allowance', '?')} s "
               "(a process stuck in the kernel, as on a wedged GPU driver, holds it)")
    else:
        why = result.describe("the scan")
    return f"{SCAN_STOPPED}stopped: {why}; {listed} processes read before it"


def mark(procs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Flag ``self`` (this process and its ancestors, as far as the table shows them) and ``mine``:
    self, or run by this user, or in this session (another user's job is not this run's to judge,
    issue 24); a table without owners (an older capture) counts every process as mine. Session 0 is
    no match: getsid reports it for a session led outside this pid namespace (a container started
    by root), which every other such process shares."""
    by_pid = {p["pid"]: p for p in procs}
    uid, sid = os.getuid(), os.getsid(0)
    for p in procs:
        p["self"] = False
        p["mine"] = p.get("uid") in (None, uid) or (sid > 0 and p.get("sid") == sid)
    cur: int | None = os.getpid()
    while cur is not None and cur in by_pid and not by_pid[cur]["self"]:
        by_pid[cur]["self"] = by_pid[cur]["mine"] = True
        parent = by_pid[cur].get("ppid")
        cur = parent if isinstance(parent, int) and parent > 0 else None
    return procs
