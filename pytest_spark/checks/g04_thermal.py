"""G4 — thermals and power (seed level; deepened by the machine-checks issue)."""

from __future__ import annotations

from pytest_spark.engine import CheckContext
from pytest_spark.model import Reading, Result, Status


def run(ctx: CheckContext) -> Result:
    nv = ctx.machine.nvml()
    if nv.get("hung"):
        return ctx.result(
            Status.FAIL, f"driver not answering: {nv['reason']}", "check dmesg for Xid/NVRM errors; reboot"
        )
    if not nv.get("ok") or not nv.get("devices"):
        return ctx.result(Status.SKIP, f"no NVIDIA GPU: {nv.get('reason') or 'none found'}")
    dev = nv["devices"][0]
    temp, power = dev.get("temperature_c"), dev.get("power_usage_mw")
    watts = None if power is None else round(power / 1000, 1)
    return ctx.result(
        Status.INFO,
        f"{temp} C, {watts} W",
        readings=[Reading("temperature", temp, "C"), Reading("power", watts, "W")],
    )
