"""G5 — bandwidth budget (seed level; deepened by the machine-checks issue)."""

from __future__ import annotations

from pytest_spark.engine import CheckContext
from pytest_spark.model import Reading, Result, Status


def run(ctx: CheckContext) -> Result:
    plan = ctx.settings.planned_bandwidth
    t = ctx.thresholds
    low, high = t["g5_budget_low_gbps"], t["g5_budget_high_gbps"]
    if plan is None:
        return ctx.result(
            Status.SKIP, "no planned bandwidth declared (--spark-planned-bandwidth) and not intrusive"
        )
    readings = [Reading("planned", plan, "GB/s"), Reading("budget_high", high, "GB/s")]
    if plan <= high:
        return ctx.result(
            Status.PASS, f"planned {plan:g} GB/s within the {low:g}-{high:g} GB/s budget", readings=readings
        )
    return ctx.result(
        Status.WARN,
        f"planned {plan:g} GB/s exceeds the {low:g}-{high:g} GB/s budget",
        "budget from the measured range, not the 273 GB/s spec",
        readings,
    )
