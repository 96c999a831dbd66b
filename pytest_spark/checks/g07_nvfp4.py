"""G7 — NVFP4 vs FP8 on SM121: does anything installed target ``sm_121a``?

GB10 reports capability (12, 1). Stock cu130 torch wheels list no sm_121
(GB10 runs the sm_120 cubins), and FP4 conversion instructions are only
available to arch-specific (``a``) or family (``f``) targets; whether SM12x
has a fast native path at all is contested (EVIDENCE.md G7: CUTLASS and vLLM
ship software fallbacks). So this check reports what was built for the GPU,
not a speed: the capability from NVML (no torch needed), torch's arch list
from the torch child, ``TORCH_CUDA_ARCH_LIST``, and — where ``cuobjdump``
exists — the cubin targets of installed NVFP4 kernel libraries (vLLM,
FlashInfer, TensorRT-LLM, sgl-kernel). No ``sm_121a`` anywhere: stay on FP8.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from pytest_spark.checks.kit import CheckContext
from pytest_spark.model import Reading, Result, Status
from pytest_spark.probes import elf
from pytest_spark.probes.dist_files import owners_for
from pytest_spark.probes.packages import canonical

SM121 = (12, 1)
#: distributions whose shared objects carry NVFP4 kernels
NVFP4_DISTS = (
    "vllm",
    "flashinfer-python",
    "flashinfer-cubin",
    "flashinfer-jit-cache",
    "tensorrt-llm",
    "sgl-kernel",
)
MAX_LIBS = 8
MAX_LIBS_PER_DIST = 3

#: torch's TORCH_CUDA_ARCH_LIST names (torch/utils/cpp_extension.py)
NAMED_ARCHS = {
    "kepler": ["3.5", "3.7"],
    "maxwell": ["5.0", "5.2"],
    "pascal": ["6.0", "6.1"],
    "volta": ["7.0"],
    "turing": ["7.5"],
    "ampere": ["8.0", "8.6"],
    "ada": ["8.9"],
    "hopper": ["9.0"],
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
    """Parse one arch name defensively; unknown text gives ``[]``.

    ``sm_121a``, ``sm_120f``, ``compute_121a``, ``lto_90a``, ``12.0a``, ``12.1+PTX``
    (an sm and a compute target), ``9.0``, ``90`` and ``121``.
    """
    text = token.strip().lower()
    m = _SM.match(text)
    if not m:
        return []
    kind, digits, minor_text, suffix, ptx = m.groups()
    if minor_text is not None:  # "12.1a"
        major, minor = int(digits), int(minor_text)
    elif len(digits) >= 2:  # "121" / sm_90
        major, minor = int(digits[:-1]), int(digits[-1])
    else:
        return []
    kind = "compute" if kind == "compute" else "sm"
    out = [Arch(major, minor, suffix, kind)]
    if ptx:
        out.append(Arch(major, minor, suffix, "compute"))
    return out


def parse_arch_list(text: str | list[str] | None) -> tuple[list[Arch], list[str]]:
    """A list (torch) or a ``TORCH_CUDA_ARCH_LIST`` string (``"9.0a;12.1a 12.0+PTX"``).

    Returns ``(archs, unparsed tokens)``; named generations (``Hopper``) expand.
    """
    if text is None:
        return [], []
    tokens = text if isinstance(text, list) else re.split(r"[;,\s]+", text)
    archs: list[Arch] = []
    bad: list[str] = []
    for raw in tokens:
        token = str(raw).strip()
        if not token:
            continue
        named = NAMED_ARCHS.get(token.lower().replace("+ptx", ""))
        if named:
            for n in named:
                archs.extend(parse_arch(n + ("+PTX" if token.lower().endswith("+ptx") else "")))
            continue
        parsed = parse_arch(token)
        if parsed:
            archs.extend(parsed)
        else:
            bad.append(token)
    return archs, bad


def targets_121a(archs: list[Arch]) -> bool:
    """An ``sm_121a`` cubin, or ``compute_121a`` PTX the driver compiles for SM121."""
    return any((a.major, a.minor, a.suffix) == (12, 1, "a") for a in archs)


def parse_cuobjdump(text: str) -> list[str]:
    """Cubin targets from ``cuobjdump --list-elf`` (``ELF file 1: x.sm_121a.cubin``)."""
    found: list[str] = []
    for line in text.splitlines():
        if "ELF file" not in line:
            continue
        for major_minor, suffix in _CUBIN.findall(line):
            name = f"sm_{major_minor}{suffix}"
            if name not in found:
                found.append(name)
    return found


@dataclass
class Facts:
    devices: list[dict[str, Any]] = field(default_factory=list)  # name, capability
    nvml_reason: str | None = None
    torch_capability: list[int] | None = None
    torch_device: str | None = None
    torch_version: str | None = None
    arch_list: list[str] | None = None
    arch_list_error: str | None = None
    env_arch_list: str | None = None
    cuobjdump: str | None = None  # the tool's path, or None when absent
    #: one entry per library inspected: dist, version, path, targets | error
    libs: list[dict[str, Any]] = field(default_factory=list)
    libs_installed: list[str] = field(default_factory=list)  # NVFP4 dists installed


def _find_cuobjdump(env: dict[str, str]) -> str | None:
    found = shutil.which("cuobjdump", path=env.get("PATH", os.defpath))
    if found:
        return found
    for home in (env.get("CUDA_HOME"), env.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            candidate = os.path.join(home, "bin", "cuobjdump")
            if os.access(candidate, os.X_OK):
                return candidate
    return None


def _kernel_libraries(ctx: CheckContext) -> tuple[list[str], list[tuple[str, str, str]]]:
    """``(installed NVFP4 dists, [(dist label, path, dist key)])``, largest files first."""
    dists = ctx.machine.packages().get("dists") or {}
    installed = [k for k in NVFP4_DISTS if k in dists]
    if not installed:
        return [], []
    scan = elf.scan_environment(ctx.machine)
    owners = owners_for(ctx.machine, scan.get("roots") or []).get("owners") or {}
    picked: list[tuple[int, str, str, str]] = []
    for key in installed:
        files = []
        for path, owner in owners.items():
            if canonical(owner["name"]) != key:
                continue
            try:
                files.append((os.path.getsize(path), path))
            except OSError:
                continue
        label = f"{dists[key]['name']} {dists[key]['version']}"
        for size, path in sorted(files, reverse=True)[:MAX_LIBS_PER_DIST]:
            picked.append((size, label, path, key))
    picked.sort(reverse=True)
    return [dists[k]["name"] for k in installed], [
        (label, path, key) for _, label, path, key in picked[:MAX_LIBS]
    ]


def gather(ctx: CheckContext) -> Facts:
    machine = ctx.machine
    nv = machine.nvml()
    facts = Facts(
        devices=[{"name": d.get("name"), "capability": d.get("capability")} for d in nv.get("devices") or []],
        nvml_reason=None if nv.get("ok") else nv.get("reason"),
        env_arch_list=machine.env.get("TORCH_CUDA_ARCH_LIST"),
    )
    caps = [tuple(d["capability"]) for d in facts.devices if d.get("capability")]
    # torch's view only when NVML answered nothing useful but a driver may be there
    # (hung, crashed); no driver library at all means no GPU for torch either.
    nvml_broken = not caps and not nv.get("missing") and not nv.get("no_gpu")
    if SM121 in caps or nvml_broken:
        child = ctx.torch()  # the run's one torch child; it already exists when G1/G2 ran
        d = child.data
        facts.torch_capability = d.get("capability")
        facts.torch_device = d.get("device_name")
        facts.torch_version = d.get("torch_version")
        facts.arch_list = d.get("arch_list")
        facts.arch_list_error = d.get("arch_list_error") or d.get("torch_import_error")
        if facts.arch_list is None and not facts.arch_list_error and not child.ok:
            facts.arch_list_error = child.describe("torch child")  # hung or killed, not "not importable"
    sm121 = SM121 in caps or (not caps and tuple(facts.torch_capability or ()) == SM121)
    if not sm121:
        return facts
    facts.libs_installed, libs = _kernel_libraries(ctx)
    if not libs:
        return facts
    facts.cuobjdump = _find_cuobjdump(machine.env)
    if facts.cuobjdump is None:
        return facts
    deadline = time.monotonic() + machine.timeout * 3
    for label, path, _key in libs:
        entry: dict[str, Any] = {"dist": label, "path": path}
        if time.monotonic() > deadline:
            entry["error"] = "not inspected (time budget spent)"
        else:
            res = machine.command([facts.cuobjdump, "--list-elf", path], timeout=machine.timeout)
            text = res.stdout + "\n" + res.stderr
            if res.ok:
                entry["targets"] = parse_cuobjdump(res.stdout)
            elif "does not contain device code" in text:
                entry["targets"] = []
            else:
                entry["error"] = res.describe()
        facts.libs.append(entry)
    return facts


def _names(archs: list[Arch]) -> str:
    return ", ".join(dict.fromkeys(a.name for a in archs))


def evaluate(f: Facts) -> Result:
    """Decide G7 (pure)."""
    caps = [(d.get("name") or "GPU", tuple(d["capability"])) for d in f.devices if d.get("capability")]
    source = "NVML"
    if not caps and f.torch_capability:
        caps = [(f.torch_device or "GPU", tuple(f.torch_capability))]
        source = "torch"
    if not caps:
        why = f.nvml_reason or "NVML lists no GPU"
        return Result("G7", Status.SKIP, f"no NVIDIA GPU found ({why}): NVFP4 on SM121 does not apply")
    readings = [Reading("capability", ", ".join(f"{c[0]}.{c[1]}" for _, c in caps))]
    sm121 = [(n, c) for n, c in caps if c == SM121]
    if not sm121:
        found = "; ".join(f"{n} has capability ({c[0]}, {c[1]})" for n, c in dict.fromkeys(caps))
        return Result(
            "G7",
            Status.SKIP,
            f"not SM121: {found} (from {source}); the NVFP4 vs FP8 question is GB10's",
            readings=readings,
        )

    details: list[str] = []
    torch_archs, torch_bad = parse_arch_list(f.arch_list)
    env_archs, env_bad = parse_arch_list(f.env_arch_list)
    for bad, where in ((torch_bad, "torch arch list"), (env_bad, "TORCH_CUDA_ARCH_LIST")):
        if bad:
            details.append(f"{where}: could not parse {', '.join(bad)}")
    readings.append(Reading("torch_arch_list", _names(torch_archs) or None))
    readings.append(Reading("torch_cuda_arch_list_env", f.env_arch_list))

    torch_text = (
        f"torch arch list {_names(torch_archs)}"
        if torch_archs
        else f"torch arch list unknown ({f.arch_list_error or 'torch not importable'})"
    )
    env_text = f"TORCH_CUDA_ARCH_LIST={f.env_arch_list}" if f.env_arch_list else "TORCH_CUDA_ARCH_LIST unset"
    family = [a for a in (*torch_archs, *env_archs) if a.major == 12 and a.suffix == "f"]
    if family:
        details.append(
            f"family targets {_names(family)} run on SM121; whether FP4 conversion is native there is contested"
        )

    inspected = [x for x in f.libs if "targets" in x]
    with_code = [x for x in inspected if x["targets"]]
    lib_121a = [x for x in with_code if "sm_121a" in x["targets"]]
    for x in f.libs:
        what = ", ".join(x["targets"]) if x.get("targets") else x.get("error") or "no device code (JIT)"
        details.append(f"{x['dist']} {os.path.basename(x['path'])}: {what}")
    readings.append(Reading("kernel_libraries_inspected", len(inspected)))
    readings.append(Reading("kernel_libraries_with_sm_121a", len(lib_121a)))
    if f.libs_installed and f.cuobjdump is None and not f.libs:
        lib_text = f"{', '.join(f.libs_installed)} installed but cuobjdump not found, so their cubins were not listed"
    elif with_code:
        lib_text = (
            f"sm_121a cubins in {', '.join(dict.fromkeys(x['dist'] for x in lib_121a))}"
            if lib_121a
            else "no sm_121a cubin in "
            + ", ".join(f"{x['dist']} ({', '.join(x['targets'][:6])})" for x in with_code[:3])
        )
    elif f.libs_installed:
        lib_text = f"{', '.join(f.libs_installed)}: no precompiled cubins listed"
    else:
        lib_text = "no NVFP4 kernel library installed (vLLM, FlashInfer, TensorRT-LLM)"

    gpu = f"{sm121[0][0]} is SM121 (12.1)"
    # Installed kernel libraries decide when they were listed; else the build settings do.
    if with_code:
        ok = bool(lib_121a)
    else:
        ok = targets_121a(torch_archs) or targets_121a(env_archs)
    summary = f"{gpu}; {torch_text}; {env_text}; {lib_text}"
    if ok:
        return Result(
            "G7", Status.PASS, f"{summary}: a build targets sm_121a", readings=readings, details=details
        )
    return Result(
        "G7",
        Status.WARN,
        f"{summary}: nothing installed targets sm_121a (GB10 runs sm_120 builds, without the arch-specific FP4 path)",
        "stay on FP8 for training and serving; use NVFP4 only with kernels built for sm_121a "
        "(TORCH_CUDA_ARCH_LIST=12.1a, a vLLM/FlashInfer build listing sm_121a) and measure it yourself",
        readings,
        details=details,
    )


def run(ctx: CheckContext) -> Result:
    return evaluate(gather(ctx))
