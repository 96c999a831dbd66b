"""G3's second question: what ends the job before the pool is empty (issue 22, N4 and N6).

Pure decisions on :mod:`pytest_dgx_spark.probes.memory_pressure`'s readings, merged with the
headroom verdict (:func:`merge`): a fragmented zone Normal (no free 32 MiB block FAILs, fewer than
``g3_contig_blocks_min`` WARNs: sparkring #173 and PR #202, MiaAI DeepSeek-v4.1 #23; see
docs/EVIDENCE.md), a cgroup memory limit, Ray's memory monitor, ``/dev/shm``, the kernel's OOM kills.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_dgx_spark import readings
from pytest_dgx_spark.checks.g03_uma_headroom.facts import Facts, kb
from pytest_dgx_spark.checks.kit import Findings, Params, first_n, plus_more
from pytest_dgx_spark.model import Result, Status
from pytest_dgx_spark.probes.memory_pressure import PAGE_SIZES_KIB, BuddyZone, Vmstat

KIB_PER_GIB = 1024 * 1024
#: compaction failing this often (compact_fail / compact_stall) makes a reboot the fix:
#: sparkring #173's ranks failed 50 % and 40 %, and compacting recovered 55 and 0 blocks
COMPACT_FAIL_REBOOT = 0.4
#: a /dev/shm that may grow past this is worth a note (F6: `shm_size: 64gb` against `10g`)
SHM_NOTE_GIB = 16.0
RAY_DEFAULT_THRESHOLD = 0.95
RAY_DEFAULT_REFRESH_MS = 250
COMPACT_CMD = "sudo sh -c 'sync; echo 3 > /proc/sys/vm/drop_caches; echo 1 > /proc/sys/vm/compact_memory'"
KERNEL_LOG_PENDING = "kernel OOM kills: not read (no readable kernel log; G4's details say how to allow it)"


def gib(kib: float) -> float:
    return round(kib / KIB_PER_GIB, 1)


def page_size_kib(facts: Facts, counters: Mapping[str, int]) -> int | None:
    """The base page size: the kernel's (THP's PMD size, :func:`memory_pressure.page_size`), else
    MemFree (kB) over ``nr_free_pages`` when they agree within 10 % (the same memory in two units
    on a plain kernel; a VM's balloon breaks it, hence the tolerance)."""
    if facts.page_size and facts.page_size.kib:
        return facts.page_size.kib
    pages, free = kb(counters, "nr_free_pages"), kb(facts.meminfo, "MemFree")
    if not pages or not free or pages <= 0 or free <= 0:
        return None
    ratio = free / pages
    return next((p for p in PAGE_SIZES_KIB if abs(ratio / p - 1) <= 0.1), None)


def normal_counts(zones: Sequence[BuddyZone | Mapping[str, Any]]) -> list[int]:
    """Free blocks per order in zone Normal, summed over NUMA nodes (as sparkring does); a zone
    may be a JSON row of :func:`~pytest_dgx_spark.probes.memory_pressure.parse_buddyinfo` (watch's)."""
    rows = [z if isinstance(z, BuddyZone) else BuddyZone.from_dict(z) for z in zones]
    nodes = [zone.counts for zone in rows if zone.zone == "Normal"]
    orders = range(max(map(len, nodes), default=0))
    return [sum(c[order] for c in nodes if order < len(c)) for order in orders]


def contiguous(counts: list[int], page_kib: int, block_mib: float) -> tuple[int, float, bool]:
    """``(equivalent blocks, largest free block MiB, capped)``: the free memory in blocks of at
    least ``block_mib`` as that many ``block_mib`` blocks. ``capped``: this kernel's largest
    block is smaller (4 KiB pages: 4 MiB), so the largest order's memory is counted instead."""
    sizes = [page_kib * (1 << order) / 1024 for order in range(len(counts))]  # MiB per block
    largest = max((s for s, c in zip(sizes, counts, strict=True) if c), default=0.0)
    capped = bool(sizes) and sizes[-1] < block_mib
    floor = sizes[-1] if capped else block_mib
    free_mib = sum(s * c for s, c in zip(sizes, counts, strict=True) if s >= floor)
    return int(free_mib // block_mib), largest, capped


def _compaction(counters: Mapping[str, int], out: Findings) -> str:
    """The compaction readings; the reboot advice when compaction mostly fails here."""
    for key in ("compact_stall", "compact_fail", "compact_success"):
        if key in counters:
            out.read(key, counters[key])
    stall, fail = kb(counters, "compact_stall"), kb(counters, "compact_fail")
    if not stall or fail / stall < COMPACT_FAIL_REBOOT:
        return ""
    return (f"; compaction fails here ({fail} of {stall} direct compactions since boot), so reboot rather "
            "than compact")


def fragmentation(facts: Facts, params: Params, out: Findings) -> None:
    """N4: flag a zone Normal without enough free high-order blocks."""
    buddy, vm = facts.buddyinfo, facts.vmstat or Vmstat()
    if buddy is None:
        out.note("/proc/buddyinfo: not read")
        return
    reboot = _compaction(vm.counters, out)
    if vm.error:
        out.note(f"compaction counters: {vm.error}")
    counts, page = normal_counts(buddy.zones), page_size_kib(facts, vm.counters)
    if buddy.error or not counts or page is None:
        size_error = (facts.page_size.error if facts.page_size else None) or "no THP PMD size"
        unknown = f"page size unknown ({size_error}; MemFree / nr_free_pages fits no page size)"
        why = buddy.error or (unknown if counts else "no zone Normal in /proc/buddyinfo")
        out.note(f"free-block check not made: {why}")
        return
    block, minimum = params.threshold("g3_contig_block_mib"), params.threshold("g3_contig_blocks_min")
    blocks, largest, capped = contiguous(counts, page, block)
    out.read("page_size", page, "KiB")
    out.read(readings.NORMAL_FREE_BLOCKS.name, blocks, f"x {block:g} MiB")
    out.read("largest_free_block", round(largest, 3), "MiB")
    if capped:
        top = page * (1 << (len(counts) - 1)) // 1024
        out.note(f"this kernel's largest buddy block is {top} MiB ({page} KiB pages): zone Normal's free "
                 f"memory in blocks of that size counts as {block:g} MiB blocks")
    if minimum > 0 and blocks < minimum:
        _flag_fragmented(counts, page, (block, minimum), (blocks, largest), reboot, out)


def _flag_fragmented(
    counts: list[int], page: int, want: tuple[float, float], found: tuple[int, float], reboot: str,
    out: Findings,
) -> None:
    """Too few free ``block``-sized pieces: FAIL at none, else WARN, telling fragmentation from
    memory that is simply not free (so compacting or reclaiming is the right advice)."""
    (block, minimum), (blocks, largest) = want, found
    what = "no" if blocks == 0 else f"{blocks} x {block:g} MiB worth of"
    free_gib = round(sum(page * (c << o) for o, c in enumerate(counts)) / KIB_PER_GIB, 1)
    out.read("normal_free", free_gib, "GiB")
    state = "physical memory is fragmented" if free_gib * 1024 >= minimum * block else (
        "what is free is in small pieces and the rest must be reclaimed and compacted first")
    text = (f"zone Normal has {what} free blocks of {block:g} MiB or more (want >= {minimum:g}; "
            f"{free_gib:g} GiB free, largest block {largest:g} MiB): {state}, so large driver allocations "
            "stall or fail (NV_ERR_NO_MEMORY) and can livelock the host although MemAvailable looks fine "
            "(sparkring #173)")
    fix = (f"between runs: {COMPACT_CMD}, then check again; if still below {minimum:g}, reboot{reboot}; "
           "do not start a large load right after killing a large process")
    out.flag(Status.FAIL if blocks == 0 else Status.WARN, text, fix,
             f"memory fragmented: {blocks} free {block:g} MiB blocks in zone Normal (want >= {minimum:g})",
             "reboot" if reboot else "compact memory as root (drop_caches, compact_memory) or reboot",
             code="G3.fragmented")


def cgroup(facts: Facts, workload: float | None, total_kib: int | None, params: Params, out: Findings) -> None:
    """N6: a container/cgroup memory limit, an OOM killer that fires before the pool is empty."""
    cg = facts.cgroup
    if cg is None or cg.error:
        out.note("cgroup memory limit: " + (f"cannot read ({cg.error})" if cg else "not read"))
        return
    limit = cg.limit_bytes
    if limit is None:
        out.read("cgroup_memory_limit", "max")
        return
    limit_g, where = round(limit / (1 << 30), 1), cg.file or "the cgroup"
    out.read("cgroup_memory_limit", limit_g, "GiB")
    raise_it = ("raise or remove the container's memory limit (docker run --memory, compose mem_limit, "
                "Kubernetes resources.limits.memory)")
    limits = f"this process's cgroup limits memory to {limit_g:g} GiB"
    if workload is not None and limit < workload * (1 << 30):
        out.fail(f"{limits} ({where}), below the workload {workload:g} GiB: the cgroup's OOM killer ends the "
                 "job there, whatever MemAvailable says",
                 f"{raise_it} above the workload, or shrink the workload",
                 f"cgroup memory limit {limit_g:g} GiB < workload {workload:g} GiB",
                 "raise the container's memory limit", code="G3.cgroup-below-workload")
        return
    fraction = params.threshold("g3_cgroup_limit_fraction")
    if workload is None and total_kib and limit < fraction * total_kib * 1024:
        out.warn(f"{limits} of {gib(total_kib):g} GiB ({where}): a job above it is OOM-killed while the pool "
                 "still has room",
                 f"declare --spark-workload-gb to check the job fits under it, or {raise_it}",
                 f"cgroup memory limit {limit_g:g} of {gib(total_kib):g} GiB",
                 "declare --spark-workload-gb, or raise it", code="G3.cgroup-limit")
        return
    out.note(f"cgroup memory limit {limit_g:g} GiB ({where})")


def _number(raw: Any, default: float) -> float | None:
    if raw is None or str(raw).strip() == "":
        return default
    try:
        value = float(str(raw).strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def ray(facts: Facts, total_kib: int | None, params: Params, out: Findings) -> None:
    """N6: Ray's memory monitor kills workers at 95 % of node memory; on unified memory the
    GPU's allocations are node memory (MiaAI-Lab GLM-5.3-Flash-NVFP4-Dual-DGX-Spark PR #2)."""
    info = facts.ray
    if not info or not info.version:
        return
    refresh = _number(info.refresh_ms, RAY_DEFAULT_REFRESH_MS)
    threshold = _number(info.threshold, RAY_DEFAULT_THRESHOLD)
    if refresh is None or threshold is None:
        out.note(f"Ray's memory monitor: unreadable RAY_memory_monitor_refresh_ms={info.refresh_ms!r} "
                 f"or RAY_memory_usage_threshold={info.threshold!r}")
        return
    out.read("ray_memory_threshold", threshold if refresh > 0 else "off")
    if refresh <= 0:
        out.note("Ray's memory monitor is off (RAY_memory_monitor_refresh_ms=0)")
        return
    at = f" ({gib(threshold * total_kib):g} of {gib(total_kib):g} GiB)" if total_kib else ""
    text = f"Ray {info.version} kills workers once node memory passes {threshold:g}{at}"
    if not params.gb10:
        out.note(text + " (counts host memory; a discrete GPU's memory is not in it)")
        return
    out.warn(text + ", and on unified memory the GPU's allocations count as node memory "
             "(ray.exceptions.OutOfMemoryError at 0.950345 on a Spark)",
             "export RAY_memory_monitor_refresh_ms=0 on every node before ray start",
             f"Ray's memory monitor kills workers at {threshold:g} of node memory",
             "RAY_memory_monitor_refresh_ms=0 on every node", code="G3.ray-memory-monitor")


def shm(facts: Facts, total_kib: int | None, out: Findings) -> None:
    """``/dev/shm`` is tmpfs in the same pool: what is written there is not free for CUDA."""
    mount = facts.dev_shm
    if mount is None:
        return
    if mount.error:
        out.note(f"/dev/shm: cannot read its size ({mount.error})")
        return
    if mount.fstype != "tmpfs":
        return
    size, percent = mount.size_kib, mount.percent
    share = 50.0 if size is None and percent is None else percent
    if share is not None:
        size = int(total_kib * share / 100) if total_kib else None
    if size is None:
        return
    out.read("dev_shm_size", gib(size), "GiB")
    if gib(size) >= SHM_NOTE_GIB:
        out.note(f"/dev/shm (tmpfs) may grow to {gib(size):g} GiB, out of the same memory pool: what is "
                 "written there is not free for CUDA (size it small, docker --shm-size)")


def oom_kills(facts: Facts, out: Findings) -> None:
    """The kernel's recent OOM kills (filled by the kernel log reader): the victim is often not
    the engine but the biggest process beside it (LMCache #4759)."""
    kills = facts.oom_kills
    if kills is None:
        out.note(KERNEL_LOG_PENDING)
        return
    out.read("oom_kills", len(kills))
    if not kills:
        return
    last = kills[-1]
    rss = f", anon-rss {gib(last.anon_rss_kb):g} GiB" if last.anon_rss_kb is not None else ""
    earlier = first_n([f"pid {k.pid} ({k.name})" for k in reversed(kills[:-1])], 3, sep=", ")
    before = f", before it {earlier}" if earlier else ""
    plural = "es" if len(kills) > 1 else ""
    out.warn(f"the kernel's OOM killer killed {len(kills)} process{plural} since boot, the latest pid "
             f"{last.pid} ({last.name}{rss}){before}: on unified memory a load spike drives the global "
             "watermark and the biggest process beside the engine dies",
             "leave headroom for the load spike (a lower --gpu-memory-utilization or an explicit KV cache "
             "size), add swap, or lower the victim's oom_score_adj; G6 lists what holds the pool",
             f"kernel OOM-killed pid {last.pid} ({last.name})",
             "leave headroom for the load spike; add swap", code="G3.oom-kills")


_RANK = {Status.FAIL: 0, Status.WARN: 1}


def merge(head: Result, extra: Findings) -> Result:
    """The headroom verdict and these findings as one G3 result: the worst status wins, the
    findings come first (FAIL before WARN, the headroom's own first among equals)."""
    readings, details = [*head.readings, *extra.readings], [*head.details, *extra.details]
    if extra.status is None:
        return Result(head.check_id, head.status, head.summary, head.fix, readings, details=details,
                      headline=head.headline, short_fix=head.short_fix, by_choice=head.by_choice,
                      codes=list(head.codes))
    own = head.status in _RANK
    items = [(head.status, head.summary, head.fix, head.headline, head.short_fix)] if own else []
    items += [(Status.FAIL, t, f, *extra.short.get(t, (t, f))) for t, f in extra.problems]
    items += [(Status.WARN, t, f, *extra.short.get(t, (t, f))) for t, f in extra.warnings]
    items.sort(key=lambda item: _RANK[item[0]])
    texts = [item[1] for item in items]
    context = [] if own else [head.summary]
    fixes = list(dict.fromkeys(item[2] for item in items if item[2]))
    first = items[0]
    by_text = {**({head.summary: head.code} if own and head.code else {}), **extra.codes}
    codes = [*(by_text[t] for t in texts if t in by_text), *([] if own else head.codes)]
    return Result(head.check_id, first[0], "; ".join([*texts[:3], *context]), "; ".join(fixes[:3]), readings,
                  details=[*texts[3:], *details], headline=plus_more(first[3] or first[1], len(items)),
                  short_fix=first[4], codes=list(dict.fromkeys(codes)))
