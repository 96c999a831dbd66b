"""G3's first question: does the declared workload fit in the one memory pool?

On GB10 NVML's memory query answers ``NotSupported``, so headroom is read from ``/proc/meminfo``.
``cudaMemGetInfo`` on GB10 tracks ``MemFree``, not ``MemAvailable`` (unsloth PR #10704,
cudaMemGetInfo_1.txt): a workload that fits only once the page cache is dropped WARNs; one larger
than the whole machine FAILs saying so; an impossible reading is a SKIP, never a PASS.
"""

from __future__ import annotations

from pytest_dgx_spark.checks.g03_uma_headroom.facts import KIB_PER_GIB, Drop, Facts, gib, kb
from pytest_dgx_spark.checks.kit import Findings
from pytest_dgx_spark.datadef import define
from pytest_dgx_spark.model import Reading, Result, Status

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


@define
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
        return gib(self.m[name]) if name in self.m else None


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
        if kb(m, name) > total:
            return f"impossible /proc/meminfo: {name} {gib(m[name]):g} GiB > MemTotal {gib(total):g} GiB"
    if "SwapTotal" in m and kb(m, "SwapFree") > m["SwapTotal"]:
        return "impossible /proc/meminfo: SwapFree > SwapTotal"
    return None


def _pool(m: dict[str, int], out: Findings) -> Pool:
    cache = kb(m, "Cached") + kb(m, "Buffers")
    if "MemAvailable" in m:
        pool = Pool(m, m["MemAvailable"], False, cache)
    else:
        out.note("MemAvailable missing from /proc/meminfo: estimated as MemFree + Cached + Buffers + "
                 "SReclaimable")
        pool = Pool(m, m["MemFree"] + cache + kb(m, "SReclaimable"), True, cache)
    g = pool.g
    readings = {"mem_total": g("MemTotal"), "mem_free": g("MemFree"), "mem_available": gib(pool.available),
                "page_cache": gib(cache), "swap_free": g("SwapFree")}
    for name, value in readings.items():
        out.read(name, value, "GiB")
    if kb(m, "HugePages_Total"):
        size = kb(m, "Hugepagesize", 2048)
        out.read("hugepages_reserved", gib(m["HugePages_Total"] * size), "GiB")
        out.read("hugepages_free", gib(kb(m, "HugePages_Free") * size), "GiB")
        out.note(f"{m['HugePages_Total']} huge pages are reserved; they are not in MemAvailable")
    if "AnonPages" in m:  # else too few fields to account for anything
        _unaccounted(pool, out)
    return pool


def _unaccounted(pool: Pool, out: Findings) -> None:
    """Memory no category names: on a Spark the driver (open module >= 590) keeps what an
    exited CUDA process freed (~80 GiB in proc_meminfo_1.txt, where 96 GiB still allocated)."""
    m = pool.m
    reclaimable = kb(m, "KReclaimable", kb(m, "SReclaimable"))
    used = m["MemFree"] + pool.cache + reclaimable + sum(kb(m, k) for k in ACCOUNTED)
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
        mem, index = gpu.memory, gpu.index
        label = f"gpu{index}_memory_free"
        if mem is None or mem.free is None or not mem.total:
            out.read(label, None, "GiB")
            gpu_note = f"NVML memory [N/A] ({gpu.error or 'no answer'}), as on GB10's unified memory"
            continue
        free = round(mem.free / (1 << 30), 1)
        out.read(label, free, "GiB")
        total = round(mem.total / (1 << 30), 1)
        out.note(f"GPU {index} ({gpu.name}) reports its own memory: {free} GiB free of {total} GiB — "
                 "on a discrete GPU the workload must fit there too")
    if facts.nvml_reason and not facts.gpus:
        out.note(f"NVML: {facts.nvml_reason}")
    return gpu_note


def _drop_view(drop: Drop | None, out: Findings) -> str:
    if drop is None:
        return ""
    if drop.done:
        before = drop.before.fields if drop.before else {}
        for name, key in (("MemFree", "mem_free_before_drop"), ("MemAvailable", "mem_available_before_drop")):
            if name in before:
                out.read(key, gib(before[name]), "GiB")
        note = "page cache dropped first (--spark-drop-caches)"
    else:
        note = f"--spark-drop-caches refused: {drop.refused or drop.error or 'not done'}"
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
