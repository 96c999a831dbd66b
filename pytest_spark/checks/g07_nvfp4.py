"""G7 — NVFP4 vs FP8 on SM121 (seed level; deepened by the CUDA-stack issue)."""

from __future__ import annotations

from pytest_spark.engine import CheckContext
from pytest_spark.model import Reading, Result, Status


def run(ctx: CheckContext) -> Result:
    nv = ctx.machine.nvml()
    devs = nv.get("devices") or []
    if not devs:
        return ctx.result(Status.SKIP, f"no NVIDIA GPU: {nv.get('reason')}")
    cap = tuple(devs[0].get("capability") or ())
    if cap != (12, 1):
        return ctx.result(
            Status.SKIP,
            f"not SM121: capability {cap}",
            readings=[Reading("capability", ".".join(map(str, cap)))],
        )
    arch = ctx.torch().data.get("arch_list") or []
    if "sm_121a" in arch:
        return ctx.result(Status.PASS, "SM121 and the build targets sm_121a")
    return ctx.result(Status.WARN, f"SM121 without sm_121a in {arch}", "stay on FP8")
