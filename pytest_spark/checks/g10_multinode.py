"""G10 — two Sparks (seed level; deepened by the machine-checks issue)."""

from __future__ import annotations

from pytest_spark.engine import CheckContext
from pytest_spark.model import Reading, Result, Status


def run(ctx: CheckContext) -> Result:
    ws = ctx.machine.env.get("WORLD_SIZE")
    if not ws:
        return ctx.result(Status.SKIP, "no launcher environment and no config to go on")
    return ctx.result(Status.INFO, f"WORLD_SIZE={ws}", readings=[Reading("world_size", ws)])
