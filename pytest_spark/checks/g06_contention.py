"""G6 — UMA contention (seed level; deepened by the machine-checks issue)."""

from __future__ import annotations

from pytest_spark.engine import CheckContext
from pytest_spark.model import Reading, Result, Status


def run(ctx: CheckContext) -> Result:
    nv = ctx.machine.nvml()
    if not nv.get("ok"):
        return ctx.result(Status.SKIP, f"no NVIDIA GPU: {nv.get('reason')}")
    procs = [p for d in nv.get("devices") or [] for p in (d.get("compute_procs") or [])]
    if not procs:
        return ctx.result(Status.PASS, "no other GPU process", readings=[Reading("gpu_processes", 0)])
    return ctx.result(
        Status.WARN,
        f"{len(procs)} other GPU processes",
        "stop unrelated servers",
        [Reading("gpu_processes", len(procs))],
    )
