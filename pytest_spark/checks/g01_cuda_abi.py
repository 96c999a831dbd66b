"""G1 — CUDA 12/13 ABI (seed level; deepened by the CUDA-stack issue)."""

from __future__ import annotations

from pytest_spark.engine import CheckContext
from pytest_spark.model import Reading, Result, Status


def run(ctx: CheckContext) -> Result:
    child = ctx.torch()
    d = child.data
    if d.get("torch_import_error"):
        return ctx.result(Status.SKIP, f"torch not importable: {d['torch_import_error']}")
    if not child.ok and "torch_version" not in d:
        return ctx.result(
            Status.FAIL, child.describe("torch child"), "reinstall torch from download.pytorch.org/whl/cu130"
        )
    cuda = d.get("torch_cuda")
    readings = [Reading("torch_version", d.get("torch_version")), Reading("torch_cuda", cuda)]
    if not cuda:
        return ctx.result(
            Status.SKIP, f"torch {d.get('torch_version')} is a CPU-only build", readings=readings
        )
    if str(cuda).startswith("13"):
        return ctx.result(Status.PASS, f"torch built against CUDA {cuda}", readings=readings)
    return ctx.result(
        Status.FAIL,
        f"torch built against CUDA {cuda} (need 13.x)",
        "reinstall from download.pytorch.org/whl/cu130",
        readings,
    )
