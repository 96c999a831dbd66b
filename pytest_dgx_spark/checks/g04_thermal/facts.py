"""G4's facts: what ``gather`` read (a sample series, the clock-event counters around it, the Xid lines of
the kernel log), as records that a capture's JSON rebuilds field by field (:mod:`..record`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Any, ClassVar

from pytest_dgx_spark import thermal
from pytest_dgx_spark.checks.kit import FactsBase
from pytest_dgx_spark.checks.record import Record
from pytest_dgx_spark.datadef import define
from pytest_dgx_spark.thermal import CounterSet, NvmlError, Sample

#: how ``Facts.missing`` starts when a resource limit, not the GPU, stopped the probe
LIMITED = "resource limit: "
XID_KEEP = 200  # the Xid lines a capture keeps (latest first); the counts cover them all


def sample_interval(seconds: float, timeout: float) -> float:
    """At most ~300 samples, at least 10 a second for short runs, well inside the progress watchdog."""
    return round(min(max(0.1, seconds / 300.0), max(timeout / 2.0, 0.05)), 3)


@define
class Device(Record):
    """What does not change during a sample: the GPU's name, enforced power limit and rated SM clock
    (None: not read, ``errors`` says why)."""

    index: int = 0
    name: str | None = None
    power_limit_mw: int | float | None = None
    max_clock_sm_mhz: int | float | None = None
    errors: dict[str, NvmlError] = field(default_factory=dict)


@define
class XidLine(Record):
    """One ``NVRM: Xid`` line of the kernel log (``kernel_log.Xid.to_dict()``: ``t`` seconds since boot)."""

    code: int | None = None
    pci: str | None = None
    pid: int | None = None
    name: str | None = None
    message: str | None = None
    seq: int | None = None
    t: float | None = None

    def line(self) -> str:
        """``Xid 120 at 1234.5 s (PCI:000f:01:00), pid 9111 python: GSP task exception: load access fault``."""
        when = f" at {self.t:.1f} s" if self.t is not None else ""
        who = (f", pid {self.pid}" if self.pid is not None else "") + (f" {self.name}" if self.name else "")
        return f"Xid {self.code}{when} ({self.pci}){who}: {self.message or '(no message)'}"


@define
class Facts(FactsBase):
    source: str = "nvml"  # "nvml" | "nvidia-smi" | "none"
    seconds: float = 1.0  # requested sample length (0 = one snapshot)
    devices: list[Device] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)  # in time order
    duration_s: float | None = None
    hung: str | None = None  # the driver did not answer in time
    broken: str | None = None  # it answered, wrongly (crash, exit code, errors)
    missing: str | None = None  # no NVIDIA GPU / driver; or, starting with LIMITED, a limit of this box
    notes: list[str] = field(default_factory=list)
    counters_before: list[CounterSet] = field(default_factory=list)
    counters_after: list[CounterSet] = field(default_factory=list)
    counters_source: str | None = None  # "nvml" (field values), "nvidia-smi -q", or None
    temps_q: list[dict[str, int | None]] = field(default_factory=list)  # -q Temperature per GPU (and its index)
    kernel_log_source: str | None = None  # "/dev/kmsg", "journalctl", "dmesg"; None: not readable / not read
    kernel_log_records: int = 0
    kernel_log_problem: str | None = None  # why it was not read (how to allow it if a permission)
    kernel_log_cut: str | None = None  # which bound ended the read
    xids: list[XidLine] = field(default_factory=list)  # since boot, latest first (at most XID_KEEP)
    xid_counts: dict[str, int] = field(default_factory=dict)  # every Xid's count by code

    #: captures written before the kernel log was read replay as they did, saying so in -v
    NOT_CAPTURED: ClassVar[Mapping[str, Any]] = {
        "kernel_log_source": None, "kernel_log_records": 0,
        "kernel_log_problem": "not in this capture (written before G4 read the kernel log)",
        "kernel_log_cut": None, "xids": [], "xid_counts": {},
    }

    @property
    def limited(self) -> bool:
        """A resource limit of this box, not the GPU, stopped the probe."""
        return bool(self.missing and self.missing.startswith(LIMITED))


def answered(facts: Facts) -> bool:
    """Whether any GPU answered a reading in the series."""
    return any(s.samples for s in thermal.summarise(facts.samples).values())
