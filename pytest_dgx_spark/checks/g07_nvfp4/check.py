"""G7 — SM121: can the installed stack run on GB10, and where it uses NVFP4, FP8 or
Triton, does it know SM121?

Stock cu130 torch lists ``sm_80 … sm_120`` and no ``sm_121``: healthy, sm_120 cubins run on
12.1 (pytorch PR #178891). NVFP4 needs ``sm_121a``/``sm_120f`` kernels, judged only where the
stack uses it. Triton's ptxas before CUDA 12.9 rejects ``sm_121a`` (triton #8539): one trivial
kernel is compiled for capability 121 in a child (not launched) and decides. FP8 (issue 22,
G7+): under ``--spark-precision fp8`` the cuBLAS release and vLLM's cubins are judged.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple, TypedDict

from pytest_dgx_spark.checks.kit import CheckContext, FactsBase, Findings, Params, first_n
from pytest_dgx_spark.model import Reading, Result, Status
from pytest_dgx_spark.probes import elf
from pytest_dgx_spark.probes.commands import find_program
from pytest_dgx_spark.probes.dist_files import owners_for
from pytest_dgx_spark.probes.packages import canonical

SM121 = (12, 1)
#: distributions whose shared objects carry NVFP4 kernels (sglang-kernel: sgl-kernel's name
#: from 0.4, error_nvfp4_2.txt)
NVFP4_DISTS = ("vllm", "flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache", "tensorrt-llm",
               "sgl-kernel", "sglang-kernel")
CUBLAS_DISTS = ("nvidia-cublas", "nvidia-cublas-cu13", "nvidia-cublas-cu12")
MAX_LIBS = 8
MAX_LIBS_PER_DIST = 3
TRITON_DISTS = ("triton", "pytorch-triton")  # they install triton/backends/nvidia/bin/ptxas
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
#: ptxas's line when it does not know GB10's target (triton #8539, #9181; vllm #29469)
_REJECTED = re.compile(r"Value '(sm_\d+[a-z]?)' is not defined for option 'gpu-name'")
#: what Triton 3.2-3.4 say when pointed at CUDA 13's ptxas; 3.5 is the first that runs it
TRITON_OLD_CUDA = "Triton only support CUDA 10.0 or higher"
TRITON_RUNS_CUDA13_PTXAS = (3, 5)
#: torch whose ``_native`` ops run backward through Triton (error_triton_pythonh_1.txt)
NATIVE_TRITON_TORCH = (2, 14)
FP8_TRAIN_SHORT = "FP8 per-tensor or BF16 for training"
SMEM_NOTE = (
    "SM12x gives a kernel 99 KiB (101376 bytes) of shared memory: CUTLASS tiles tuned for SM100 fail with "
    "'102400 bytes required but device supports 101376' (NVIDIA/cutlass#3144): a kernel's tile choice, "
    "not this box's fault"
)
#: torch's TORCH_CUDA_ARCH_LIST names (torch/utils/cpp_extension.py)
NAMED_ARCHS = {
    "kepler": ["3.5", "3.7"], "maxwell": ["5.0", "5.2"], "pascal": ["6.0", "6.1"], "volta": ["7.0"],
    "turing": ["7.5"], "ampere": ["8.0", "8.6"], "ada": ["8.9"], "hopper": ["9.0"],
    "blackwell": ["10.0", "12.0"],
}
_SM = re.compile(r"^(?:(sm|compute|lto)_)?(\d+)(?:\.(\d+))?([a-z]?)(\+ptx)?$", re.IGNORECASE)
_CUBIN = re.compile(r"\bsm_(\d+)([a-z]?)\b")


class Arch(NamedTuple):
    """One build target: ``sm_121a`` -> Arch(12, 1, "a", "sm")."""

    major: int
    minor: int
    suffix: str  # "", "a" (arch-specific) or "f" (family)
    kind: str  # "sm" (cubin) or "compute" (PTX)

    @property
    def name(self) -> str:
        return f"{self.kind}_{self.major}{self.minor}{self.suffix}"


def parse_arch(token: str) -> list[Arch]:
    """Parse one arch name defensively; unknown text gives ``[]``."""
    m = _SM.match(token.strip().lower())
    if not m:
        return []
    kind, digits, minor_text, suffix, ptx = m.groups()
    if minor_text is not None:  # "12.1a"
        major, minor = int(digits), int(minor_text)
    elif len(digits) >= 2:  # "121" / sm_90
        major, minor = int(digits[:-1]), int(digits[-1])
    else:
        return []
    out = [Arch(major, minor, suffix, "compute" if kind == "compute" else "sm")]
    return [*out, Arch(major, minor, suffix, "compute")] if ptx else out


def parse_arch_list(text: str | list[str] | None) -> tuple[list[Arch], list[str]]:
    """A list (torch) or a ``TORCH_CUDA_ARCH_LIST`` string (``"9.0a;12.1a 12.0+PTX"``)."""
    if text is None:
        return [], []
    archs: list[Arch] = []
    bad: list[str] = []
    for raw in text if isinstance(text, list) else re.split(r"[;,\s]+", text):
        token = str(raw).strip()
        named = NAMED_ARCHS.get(token.lower().replace("+ptx", ""))
        ptx = "+PTX" if token.lower().endswith("+ptx") else ""
        parsed = [a for n in named for a in parse_arch(n + ptx)] if named else parse_arch(token)
        if parsed:
            archs.extend(parsed)
        elif token:
            bad.append(token)
    return archs, bad


def targets_121a(archs: list[Arch]) -> bool:
    """An ``sm_121a`` cubin, or ``compute_121a`` PTX the driver compiles for SM121."""
    return any((a.major, a.minor, a.suffix) == (12, 1, "a") for a in archs)


def parse_cuobjdump(text: str) -> list[str]:
    """Cubin targets from ``cuobjdump --list-elf`` (``ELF file 1: x.sm_121a.cubin``)."""
    lines = [line for line in text.splitlines() if "ELF file" in line]
    return list(dict.fromkeys(f"sm_{mm}{s}" for line in lines for mm, s in _CUBIN.findall(line)))


def runs_on_sm121(arch: Arch) -> bool:
    """Can this build target execute on SM121 (compute capability 12.1)?"""
    if arch.suffix == "a":
        return (arch.major, arch.minor) == SM121
    if arch.kind == "sm" or arch.suffix == "f":
        return arch.major == 12 and arch.minor <= 1
    return (arch.major, arch.minor) <= SM121


def fp4_target(arch: Arch) -> bool:
    """A target with SM12x's FP4 instructions that runs on SM121: ``sm_121a``,
    ``sm_121f``, ``sm_120f`` (a plain ``sm_120`` runs, without them)."""
    return arch.major == 12 and arch.suffix in ("a", "f") and runs_on_sm121(arch)


def _two(pattern: str, text: str) -> list[int] | None:
    m = re.search(pattern, text or "")
    return [int(m.group(1)), int(m.group(2))] if m else None


def ptxas_release(text: str) -> list[int] | None:
    """``[12, 8]`` from ``ptxas --version`` (``Cuda compilation tools, release 12.8, V12.8.93``)."""
    return _two(r"release (\d+)\.(\d+)", text)


class Lib(TypedDict, total=False):
    """One kernel library inspected with cuobjdump: its targets, or why not."""

    dist: str
    path: str
    targets: list[str]
    error: str


class TritonCompile(TypedDict, total=False):
    """The Triton compile child's answer (probes/scripts/triton_compile.py): ``ok``, else
    ``error_type``/``error``; or why nothing was compiled (``import_error``, ``api_error``,
    ``child``: the child hung or died)."""

    dist: str
    version: str | None
    import_error: str
    api_error: str
    api: str
    ok: bool
    error_type: str
    error: str
    seconds: float
    ptxas: str | None
    ptxas_version: str | None
    python_include: str | None
    python_h: bool
    python_h_dir: str | None
    child: str


class TritonPtxas(TypedDict, total=False):
    """The ptxas Triton compiles SM121 kernels with; ``env``: the override variable when one is set."""

    dist: str
    path: str
    binary: str
    env: str | None
    release: list[int] | None
    error: str


@dataclass
class Facts(FactsBase):
    devices: list[dict[str, Any]] = field(default_factory=list)  # name, capability
    nvml_reason: str | None = None
    torch_capability: list[int] | None = None
    torch_device: str | None = None
    torch_version: str | None = None
    torch_cuda: str | None = None  # torch.version.cuda: None on a CPU-only wheel
    arch_list: list[str] | None = None
    arch_list_error: str | None = None
    env_arch_list: str | None = None
    cuobjdump: str | None = None  # the tool's path, or None when absent
    libs: list[Lib] = field(default_factory=list)
    libs_installed: list[str] = field(default_factory=list)  # NVFP4 dists installed
    triton: TritonPtxas | None = None
    triton_compile: TritonCompile | None = None  # in a child (N1)
    torch_dist: str | None = None  # the installed torch's version (dist metadata)
    native_jit: str | None = None  # TORCH_DISABLE_NATIVE_JIT as set
    cublas: dict[str, Any] | None = None  # source (a distribution or a file), release [major, minor]
    vllm: str | None = None  # the installed vLLM's version
    ADDED: ClassVar[Mapping[str, str]] = {
        "triton_compile": "issue 22 (N1): the compile for 121; without it the ptxas release decides",
        "torch_dist": "issue 22 (N1): torch's version for the Python.h rule, which needs triton_compile",
        "native_jit": "issue 22 (N1): TORCH_DISABLE_NATIVE_JIT for the Python.h rule",
        "cublas": "issue 22 (G7+): the cuBLAS release; None: not read, the FP8 layout rule says so",
        "vllm": "issue 22 (G7+): vLLM's version; None: no vLLM FP8 finding",
    }


FACTS = Facts


def _cuda_homes(env: Mapping[str, str]) -> list[str]:
    homes = (env.get("CUDA_HOME"), env.get("CUDA_PATH"), "/usr/local/cuda")
    return [h for h in homes if h and os.path.isabs(h)]


def _find_cuobjdump(env: dict[str, str]) -> str | None:
    tools = [os.path.join(home, "bin", "cuobjdump") for home in _cuda_homes(env)]
    # absolute PATH entries only: never the working folder's
    return find_program("cuobjdump", env) or next((t for t in tools if os.access(t, os.X_OK)), None)


def _kernel_libraries(ctx: CheckContext) -> tuple[list[str], list[tuple[str, str]]]:
    """``(installed NVFP4 dists, [(dist label, path)])``, largest files first."""
    dists = ctx.machine.packages().get("dists") or {}
    installed = [k for k in NVFP4_DISTS if k in dists]
    if not installed:
        return [], []
    scan = elf.scan_environment(ctx.machine)
    owners = owners_for(ctx.machine, scan.roots).get("owners") or {}
    picked: list[tuple[int, str, str]] = []
    for key in installed:
        files = []
        for path in (p for p, owner in owners.items() if canonical(owner["name"]) == key):
            with suppress(OSError):
                files.append((os.path.getsize(path), path))
        label = f"{dists[key]['name']} {dists[key]['version']}"
        picked += [(size, label, path) for size, path in sorted(files, reverse=True)[:MAX_LIBS_PER_DIST]]
    picked.sort(reverse=True)
    return [dists[k]["name"] for k in installed], [(label, path) for _, label, path in picked[:MAX_LIBS]]


def _triton_dist(machine: Any) -> dict[str, Any] | None:
    dists = machine.packages().get("dists") or {}
    return next((dists[k] for k in TRITON_DISTS if k in dists), None)


def _env_name(blackwell: bool) -> str:
    """Triton 3.6+ compiles sm >= 100 with ``ptxas-blackwell``, overridden by its own variable."""
    return "TRITON_PTXAS_BLACKWELL_PATH" if blackwell else "TRITON_PTXAS_PATH"


def _triton_ptxas(ctx: CheckContext) -> TritonPtxas | None:
    """The ptxas Triton would run for an SM121 kernel, and its release."""
    machine = ctx.machine
    dist = _triton_dist(machine)
    if dist is None:
        return None
    out = TritonPtxas(dist=f"{dist['name']} {dist['version']}")
    location = str(dist.get("location") or "")
    if not os.path.isabs(location):
        out["error"] = "its install folder is unknown (no dist-info path)"
        return out
    bin_dir = os.path.join(os.path.dirname(location), "triton", "backends", "nvidia", "bin")
    blackwell = os.path.isfile(os.path.join(bin_dir, "ptxas-blackwell"))
    # the variable's name is written out here: tests/test_hermetic.py finds every variable read by its literal
    binary, env_name = ("ptxas-blackwell", "TRITON_PTXAS_BLACKWELL_PATH") if blackwell else ("ptxas", "TRITON_PTXAS_PATH")
    override = machine.env.get(env_name) or ""
    path = override if os.path.isfile(override) else os.path.join(bin_dir, binary)
    out["binary"], out["path"], out["env"] = binary, path, env_name if path == override else None
    if not os.path.isfile(path):
        out["error"] = f"no {binary} in {bin_dir}"
        return out
    res = machine.command([path, "--version"], timeout=machine.timeout)
    out["release"] = ptxas_release(res.stdout + "\n" + res.stderr)
    if out["release"] is None:
        out["error"] = f"`{binary} --version` gave no release: {res.describe()}"
    return out


def _triton_compile(ctx: CheckContext) -> TritonCompile | None:
    """Compile one Triton kernel for cuda capability 121 in a child, with a throwaway cache
    (``TRITON_CACHE_DIR``), bounded by the machine's timeout; ``None`` without Triton."""
    machine = ctx.machine
    dist = _triton_dist(machine)
    if dist is None:
        return None
    with tempfile.TemporaryDirectory(prefix="spark-preflight-triton-") as work:
        env = {**machine.env, "TRITON_CACHE_DIR": os.path.join(work, "cache")}
        config = {"capability": 121, "workdir": work}
        child = machine.python_child("triton:compile", ["triton_compile.py"], config,
                                     step_timeout=machine.timeout, total_timeout=machine.timeout * 6, env=env,
                                     python=machine.torch_python)
    d = child.data
    if _imported_elsewhere(d.get("triton_file"), machine.python_path()):
        return None  # the child found another Triton than the checked environment's: no verdict from it
    out = TritonCompile(dist=f"{dist['name']} {dist['version']}")
    found = {k: d[k] for k in TritonCompile.__annotations__ if k in d and k != "dist"}
    out.update(found)  # type: ignore[typeddict-item]
    if not child.ok:
        out["child"] = child.describe("the Triton compile child")
    return out


def _imported_elsewhere(triton_file: Any, paths: Sequence[str]) -> bool:
    """Whether the child's ``import triton`` came from outside the checked import path (the
    interpreter's own site-packages shadowing a checked environment that holds only Triton's
    metadata): the package list and the compile would then speak of two Tritons."""
    if not isinstance(triton_file, str) or not paths:
        return False
    where = os.path.realpath(triton_file)
    return not any(where.startswith(os.path.realpath(p).rstrip(os.sep) + os.sep) for p in paths if p)


def _cublas_release(text: str) -> list[int] | None:
    """``[13, 1]`` from ``13.1.0.3`` or ``libcublasLt.so.13.1.0.3``."""
    return _two(r"(?:^|\.so\.)(\d+)\.(\d+)", text)


def _cublas(machine: Any, dists: Mapping[str, Any]) -> dict[str, Any] | None:
    """The cuBLAS FP8 GEMMs load: a pip ``nvidia-cublas`` wheel (what torch wheels use), else the
    ``libcublasLt.so.X.Y`` of the CUDA toolkit (an NGC image)."""
    key = next((k for k in CUBLAS_DISTS if k in dists), None)
    if key:
        version = str(dists[key]["version"])
        return {"source": f"{dists[key]['name']} {version}", "release": _cublas_release(version)}
    for folder in (os.path.join(home, "lib64") for home in _cuda_homes(machine.env)):
        try:  # through the host root, as every reading of the machine's files
            names = sorted(n for n in os.listdir(machine.path(folder)) if n.startswith("libcublasLt.so."))
        except OSError:
            continue
        releases = [(r, n) for n in names if (r := _cublas_release(n))]
        if releases:
            release, name = max(releases)
            return {"source": os.path.join(folder, name), "release": release}
    return None


def _gather_torch(ctx: CheckContext, facts: Facts) -> None:
    child = ctx.torch()  # the run's one torch child; it already exists when G1/G2 ran
    d = child.data
    facts.torch_capability, facts.torch_device = d.get("capability"), d.get("device_name")
    facts.torch_version, facts.torch_cuda = d.get("torch_version"), d.get("torch_cuda")
    facts.arch_list = d.get("arch_list")
    facts.arch_list_error = d.get("arch_list_error") or d.get("torch_import_error")
    if facts.arch_list is None and not facts.arch_list_error and not child.ok:
        facts.arch_list_error = child.describe("torch child")  # hung or killed, not "not importable"
    unreachable = facts.torch_cuda and d.get("cuda_available") is False
    if not facts.arch_list and not facts.arch_list_error and unreachable:
        # get_arch_list() is [] whenever CUDA is unavailable: that says nothing of its targets (G1 names why)
        why = str(d.get("cuda_error") or "torch.cuda.is_available() is False")
        facts.arch_list_error = f"{why[:120]}; see G1"


def _gather_libraries(ctx: CheckContext, facts: Facts) -> None:
    machine = ctx.machine
    facts.libs_installed, libs = _kernel_libraries(ctx)
    facts.cuobjdump = _find_cuobjdump(machine.env) if libs else None
    if facts.cuobjdump is None:
        return
    deadline = time.monotonic() + machine.timeout * 3
    for label, path in libs:
        entry = Lib(dist=label, path=path)
        if time.monotonic() > deadline:
            entry["error"] = "not inspected (time budget spent)"
        else:
            res = machine.command([facts.cuobjdump, "--list-elf", path], timeout=machine.timeout)
            if res.ok:
                entry["targets"] = parse_cuobjdump(res.stdout)
            elif "does not contain device code" in res.stdout + "\n" + res.stderr:
                entry["targets"] = []
            else:
                entry["error"] = res.describe()
        facts.libs.append(entry)


def prefetch(ctx: CheckContext) -> None:
    """Compile for 121 while the run imports torch (engine.prefetch), where NVML lists a GPU (as
    :func:`gather` does): G7 runs after the torch child and finds the answer in the store."""
    if any(d.get("capability") for d in ctx.machine.nvml().get("devices") or []):
        _triton_compile(ctx)


def gather(ctx: CheckContext) -> Facts:
    machine = ctx.machine
    nv = machine.nvml()
    facts = Facts(
        devices=[{"name": d.get("name"), "capability": d.get("capability")} for d in nv.get("devices") or []],
        nvml_reason=None if nv.get("ok") else nv.get("reason"),
        env_arch_list=machine.env.get("TORCH_CUDA_ARCH_LIST"),
    )
    caps = [tuple(d["capability"]) for d in facts.devices if d.get("capability")]
    # torch's view only when NVML answered nothing useful but a driver may be there (hung,
    # crashed); no driver library at all means no GPU for torch either.
    if SM121 in caps or (not caps and not nv.get("missing") and not nv.get("no_gpu")):
        _gather_torch(ctx, facts)
    sm121 = SM121 in caps or (not caps and tuple(facts.torch_capability or ()) == SM121)
    if not (sm121 or caps):
        return facts
    dists = machine.packages().get("dists") or {}
    if sm121:
        _gather_libraries(ctx, facts)
        facts.triton = _triton_ptxas(ctx)
        facts.cublas = _cublas(machine, dists)  # what FP8 on SM12x depends on, from versions
        facts.vllm = str(dists["vllm"]["version"]) if "vllm" in dists else None
    # on another GPU too: the compile targets 121, so it tells what this Triton does on a Spark
    facts.torch_dist = str(dists["torch"]["version"]) if "torch" in dists else None
    facts.native_jit = machine.env.get("TORCH_DISABLE_NATIVE_JIT")
    facts.triton_compile = _triton_compile(ctx)
    return facts


# --------------------------------------------------------------------------- deciding


def _names(archs: list[Arch]) -> str:
    return ", ".join(dict.fromkeys(a.name for a in archs))


Cap = tuple[str, tuple[int, ...]]  # a GPU's name and capability


def _caps_text(caps: list[Cap]) -> str:
    return ", ".join(f"{c[0]}.{c[1]}" for _, c in caps)


def _gpu(f: Facts) -> tuple[Result | None, list[Cap]]:
    """The GPUs (from NVML, else torch), or the SKIP when none is SM121."""
    caps = [(d.get("name") or "GPU", tuple(d["capability"])) for d in f.devices if d.get("capability")]
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


def _who(f: Facts) -> str:
    return f"torch {f.torch_version}" if f.torch_version else "torch"


def _torch_stage(f: Facts, archs: list[Arch], out: Findings) -> tuple[str, bool | None]:
    """``(text, runs)``: can torch run anything on SM121? ``runs`` is ``None``
    when torch's build could not be read (not importable, child died)."""
    who = _who(f)
    # a CPU-only wheel: ``+cpu``, or no CUDA version and no arch
    if f.torch_version and ("+cpu" in f.torch_version or (f.torch_cuda is None and not f.arch_list)):
        out.fail(f"{who} is a CPU-only build (torch.version.cuda is None): nothing runs on the GB10",
                 CUDA_TORCH_FIX, headline=f"{who} is CPU-only", short_fix=CUDA_TORCH_SHORT,
                 code="G7.torch-cpu-only")
        return f"{who} is CPU-only", False
    if not archs:
        return f"torch arch list unknown ({_unknown_why(f)})", None
    runnable = [a for a in archs if runs_on_sm121(a)]
    cubins = [a for a in runnable if a.kind == "sm"]
    listed = f"{who} arch list {_names(archs)}"
    if cubins:
        return f"{listed}: its {_names(cubins)} cubins run on 12.1", True
    if runnable:
        out.note(f"torch has no cubin for 12.x: its kernels are JIT-compiled from {_names(runnable)} PTX "
                 "on first use")
        return f"{listed}: runs through {_names(runnable)} PTX (JIT)", True
    out.fail(f"{listed}: no 12.x cubin and no PTX that compiles for SM121, so no CUDA kernel runs on "
             "the GB10", CUDA_TORCH_FIX, short_fix=CUDA_TORCH_SHORT,
             headline=f"{who} has no kernel for SM121 (arch list ends at {archs[-1].name})",
             code="G7.no-sm121-kernel")
    return listed, False


def _env_stage(f: Facts, archs: list[Arch], out: Findings) -> str:
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


def _lib_fp4(entry: Mapping[str, Any]) -> bool:
    return any(fp4_target(a) for t in entry.get("targets") or [] for a in parse_arch(t))


def _library_text(f: Facts, with_code: list[Lib], fp4_dists: list[str], out: Findings) -> str:
    """Each library's targets in the details, the counts in the readings; the summary's text."""
    for x in f.libs:
        what = ", ".join(x["targets"]) if x.get("targets") else x.get("error") or "no device code (JIT)"
        out.note(f"{x['dist']} {os.path.basename(x['path'])}: {what}")
    out.read("kernel_libraries_inspected", len([x for x in f.libs if "targets" in x]))
    out.read("kernel_libraries_with_sm_121a", len([x for x in with_code if _lib_fp4(x)]))
    if f.libs_installed and f.cuobjdump is None and not f.libs:
        installed = ", ".join(f.libs_installed)
        return f"{installed} installed but cuobjdump not found, so their cubins were not listed"
    if fp4_dists:
        return f"sm_121a cubins in {', '.join(fp4_dists)}"
    if with_code:
        listed = [f"{x['dist']} ({first_n(x['targets'], 6, sep=', ')})" for x in with_code]
        return "no sm_121a cubin in " + first_n(listed, sep=", ")
    if f.libs_installed:
        return f"{', '.join(f.libs_installed)}: no precompiled cubins listed"
    return "no NVFP4 kernel library installed (vLLM, FlashInfer, TensorRT-LLM)"


def _nvfp4_stage(f: Facts, precision: str | None, builds: list[Arch], out: Findings) -> str:
    """NVFP4 is judged only where the stack uses it: ``--spark-precision nvfp4``, or an installed
    NVFP4 kernel library (unless the precision given says the run uses none)."""
    with_code = [x for x in f.libs if x.get("targets")]
    fp4_dists = list(dict.fromkeys(x["dist"] for x in with_code if _lib_fp4(x)))
    lacking = [x for x in with_code if x["dist"] not in fp4_dists]
    lacking_dists = list(dict.fromkeys(x["dist"] for x in lacking))
    lib_text = _library_text(f, with_code, fp4_dists, out)
    if precision in ("fp8", "bf16"):
        if lacking_dists:
            lacking_text = ", ".join(lacking_dists)
            out.note(f"--spark-precision {precision}: the NVFP4 kernels of {lacking_text} are not judged")
        return lib_text
    if lacking_dists:
        targets = {d: [t for x in lacking if x["dist"] == d for t in x["targets"]] for d in lacking_dists}
        shown = [f"{d} ({', '.join(dict.fromkeys(t))})" for d, t in targets.items()]
        out.warn(f"NVFP4 kernels without an SM121 FP4 target: {lib_text} (GB10 needs sm_121a or sm_120f)",
                 NVFP4_FIX, headline=f"no sm_121a NVFP4 kernel in {first_n(shown, 1)}", short_fix=NVFP4_SHORT,
                 code="G7.nvfp4-no-target")
    elif precision == "nvfp4" and not fp4_dists and not any(fp4_target(a) for a in builds):
        out.warn(f"--spark-precision nvfp4, but nothing installed targets sm_121a or sm_120f: {lib_text}",
                 NVFP4_FIX, headline="NVFP4 planned, but no installed kernel targets sm_121a/sm_120f",
                 short_fix=NVFP4_SHORT, code="G7.nvfp4-planned-no-kernel")
    return lib_text


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(_two(r"^(\d+)\.(\d+)", text) or ())


def _release_floor(value: float) -> tuple[int, int]:
    return int(value), round((value - int(value)) * 10)


def _triton_stage(f: Facts, floor: float, out: Findings, compiled: bool = False) -> str:
    """Triton's ptxas for SM121 must know ``sm_121a`` (triton #8539); where the compile child
    compiled for 121 (``compiled``), its outcome decides and the release is a reading."""
    t = f.triton
    if t is None:
        return ""
    if t.get("error") or not t.get("release"):
        out.note(f"{t['dist']}: {t.get('error') or 'ptxas release unknown'}")
        return ""
    release = tuple(t.get("release") or ())
    shown = f"{release[0]}.{release[1]}"
    out.read("triton_ptxas_release", shown)
    where = f"{t['env']}={t['path']}" if t.get("env") else f"its bundled {t['binary']}"
    if compiled:
        out.note(f"{t['dist']} ptxas {shown} ({where}); the compile for sm_121a decided")
        return ""
    if release >= _release_floor(floor):
        out.note(f"{t['dist']} compiles SM121 kernels with ptxas {shown} ({where})")
        return f"{t['dist']} ptxas {shown}"
    export = f"export {t.get('env') or _env_name(t['binary'] == 'ptxas-blackwell')}=/usr/local/cuda/bin/ptxas"
    out.warn(f"{t['dist']} compiles SM121 kernels with {where}, ptxas {shown} (< {floor:g}), which rejects "
             "sm_121a (\"Value 'sm_121a' is not defined for option 'gpu-name'\"): torch.compile and Triton "
             "kernels fail", f"{export} (CUDA 13's ptxas; triton #8539)",
             headline=f"triton ptxas {shown} rejects sm_121a (torch.compile)", short_fix=export,
             code="G7.triton-ptxas-old")
    return ""


def _ptxas_fix(f: Facts, tc: TritonCompile) -> tuple[str, str]:
    """``(fix, short fix)`` for a ptxas that does not know SM121: CUDA 13's ptxas, where this
    Triton can run it; Triton before 3.5 cannot (tests/data/triton/), so upgrade it first."""
    version = _version_tuple(str(tc.get("version") or ""))
    if version and version < TRITON_RUNS_CUDA13_PTXAS:
        return (
            "upgrade to Triton 3.5 or newer with the torch that pins it (pip install -U torch triton): "
            f"triton {tc.get('version')} refuses CUDA 13's ptxas ('{TRITON_OLD_CUDA}'), and 3.6 or newer "
            "bundles a ptxas that knows sm_121a",
            "pip install -U torch triton (3.5+)",
        )
    t = f.triton or {}
    blackwell = t.get("binary") == "ptxas-blackwell" or str(tc.get("ptxas") or "").endswith("ptxas-blackwell")
    export = f"export {t.get('env') or _env_name(blackwell)}=/usr/local/cuda/bin/ptxas"
    return f"{export} (CUDA 13's ptxas knows sm_121a; triton #8539, #9181, vllm #29469)", export


def _key_line(text: str) -> str:
    """The line of an error that says what went wrong: ptxas's ``fatal`` line, else the first."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return ([line for line in lines if "fatal" in line] or lines or ["no message"])[0][:240]


def _ptxas_text(tc: TritonCompile) -> str:
    return f"ptxas {tc.get('ptxas_version') or '?'} ({tc.get('ptxas') or 'path unknown'})"


def _compile_failed(f: Facts, tc: TritonCompile, on_spark: bool, out: Findings) -> None:
    """The compile for 121 raised: ptxas's rejection (``PTXASError``; a ``RuntimeError`` with
    ptxas's stderr before Triton 3.3) or a Triton that refuses CUDA 13's ptxas FAILs; another
    Triton error WARNs; a Python error (an API this check does not know) is a note."""
    kind, dist = str(tc.get("error_type") or "?"), tc.get("dist", "triton")
    short, error = kind.rsplit(".", 1)[-1], str(tc.get("error") or "")
    fix, short_fix = _ptxas_fix(f, tc)
    rejected = _REJECTED.search(error)
    if rejected or short == "PTXASError" or "`ptxas` stderr" in error or TRITON_OLD_CUDA in error:
        if TRITON_OLD_CUDA in error:
            what, headline = "is refused by Triton", f"{dist} refuses CUDA 13's ptxas"
            reading = "Triton refuses its ptxas"
        else:
            what = f"rejects {rejected.group(1)}" if rejected else "failed"
            headline, reading = f"triton's ptxas {what} (torch.compile)", f"ptxas {what}"
        text = (
            f"{dist} could not compile a kernel for sm_121a: {_ptxas_text(tc)} {what} "
            f"({_key_line(error)}): Triton kernels and torch.compile fail on the GB10"
        )
        out.note(f"{short}: " + " | ".join(x.strip() for x in error.splitlines() if x.strip())[:600])
        out.read("triton_sm121_compile", reading)
        if on_spark:
            out.fail(text, fix, headline=headline, short_fix=short_fix, code="G7.ptxas-rejects")
        else:
            out.note(f"on a Spark: {text}; fix: {fix}")
        return
    out.read("triton_sm121_compile", f"failed ({short})")
    if not kind.startswith("triton.") or not on_spark:
        unknown = " (not decided: an API this check does not know)" if not kind.startswith("triton.") else ""
        out.note(f"{dist}: compiling a kernel for sm_121a raised {short}: {_key_line(error)}{unknown}")
        return
    out.warn(f"{dist} could not compile a trivial kernel for sm_121a with {_ptxas_text(tc)}: {short}: "
             f"{_key_line(error)}", f"upgrade Triton (pip install -U torch triton), or {fix}",
             headline=f"triton cannot compile for sm_121a ({short})", short_fix="pip install -U torch triton",
             code="G7.triton-compile-failed")


def _python_h(f: Facts, tc: TritonCompile, on_spark: bool, out: Findings) -> None:
    """Triton builds its launcher (``driver.c``) with the C compiler and CPython's headers on
    first use: without ``Python.h`` every Triton kernel fails, and torch 2.14's ``_native`` ops
    run the first backward pass through Triton (error_triton_pythonh_1.txt)."""
    if "python_h" not in tc:
        return
    out.read("python_h", "found" if tc.get("python_h") else "missing")
    if tc.get("python_h"):
        return
    include = tc.get("python_include") or "?"
    m = re.search(r"python(3\.\d+)", include)
    package = f"python{m.group(1)}-dev" if m else "python3-dev"
    torch_version = f.torch_version or f.torch_dist or ""
    native = _version_tuple(torch_version) >= NATIVE_TRITON_TORCH and (f.native_jit or "") != "1"
    text = (
        f"no Python.h in {include}: Triton compiles its launcher (driver.c) with the C compiler on first use "
        "and stops at 'fatal error: Python.h: No such file or directory'"
    )
    if native:
        text += f"; torch {torch_version} runs backward ops through Triton, so the first backward pass dies"
    fix = (
        f"sudo apt install {package} (the CPython headers), or export TORCH_DISABLE_NATIVE_JIT=1 (eager ops)"
    )
    if not on_spark:
        out.note(f"{text}; fix: {fix}")
        return
    out.flag(Status.FAIL if native else Status.WARN, text, fix,
             headline="no Python.h: Triton cannot build its launcher", short_fix=f"apt install {package}",
             code="G7.python-h-missing")


def _compile_stage(f: Facts, on_spark: bool, out: Findings) -> tuple[str, bool]:
    """``(text, decided)``: the compile of one Triton kernel for cuda 121 (N1); ``decided`` when
    it ran to an outcome (then the ptxas release is only a reading)."""
    tc = f.triton_compile
    if tc is None:
        return "", False
    dist = tc.get("dist", "triton")
    if tc.get("import_error"):
        why = tc["import_error"]
        out.note(f"{dist} installed but not importable in the checked Python ({why}): nothing compiled")
        return "", False
    _python_h(f, tc, on_spark, out)
    if "ok" not in tc:
        why = tc.get("api_error") or tc.get("child") or "the child gave no outcome"
        out.note(f"{dist}: no compile for sm_121a ({why})")
        return "", False
    if tc.get("child"):
        out.note(tc["child"])
    if not tc["ok"]:
        _compile_failed(f, tc, on_spark, out)
        return "", True
    out.read("triton_sm121_compile", "ok")
    seconds = tc.get("seconds", "?")
    out.note(f"{dist} compiled a kernel for sm_121a in {seconds} s with {_ptxas_text(tc)}, not launched")
    return f"{dist} compiles for sm_121a", True


def _fp8_stage(f: Facts, precision: str | None, floor: float, out: Findings) -> None:
    """What FP8 needs on SM12x, from the installed versions and cubins (a reading, not a run):
    cuBLASLt block-scaled FP8 is TN-only on cc 12.x below cuBLAS 13.6 (pytorch PR #198188,
    #192707), and vLLM's FP8 CUTLASS kernels need a cubin that runs on 12.1."""
    cublas = f.cublas or {}
    release = cublas.get("release")
    shown = f"{release[0]}.{release[1]}" if release else None
    out.read("cublas_release", shown)
    out.read("vllm_version", f.vllm)
    below = bool(release) and tuple(release or ()) < _release_floor(floor)
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
            f"--spark-precision fp8 with cuBLAS {shown} ({cublas.get('source')}): block-scaled and per-row "
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
    libs = [x for x in f.libs if x.get("dist", "").startswith("vllm ") and x.get("targets")]
    if not libs:
        out.note(f"vllm {f.vllm}: its cubins were not listed, its FP8 kernels not judged")
        return
    archs = [a for x in libs for t in x["targets"] for a in parse_arch(t)]
    sm121 = [a for a in archs if (a.major, a.minor) == SM121]
    runnable = [a for a in archs if runs_on_sm121(a)]
    if sm121:
        out.note(
            f"vllm {f.vllm} carries {_names(sm121)} cubins: its FP8 kernels are built for 12.1; if they stop "
            "with 'This kernel only supports sm120.', the build guards with enable_sm120_only "
            "(eugr/spark-vllm-docker#143)"
        )
    elif runnable:
        out.note(f"vllm {f.vllm}: FP8 kernels run through its {_names(runnable)} cubins")
    else:
        archs_text = _names(archs)
        out.warn(f"--spark-precision fp8, but vllm {f.vllm} has no cubin that runs on SM121 ({archs_text}): "
                 "its FP8 CUTLASS GEMMs were not built for 12.x ('Not building scaled_mm_c3x_120 as no "
                 "compatible archs found')", "install a vLLM built for 12.0/12.1 (TORCH_CUDA_ARCH_LIST=12.1a "
                 "when building; vllm PR #38484), or an NGC vLLM container",
                 headline=f"vllm {f.vllm} has no FP8 kernel for SM121", short_fix="a vLLM built for 12.1",
                 code="G7.vllm-no-fp8-kernel")


def evaluate(facts: Facts, params: Params) -> Result:
    """Decide G7 (pure): can torch run on SM121, and, where the stack uses
    NVFP4 or Triton, do its kernels and ptxas know SM121?"""
    skip, caps = _gpu(facts)
    if skip is not None:
        if caps and (facts.triton_compile is not None or params.option("precision")):
            # on another GPU, what this Triton would do on a Spark, beside the SKIP
            aside = Findings("G7")
            _compile_stage(facts, False, aside)
            skip.readings.extend(aside.readings)
            skip.details.extend(aside.details)
            skip.details.append("the FP8 and NVFP4 findings are SM12x's: they do not apply here")
        return skip
    out = Findings("G7")
    gpu = f"{next(n for n, c in caps if c == SM121)} is SM121 (12.1)"
    torch_archs, env_archs = _arch_lists(facts, caps, out)
    torch_text, runs = _torch_stage(facts, torch_archs, out)
    env_text = _env_stage(facts, env_archs, out)
    precision = params.option("precision")
    lib_text = _nvfp4_stage(facts, precision, [*torch_archs, *env_archs], out)
    compile_text, compiled = _compile_stage(facts, True, out)
    ptxas_text = _triton_stage(facts, params.threshold("g7_triton_ptxas_min"), out, compiled)
    _fp8_stage(facts, precision, params.threshold("g7_cublas_fp8_min"), out)
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
        return f"SM121 found; {_who(f)}'s build unknown ({_unknown_why(f)[:64]})"
    cubins = [a for a in archs if runs_on_sm121(a) and a.kind == "sm"]
    return f"{_who(f)} runs on SM121 through " + (f"its {_names(cubins)} cubins" if cubins else "PTX JIT")


def _unknown_why(f: Facts) -> str:
    """Why torch's arch list is unknown: its error, else whether torch imported at all."""
    if f.arch_list_error:
        return f.arch_list_error
    return "arch list not read" if f.torch_version else "torch not importable"
