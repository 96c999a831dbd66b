"""G3 — UMA headroom: will the workload fit in the one memory pool?

On GB10 NVML's memory query answers ``NotSupported``, so headroom is read from ``/proc/meminfo``.
``cudaMemGetInfo`` on GB10 tracks ``MemFree``, not ``MemAvailable`` (unsloth PR #10704,
cudaMemGetInfo_1.txt): a workload that fits only once the page cache is dropped WARNs; one larger
than the whole machine FAILs saying so; an impossible reading is a SKIP, never a PASS. What ends
a job before the pool is empty (issue 22) is decided in :mod:`pytest_dgx_spark.checks.g03_pressure`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypedDict

from pytest_dgx_spark.checks.g03_uma_headroom import pressure as pressure
from pytest_dgx_spark.checks.kit import CheckContext, FactsBase, Findings, Params
from pytest_dgx_spark.model import Reading, Result, Status
from pytest_dgx_spark.probes import kernel_log
from pytest_dgx_spark.probes import memory_pressure as probe
from pytest_dgx_spark.probes.memory_pressure import Buddy, CgroupLimit, OomKill, PageSize, ShmMount, Vmstat

KIB_PER_GIB = 1024 * 1024
DROP_CMD = "sudo sh -c 'sync; echo 3 > /proc/sys/vm/drop_caches'"
#: a MemTotal above this (1 PiB, in kB) is no machine's: the reading is broken
MAX_TOTAL_KIB = 1 << 40
#: memory held outside every /proc/meminfo category worth a note, GiB
UNACCOUNTED_NOTE_GIB = 8.0
#: the kernel-side categories whose sum, with MemFree and the page cache, explains MemTotal
ACCOUNTED = ("AnonPages", "SUnreclaim", "KernelStack", "PageTables", "Percpu")
CUDA_FREE_NOTE = (
    "cudaMemGetInfo on GB10 reports MemFree, not MemAvailable: measured, writing a 60 GiB file took it "
    "from 103.25 to 41.52 GiB while MemAvailable stayed 115.7 GiB (unsloth PR #10704); vLLM's startup "
    "check and other fitters size against it"
)


def gib(kib: float | None) -> float | None:
    return None if kib is None else round(kib / KIB_PER_GIB, 1)


class GpuMemory(TypedDict, total=False):
    index: int
    name: str | None
    memory: dict[str, int] | None  # NVML's free/total bytes, None on unified memory
    error: str | None  # the NVML error name of the memory query


class Drop(TypedDict, total=False):
    """``--spark-drop-caches``: done, or refused/error; the meminfo probes before and after."""

    done: bool
    refused: str
    error: str
    sync: str
    before: dict[str, Any]
    after: dict[str, Any]


class RayMonitor(TypedDict, total=False):
    """Ray's memory monitor as the checked environment sets it (raw values: evaluate parses)."""

    version: str | None  # the installed ray distribution, None when not installed
    threshold: str | None  # RAY_memory_usage_threshold (Ray's default 0.95)
    refresh_ms: str | None  # RAY_memory_monitor_refresh_ms (0 disables the monitor)


@dataclass
class Facts(FactsBase):
    meminfo: dict[str, int]
    meminfo_error: str | None = None
    gpus: list[GpuMemory] = field(default_factory=list)
    nvml_reason: str | None = None
    drop: Drop | None = None
    # issue 22 (N4, N6): None = not read (a capture made before them)
    buddyinfo: Buddy | None = None
    page_size: PageSize | None = None
    vmstat: Vmstat | None = None
    cgroup: CgroupLimit | None = None
    ray: RayMonitor | None = None
    dev_shm: ShmMount | None = None
    oom_kills: list[OomKill] | None = None

    ADDED: ClassVar[Mapping[str, str]] = dict.fromkeys(
        ("buddyinfo", "page_size", "vmstat", "cgroup", "ray", "dev_shm", "oom_kills"),
        "issue 22: what ends a job before the pool is empty (N4, N6)",
    )


FACTS = Facts


def gather(ctx: CheckContext) -> Facts:
    machine = ctx.machine
    drop: Drop | None = None
    if ctx.settings.drop_caches:
        drop = machine.drop_caches()  # type: ignore[assignment]
    mem = drop["after"] if drop and drop.get("done") else machine.meminfo()
    nv = machine.nvml()
    gpus: list[GpuMemory] = [
        {"index": int(d.get("index") or 0), "name": d.get("name"), "memory": d.get("memory"),
         "error": (d.get("errors") or {}).get("memory", {}).get("name")}
        for d in nv.get("devices") or []
    ]
    return Facts(
        meminfo=dict(mem.get("fields") or {}), meminfo_error=mem.get("error"), gpus=gpus, drop=drop,
        nvml_reason=None if nv.get("ok") else nv.get("reason"), buddyinfo=probe.buddyinfo(machine),
        page_size=probe.page_size(machine), vmstat=probe.vmstat(machine), cgroup=probe.cgroup_limit(machine),
        ray=_ray(ctx), dev_shm=probe.dev_shm(machine), oom_kills=_oom_kills(ctx),
    )


def _ray(ctx: CheckContext) -> RayMonitor:
    dist = (ctx.machine.packages().get("dists") or {}).get("ray") or {}
    env = ctx.machine.env
    return {"version": dist.get("version"), "threshold": env.get("RAY_memory_usage_threshold"),
            "refresh_ms": env.get("RAY_memory_monitor_refresh_ms")}


def _oom_kills(ctx: CheckContext) -> list[OomKill] | None:
    """The kernel's OOM kills since boot, oldest first, from the kernel log G4 reads too; None
    when no kernel log was readable: "not read", never "none"."""
    log = ctx.machine.kernel_log()
    if not log.get("source"):
        return None
    return probe.parse_oom_kills(r.text for r in kernel_log.records(log))


def evaluate(facts: Facts, params: Params) -> Result:
    """The headroom verdict, then what ends a job before the pool is empty (:mod:`g03_pressure`)."""
    workload = params.option("workload_gb")
    head = decide(facts, workload, params.threshold("g3_margin_gb"))
    total = facts.meminfo.get("MemTotal") if head.status is not Status.SKIP else None
    out = Findings("G3")
    pressure.fragmentation(facts, params, out)
    pressure.cgroup(facts, workload, total, params, out)
    pressure.ray(facts, total, params, out)
    pressure.shm(facts, total, out)
    pressure.oom_kills(facts, out)
    return pressure.merge(head, out)


@dataclass
class Pool:
    """The memory pool as one decision reads it (kB, and GiB for the text)."""

    m: dict[str, int]
    available: int
    estimated: bool
    cache: int

    @property
    def word(self) -> str:
        return "MemAvailable (estimated)" if self.estimated else "MemAvailable"

    def g(self, name: str) -> float | None:
        return gib(self.m.get(name))


def impossible(m: dict[str, int]) -> str | None:
    """Why a /proc/meminfo reading cannot be true (a missing, negative or too large field), or None."""
    if "MemFree" not in m or "MemTotal" not in m:
        return "/proc/meminfo lacks MemTotal/MemFree"
    negative = [name for name, value in m.items() if value < 0]
    if negative:
        return f"impossible /proc/meminfo: {negative[0]} is negative"
    total = m["MemTotal"]
    if total <= 0:
        return "impossible /proc/meminfo: MemTotal is 0"
    if total > MAX_TOTAL_KIB:
        return f"impossible /proc/meminfo: MemTotal {gib(total):g} GiB is more than any machine has"
    for name in ("MemFree", "MemAvailable", "Cached", "Buffers"):
        if m.get(name, 0) > total:
            return f"impossible /proc/meminfo: {name} {gib(m[name]):g} GiB > MemTotal {gib(total):g} GiB"
    if m.get("SwapFree", 0) > m.get("SwapTotal", m.get("SwapFree", 0)):
        return "impossible /proc/meminfo: SwapFree > SwapTotal"
    return None


def _pool(m: dict[str, int], out: Findings) -> Pool:
    cache = m.get("Cached", 0) + m.get("Buffers", 0)
    if "MemAvailable" in m:
        pool = Pool(m, m["MemAvailable"], False, cache)
    else:
        out.note("MemAvailable missing from /proc/meminfo: estimated as MemFree + Cached + Buffers + "
                 "SReclaimable")
        pool = Pool(m, m["MemFree"] + cache + m.get("SReclaimable", 0), True, cache)
    g = pool.g
    readings = {"mem_total": g("MemTotal"), "mem_free": g("MemFree"), "mem_available": gib(pool.available),
                "page_cache": gib(cache), "swap_free": g("SwapFree")}
    for name, value in readings.items():
        out.read(name, value, "GiB")
    if m.get("HugePages_Total"):
        size = m.get("Hugepagesize", 2048)
        out.read("hugepages_reserved", gib(m["HugePages_Total"] * size), "GiB")
        out.read("hugepages_free", gib(m.get("HugePages_Free", 0) * size), "GiB")
        out.note(f"{m['HugePages_Total']} huge pages are reserved; they are not in MemAvailable")
    if "AnonPages" in m:  # else too few fields to account for anything
        _unaccounted(pool, out)
    return pool


def _unaccounted(pool: Pool, out: Findings) -> None:
    """Memory no category names: on a Spark the driver (open module >= 590) keeps what an
    exited CUDA process freed (~80 GiB in proc_meminfo_1.txt, where 96 GiB still allocated)."""
    m = pool.m
    reclaimable = m.get("KReclaimable", m.get("SReclaimable", 0))
    used = m["MemFree"] + pool.cache + reclaimable + sum(m.get(k, 0) for k in ACCOUNTED)
    left = gib(max(0, m["MemTotal"] - used)) or 0.0
    out.read("unaccounted", left, "GiB")
    if left >= UNACCOUNTED_NOTE_GIB:
        out.note(f"{left:g} GiB is held outside every /proc/meminfo category: on GB10 the NVIDIA driver "
                 "keeps memory an exited CUDA process freed, and serves the next CUDA allocation from it, so "
                 "MemAvailable may understate what CUDA can get")


def _gpu_view(facts: Facts, out: Findings) -> str:
    """NVML's view: [N/A] on unified memory (GB10), real numbers on a discrete GPU."""
    gpu_note = ""
    for gpu in facts.gpus:
        mem, index = gpu.get("memory"), gpu.get("index", 0)
        label = f"gpu{index}_memory_free"
        if not isinstance(mem, dict) or mem.get("free") is None or not mem.get("total"):
            out.read(label, None, "GiB")
            gpu_note = f"NVML memory [N/A] ({gpu.get('error') or 'no answer'}), as on GB10's unified memory"
            continue
        free = round(mem["free"] / (1 << 30), 1)
        out.read(label, free, "GiB")
        total = round(mem["total"] / (1 << 30), 1)
        out.note(f"GPU {index} ({gpu.get('name')}) reports its own memory: {free} GiB free of {total} GiB — "
                 "on a discrete GPU the workload must fit there too")
    if facts.nvml_reason and not facts.gpus:
        out.note(f"NVML: {facts.nvml_reason}")
    return gpu_note


def _drop_view(drop: Drop | None, out: Findings) -> str:
    if drop is None:
        return ""
    if drop.get("done"):
        before = (drop.get("before") or {}).get("fields") or {}
        for name, key in (("MemFree", "mem_free_before_drop"), ("MemAvailable", "mem_available_before_drop")):
            if before.get(name) is not None:
                out.read(key, gib(before[name]), "GiB")
        note = "page cache dropped first (--spark-drop-caches)"
    else:
        note = f"--spark-drop-caches refused: {drop.get('refused') or drop.get('error') or 'not done'}"
    out.note(note)
    return note


def decide(facts: Facts, workload_gib: float | None, margin_gib: float = 0.0) -> Result:
    """A readable reading, the pool, NVML's and the drop's notes, the verdict."""
    reason = facts.meminfo_error or impossible(facts.meminfo)
    if reason:
        text = f"cannot read memory headroom: {reason}"
        return Result("G3", Status.SKIP, text, headline=text, codes=["G3.unreadable"])
    out = Findings("G3")  # readings and details; the verdict is one decision, not a list of findings
    pool = _pool(facts.meminfo, out)
    suffix = "".join(f"; {n}" for n in (_gpu_view(facts, out), _drop_view(facts.drop, out)) if n)
    avail, total = f"{pool.word} {gib(pool.available)}", pool.g("MemTotal")
    if workload_gib is None:
        swap = "[N/A]" if pool.g("SwapFree") is None else f"{pool.g('SwapFree')} GiB"  # no swap lines: [N/A]
        return Result(
            "G3", Status.INFO, f"{avail} GiB of {total} GiB (MemFree {pool.g('MemFree')}, page cache "
            f"{gib(pool.cache)}, swap free {swap}){suffix}; no workload declared (--spark-workload-gb)",
            readings=out.readings, details=out.details,
            headline=f"{avail} of {total} GiB; no workload declared", codes=["G3.no-workload"],
        )
    out.readings.insert(0, Reading("workload", round(workload_gib, 1), "GiB"))
    return _verdict(pool, workload_gib, margin_gib, suffix, out)


def _verdict(pool: Pool, workload_gib: float, margin_gib: float, suffix: str, out: Findings) -> Result:
    """PASS within MemFree (what cudaMemGetInfo reports on GB10), WARN within MemAvailable
    only (drop the page cache), FAIL beyond — saying so when beyond the whole machine."""
    m = pool.m
    need_kib = (workload_gib + margin_gib) * KIB_PER_GIB
    what = f"workload {workload_gib:g} GiB" + (f" + {margin_gib:g} GiB margin" if margin_gib else "")
    free_g, avail_g, total_g, word = pool.g("MemFree"), gib(pool.available), pool.g("MemTotal"), pool.word

    def result(status: Status, summary: str, headline: str, fix: str = "", short_fix: str = "", *,
               code: str = "") -> Result:
        return Result("G3", status, summary + suffix, fix, out.readings, details=out.details,
                      headline=headline, short_fix=short_fix, codes=[code] if code else [])

    if need_kib <= m["MemFree"]:
        return result(Status.PASS, f"{what} fits in MemFree {free_g} GiB ({word} {avail_g} of {total_g} GiB)",
                      f"{what} fits in MemFree {free_g} GiB")
    if need_kib <= pool.available:
        out.note(CUDA_FREE_NOTE)
        return result(
            Status.WARN,
            f"{what} fits {word} {avail_g} GiB only once the page cache ({gib(pool.cache)} GiB) is "
            f"dropped: MemFree is {free_g} GiB, and CUDA on unified memory counts only MemFree as free",
            f"{what} fits only after dropping {gib(pool.cache)} GiB of page cache (MemFree {free_g} GiB)",
            f"between runs, {DROP_CMD} (or --spark-drop-caches as root); not mid-training",
            "drop the page cache between runs (--spark-drop-caches as root)", code="G3.needs-cache-drop",
        )
    shrink = "quantize, smaller batch or context, gradient checkpointing"
    if need_kib > m["MemTotal"]:
        return result(
            Status.FAIL,
            f"{what} > MemTotal {total_g} GiB: larger than this machine's whole memory, so it cannot fit "
            f"even with nothing else running ({word} {avail_g} GiB, MemFree {free_g} GiB)",
            f"{what} > this machine's total memory {total_g} GiB",
            f"shrink the workload below the machine's memory ({shrink}, LoRA instead of full fine-tuning) "
            "or spread it over more machines",
            "shrink the workload (quantize, smaller batch/context) or use more machines",
            code="G3.exceeds-total",
        )
    retained = next((r.value for r in out.readings if r.name == "unaccounted"), None)
    if isinstance(retained, (int, float)) and retained >= UNACCOUNTED_NOTE_GIB:
        # proc_meminfo_1.txt: no CUDA process running, ~80 GiB in no category, MemAvailable 38 GiB
        return result(
            Status.FAIL,
            f"{what} > {word} {avail_g} GiB of {total_g} GiB (MemFree {free_g} GiB), and {retained:g} GiB "
            "is held outside every /proc/meminfo category: other GPU jobs, or, with none running, memory the "
            "NVIDIA driver kept from exited CUDA processes",
            f"{what} > {word} {avail_g} GiB; {retained:g} GiB outside meminfo",
            "stop other jobs holding the memory pool (see G6); if G6 lists none, the memory is the "
            f"driver's retained pool: a reboot returns the {retained:g} GiB to MemAvailable; or shrink the "
            f"workload ({shrink})",
            "stop GPU jobs (G6); if none, reboot", code="G3.retained-memory",
        )
    return result(
        Status.FAIL, f"{what} > {word} {avail_g} GiB of {total_g} GiB (MemFree {free_g} GiB)",
        f"{what} > {word} {avail_g} GiB",
        f"stop other jobs holding the memory pool (see G6), or shrink the workload ({shrink})",
        "stop other jobs holding the pool (see G6) or shrink the workload", code="G3.exceeds-available",
    )
