"""G7 — SM121: can the installed stack run on GB10, and where it uses NVFP4, FP8 or
Triton, does it know SM121?

Stock cu130 torch lists ``sm_80 … sm_120`` and no ``sm_121``: healthy, sm_120 cubins run on
12.1 (pytorch PR #178891). NVFP4 needs ``sm_121a``/``sm_120f`` kernels, judged only where the
stack uses it. Triton's ptxas before CUDA 12.9 rejects ``sm_121a`` (triton #8539): one trivial
kernel is compiled for capability 121 in a child (not launched) and decides. FP8 (issue 22,
G7+): under ``--spark-precision fp8`` the cuBLAS release and vLLM's cubins are judged.

This module is the check's façade: :func:`gather` (the probing in :mod:`.probe`), :func:`evaluate`
(its stages in :mod:`.stages` and :mod:`.triton`); the facts are :mod:`.facts`' records, the build
targets :mod:`.arch`'s.
"""

from __future__ import annotations

from typing import Any

from pytest_dgx_spark.checks.g07_nvfp4 import probe
from pytest_dgx_spark.checks.g07_nvfp4.arch import (
    SM121,
    Arch,
    fp4_target,
    parse_arch,
    parse_arch_list,
    parse_cuobjdump,
    runs_on_sm121,
    targets_121a,
)
from pytest_dgx_spark.checks.g07_nvfp4.arch import names as _names
from pytest_dgx_spark.checks.g07_nvfp4.facts import Facts
from pytest_dgx_spark.checks.g07_nvfp4.stages import (
    FP8_TRAIN_SHORT,
    env_stage,
    fp8_stage,
    nvfp4_stage,
    torch_stage,
    unknown_why,
    who,
)
from pytest_dgx_spark.checks.g07_nvfp4.triton import compile_stage, triton_stage
from pytest_dgx_spark.checks.kit import CheckContext, Findings, Params
from pytest_dgx_spark.model import Reading, Result, Status

#: what tests and tools name through the façade
__all__ = [
    "FACTS", "FP8_TRAIN_SHORT", "Arch", "Facts", "evaluate", "fp4_target", "gather", "parse_arch", "parse_arch_list",
    "parse_cuobjdump", "prefetch", "runs_on_sm121", "targets_121a",
]

FACTS = Facts


def prefetch(ctx: CheckContext) -> None:
    """Compile for 121 while the run imports torch (engine.prefetch), where NVML lists a GPU (as
    :func:`gather` does): G7 runs after the torch child and finds the answer in the store."""
    if any(d.capability for d in probe.Nvml.read(ctx.machine.nvml()).devices):
        probe.triton_compile(ctx)


def gather(ctx: CheckContext) -> Facts:
    machine = ctx.machine
    nv = probe.Nvml.read(machine.nvml())
    facts = Facts(devices=nv.devices, nvml_reason=None if nv.ok else nv.reason,
                  env_arch_list=machine.env.get("TORCH_CUDA_ARCH_LIST"))
    caps = [tuple(d.capability) for d in facts.devices if d.capability]
    # torch's view only when NVML answered nothing useful but a driver may be there (hung,
    # crashed); no driver library at all means no GPU for torch either.
    if SM121 in caps or (not caps and not nv.missing and not nv.no_gpu):
        probe.gather_torch(ctx, facts)
    sm121 = SM121 in caps or (not caps and tuple(facts.torch_capability or ()) == SM121)
    if not (sm121 or caps):
        return facts
    dists = probe.dists_of(machine)
    if sm121:
        _gather_stack(ctx, facts, dists)
    # on another GPU too: the compile targets 121, so it tells what this Triton does on a Spark
    facts.torch_dist = str(dists["torch"]["version"]) if "torch" in dists else None
    facts.native_jit = machine.env.get("TORCH_DISABLE_NATIVE_JIT")
    facts.triton_compile = probe.triton_compile(ctx)
    return facts


def _gather_stack(ctx: CheckContext, facts: Facts, dists: dict[str, Any]) -> None:
    """On SM121: the kernel libraries' targets, Triton's ptxas, and what FP8 depends on (versions)."""
    probe.gather_libraries(ctx, facts)
    facts.triton = probe.triton_ptxas(ctx)
    facts.cublas = probe.cublas(ctx.machine, dists)
    facts.vllm = str(dists["vllm"]["version"]) if "vllm" in dists else None


Cap = tuple[str, tuple[int, ...]]  # a GPU's name and capability


def _caps_text(caps: list[Cap]) -> str:
    return ", ".join(f"{c[0]}.{c[1]}" for _, c in caps)


def _gpu(f: Facts) -> tuple[Result | None, list[Cap]]:
    """The GPUs (from NVML, else torch), or the SKIP when none is SM121."""
    caps = [(d.name or "GPU", tuple(d.capability)) for d in f.devices if d.capability]
    source = "NVML"
    if not caps and f.torch_capability:
        caps, source = [(f.torch_device or "GPU", tuple(f.torch_capability))], "torch"
    if not caps:
        why = f.nvml_reason or "NVML lists no GPU"
        summary = f"no NVIDIA GPU found ({why}): NVFP4 on SM121 does not apply"
        headline = "no NVIDIA GPU found: the SM121 check does not apply"
        return Result("G7", Status.SKIP, summary, headline=headline, codes=["G7.no-gpu"]), []
    if any(c == SM121 for _, c in caps):
        return None, caps
    found = "; ".join(f"{n} has capability ({c[0]}, {c[1]})" for n, c in dict.fromkeys(caps))
    summary = f"not SM121: {found} (from {source}); the NVFP4 vs FP8 question is GB10's"
    name, cap = caps[0]
    headline = f"not SM121: {name} is {cap[0]}.{cap[1]}; this check is GB10's"
    readings = [Reading("capability", _caps_text(caps))]
    return Result("G7", Status.SKIP, summary, readings=readings, headline=headline,
                  codes=["G7.not-sm121"]), caps


def evaluate(facts: Facts, params: Params) -> Result:
    """Decide G7 (pure): can torch run on SM121, and, where the stack uses
    NVFP4 or Triton, do its kernels and ptxas know SM121?"""
    skip, caps = _gpu(facts)
    if skip is not None:
        if caps and (facts.triton_compile is not None or params.option("precision")):
            # on another GPU, what this Triton would do on a Spark, beside the SKIP
            aside = Findings("G7")
            compile_stage(facts, False, aside)
            skip.readings.extend(aside.readings)
            skip.details.extend(aside.details)
            skip.details.append("the FP8 and NVFP4 findings are SM12x's: they do not apply here")
        return skip
    out = Findings("G7")
    gpu = f"{next(n for n, c in caps if c == SM121)} is SM121 (12.1)"
    torch_archs, env_archs = _arch_lists(facts, caps, out)
    torch_text, runs = torch_stage(facts, torch_archs, out)
    env_text = env_stage(facts, env_archs, out)
    precision = params.option("precision")
    lib_text = nvfp4_stage(facts, precision, [*torch_archs, *env_archs], out)
    compile_text, compiled = compile_stage(facts, True, out)
    ptxas_text = triton_stage(facts, params.threshold("g7_triton_ptxas_min"), out, compiled)
    fp8_stage(facts, precision, params.threshold("g7_cublas_fp8_min"), out)
    parts = [gpu, torch_text, env_text, lib_text, compile_text or ptxas_text]
    parts.append(f"precision {precision}" if precision else "")
    headline, short_fix = out.first_short()
    summary = "; ".join(p for p in parts if p)
    result = out.result(Status.PASS if runs else Status.INFO, summary,
                        headline=headline or _ok_headline(facts, torch_archs, runs), short_fix=short_fix,
                        ok_code="" if runs else "G7.arch-list-unknown")
    if result.status in (Status.FAIL, Status.WARN):
        result.summary = f"{gpu}: {result.summary}"
    return result


def _arch_lists(facts: Facts, caps: list[Cap], out: Findings) -> tuple[list[Arch], list[Arch]]:
    """Torch's arch list and TORCH_CUDA_ARCH_LIST, parsed and read (what did not parse, and family
    targets, noted)."""
    torch_archs, torch_bad = parse_arch_list(facts.arch_list)
    env_archs, env_bad = parse_arch_list(facts.env_arch_list)
    for bad, where in ((torch_bad, "torch arch list"), (env_bad, "TORCH_CUDA_ARCH_LIST")):
        if bad:
            out.note(f"{where}: could not parse {', '.join(bad)}")
    out.read("capability", _caps_text(caps))
    out.read("torch_arch_list", _names(torch_archs) or None)
    out.read("torch_cuda_arch_list_env", facts.env_arch_list)
    family = [a for a in (*torch_archs, *env_archs) if a.major == 12 and a.suffix == "f"]
    if family:
        out.note(f"family targets {_names(family)} run on SM121; whether FP4 conversion is native there is "
                 "contested")
    return torch_archs, env_archs


def _ok_headline(f: Facts, archs: list[Arch], runs: bool | None) -> str:
    if runs is None:
        return f"SM121 found; {who(f)}'s build unknown ({unknown_why(f)[:64]})"
    cubins = [a for a in archs if runs_on_sm121(a) and a.kind == "sm"]
    return f"{who(f)} runs on SM121 through " + (f"its {_names(cubins)} cubins" if cubins else "PTX JIT")
