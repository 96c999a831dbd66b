"""Which shared objects link which CUDA runtime major, read from ELF headers.

``DT_NEEDED`` costs a few hundred bytes a file, never the file (``libtorch_cuda.so`` is over a
gigabyte), through a small ``struct`` reader: pyelftools is too slow for a whole ML environment
(``benchmarks/bench_elf_scan.py``). Only libraries whose major tracks CUDA's are followed (cuFFT,
cuSPARSE, cuSOLVER keep 12 in CUDA 13). Bad files are skipped and counted by reason, never raised.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import struct
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

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

ELF_MAGIC = b"\x7fELF"
PT_LOAD, PT_DYNAMIC = 1, 2
DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_SONAME = 0, 1, 5, 10, 14
#: bounded reads: a corrupt header cannot make us read a gigabyte
MAX_DYNAMIC = 1 << 20
NAME_CHUNK = 512
HEAD = 4096
_LDCONFIG_LINE = re.compile(r"^\s*(\S+)\s+\(([^)]*)\)\s+=>\s+(\S.*?)\s*$")


class ElfError(Exception):
    """Not a readable ELF shared object; ``reason`` is the skip bucket."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Dynamic:
    needed: tuple[str, ...]
    soname: str | None = None


def tracked(name: str) -> tuple[str, int] | None:
    """``libcudart.so.12`` -> ``("libcudart", 12)``; untracked names -> ``None``."""
    m = TRACKED.match(name)
    return (m.group(1), int(m.group(2))) if m else None


def is_shared_object_name(name: str) -> bool:
    return name.endswith(".so") or ".so." in name


def _pread(fd: int, size: int, offset: int) -> bytes:
    if offset < 0 or size < 0:
        raise ElfError("malformed", f"negative offset {offset}")
    return os.pread(fd, size, offset)


def read_dynamic(path: str) -> Dynamic:
    """``DT_NEEDED`` and ``DT_SONAME`` as the dynamic loader sees them (program headers, ``DT_STRTAB``
    mapped through ``PT_LOAD``: stripped files read the same). Raises :class:`ElfError`."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        reason = "unreadable" if exc.errno in (errno.EACCES, errno.EPERM) else "os_error"
        raise ElfError("symlink_loop" if exc.errno == errno.ELOOP else reason, exc.strerror or str(exc)) from None
    try:
        return _read_fd(fd)
    except OSError as exc:
        if exc.errno == errno.EISDIR:
            raise ElfError("directory", "is a directory") from None
        raise ElfError("os_error", exc.strerror or str(exc)) from None
    except struct.error as exc:
        raise ElfError("truncated", str(exc)) from None
    except (OverflowError, ValueError) as exc:  # an offset past what pread accepts
        raise ElfError("malformed", str(exc)) from None
    finally:
        os.close(fd)


def _segments(fd: int, head: bytes) -> tuple[str, int, list[tuple[int, int, int]], int, int]:
    """``(byte order, class, PT_LOAD (vaddr, filesz, offset)s, PT_DYNAMIC offset (-1: none), its size)``."""
    if len(head) < 4 or head[:4] != ELF_MAGIC:
        raise ElfError("not_elf", "no ELF magic")
    if len(head) < 16:
        raise ElfError("truncated", "ELF identification cut short")
    cls, data = head[4], head[5]
    if cls not in (1, 2) or data not in (1, 2):
        raise ElfError("malformed", f"unknown ELF class {cls} / data encoding {data}")
    e = "<" if data == 1 else ">"
    ehdr = struct.Struct(e + ("HHIQQQIHHHHHH" if cls == 2 else "HHIIIIIHHHHHH"))
    phdr_fmt = e + ("IIQQQQQQ" if cls == 2 else "IIIIIIII")
    if len(head) < 16 + ehdr.size:
        raise ElfError("truncated", "ELF header cut short")
    fields = ehdr.unpack_from(head, 16)
    phoff, phentsize, phnum = fields[4], fields[8], fields[9]
    loads: list[tuple[int, int, int]] = []
    if phnum == 0:  # a relocatable object or a core file: links nothing
        return e, cls, loads, -1, -1
    if phnum == 0xFFFF or phentsize < struct.calcsize(phdr_fmt):
        raise ElfError("malformed", "unsupported program header table")
    size = phentsize * phnum
    if size > MAX_DYNAMIC:
        raise ElfError("malformed", f"program header table of {size} bytes")
    table = head[phoff : phoff + size] if phoff + size <= len(head) else _pread(fd, size, phoff)
    if len(table) < size:
        raise ElfError("truncated", "program headers cut short")
    dyn_off = dyn_size = -1
    for i in range(phnum):
        h = struct.unpack_from(phdr_fmt, table, i * phentsize)
        # 64-bit: type flags offset vaddr paddr filesz ...; 32-bit: type offset vaddr paddr filesz ...
        p_type, p_offset, p_vaddr, p_filesz = (h[0], h[2], h[3], h[5]) if cls == 2 else (h[0], h[1], h[2], h[4])
        if p_type == PT_LOAD:
            loads.append((p_vaddr, p_filesz, p_offset))
        elif p_type == PT_DYNAMIC:
            dyn_off, dyn_size = p_offset, p_filesz
    return e, cls, loads, dyn_off, dyn_size


def _read_fd(fd: int) -> Dynamic:
    e, cls, loads, dyn_off, dyn_size = _segments(fd, _pread(fd, HEAD, 0))
    if dyn_off < 0:
        return Dynamic(())  # statically linked, or no program headers
    raw = _pread(fd, min(dyn_size, MAX_DYNAMIC), dyn_off)
    if len(raw) < min(dyn_size, MAX_DYNAMIC):
        raise ElfError("truncated", "dynamic segment cut short")
    dyn_fmt = struct.Struct(e + ("qQ" if cls == 2 else "iI"))
    needed: list[int] = []
    tags: dict[int, int] = {}
    for tag, val in dyn_fmt.iter_unpack(raw[: len(raw) - len(raw) % dyn_fmt.size]):
        if tag == DT_NULL:
            break
        if tag == DT_NEEDED:
            needed.append(val)
        elif tag in (DT_STRTAB, DT_STRSZ, DT_SONAME):
            tags[tag] = val
    soname = tags.get(DT_SONAME)
    if not needed and soname is None:
        return Dynamic(())
    if DT_STRTAB not in tags:
        raise ElfError("malformed", "DT_NEEDED without DT_STRTAB")
    base = next((tags[DT_STRTAB] - s + o for s, n, o in loads if s <= tags[DT_STRTAB] < s + n), None)
    if base is None:
        raise ElfError("malformed", "DT_STRTAB outside every PT_LOAD segment")
    wanted = [*needed, *([soname] if soname is not None else [])]
    if DT_STRSZ in tags and any(o >= tags[DT_STRSZ] for o in wanted):
        raise ElfError("malformed", "string offset beyond DT_STRSZ")
    names = _names(fd, base, wanted)
    return Dynamic(tuple(names[:-1]), names[-1]) if soname is not None else Dynamic(tuple(names))


def _names(fd: int, base: int, offsets: list[int]) -> list[str]:
    lo, hi = min(offsets), max(offsets) + NAME_CHUNK
    if hi - lo <= 65536:  # one read covers every name (the usual layout)
        chunk = _pread(fd, hi - lo, base + lo)
        return [_cstr(chunk, o - lo) for o in offsets]
    return [_cstr(_pread(fd, NAME_CHUNK, base + o), 0) for o in offsets]


def _cstr(buf: bytes, at: int) -> str:
    if at < 0 or at >= len(buf):
        raise ElfError("truncated", "string table cut short")
    end = buf.find(b"\0", at)
    if end < 0:
        raise ElfError("truncated", "unterminated name in the string table")
    return buf[at:end].decode("utf-8", errors="replace")


def read_dynamic_pyelftools(path: str) -> Dynamic:
    """The same answer through pyelftools (for the benchmark and as a cross-check)."""
    from elftools.common.exceptions import ELFError, ELFParseError  # lazy: optional, benchmark only
    from elftools.elf.dynamic import DynamicSegment
    from elftools.elf.elffile import ELFFile

    try:
        with open(path, "rb") as fh:
            segments = [seg for seg in ELFFile(fh).iter_segments() if isinstance(seg, DynamicSegment)]
            # Any: pyelftools adds .soname/.needed per tag at run time, and without pyelftools
            # installed mypy knows nothing of it (no ignore that is unused in one of the two)
            tags: list[Any] = [t for seg in segments for t in seg.iter_tags()]
            sonames = [t.soname for t in tags if t.entry.d_tag == "DT_SONAME"]
            needed = [t.needed for t in tags if t.entry.d_tag == "DT_NEEDED"]
            return Dynamic(tuple(needed), (sonames or [None])[-1])
    except IsADirectoryError:
        raise ElfError("directory", "is a directory") from None
    except PermissionError as exc:
        raise ElfError("unreadable", str(exc)) from None
    except OSError as exc:
        raise ElfError("os_error", str(exc)) from None
    except ELFError as exc:
        raise ElfError("not_elf" if "Magic number" in str(exc) else "malformed", str(exc)) from None
    except (ELFParseError, ValueError, struct.error, EOFError, KeyError, IndexError) as exc:
        raise ElfError("truncated", str(exc) or type(exc).__name__) from None
    except Exception as exc:  # construct raises its own StreamError and friends
        raise ElfError("truncated", f"{type(exc).__name__}: {exc}") from None


@dataclass
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
) -> dict[str, Any]:
    """``linkers``: files (not toolkit libraries) whose DT_NEEDED names a tracked library;
    ``providers``: files that *are* one; ``torch_linked``: others linking libtorch (a torch C++ ABI
    mismatch is an ``undefined symbol``)."""
    roots = list(roots)
    start = time.monotonic()
    deadline = start + budget_s if budget_s else None
    stats = ScanStats()
    linkers: list[dict[str, Any]] = []
    providers: list[dict[str, Any]] = []
    torch_linked: list[dict[str, str]] = []
    for root, path, _st in iter_shared_objects(roots, stats, max_files=max_files, deadline=deadline):
        base = os.path.basename(path)
        provided = tracked(base)
        if provided is not None:
            providers.append({"path": path, "root": root, "lib": provided[0], "major": provided[1]})
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
            linkers.append({"path": path, "root": root, "needs": needs, "soname": dyn.soname})
        elif any(TORCH_LIBS.match(n) for n in dyn.needed):
            torch_linked.append({"path": path, "root": root})
    return {
        "roots": roots, "files": stats.files, "dirs": stats.dirs, "skipped": stats.skipped,
        "skipped_samples": stats.samples, "stopped": stats.stopped, "linkers": linkers,
        "providers": providers, "torch_linked": torch_linked,
        "duration_s": round(time.monotonic() - start, 4),
    }


def parse_ldconfig(text: str) -> list[dict[str, Any]]:
    """Tracked CUDA libraries in ``ldconfig -p`` output (``\\tlibcudart.so.12 (libc6,x86-64) => /path``)."""
    return [
        {"name": m[1], "flags": m[2], "path": m[3], "lib": provided[0], "major": provided[1]}
        for m in filter(None, map(_LDCONFIG_LINE.match, text.splitlines()))
        if (provided := tracked(m[1])) is not None
    ]


def list_library_dirs(dirs: Iterable[str]) -> list[dict[str, Any]]:
    """Tracked CUDA libraries directly inside ``LD_LIBRARY_PATH`` folders (names only)."""
    out: list[dict[str, Any]] = []
    for folder in dirs:
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        for name in names:
            if (provided := tracked(name)) is not None:
                out.append({"path": os.path.join(folder, name), "lib": provided[0], "major": provided[1]})
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


def scan_environment(machine: MachineLike, *, max_files: int = 50_000) -> dict[str, Any]:
    """The scan of the checked Python's package folders, once per run (``machine.store``)."""

    def probe() -> dict[str, Any]:
        roots = site_roots(machine.python_path())
        return scan(roots, max_files=max_files, budget_s=max(machine.timeout * 3, 5.0))

    return machine.store.get_or_compute("elf:scan", probe)
