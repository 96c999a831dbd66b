"""G1's reading of the machine: the ELF scan and who owns each file, ldconfig, ``LD_LIBRARY_PATH``,
NVML, the torch child (which ``dlopen``\\ s the extension objects :func:`load_list` names) and the
driver stack through the host root. It decides nothing; a file that cannot be read is said."""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import field
from typing import Any

from pytest_dgx_spark import known_bad
from pytest_dgx_spark.checks.g01_cuda_abi.facts import Facts, Load, Owner, Provider, Scan, TorchData
from pytest_dgx_spark.checks.g01_cuda_abi.view import rel, variant_of
from pytest_dgx_spark.checks.kit import CheckContext, child_facts
from pytest_dgx_spark.checks.record import Record
from pytest_dgx_spark.datadef import define
from pytest_dgx_spark.probes import elf
from pytest_dgx_spark.probes.commands import find_program
from pytest_dgx_spark.probes.dist_files import owners_for
from pytest_dgx_spark.probes.machine import MachineLike
from pytest_dgx_spark.probes.packages import canonical

#: distributions whose objects are never loaded (the static scan still covers their files)
NOT_LOADED = {
    "torch": "loaded by import torch, first",
    "tensorrt-llm": "its libraries initialise MPI when loaded",
    "tensorrt": "loaded by tensorrt-llm",
}
MAX_LOADS = 400


@define
class NvmlSeen(Record):
    """What G1 reads of the NVML snapshot: ``ok`` and ``reason`` as the snapshot sets them, the
    versions as the NVML child wrote them (checked where they are used)."""

    ok: bool = False
    reason: str | None = None
    devices: list[dict[str, Any]] = field(default_factory=list)
    driver_version: Any = None
    cuda_driver_version: Any = None  # an int, 13000
    nvml_version: Any = None  # "13.580.173.02"
    init_error: Any = None  # NVML's error name when nvmlInit failed


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def static(ctx: CheckContext) -> tuple[Scan, dict[str, Owner], dict[str, Any]]:
    """The scan, the owners of the files it names, the installed distributions."""
    scan = elf.scan_environment(ctx.machine)
    paths = {x.path for x in scan.objects}
    found: dict[str, Any] = owners_for(ctx.machine, scan.roots)["owners"] if paths else {}
    return scan, {p: Owner.from_dict(found[p]) for p in paths if p in found}, ctx.machine.packages()


def load_list(scan: Scan, owners: Mapping[str, Owner]) -> list[Load]:
    """The extension objects the torch child ``dlopen``\\ s: CUDA- or libtorch-linked, not
    torch's own nor a toolkit library; a set of alternatives carries its group."""
    entries: list[Load] = []
    for x in [*scan.linkers, *scan.torch_linked]:
        owner = owners.get(x.path) or Owner()
        key, name = canonical(owner.name), rel(x.path, x.root)
        if key not in NOT_LOADED and not key.startswith("nvidia-") and not name.startswith("torch/"):
            entries.append(Load(x.path, name, owner.hint))
    _group_cuda_builds(entries)
    _group_arch_builds(entries)
    return entries[:MAX_LOADS]


def _group_cuda_builds(entries: list[Load]) -> None:
    """A per-CUDA-version set (``libbitsandbytes_cuda126.so``, ``…_cuda130.so``): its group and tags."""
    groups = Counter(v[0] for e in entries if (v := variant_of(e.path)))
    for e in entries:
        if (v := variant_of(e.path)) and groups[v[0]] > 1:
            e.group, e.tag = v


def _group_arch_builds(entries: list[Load]) -> None:
    """One package's objects of one name in several folders (sgl-kernel's sm90/, sm100/) are
    alternatives (loading two registers one torch op library twice, which aborts): the child
    loads the smNN closest to the GPU's capability from below, else the first."""
    same: dict[tuple[str, str], list[Load]] = {}
    for e in entries:
        if not e.group:
            same.setdefault((e.name.split("/", 1)[0], os.path.basename(e.path)), []).append(e)
    for (top, base), members in same.items():
        for e in members if len(members) > 1 else []:
            sm = re.search(r"(?:^|/)sm_?(\d{2,3})[a-z]?/", e.name)
            e.group, e.sm = f"{top}/*/{base}", int(sm.group(1)) if sm else None


def torch_request(ctx: CheckContext) -> dict[str, Any]:
    """Ask the torch child to load every CUDA- or libtorch-linked extension object."""
    scan, owners, _ = static(ctx)
    return {"load": [e.request() for e in load_list(scan, owners)]}


def gather(ctx: CheckContext) -> Facts:
    machine = ctx.machine
    scan, all_owners, packages = static(ctx)  # the owners of the files the scan names
    ldconfig, ldconfig_error = _ldconfig(machine)
    nv = NvmlSeen.from_dict(machine.nvml())
    child = ctx.torch()
    dists: dict[str, Any] = packages["dists"]
    library_path = machine.env.get("LD_LIBRARY_PATH", "")
    return Facts(
        scan=scan,
        owners=all_owners,
        ldconfig=ldconfig,
        ldconfig_error=ldconfig_error,
        ld_library_path=elf.list_library_dirs(d for d in library_path.split(os.pathsep) if d),
        dists={
            k: Owner(v["name"], v["version"])
            for k, v in dists.items()
            if k == "torch" or (k.startswith("nvidia-") and re.search(r"-cu\d+$", k))
        },
        driver_cuda=nv.cuda_driver_version if isinstance(nv.cuda_driver_version, int) else None,
        driver_version=_text(nv.driver_version),
        nvml_reason=None if nv.ok and nv.devices else nv.reason,
        gpus=[str(d.get("name") or "GPU") for d in nv.devices],
        arch=machine.identity().get("arch"),
        torch=TorchData.from_dict(child.data),
        child=child_facts(child),
        requested=load_list(scan, all_owners),
        **_stack_facts(ctx),
    )


def _stack_facts(ctx: CheckContext) -> dict[str, Any]:
    """The driver stack through the host root; a file that cannot be read is said (never a verdict)."""
    machine = ctx.machine
    release, release_error = machine.read_text("/proc/sys/kernel/osrelease", 4096)
    release = next(iter((release or "").strip().splitlines()), "")[:200]  # one line, however garbled
    nvrm, module_error = _nvrm_line(machine)
    mem, nv = machine.meminfo(), NvmlSeen.from_dict(machine.nvml())
    entries, errors = _known_bad(ctx)
    cma = mem["fields"]
    return {
        "stack_read": True,
        "kernel_release": release or None,
        "kernel_release_error": release_error or (None if release else "/proc/sys/kernel/osrelease is empty"),
        "nvidia_module": nvrm,
        "nvidia_module_error": module_error,
        "cma_kb": {k: cma[k] for k in ("CmaTotal", "CmaFree") if k in cma},
        "meminfo_error": mem["error"],
        "nvml_init_error": _text(nv.init_error),
        "nvml_version": _text(nv.nvml_version),
        "known_bad": entries,
        "known_bad_errors": errors,
    }


def _nvrm_line(machine: MachineLike) -> tuple[str | None, str | None]:
    """The ``NVRM version:`` line of /proc/driver/nvidia/version, or why there is none."""
    module, error = machine.read_text("/proc/driver/nvidia/version", 65536)
    nvrm = next((line.strip() for line in (module or "").splitlines() if line.startswith("NVRM version:")), None)
    if module is not None and nvrm is None:
        error = "/proc/driver/nvidia/version has no 'NVRM version:' line"
    return (nvrm[:300] if nvrm else None), error


def _known_bad(ctx: CheckContext) -> tuple[list[known_bad.Entry], list[str]]:
    """The shipped list and the user's files (one changed since the options were read is said)."""
    entries, errors = known_bad.shipped(), []
    for path in ctx.settings.known_bad:
        try:
            entries += known_bad.load(path)
        except known_bad.KnownBadError as exc:
            errors.append(str(exc))
    return entries, errors


def _ldconfig(machine: MachineLike) -> tuple[list[Provider], str | None]:
    """``ldconfig -p``: on PATH (absolute entries only), else where Debian and RHEL keep it."""
    on_path = ["ldconfig"] if find_program("ldconfig", machine.env) else []
    found = on_path or [c for c in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if os.access(c, os.X_OK)]
    if not found:
        return [], "ldconfig not found"
    res = machine.command([found[0], "-p"], timeout=machine.timeout)
    return (elf.parse_ldconfig(res.stdout), None) if res.ok else ([], res.describe())
