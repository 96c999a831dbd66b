"""G2 — flash-attn, and Unsloth's override of ``attn_implementation``.

Two traps. A flash-attn wheel built for another torch or CUDA fails at import
(``undefined symbol``) or at its first kernel (no sm_121 kernels: "kernel
built for sm80-sm100, but running on sm121"). And when it does work, Unsloth
sets ``HAS_FLASH_ATTENTION = True`` at import and its loader drops the
caller's ``attn_implementation`` (``llama.py``: ``kwargs.pop("attn_implementation",
None)``), so ``attn_implementation="sdpa"`` silently becomes
``flash_attention_2`` (EVIDENCE.md, Unsloth ``015bdef``).

The torch child imports flash-attn, runs a tiny ``flash_attn_func`` and
evaluates Unsloth's own predicate (capability major >= 8 and
``flash_attn.flash_attn_interface.flash_attn_gpu`` importable). Unsloth itself
is looked up in metadata only: importing it patches transformers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pytest_spark.checks.kit import CheckContext
from pytest_spark.model import Reading, Result, Status

#: torch-child steps that belong to G2
STEPS = ("import flash_attn", "flash_attn interface", "flash_attn kernel")

HELPER = "pytest_spark.unsloth.force_sdpa"
SNIPPET = (
    "import unsloth.models._utils as U; saved = U.HAS_FLASH_ATTENTION; U.HAS_FLASH_ATTENTION = False; "
    "try: model, tok = FastLanguageModel.from_pretrained(...) finally: U.HAS_FLASH_ATTENTION = saved"
)


@dataclass
class Facts:
    flash_attn_dist: dict[str, Any] | None = None  # {"name", "version"} from metadata
    unsloth_dist: dict[str, Any] | None = None
    fa: dict[str, Any] = field(default_factory=dict)  # the child's flash_attn facts
    torch_ok: bool = False  # torch imported in the child
    torch_error: str | None = None
    capability: list[int] | None = None
    device_name: str | None = None
    child: dict[str, Any] = field(default_factory=dict)  # signal, timed_out, step, describe


def torch_request(ctx: CheckContext) -> dict[str, Any]:
    return {"flash_attn": {"kernel": True}}


def gather(ctx: CheckContext) -> Facts:
    dists = ctx.machine.packages().get("dists") or {}
    child = ctx.torch()
    d = child.data

    def dist(key: str) -> dict[str, Any] | None:
        v = dists.get(key)
        return {"name": v.get("name"), "version": v.get("version")} if v else None

    return Facts(
        flash_attn_dist=dist("flash-attn"),
        unsloth_dist=dist("unsloth"),
        fa=dict(d.get("flash_attn") or {}),
        torch_ok=bool(d.get("torch_version")),
        torch_error=d.get("torch_import_error"),
        capability=d.get("capability"),
        device_name=d.get("device_name"),
        child={
            "signal": child.signal,
            "timed_out": child.timed_out,
            "step": child.step,
            "finished": child.finished,
            "describe": child.describe("torch child"),
        },
    )


def _cap(capability: list[int] | None) -> str:
    return f"({capability[0]}, {capability[1]})" if capability and len(capability) >= 2 else "?"


def evaluate(f: Facts) -> Result:
    """Decide G2 (pure)."""
    fa, c = f.fa or {}, f.child or {}
    installed = bool(f.flash_attn_dist) or bool(fa.get("found"))
    version = fa.get("version") or (f.flash_attn_dist or {}).get("version") or "?"
    unsloth = f"Unsloth {f.unsloth_dist['version']}" if f.unsloth_dist else None
    readings = [
        Reading("flash_attn_version", version if installed else None),
        Reading("unsloth_version", (f.unsloth_dist or {}).get("version")),
    ]
    details: list[str] = []
    fix_broken = (
        "pip uninstall flash-attn (transformers then uses PyTorch SDPA, as fast on Blackwell), or use a "
        "container that ships a matching build (NGC nvcr.io/nvidia/pytorch:25.09-py3 has flash-attn 2.7.4)"
    )

    died = c.get("step") in STEPS and (c.get("signal") or c.get("timed_out") or not c.get("finished"))
    if died:
        return Result(
            "G2",
            Status.FAIL,
            f"flash-attn {version}: {c.get('describe')}",
            fix_broken,
            readings,
            details=details,
        )

    if not installed:
        tail = f"; {unsloth} is installed and will also use SDPA" if unsloth else ""
        return Result(
            "G2",
            Status.PASS,
            f"flash-attn is not installed: attention runs on PyTorch SDPA{tail}",
            readings=readings,
        )

    if not fa:
        why = f.torch_error or c.get("describe") or "the torch child did not reach the flash-attn step"
        return Result(
            "G2",
            Status.SKIP,
            f"flash-attn {version} is installed but could not be checked: {why} (see G1)",
            readings=readings,
        )

    if fa.get("found") is False:
        return Result(
            "G2",
            Status.FAIL,
            f"flash-attn {version} is installed (metadata) but no flash_attn package is on the import path",
            "pip uninstall flash-attn, then reinstall it if you need it",
            readings,
            details=details,
        )
    if not fa.get("importable"):
        return Result(
            "G2",
            Status.FAIL,
            f"flash-attn {version} is installed but does not import: {fa.get('error')}",
            fix_broken,
            readings,
            details=details,
        )

    kernel = fa.get("kernel") or {}
    on = f"{f.device_name or 'the GPU'} {_cap(f.capability)}"
    readings.append(
        Reading("flash_attn_kernel", {True: "ok", False: "failed"}.get(kernel.get("ok"), "not run"))
    )
    if kernel.get("ok") is False:
        if kernel.get("error"):
            what = f"its kernel fails on {on}: {kernel['error']}"
        else:
            what = (
                f"its kernel returned shape {kernel.get('shape')} (expected {kernel.get('expected')})"
                + ("" if kernel.get("finite", True) else " with non-finite values")
                + f" on {on}"
            )
        return Result(
            "G2",
            Status.FAIL,
            f"flash-attn {version} imports but {what}",
            fix_broken,
            readings,
            details=details,
        )

    has_fa = fa.get("unsloth_has_flash_attention")
    readings.append(Reading("unsloth_has_flash_attention", has_fa))
    if fa.get("interface_error"):
        details.append(
            f"flash_attn.flash_attn_interface has neither flash_attn_gpu nor flash_attn_cuda "
            f"({fa['interface_error']}): Unsloth would call this install broken and use SDPA"
        )
    works = (
        f"flash-attn {version} imports and its kernel ran on {on} (output shape ok)"
        if kernel.get("ok")
        else f"flash-attn {version} imports (kernel not run: {kernel.get('skipped') or 'no CUDA device'})"
    )
    if unsloth and has_fa:
        details.append(f"scoped monkeypatch: {SNIPPET}")
        return Result(
            "G2",
            Status.WARN,
            f"{works}, and {unsloth} is installed: its HAS_FLASH_ATTENTION is True, so "
            'from_pretrained(attn_implementation="sdpa") is ignored and flash_attention_2 is used',
            f"load inside `with {HELPER}():` (sets unsloth.models._utils.HAS_FLASH_ATTENTION = False "
            "for the load, restores it after), or pip uninstall flash-attn",
            readings,
            details=details,
        )
    if unsloth:
        why = "no CUDA device" if has_fa is None else "its predicate is False here"
        works += f"; {unsloth} will not switch to it ({why})"
    else:
        works += "; Unsloth is not installed, so attn_implementation is honoured"
    return Result("G2", Status.PASS, works, readings=readings, details=details)


def run(ctx: CheckContext) -> Result:
    return evaluate(gather(ctx))
