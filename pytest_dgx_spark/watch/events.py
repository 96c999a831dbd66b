"""The watcher's events: each kind's code, check and fix (:data:`CODES`), an :class:`Event` as one
stderr line (:func:`line`) and one timeline record (:meth:`Event.to_dict`), and how a time is said.

A condition that starts is a ``start`` event, one that ends a ``clear`` (with how long it lasted), an
instant (an Xid, an OOM kill) a ``once``. Pure: no reading, no clock but an event's wall time.
"""

from __future__ import annotations

import time
from dataclasses import field
from typing import Any

from pytest_dgx_spark.checks.g04_thermal.check import XID_APP_FIX, XID_FIXES, XID_OTHER_FIX
from pytest_dgx_spark.datadef import define


@define(frozen=True)
class Code:
    """One event kind: its check, default status, and fix."""

    check: str
    status: str
    fix: str


LOW_POWER_FIX = (
    "a stuck low-power (USB-C PD) state: unplug the power brick from the wall and from the Spark, "
    "wait 60 s, plug it back in; if it persists, try another 240 W supply, then RMA"
)
CODES: dict[str, Code] = {
    "G4.clock-event": Code(
        "G4",
        "WARN",
        "heat or the power supply is cutting the clocks: check airflow and the "
        "power brick (240 W USB-C PD); SwPowerCap alone is the GPU at its power limit",
    ),
    "G4.clocks-low": Code("G4", "WARN", LOW_POWER_FIX),
    "G4.flat-power": Code(
        "G4",
        "WARN",
        "the seed's throttling pattern: power held well under the limit while the "
        "temperature climbs; check airflow and the power brick, and the clock-event counters "
        "(nvidia-smi -q -d PERFORMANCE)",
    ),
    "G4.no-answer": Code(
        "G4",
        "WARN",
        "the driver stopped answering NVML: if it stays so, the GPU may be lost (look for an Xid; reboot)",
    ),
    "G4.xid-hardware": Code("G4", "FAIL", XID_FIXES[-1][1]),
    "G4.xid-application": Code("G4", "WARN", XID_APP_FIX),
    "G4.xid-other": Code("G4", "WARN", XID_OTHER_FIX),
    "G6.new-process": Code(
        "G6",
        "WARN",
        "another process shares the GPU and its memory: stop it, or cap both "
        "(vLLM --gpu-memory-utilization, PYTORCH_CUDA_ALLOC_CONF)",
    ),
    "G6.over-cap": Code(
        "G6",
        "WARN",
        "the process uses more GPU memory than its flag caps it at: lower its "
        "batch/KV cache or raise the cap knowingly",
    ),
    "G6.job-stalled": Code(
        "G6",
        "WARN",
        "the job's GPU went idle while it runs: a hung collective or dataloader "
        "(py-spy dump --pid PID; NCCL_DEBUG=INFO)",
    ),
    "G3.memavailable-low": Code(
        "G3",
        "WARN",
        "free memory is running out: stop other jobs or lower the workload before the OOM killer picks one",
    ),
    "G3.fragmented": Code(
        "G3",
        "WARN",
        "too few free 32 MiB blocks for large allocations: "
        "sudo sh -c 'sync; echo 3 > /proc/sys/vm/drop_caches; echo 1 > /proc/sys/vm/compact_memory'",
    ),
    "G3.oom-kill": Code(
        "G3",
        "WARN",
        "the kernel killed a process for memory: lower the workload or stop "
        "other jobs; --workload-gb makes the watcher warn before it",
    ),
}


@define
class Event:
    """A condition's start or end, or an instant, as one stderr line and one timeline record."""

    t: float
    code: str
    state: str  # "start" | "clear" | "once"
    status: str
    text: str
    fix: str
    key: str
    wall: float = field(default_factory=time.time)
    since: float | None = None  # a clear: when its condition started

    @property
    def check(self) -> str:
        return self.code.split(".", 1)[0]

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "event",
            "t": round(self.t, 3),
            "wall": round(self.wall, 3),
            "code": self.code,
            "check": self.check,
            "state": self.state,
            "status": self.status,
            "text": self.text,
            "fix": self.fix,
            "key": self.key,
            "since": self.since,
        }


def elapsed(seconds: float) -> str:
    """``+01:02:03``."""
    s = max(0, int(seconds))
    return f"+{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}"


def duration(seconds: float) -> str:
    """``6 h 12 m``, ``3 m 5 s``, ``0.4 s``."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    s = int(seconds)
    if s >= 3600:
        return f"{s // 3600} h {s // 60 % 60} m"
    return f"{s // 60} m {s % 60} s" if s >= 60 else f"{s} s"


def line(e: Event) -> str:
    """The stderr line: ``+00:12:04 G4 WARN [G4.clock-event] … — fix: …``."""
    fix = f" — fix: {e.fix}" if e.fix and e.state != "clear" else ""
    what = {"start": "", "clear": "cleared: ", "once": ""}[e.state]
    status = "OK" if e.state == "clear" else e.status
    return f"{elapsed(e.t)} {e.check} {status} [{e.code}] {what}{e.text}{fix}"
