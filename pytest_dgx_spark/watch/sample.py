"""One tick's readings, typed: built and checked in one place (:meth:`WatchSample.from_dict`), written
back as the timeline's ``sample`` record (:meth:`WatchSample.to_record`) key for key as before.

What comes in is other programs' JSON (the NVML child's sample, the host reader's answer): a value of
the wrong type is dropped here, so a rule reads an attribute and never guards a ``.get``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Any, cast

from pytest_dgx_spark import thermal
from pytest_dgx_spark.datadef import define

#: the host reader's keys, in the timeline's order; absent from a record when the host did not answer
HOST_KEYS = ("mem_available_kb", "mem_total_kb", "xids", "ooms", "free_blocks")


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _pids(value: Any) -> list[int]:
    return [p for v in value if (p := _int(v)) is not None] if isinstance(value, list) else []


@define
class HostReadings:
    """The host's files for one tick: MemAvailable, the free large blocks, the kernel log's new lines."""

    mem_available_kb: int | None = None
    mem_total_kb: int | None = None
    xids: list[dict[str, Any]] = field(default_factory=list)  # new since the last tick (Xid.to_dict())
    ooms: list[dict[str, Any]] = field(default_factory=list)  # new OOM kills: pid, name, anon_rss_kb
    free_blocks: int | None = None  # free g3_contig_block_mib blocks in zone Normal

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HostReadings:
        return cls(_int(data.get("mem_available_kb")), _int(data.get("mem_total_kb")),
                   _dicts(data.get("xids")), _dicts(data.get("ooms")),
                   _int(data.get("free_blocks")))  # fmt: skip


@define
class WatchSample:
    """One tick's readings (also the timeline's ``sample`` record)."""

    t: float = 0.0  # seconds since the watch began
    gpu: str = "ok"  # "ok", or why there is no reading ("no answer for 12 s", "NVML unavailable: …")
    gpus: list[thermal.RawGpuReading] | None = None  # None: NVML gave no new sample (``gpu`` says why)
    procs: list[dict[str, Any]] | None = None  # GPU processes: pid, gpu, type, used_bytes, cmd
    job_running: bool = True
    problems: list[str] = field(default_factory=list)
    job_pids: list[int] = field(default_factory=list)  # the job and its descendants
    #: GPU processes with no /proc entry here (another PID namespace: a container); None: no process read
    unseen_pids: list[int] | None = None
    host: HostReadings | None = None  # None: the host files did not answer this tick

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WatchSample:
        """The one place a sample is built: ``data`` holds the keys of a timeline record (any missing)."""
        t = thermal.number(data.get("t"))
        gpus, procs, unseen = data.get("gpus"), data.get("procs"), data.get("unseen_pids")
        return cls(
            t=float(t) if t is not None else 0.0,
            gpu=str(data.get("gpu") or "ok"),
            gpus=cast("list[thermal.RawGpuReading]", _dicts(gpus)) if gpus is not None else None,
            procs=_dicts(procs) if procs is not None else None,
            job_running=bool(data.get("job_running", True)),
            problems=[str(p) for p in data.get("problems") or []],
            job_pids=_pids(data.get("job_pids")),
            unseen_pids=_pids(unseen) if unseen is not None else None,
            host=HostReadings.from_dict(data) if any(k in data for k in HOST_KEYS) else None,
        )

    @property
    def mem_available_kb(self) -> int | None:
        return self.host.mem_available_kb if self.host else None

    @property
    def mem_total_kb(self) -> int | None:
        return self.host.mem_total_kb if self.host else None

    @property
    def free_blocks(self) -> int | None:
        return self.host.free_blocks if self.host else None

    @property
    def xids(self) -> list[dict[str, Any]]:
        return self.host.xids if self.host else []

    @property
    def ooms(self) -> list[dict[str, Any]]:
        return self.host.ooms if self.host else []

    def to_record(self) -> dict[str, Any]:
        """The timeline's keys, in its order: ``unseen_pids`` only when processes were read, the host's
        keys only when it answered."""
        record: dict[str, Any] = {"t": self.t, "gpu": self.gpu, "gpus": self.gpus, "procs": self.procs,
                                  "job_running": self.job_running, "problems": self.problems,
                                  "job_pids": self.job_pids}  # fmt: skip
        if self.unseen_pids is not None:
            record["unseen_pids"] = self.unseen_pids
        if self.host is not None:
            record.update({key: getattr(self.host, key) for key in HOST_KEYS})
        return record
