"""Which shared objects link which CUDA runtime major, read from ELF headers.

``DT_NEEDED`` costs a few hundred bytes a file, never the file (:mod:`.elf_header` reads the
headers). Only libraries whose major tracks CUDA's are followed (cuFFT, cuSPARSE, cuSOLVER keep 12
in CUDA 13). Bad files are skipped and counted by reason, never raised. What a scan finds is a
:class:`Scan` record: G1 keeps it in its facts, so a capture replays it through the same type.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import field

from pytest_dgx_spark.checks.record import Record
from pytest_dgx_spark.datadef import define
from pytest_dgx_spark.probes.elf_header import (  # noqa: F401  (the reader, re-exported: elf.read_dynamic)
    Dynamic,
    ElfError,
    read_dynamic,
    read_dynamic_pyelftools,
)
from pytest_dgx_spark.probes.machine import MachineLike

#: libcudart.so.12, libcublasLt.so.13, libnvrtc.so.12.8.93, auditwheel's libcudart-9335f6a2.so.12
TRACKED = re.compile(r"^(libcudart|libcublasLt|libcublas|libnvrtc)(?:-[0-9a-f]{8})?\.so\.(\d+)(?:\.|$)")
#: CUDA toolkit libraries: providers of the runtime, not extensions built against it
TOOLKIT_PREFIXES = (
    "libcudart", "libcublas", "libnvrtc", "libcufft", "libcurand", "libcusolver", "libcusparse",
    "libnvJitLink", "libnvjitlink", "libcudnn", "libnccl", "libnvshmem", "libcufile", "libcupti",
    "libnvToolsExt", "libnvperf", "libnpp", "libnvjpeg", "libnvblas", "libcuda.", "libnvidia-",
    "libcheckpoint", "libpcsamplingutil",
)
#: libtorch/libc10 (a module linking them must match the installed torch's C++ ABI)
TORCH_LIBS = re.compile(r"^lib(torch|torch_cpu|torch_cuda|torch_python|c10|c10_cuda)\.so(\.|$)")

_LDCONFIG_LINE = re.compile(r"^\s*(\S+)\s+\(([^)]*)\)\s+=>\s+(\S.*?)\s*$")


def tracked(name: str) -> tuple[str, int] | None:
    """``libcudart.so.12`` -> ``("libcudart", 12)``; untracked names -> ``None``."""
    m = TRACKED.match(name)
    return (m.group(1), int(m.group(2))) if m else None


def is_shared_object_name(name: str) -> bool:
    return name.endswith(".so") or ".so." in name


@define
class Linker(Record):
    """A shared object (not a toolkit library) whose ``DT_NEEDED`` names a tracked CUDA library,
    or (``torch_linked``, ``needs`` empty) one that links libtorch."""

    path: str = ""
    root: str | None = None  # the package folder it was found under
    needs: list[str] = field(default_factory=list)  # the tracked CUDA libraries it links
    soname: str | None = None


@define
class Provider(Record):
    """A CUDA runtime library: in a wheel (``root``), in ldconfig's cache (``name``, ``flags``) or
    in an ``LD_LIBRARY_PATH`` folder."""

    path: str = ""
    lib: str = ""  # libcudart, libcublas, libcublasLt, libnvrtc
    major: int = 0
    root: str | None = None
    name: str | None = None
    flags: str | None = None


@define
class Scan(Record):
    """What a scan of the package folders found, and how it went (``skipped``: counts by reason)."""

    roots: list[str] = field(default_factory=list)
    files: int = 0
    dirs: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    skipped_samples: dict[str, list[str]] = field(default_factory=dict)
    stopped: str | None = None
    linkers: list[Linker] = field(default_factory=list)
    providers: list[Provider] = field(default_factory=list)
    torch_linked: list[Linker] = field(default_factory=list)
    duration_s: float = 0.0

    @property
    def objects(self) -> list[Linker | Provider]:
        """Every file the scan names (linkers, providers, libtorch-linked)."""
        return [*self.linkers, *self.providers, *self.torch_linked]


@define
class ScanStats:
    """How a scan went: files parsed, skipped by reason (a few samples kept)."""

    files: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    samples: dict[str, list[str]] = field(default_factory=dict)
    dirs: int = 0
    stopped: str | None = None

    def skip(self, reason: str, path: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1
        kept = self.samples.setdefault(reason, [])
        if len(kept) < 3:
            kept.append(path)


def _file_stat(entry: os.DirEntry[str], stats: ScanStats) -> os.stat_result | None:
    """The regular file behind a ``*.so`` entry (a file symlink followed), or None once skipped."""
    try:
        st = entry.stat(follow_symlinks=True)
    except OSError as exc:
        broken = "broken_symlink" if entry.is_symlink() else "os_error"
        stats.skip("symlink_loop" if exc.errno == errno.ELOOP else broken, entry.path)
        return None
    if stat.S_ISDIR(st.st_mode):
        stats.skip("directory", entry.path)  # a symlink to a folder named x.so
    elif not stat.S_ISREG(st.st_mode):
        stats.skip("not_a_file", entry.path)
    else:
        return st
    return None


def iter_shared_objects(
    roots: Iterable[str], stats: ScanStats, *, max_files: int = 50_000, deadline: float | None = None
) -> Iterator[tuple[str, str, os.stat_result]]:
    """``(root, path, stat)`` of every distinct regular ``*.so``/``*.so.*`` file. Folder symlinks
    are not followed; file symlinks are, deduplicated by inode (``libcudart.so.12`` is read once)."""
    seen: set[tuple[int, int]] = set()
    for root in roots:
        stack = [root]
        while stack:
            folder = stack.pop()
            stats.dirs += 1
            if deadline is not None and stats.dirs % 64 == 0 and time.monotonic() > deadline:
                stats.stopped = "time budget"
                return
            try:
                entries = list(os.scandir(folder))
            except OSError as exc:
                stats.skip("unreadable_dir" if exc.errno in (errno.EACCES, errno.EPERM) else "os_error", folder)
                continue
            for entry in entries:
                so = is_shared_object_name(entry.name)
                try:
                    is_dir = entry.is_dir(follow_symlinks=False)
                except OSError:
                    is_dir = False
                if is_dir:
                    if so:
                        stats.skip("directory", entry.path)
                    if entry.name != "__pycache__":
                        stack.append(entry.path)
                    continue
                st = _file_stat(entry, stats) if so else None
                if st is None or (st.st_dev, st.st_ino) in seen:
                    continue
                seen.add((st.st_dev, st.st_ino))
                if stats.files >= max_files:
                    stats.stopped = f"{max_files} files"
                    return
                yield root, entry.path, st


def scan(
    roots: Iterable[str], *, reader: Callable[[str], Dynamic] = read_dynamic, max_files: int = 50_000,
    budget_s: float | None = None,
) -> Scan:
    """``linkers``: files (not toolkit libraries) whose DT_NEEDED names a tracked library;
    ``providers``: files that *are* one; ``torch_linked``: others linking libtorch (a torch C++ ABI
    mismatch is an ``undefined symbol``)."""
    roots = list(roots)
    start = time.monotonic()
    deadline = start + budget_s if budget_s else None
    stats = ScanStats()
    linkers: list[Linker] = []
    providers: list[Provider] = []
    torch_linked: list[Linker] = []
    for root, path, _st in iter_shared_objects(roots, stats, max_files=max_files, deadline=deadline):
        base = os.path.basename(path)
        provided = tracked(base)
        if provided is not None:
            providers.append(Provider(path, *provided, root=root))
        try:
            dyn = reader(path)
        except ElfError as exc:
            stats.skip(exc.reason, path)
            continue
        stats.files += 1
        if deadline is not None and stats.files % 64 == 0 and time.monotonic() > deadline:
            stats.stopped = "time budget"
            break
        if base.startswith(TOOLKIT_PREFIXES):
            continue
        needs = sorted({n for n in dyn.needed if tracked(n)})
        if needs:
            linkers.append(Linker(path, root, needs, dyn.soname))
        elif any(TORCH_LIBS.match(n) for n in dyn.needed):
            torch_linked.append(Linker(path, root))
    return Scan(
        roots=roots, files=stats.files, dirs=stats.dirs, skipped=stats.skipped, skipped_samples=stats.samples,
        stopped=stats.stopped, linkers=linkers, providers=providers, torch_linked=torch_linked,
        duration_s=round(time.monotonic() - start, 4),
    )  # fmt: skip


def parse_ldconfig(text: str) -> list[Provider]:
    """Tracked CUDA libraries in ``ldconfig -p`` output (``\\tlibcudart.so.12 (libc6,x86-64) => /path``)."""
    return [
        Provider(m[3], *provided, name=m[1], flags=m[2])
        for m in filter(None, map(_LDCONFIG_LINE.match, text.splitlines()))
        if (provided := tracked(m[1])) is not None
    ]


def list_library_dirs(dirs: Iterable[str]) -> list[Provider]:
    """Tracked CUDA libraries directly inside ``LD_LIBRARY_PATH`` folders (names only)."""
    out: list[Provider] = []
    for folder in dirs:
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        for name in names:
            if (provided := tracked(name)) is not None:
                out.append(Provider(os.path.join(folder, name), *provided))
    return out


def site_roots(entries: Iterable[str]) -> list[str]:
    """The package folders of an import path, resolved, none inside another: ``site-packages``,
    ``dist-packages``, any folder holding ``*.dist-info`` (``pip --target``; not a stray ``.egg-info``)."""
    roots: list[str] = []
    for entry in entries:
        try:
            base = os.path.basename(entry.rstrip(os.sep))
            holds = os.path.isdir(entry) and (
                base in ("site-packages", "dist-packages") or any(n.endswith(".dist-info") for n in os.listdir(entry))
            )
        except OSError:
            continue
        if holds and (real := os.path.realpath(entry)) not in roots:
            roots.append(real)
    nested = {r for r in roots for o in roots if r != o and r.startswith(o.rstrip(os.sep) + os.sep)}
    return [r for r in roots if r not in nested]


def scan_environment(machine: MachineLike, *, max_files: int = 50_000) -> Scan:
    """The scan of the checked Python's package folders, once per run (``machine.store`` keeps it as
    JSON, as a capture records it)."""

    def probe() -> dict[str, object]:
        roots = site_roots(machine.python_path())
        return scan(roots, max_files=max_files, budget_s=max(machine.timeout * 3, 5.0)).to_dict()

    return Scan.from_dict(machine.store.get_or_compute("elf:scan", probe))
