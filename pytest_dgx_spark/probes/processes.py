"""The process table, read from ``/proc`` under the machine's root, in a child.

Reading another process's ``cmdline`` takes its memory lock in the kernel; a
process stuck in the kernel holding that lock (a CUDA job wedged in the
NVIDIA driver) blocks the reader forever, in uninterruptible sleep that no
timeout or signal ends. So the scan runs in a probe child
(``probes/scripts/procs_child.py``, one step per pid), and the pytest
process only follows it: a read that does not return within the timeout is
named (which pid, which file) and the scan is abandoned with what it had
read so far. The child refuses FIFOs, sockets and devices planted where a
pid's files should be, and skips and counts a pid it cannot read (a symlink
loop, a process that exited mid-scan, a denied file). psutil is not used: it
opens ``/proc`` files with a plain ``open()`` in this process.
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

#: a step of the scan that names the file it was reading
_READ_STEP = re.compile(r"^read (/proc/\d+/\w+)$")


#: how every ``error`` of an incomplete scan starts (a check that reads the
#: table never PASSes on one: the flags it did not read may be the ones that matter)
SCAN_STOPPED = "the process scan "
#: the most the scan may print: its command-line budget (scripts/procs_child.py) plus the rest of each line
SCAN_STDOUT = 40 << 20


def list_processes(
    root: Path | None = None,
    *,
    timeout: float = 10.0,
    env: Mapping[str, str] | None = None,
    first: Sequence[int] = (),
) -> dict[str, Any]:
    """Every readable process: pid, ppid, name, cmdline, rss.

    The pytest process and its ancestors are flagged ``self`` so contention
    checks never count the run that is asking. ``unreadable`` counts the
    pids skipped or listed without a command line (``unreadable_examples``
    names a few, with the reason); ``error`` says why the scan is missing or
    incomplete. ``timeout`` bounds each pid's read (and three times it the
    whole scan). ``first``: pids read before the others, each with the whole
    per-process limit (the GPU's own, from NVML's list). A scan that stopped,
    or that read some command lines only in part (the budget shared by too
    many long ones), says so in ``error``, starting with :data:`SCAN_STOPPED`.
    """
    request = json.dumps({"root": str(root or "/"), "first": [int(p) for p in first]})
    result = run_python(
        script_source("procs_child.py"),
        args=[request],
        step_timeout=timeout,
        total_timeout=3 * timeout,
        env=env,
        python=sys.executable,  # only the standard library: the interpreter running us will do
        max_stdout=SCAN_STDOUT,
    )
    procs = [dict(e, self=False) for e in result.events if isinstance(e, dict) and "pid" in e]
    _mark_self(procs)
    error = result.data.get("error") if result.ok else _stopped(result, len(procs))
    cut = int(result.data.get("cut_by_budget") or 0)
    if error is None and cut:
        error = (
            f"{SCAN_STOPPED}read {cut} of {len(procs)} command lines only in part: "
            f"{len(procs)} processes share its {result.data.get('budget_mib', '?')} MiB budget"
        )
    return {
        "error": error,
        "processes": procs,
        "unreadable": int(result.data.get("unreadable") or 0),
        "unreadable_examples": list(result.data.get("unreadable_examples") or []),
    }


def _stopped(result: ChildResult, listed: int) -> str:
    """Why the scan is incomplete, in a line a check can quote."""
    step = _READ_STEP.match(result.step or "")
    if result.timed_out and step:
        return (
            f"the process scan stopped: reading {step.group(1)} did not return within "
            f"{result.data.get('_allowance', '?')} s (a process stuck in the kernel, as on a wedged GPU "
            f"driver, holds it); {listed} processes read before it"
        )
    return f"the process scan stopped: {result.describe('the scan')}; {listed} processes read before it"


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
