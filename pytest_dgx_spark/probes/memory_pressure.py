"""What ends a job on a unified-memory box before the pool is empty (G3, issue 22 N4/N6).

Read through the machine's root, bounded: ``/proc/buddyinfo`` and ``/proc/vmstat`` (after days
of uptime a Spark shows ~118 GiB MemAvailable and no free 32 MiB block; loads stall and the
driver logs ``NV_ERR_NO_MEMORY``, sparkring #173), this process's cgroup memory limit (an OOM
killer of its own), ``/dev/shm`` (a tmpfs out of the same pool), and the kernel's OOM-kill lines
(parsed here; the kernel log reader reads them). Typed records back (:mod:`..checks.record`: G3's
facts carry them as they are, a capture rebuilds them), never an exception: what cannot be read
is an ``error`` line.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import field
from typing import Any, Protocol

from pytest_dgx_spark.checks.record import Record
from pytest_dgx_spark.datadef import define

#: a ``/proc`` file of this kind is a few KiB; more is not a real one
PROC_LIMIT = 256 * 1024
#: ``memory.max`` and friends hold one number
VALUE_LIMIT = 4096
#: cgroup levels walked up from this process's cgroup (real ones are < 10 deep)
MAX_CGROUP_DEPTH = 32
#: each cgroup version's mount and memory limit file
LIMIT_FILES = {2: ("/sys/fs/cgroup", "memory.max"), 1: ("/sys/fs/cgroup/memory", "memory.limit_in_bytes")}
#: v1's "no limit" is PAGE_COUNTER_MAX pages (~2^63 bytes); anything this large is none
V1_UNLIMITED = 1 << 62
#: the vmstat counters G3 keeps
VMSTAT_KEYS = ("nr_free_pages", "compact_stall", "compact_fail", "compact_success")
#: Linux base page sizes (KiB): x86-64 4, arm64 4, 16 or 64
PAGE_SIZES_KIB = (4, 16, 64)
PMD_SIZE_FILE = "/sys/kernel/mm/transparent_hugepage/hpage_pmd_size"
#: at most this many OOM kills are kept (the latest); a kernel log may hold thousands
MAX_OOM_KILLS = 20

_BUDDY = re.compile(r"^Node\s+(\d{1,4}),\s+zone\s+(\w{1,16})((?:\s+\d{1,19}){1,32})\s*$")
_VMSTAT = re.compile(r"^(\w{1,64})\s+(-?\d{1,20})\s*$")
_OOM = re.compile(
    r"(?P<cg>Memory cgroup )?[Oo]ut of memory(?: \([\w ]{1,40}\))?: Killed process (?P<pid>\d{1,10}) "
    r"\((?P<name>.{0,64}?)\)(?=[ ,]|$)(?:.*?\btotal-vm:(?P<vm>\d{1,20})kB)?"
    r"(?:.*?\banon-rss:(?P<anon>\d{1,20})kB)?"
)
_SIZE = re.compile(r"^(\d{1,20})([kKmMgGtTpPeE%]?)$")


class MachineLike(Protocol):
    """The part of :class:`~pytest_dgx_spark.probes.machine.MachineLike` read here."""

    def read_text(self, absolute: str, limit: int = ...) -> tuple[str | None, str | None]: ...
    def exists(self, absolute: str) -> bool: ...


@define
class PageSize(Record):
    """The kernel's base page size; ``kib`` None: not known (``error`` says why)."""

    kib: int | None = None
    error: str | None = None


@define
class BuddyZone(Record):
    """One ``/proc/buddyinfo`` line: a NUMA node's zone and its free blocks per order."""

    node: int = 0
    zone: str = ""
    counts: list[int] = field(default_factory=list)  # free blocks of order 0, 1, 2, …


@define
class Buddy(Record):
    zones: list[BuddyZone] = field(default_factory=list)
    error: str | None = None


@define
class Vmstat(Record):
    counters: dict[str, int] = field(default_factory=dict)
    error: str | None = None


@define
class CgroupLimit(Record):
    version: int | None = None  # 2, 1, or None when no memory cgroup was found
    cgroup: str | None = None  # this process's cgroup path
    limit_bytes: int | None = None  # the smallest limit on the way to the root; None: no limit
    file: str | None = None  # the file that set it
    error: str | None = None


@define
class ShmMount(Record):
    fstype: str | None = None  # None: nothing is mounted on /dev/shm
    size_kib: int | None = None  # None with a tmpfs: no size= option, the kernel's default (half of RAM)
    percent: float | None = None  # size=N% of RAM
    error: str | None = None


@define
class OomKill(Record):
    """One kernel OOM kill, from its ``Killed process`` line."""

    pid: int = 0
    name: str = ""
    anon_rss_kb: int | None = None
    text: str = ""


def parse_zones(text: str) -> list[BuddyZone]:
    """``Node 0, zone   Normal  15 66 …`` lines -> zones; lines that do not parse are ignored."""
    found = (_BUDDY.match(line.strip()) for line in text.splitlines())
    return [BuddyZone(int(m.group(1)), m.group(2), [int(c) for c in m.group(3).split()]) for m in found if m]


def parse_buddyinfo(text: str) -> list[dict[str, Any]]:
    """:func:`parse_zones` as JSON rows (``{"node", "zone", "counts"}``), as ``watch`` samples keep them."""
    return [zone.to_dict() for zone in parse_zones(text)]


def parse_vmstat(text: str) -> dict[str, int]:
    """``/proc/vmstat`` -> ``{name: value}`` for :data:`VMSTAT_KEYS`."""
    found = (_VMSTAT.match(line.strip()) for line in text.splitlines())
    return {m.group(1): int(m.group(2)) for m in found if m and m.group(1) in VMSTAT_KEYS}


def buddyinfo(machine: MachineLike) -> Buddy:
    text, error = machine.read_text("/proc/buddyinfo", PROC_LIMIT)
    zones = parse_zones(text) if text is not None else []
    if text is not None:
        error = None if zones else "/proc/buddyinfo has no readable 'Node N, zone NAME counts' line"
    return Buddy(zones, error)


def vmstat(machine: MachineLike) -> Vmstat:
    text, error = machine.read_text("/proc/vmstat", PROC_LIMIT)
    counters = parse_vmstat(text) if text is not None else {}
    if text is not None:
        error = None if counters else "/proc/vmstat has none of " + ", ".join(VMSTAT_KEYS)
    return Vmstat(counters, error)


def page_size(machine: MachineLike) -> PageSize:
    """The base page size from THP's PMD size (``/sys/kernel/mm/transparent_hugepage/hpage_pmd_size``):
    a PMD maps PAGE_SIZE / 8 pages, so 2 MiB means 4 KiB pages, 32 MiB 16 KiB, 512 MiB 64 KiB.
    Read through the root like /proc, and planted by a test; the kernel's own figure, where the
    ratio MemFree / ``nr_free_pages`` is not (a VM's balloon made it 19.9 on a 4 KiB box)."""
    text, error = machine.read_text(PMD_SIZE_FILE, VALUE_LIMIT)
    if text is None:
        return PageSize(None, error)
    value = text.strip()
    pmd = int(value) if re.fullmatch(r"\d{1,20}", value) else 0
    kib = next((p for p in PAGE_SIZES_KIB if (p * 1024) * (p * 1024 // 8) == pmd), None)
    return PageSize(kib, None if kib else f"{PMD_SIZE_FILE} holds {value[:40]!r}, no page size's PMD")


def parse_cgroup(text: str) -> tuple[int, str] | None:
    """``(version, path)`` of the memory cgroup in ``/proc/self/cgroup``: v1's ``N:memory:/p``
    (or ``memory`` among joined controllers) wins, else v2's ``0::/p``; None without either."""
    v2 = None
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3 or not parts[2].startswith("/"):
            continue
        if "memory" in parts[1].split(","):
            return 1, parts[2]
        if parts[0] == "0" and parts[1] == "":
            v2 = (2, parts[2])
    return v2


def _limit_value(raw: str, version: int) -> int | None:
    """Bytes, or None for no limit; ValueError for anything else."""
    value = raw.strip()
    if value == "max":
        return None
    if not re.fullmatch(r"\d{1,20}", value):
        raise ValueError(f"holds {value[:40]!r}, not a number of bytes or 'max'")
    number = int(value)
    return None if version == 1 and number >= V1_UNLIMITED else number


def _levels(path: str) -> list[str]:
    """``/a/b`` -> ``["/a/b", "/a", "/"]`` (at most :data:`MAX_CGROUP_DEPTH`)."""
    path = posixpath.normpath("/" + path.strip().lstrip("/"))
    levels = [path]
    while path != "/" and len(levels) < MAX_CGROUP_DEPTH:
        path = posixpath.dirname(path)
        levels.append(path)
    return levels


def cgroup_limit(machine: MachineLike) -> CgroupLimit:
    """The smallest memory limit from this process's cgroup up to the root of what
    ``/sys/fs/cgroup`` shows (inside a container that root is the container's own cgroup)."""
    text, error = machine.read_text("/proc/self/cgroup", PROC_LIMIT)
    found = parse_cgroup(text) if text is not None else None
    if found is None:
        if text is not None:
            error = "/proc/self/cgroup names no memory cgroup (neither v2 '0::/…' nor v1 'memory')"
        return CgroupLimit(error=error)
    version, path = found
    out = CgroupLimit(version, path)
    base, name = LIMIT_FILES[version]
    if not machine.exists(base):
        out.error = f"{base} is not mounted: the cgroup's memory limit cannot be read"
        return out
    for level in _levels(path):
        file = posixpath.join(base + level.rstrip("/"), name) if level != "/" else f"{base}/{name}"
        if not machine.exists(file):
            continue
        raw, why = machine.read_text(file, VALUE_LIMIT)
        try:
            limit = _limit_value(raw, version) if raw is not None else None
        except ValueError as exc:
            why = f"{file} {exc}"
        if why:
            out.limit_bytes, out.file, out.error = None, file, why
            return out
        if limit is not None and (out.limit_bytes is None or limit < out.limit_bytes):
            out.limit_bytes, out.file = limit, file
    return out


def _mount_size(options: str) -> tuple[int | None, float | None]:
    """tmpfs ``size=`` as (KiB, None) or (None, percent of RAM); (None, None) without one."""
    for opt in options.split(","):
        if not opt.startswith("size="):
            continue
        m = _SIZE.match(opt[5:])
        if not m:
            raise ValueError(f"size option {opt[:40]!r} is not a size")
        number, unit = int(m.group(1)), m.group(2).lower()
        if unit == "%":
            return None, float(number)
        shift = {"": -10, "k": 0, "m": 10, "g": 20, "t": 30, "p": 40, "e": 50}[unit]
        return (number << shift if shift >= 0 else number >> -shift), None
    return None, None


def dev_shm(machine: MachineLike) -> ShmMount:
    """What is mounted on ``/dev/shm`` (the last mount there wins) and its size limit."""
    text, error = machine.read_text("/proc/mounts", 1 << 20)
    out = ShmMount(error=error)
    mounts = [fields for fields in (line.split() for line in (text or "").splitlines()) if len(fields) >= 4]
    entries = [fields for fields in mounts if fields[1] == "/dev/shm"]
    if text is None or not entries:
        return out
    out.fstype = entries[-1][2]
    try:
        out.size_kib, out.percent = _mount_size(entries[-1][3])
    except ValueError as exc:
        out.error = f"/proc/mounts: /dev/shm {exc}"
    return out


def parse_oom_kill(line: str) -> OomKill | None:
    """The victim of one kernel line ``Out of memory: Killed process 3742074 (lmcache)
    total-vm:81306880kB, anon-rss:1058560kB, …`` (also ``Memory cgroup out of memory: …``
    and a dmesg/kmsg prefix before it), or None for any other line."""
    m = oom_kill_match(line)
    if not m:
        return None
    anon = m.group("anon")
    return OomKill(int(m.group("pid")), m.group("name"), int(anon) if anon else None, line.strip()[:400])


def oom_kill_match(line: str) -> re.Match[str] | None:
    """The kernel's ``Killed process`` line matched (groups ``cg``, ``pid``, ``name``, ``vm``,
    ``anon``), for a reader that keeps more of it than :func:`parse_oom_kill` (the kernel log's)."""
    return _OOM.search(line) if "Killed process" in line else None


def parse_oom_kills(lines: Any, keep: int = MAX_OOM_KILLS) -> list[OomKill]:
    """The last ``keep`` OOM kills among ``lines`` (an iterable of kernel log lines, oldest first)."""
    kills: list[OomKill] = []
    for line in lines:
        kill = parse_oom_kill(str(line))
        if kill is not None:
            kills.append(kill)
            del kills[:-keep]
    return kills
