"""G1 — CUDA 12/13 ABI: find the module linked to the wrong CUDA major before it segfaults.

GB10 needs a CUDA 13 stack; most pip wheels were built for CUDA 12 and fail late (``libnvrtc.so.12:
cannot open shared object file``, an ``undefined symbol``, a SIGSEGV at the first ``.cuda()``), and
PyPI's aarch64 torch before 2.11 is CPU-only. Statically: the ``DT_NEEDED`` of every shared object in
the package folders, ldconfig's and ``LD_LIBRARY_PATH``'s CUDA libraries, each file's distribution;
dynamically: the torch child's tiny kernel, then a ``dlopen`` of every CUDA- or libtorch-linked
extension. Only cudart/cublas/cublasLt/nvrtc count (their major tracks CUDA's). The reference major is
torch's, else the driver's, else the profile's; a tie never blames the newer major. The driver stack
(kernel, module version and flavour, CMA, NVML; issue 22, N3) is matched against
:mod:`pytest_dgx_spark.known_bad`: a DGX OS update can break a box that passed the day before.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypedDict

from pytest_dgx_spark import known_bad, readings
from pytest_dgx_spark.checks.kit import (
    CheckContext,
    ChildFacts,
    FactsBase,
    Findings,
    Params,
    child_facts,
    count,
    first_n,
    plus_more,
)
from pytest_dgx_spark.model import SHORT_WIDTH, Result, Status
from pytest_dgx_spark.probes import elf
from pytest_dgx_spark.probes.commands import find_program
from pytest_dgx_spark.probes.dist_files import owners_for
from pytest_dgx_spark.probes.machine import MachineLike, format_cuda_version
from pytest_dgx_spark.probes.packages import canonical
from pytest_dgx_spark.probes.procfs import module_of

#: distributions whose objects are never loaded (the static scan still covers their files)
NOT_LOADED = {
    "torch": "loaded by import torch, first",
    "tensorrt-llm": "its libraries initialise MPI when loaded",
    "tensorrt": "loaded by tensorrt-llm",
}
MAX_LOADS = 400
#: steps of the torch child that belong to G1 ("load <object>", "import <package>" come on top)
G1_STEPS = ("import torch", "wait for the request", "cuda init", "tiny kernel")
CU_TAG = re.compile(r"\+cu(\d{2,3})(?![0-9])")
#: one build per CUDA version: libbitsandbytes_cuda118.so ... libbitsandbytes_cuda132.so
VARIANT = re.compile(r"^(?P<stem>.*?)cuda(?P<tag>\d{2,3})(?P<tail>(?:_[A-Za-z]\w*)?\.so.*)$")
TORCH_INDEX = "pip install torch --index-url https://download.pytorch.org/whl/cu130"
CANNOT_OPEN = re.compile(r"(\S+): cannot open shared object file")


class Linker(TypedDict, total=False):
    path: str
    root: str | None
    needs: list[str]  # the tracked CUDA libraries it links


class Provider(TypedDict, total=False):  # a CUDA runtime library: in a wheel, ldconfig, LD_LIBRARY_PATH
    path: str
    lib: str
    major: int


class Scan(TypedDict, total=False):  # the keys G1 reads of elf.scan_environment()
    roots: list[str]
    files: int
    skipped: dict[str, int]
    stopped: str | None
    linkers: list[Linker]
    providers: list[Provider]
    torch_linked: list[Linker]
    duration_s: float


class Owner(TypedDict, total=False):
    name: str
    version: str
    hint: str | None  # the importable module


class Load(TypedDict, total=False):  # a per-CUDA (tag) or per-arch (sm) set has a group
    path: str
    name: str
    module: str | None
    group: str
    tag: int
    sm: int | None


#: why an object did not load; "import": its package's import, "retry_ok": loaded once that ran
LoadFailure = TypedDict("LoadFailure", {"ok": bool, "error": str, "retry_ok": bool, "import": dict[str, str]}, total=False)


class TorchData(TypedDict, total=False):
    torch_version: str | None
    torch_cuda: str | None
    torch_import_error: str | None
    cuda_available: bool
    cuda_error: str
    device_count: int
    device_name: str
    kernel: dict[str, Any]
    loaded: int
    load_failed: dict[str, LoadFailure]
    variants: dict[str, str | None]  # group -> the path the child loaded


@dataclass
class Facts(FactsBase):
    scan: Scan = field(default_factory=lambda: Scan())
    owners: dict[str, Owner] = field(default_factory=dict)  # path -> owner, linkers and providers only
    ldconfig: list[Provider] = field(default_factory=list)
    ldconfig_error: str | None = None
    ld_library_path: list[Provider] = field(default_factory=list)
    dists: dict[str, Owner] = field(default_factory=dict)  # torch and the nvidia-*-cu* wheels
    driver_cuda: int | None = None
    driver_version: str | None = None
    nvml_reason: str | None = None
    gpus: list[str] = field(default_factory=list)
    arch: str | None = None  # platform.machine(): aarch64 PyPI torch before 2.11 is CPU-only
    torch: TorchData = field(default_factory=lambda: TorchData())
    child: ChildFacts = field(default_factory=lambda: ChildFacts())
    requested: list[Load] = field(default_factory=list)
    # the driver stack (issue 22, N3); an older capture has none of it (``stack_read`` False)
    stack_read: bool = False
    kernel_release: str | None = None  # /proc/sys/kernel/osrelease
    kernel_release_error: str | None = None
    nvidia_module: str | None = None  # the NVRM line of /proc/driver/nvidia/version
    nvidia_module_error: str | None = None
    cma_kb: dict[str, int] = field(default_factory=dict)  # CmaTotal, CmaFree of /proc/meminfo
    meminfo_error: str | None = None
    nvml_init_error: str | None = None  # NVML's error name when nvmlInit failed
    nvml_version: str | None = None  # "13.580.173.02": the CUDA major, then the driver's version
    known_bad: list[known_bad.Entry] = field(default_factory=list)  # the list this run decided with
    known_bad_errors: list[str] = field(default_factory=list)

    #: an older capture lacks these: their defaults skip the stack stage, so it decides as its run did
    ADDED: ClassVar[Mapping[str, str]] = dict.fromkeys(
        ("stack_read", "kernel_release", "kernel_release_error", "nvidia_module", "nvidia_module_error", "cma_kb",
         "meminfo_error", "nvml_init_error", "nvml_version", "known_bad", "known_bad_errors"),
        "issue 22: the driver stack and the known-bad list",
    )  # fmt: skip


FACTS = Facts


# ---------------------------------------------------------------------- gathering


def _static(ctx: CheckContext) -> tuple[Scan, dict[str, Owner], dict[str, Any]]:
    scan: Scan = elf.scan_environment(ctx.machine)  # type: ignore[assignment]
    interesting = scan.get("linkers") or scan.get("providers") or scan.get("torch_linked")
    owners = owners_for(ctx.machine, scan.get("roots") or []) if interesting else {}
    return scan, owners.get("owners") or {}, ctx.machine.packages()


def variant_of(path: str) -> tuple[str, int] | None:
    """``…/libbitsandbytes_cuda130.so`` -> (``…/libbitsandbytes_cuda*.so``, 130)."""
    m = VARIANT.match(os.path.basename(path))
    return (os.path.join(os.path.dirname(path), f"{m['stem']}cuda*{m['tail']}"), int(m["tag"])) if m else None


def load_list(scan: Scan, owners: Mapping[str, Owner]) -> list[Load]:
    """The extension objects the torch child ``dlopen``\\ s: CUDA- or libtorch-linked, not
    torch's own nor a toolkit library; a per-CUDA-version set carries its group."""
    entries: list[Load] = []
    for x in [*(scan.get("linkers") or []), *(scan.get("torch_linked") or [])]:
        owner = owners.get(x["path"]) or Owner()
        key, rel = canonical(str(owner.get("name") or "")), _rel(x["path"], x.get("root"))
        if key not in NOT_LOADED and not key.startswith("nvidia-") and not rel.startswith("torch/"):
            entries.append({"path": x["path"], "name": rel, "module": owner.get("hint")})
    groups = Counter(v[0] for e in entries if (v := variant_of(e["path"])))
    for e in entries:
        if (v := variant_of(e["path"])) and groups[v[0]] > 1:
            e["group"], e["tag"] = v
    # one package's objects of one name in several folders (sgl-kernel's sm90/, sm100/) are
    # alternatives (loading two registers one torch op library twice, which aborts): the child
    # loads the smNN closest to the GPU's capability from below, else the first
    same: dict[tuple[str, str], list[Load]] = {}
    for e in entries:
        if not e.get("group"):
            same.setdefault((e["name"].split("/", 1)[0], os.path.basename(e["path"])), []).append(e)
    for (top, base), members in same.items():
        for e in members if len(members) > 1 else []:
            sm = re.search(r"(?:^|/)sm_?(\d{2,3})[a-z]?/", e["name"])
            e["group"], e["sm"] = f"{top}/*/{base}", int(sm.group(1)) if sm else None
    return entries[:MAX_LOADS]


def torch_request(ctx: CheckContext) -> dict[str, Any]:
    """Ask the torch child to load every CUDA- or libtorch-linked extension object."""
    scan, owners, _ = _static(ctx)
    return {"load": load_list(scan, owners)}


def gather(ctx: CheckContext) -> Facts:
    machine = ctx.machine
    scan, all_owners, packages = _static(ctx)
    paths = {x["path"] for k in ("linkers", "providers", "torch_linked") for x in scan.get(k) or []}  # type: ignore[attr-defined]
    ldconfig, ldconfig_error = _ldconfig(machine)
    nv = machine.nvml()
    devices = nv.get("devices") or []
    child = ctx.torch()
    return Facts(
        scan=scan,
        owners={p: all_owners[p] for p in paths if p in all_owners},
        ldconfig=ldconfig,
        ldconfig_error=ldconfig_error,
        ld_library_path=elf.list_library_dirs(d for d in machine.env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d),  # type: ignore[arg-type]
        dists={
            k: Owner(name=v.get("name"), version=v.get("version"))
            for k, v in (packages.get("dists") or {}).items()
            if k == "torch" or (k.startswith("nvidia-") and re.search(r"-cu\d+$", k))
        },
        driver_cuda=nv.get("cuda_driver_version") if isinstance(nv.get("cuda_driver_version"), int) else None,
        driver_version=nv.get("driver_version"),
        nvml_reason=None if nv.get("ok") and devices else nv.get("reason"),
        gpus=[str(d.get("name") or "GPU") for d in devices],
        arch=machine.identity().get("arch"),
        torch=dict(child.data),  # type: ignore[arg-type]
        child=child_facts(child),
        requested=load_list(scan, all_owners),
        **_stack_facts(ctx),
    )


def _stack_facts(ctx: CheckContext) -> dict[str, Any]:
    """The driver stack through the host root; a file that cannot be read is said (never a verdict)."""
    machine = ctx.machine
    release, release_error = machine.read_text("/proc/sys/kernel/osrelease", 4096)
    module, module_error = machine.read_text("/proc/driver/nvidia/version", 65536)
    nvrm = next((line.strip() for line in (module or "").splitlines() if line.startswith("NVRM version:")), None)
    if module is not None and nvrm is None:
        module_error = "/proc/driver/nvidia/version has no 'NVRM version:' line"
    release = next(iter((release or "").strip().splitlines()), "")[:200]  # one line, however garbled
    mem, nv = machine.meminfo(), machine.nvml()
    entries, errors = known_bad.shipped(), []
    for path in ctx.settings.known_bad:
        try:
            entries += known_bad.load(path)
        except known_bad.KnownBadError as exc:  # changed since the options were read
            errors.append(str(exc))
    return {
        "stack_read": True,
        "kernel_release": release or None,
        "kernel_release_error": release_error or (None if release else "/proc/sys/kernel/osrelease is empty"),
        "nvidia_module": nvrm[:300] if nvrm else None,
        "nvidia_module_error": module_error,
        "cma_kb": {k: v for k, v in (mem.get("fields") or {}).items() if k in ("CmaTotal", "CmaFree")},
        "meminfo_error": mem.get("error"),
        "nvml_init_error": nv.get("init_error"),
        "nvml_version": nv.get("nvml_version") if isinstance(nv.get("nvml_version"), str) else None,
        "known_bad": entries,
        "known_bad_errors": errors,
    }


def _ldconfig(machine: MachineLike) -> tuple[list[Provider], str | None]:
    """``ldconfig -p``: on PATH (absolute entries only), else where Debian and RHEL keep it."""
    on_path = ["ldconfig"] if find_program("ldconfig", machine.env) else []
    found = on_path or [c for c in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if os.access(c, os.X_OK)]
    if not found:
        return [], "ldconfig not found"
    res = machine.command([found[0], "-p"], timeout=machine.timeout)
    return (elf.parse_ldconfig(res.stdout), None) if res.ok else ([], res.describe())  # type: ignore[return-value]


# ---------------------------------------------------------------------- small helpers


def cuda_major(version: object) -> int | None:
    """``"13.0"`` -> 13; ``None``/junk -> ``None``."""
    try:
        return int(str(version).split(".", 1)[0])
    except (TypeError, ValueError):
        return None


def tag_major(torch_version: str | None) -> int | None:
    """``2.11.0+cu130`` -> 13, ``2.7.0+cu128`` -> 12; NGC's ``+…nv25.09`` -> ``None``."""
    m = CU_TAG.search(torch_version or "")
    return int(m.group(1)[:-1]) if m else None


def pick_variant(tags: Iterable[int], cuda: str | None) -> int | None:
    """The build a per-CUDA-version package picks for ``cuda`` (``"13.0"`` -> 130): the exact
    one, else the newest of that major not above it, else the newest of that major."""
    try:
        major, minor = (int(x) for x in str(cuda).split(".")[:2])
    except ValueError:
        return None
    same = sorted(t for t in tags if t // 10 == major)
    want = major * 10 + minor
    picked = [t for t in same if t == want] or [t for t in same if t <= want] or same
    return picked[-1] if picked else None


def _version(tag: int) -> str:
    return f"{tag // 10}.{tag % 10}"


def _rel(path: str, root: str | None) -> str:
    prefix = (root or "").rstrip(os.sep) + os.sep
    return path[len(prefix) :] if root and path.startswith(prefix) else path


def _owned(owner: Owner | None, name: str) -> str:
    return f"{owner['name']} {owner['version']}" if owner else f"{name} (no installed distribution lists it)"


def _who(x: Linker, owners: Mapping[str, Owner]) -> str:
    return _owned(owners.get(x["path"]), _rel(x["path"], x.get("root")))


def _majors(linker: Linker) -> set[int]:
    return {t[1] for n in linker.get("needs") or [] if (t := elf.tracked(n))}


def _objects(n: int, verb: str) -> str:
    """``1 shared object links`` / ``3 shared objects link``."""
    return f"{n} shared object {verb}s" if n == 1 else f"{n} shared objects {verb}"


def _wheels(major: int) -> str:
    return "cu130 wheels, or an NGC container that ships them" if major == 13 else f"CUDA {major} wheels"


def _short_name(path: str) -> str:
    """``flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so`` -> ``flash_attn_2_cuda.so``."""
    return re.sub(r"\.cpython-[^.]+\.so$", ".so", os.path.basename(path))


def _gist(err: str) -> str:
    """The part of a loader error a short line keeps."""
    if m := re.search(r"(\S+\.so[\w.]*): cannot open shared object file", err):
        return f"{os.path.basename(m.group(1))} not found"
    if m := re.search(r"undefined symbol: (\S+)", err):
        sym = m.group(1)
        return f"undefined symbol {sym if len(sym) <= 40 else sym[:37] + '…'}"
    return err.split(":", 1)[0][:60]


# ---------------------------------------------------------------------- the view


@dataclass
class Variant:
    tags: list[int]
    chosen: int | None
    owner: str


@dataclass
class _View:
    """What every stage reads: torch, the reference major, the objects that count."""

    f: Facts
    params: Params
    scan: Scan
    t: TorchData
    c: ChildFacts
    torch_version: str | None = None
    torch_cuda: str | None = None
    torch_dist: str | None = None
    torch_major: int | None = None
    major_source: str = ""
    absent: bool = False
    cpu_only: bool = False
    gpu_seen: bool = False
    died: bool = False
    reference: int | None = None
    ref_text: str = ""
    ref_from: str = ""  # torch | driver | profile | modules
    driver_major: int | None = None
    driver_text: str | None = None
    linkers: list[Linker] = field(default_factory=list)  # a per-CUDA set counts its chosen build
    variants: dict[str, Variant] = field(default_factory=dict)
    failed: dict[str, LoadFailure] = field(default_factory=dict)
    reported: set[str] = field(default_factory=set)

    @property
    def linker_majors(self) -> Counter[int]:
        return Counter(m for x in self.linkers for m in _majors(x))

    def other_needs(self, x: Linker) -> list[str]:
        return [n for n in x.get("needs") or [] if (elf.tracked(n) or ("", self.reference))[1] != self.reference]

    def missing_lib(self, path: str) -> str | None:
        """The library whose absence stopped ``path`` loading (not when a retry loaded it)."""
        o = self.failed.get(path) or {}
        m = CANNOT_OPEN.match(str(o.get("error") or ""))
        return m.group(1) if m and not o.get("retry_ok") else None


def _view(f: Facts, params: Params) -> _View:
    t, c = f.torch or TorchData(), f.child or ChildFacts()
    v = _View(f, params, f.scan or Scan(), t, c, torch_version=t.get("torch_version"), torch_cuda=t.get("torch_cuda"))
    _torch_view(v)
    v.driver_major = f.driver_cuda // 1000 if f.driver_cuda else None
    v.driver_text = format_cuda_version(f.driver_cuda)
    v.failed = dict(t.get("load_failed") or {})
    all_linkers = [x for x in v.scan.get("linkers") or [] if _majors(x)]
    groups: dict[str, dict[int, Linker]] = {}  # per-CUDA-version sets among the CUDA-linked objects
    for x in all_linkers:
        if var := variant_of(x["path"]):
            groups.setdefault(var[0], {})[var[1]] = x
    groups = {k: b for k, b in groups.items() if len(b) > 1}
    grouped = {x["path"] for builds in groups.values() for x in builds.values()}
    _reference(v, [x for x in all_linkers if x["path"] not in grouped])
    _variants(v, all_linkers, groups)
    return v


def _variants(v: _View, linkers: list[Linker], groups: dict[str, dict[int, Linker]]) -> None:
    """Keep only the build a per-CUDA-version package loads: the child's, else the reference major's."""
    chosen_by_child, drop = v.t.get("variants") or {}, set[str]()
    for key, builds in groups.items():
        if key in chosen_by_child:
            tag = next((t for t, x in builds.items() if x["path"] == chosen_by_child[key]), None)
        else:
            tag = pick_variant(builds, f"{v.reference}.9") if v.reference else None
        v.variants[key] = Variant(sorted(builds), tag, _who(next(iter(builds.values())), v.f.owners))
        drop.update(x["path"] for t, x in builds.items() if t != tag)
    v.linkers = [x for x in linkers if x["path"] not in drop]


def _torch_view(v: _View) -> None:
    """What torch is: absent, died, its CUDA major (from the child, else its files), CPU-only."""
    t, c = v.t, v.c
    err = t.get("torch_import_error") or ""
    v.absent = err.startswith("ModuleNotFoundError") and "'torch'" in err
    v.died = bool(c.get("signal") or c.get("timed_out")) or bool(c and not c.get("finished") and not c.get("error"))
    v.torch_dist = (v.f.dists.get("torch") or Owner()).get("version")
    v.torch_major = cuda_major(v.torch_cuda) if v.torch_version else None
    v.major_source = f"torch.version.cuda {v.torch_cuda}" if v.torch_major else ""
    if v.torch_major is None and not v.torch_version:  # the child gave no answer: read the files
        v.torch_major, v.major_source = _torch_major_from_files(v)
    v.cpu_only = bool(v.torch_version) and not v.torch_cuda
    v.gpu_seen = bool(v.f.gpus) or bool(t.get("device_count"))


def _torch_major_from_files(v: _View) -> tuple[int | None, str]:
    if (tagged := tag_major(v.torch_dist)) is not None:
        return tagged, f"the +cu tag of torch {v.torch_dist}"
    own = [x for x in v.scan.get("linkers") or [] if (v.f.owners.get(x["path"]) or Owner()).get("name") == "torch"]
    counted = Counter(m for x in own for m in _majors(x))
    return (counted.most_common(1)[0][0], "torch's own libraries") if counted else (None, "")


def _reference(v: _View, linkers: list[Linker]) -> None:
    """torch's CUDA, else the driver's, else the profile's, else the modules' most common
    major (a tie: the newest, so the newer major is never blamed)."""
    required = int(v.params.threshold("g1_cuda_major") or 0)
    counted = Counter(m for x in linkers for m in _majors(x))
    if v.torch_major is not None:
        v.reference, v.ref_from = v.torch_major, "torch"
        v.ref_text = f"torch {v.torch_version or v.torch_dist} (CUDA {v.torch_cuda or v.torch_major})"
    elif v.driver_major is not None:
        v.reference, v.ref_from, v.ref_text = v.driver_major, "driver", f"the driver's CUDA {v.driver_text}"
    elif required:
        where = "GB10's" if v.params.gb10 else "the profile's"
        v.reference, v.ref_from, v.ref_text = required, "profile", f"{where} CUDA {required}"
    elif counted and not v.cpu_only:
        top = max(counted.values())
        tied = [m for m, n in counted.items() if n == top]
        v.reference, v.ref_from = max(tied), "modules"
        v.ref_text = (
            f"the newer of the CUDA-linked modules' majors (CUDA {v.reference}; a tie, and no torch or driver to go by)"
            if len(tied) > 1
            else f"most CUDA-linked modules (CUDA {v.reference}; {top} of {len(linkers)})"
        )


# ---------------------------------------------------------------------- the stages


def _torch_child(v: _View, out: Findings) -> None:
    """torch does not import, the child could not start, or it died in a G1 step."""
    c, err = v.c, v.t.get("torch_import_error")
    step = str(c.get("step") or "")
    if c.get("error"):
        what = c.get("describe") or "torch child could not start"
        out.fail(what, "check the Python interpreter pytest runs", what, "check the Python interpreter",
                 code="G1.child-not-started")
    elif err and not v.absent:
        out.fail(
            f"torch is installed but does not import: {err}",
            f"reinstall torch for this CUDA ({TORCH_INDEX}) or use an NGC container",
            f"torch does not import: {_gist(err)}", "reinstall torch (cu130 index)",
            code="G1.torch-import-error")
    elif v.died and (step in G1_STEPS or step.startswith(("load ", "import "))):
        how = c.get("signal") or ("hung" if c.get("timed_out") else "stopped")
        crash = not c.get("timed_out") and c.get("signal") in ("SIGSEGV", "SIGBUS", "SIGABRT", "SIGILL")
        hint = (
            " (a crash at the first CUDA call is the classic sign of a build for another CUDA major)"
            if crash and step in ("cuda init", "tiny kernel") else ""
        )
        fix, short = _death_fix(v, step, c)
        out.fail(str(c.get("describe")) + hint, fix, f"torch child {how} in {step!r}", short,
                 code="G1.child-died")
    elif v.died:
        out.note(f"{c.get('describe')} (not a G1 step; G2/G5 report it)")


def _death_fix(v: _View, step: str, c: ChildFacts) -> tuple[str, str]:
    """The fix, and its short form, for a child that died in ``step``."""
    if c.get("timed_out"):
        return (
            f"{step} hung: a wedged driver looks like this — check `dmesg` for Xid/NVRM errors and "
            "nvidia-smi; reboot if they are there", "check dmesg for Xid errors; reboot")
    name, package = step.split(" ", 1)[-1], "reinstall or uninstall that package"
    if step.startswith("load "):
        entry = next((e for e in v.f.requested if e.get("name") == name), Load())
        dist = (v.f.owners.get(entry.get("path", "")) or Owner()).get("name") or entry.get("module") or name
        return (
            f"run `python -c 'import torch, ctypes; ctypes.CDLL(\"{entry.get('path') or name}\")'` to see it; "
            f"reinstall {dist} built for torch's CUDA major, or uninstall it", package)
    if step.startswith("import ") and step != "import torch":
        return (
            f"run `python -c 'import torch, {name}'` to see it; reinstall {name} built for torch's CUDA "
            "major, or uninstall it", package)
    short = "reinstall torch for this CUDA (cu130 on GB10)"
    if step == "import torch":
        fix = "run `python -c 'import torch'` to see it; reinstall torch (cu130 wheels or an NGC container)"
        return fix, short
    return (
        "run `python -c 'import torch; print(torch.ones(1).cuda())'` to see it; make torch's CUDA major match "
        "the driver's (nvidia-smi) and this GPU", short)


def _mismatch(v: _View, out: Findings) -> None:
    """Objects linking another CUDA major than the reference (with their load error)."""
    ref = v.reference
    mismatched: list[Linker] = []
    if ref is not None and (v.ref_from == "torch" or len(v.linker_majors) > 1):
        mismatched = sorted((x for x in v.linkers if _majors(x) != {ref}), key=lambda x: x["path"])
    out.read("mismatched_objects", len(mismatched))
    if ref is None or not mismatched:
        return
    groups: dict[str, list[str]] = {}
    for x in mismatched:
        v.reported.add(x["path"])
        groups.setdefault(_who(x, v.f.owners), []).append(f"{os.path.basename(x['path'])} -> {_with_error(v, x)}")
    out.note(*(f"{who}: " + "; ".join(items) for who, items in groups.items()))
    shown = [f"{who} ({first_n(items, 1, sep=' ')})" for who, items in groups.items()]
    names = [w.split(" ", 1)[0] for w in groups if "(no installed" not in w]
    them = names[0] if len(names) == 1 else "them"
    short = f"reinstall {them} for CUDA {ref}" if names else f"rebuild for CUDA {ref}"
    out.fail(
        f"{_objects(len(mismatched), 'link')} another CUDA major than {v.ref_text}: {first_n(shown)}",
        f"pip uninstall {' '.join(names)} and reinstall builds for CUDA {ref} ({_wheels(ref)})"
        if names else f"remove or rebuild those files for CUDA {ref}",
        _mismatch_head(v, mismatched[0], len(groups), short), short, code="G1.cuda-major-mismatch")


def _with_error(v: _View, x: Linker) -> str:
    """``libcudart.so.12: cannot open shared object file`` when that is why it did not load."""
    needs = ", ".join(v.other_needs(x))
    o = v.failed.get(x["path"])
    if not o or o.get("retry_ok"):
        return needs
    missing = v.missing_lib(x["path"])
    if missing and missing in needs.split(", "):
        return needs.replace(missing, f"{missing}: cannot open shared object file")
    return f"{needs}; does not load: {_gist(str(o.get('error') or ''))}"


def _mismatch_head(v: _View, x: Linker, dists: int, short_fix: str) -> str:
    """The default line's finding: distribution, object, the library not found (or linked)
    and the build's major, as much as fits beside the fix."""
    who, others, missing = _who(x, v.f.owners), v.other_needs(x), v.missing_lib(x["path"])
    lib = f"{os.path.basename(missing)} not found" if missing else f"links {others[0] if others else 'another CUDA major'}"
    majors = "/".join(str(m) for m in sorted(_majors(x) - {v.reference or 0})) or "?"
    obj, sep = _short_name(x["path"]), ": " if missing else " "
    room = SHORT_WIDTH - len("G1 FAIL: ; fix: ") - len(short_fix)
    texts = (f"{who}: {obj}{sep}{lib} (CUDA {majors} build)", f"{who}: {obj}{sep}{lib}", f"{who}{sep}{lib}")
    candidates = [plus_more(text, dists) for text in texts]  # "(+N more)": the other distributions
    return next((c for c in candidates if len(c) <= min(room, 90)), candidates[-1])


def _torch_fits(v: _View, out: Findings) -> None:
    """torch (or the reference) newer than the driver; not the profile's major; CPU-only."""
    f, ref = v.f, v.reference
    if ref is not None and v.ref_from in ("torch", "modules") and v.driver_major is not None and ref > v.driver_major:
        out.fail(
            f"{v.ref_text or f'CUDA {ref}'} needs CUDA {ref} but the driver ({f.driver_version or '?'}) supports CUDA {v.driver_text}",
            f"upgrade the NVIDIA driver to one that supports CUDA {ref}, or install a torch built for CUDA {v.driver_major}",
            f"CUDA {ref} build, driver {f.driver_version or '?'} supports CUDA {v.driver_text}",
            f"upgrade the driver to CUDA {ref}", code="G1.driver-too-old")
    required = int(v.params.threshold("g1_cuda_major") or 0)
    if required and v.torch_major is not None and v.torch_major != required:
        where = "GB10 (SM121)" if v.params.gb10 else "this profile"
        version, built = v.torch_version or v.torch_dist, v.torch_cuda or v.torch_major
        out.fail(
            f"torch {version} is built for CUDA {built}; {where} needs a CUDA {required} build",
            f"{TORCH_INDEX}, or use an NGC container (nvcr.io/nvidia/pytorch:25.09-py3 or newer)",
            f"torch {version} is CUDA {built}; {where} needs CUDA {required}",
            "pip install torch from the cu130 index", code="G1.torch-cuda-major")
    if v.cpu_only and v.gpu_seen:
        _cpu_only_torch(v, out)


def _cpu_only_torch(v: _View, out: Findings) -> None:
    """A CPU-only wheel next to a working driver: what plain pip on aarch64 gave before torch 2.11."""
    f = v.f
    gpu = ", ".join(sorted(set(f.gpus))) or "an NVIDIA GPU"
    driver = f" (driver {f.driver_version}, CUDA {v.driver_text})" if f.driver_version and v.driver_text else ""
    old = re.match(r"(\d+)\.(\d+)", v.torch_version or "")
    before = old is not None and (int(old[1]), int(old[2])) < (2, 11)
    aarch64 = (f.arch or "").lower() in ("aarch64", "arm64") and before
    out.fail(
        f"torch {v.torch_version} is a CPU-only build (torch.version.cuda is None: "
        f'"Torch not compiled with CUDA enabled") on a machine with {gpu}{driver}',
        TORCH_INDEX + ("; PyPI's aarch64 torch before 2.11 is CPU-only" if aarch64 else ""),
        f"torch {v.torch_version} is CPU-only on {gpu}", "pip install torch from the cu130 index",
        code="G1.torch-cpu-only")


def _kernel(v: _View, out: Findings) -> str:
    """torch's tiny kernel: ``ok``, ``failed`` or ``not run``."""
    t, f = v.t, v.f
    kernel, gpu = t.get("kernel"), f.gpus[0] if f.gpus else "the GPU"
    if isinstance(kernel, dict):
        if kernel.get("ok"):
            return "ok"
        got = kernel.get("error") or f"wrong result {kernel.get('value')!r}"
        out.fail(
            f"torch's tiny kernel failed on {gpu}: {got}",
            "install a torch build whose CUDA major and arch list cover this GPU (cu130 on GB10)",
            f"torch's tiny kernel failed on {gpu}", "reinstall torch for this GPU (cu130 on GB10)",
            code="G1.kernel-failed")
        return "failed"
    if v.torch_cuda and v.gpu_seen and v.torch_version and t.get("cuda_available") is False:
        why = t.get("cuda_error") or "torch.cuda.is_available() is False"
        out.fail(
            f"torch {v.torch_version} (CUDA {v.torch_cuda}) cannot use the GPU: {why}",
            "check the driver (nvidia-smi) and that torch's CUDA major is not above the driver's",
            f"torch {v.torch_version} cannot use the GPU", "check nvidia-smi and torch's CUDA major",
            code="G1.cuda-unavailable")
    return "not run"


def _loads(v: _View, out: Findings) -> None:
    """Objects that did not dlopen (not already named as another major's build)."""
    by_path = {e.get("path"): e for e in v.f.requested}
    for path, o in sorted(v.failed.items()):
        entry = by_path.get(path) or Load()
        name = str(entry.get("name") or os.path.basename(path))
        imp = o.get("import") or {}
        if o.get("retry_ok"):
            out.note(f"{name} loads only once its package is imported (it preloads what it needs)")
            continue
        if imp.get("error"):
            out.note(f"import {entry.get('module')} fails too: {imp['error']}")
        if path in v.reported:
            continue
        owner = v.f.owners.get(path)
        dist = (owner or Owner()).get("name") or entry.get("module") or name
        err = str(o.get("error") or "failed").removeprefix(f"{path}: ").replace(path, name)
        major = v.reference
        if "undefined symbol" in err:
            fix = (
                f"reinstall {dist} built against torch {v.torch_version or v.torch_dist or ''} "
                f"(pip install --force-reinstall --no-build-isolation {dist}), or pip uninstall {dist}"
            )
            short = f"reinstall {dist} for this torch"
        elif major:
            fix = f"reinstall {dist} built for CUDA {major} ({_wheels(major)}), or pip uninstall {dist}"
            short = f"reinstall {dist} for CUDA {major}"
        else:
            fix, short = f"reinstall or uninstall {dist}", f"reinstall {dist}"
        who = _owned(owner, name)
        out.fail(f"{who}: {name} does not load: {err}", fix, f"{who}: {_short_name(name)}: {_gist(err)}", short,
                 code="G1.load-failed")


def _arch_notes(v: _View, out: Findings) -> None:
    """Which of a package's per-GPU-arch alternatives the child loaded."""
    chosen = v.t.get("variants") or {}
    groups: dict[str, list[Load]] = {}
    for e in v.f.requested:
        if e.get("group") and "tag" not in e:
            groups.setdefault(str(e["group"]), []).append(e)
    for key, members in sorted(groups.items()):
        picked = next((str(e["name"]) for e in members if e["path"] == chosen.get(key)), None)
        what = f"loaded {picked}" if picked else "none loaded (the torch child did not get there)"
        out.note(f"{key}: {len(members)} builds per GPU arch, one loaded per process; {what}")


def _variant_sets(v: _View, out: Findings) -> None:
    """A per-CUDA-version package: which build matches torch, or that none does."""
    for _key, info in sorted(v.variants.items()):
        span = f"{_version(info.tags[0])}–{_version(info.tags[-1])}"
        if info.chosen is not None:
            out.note(f"{info.owner} ships {len(info.tags)} CUDA builds ({span}); it loads its CUDA {_version(info.chosen)} build")
        elif v.torch_cuda and v.reference is not None:
            dist = info.owner.split(" ", 1)[0]
            out.fail(
                f"{info.owner} ships builds for CUDA {span} and none for torch's CUDA {v.torch_cuda}",
                f"pip install -U {dist} (a release with a CUDA {v.reference} build), or pip uninstall {dist}",
                f"{info.owner}: no build for CUDA {v.reference} (has {span})", f"pip install -U {dist}",
                code="G1.no-cuda-variant")


def _leftovers(v: _View, out: Findings) -> None:
    """CUDA runtimes of another major that nothing links (a wheel, ldconfig, LD_LIBRARY_PATH)."""
    f, ref = v.f, v.reference
    if ref is None:
        return
    providers = list(v.scan.get("providers") or [])
    found = _unlinked(v, ref, providers)
    if not found:
        return
    parts = [f"{lib}.so.{major} {', '.join(dict.fromkeys(w))}" for (lib, major), w in sorted(found.items())]
    out.note(*(f"leftover: {part}" for part in parts))
    pips = sorted({o["name"] for p in providers if (p["lib"], p["major"]) in found and (o := f.owners.get(p["path"]))})
    fix = f"pip uninstall {' '.join(pips)}" if pips else ""
    if any((p["lib"], p["major"]) in found for p in f.ldconfig):
        fix += ("; " if fix else "") + "remove the old toolkit's /etc/ld.so.conf.d entry and run ldconfig"
    fix += " — so a CUDA 12 wheel fails at install, not half-loaded mid-run"
    majors = "/".join(sorted({str(m) for _, m in found}))
    out.warn(
        f"leftover CUDA {majors} libraries linked by nothing ({first_n(parts, 2)})", fix.strip(),
        f"leftover CUDA {majors} libraries linked by nothing ({count(len(parts), 'library', 'libraries')})",
        f"pip uninstall {' '.join(pips[:2])}" if pips else "remove the old ld.so.conf.d entry",
        code="G1.leftover-runtime")


def _unlinked(v: _View, ref: int, providers: list[Provider]) -> dict[tuple[str, int], list[str]]:
    """(lib, major) of another major than ``ref`` that nothing links -> where each copy is."""
    f = v.f
    needed = {elf.tracked(n) for x in v.linkers for n in x.get("needs") or []}

    def from_wheel(p: Provider) -> str:
        o = f.owners.get(p["path"])
        return f"installed by {o['name']} {o['version']}" if o else f"at {p['path']}"

    found: dict[tuple[str, int], list[str]] = {}
    for items, where in (
        (providers, from_wheel),
        (f.ldconfig, lambda p: f"registered in ldconfig ({p['path']})"),
        (f.ld_library_path, lambda p: f"on LD_LIBRARY_PATH ({p['path']})"),
    ):
        for p in items:
            if p["major"] != ref and (p["lib"], p["major"]) not in needed:
                found.setdefault((p["lib"], p["major"]), []).append(where(p))
    return found


def _readings(v: _View, out: Findings) -> None:
    scan, skipped = v.scan, v.scan.get("skipped") or {}
    out.read("torch_version", v.torch_version or v.torch_dist)
    out.read("torch_cuda", v.torch_cuda)
    out.read("driver_cuda", v.driver_text)
    out.read("elf_files_scanned", int(scan.get("files") or 0))
    out.read("elf_scan_time", round(float(scan.get("duration_s") or 0.0) * 1000, 1), "ms")
    out.read("elf_skipped", sum(skipped.values()))
    out.read("cuda_linked_objects", len(v.linkers))
    if v.reference is not None:
        out.read("cuda_major", v.reference)
    _notes(v, out)


def _notes(v: _View, out: Findings) -> None:
    f, scan, skipped, steps = v.f, v.scan, v.scan.get("skipped") or {}, v.c.get("steps") or {}
    other_wheels = sorted(
        d["name"] for k, d in f.dists.items() if k.startswith("nvidia-") and v.reference and not k.endswith(f"-cu{v.reference}")
    )
    out.note(
        # where the child's seconds went (torch import, CUDA init, the loads)
        "torch child: " + ", ".join(f"{k} {s:.2f} s" for k, s in list(steps.items())[:12]) if steps else "",
        "skipped while scanning: " + ", ".join(f"{n} {r.replace('_', ' ')}" for r, n in sorted(skipped.items())) if skipped else "",
        f"the scan stopped early ({scan.get('stopped')}): files after that were not read" if scan.get("stopped") else "",
        f"ldconfig -p: {f.ldconfig_error}" if f.ldconfig_error else "",
        f"driver CUDA version unknown: {f.nvml_reason}" if f.nvml_reason else "",
        f"torch's CUDA major read from {v.major_source} (the child gave none)"
        if v.major_source and v.major_source != f"torch.version.cuda {v.torch_cuda}" else "",
        f"no torch CUDA build to compare with: the reference major is {v.ref_text}" if v.ref_from in ("driver", "profile", "modules") else "",
        f"CUDA wheels for another major installed: {', '.join(other_wheels)}" if other_wheels else "",
    )


def _unverified(v: _View, out: Findings) -> None:
    """The child died in another check's step before the loads ran."""
    loaded = int(v.t.get("loaded") or 0)
    wanted = [e for e in v.f.requested if not e.get("group")]
    if v.died and v.torch_version and not out.problems and loaded < len(wanted):
        names = [str(e.get("name")) for e in wanted[loaded:]]
        out.warn(
            f"extension objects not loaded ({first_n(names)}): {v.c.get('describe')}",
            "see the check that owns that step (G2 flash-attn, G5 bandwidth)",
            f"{count(len(names), 'extension object')} not loaded: the torch child stopped",
            "see G2/G5 for the step that stopped it", code="G1.not-loaded")


def evaluate(facts: Facts, params: Params) -> Result:
    """Decide G1 from the facts (pure), stage by stage."""
    v = _view(facts, params)
    out = Findings("G1")
    _readings(v, out)
    _stack(v, out)
    _torch_child(v, out)
    _mismatch(v, out)
    _torch_fits(v, out)
    kernel = _kernel(v, out)
    out.read("kernel", kernel)
    _loads(v, out)
    _variant_sets(v, out)
    _arch_notes(v, out)
    _unverified(v, out)
    loaded = int(v.t.get("loaded") or 0)
    out.read("objects_loaded", loaded - len([1 for o in v.failed.values() if not o.get("retry_ok")]))
    if out.problems:
        return _short(out, out.result())
    skip = None if out.warnings else _nothing_to_check(v)  # a known-bad stack is said even without torch
    if skip is not None:
        skip.readings, skip.details = list(out.readings), list(out.details)
        return skip
    _leftovers(v, out)
    if v.cpu_only and v.linkers:
        majors = "/".join(map(str, sorted(v.linker_majors)))
        out.warn(
            f"torch {v.torch_version} is CPU-only, yet {_objects(len(v.linkers), 'link')} CUDA {majors}: they cannot run with this torch",
            "install a CUDA build of torch (cu130) or uninstall the CUDA packages",
            f"torch {v.torch_version} is CPU-only, yet {count(len(v.linkers), 'module')} link CUDA {majors}",
            "install a CUDA torch (cu130) or uninstall them", code="G1.cpu-torch-cuda-modules")
    return _verdict(v, out, kernel, loaded)


def _nothing_to_check(v: _View) -> Result | None:
    scanned = int(v.scan.get("files") or 0)
    no_torch = v.absent or (not v.torch_version and not v.torch_dist)
    if not ((no_torch or (v.cpu_only and not v.gpu_seen)) and not v.linkers):
        return None
    what = "torch is not installed" if no_torch else f"torch {v.torch_version} is CPU-only and there is no NVIDIA GPU"
    return Result(
        "G1", Status.SKIP,
        f"{what}, and none of the {scanned} shared objects scanned links a CUDA runtime: no CUDA ABI to check",
        headline=f"{what}; no CUDA module among {scanned} shared objects", codes=["G1.nothing-to-check"])


def _verdict(v: _View, out: Findings, kernel: str, loaded: int) -> Result:
    """PASS (or WARN) with what was verified, in one line."""
    body, head, majors = _body(v, kernel, loaded)
    n = len(v.linkers)
    if out.warnings:
        texts = [s for s, _ in out.warnings]
        fix = "; ".join(dict.fromkeys(x for _, x in out.warnings[:2]))
        # the warnings past two: counted in the line, listed in the details
        result = Result("G1", Status.WARN, f"{first_n(texts, 2)}; {body}", fix, list(out.readings), details=[*texts[2:], *out.details],
                        codes=out.codes_of())
        return _short(out, result)
    short = f"{f'torch {v.torch_version or v.torch_dist}' if v.ref_from == 'torch' else head} on driver CUDA {v.driver_text or '?'}"
    short += f", {count(n, 'CUDA module')} on CUDA {majors}" if n else ""
    short += ", kernel ok" if kernel == "ok" else ""
    return Result("G1", Status.PASS, body, readings=list(out.readings), details=list(out.details), headline=short)


def _body(v: _View, kernel: str, loaded: int) -> tuple[str, str, str]:
    """The line of what was verified, its head (torch) and the modules' majors."""
    f, n = v.f, len(v.linkers)
    majors = "/".join(map(str, sorted(v.linker_majors))) or "?"
    if v.cpu_only:
        consistent = ""  # said in the warning
    elif n:
        consistent = f"the one CUDA-linked shared object uses CUDA {majors}" if n == 1 else f"all {n} CUDA-linked shared objects use CUDA {majors}"
    else:
        consistent = "no extension module links a CUDA runtime"
    picks = [f"{i.owner.split(' ', 1)[0]} picks its CUDA {_version(i.chosen)} build of {len(i.tags)}" for i in v.variants.values() if i.chosen is not None]
    driver = f"driver supports CUDA {v.driver_text}" if v.driver_text else "driver CUDA version unknown"
    on = f.gpus[0] if f.gpus else v.t.get("device_name") or "the GPU"
    kernel_text = {"ok": f"tiny kernel ran on {on}", "not run": "no kernel run (no CUDA device)"}.get(kernel, "")
    loads = f"{count(loaded, 'extension object')} loaded" if loaded else ""
    head = v.ref_text if v.ref_from == "torch" else f"torch {v.torch_version} (CPU-only)" if v.cpu_only else "torch not installed"
    scanned = f"{int(v.scan.get('files') or 0)} shared objects scanned"
    body = "; ".join(x for x in (f"{head}, {driver}", consistent, *picks, kernel_text, loads, scanned) if x)
    return body, head, majors


def _short(out: Findings, result: Result) -> Result:
    """Fill the short line from the first problem's (or warning's) headline."""
    head, short = out.first_short()
    if head:
        result.headline, result.short_fix = head, short
    return result


# ---------------------------------------------------------------------- the driver stack (N3)

RELOAD = (
    "reboot (the driver was upgraded under the running module), or with nothing using the GPU reload it: "
    "sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && sudo modprobe nvidia"
)
KHO_FIX = "boot 6.17.0-1032-nvidia (pin the 6.x line), or add kho=off to the kernel command line (safe when kexec_crash_size is 0)"


@dataclass
class Stack:
    """The driver stack as read: the kernel, the module, the user-space library, CMA."""

    kernel: str | None
    module_version: str | None
    flavour: str | None
    userspace: str | None
    cma_broken: bool
    gb10: bool
    gb10_guessed: bool


def userspace_version(nvml_version: str | None) -> str | None:
    """NVML's ``13.580.173.02`` -> ``580.173.02`` (the CUDA major, then the driver's version)."""
    parts = (nvml_version or "").strip().split(".")
    return ".".join(parts[1:]) if len(parts) >= 3 and all(p.isdigit() for p in parts) else None


def _stack_view(v: _View) -> Stack:
    f, cma = v.f, v.f.cma_kb or {}
    gb10 = v.params.gb10 or any("GB10" in g.upper() for g in f.gpus)
    aarch64 = (f.arch or "").lower() in ("aarch64", "arm64")
    # a GB10 whose GPU did not come up looks like this (F3b, F3c)
    guessed = not gb10 and not f.gpus and aarch64 and (f.kernel_release or "").endswith("-nvidia")
    cma_broken = "CmaTotal" in cma and "CmaFree" in cma and cma["CmaFree"] > cma["CmaTotal"]
    return Stack(f.kernel_release, *module_of(f.nvidia_module), userspace_version(f.nvml_version), cma_broken,
                 gb10 or guessed, guessed)  # fmt: skip


def _stack(v: _View, out: Findings) -> None:
    """The kernel, the module and the library against each other and the known-bad list."""
    f, cma = v.f, v.f.cma_kb
    if not f.stack_read:  # a capture made before these readings: decided as it was
        return
    st = _stack_view(v)
    _stack_readings(v, st, out)
    _version_mismatch(v, st, out)
    reading: known_bad.Reading = {
        "kernel": st.kernel, "driver": st.module_version or f.driver_version, "flavour": st.flavour,
        "gb10": st.gb10, "cma_free_above_total": st.cma_broken, "no_gpu": not f.gpus,
    }  # fmt: skip
    hits = [e for e in f.known_bad if known_bad.matches(e, reading)]
    for item in hits:
        _known_bad_finding(item, reading, st, out)
    if st.cma_broken and not any(e.get("fail_if") == "cma_free_above_total" for e in hits):
        out.warn(
            f"CmaFree {cma['CmaFree']} kB > CmaTotal {cma['CmaTotal']} kB in /proc/meminfo: the kernel's KHO/CMA "
            f"accounting bug (kernel {st.kernel or '?'}); NCCL's memory registration between Sparks fails with "
            "'ibv_reg_mr_iova2 … Cannot allocate memory'", KHO_FIX,
            "CmaFree > CmaTotal: the kernel's CMA accounting bug", "boot 6.17.0-1032-nvidia or add kho=off",
            code="G1.cma-accounting")


def _stack_readings(v: _View, st: Stack, out: Findings) -> None:
    f = v.f
    out.read(readings.KERNEL_RELEASE.name, st.kernel)
    out.read("nvidia_module", f"{st.module_version} ({st.flavour})" if st.module_version else None)
    if f.cma_kb:
        out.read(readings.CMA_TOTAL.name, f.cma_kb.get("CmaTotal"), "kB")
        out.read(readings.CMA_FREE.name, f.cma_kb.get("CmaFree"), "kB")
    own = [e for e in f.known_bad if e.get("origin") != "shipped"]
    out.note(
        f"kernel release not read: {f.kernel_release_error}" if f.kernel_release_error else "",
        f"NVIDIA kernel module not read: {f.nvidia_module_error}" if f.nvidia_module_error else "",
        f"NVIDIA kernel module line not recognised: {f.nvidia_module}" if f.nvidia_module and not st.module_version else "",
        f"CmaTotal/CmaFree not read: {f.meminfo_error}" if f.meminfo_error else "",
        "no GPU visible: the known-bad entries for GB10 apply (an aarch64 '-nvidia' kernel)" if st.gb10_guessed else "",
        f"known-bad list: {count(len(f.known_bad), 'entry', 'entries')}"
        + (f", {len(own)} from {', '.join(sorted({str(e.get('origin')) for e in own}))}" if own else ""),
        *(f"known-bad file not used: {e}" for e in f.known_bad_errors),
    )


def _version_mismatch(v: _View, st: Stack, out: Findings) -> None:
    """NVML's ``Driver/library version mismatch``: the module loaded is not the library installed."""
    module = st.module_version or "?"
    if v.f.nvml_init_error == "LibRmVersionMismatch":
        lib = f" (NVML library {st.userspace})" if st.userspace else ""
        text = (
            f"Driver/library version mismatch: NVML refuses the loaded NVIDIA kernel module {module}{lib} "
            "('RM has detected an NVML/RM version mismatch'): the driver was upgraded and the old module "
            "still runs"
        )
        head = f"Driver/library version mismatch: kernel module {module}"
    elif st.module_version and st.userspace and st.module_version != st.userspace:
        text = (
            f"the loaded NVIDIA kernel module is {st.module_version} but the user-space driver (NVML) is {st.userspace}: "
            "a Driver/library version mismatch"
        )
        head = f"kernel module {st.module_version} != user-space driver {st.userspace}"
    else:
        return
    out.fail(text, RELOAD, head, "reboot (or reload the nvidia modules)", code="G1.driver-library-mismatch")


def _known_bad_finding(item: known_bad.Entry, reading: known_bad.Reading, st: Stack, out: Findings) -> None:
    rules = item.get("match") or {}
    names = {"kernel": f"kernel {st.kernel}", "driver": f"driver {reading.get('driver')}"}

    def named(flavour: str) -> str:
        return " with ".join(names.get(k, f"{st.flavour} {flavour} {st.module_version or ''}".strip()) for k in rules)

    what, tag = named("NVIDIA kernel modules"), named("modules")
    status = known_bad.status(item, reading)
    cond = item.get("fail_if")
    now = f"; on this boot: {known_bad.FAIL_IF[cond]}" if cond and status == "FAIL" else ""
    origin = "" if item.get("origin") == "shipped" else f", from {item.get('origin')}"
    fix = str(item.get("fix"))
    # without a short_fix: the fix's first clause, without parentheses
    first = re.sub(r"\s*\([^)]*\)", "", fix).split(";", 1)[0].strip()
    if len(first) > known_bad.SHORT_MAX:
        first = first[: known_bad.SHORT_MAX - 1] + "…"
    out.flag(
        Status(status),
        f"{what} is known-bad ({item.get('id')}{origin}): breaks {item.get('breaks')}{now} "
        f"(source: {first_n(list(item.get('sources') or []), 1)})", fix,
        f"{tag}: {item['short']}" if item.get("short") else f"{tag} is known-bad ({item.get('id')})",
        str(item.get("short_fix") or first), code="G1.known-bad")
