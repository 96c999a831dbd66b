"""The ELF reader: ``DT_NEEDED`` and ``DT_SONAME`` of one file, from its headers.

A few hundred bytes a file, never the file (``libtorch_cuda.so`` is over a gigabyte), through a small
``struct`` reader: pyelftools is too slow for a whole ML environment (``benchmarks/bench_elf_scan.py``)
and is kept only as a cross-check. A file that is not a readable ELF shared object raises
:class:`ElfError` with its skip bucket; :mod:`.elf` scans folders with it.
"""

from __future__ import annotations

import errno
import os
import struct
from typing import Any

from pytest_dgx_spark.datadef import define

ELF_MAGIC = b"\x7fELF"
PT_LOAD, PT_DYNAMIC = 1, 2
DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_SONAME = 0, 1, 5, 10, 14
#: bounded reads: a corrupt header cannot make us read a gigabyte
MAX_DYNAMIC = 1 << 20
NAME_CHUNK = 512
HEAD = 4096


class ElfError(Exception):
    """Not a readable ELF shared object; ``reason`` is the skip bucket."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@define(frozen=True)
class Dynamic:
    needed: tuple[str, ...]
    soname: str | None = None


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
