"""G6's probing: NVML's per-process GPU memory (``nvidia-smi --query-compute-apps`` when NVML is
unusable) and the process table, reduced: no argument a check does not read is kept."""

from __future__ import annotations

from dataclasses import field
from typing import Any

from pytest_dgx_spark.checks.g06_contention.facts import Facts, Proc
from pytest_dgx_spark.checks.kit import CheckContext
from pytest_dgx_spark.checks.record import Record
from pytest_dgx_spark.datadef import define
from pytest_dgx_spark.probes import nvml
from pytest_dgx_spark.probes.gpu_programs import GpuEntry, compute_apps, is_probe_child, reduce_cmdline
from pytest_dgx_spark.probes.nvml import NvmlDevice
from pytest_dgx_spark.redact import scrub


@define
class TableRow(Record):
    """One process as the process-table child lists it (``procs_child.py``; ``self``/``mine`` marked)."""

    pid: int | None = None
    ppid: int | None = None
    name: str | None = None
    cmdline: list[str] = field(default_factory=list)
    uid: int | None = None
    rss_bytes: int | None = None
    self: bool = False
    mine: bool = True


@define
class Table(Record):
    """``Machine.processes()``: the rows, why the scan stopped or failed, what it could not read."""

    error: str | None = None
    processes: list[TableRow] = field(default_factory=list)
    unreadable: int = 0
    unreadable_examples: list[str] = field(default_factory=list)


def _table(raw: Any) -> Table:
    return Table.from_dict_or_saying(raw, "error", "process table unreadable")  # said as the table's error


def nvml_entries(ctx: CheckContext, facts: Facts) -> None:
    """(pid, used, type, gpu) from NVML, or from nvidia-smi when NVML is unusable."""
    nv = nvml.view(ctx.machine.nvml())
    if nv.ok:
        facts.no_gpu = nv.no_gpu
        if facts.no_gpu:
            facts.nvml = str(nv.reason or "NVML reports no GPU")
        for dev in nv.devices:
            device_entries(dev, facts)
        return
    facts.nvml, facts.gpu_source = str(nv.reason or "unavailable"), "none"
    if nv.hung:
        facts.notes.append(f"NVML did not answer ({facts.nvml}); see G4. Process table only")
        return
    res, entries = compute_apps(ctx.machine.command)
    if not res.ok:
        facts.notes.append(f"{facts.nvml}; nvidia-smi --query-compute-apps: {res.describe()}")
        # nvidia-smi exits 9 when it "couldn't communicate with the NVIDIA driver" and 12 when
        # NVML is missing: no usable GPU, as G4 reads it too
        facts.no_gpu = nv.missing and (res.error is not None or res.returncode in (9, 12))
        return
    facts.notes.append(f"{facts.nvml}; used nvidia-smi --query-compute-apps instead")
    facts.gpu_source = "nvidia-smi"
    facts.entries.extend(entries)


def device_entries(dev: NvmlDevice, facts: Facts) -> None:
    idx = str(dev.index)
    if dev.memory is not None and dev.memory.total:
        facts.gpu_totals[idx] = dev.memory.total
    for kind in ("compute", "graphics"):
        procs = dev.procs(kind)
        if procs is None and (error := dev.errors.get(f"{kind}_procs")) is not None:
            facts.notes.append(f"NVML {kind} processes of GPU {idx}: {error.name}")
        for p in procs or []:
            facts.entries.append(GpuEntry(pid=p.pid, used=p.used_bytes, type=kind, gpu=idx))


def process_table(ctx: CheckContext, facts: Facts) -> None:
    """The process table, reduced: no argument a check does not read is kept."""
    try:
        table = _table(ctx.machine.processes())
    except Exception as exc:  # the process table is best effort; NVML may still answer
        table = Table(error=f"cannot list processes: {type(exc).__name__}: {exc}")
    facts.process_error = table.error
    for p in table.processes:
        if p.pid is None:
            continue
        facts.processes.append(Proc(
            pid=p.pid, ppid=p.ppid, name=scrub(p.name or ""),  # comm: 15 chars
            cmd=reduce_cmdline(p.cmdline), rss_bytes=p.rss_bytes, self=p.self,
            probe=is_probe_child(p.cmdline), owner="" if p.mine else f"uid {p.uid}",
        ))
    facts.scanned = len(facts.processes)
    facts.unreadable = table.unreadable
    facts.unreadable_examples = table.unreadable_examples


def gather(ctx: CheckContext) -> Facts:
    """Everything G6 decides on (G5 asks it too, before its copy probe)."""
    total_kib = ctx.machine.meminfo()["fields"].get("MemTotal")
    facts = Facts(mem_total_bytes=int(total_kib) * 1024 if total_kib else None)
    nvml_entries(ctx, facts)
    process_table(ctx, facts)
    return facts
