"""What G7 reads of the machine: the kernel libraries' cubin targets (cuobjdump), the ptxas Triton
compiles SM121 kernels with, one Triton compile for capability 121 in a child, the cuBLAS release,
and torch's build as the run's torch child saw it. Each raw answer (the NVML snapshot, the torch
and Triton children) becomes a record here, once; :mod:`.check` assembles the facts."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import field
from typing import Any

from pytest_dgx_spark.checks.g07_nvfp4.arch import cublas_release, parse_cuobjdump, ptxas_release
from pytest_dgx_spark.checks.g07_nvfp4.facts import Cublas, Device, Facts, Lib, TritonCompile, TritonPtxas
from pytest_dgx_spark.checks.kit import CheckContext
from pytest_dgx_spark.checks.record import FactsError, Record
from pytest_dgx_spark.datadef import define
from pytest_dgx_spark.probes import elf
from pytest_dgx_spark.probes.commands import find_program
from pytest_dgx_spark.probes.dist_files import owners_for
from pytest_dgx_spark.probes.packages import canonical

#: distributions whose shared objects carry NVFP4 kernels (sglang-kernel: sgl-kernel's name
#: from 0.4, error_nvfp4_2.txt)
NVFP4_DISTS = ("vllm", "flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache", "tensorrt-llm",
               "sgl-kernel", "sglang-kernel")
CUBLAS_DISTS = ("nvidia-cublas", "nvidia-cublas-cu13", "nvidia-cublas-cu12")
MAX_LIBS = 8
MAX_LIBS_PER_DIST = 3
TRITON_DISTS = ("triton", "pytorch-triton")  # they install triton/backends/nvidia/bin/ptxas


@define
class Nvml(Record):
    """What G7 reads of the NVML snapshot (:meth:`Machine.nvml`)."""

    ok: bool = False
    reason: str | None = None
    missing: bool = False
    no_gpu: bool = False
    devices: list[Device] = field(default_factory=list)

    @classmethod
    def read(cls, snapshot: Mapping[str, Any]) -> Nvml:
        return cls.from_dict_or_saying(snapshot, "reason", "the NVML answer is not what G7 reads")


@define
class TorchChild(Record):
    """What G7 reads of the run's torch child (probes/scripts/torch_child.py)."""

    capability: list[int] | None = None
    device_name: str | None = None
    torch_version: str | None = None
    torch_cuda: str | None = None
    arch_list: list[str] | None = None
    arch_list_error: str | None = None
    torch_import_error: str | None = None
    cuda_available: bool | None = None
    cuda_error: str | None = None


def dists_of(machine: Any) -> dict[str, Any]:
    """The installed distributions by canonical name (``{name, version, location, …}``)."""
    return dict(machine.packages().get("dists") or {})


def _cuda_homes(env: Mapping[str, str]) -> list[str]:
    homes = (env.get("CUDA_HOME"), env.get("CUDA_PATH"), "/usr/local/cuda")
    return [h for h in homes if h and os.path.isabs(h)]


def _find_cuobjdump(env: dict[str, str]) -> str | None:
    tools = [os.path.join(home, "bin", "cuobjdump") for home in _cuda_homes(env)]
    # absolute PATH entries only: never the working folder's
    return find_program("cuobjdump", env) or next((t for t in tools if os.access(t, os.X_OK)), None)


def _kernel_libraries(ctx: CheckContext) -> tuple[list[str], list[tuple[str, str]]]:
    """``(installed NVFP4 dists, [(dist label, path)])``, largest files first."""
    dists = dists_of(ctx.machine)
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
    dists = dists_of(machine)
    return next((dists[k] for k in TRITON_DISTS if k in dists), None)


def triton_ptxas(ctx: CheckContext) -> TritonPtxas | None:
    """The ptxas Triton would run for an SM121 kernel, and its release."""
    machine = ctx.machine
    dist = _triton_dist(machine)
    if dist is None:
        return None
    out = TritonPtxas(dist=f"{dist['name']} {dist['version']}")
    location = str(dist["location"] or "")  # packages.list_distributions writes it, "" when unknown
    if not os.path.isabs(location):
        out.error = "its install folder is unknown (no dist-info path)"
        return out
    bin_dir = os.path.join(os.path.dirname(location), "triton", "backends", "nvidia", "bin")
    blackwell = os.path.isfile(os.path.join(bin_dir, "ptxas-blackwell"))
    # the variable's name is written out here: tests/test_hermetic.py finds every variable read by its literal
    binary, env_name = ("ptxas-blackwell", "TRITON_PTXAS_BLACKWELL_PATH") if blackwell else ("ptxas", "TRITON_PTXAS_PATH")
    override = machine.env.get(env_name) or ""
    path = override if os.path.isfile(override) else os.path.join(bin_dir, binary)
    out.binary, out.path, out.env = binary, path, env_name if path == override else None
    if not os.path.isfile(path):
        out.error = f"no {binary} in {bin_dir}"
        return out
    res = machine.command([path, "--version"], timeout=machine.timeout)
    out.release = ptxas_release(res.stdout + "\n" + res.stderr)
    if out.release is None:
        out.error = f"`{binary} --version` gave no release: {res.describe()}"
    return out


def triton_compile(ctx: CheckContext) -> TritonCompile | None:
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
    label = f"{dist['name']} {dist['version']}"
    try:
        out = TritonCompile.from_dict({**child.data, "dist": label})
    except FactsError as exc:
        out = TritonCompile(dist=label, child=f"the Triton compile child's answer is of another shape ({exc})")
    if _imported_elsewhere(out.triton_file, machine.python_path()):
        return None  # the child found another Triton than the checked environment's: no verdict from it
    if not child.ok:
        out.child = child.describe("the Triton compile child")
    return out


def _imported_elsewhere(triton_file: str | None, paths: Sequence[str]) -> bool:
    """Whether the child's ``import triton`` came from outside the checked import path (the
    interpreter's own site-packages shadowing a checked environment that holds only Triton's
    metadata): the package list and the compile would then speak of two Tritons."""
    if not triton_file or not paths:
        return False
    where = os.path.realpath(triton_file)
    return not any(where.startswith(os.path.realpath(p).rstrip(os.sep) + os.sep) for p in paths if p)


def cublas(machine: Any, dists: Mapping[str, Any]) -> Cublas | None:
    """The cuBLAS FP8 GEMMs load: a pip ``nvidia-cublas`` wheel (what torch wheels use), else the
    ``libcublasLt.so.X.Y`` of the CUDA toolkit (an NGC image)."""
    key = next((k for k in CUBLAS_DISTS if k in dists), None)
    if key:
        version = str(dists[key]["version"])
        return Cublas(f"{dists[key]['name']} {version}", cublas_release(version))
    for folder in (os.path.join(home, "lib64") for home in _cuda_homes(machine.env)):
        try:  # through the host root, as every reading of the machine's files
            names = sorted(n for n in os.listdir(machine.path(folder)) if n.startswith("libcublasLt.so."))
        except OSError:
            continue
        releases = [(r, n) for n in names if (r := cublas_release(n))]
        if releases:
            release, name = max(releases)
            return Cublas(os.path.join(folder, name), release)
    return None


def gather_torch(ctx: CheckContext, facts: Facts) -> None:
    child = ctx.torch()  # the run's one torch child; it already exists when G1/G2 ran
    try:
        d = TorchChild.from_dict(child.data)
    except FactsError as exc:
        d = TorchChild(arch_list_error=f"the torch child's answer is of another shape ({exc})")
    facts.torch_capability, facts.torch_device = d.capability, d.device_name
    facts.torch_version, facts.torch_cuda = d.torch_version, d.torch_cuda
    facts.arch_list = d.arch_list
    facts.arch_list_error = d.arch_list_error or d.torch_import_error
    if facts.arch_list is None and not facts.arch_list_error and not child.ok:
        facts.arch_list_error = child.describe("torch child")  # hung or killed, not "not importable"
    unreachable = facts.torch_cuda and d.cuda_available is False
    if not facts.arch_list and not facts.arch_list_error and unreachable:
        # get_arch_list() is [] whenever CUDA is unavailable: that says nothing of its targets (G1 names why)
        why = str(d.cuda_error or "torch.cuda.is_available() is False")
        facts.arch_list_error = f"{why[:120]}; see G1"


def gather_libraries(ctx: CheckContext, facts: Facts) -> None:
    machine = ctx.machine
    facts.libs_installed, libs = _kernel_libraries(ctx)
    facts.cuobjdump = _find_cuobjdump(machine.env) if libs else None
    if facts.cuobjdump is None:
        return
    deadline = time.monotonic() + machine.timeout * 3
    for label, path in libs:
        entry = Lib(dist=label, path=path)
        if time.monotonic() > deadline:
            entry.error = "not inspected (time budget spent)"
        else:
            res = machine.command([facts.cuobjdump, "--list-elf", path], timeout=machine.timeout)
            if res.ok:
                entry.targets = parse_cuobjdump(res.stdout)
            elif "does not contain device code" in res.stdout + "\n" + res.stderr:
                entry.targets = []
            else:
                entry.error = res.describe()
        facts.libs.append(entry)
