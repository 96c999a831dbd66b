"""G7's stages on torch's build and the kernels the stack uses: can torch run on SM121, what
``TORCH_CUDA_ARCH_LIST`` builds, whether the NVFP4 kernel libraries carry an SM121 FP4 target, and
what FP8 needs on SM12x (cuBLAS's release, vLLM's cubins). Pure: facts in, findings out."""

from __future__ import annotations

import os

from pytest_dgx_spark.checks.g07_nvfp4.arch import (
    SM121,
    Arch,
    fp4_target,
    names,
    parse_arch,
    release_floor,
    runs_on_sm121,
)
from pytest_dgx_spark.checks.g07_nvfp4.facts import Facts, Lib
from pytest_dgx_spark.checks.kit import Findings, first_n

CUDA_TORCH_FIX = (
    "install torch built for CUDA 13: pip install torch --index-url https://download.pytorch.org/whl/cu130 "
    "(plain pip on aarch64 often installs a CPU-only wheel), or use an NGC PyTorch container"
)
CUDA_TORCH_SHORT = "pip install torch --index-url https://download.pytorch.org/whl/cu130"
NVFP4_FIX = (
    "stay on FP8 (or BF16) for training and serving; use NVFP4 only with kernels built for sm_121a or "
    "sm_120f (a vLLM/FlashInfer build listing them, TORCH_CUDA_ARCH_LIST=12.1a) and measure it yourself"
)
NVFP4_SHORT = "use FP8, or NVFP4 builds for sm_121a"
FP8_TRAIN_SHORT = "FP8 per-tensor or BF16 for training"
SMEM_NOTE = (
    "SM12x gives a kernel 99 KiB (101376 bytes) of shared memory: CUTLASS tiles tuned for SM100 fail with "
    "'102400 bytes required but device supports 101376' (NVIDIA/cutlass#3144): a kernel's tile choice, "
    "not this box's fault"
)


def who(f: Facts) -> str:
    return f"torch {f.torch_version}" if f.torch_version else "torch"


def unknown_why(f: Facts) -> str:
    """Why torch's arch list is unknown: its error, else whether torch imported at all."""
    if f.arch_list_error:
        return f.arch_list_error
    return "arch list not read" if f.torch_version else "torch not importable"


def torch_stage(f: Facts, archs: list[Arch], out: Findings) -> tuple[str, bool | None]:
    """``(text, runs)``: can torch run anything on SM121? ``runs`` is ``None``
    when torch's build could not be read (not importable, child died)."""
    whose = who(f)
    # a CPU-only wheel: ``+cpu``, or no CUDA version and no arch
    if f.torch_version and ("+cpu" in f.torch_version or (f.torch_cuda is None and not f.arch_list)):
        out.fail(f"{whose} is a CPU-only build (torch.version.cuda is None): nothing runs on the GB10",
                 CUDA_TORCH_FIX, headline=f"{whose} is CPU-only", short_fix=CUDA_TORCH_SHORT,
                 code="G7.torch-cpu-only")
        return f"{whose} is CPU-only", False
    if not archs:
        return f"torch arch list unknown ({unknown_why(f)})", None
    runnable = [a for a in archs if runs_on_sm121(a)]
    cubins = [a for a in runnable if a.kind == "sm"]
    listed = f"{whose} arch list {names(archs)}"
    if cubins:
        return f"{listed}: its {names(cubins)} cubins run on 12.1", True
    if runnable:
        out.note(f"torch has no cubin for 12.x: its kernels are JIT-compiled from {names(runnable)} PTX "
                 "on first use")
        return f"{listed}: runs through {names(runnable)} PTX (JIT)", True
    out.fail(f"{listed}: no 12.x cubin and no PTX that compiles for SM121, so no CUDA kernel runs on "
             "the GB10", CUDA_TORCH_FIX, short_fix=CUDA_TORCH_SHORT,
             headline=f"{whose} has no kernel for SM121 (arch list ends at {archs[-1].name})",
             code="G7.no-sm121-kernel")
    return listed, False


def env_stage(f: Facts, archs: list[Arch], out: Findings) -> str:
    """``TORCH_CUDA_ARCH_LIST`` decides what extensions built here target."""
    if not f.env_arch_list:
        return "TORCH_CUDA_ARCH_LIST unset"
    text = f"TORCH_CUDA_ARCH_LIST={f.env_arch_list}"
    if archs and not any(runs_on_sm121(a) for a in archs):
        out.warn(f"{text}: extensions built here get no target that runs on SM121",
                 "export TORCH_CUDA_ARCH_LIST=12.0 (12.1a for FP4 kernels) before building CUDA extensions, "
                 "or unset it", headline=f"{text} builds nothing SM121 runs",
                 short_fix="export TORCH_CUDA_ARCH_LIST=12.0 (or 12.1a)", code="G7.arch-list-env")
    return text


def _lib_fp4(entry: Lib) -> bool:
    return any(fp4_target(a) for t in entry.targets or [] for a in parse_arch(t))


def _library_text(f: Facts, with_code: list[Lib], fp4_dists: list[str], out: Findings) -> str:
    """Each library's targets in the details, the counts in the readings; the summary's text."""
    for x in f.libs:
        what = ", ".join(x.targets) if x.targets else x.error or "no device code (JIT)"
        out.note(f"{x.dist} {os.path.basename(x.path)}: {what}")
    out.read("kernel_libraries_inspected", len([x for x in f.libs if x.targets is not None]))
    out.read("kernel_libraries_with_sm_121a", len([x for x in with_code if _lib_fp4(x)]))
    if f.libs_installed and f.cuobjdump is None and not f.libs:
        installed = ", ".join(f.libs_installed)
        return f"{installed} installed but cuobjdump not found, so their cubins were not listed"
    if fp4_dists:
        return f"sm_121a cubins in {', '.join(fp4_dists)}"
    if with_code:
        listed = [f"{x.dist} ({first_n(x.targets or [], 6, sep=', ')})" for x in with_code]
        return "no sm_121a cubin in " + first_n(listed, sep=", ")
    if f.libs_installed:
        return f"{', '.join(f.libs_installed)}: no precompiled cubins listed"
    return "no NVFP4 kernel library installed (vLLM, FlashInfer, TensorRT-LLM)"


def nvfp4_stage(f: Facts, precision: str | None, builds: list[Arch], out: Findings) -> str:
    """NVFP4 is judged only where the stack uses it: ``--spark-precision nvfp4``, or an installed
    NVFP4 kernel library (unless the precision given says the run uses none)."""
    with_code = [x for x in f.libs if x.targets]
    fp4_dists = list(dict.fromkeys(x.dist for x in with_code if _lib_fp4(x)))
    lacking = [x for x in with_code if x.dist not in fp4_dists]
    lacking_dists = list(dict.fromkeys(x.dist for x in lacking))
    lib_text = _library_text(f, with_code, fp4_dists, out)
    if precision in ("fp8", "bf16"):
        if lacking_dists:
            lacking_text = ", ".join(lacking_dists)
            out.note(f"--spark-precision {precision}: the NVFP4 kernels of {lacking_text} are not judged")
        return lib_text
    if lacking_dists:
        _no_fp4_target(lacking, lacking_dists, lib_text, out)
    elif precision == "nvfp4" and not fp4_dists and not any(fp4_target(a) for a in builds):
        out.warn(f"--spark-precision nvfp4, but nothing installed targets sm_121a or sm_120f: {lib_text}",
                 NVFP4_FIX, headline="NVFP4 planned, but no installed kernel targets sm_121a/sm_120f",
                 short_fix=NVFP4_SHORT, code="G7.nvfp4-planned-no-kernel")
    return lib_text


def _no_fp4_target(lacking: list[Lib], dists: list[str], lib_text: str, out: Findings) -> None:
    """The WARN for NVFP4 kernel libraries none of whose cubins has an SM121 FP4 target."""
    targets = {d: [t for x in lacking if x.dist == d for t in x.targets or []] for d in dists}
    shown = [f"{d} ({', '.join(dict.fromkeys(t))})" for d, t in targets.items()]
    out.warn(f"NVFP4 kernels without an SM121 FP4 target: {lib_text} (GB10 needs sm_121a or sm_120f)",
             NVFP4_FIX, headline=f"no sm_121a NVFP4 kernel in {first_n(shown, 1)}", short_fix=NVFP4_SHORT,
             code="G7.nvfp4-no-target")


def fp8_stage(f: Facts, precision: str | None, floor: float, out: Findings) -> None:
    """What FP8 needs on SM12x, from the installed versions and cubins (a reading, not a run):
    cuBLASLt block-scaled FP8 is TN-only on cc 12.x below cuBLAS 13.6 (pytorch PR #198188,
    #192707), and vLLM's FP8 CUTLASS kernels need a cubin that runs on 12.1."""
    release = f.cublas.release if f.cublas else None
    shown = f"{release[0]}.{release[1]}" if release else None
    out.read("cublas_release", shown)
    out.read("vllm_version", f.vllm)
    below = bool(release) and tuple(release or ()) < release_floor(floor)
    if precision != "fp8":
        if below:
            out.note(f"cuBLAS {shown}: block-scaled FP8 GEMMs are TN-only on SM12x below {floor:g} "
                     "(judged with --spark-precision fp8)")
        return
    out.note(SMEM_NOTE)
    if not release:
        out.note("cuBLAS version not found (no nvidia-cublas wheel, no libcublasLt in the CUDA toolkit): "
                 "its FP8 layouts not judged")
    elif below:
        out.warn(
            f"--spark-precision fp8 with cuBLAS {shown} ({f.cublas.source if f.cublas else None}): block-scaled and per-row "
            f"FP8 GEMMs (torch._scaled_mm) are TN-only on cc 12.x before cuBLAS {floor:g}, so training's "
            "dgrad/wgrad GEMMs fail with CUBLAS_STATUS_NOT_SUPPORTED (pytorch PR #198188, #192707, reported "
            "on sm_120; read from the installed version, not run)",
            "train FP8 with per-tensor scaling, or in BF16, until cuBLAS 13.6 or newer is installed (a newer "
            "nvidia-cublas wheel or CUDA toolkit); inference GEMMs (TN) are not affected",
            headline=f"cuBLAS {shown} < {floor:g}: FP8 training GEMMs TN-only on SM12x",
            short_fix=FP8_TRAIN_SHORT, code="G7.fp8-cublas-tn-only")
    _vllm_fp8(f, out)


def _vllm_fp8(f: Facts, out: Findings) -> None:
    """vLLM's FP8 CUTLASS kernels on 12.1: none without a cubin that runs there (``Not building
    scaled_mm_c3x_120``, vllm PR #38126); with sm_121 cubins the ``enable_sm120_only`` guard
    traps unless the build is patched (eugr/spark-vllm-docker#143)."""
    if not f.vllm:
        return
    libs = [x for x in f.libs if x.dist.startswith("vllm ") and x.targets]
    if not libs:
        out.note(f"vllm {f.vllm}: its cubins were not listed, its FP8 kernels not judged")
        return
    archs = [a for x in libs for t in x.targets or [] for a in parse_arch(t)]
    sm121 = [a for a in archs if (a.major, a.minor) == SM121]
    runnable = [a for a in archs if runs_on_sm121(a)]
    if sm121:
        out.note(
            f"vllm {f.vllm} carries {names(sm121)} cubins: its FP8 kernels are built for 12.1; if they stop "
            "with 'This kernel only supports sm120.', the build guards with enable_sm120_only "
            "(eugr/spark-vllm-docker#143)"
        )
    elif runnable:
        out.note(f"vllm {f.vllm}: FP8 kernels run through its {names(runnable)} cubins")
    else:
        archs_text = names(archs)
        out.warn(f"--spark-precision fp8, but vllm {f.vllm} has no cubin that runs on SM121 ({archs_text}): "
                 "its FP8 CUTLASS GEMMs were not built for 12.x ('Not building scaled_mm_c3x_120 as no "
                 "compatible archs found')", "install a vLLM built for 12.0/12.1 (TORCH_CUDA_ARCH_LIST=12.1a "
                 "when building; vllm PR #38484), or an NGC vLLM container",
                 headline=f"vllm {f.vllm} has no FP8 kernel for SM121", short_fix="a vLLM built for 12.1",
                 code="G7.vllm-no-fp8-kernel")
