"""Which shared objects link which CUDA runtime major — read from ELF headers.

G1 must name the extension module that links ``libcudart.so.12`` in a CUDA 13
environment before that module is imported (and segfaults or fails with
``cannot open shared object file`` mid-run). The answer is in each file's
``DT_NEEDED`` entries. Reading them costs a few hundred bytes per file: the
ELF header, the program headers, the ``PT_DYNAMIC`` segment and the needed
names from the dynamic string table — never the whole file, which for
``libtorch_cuda.so`` is over a gigabyte.

The reader is a small ``struct``-based one rather than pyelftools:
``benchmarks/bench_elf_scan.py`` measures both on the same trees; pyelftools
builds Python objects for every header and section it touches, and the scan
of a full ML environment has to stay well under half a second.

Only the libraries whose major tracks the CUDA major are followed:
``libcudart``, ``libcublas``, ``libcublasLt`` and ``libnvrtc``. ``libcufft``,
``libcusparse``, ``libcusolver`` keep major 12 inside CUDA 13 (see
``tests/data/h200-cu130/readelf_torch_cuda_needed.txt``), so their major says
nothing about the CUDA major a module was built for.

Bad files (truncated, not ELF, unreadable, a directory called ``x.so``, a
symlink loop) are skipped and counted by reason, never raised.
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

#: libcudart.so.12, libcublasLt.so.13, libnvrtc.so.12.8.93, and the hashed names
#: auditwheel gives bundled copies (libcudart-9335f6a2.so.12)
TRACKED = re.compile(r"^(libcudart|libcublasLt|libcublas|libnvrtc)(?:-[0-9a-f]{8})?\.so\.(\d+)(?:\.|$)")

#: CUDA toolkit libraries (pip ``nvidia-*`` wheels, bundled copies): they are
#: providers of the runtime, not extension modules built against it; their
#: own DT_NEEDED (libcublas -> libcublasLt) is internal to one toolkit release.
TOOLKIT_PREFIXES = (
    "libcudart",
    "libcublas",
    "libnvrtc",
    "libcufft",
    "libcurand",
    "libcusolver",
    "libcusparse",
    "libnvJitLink",
    "libnvjitlink",
    "libcudnn",
    "libnccl",
    "libnvshmem",
    "libcufile",
    "libcupti",
    "libnvToolsExt",
    "libnvperf",
    "libnpp",
    "libnvjpeg",
    "libnvblas",
    "libcuda.",
    "libnvidia-",
    "libcheckpoint",
    "libpcsamplingutil",
)

#: libtorch/libc10 (a module linking them must match the installed torch's C++ ABI)
TORCH_LIBS = re.compile(r"^lib(torch|torch_cpu|torch_cuda|torch_python|c10|c10_cuda)\.so(\.|$)")

ELF_MAGIC = b"\x7fELF"
PT_LOAD, PT_DYNAMIC = 1, 2
DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_SONAME = 0, 1, 5, 10, 14
#: dynamic segments and name reads are bounded: a corrupt header cannot make us read a gigabyte
MAX_DYNAMIC = 1 << 20
NAME_CHUNK = 512
HEAD = 4096


class ElfError(Exception):
    """A file that is not a readable ELF shared object; ``reason`` is the skip bucket."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Dynamic:
    """What the dynamic section says: the libraries needed, and the file's own name."""

    needed: tuple[str, ...]
    soname: str | None = None


def tracked(name: str) -> tuple[str, int] | None:
    """``libcudart.so.12`` -> ``("libcudart", 12)``; untracked names -> ``None``."""
    m = TRACKED.match(name)
    return (m.group(1), int(m.group(2))) if m else None


def is_toolkit_library(basename: str) -> bool:
    """A CUDA toolkit library file (a provider), not an extension module."""
    return basename.startswith(TOOLKIT_PREFIXES)


def is_shared_object_name(name: str) -> bool:
    """``*.so`` and ``*.so.*`` — what the dynamic loader and Python import."""
    return name.endswith(".so") or ".so." in name


# ---------------------------------------------------------------------- the reader


def _pread(fd: int, size: int, offset: int) -> bytes:
    if offset < 0 or size < 0:
        raise ElfError("malformed", f"negative offset {offset}")
    return os.pread(fd, size, offset)


def read_dynamic(path: str) -> Dynamic:
    """``DT_NEEDED`` and ``DT_SONAME`` of one ELF file, reading headers only.

    Follows the dynamic loader's view (program headers, ``PT_DYNAMIC``,
    ``DT_STRTAB`` mapped through the ``PT_LOAD`` segments), so stripped files
    without section headers read the same. Raises :class:`ElfError`.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        reason = "unreadable" if exc.errno in (errno.EACCES, errno.EPERM) else "os_error"
        if exc.errno == errno.ELOOP:
            reason = "symlink_loop"
        raise ElfError(reason, exc.strerror or str(exc)) from None
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


def _read_fd(fd: int) -> Dynamic:
    head = _pread(fd, HEAD, 0)
    if len(head) < 4 or head[:4] != ELF_MAGIC:
        raise ElfError("not_elf", "no ELF magic")
    if len(head) < 16:
        raise ElfError("truncated", "ELF identification cut short")
    cls, data = head[4], head[5]
    if cls not in (1, 2) or data not in (1, 2):
        raise ElfError("malformed", f"unknown ELF class {cls} / data encoding {data}")
    e = "<" if data == 1 else ">"
    if cls == 2:
        ehdr, phdr_fmt, dyn_fmt = struct.Struct(e + "HHIQQQIHHHHHH"), e + "IIQQQQQQ", struct.Struct(e + "qQ")
    else:
        ehdr, phdr_fmt, dyn_fmt = struct.Struct(e + "HHIIIIIHHHHHH"), e + "IIIIIIII", struct.Struct(e + "iI")
    if len(head) < 16 + ehdr.size:
        raise ElfError("truncated", "ELF header cut short")
    fields = ehdr.unpack_from(head, 16)
    phoff, phentsize, phnum = fields[4], fields[8], fields[9]
    if phnum == 0:
        return Dynamic(())  # a relocatable object or a core file: links nothing
    if phnum == 0xFFFF or phentsize < struct.calcsize(phdr_fmt):
        raise ElfError("malformed", "unsupported program header table")
    table_size = phentsize * phnum
    if table_size > MAX_DYNAMIC:
        raise ElfError("malformed", f"program header table of {table_size} bytes")
    table = head[phoff : phoff + table_size] if phoff + table_size <= len(head) else b""
    if not table:
        table = _pread(fd, table_size, phoff)
        if len(table) < table_size:
            raise ElfError("truncated", "program headers cut short")

    loads, dyn_off, dyn_size = _segments(table, cls, phdr_fmt, phentsize, phnum)
    if dyn_off < 0:
        return Dynamic(())  # statically linked

    raw = _pread(fd, min(dyn_size, MAX_DYNAMIC), dyn_off)
    if len(raw) < min(dyn_size, MAX_DYNAMIC):
        raise ElfError("truncated", "dynamic segment cut short")
    needed_offsets: list[int] = []
    soname_offset: int | None = None
    strtab = strsz = None
    for tag, val in dyn_fmt.iter_unpack(raw[: len(raw) - len(raw) % dyn_fmt.size]):
        if tag == DT_NULL:
            break
        if tag == DT_NEEDED:
            needed_offsets.append(val)
        elif tag == DT_STRTAB:
            strtab = val
        elif tag == DT_STRSZ:
            strsz = val
        elif tag == DT_SONAME:
            soname_offset = val
    if not needed_offsets and soname_offset is None:
        return Dynamic(())
    if strtab is None:
        raise ElfError("malformed", "DT_NEEDED without DT_STRTAB")
    base = _file_offset(strtab, loads)
    if base is None:
        raise ElfError("malformed", "DT_STRTAB outside every PT_LOAD segment")

    wanted = [*needed_offsets, *([soname_offset] if soname_offset is not None else [])]
    if strsz is not None and any(o >= strsz for o in wanted):
        raise ElfError("malformed", "string offset beyond DT_STRSZ")
    lo, hi = min(wanted), max(wanted) + NAME_CHUNK
    if hi - lo <= 65536:  # one read covers every name (the usual layout)
        chunk = _pread(fd, hi - lo, base + lo)
        names = [_cstr(chunk, o - lo) for o in wanted]
    else:
        names = [_cstr(_pread(fd, NAME_CHUNK, base + o), 0) for o in wanted]
    if soname_offset is not None:
        return Dynamic(tuple(names[:-1]), names[-1])
    return Dynamic(tuple(names))


def _segments(
    table: bytes, cls: int, phdr_fmt: str, phentsize: int, phnum: int
) -> tuple[list[tuple[int, int, int]], int, int]:
    """The ``PT_LOAD`` segments ``(vaddr, filesz, offset)`` and the ``PT_DYNAMIC``
    segment's offset and size (-1 when there is none) from the program headers."""
    loads: list[tuple[int, int, int]] = []  # (vaddr, filesz, offset)
    dyn_off = dyn_size = -1
    for i in range(phnum):
        if cls == 2:
            p_type, _flags, p_offset, p_vaddr, _p, p_filesz, _m, _a = struct.unpack_from(
                phdr_fmt, table, i * phentsize
            )
        else:
            p_type, p_offset, p_vaddr, _p, p_filesz, _m, _flags, _a = struct.unpack_from(
                phdr_fmt, table, i * phentsize
            )
        if p_type == PT_LOAD:
            loads.append((p_vaddr, p_filesz, p_offset))
        elif p_type == PT_DYNAMIC:
            dyn_off, dyn_size = p_offset, p_filesz
    return loads, dyn_off, dyn_size


def _file_offset(vaddr: int, loads: list[tuple[int, int, int]]) -> int | None:
    for start, size, offset in loads:
        if start <= vaddr < start + size:
            return vaddr - start + offset
    return None


def _cstr(buf: bytes, at: int) -> str:
    if at < 0 or at >= len(buf):
        raise ElfError("truncated", "string table cut short")
    end = buf.find(b"\0", at)
    if end < 0:
        raise ElfError("truncated", "unterminated name in the string table")
    return buf[at:end].decode("utf-8", errors="replace")


def read_dynamic_pyelftools(path: str) -> Dynamic:
    """The same answer through pyelftools (kept for the benchmark and as a cross-check)."""
    from elftools.common.exceptions import ELFError, ELFParseError
    from elftools.elf.elffile import ELFFile

    try:
        with open(path, "rb") as fh:
            elf = ELFFile(fh)
            needed: list[str] = []
            soname = None
            for seg in elf.iter_segments():
                if seg["p_type"] != "PT_DYNAMIC":
                    continue
                for tag in seg.iter_tags():
                    if tag.entry.d_tag == "DT_NEEDED":
                        needed.append(tag.needed)
                    elif tag.entry.d_tag == "DT_SONAME":
                        soname = tag.soname
            return Dynamic(tuple(needed), soname)
    except IsADirectoryError:
        raise ElfError("directory", "is a directory") from None
    except PermissionError as exc:
        raise ElfError("unreadable", str(exc)) from None
    except OSError as exc:
        raise ElfError("os_error", str(exc)) from None
    except ELFError as exc:
        reason = "not_elf" if "Magic number" in str(exc) else "malformed"
        raise ElfError(reason, str(exc)) from None
    except (ELFParseError, ValueError, struct.error, EOFError, KeyError, IndexError) as exc:
        raise ElfError("truncated", str(exc) or type(exc).__name__) from None
    except Exception as exc:  # construct raises its own StreamError and friends
        raise ElfError("truncated", f"{type(exc).__name__}: {exc}") from None


# ---------------------------------------------------------------------- the walk


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


def iter_shared_objects(
    roots: Iterable[str],
    stats: ScanStats,
    *,
    max_files: int = 50_000,
    deadline: float | None = None,
) -> Iterator[tuple[str, str, os.stat_result]]:
    """Yield ``(root, path, stat)`` for every distinct regular ``*.so``/``*.so.*`` file.

    Directory symlinks are not followed (no loops, no escaping the tree);
    file symlinks are followed once and deduplicated by inode, so
    ``libcudart.so.12 -> libcudart.so.12.8.90`` is read once.
    """
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
                stats.skip(
                    "unreadable_dir" if exc.errno in (errno.EACCES, errno.EPERM) else "os_error", folder
                )
                continue
            for entry in entries:
                name = entry.name
                so = is_shared_object_name(name)
                try:
                    is_dir = entry.is_dir(follow_symlinks=False)
                except OSError:
                    is_dir = False
                if is_dir:
                    if so:
                        stats.skip("directory", entry.path)
                    if name != "__pycache__":
                        stack.append(entry.path)
                    continue
                if not so:
                    continue
                try:
                    st = entry.stat(follow_symlinks=True)
                except OSError as exc:
                    if exc.errno == errno.ELOOP:
                        stats.skip("symlink_loop", entry.path)
                    elif entry.is_symlink():
                        stats.skip("broken_symlink", entry.path)
                    else:
                        stats.skip("os_error", entry.path)
                    continue
                if stat.S_ISDIR(st.st_mode):
                    stats.skip("directory", entry.path)  # a symlink to a folder named x.so
                    continue
                if not stat.S_ISREG(st.st_mode):
                    stats.skip("not_a_file", entry.path)
                    continue
                key = (st.st_dev, st.st_ino)
                if key in seen:
                    continue
                seen.add(key)
                if stats.files >= max_files:
                    stats.stopped = f"{max_files} files"
                    return
                yield root, entry.path, st


def scan(
    roots: Iterable[str],
    *,
    reader: Callable[[str], Dynamic] = read_dynamic,
    max_files: int = 50_000,
    budget_s: float | None = None,
) -> dict[str, Any]:
    """Scan ``roots`` for CUDA-linked shared objects; a JSON-compatible answer.

    ``linkers``: files (not toolkit libraries) whose DT_NEEDED names a tracked
    CUDA library, with those names. ``providers``: files that *are* a tracked
    library (``nvidia/cuda_runtime/lib/libcudart.so.12``). ``torch_linked``:
    the other modules that link libtorch/libc10 (G1 loads them too: a torch
    C++ ABI mismatch is an ``undefined symbol``). ``files``: ELF
    files read; ``skipped``: bad files by reason.
    """
    roots = list(roots)
    start = time.monotonic()
    deadline = start + budget_s if budget_s else None
    stats = ScanStats()
    linkers: list[dict[str, Any]] = []
    providers: list[dict[str, Any]] = []
    torch_linked: list[dict[str, Any]] = []
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
        if is_toolkit_library(base):
            continue
        needs = sorted({n for n in dyn.needed if tracked(n)})
        if needs:
            linkers.append({"path": path, "root": root, "needs": needs, "soname": dyn.soname})
        elif any(TORCH_LIBS.match(n) for n in dyn.needed):
            torch_linked.append({"path": path, "root": root})
    return {
        "roots": roots,
        "files": stats.files,
        "dirs": stats.dirs,
        "skipped": stats.skipped,
        "skipped_samples": stats.samples,
        "stopped": stats.stopped,
        "linkers": linkers,
        "providers": providers,
        "torch_linked": torch_linked,
        "duration_s": round(time.monotonic() - start, 4),
    }


# ---------------------------------------------------------------------- ldconfig

_LDCONFIG_LINE = re.compile(r"^\s*(\S+)\s+\(([^)]*)\)\s+=>\s+(\S.*?)\s*$")


def parse_ldconfig(text: str) -> list[dict[str, Any]]:
    """Tracked CUDA libraries in ``ldconfig -p`` output.

    ``\\tlibcudart.so.12 (libc6,x86-64) => /usr/local/cuda-12.8/lib64/libcudart.so.12``
    """
    out: list[dict[str, Any]] = []
    for line in text.splitlines():
        m = _LDCONFIG_LINE.match(line)
        if not m:
            continue
        provided = tracked(m.group(1))
        if provided is None:
            continue
        out.append(
            {
                "name": m.group(1),
                "flags": m.group(2),
                "path": m.group(3),
                "lib": provided[0],
                "major": provided[1],
            }
        )
    return out


def list_library_dirs(dirs: Iterable[str]) -> list[dict[str, Any]]:
    """Tracked CUDA libraries directly inside ``LD_LIBRARY_PATH`` folders (names only)."""
    out: list[dict[str, Any]] = []
    for folder in dirs:
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        for name in names:
            provided = tracked(name)
            if provided is not None:
                out.append({"path": os.path.join(folder, name), "lib": provided[0], "major": provided[1]})
    return out


# ---------------------------------------------------------------------- the environment


def site_roots(entries: Iterable[str]) -> list[str]:
    """The package folders of an import path: ``site-packages``/``dist-packages``
    folders and any folder holding ``*.dist-info`` (a ``pip --target`` dir on
    PYTHONPATH), resolved, without a folder that sits inside another one.

    Other entries (the stdlib, ``lib-dynload``, a source checkout) hold no
    installed CUDA extension and are not walked."""
    roots: list[str] = []
    for entry in entries:
        try:
            if not os.path.isdir(entry):
                continue
            base = os.path.basename(entry.rstrip(os.sep))
            # A project folder with a stray ``.egg-info`` is not a package folder
            # (it may hold a whole venv); ``pip --target`` folders have ``.dist-info``.
            holds = base in ("site-packages", "dist-packages") or any(
                n.endswith(".dist-info") for n in os.listdir(entry)
            )
        except OSError:
            continue
        if holds:
            real = os.path.realpath(entry)
            if real not in roots:
                roots.append(real)
    nested = {r for r in roots for o in roots if r != o and r.startswith(o.rstrip(os.sep) + os.sep)}
    return [r for r in roots if r not in nested]


def scan_environment(machine: Any, *, max_files: int = 50_000) -> dict[str, Any]:
    """The scan of the checked Python's package folders, once per run (``machine.store``)."""

    def probe() -> dict[str, Any]:
        roots = site_roots(machine.python_path())
        return scan(roots, max_files=max_files, budget_s=max(machine.timeout * 3, 5.0))

    return machine.store.get_or_compute("elf:scan", probe)
