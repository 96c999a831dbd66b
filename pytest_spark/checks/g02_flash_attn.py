"""G2 — flash-attn and Unsloth (seed level; deepened by the CUDA-stack issue)."""

from __future__ import annotations

from pytest_spark.engine import CheckContext
from pytest_spark.model import Result, Status


def torch_request(ctx: CheckContext) -> dict:
    return {"flash_attn": {"kernel": True}}


def run(ctx: CheckContext) -> Result:
    dists = ctx.machine.packages().get("dists", {})
    fa = ctx.torch().data.get("flash_attn") or {}
    if "flash-attn" not in dists:
        return ctx.result(Status.PASS, "flash-attn not installed: SDPA will be used")
    if not fa.get("importable"):
        return ctx.result(
            Status.FAIL,
            f"flash-attn installed but not importable: {fa.get('error')}",
            "pip uninstall flash-attn and use SDPA",
        )
    if "unsloth" in dists:
        return ctx.result(
            Status.WARN,
            "Unsloth will prefer flash-attn over attn_implementation='sdpa'",
            "set unsloth.models._utils.HAS_FLASH_ATTENTION = False before from_pretrained",
        )
    return ctx.result(Status.PASS, f"flash-attn {fa.get('version')} importable")
