"""G6's facts: the other GPU work's raw material — NVML's (or nvidia-smi's) GPU process list and the
process table, each command line *reduced* (``gpu_programs.reduce_cmdline``) — as records a capture's
JSON rebuilds field by field."""

from __future__ import annotations

from dataclasses import field

from pytest_dgx_spark.checks.kit import FactsBase
from pytest_dgx_spark.checks.record import Record
from pytest_dgx_spark.datadef import define
from pytest_dgx_spark.probes.gpu_programs import GpuEntry


@define
class Proc(Record):
    """One process of the table, its command line reduced (``reduce_cmdline``)."""

    pid: int = 0
    ppid: int | None = None
    name: str = ""
    cmd: list[str] = field(default_factory=list)
    rss_bytes: int | None = None
    self: bool = False  # this pytest or its ancestor
    probe: bool = False  # one of our probe children
    owner: str = ""  # "uid N" when another user's: said, still counted (the pool is shared)


@define
class Facts(FactsBase):
    """``processes`` hold each *reduced* command line (see ``reduce_cmdline``), never the full
    one; ``entries`` are the GPU process list (pid, used bytes, type, GPU)."""

    processes: list[Proc] = field(default_factory=list)
    entries: list[GpuEntry] = field(default_factory=list)
    gpu_totals: dict[str, int] = field(default_factory=dict)  # NVML memory total per GPU index
    mem_total_bytes: int | None = None  # /proc/meminfo MemTotal (the pool on GB10)
    nvml: str = "ok"  # "ok" or why not
    gpu_source: str = "NVML"  # where the GPU process list came from: NVML | nvidia-smi | none
    #: no usable NVIDIA GPU: NVML reports none, or no driver library and no working nvidia-smi
    no_gpu: bool = False
    process_error: str | None = None
    scanned: int = 0
    unreadable: int = 0
    unreadable_examples: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
