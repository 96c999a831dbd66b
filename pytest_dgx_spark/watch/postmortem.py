"""The post-mortem of a failed job: diagnose's log reading over what the watch kept, and its events.

The job's kept output (head and tail) and the kernel-log records logged while it ran are scanned as
``spark-preflight diagnose job-output.log --kernel-log kmsg --no-machine`` would scan them; the
watch's own events come after as evidence with their clock time ("G4: … from 02:14:10, then the
job died at 02:31:55"). When the logs name no cause, the first FAIL (else WARN) event does.
Loaded only when a job failed.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_dgx_spark import logscan
from pytest_dgx_spark.diagnose import diagnose_run
from pytest_dgx_spark.watch import rules

if TYPE_CHECKING:
    from pytest_dgx_spark.watch.run import Watch

#: events quoted as evidence at most (the timeline has them all)
MAX_EVIDENCE = 8


def _clock(wall: float) -> str:
    """``02:14:10``, local time."""
    return time.strftime("%H:%M:%S", time.localtime(wall))


def evidence(watch: Watch, seconds: float) -> list[rules.Event]:
    """The events worth quoting: FAIL first, then WARN, then INFO (a SwPowerCap), each kind once, in
    time order within."""
    rank = {"FAIL": 0, "WARN": 1, "INFO": 2}
    started = [e for e in watch.watcher.events if e.state != "clear" and e.status in rank]
    ranked = sorted(started, key=lambda e: (rank[e.status], e.t))
    seen: set[str] = set()
    out = []
    for e in ranked:
        if e.code not in seen:
            seen.add(e.code)
            out.append(e)
    return out[:MAX_EVIDENCE]


def _until(watch: Watch, e: rules.Event) -> str:
    cleared = next(
        (c for c in watch.watcher.events if c.state == "clear" and c.key == e.key and c.t >= e.t), None
    )
    if cleared is None or cleared.text.startswith("still active when the watch ended"):
        return ""
    return f" until {_clock(cleared.wall)}"


def post_mortem(watch: Watch, seconds: float) -> list[str]:
    """The lines to print: what the logs show, the diagnosis, and the run's events as evidence."""
    table = logscan.load_table(None)
    with tempfile.TemporaryDirectory(prefix="spark-watch-") as folder:
        out = Path(folder) / "job-output.log"
        out.write_bytes(watch.output.text())
        kernel: list[str] = []
        if watch.kmsg.kept:
            path = Path(folder) / "kmsg"
            path.write_text(
                "".join(r.text + "\n" for r in watch.kmsg.kept), encoding="utf-8", errors="replace"
            )
            kernel.append(str(path))
        scans = logscan.scan_logs([str(out)], kernel, table)
        lines, diag = diagnose_run(scans, table, {}, {})
    died = _clock(watch.started_wall + seconds)
    said = ["post-mortem (the job's output, the kernel log since it started, the watch's events):"]
    said += [f"  {r.short_line()}" for r in lines if r.status.value in ("FAIL", "WARN")]
    quoted = evidence(watch, seconds)
    cause = diag.cause.gotcha if diag.cause is not None else None
    if cause is None and quoted and quoted[0].status != "INFO":
        first = quoted[0]
        said.append(f"diagnosis: {first.check} (from the watch: [{first.code}] at {_clock(first.wall)})")
    else:
        said.append(diag.line())
    for e in quoted:
        said.append(
            f"  evidence: {e.check}: {e.text} from {_clock(e.wall)} ({rules.elapsed(e.t)})"
            f"{_until(watch, e)}, then the job died at {died}"
        )
    return said
