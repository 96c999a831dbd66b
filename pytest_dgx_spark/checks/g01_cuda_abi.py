"""G1 — CUDA 12/13 ABI: find the module linked to the wrong CUDA major before it segfaults.

Most pip ML wheels were built against CUDA 12; GB10 (SM121) needs a CUDA 13
stack. A CUDA 12 extension in a CUDA 13 environment fails late — at its first
import (``libnvrtc.so.12: cannot open shared object file``, as sgl-kernel does
on a Spark; an ``undefined symbol`` against another torch) or worse, with a
SIGSEGV on the first ``.cuda()``. And plain ``pip install torch`` on aarch64
before torch 2.11 gives a CPU-only build next to a working driver. This check
finds all of it up front, in two halves:

* static: the ``DT_NEEDED`` entries of every shared object in the checked
  Python's package folders (``probes/elf.py``), the CUDA libraries that
  ``ldconfig`` and ``LD_LIBRARY_PATH`` offer, and which distribution
  installed each file (``probes/dist_files.py``) — so the verdict names the
  ``pip uninstall`` to run;
* dynamic: the run's one torch child imports torch, launches a tiny kernel,
  then ``dlopen``\\ s (``RTLD_NOW | RTLD_LOCAL``) every CUDA- or libtorch-linked
  extension object instead of importing its package: the loader resolves
  every library and symbol as an import would, at a hundredth of the cost.

Only ``libcudart``/``libcublas``/``libcublasLt``/``libnvrtc`` count: their
major tracks the CUDA major, while ``libcufft.so.12`` and ``libcusparse.so.12``
ship inside CUDA 13 too. The reference major is torch's CUDA, else the
driver's, else the profile's (13 on GB10); a tie never blames the newer major.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_dgx_spark.checks.kit import CheckContext, FactsBase, Findings, Params, count, first_n, plus_more
from pytest_dgx_spark.model import SHORT_WIDTH, Result, Status
from pytest_dgx_spark.probes import elf
from pytest_dgx_spark.probes.dist_files import owners_for
from pytest_dgx_spark.probes.machine import format_cuda_version
from pytest_dgx_spark.probes.packages import canonical

#: distributions whose objects are never loaded (the static scan still covers their files)
NOT_LOADED: dict[str, str] = {
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


@dataclass
class Facts(FactsBase):
    """Everything G1 decides on, JSON-shaped (recorded inputs rebuild it in tests)."""

    scan: dict[str, Any] = field(default_factory=dict)
    #: path -> {"name", "version", "hint"} for the linkers and providers only
    owners: dict[str, dict[str, Any]] = field(default_factory=dict)
    ldconfig: list[dict[str, Any]] = field(default_factory=list)
    ldconfig_error: str | None = None
    ld_library_path: list[dict[str, Any]] = field(default_factory=list)
    #: canonical name -> {"name", "version"}: torch and the nvidia-*-cu* wheels
    dists: dict[str, dict[str, Any]] = field(default_factory=dict)
    driver_cuda: int | None = None
    driver_version: str | None = None
    nvml_reason: str | None = None
    gpus: list[str] = field(default_factory=list)
    arch: str | None = None  # platform.machine(): aarch64 PyPI torch before 2.11 is CPU-only
    torch: dict[str, Any] = field(default_factory=dict)  # the torch child's data
    child: dict[str, Any] = field(default_factory=dict)  # ok, signal, timed_out, step, describe
    #: the objects the child was asked to load: {"path", "name", "module", "group", "tag"}
    requested: list[dict[str, Any]] = field(default_factory=list)


FACTS = Facts


# ---------------------------------------------------------------------- gathering


def _static(ctx: CheckContext) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    machine = ctx.machine
    scan = elf.scan_environment(machine)
    interesting = bool(scan.get("linkers") or scan.get("providers") or scan.get("torch_linked"))
    owners = owners_for(machine, scan.get("roots") or []) if interesting else {"owners": {}}
    return scan, owners, machine.packages()


def variant_of(path: str) -> tuple[str, int] | None:
    """``…/libbitsandbytes_cuda130.so`` -> (``…/libbitsandbytes_cuda*.so``, 130)."""
    m = VARIANT.match(os.path.basename(path))
    if not m:
        return None
    return os.path.join(os.path.dirname(path), f"{m['stem']}cuda*{m['tail']}"), int(m["tag"])


def load_list(scan: Mapping[str, Any], owners: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The extension objects the torch child ``dlopen``\\ s: CUDA- or libtorch-linked,
    not torch's own nor a toolkit library; a per-CUDA-version set carries its group."""
    entries: list[dict[str, Any]] = []
    for x in [*(scan.get("linkers") or []), *(scan.get("torch_linked") or [])]:
        owner = owners.get(x["path"]) or {}
        key = canonical(str(owner.get("name") or ""))
        rel = _rel(x["path"], x.get("root"))
        if key in NOT_LOADED or key.startswith("nvidia-") or rel.startswith("torch/"):
            continue
        entry = {"path": x["path"], "name": rel, "module": owner.get("hint")}
        entries.append(entry)
    groups = Counter(v[0] for e in entries if (v := variant_of(e["path"])))
    for e in entries:
        v = variant_of(e["path"])
        if v and groups[v[0]] > 1:
            e["group"], e["tag"] = v
    _arch_alternatives(entries)
    return entries[:MAX_LOADS]


def _arch_alternatives(entries: list[dict[str, Any]]) -> None:
    """One package's objects of the same name in several folders are alternatives
    it picks from at run time (sgl-kernel: ``sm90/common_ops.abi3.so``,
    ``sm100/common_ops.abi3.so``): loading two would register the same torch
    op library twice, which aborts. The child loads one: the folder's ``smNN``
    closest to the GPU's capability from below, else the first."""
    same: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for e in entries:
        if not e.get("group"):
            top = str(e["name"]).split("/", 1)[0]
            same.setdefault((top, os.path.basename(e["path"])), []).append(e)
    for (top, base), members in same.items():
        if len(members) < 2:
            continue
        for e in members:
            e["group"] = f"{top}/*/{base}"
            sm = re.search(r"(?:^|/)sm_?(\d{2,3})[a-z]?/", str(e["name"]))
            e["sm"] = int(sm.group(1)) if sm else None


def torch_request(ctx: CheckContext) -> dict[str, Any]:
    """Ask the torch child to load every CUDA- or libtorch-linked extension object."""
    scan, owners, _ = _static(ctx)
    return {"load": load_list(scan, owners.get("owners") or {})}


def gather(ctx: CheckContext) -> Facts:
    machine = ctx.machine
    scan, owners_all, packages = _static(ctx)
    all_owners = owners_all.get("owners") or {}
    paths = {x["path"] for k in ("linkers", "providers", "torch_linked") for x in scan.get(k) or []}
    dists = packages.get("dists") or {}
    keep = {
        k: {"name": v.get("name"), "version": v.get("version")}
        for k, v in dists.items()
        if k == "torch" or (k.startswith("nvidia-") and re.search(r"-cu\d+$", k))
    }
    ldconfig, ldconfig_error = _ldconfig(machine)
    lib_dirs = [d for d in machine.env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    nv = machine.nvml()
    devices = nv.get("devices") or []
    child = ctx.torch()
    return Facts(
        scan=scan,
        owners={p: all_owners[p] for p in paths if p in all_owners},
        ldconfig=ldconfig,
        ldconfig_error=ldconfig_error,
        ld_library_path=elf.list_library_dirs(lib_dirs),
        dists=keep,
        driver_cuda=nv.get("cuda_driver_version") if isinstance(nv.get("cuda_driver_version"), int) else None,
        driver_version=nv.get("driver_version"),
        nvml_reason=None if nv.get("ok") and devices else nv.get("reason"),
        gpus=[str(d.get("name") or "GPU") for d in devices],
        arch=machine.identity().get("arch"),
        torch=dict(child.data),
        child={
            "ok": child.ok,
            "signal": child.signal,
            "timed_out": child.timed_out,
            "step": child.step,
            "error": child.error,
            "finished": child.finished,
            "describe": child.describe("torch child"),
            "steps": dict(child.step_seconds),
        },
        requested=load_list(scan, all_owners),
    )


def _ldconfig(machine: Any) -> tuple[list[dict[str, Any]], str | None]:
    argv = _ldconfig_argv(machine)
    if argv is None:
        return [], "ldconfig not found"
    res = machine.command(argv, timeout=machine.timeout)
    return (elf.parse_ldconfig(res.stdout), None) if res.ok else ([], res.describe())


def _ldconfig_argv(machine: Any) -> list[str] | None:
    """``ldconfig -p``: on PATH, else where Debian and RHEL keep it (``/sbin`` is
    not on an ordinary user's PATH)."""
    from pytest_dgx_spark.probes.commands import find_program

    if find_program("ldconfig", machine.env):  # absolute PATH entries only: never ./ldconfig
        return ["ldconfig", "-p"]
    for candidate in ("/sbin/ldconfig", "/usr/sbin/ldconfig"):
        if os.access(candidate, os.X_OK):
            return [candidate, "-p"]
    return None


# ---------------------------------------------------------------------- small helpers


def cuda_major(version: Any) -> int | None:
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
    """The build a per-CUDA-version package picks for ``cuda`` (``"13.0"`` -> 130):
    the exact one, else the newest of that major not above it, else the newest
    of that major. The torch child applies the same rule."""
    try:
        major, minor = (int(x) for x in str(cuda).split(".")[:2])
    except ValueError:
        return None
    same = sorted(t for t in tags if t // 10 == major)
    want = major * 10 + minor
    exact = [t for t in same if t == want]
    below = [t for t in same if t <= want]
    return (exact or below or same or [None])[-1]


def _version(tag: int) -> str:
    return f"{tag // 10}.{tag % 10}"


def _rel(path: str, root: str | None) -> str:
    if root and path.startswith(root.rstrip(os.sep) + os.sep):
        return path[len(root.rstrip(os.sep)) + 1 :]
    return path


def _who(path: str, root: str | None, owners: Mapping[str, Mapping[str, Any]]) -> str:
    owner = owners.get(path)
    if owner:
        return f"{owner['name']} {owner['version']}"
    return f"{_rel(path, root)} (no installed distribution lists it)"


def _majors(linker: Mapping[str, Any]) -> set[int]:
    return {m for n in linker.get("needs") or [] if (t := elf.tracked(n)) for m in [t[1]]}


def _objects(n: int, verb: str) -> str:
    """``1 shared object links`` / ``3 shared objects link``."""
    return f"{n} shared object {verb}s" if n == 1 else f"{n} shared objects {verb}"


def _wheels(major: int) -> str:
    return "cu130 wheels, or an NGC container that ships them" if major == 13 else f"CUDA {major} wheels"


# ---------------------------------------------------------------------- the view


@dataclass
class _View:
    """What every stage reads: torch, the reference major, the objects that count."""

    f: Facts
    params: Params
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
    linkers: list[dict[str, Any]] = field(default_factory=list)  # a per-CUDA set counts its chosen build
    variants: dict[str, dict[str, Any]] = field(default_factory=dict)
    failed: dict[str, dict[str, Any]] = field(default_factory=dict)
    reported: set[str] = field(default_factory=set)

    @property
    def linker_majors(self) -> Counter[int]:
        return Counter(m for x in self.linkers for m in _majors(x))


def _view(f: Facts, params: Params) -> _View:
    t, c = f.torch or {}, f.child or {}
    v = _View(f, params, torch_version=t.get("torch_version"), torch_cuda=t.get("torch_cuda"))
    err = t.get("torch_import_error") or ""
    v.absent = err.startswith("ModuleNotFoundError") and "'torch'" in err
    v.died = bool(c.get("signal") or c.get("timed_out")) or bool(
        c and not c.get("finished") and not c.get("error")
    )
    v.torch_dist = (f.dists.get("torch") or {}).get("version")
    v.torch_major = cuda_major(v.torch_cuda) if v.torch_version else None
    v.major_source = f"torch.version.cuda {v.torch_cuda}" if v.torch_major else ""
    if v.torch_major is None and not v.torch_version:  # the child gave no answer: read the files
        _torch_major_from_files(v)
    v.cpu_only = bool(v.torch_version) and not v.torch_cuda
    v.gpu_seen = bool(f.gpus) or bool(t.get("device_count"))
    v.driver_major = f.driver_cuda // 1000 if f.driver_cuda else None
    v.driver_text = format_cuda_version(f.driver_cuda)
    v.failed = dict(t.get("load_failed") or {})
    all_linkers = [x for x in (f.scan or {}).get("linkers") or [] if _majors(x)]
    groups = _groups(all_linkers)
    grouped = {x["path"] for builds in groups.values() for x in builds.values()}
    _reference(v, [x for x in all_linkers if x["path"] not in grouped])
    _variants(v, all_linkers, groups)
    return v


def _torch_major_from_files(v: _View) -> None:
    f = v.f
    v.torch_major = tag_major(v.torch_dist)
    if v.torch_major is not None:
        v.major_source = f"the +cu tag of torch {v.torch_dist}"
        return
    own = [
        x
        for x in (f.scan or {}).get("linkers") or []
        if (f.owners.get(x["path"]) or {}).get("name") == "torch"
    ]
    counted = Counter(m for x in own for m in _majors(x))
    if counted:
        v.torch_major = counted.most_common(1)[0][0]
        v.major_source = "torch's own libraries"


def _reference(v: _View, linkers: list[dict[str, Any]]) -> None:
    """torch's CUDA, else the driver's, else the profile's, else the modules'
    most common major (a tie: the newest, so the newer major is never blamed)."""
    required = int(v.params.threshold("g1_cuda_major") or 0)
    if v.torch_major is not None:
        v.reference, v.ref_from = v.torch_major, "torch"
        v.ref_text = f"torch {v.torch_version or v.torch_dist} (CUDA {v.torch_cuda or v.torch_major})"
    elif v.driver_major is not None:
        v.reference, v.ref_from = v.driver_major, "driver"
        v.ref_text = f"the driver's CUDA {v.driver_text}"
    elif required:
        where = "GB10's" if v.params.gb10 else "the profile's"
        v.reference, v.ref_from, v.ref_text = required, "profile", f"{where} CUDA {required}"
    else:
        counted = Counter(m for x in linkers for m in _majors(x))
        if counted and not v.cpu_only:
            top = max(counted.values())
            tied = [m for m, n in counted.items() if n == top]
            v.reference, v.ref_from = max(tied), "modules"
            v.ref_text = (
                f"the newer of the CUDA-linked modules' majors (CUDA {v.reference}; a tie, and no torch "
                "or driver to go by)"
                if len(tied) > 1
                else f"most CUDA-linked modules (CUDA {v.reference}; {top} of {len(linkers)})"
            )


def _groups(linkers: list[dict[str, Any]]) -> dict[str, dict[int, dict[str, Any]]]:
    """Per-CUDA-version sets (two builds or more) among the CUDA-linked objects."""
    groups: dict[str, dict[int, dict[str, Any]]] = {}
    for x in linkers:
        var = variant_of(x["path"])
        if var:
            groups.setdefault(var[0], {})[var[1]] = x
    return {k: b for k, b in groups.items() if len(b) > 1}


def _variants(v: _View, linkers: list[dict[str, Any]], groups: dict[str, dict[int, dict[str, Any]]]) -> None:
    """Keep only the build a per-CUDA-version package loads for torch's CUDA."""
    chosen_by_child = (v.f.torch or {}).get("variants") or {}
    drop: set[str] = set()
    for key, builds in groups.items():
        if key in chosen_by_child:
            path = chosen_by_child[key]
            tag = next((t for t, x in builds.items() if x["path"] == path), None)
        else:  # no torch answer: the build for the reference major
            tag = pick_variant(builds, f"{v.reference}.9") if v.reference else None
        first = next(iter(builds.values()))
        v.variants[key] = {
            "tags": sorted(builds),
            "chosen": tag,
            "owner": _who(first["path"], first.get("root"), v.f.owners),
        }
        drop.update(x["path"] for t, x in builds.items() if t != tag)
    v.linkers = [x for x in linkers if x["path"] not in drop]


# ---------------------------------------------------------------------- the stages


def _torch_child(v: _View, out: Findings) -> None:
    """torch does not import, the child could not start, or it died in a G1 step."""
    c, err = v.f.child or {}, (v.f.torch or {}).get("torch_import_error")
    step = str(c.get("step") or "")
    if c.get("error"):
        what = c.get("describe") or "torch child could not start"
        out.fail(what, "check the Python interpreter pytest runs", what, "check the Python interpreter")
    elif err and not v.absent:
        out.fail(
            f"torch is installed but does not import: {err}",
            f"reinstall torch for this CUDA ({TORCH_INDEX}) or use an NGC container",
            f"torch does not import: {_gist(err)}",
            "reinstall torch (cu130 index)",
        )
    elif v.died and (step in G1_STEPS or step.startswith(("load ", "import "))):
        how = c.get("signal") or ("hung" if c.get("timed_out") else "stopped")
        out.fail(
            str(c.get("describe")) + _death_hint(c),
            _death_fix(v, step, c),
            f"torch child {how} in {step!r}",
            _death_short(step, c),
        )
    elif v.died:
        out.note(f"{c.get('describe')} (not a G1 step; G2/G5 report it)")


def _death_hint(c: Mapping[str, Any]) -> str:
    if c.get("timed_out") or c.get("signal") not in ("SIGSEGV", "SIGBUS", "SIGABRT", "SIGILL"):
        return ""
    if c.get("step") in ("cuda init", "tiny kernel"):
        return " (a crash at the first CUDA call is the classic sign of a build for another CUDA major)"
    return ""


def _death_fix(v: _View, step: str, c: Mapping[str, Any]) -> str:
    if c.get("timed_out"):
        return (
            f"{step} hung: a wedged driver looks like this — check `dmesg` for Xid/NVRM errors and "
            "nvidia-smi; reboot if they are there"
        )
    if step.startswith(("load ", "import ")) and step != "import torch":
        name = step.split(" ", 1)[1]
        entry = next((e for e in v.f.requested if e.get("name") == name), {})
        owner = v.f.owners.get(entry.get("path", "")) or {}
        dist = owner.get("name") or entry.get("module") or name
        return (
            f"run `python -c 'import torch, ctypes; ctypes.CDLL(\"{entry.get('path') or name}\")'` to see it; "
            f"reinstall {dist} built for torch's CUDA major, or uninstall it"
            if step.startswith("load ")
            else f"run `python -c 'import torch, {name}'` to see it; reinstall {name} built for torch's CUDA major, or uninstall it"
        )
    if step == "import torch":
        return "run `python -c 'import torch'` to see it; reinstall torch (cu130 wheels or an NGC container)"
    return (
        "run `python -c 'import torch; print(torch.ones(1).cuda())'` to see it; make torch's CUDA major match "
        "the driver's (nvidia-smi) and this GPU"
    )


def _death_short(step: str, c: Mapping[str, Any]) -> str:
    if c.get("timed_out"):
        return "check dmesg for Xid errors; reboot"
    if step.startswith(("load ", "import ")) and step != "import torch":
        return "reinstall or uninstall that package"
    return "reinstall torch for this CUDA (cu130 on GB10)"


def _short_name(path: str) -> str:
    """``flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so`` -> ``flash_attn_2_cuda.so``."""
    return re.sub(r"\.cpython-[^.]+\.so$", ".so", os.path.basename(path))


def _gist(err: str) -> str:
    """The part of a loader error a short line keeps."""
    m = re.search(r"(\S+\.so[\w.]*): cannot open shared object file", err)
    if m:
        return f"{os.path.basename(m.group(1))} not found"
    m = re.search(r"undefined symbol: (\S+)", err)
    if m:
        sym = m.group(1)
        return f"undefined symbol {sym if len(sym) <= 40 else sym[:37] + '…'}"
    return err.split(":", 1)[0][:60]


def _with_error(needs: str, failed: Mapping[str, Any] | None) -> str:
    """``libcudart.so.12: cannot open shared object file`` when that is why it did not load."""
    if not failed or failed.get("retry_ok"):
        return needs
    err = str(failed.get("error") or "")
    m = re.match(r"(\S+): cannot open shared object file", err)
    if m and m.group(1) in needs.split(", "):
        return needs.replace(m.group(1), f"{m.group(1)}: cannot open shared object file")
    return f"{needs}; does not load: {_gist(err)}"


def _mismatch(v: _View, out: Findings) -> None:
    """Objects linking another CUDA major than the reference (combined with their load error)."""
    mismatched: list[dict[str, Any]] = []
    if v.reference is not None and (v.ref_from == "torch" or len(v.linker_majors) > 1):
        mismatched = sorted((x for x in v.linkers if _majors(x) != {v.reference}), key=lambda x: x["path"])
    out.read("mismatched_objects", len(mismatched))
    if not mismatched:
        return
    groups: dict[str, list[str]] = {}
    for x in mismatched:
        who = _who(x["path"], x.get("root"), v.f.owners)
        needs = ", ".join(n for n in x["needs"] if (elf.tracked(n) or ("", v.reference))[1] != v.reference)
        v.reported.add(x["path"])
        groups.setdefault(who, []).append(
            f"{os.path.basename(x['path'])} -> {_with_error(needs, v.failed.get(x['path']))}"
        )
    for who, items in groups.items():
        out.note(f"{who}: " + "; ".join(items))
    shown = [
        f"{who} ({first_n(items, 1, sep=' ')})"
        for who, items in groups.items()
    ]
    names = [w.split(" ", 1)[0] for w in groups if "(no installed" not in w]
    again = f"reinstall builds for CUDA {v.reference} ({_wheels(v.reference)})"
    if len(names) == 1:
        short = f"reinstall {names[0]} for CUDA {v.reference}"
    else:
        short = f"reinstall them for CUDA {v.reference}" if names else f"rebuild for CUDA {v.reference}"
    out.fail(
        f"{_objects(len(mismatched), 'link')} another CUDA major than {v.ref_text}: {first_n(shown)}",
        f"pip uninstall {' '.join(names)} and {again}"
        if names
        else f"remove or rebuild those files for CUDA {v.reference}",
        _mismatch_head(v, mismatched[0], len(groups), short),
        short,
    )


def _mismatch_head(v: _View, x: Mapping[str, Any], dists: int, short_fix: str) -> str:
    """The default line's finding for objects of another CUDA major: the
    distribution and version, the object, the library that was not found (or
    that it links) and the build's major, as much of it as fits in the line
    with the fix; the whole list is in the summary (``-v``)."""
    who = _who(x["path"], x.get("root"), v.f.owners)
    others = [n for n in x["needs"] if (elf.tracked(n) or ("", v.reference))[1] != v.reference]
    err = str((v.failed.get(x["path"]) or {}).get("error") or "")
    missing = re.match(r"(\S+): cannot open shared object file", err)
    if missing and not (v.failed.get(x["path"]) or {}).get("retry_ok"):
        lib = f"{os.path.basename(missing.group(1))} not found"
    else:
        lib = f"links {others[0] if others else 'another CUDA major'}"
    majors = "/".join(str(m) for m in sorted(_majors(x) - {v.reference})) or "?"
    obj = _short_name(x["path"])
    sep = ": " if lib.endswith("not found") else " "
    room = SHORT_WIDTH - len("G1 FAIL: ; fix: ") - len(short_fix)
    candidates = [
        plus_more(text, dists)  # "(+N more)": the other distributions, by the kit's rule
        for text in (f"{who}: {obj}{sep}{lib} (CUDA {majors} build)", f"{who}: {obj}{sep}{lib}", f"{who}{sep}{lib}")
    ]
    return next((c for c in candidates if len(c) <= min(room, 90)), candidates[-1])


def _torch_fits(v: _View, out: Findings) -> None:
    """torch (or the reference) newer than the driver; not the profile's major; CPU-only."""
    f, ref = v.f, v.reference
    if (
        ref is not None
        and v.ref_from in ("torch", "modules")
        and v.driver_major is not None
        and ref > v.driver_major
    ):
        out.fail(
            f"{v.ref_text or f'CUDA {ref}'} needs CUDA {ref} but the driver "
            f"({f.driver_version or '?'}) supports CUDA {v.driver_text}",
            f"upgrade the NVIDIA driver to one that supports CUDA {ref}, or install a torch "
            f"built for CUDA {v.driver_major}",
            f"CUDA {ref} build, driver {f.driver_version or '?'} supports CUDA {v.driver_text}",
            f"upgrade the driver to CUDA {ref}",
        )
    required = int(v.params.threshold("g1_cuda_major") or 0)
    if required and v.torch_major is not None and v.torch_major != required:
        where = "GB10 (SM121)" if v.params.gb10 else "this profile"
        version = v.torch_version or v.torch_dist
        out.fail(
            f"torch {version} is built for CUDA {v.torch_cuda or v.torch_major}; {where} needs a CUDA {required} build",
            f"{TORCH_INDEX}, or use an NGC container (nvcr.io/nvidia/pytorch:25.09-py3 or newer)",
            f"torch {version} is CUDA {v.torch_cuda or v.torch_major}; {where} needs CUDA {required}",
            "pip install torch from the cu130 index",
        )
    if v.cpu_only and v.gpu_seen:
        _cpu_only_torch(v, out)


def _cpu_only_torch(v: _View, out: Findings) -> None:
    """A CPU-only wheel next to a working driver: what plain pip on aarch64 gave before torch 2.11."""
    f = v.f
    gpu = ", ".join(sorted(set(f.gpus))) or "an NVIDIA GPU"
    driver = (
        f" (driver {f.driver_version}, CUDA {v.driver_text})" if f.driver_version and v.driver_text else ""
    )
    why = ""
    if (f.arch or "").lower() in ("aarch64", "arm64") and _before(v.torch_version, (2, 11)):
        why = "; PyPI's aarch64 torch before 2.11 is CPU-only"
    out.fail(
        f"torch {v.torch_version} is a CPU-only build (torch.version.cuda is None: "
        f'"Torch not compiled with CUDA enabled") on a machine with {gpu}{driver}',
        f"{TORCH_INDEX}{why}",
        f"torch {v.torch_version} is CPU-only on {gpu}",
        "pip install torch from the cu130 index",
    )


def _before(version: str | None, floor: tuple[int, int]) -> bool:
    m = re.match(r"(\d+)\.(\d+)", version or "")
    return bool(m) and (int(m.group(1)), int(m.group(2))) < floor


def _kernel(v: _View, out: Findings) -> str:
    """torch's tiny kernel: ``ok``, ``failed`` or ``not run``."""
    t, f = v.f.torch or {}, v.f
    kernel = t.get("kernel")
    gpu = f.gpus[0] if f.gpus else "the GPU"
    if isinstance(kernel, dict):
        if kernel.get("ok"):
            return "ok"
        got = kernel.get("error") or f"wrong result {kernel.get('value')!r}"
        out.fail(
            f"torch's tiny kernel failed on {gpu}: {got}",
            "install a torch build whose CUDA major and arch list cover this GPU (cu130 on GB10)",
            f"torch's tiny kernel failed on {gpu}",
            "reinstall torch for this GPU (cu130 on GB10)",
        )
        return "failed"
    if v.torch_cuda and v.gpu_seen and v.torch_version and t.get("cuda_available") is False:
        why = t.get("cuda_error") or "torch.cuda.is_available() is False"
        out.fail(
            f"torch {v.torch_version} (CUDA {v.torch_cuda}) cannot use the GPU: {why}",
            "check the driver (nvidia-smi) and that torch's CUDA major is not above the driver's",
            f"torch {v.torch_version} cannot use the GPU",
            "check nvidia-smi and torch's CUDA major",
        )
    return "not run"


def _loads(v: _View, out: Findings) -> None:
    """Objects that did not dlopen (not already named as another major's build)."""
    by_path = {e.get("path"): e for e in v.f.requested}
    for path, o in sorted(v.failed.items()):
        name = str((by_path.get(path) or {}).get("name") or os.path.basename(path))
        imp = o.get("import") or {}
        if o.get("retry_ok"):
            out.note(f"{name} loads only once its package is imported (it preloads what it needs)")
            continue
        if imp.get("error"):
            out.note(f"import {(by_path.get(path) or {}).get('module')} fails too: {imp['error']}")
        if path in v.reported:
            continue
        owner = v.f.owners.get(path) or {}
        dist = owner.get("name") or (by_path.get(path) or {}).get("module") or name
        who = (
            f"{owner['name']} {owner['version']}" if owner else f"{name} (no installed distribution lists it)"
        )
        err = str(o.get("error") or "failed").removeprefix(f"{path}: ").replace(path, name)
        if "undefined symbol" in err:
            fix = (
                f"reinstall {dist} built against torch {v.torch_version or v.torch_dist or ''} "
                f"(pip install --force-reinstall --no-build-isolation {dist}), or pip uninstall {dist}"
            )
            short = f"reinstall {dist} for this torch"
        else:
            major = v.reference
            fix = (
                f"reinstall {dist} built for CUDA {major} ({_wheels(major)}), or pip uninstall {dist}"
                if major
                else f"reinstall or uninstall {dist}"
            )
            short = f"reinstall {dist} for CUDA {major}" if major else f"reinstall {dist}"
        out.fail(
            f"{who}: {name} does not load: {err}",
            fix,
            f"{who}: {_short_name(name)}: {_gist(err)}",
            short,
        )


def _arch_notes(v: _View, out: Findings) -> None:
    """Which of a package's per-GPU-arch alternatives the child loaded."""
    chosen = (v.f.torch or {}).get("variants") or {}
    groups: dict[str, list[dict[str, Any]]] = {}
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
        tags = info["tags"]
        span = f"{_version(tags[0])}–{_version(tags[-1])}"
        if info["chosen"] is not None:
            out.note(
                f"{info['owner']} ships {len(tags)} CUDA builds ({span}); it loads its CUDA {_version(info['chosen'])} build"
            )
            continue
        if v.torch_cuda and v.reference is not None:
            dist = info["owner"].split(" ", 1)[0]
            out.fail(
                f"{info['owner']} ships builds for CUDA {span} and none for torch's CUDA {v.torch_cuda}",
                f"pip install -U {dist} (a release with a CUDA {v.reference} build), or pip uninstall {dist}",
                f"{info['owner']}: no build for CUDA {v.reference} (has {span})",
                f"pip install -U {dist}",
            )


def _leftovers(v: _View, out: Findings) -> None:
    """CUDA runtimes of another major that nothing links (a wheel, ldconfig, LD_LIBRARY_PATH)."""
    f, ref = v.f, v.reference
    if ref is None:
        return
    needed = {elf.tracked(n) for x in v.linkers for n in x.get("needs") or []}
    found: dict[tuple[str, int], list[str]] = {}
    providers = list((f.scan or {}).get("providers") or [])
    sources = [
        (
            providers,
            lambda p: (
                f"installed by {o['name']} {o['version']}"
                if (o := f.owners.get(p["path"]))
                else f"at {p['path']}"
            ),
        ),
        (f.ldconfig, lambda p: f"registered in ldconfig ({p['path']})"),
        (f.ld_library_path, lambda p: f"on LD_LIBRARY_PATH ({p['path']})"),
    ]
    for items, where in sources:
        for p in items:
            key = (p["lib"], p["major"])
            if p["major"] != ref and key not in needed:
                found.setdefault(key, []).append(where(p))
    if not found:
        return
    parts = [f"{lib}.so.{major} {', '.join(dict.fromkeys(w))}" for (lib, major), w in sorted(found.items())]
    out.note(*(f"leftover: {part}" for part in parts))
    pips = sorted(
        {o["name"] for p in providers if (p["lib"], p["major"]) in found and (o := f.owners.get(p["path"]))}
    )
    fix = f"pip uninstall {' '.join(pips)}" if pips else ""
    if any((p["lib"], p["major"]) in found for p in f.ldconfig):
        fix += ("; " if fix else "") + "remove the old toolkit's /etc/ld.so.conf.d entry and run ldconfig"
    fix += " — so a CUDA 12 wheel fails at install, not half-loaded mid-run"
    majors = "/".join(sorted({str(m) for _, m in found}))
    out.warn(
        f"leftover CUDA {majors} libraries linked by nothing ({first_n(parts, 2)})",
        fix.strip(),
        f"leftover CUDA {majors} libraries linked by nothing ({count(len(parts), 'library', 'libraries')})",
        f"pip uninstall {' '.join(pips[:2])}" if pips else "remove the old ld.so.conf.d entry",
    )


def _readings(v: _View, out: Findings) -> None:
    f, scan, c = v.f, v.f.scan or {}, v.f.child or {}
    skipped = scan.get("skipped") or {}
    out.read("torch_version", v.torch_version or v.torch_dist)
    out.read("torch_cuda", v.torch_cuda)
    out.read("driver_cuda", v.driver_text)
    out.read("elf_files_scanned", int(scan.get("files") or 0))
    out.read("elf_scan_time", round(float(scan.get("duration_s") or 0.0) * 1000, 1), "ms")
    out.read("elf_skipped", sum(skipped.values()))
    out.read("cuda_linked_objects", len(v.linkers))
    if v.reference is not None:
        out.read("cuda_major", v.reference)
    if c.get("steps"):  # where the child's seconds went (torch import, CUDA init, the loads)
        out.note("torch child: " + ", ".join(f"{k} {s:.2f} s" for k, s in list(c["steps"].items())[:12]))
    if skipped:
        out.note(
            "skipped while scanning: "
            + ", ".join(f"{n} {r.replace('_', ' ')}" for r, n in sorted(skipped.items()))
        )
    if scan.get("stopped"):
        out.note(f"the scan stopped early ({scan['stopped']}): files after that were not read")
    if f.ldconfig_error:
        out.note(f"ldconfig -p: {f.ldconfig_error}")
    if f.nvml_reason:
        out.note(f"driver CUDA version unknown: {f.nvml_reason}")
    if v.major_source and v.major_source != f"torch.version.cuda {v.torch_cuda}":
        out.note(f"torch's CUDA major read from {v.major_source} (the child gave none)")
    if v.ref_from in ("driver", "profile", "modules"):
        out.note(f"no torch CUDA build to compare with: the reference major is {v.ref_text}")
    cu_wheels = sorted(
        d["name"]
        for k, d in f.dists.items()
        if k.startswith("nvidia-") and v.reference and not k.endswith(f"-cu{v.reference}")
    )
    if cu_wheels:
        out.note(f"CUDA wheels for another major installed: {', '.join(cu_wheels)}")


def evaluate(facts: Facts, params: Params) -> Result:
    """Decide G1 from the facts (pure), stage by stage."""
    v = _view(facts, params)
    out = Findings("G1")
    _readings(v, out)
    _torch_child(v, out)
    _mismatch(v, out)
    _torch_fits(v, out)
    kernel = _kernel(v, out)
    out.read("kernel", kernel)
    _loads(v, out)
    _variant_sets(v, out)
    _arch_notes(v, out)
    _unverified(v, out)
    loaded = int((facts.torch or {}).get("loaded") or 0)
    out.read("objects_loaded", loaded - len([1 for o in v.failed.values() if not o.get("retry_ok")]))
    if out.problems:
        return _short(out, out.result())
    skip = _nothing_to_check(v)
    if skip is not None:
        skip.readings, skip.details = list(out.readings), list(out.details)
        return skip
    _leftovers(v, out)
    _cpu_torch_with_cuda_modules(v, out)
    return _verdict(v, out, kernel, loaded)


def _unverified(v: _View, out: Findings) -> None:
    """The child died in another check's step before the loads ran."""
    loaded = int((v.f.torch or {}).get("loaded") or 0)
    wanted = [e for e in v.f.requested if not e.get("group")]
    if v.died and v.torch_version and not out.problems and loaded < len(wanted):
        names = [str(e.get("name")) for e in wanted[loaded:]]
        out.warn(
            f"extension objects not loaded ({first_n(names)}): {(v.f.child or {}).get('describe')}",
            "see the check that owns that step (G2 flash-attn, G5 bandwidth)",
            f"{count(len(names), 'extension object')} not loaded: the torch child stopped",
            "see G2/G5 for the step that stopped it",
        )


def _nothing_to_check(v: _View) -> Result | None:
    scanned = int((v.f.scan or {}).get("files") or 0)
    no_torch = v.absent or (not v.torch_version and not v.torch_dist)
    if not ((no_torch or (v.cpu_only and not v.gpu_seen)) and not v.linkers):
        return None
    what = (
        "torch is not installed"
        if no_torch
        else f"torch {v.torch_version} is CPU-only and there is no NVIDIA GPU"
    )
    return Result(
        "G1",
        Status.SKIP,
        f"{what}, and none of the {scanned} shared objects scanned links a CUDA runtime: no CUDA ABI to check",
        headline=f"{what}; no CUDA module among {scanned} shared objects",
    )


def _cpu_torch_with_cuda_modules(v: _View, out: Findings) -> None:
    if v.cpu_only and v.linkers:
        majors = "/".join(map(str, sorted(v.linker_majors)))
        out.warn(
            f"torch {v.torch_version} is CPU-only, yet {_objects(len(v.linkers), 'link')} CUDA "
            f"{majors}: they cannot run with this torch",
            "install a CUDA build of torch (cu130) or uninstall the CUDA packages",
            f"torch {v.torch_version} is CPU-only, yet {count(len(v.linkers), 'module')} link CUDA {majors}",
            "install a CUDA torch (cu130) or uninstall them",
        )


def _verdict(v: _View, out: Findings, kernel: str, loaded: int) -> Result:
    """PASS (or WARN) with what was verified, in one line."""
    f = v.f
    majors = "/".join(map(str, sorted(v.linker_majors))) or "?"
    n = len(v.linkers)
    if v.cpu_only:
        consistent = ""  # said in the warning
    elif n:
        consistent = (
            f"the one CUDA-linked shared object uses CUDA {majors}"
            if n == 1
            else f"all {n} CUDA-linked shared objects use CUDA {majors}"
        )
    else:
        consistent = "no extension module links a CUDA runtime"
    picks = [
        f"{i['owner'].split(' ', 1)[0]} picks its CUDA {_version(i['chosen'])} build of {len(i['tags'])}"
        for i in v.variants.values()
        if i["chosen"] is not None
    ]
    driver = f"driver supports CUDA {v.driver_text}" if v.driver_text else "driver CUDA version unknown"
    kernel_text = {
        "ok": f"tiny kernel ran on {f.gpus[0] if f.gpus else (f.torch or {}).get('device_name') or 'the GPU'}",
        "not run": "no kernel run (no CUDA device)",
    }.get(kernel, "")
    loads = f"{count(loaded, 'extension object')} loaded" if loaded else ""
    if v.ref_from == "torch":
        head = v.ref_text
    elif v.cpu_only:
        head = f"torch {v.torch_version} (CPU-only)"
    else:
        head = "torch not installed"
    scanned = f"{int((f.scan or {}).get('files') or 0)} shared objects scanned"
    body = "; ".join(x for x in (f"{head}, {driver}", consistent, *picks, kernel_text, loads, scanned) if x)
    if out.warnings:
        texts = [s for s, _ in out.warnings]
        summary = f"{first_n(texts, 2)}; {body}"  # the warnings past two: counted here, listed in the details
        fix = "; ".join(dict.fromkeys(x for _, x in out.warnings[:2]))
        details = [*texts[2:], *out.details]
        result = Result("G1", Status.WARN, summary, fix, list(out.readings), details=details)
        return _short(out, result)
    who = f"torch {v.torch_version or v.torch_dist}" if v.ref_from == "torch" else head
    short = f"{who} on driver CUDA {v.driver_text or '?'}"
    if n:
        short += f", {count(n, 'CUDA module')} on CUDA {majors}"
    if kernel == "ok":
        short += ", kernel ok"
    return Result(
        "G1", Status.PASS, body, readings=list(out.readings), details=list(out.details), headline=short
    )


def _short(out: Findings, result: Result) -> Result:
    """Fill the short line from the first problem's (or warning's) headline."""
    head, short = out.first_short()
    if head:
        result.headline, result.short_fix = head, short
    return result
