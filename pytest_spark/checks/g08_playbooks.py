"""G8 — stale playbooks (seed level; deepened by the machine-checks issue)."""

from __future__ import annotations

from pytest_spark.engine import CheckContext
from pytest_spark.model import Result, Status


def run(ctx: CheckContext) -> Result:
    if ctx.settings.offline:
        return ctx.result(Status.SKIP, "offline (--spark-offline)")
    return ctx.result(Status.SKIP, "GitHub lookup not built yet")
