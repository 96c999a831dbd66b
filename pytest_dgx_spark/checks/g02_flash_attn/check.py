"""G2 — flash-attn, and Unsloth's override of ``attn_implementation``.

A flash-attn wheel for another torch or CUDA fails at import (``undefined symbol``) or at its
first kernel. A working one makes Unsloth drop the caller's ``attn_implementation``: ``"sdpa"``
silently becomes ``flash_attention_2`` (docs/EVIDENCE.md, Unsloth ``015bdef``). The torch child
imports flash-attn, runs a tiny kernel and evaluates Unsloth's predicate; Unsloth itself is read
from metadata only (importing it patches transformers).
"""

from __future__ import annotations

import os
import re
from dataclasses import field
from typing import Any

from pytest_dgx_spark.checks.kit import CheckContext, ChildFacts, FactsBase, Params, child_facts
from pytest_dgx_spark.checks.record import Record
from pytest_dgx_spark.datadef import define
from pytest_dgx_spark.model import Reading, Result, Status

#: torch-child steps that belong to G2
STEPS = ("import flash_attn", "flash_attn interface", "flash_attn kernel")
HELPER = "pytest_dgx_spark.unsloth.force_sdpa"
SNIPPET = (
    "import unsloth.models._utils as U; saved = U.HAS_FLASH_ATTENTION; U.HAS_FLASH_ATTENTION = False; "
    "try: model, tok = FastLanguageModel.from_pretrained(...) finally: U.HAS_FLASH_ATTENTION = saved"
)
FIX_BROKEN = (
    "pip uninstall flash-attn (transformers then uses PyTorch SDPA, as fast on Blackwell), or use a "
    "container that ships a matching build (NGC nvcr.io/nvidia/pytorch:25.09-py3 has flash-attn 2.7.4)"
)
SHORT_BROKEN = "pip uninstall flash-attn"


@define
class Dist(Record):
    """An installed distribution, from its metadata."""

    name: str = ""
    version: str = ""


@define
class Kernel(Record):
    """flash-attn's tiny kernel in the child: ``ok`` None when it was not run (``skipped`` says why)."""

    ok: bool | None = None
    error: str | None = None
    skipped: str | None = None
    shape: list[int] | None = None
    expected: list[int] | None = None
    finite: bool = True


@define
class FlashAttn(Record):
    """What the torch child found of flash-attn; all defaults (``{}``): the child did not get there."""

    found: bool | None = None
    importable: bool = False
    error: str | None = None
    version: str | None = None
    file: str | None = None
    interface: str | None = None
    interface_error: str | None = None
    unsloth_has_flash_attention: bool | None = None
    kernel: Kernel | None = None  # absent until the kernel step ends

    @property
    def recorded(self) -> bool:
        return self != FlashAttn()


@define
class ChildData(Record):
    """What G2 reads of the torch child's data (it reports more, for other checks)."""

    flash_attn: FlashAttn = field(default_factory=FlashAttn)
    torch_version: str | None = None
    torch_import_error: str | None = None
    capability: list[int] | None = None
    device_name: str | None = None


@define
class Facts(FactsBase):
    flash_attn_dist: Dist | None = None  # from metadata
    unsloth_dist: Dist | None = None
    fa: FlashAttn = field(default_factory=FlashAttn)
    torch_ok: bool = False  # torch imported in the child
    torch_error: str | None = None
    capability: list[int] | None = None
    device_name: str | None = None
    child: ChildFacts = field(default_factory=ChildFacts)

    @property
    def installed(self) -> bool:
        return bool(self.flash_attn_dist) or bool(self.fa.found)

    @property
    def version(self) -> str:
        """flash-attn's version as the child imported it, else its metadata's, else ``?``."""
        return self.fa.version or (self.flash_attn_dist.version if self.flash_attn_dist else "") or "?"

    @property
    def died_in_g2(self) -> bool:
        c = self.child
        return c.step in STEPS and bool(c.signal or c.timed_out or not c.finished)


FACTS = Facts


def torch_request(ctx: CheckContext) -> dict[str, Any]:
    """Import flash-attn and run its kernel in the torch child, when it is installed."""
    m = ctx.machine
    on_path = any(os.path.isdir(os.path.join(p, "flash_attn")) for p in m.python_path())
    wanted = "flash-attn" in (m.packages().get("dists") or {}) or on_path
    return {"flash_attn": {"kernel": True}} if wanted else {}


def gather(ctx: CheckContext) -> Facts:
    dists = ctx.machine.packages().get("dists") or {}
    child = ctx.torch()
    seen = ChildData.from_dict(child.data)

    def dist(key: str) -> Dist | None:
        return Dist(str(dists[key]["name"]), str(dists[key]["version"])) if dists.get(key) else None

    return Facts(
        flash_attn_dist=dist("flash-attn"),
        unsloth_dist=dist("unsloth"),
        fa=seen.flash_attn,
        torch_ok=bool(seen.torch_version),
        torch_error=seen.torch_import_error,
        capability=seen.capability,
        device_name=seen.device_name,
        child=child_facts(child),
    )


def _on(f: Facts) -> str:
    cap = f.capability
    return f"{f.device_name or 'the GPU'} " + (f"({cap[0]}, {cap[1]})" if cap and len(cap) >= 2 else "?")


def _fail(summary: str, headline: str, readings: list[Reading], fix: str = FIX_BROKEN, *, code: str) -> Result:
    short = SHORT_BROKEN if fix == FIX_BROKEN else "pip uninstall flash-attn, then reinstall it"
    return Result("G2", Status.FAIL, summary, fix, readings, headline=headline, short_fix=short, codes=[code])


def evaluate(facts: Facts, params: Params) -> Result:
    """Decide G2 (pure): the child's death, absence, a broken install, then Unsloth."""
    version = facts.version
    unsloth = facts.unsloth_dist.version if facts.unsloth_dist else None
    readings = [Reading("flash_attn_version", version if facts.installed else None)]
    readings.append(Reading("unsloth_version", unsloth))
    if facts.died_in_g2:
        return _died(facts.child, version, readings)
    if not facts.installed:
        tail = f"; Unsloth {unsloth} is installed and will also use SDPA" if unsloth else ""
        return Result("G2", Status.PASS, f"flash-attn is not installed: attention runs on PyTorch SDPA{tail}",
                      readings=readings, headline="flash-attn not installed: attention on PyTorch SDPA")
    if not facts.fa.recorded:
        return _unchecked(facts, version, readings)
    return _broken(facts, version, readings) or _working(facts, version, readings)


def _unchecked(f: Facts, version: str, readings: list[Reading]) -> Result:
    why = f.torch_error or f.child.describe or "the torch child did not reach the flash-attn step"
    summary = f"flash-attn {version} is installed but could not be checked: {why} (see G1)"
    return Result("G2", Status.SKIP, summary, readings=readings,
                  headline=f"flash-attn {version} not checked: torch did not load (see G1)",
                  codes=["G2.torch-not-loaded"])


def _died(c: ChildFacts, version: str, readings: list[Reading]) -> Result:
    how = c.signal or ("hung" if c.timed_out else "stopped")
    headline = f"flash-attn {version}: probe {how} in {c.step!r}"
    return _fail(f"flash-attn {version}: {c.describe}", headline, readings, code="G2.probe-died")


def _broken(f: Facts, version: str, readings: list[Reading]) -> Result | None:
    fa = f.fa
    if fa.found is False:
        return _fail(
            f"flash-attn {version} is installed (metadata) but no flash_attn package is on the import path",
            f"flash-attn {version} in metadata, no flash_attn package",
            readings,
            fix="pip uninstall flash-attn, then reinstall it if you need it", code="G2.no-package",
        )
    if not fa.importable:
        err = fa.error or ""
        return _fail(f"flash-attn {version} is installed but does not import: {err}",
                     f"flash-attn {version} does not import: {_short_error(err)}", readings,
                     code="G2.import-error")
    kernel = fa.kernel or Kernel()
    ran = "not run" if kernel.ok is None else "ok" if kernel.ok else "failed"
    readings.append(Reading("flash_attn_kernel", ran))
    if kernel.ok is not False:
        return None
    if kernel.error:
        what = f"its kernel fails on {_on(f)}: {kernel.error}"
    else:
        finite = "" if kernel.finite else " with non-finite values"
        shape = f"shape {kernel.shape} (expected {kernel.expected})"
        what = f"its kernel returned {shape}{finite} on {_on(f)}"
    headline = f"flash-attn {version} kernel fails on {_on(f)}"
    return _fail(f"flash-attn {version} imports but {what}", headline, readings, code="G2.kernel-failed")


def _short_error(err: str) -> str:
    """``…libcudart.so.12: cannot open shared object file…`` -> ``libcudart.so.12 not found``."""
    missing = re.search(r"([\w.+-]+\.so[\w.]*): cannot open shared object file", err)
    if missing:
        return f"{missing.group(1)} not found"
    return "undefined symbol" if "undefined symbol" in err else err.split(":", 1)[0] or "error"


def _working(f: Facts, version: str, readings: list[Reading]) -> Result:
    fa, details = f.fa, []
    kernel = fa.kernel or Kernel()
    unsloth = f"Unsloth {f.unsloth_dist.version}" if f.unsloth_dist else None
    has_fa = fa.unsloth_has_flash_attention
    readings.append(Reading("unsloth_has_flash_attention", has_fa))
    if fa.interface_error:
        details.append(
            f"flash_attn.flash_attn_interface has neither flash_attn_gpu nor flash_attn_cuda "
            f"({fa.interface_error}): Unsloth would call this install broken and use SDPA"
        )
    if kernel.ok:
        works = f"flash-attn {version} imports and its kernel ran on {_on(f)} (output shape ok)"
    else:
        works = f"flash-attn {version} imports (kernel not run: {kernel.skipped or 'no CUDA device'})"
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
            headline=f"{unsloth} ignores attn_implementation='sdpa': flash-attn {version} is used",
            short_fix=f"load inside `with {HELPER}():`",
            codes=["G2.unsloth-ignores-sdpa"],
        )
    if unsloth:
        why = "no CUDA device" if has_fa is None else "its predicate is False here"
        works += f"; {unsloth} will not switch to it ({why})"
    else:
        works += "; Unsloth is not installed, so attn_implementation is honoured"
    ran = "kernel ok" if kernel.ok else "kernel not run"
    return Result("G2", Status.PASS, works, readings=readings, details=details,
                  headline=f"flash-attn {version} imports, {ran}")
