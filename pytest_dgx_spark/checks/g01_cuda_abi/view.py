"""What every G1 stage reads, computed once from the facts: torch, the reference major, the objects
that count (a per-CUDA-version package counts its chosen build only), and the names a line uses.

The reference major is torch's, else the driver's, else the profile's, else the modules' most common
one; a tie never blames the newer major. Pure: no machine is read here.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import field

from pytest_dgx_spark.checks.g01_cuda_abi.facts import Facts, Linker, LoadFailure, Owner
from pytest_dgx_spark.checks.kit import ChildFacts, Params
from pytest_dgx_spark.datadef import define
from pytest_dgx_spark.probes import elf
from pytest_dgx_spark.probes.elf import Scan
from pytest_dgx_spark.probes.machine import format_cuda_version

CU_TAG = re.compile(r"\+cu(\d{2,3})(?![0-9])")
#: one build per CUDA version: libbitsandbytes_cuda118.so ... libbitsandbytes_cuda132.so
VARIANT = re.compile(r"^(?P<stem>.*?)cuda(?P<tag>\d{2,3})(?P<tail>(?:_[A-Za-z]\w*)?\.so.*)$")
CANNOT_OPEN = re.compile(r"(\S+): cannot open shared object file")
TORCH_INDEX = "pip install torch --index-url https://download.pytorch.org/whl/cu130"


# ---------------------------------------------------------------------- small helpers


def variant_of(path: str) -> tuple[str, int] | None:
    """``…/libbitsandbytes_cuda130.so`` -> (``…/libbitsandbytes_cuda*.so``, 130)."""
    m = VARIANT.match(os.path.basename(path))
    return (os.path.join(os.path.dirname(path), f"{m['stem']}cuda*{m['tail']}"), int(m["tag"])) if m else None


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


def version(tag: int) -> str:
    return f"{tag // 10}.{tag % 10}"


def rel(path: str, root: str | None) -> str:
    prefix = (root or "").rstrip(os.sep) + os.sep
    return path[len(prefix) :] if root and path.startswith(prefix) else path


def owned(owner: Owner | None, name: str) -> str:
    return f"{owner.name} {owner.version}" if owner else f"{name} (no installed distribution lists it)"


def who(x: Linker, owners: Mapping[str, Owner]) -> str:
    return owned(owners.get(x.path), rel(x.path, x.root))


def majors(linker: Linker) -> set[int]:
    return {t[1] for n in linker.needs if (t := elf.tracked(n))}


def objects(n: int, verb: str) -> str:
    """``1 shared object links`` / ``3 shared objects link``."""
    return f"{n} shared object {verb}s" if n == 1 else f"{n} shared objects {verb}"


def wheels(major: int) -> str:
    return "cu130 wheels, or an NGC container that ships them" if major == 13 else f"CUDA {major} wheels"


def short_name(path: str) -> str:
    """``flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so`` -> ``flash_attn_2_cuda.so``."""
    return re.sub(r"\.cpython-[^.]+\.so$", ".so", os.path.basename(path))


def gist(err: str) -> str:
    """The part of a loader error a short line keeps."""
    if m := re.search(r"(\S+\.so[\w.]*): cannot open shared object file", err):
        return f"{os.path.basename(m.group(1))} not found"
    if m := re.search(r"undefined symbol: (\S+)", err):
        sym = m.group(1)
        return f"undefined symbol {sym if len(sym) <= 40 else sym[:37] + '…'}"
    return err.split(":", 1)[0][:60]


# ---------------------------------------------------------------------- the view


@define
class Variant:
    tags: list[int]
    chosen: int | None
    owner: str


@define
class View:
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
    linkers: list[Linker] = field(default_factory=list)  # a per-CUDA set counts its chosen build
    variants: dict[str, Variant] = field(default_factory=dict)
    failed: dict[str, LoadFailure] = field(default_factory=dict)
    reported: set[str] = field(default_factory=set)

    @property
    def scan(self) -> Scan:
        return self.f.scan

    @property
    def c(self) -> ChildFacts:
        return self.f.child

    @property
    def linker_majors(self) -> Counter[int]:
        return Counter(m for x in self.linkers for m in majors(x))

    def other_needs(self, x: Linker) -> list[str]:
        return [n for n in x.needs if (elf.tracked(n) or ("", self.reference))[1] != self.reference]

    def missing_lib(self, path: str) -> str | None:
        """The library whose absence stopped ``path`` loading (not when a retry loaded it)."""
        o = self.failed.get(path) or LoadFailure()
        m = CANNOT_OPEN.match(o.error or "")
        return m.group(1) if m and not o.retry_ok else None


def view(f: Facts, params: Params) -> View:
    t = f.torch
    v = View(f, params, torch_version=t.torch_version, torch_cuda=t.torch_cuda)
    _torch_view(v)
    v.driver_major = f.driver_cuda // 1000 if f.driver_cuda else None
    v.driver_text = format_cuda_version(f.driver_cuda)
    v.failed = dict(t.load_failed)
    all_linkers = [x for x in f.scan.linkers if majors(x)]
    groups = _cuda_sets(all_linkers)
    grouped = {x.path for builds in groups.values() for x in builds.values()}
    _reference(v, [x for x in all_linkers if x.path not in grouped])
    _variants(v, all_linkers, groups)
    return v


def _cuda_sets(linkers: list[Linker]) -> dict[str, dict[int, Linker]]:
    """The per-CUDA-version sets among the CUDA-linked objects: group -> {tag: object}."""
    groups: dict[str, dict[int, Linker]] = {}
    for x in linkers:
        if var := variant_of(x.path):
            groups.setdefault(var[0], {})[var[1]] = x
    return {k: b for k, b in groups.items() if len(b) > 1}


def _variants(v: View, linkers: list[Linker], groups: dict[str, dict[int, Linker]]) -> None:
    """Keep only the build a per-CUDA-version package loads: the child's, else the reference major's."""
    chosen_by_child, drop = v.f.torch.variants, set[str]()
    for key, builds in groups.items():
        if key in chosen_by_child:
            tag = next((t for t, x in builds.items() if x.path == chosen_by_child[key]), None)
        else:
            tag = pick_variant(builds, f"{v.reference}.9") if v.reference else None
        v.variants[key] = Variant(sorted(builds), tag, who(next(iter(builds.values())), v.f.owners))
        drop.update(x.path for t, x in builds.items() if t != tag)
    v.linkers = [x for x in linkers if x.path not in drop]


def _torch_view(v: View) -> None:
    """What torch is: absent, died, its CUDA major (from the child, else its files), CPU-only."""
    t, c = v.f.torch, v.c
    err = t.torch_import_error or ""
    v.absent = err.startswith("ModuleNotFoundError") and "'torch'" in err
    v.died = bool(c.signal or c.timed_out) or (c.recorded and not c.finished and not c.error)
    v.torch_dist = v.f.torch_dist
    v.torch_major = cuda_major(v.torch_cuda) if v.torch_version else None
    v.major_source = f"torch.version.cuda {v.torch_cuda}" if v.torch_major else ""
    if v.torch_major is None and not v.torch_version:  # the child gave no answer: read the files
        v.torch_major, v.major_source = _torch_major_from_files(v)
    v.cpu_only = bool(v.torch_version) and not v.torch_cuda
    v.gpu_seen = bool(v.f.gpus) or bool(t.device_count)


def _torch_major_from_files(v: View) -> tuple[int | None, str]:
    if (tagged := tag_major(v.torch_dist)) is not None:
        return tagged, f"the +cu tag of torch {v.torch_dist}"
    own = [x for x in v.scan.linkers if (o := v.f.owner(x.path)) is not None and o.name == "torch"]
    counted = Counter(m for x in own for m in majors(x))
    return (counted.most_common(1)[0][0], "torch's own libraries") if counted else (None, "")


def _reference(v: View, linkers: list[Linker]) -> None:
    """torch's CUDA, else the driver's, else the profile's, else the modules' most common
    major (a tie: the newest, so the newer major is never blamed)."""
    required = int(v.params.threshold("g1_cuda_major") or 0)
    counted = Counter(m for x in linkers for m in majors(x))
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
