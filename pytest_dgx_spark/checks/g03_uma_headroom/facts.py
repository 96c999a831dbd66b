"""G3's facts: what :func:`.check.gather` read, as typed records (:mod:`pytest_dgx_spark.checks.record`).

``/proc/meminfo`` stays a table (its fields vary by kernel; :func:`kb` is the one read of a field
that may be absent); NVML's per-GPU memory, ``--spark-drop-caches``' outcome and Ray's memory
monitor are records; the memory-pressure readings are :mod:`pytest_dgx_spark.probes.memory_pressure`'s.
Every field of a nested record has a default meaning "not read", so a capture that lacks a key
replays as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Any, ClassVar

from pytest_dgx_spark.checks.kit import FactsBase
from pytest_dgx_spark.checks.record import Record
from pytest_dgx_spark.datadef import define
from pytest_dgx_spark.probes.memory_pressure import Buddy, CgroupLimit, OomKill, PageSize, ShmMount, Vmstat

KIB_PER_GIB = 1024 * 1024


def kb(meminfo: Mapping[str, int], name: str, default: int = 0) -> int:
    """A ``/proc/meminfo`` field (kB); ``default`` when this kernel does not write it."""
    return meminfo.get(name, default)


def gib(kib: float | None) -> float | None:
    return None if kib is None else round(kib / KIB_PER_GIB, 1)


@define
class GpuBytes(Record):
    """NVML's memory query of one GPU, bytes."""

    free: int | None = None
    total: int | None = None
    used: int | None = None


@define
class GpuMemory(Record):
    index: int = 0
    name: str | None = None
    memory: GpuBytes | None = None  # None on unified memory (NVML answers NotSupported)
    error: str | None = None  # the NVML error name of the memory query


@define
class NvmlError(Record):
    name: str | None = None
    message: str | None = None


@define
class NvmlDevice(Record):
    """What G3 reads of one device of the NVML snapshot (:meth:`Machine.nvml`)."""

    index: int | None = None
    name: str | None = None
    memory: GpuBytes | None = None
    errors: dict[str, NvmlError] = field(default_factory=dict)


@define
class NvmlAnswer(Record):
    """What G3 reads of the NVML snapshot: whether it answered, why not, its devices."""

    ok: bool = False
    reason: str | None = None
    devices: list[NvmlDevice] = field(default_factory=list)

    @classmethod
    def read(cls, snapshot: Mapping[str, Any]) -> NvmlAnswer:
        """The snapshot as this record; one of another shape says so as its reason."""
        return cls.from_dict_or_saying(snapshot, "reason", "the NVML answer is not what G3 reads")

    def gpus(self) -> list[GpuMemory]:
        return [GpuMemory(d.index or 0, d.name, d.memory, d.errors["memory"].name if "memory" in d.errors else None)
                for d in self.devices]


@define
class MemRead(Record):
    """One ``/proc/meminfo`` read (``fields`` kB, empty when ``error``)."""

    fields: dict[str, int] = field(default_factory=dict)
    error: str | None = None


@define
class Drop(Record):
    """``--spark-drop-caches``: done, or refused/error; the meminfo reads before and after."""

    done: bool = False
    refused: str | None = None
    error: str | None = None
    sync: str | None = None
    before: MemRead | None = None
    after: MemRead | None = None


@define
class RayMonitor(Record):
    """Ray's memory monitor as the checked environment sets it (raw values: evaluate parses)."""

    version: str | None = None  # the installed ray distribution, None when not installed
    threshold: str | None = None  # RAY_memory_usage_threshold (Ray's default 0.95)
    refresh_ms: str | None = None  # RAY_memory_monitor_refresh_ms (0 disables the monitor)


@define
class Facts(FactsBase):
    meminfo: dict[str, int]
    meminfo_error: str | None = None
    gpus: list[GpuMemory] = field(default_factory=list)
    nvml_reason: str | None = None
    drop: Drop | None = None
    # issue 22 (N4, N6): None = not read (a capture made before them)
    buddyinfo: Buddy | None = None
    page_size: PageSize | None = None
    vmstat: Vmstat | None = None
    cgroup: CgroupLimit | None = None
    ray: RayMonitor | None = None
    dev_shm: ShmMount | None = None
    oom_kills: list[OomKill] | None = None

    ADDED: ClassVar[Mapping[str, str]] = dict.fromkeys(
        ("buddyinfo", "page_size", "vmstat", "cgroup", "ray", "dev_shm", "oom_kills"),
        "issue 22: what ends a job before the pool is empty (N4, N6)",
    )
