"""G3 — UMA headroom: will the workload fit in the one memory pool?

The check's façade: its facts (:mod:`.facts`), what it reads (:func:`gather`) and its verdict
(:func:`evaluate`): the headroom (:mod:`.headroom`), then what ends a job before the pool is empty
(issue 22: :mod:`.pressure`).
"""

from __future__ import annotations

from pytest_dgx_spark.checks.g03_uma_headroom import pressure as pressure
from pytest_dgx_spark.checks.g03_uma_headroom.facts import (
    Drop,
    Facts,
    GpuMemory,
    MemRead,
    NvmlAnswer,
    RayMonitor,
)
from pytest_dgx_spark.checks.g03_uma_headroom.headroom import decide
from pytest_dgx_spark.checks.kit import CheckContext, Findings, Params
from pytest_dgx_spark.model import Result, Status
from pytest_dgx_spark.probes import kernel_log
from pytest_dgx_spark.probes import memory_pressure as probe
from pytest_dgx_spark.probes.memory_pressure import OomKill

#: what tests and replays name through the façade
__all__ = ["FACTS", "Drop", "Facts", "GpuMemory", "RayMonitor", "decide", "evaluate", "gather"]

FACTS = Facts


def gather(ctx: CheckContext) -> Facts:
    machine = ctx.machine
    drop = Drop.from_dict(machine.drop_caches()) if ctx.settings.drop_caches else None
    mem = drop.after if drop and drop.done and drop.after else MemRead.from_dict(machine.meminfo())
    nv = NvmlAnswer.read(machine.nvml())
    return Facts(
        meminfo=mem.fields, meminfo_error=mem.error, drop=drop, gpus=nv.gpus(),
        nvml_reason=None if nv.ok else nv.reason, buddyinfo=probe.buddyinfo(machine),
        page_size=probe.page_size(machine), vmstat=probe.vmstat(machine), cgroup=probe.cgroup_limit(machine),
        ray=_ray(ctx), dev_shm=probe.dev_shm(machine), oom_kills=_oom_kills(ctx),
    )


def _ray(ctx: CheckContext) -> RayMonitor:
    dists = ctx.machine.packages().get("dists") or {}
    env = ctx.machine.env
    return RayMonitor(str(dists["ray"]["version"]) if "ray" in dists else None,
                      env.get("RAY_memory_usage_threshold"), env.get("RAY_memory_monitor_refresh_ms"))


def _oom_kills(ctx: CheckContext) -> list[OomKill] | None:
    """The kernel's OOM kills since boot, oldest first, from the kernel log G4 reads too; None
    when no kernel log was readable: "not read", never "none"."""
    log = ctx.machine.kernel_log()
    if not log.get("source"):
        return None
    return probe.parse_oom_kills(r.text for r in kernel_log.records(log))


def evaluate(facts: Facts, params: Params) -> Result:
    """The headroom verdict (:mod:`.headroom`), then what ends a job before the pool is empty
    (:mod:`.pressure`), merged into one result."""
    workload = params.option("workload_gb")
    head = decide(facts, workload, params.threshold("g3_margin_gb"))
    total = facts.meminfo["MemTotal"] if head.status is not Status.SKIP else None  # not SKIP: it is there
    out = Findings("G3")
    pressure.fragmentation(facts, params, out)
    pressure.cgroup(facts, workload, total, params, out)
    pressure.ray(facts, total, params, out)
    pressure.shm(facts, total, out)
    pressure.oom_kills(facts, out)
    return pressure.merge(head, out)
