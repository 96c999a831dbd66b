"""G3 — UMA headroom: will the workload fit in the one memory pool?

On GB10 the GPU has no memory of its own: NVML's memory query answers
``NotSupported`` and ``nvidia-smi`` prints ``[N/A]`` (NVIDIA's known issue),
so headroom is read from ``/proc/meminfo``. ``MemAvailable`` counts page cache
the kernel can reclaim, but ``cudaMemGetInfo`` on GB10 tracks ``MemFree``:
measured on a GB10, writing a 60 GiB file took it from 103.25 to 41.52 GiB
while MemAvailable stayed at 115.7 (unsloth PR #10704, capture
cudaMemGetInfo_1.txt; vLLM #48140 is the same check failing). A workload that
fits only after the page cache is dropped is a WARN with the drop-cache fix;
one larger than the machine's whole memory is a FAIL that says so. A reading
that cannot be true (MemTotal 0, MemFree above MemTotal) is a SKIP, never a
PASS on numbers nobody measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pytest_dgx_spark.checks.kit import CheckContext, FactsBase, Findings, Params
from pytest_dgx_spark.model import Reading, Result, Status

KIB_PER_GIB = 1024 * 1024
DROP_CMD = "sudo sh -c 'sync; echo 3 > /proc/sys/vm/drop_caches'"


def gib(kib: int | float | None) -> float | None:
    return None if kib is None else round(kib / KIB_PER_GIB, 1)


@dataclass
class Facts(FactsBase):
    meminfo: dict[str, int]
    meminfo_error: str | None = None
    #: one entry per GPU: name, memory dict or None, the NVML error name
    gpus: list[dict[str, Any]] = field(default_factory=list)
    nvml_reason: str | None = None
    drop: dict[str, Any] | None = None


def gather(ctx: CheckContext) -> Facts:
    machine = ctx.machine
    drop = machine.drop_caches() if ctx.settings.drop_caches else None
    if drop and drop.get("done"):
        mem = drop["after"]
    else:
        mem = machine.meminfo()
    nv = machine.nvml()
    gpus = [
        {
            "index": d.get("index"),
            "name": d.get("name"),
            "memory": d.get("memory"),
            "error": (d.get("errors") or {}).get("memory", {}).get("name"),
        }
        for d in nv.get("devices") or []
    ]
    return Facts(
        meminfo=dict(mem.get("fields") or {}),
        meminfo_error=mem.get("error"),
        gpus=gpus,
        nvml_reason=None if nv.get("ok") else nv.get("reason"),
        drop=drop,
    )


FACTS = Facts

#: a MemTotal above this (1 PiB, in kB) is no machine's: the reading is broken
MAX_TOTAL_KIB = 1 << 40
#: memory held outside every /proc/meminfo category worth a note, GiB
UNACCOUNTED_NOTE_GIB = 8.0
#: the kernel-side categories whose sum, with MemFree and the page cache, explains MemTotal
ACCOUNTED = ("AnonPages", "SUnreclaim", "KernelStack", "PageTables", "Percpu")


def evaluate(facts: Facts, params: Params) -> Result:
    """Decide G3 from ``/proc/meminfo`` fields (kB) and NVML memory answers."""
    return decide(facts, params.option("workload_gb"), params.threshold("g3_margin_gb"))


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
    """Why a /proc/meminfo reading cannot be true, or None: a missing field,
    a negative one, MemTotal 0 or beyond any machine, a part larger than the
    whole. Deciding on such a reading would PASS a workload on numbers nobody
    measured."""
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
    available = m.get("MemAvailable")
    if available is not None:
        return Pool(m, available, False, cache)
    out.note("MemAvailable missing from /proc/meminfo: estimated as MemFree + Cached + Buffers + SReclaimable")
    return Pool(m, m["MemFree"] + cache + m.get("SReclaimable", 0), True, cache)


def _pool_readings(pool: Pool, out: Findings) -> None:
    m = pool.m
    out.read("mem_total", pool.g("MemTotal"), "GiB")
    out.read("mem_free", pool.g("MemFree"), "GiB")
    out.read("mem_available", gib(pool.available), "GiB")
    out.read("page_cache", gib(pool.cache), "GiB")
    out.read("swap_free", pool.g("SwapFree"), "GiB")
    if m.get("HugePages_Total"):
        size = m.get("Hugepagesize", 2048)
        out.read("hugepages_reserved", gib(m["HugePages_Total"] * size), "GiB")
        out.read("hugepages_free", gib(m.get("HugePages_Free", 0) * size), "GiB")
        out.note(f"{m['HugePages_Total']} huge pages are reserved; they are not in MemAvailable")
    _unaccounted(pool, out)


def _unaccounted(pool: Pool, out: Findings) -> None:
    """Memory no /proc/meminfo category names. On a Spark the NVIDIA driver
    (open module >= 590) keeps the pages an exited CUDA process freed in its
    own pool: ~80 GiB with no process running in proc_meminfo_1.txt, where
    MemAvailable read 40 GiB yet a 96 GiB CUDA allocation succeeded."""
    m = pool.m
    if "AnonPages" not in m:
        return  # too few fields to account for anything
    reclaimable = m.get("KReclaimable", m.get("SReclaimable", 0))
    used = m["MemFree"] + pool.cache + reclaimable + sum(m.get(k, 0) for k in ACCOUNTED)
    left = gib(max(0, m["MemTotal"] - used)) or 0.0
    out.read("unaccounted", left, "GiB")
    if left >= UNACCOUNTED_NOTE_GIB:
        out.note(
            f"{left:g} GiB is held outside every /proc/meminfo category: on GB10 the NVIDIA driver keeps "
            "memory an exited CUDA process freed, and serves the next CUDA allocation from it, so "
            "MemAvailable may understate what CUDA can get"
        )


def _gpu_view(facts: Facts, out: Findings) -> str:
    """NVML's view: [N/A] on unified memory (GB10), real numbers on a discrete GPU."""
    gpu_note = ""
    for gpu in facts.gpus:
        mem = gpu.get("memory")
        label = f"gpu{gpu.get('index', 0)}_memory_free"
        if not isinstance(mem, dict) or mem.get("free") is None or not mem.get("total"):
            out.read(label, None, "GiB")
            gpu_note = f"NVML memory [N/A] ({gpu.get('error') or 'no answer'}), as on GB10's unified memory"
            continue
        free = round(mem["free"] / (1 << 30), 1)
        out.read(label, free, "GiB")
        out.note(
            f"GPU {gpu.get('index', 0)} ({gpu.get('name')}) reports its own memory: "
            f"{free} GiB free of {round(mem['total'] / (1 << 30), 1)} GiB — on a discrete GPU "
            "the workload must fit there too"
        )
    if facts.nvml_reason and not facts.gpus:
        out.note(f"NVML: {facts.nvml_reason}")
    return gpu_note


def _drop_view(facts: Facts, out: Findings) -> str:
    if facts.drop is None:
        return ""
    drop = facts.drop
    if drop.get("done"):
        before = (drop.get("before") or {}).get("fields") or {}
        if before.get("MemFree") is not None:
            out.read("mem_free_before_drop", gib(before["MemFree"]), "GiB")
        if before.get("MemAvailable") is not None:
            out.read("mem_available_before_drop", gib(before["MemAvailable"]), "GiB")
        note = "page cache dropped first (--spark-drop-caches)"
    else:
        note = f"--spark-drop-caches refused: {drop.get('refused') or drop.get('error') or 'not done'}"
    out.note(note)
    return note


#: why the page cache matters on GB10 (cudaMemGetInfo_1.txt, unsloth PR #10704)
CUDA_FREE_NOTE = (
    "cudaMemGetInfo on GB10 reports MemFree, not MemAvailable: measured, writing a 60 GiB file took it "
    "from 103.25 to 41.52 GiB while MemAvailable stayed 115.7 GiB (unsloth PR #10704); vLLM's startup "
    "check and other fitters size against it"
)


def decide(facts: Facts, workload_gib: float | None, margin_gib: float = 0.0) -> Result:
    """The stages: a readable reading, the pool, NVML's and the drop's notes, the verdict."""
    reason = facts.meminfo_error or impossible(facts.meminfo)
    if reason:
        return Result(
            "G3",
            Status.SKIP,
            f"cannot read memory headroom: {reason}",
            headline=f"cannot read memory headroom: {reason}",
        )
    out = Findings("G3")  # readings and details; the verdict is one decision (_verdict), not a list of findings
    pool = _pool(facts.meminfo, out)
    _pool_readings(pool, out)
    notes = [n for n in (_gpu_view(facts, out), _drop_view(facts, out)) if n]
    suffix = "".join(f"; {n}" for n in notes)
    if workload_gib is None:
        return Result(
            "G3",
            Status.INFO,
            f"{pool.word} {gib(pool.available)} GiB of {pool.g('MemTotal')} GiB (MemFree {pool.g('MemFree')}, "
            f"page cache {gib(pool.cache)}, swap free {_swap_free(pool)}){suffix}; "
            "no workload declared (--spark-workload-gb)",
            readings=out.readings,
            details=out.details,
            headline=f"{pool.word} {gib(pool.available)} of {pool.g('MemTotal')} GiB; no workload declared",
        )
    out.readings.insert(0, Reading("workload", round(workload_gib, 1), "GiB"))
    return _verdict(pool, workload_gib, margin_gib, suffix, out)


def _swap_free(pool: Pool) -> str:
    """``"16.0 GiB"``, or ``"[N/A]"`` when /proc/meminfo did not say (proc_meminfo_1.txt has no swap lines)."""
    free = pool.g("SwapFree")
    return "[N/A]" if free is None else f"{free} GiB"


def _verdict(
    pool: Pool,
    workload_gib: float,
    margin_gib: float,
    suffix: str,
    out: Findings,
) -> Result:
    """PASS when it fits MemFree (what cudaMemGetInfo reports on GB10), WARN
    when only MemAvailable holds it (drop the page cache first), FAIL when it
    does not fit — and when it exceeds the machine's whole memory, say that:
    no job to stop would make room."""
    m = pool.m
    need_kib = (workload_gib + margin_gib) * KIB_PER_GIB
    margin = f" + {margin_gib:g} GiB margin" if margin_gib else ""
    what = f"workload {workload_gib:g} GiB{margin}"
    free_g, avail_g, total_g = pool.g("MemFree"), gib(pool.available), pool.g("MemTotal")
    kw: dict[str, Any] = {"readings": out.readings, "details": out.details}
    if need_kib <= m["MemFree"]:
        return Result(
            "G3",
            Status.PASS,
            f"{what} fits in MemFree {free_g} GiB ({pool.word} {avail_g} of {total_g} GiB){suffix}",
            headline=f"{what} fits in MemFree {free_g} GiB",
            **kw,
        )
    if need_kib <= pool.available:
        out.note(CUDA_FREE_NOTE)
        return Result(
            "G3",
            Status.WARN,
            f"{what} fits {pool.word} {avail_g} GiB only once the page cache ({gib(pool.cache)} GiB) is "
            f"dropped: MemFree is {free_g} GiB, and CUDA on unified memory counts only MemFree as free{suffix}",
            fix=f"between runs, {DROP_CMD} (or --spark-drop-caches as root); not mid-training",
            headline=f"{what} fits only after dropping {gib(pool.cache)} GiB of page cache (MemFree {free_g} GiB)",
            short_fix="drop the page cache between runs (--spark-drop-caches as root)",
            **kw,
        )
    if need_kib > m["MemTotal"]:
        return Result(
            "G3",
            Status.FAIL,
            f"{what} > MemTotal {total_g} GiB: larger than this machine's whole memory, so it cannot fit "
            f"even with nothing else running ({pool.word} {avail_g} GiB, MemFree {free_g} GiB){suffix}",
            fix="shrink the workload below the machine's memory (quantize, smaller batch or context, "
            "gradient checkpointing, LoRA instead of full fine-tuning) or spread it over more machines",
            headline=f"{what} > this machine's total memory {total_g} GiB",
            short_fix="shrink the workload (quantize, smaller batch/context) or use more machines",
            **kw,
        )
    retained = _retained(out.readings)
    if retained:
        # proc_meminfo_1.txt: no CUDA process running, ~80 GiB in no category, MemAvailable 38 GiB
        return Result(
            "G3",
            Status.FAIL,
            f"{what} > {pool.word} {avail_g} GiB of {total_g} GiB (MemFree {free_g} GiB), and {retained:g} GiB "
            "is held outside every /proc/meminfo category: other GPU jobs, or, with none running, memory the "
            f"NVIDIA driver kept from exited CUDA processes{suffix}",
            fix="stop other jobs holding the memory pool (see G6); if G6 lists none, the memory is the "
            f"driver's retained pool: a reboot returns the {retained:g} GiB to MemAvailable; or shrink the "
            "workload (quantize, smaller batch or context, gradient checkpointing)",
            headline=f"{what} > {pool.word} {avail_g} GiB; {retained:g} GiB outside meminfo",
            short_fix="stop GPU jobs (G6); if none, reboot",
            **kw,
        )
    return Result(
        "G3",
        Status.FAIL,
        f"{what} > {pool.word} {avail_g} GiB of {total_g} GiB (MemFree {free_g} GiB){suffix}",
        fix="stop other jobs holding the memory pool (see G6), or shrink the workload "
        "(quantize, smaller batch or context, gradient checkpointing)",
        headline=f"{what} > {pool.word} {avail_g} GiB",
        short_fix="stop other jobs holding the pool (see G6) or shrink the workload",
        **kw,
    )


def _retained(readings: list[Reading]) -> float | None:
    """GiB held outside every /proc/meminfo category, when it is worth naming."""
    value = next((r.value for r in readings if r.name == "unaccounted"), None)
    return value if isinstance(value, (int, float)) and value >= UNACCOUNTED_NOTE_GIB else None


def headroom_gb(result: Result) -> float | None:
    """``headroom_gb`` for env-report.json: MemAvailable in GiB (``free -g`` units)."""
    reading = result.reading("mem_available")
    return reading.value if reading is not None and isinstance(reading.value, (int, float)) else None
