"""G3 — UMA headroom: will the workload fit in the one memory pool?

On GB10 the GPU has no memory of its own: NVML's memory query answers
``NotSupported`` and ``nvidia-smi`` prints ``[N/A]`` (NVIDIA's known issue),
so headroom is read from ``/proc/meminfo``. ``MemAvailable`` counts page cache
the kernel can reclaim, but ``cudaMemGetInfo`` on GB10 reports ``MemFree``
(vLLM #48140), so a workload that fits only after the page cache is dropped
still fails to allocate: that is a WARN with the drop-cache fix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pytest_spark.checks.kit import CheckContext, FactsBase, Params
from pytest_spark.model import Reading, Result, Status

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


def evaluate(facts: Facts, params: Params) -> Result:
    """Decide G3 from ``/proc/meminfo`` fields (kB) and NVML memory answers."""
    return decide(facts, params.option("workload_gb"), params.threshold("g3_margin_gb", 0.0))


def decide(facts: Facts, workload_gib: float | None, margin_gib: float = 0.0) -> Result:
    m = facts.meminfo
    details: list[str] = []
    if facts.meminfo_error or "MemFree" not in m or "MemTotal" not in m:
        reason = facts.meminfo_error or "/proc/meminfo lacks MemTotal/MemFree"
        return Result("G3", Status.SKIP, f"cannot read memory headroom: {reason}")

    cache_kib = m.get("Cached", 0) + m.get("Buffers", 0)
    available = m.get("MemAvailable")
    estimated = available is None
    if estimated:
        available = m["MemFree"] + cache_kib + m.get("SReclaimable", 0)
        details.append(
            "MemAvailable missing from /proc/meminfo: estimated as MemFree + Cached + Buffers + SReclaimable"
        )

    readings = [
        Reading("mem_total", gib(m["MemTotal"]), "GiB"),
        Reading("mem_free", gib(m["MemFree"]), "GiB"),
        Reading("mem_available", gib(available), "GiB"),
        Reading("page_cache", gib(cache_kib), "GiB"),
        Reading("swap_free", gib(m.get("SwapFree")), "GiB"),
    ]
    if m.get("HugePages_Total"):
        size = m.get("Hugepagesize", 2048)
        readings.append(Reading("hugepages_reserved", gib(m["HugePages_Total"] * size), "GiB"))
        readings.append(Reading("hugepages_free", gib(m.get("HugePages_Free", 0) * size), "GiB"))
        details.append(f"{m['HugePages_Total']} huge pages are reserved; they are not in MemAvailable")

    # NVML's view: [N/A] on unified memory (GB10), real numbers on a discrete GPU.
    gpu_note = ""
    for gpu in facts.gpus:
        mem = gpu.get("memory")
        label = f"gpu{gpu.get('index', 0)}_memory_free"
        if mem is None:
            readings.append(Reading(label, None, "GiB"))
            gpu_note = f"NVML memory [N/A] ({gpu.get('error') or 'no answer'}), as on GB10's unified memory"
        else:
            free = round(mem["free"] / (1 << 30), 1)
            readings.append(Reading(label, free, "GiB"))
            details.append(
                f"GPU {gpu.get('index', 0)} ({gpu.get('name')}) reports its own memory: "
                f"{free} GiB free of {round(mem['total'] / (1 << 30), 1)} GiB — on a discrete GPU "
                "the workload must fit there too"
            )
    if facts.nvml_reason and not facts.gpus:
        details.append(f"NVML: {facts.nvml_reason}")

    drop_note = ""
    if facts.drop is not None:
        drop = facts.drop
        if drop.get("done"):
            before = (drop.get("before") or {}).get("fields") or {}
            if before.get("MemFree") is not None:
                readings.append(Reading("mem_free_before_drop", gib(before["MemFree"]), "GiB"))
            if before.get("MemAvailable") is not None:
                readings.append(Reading("mem_available_before_drop", gib(before["MemAvailable"]), "GiB"))
            drop_note = "page cache dropped first (--spark-drop-caches)"
        else:
            reason = drop.get("refused") or drop.get("error") or "not done"
            drop_note = f"--spark-drop-caches refused: {reason}"
        details.append(drop_note)

    free_g, avail_g, total_g = gib(m["MemFree"]), gib(available), gib(m["MemTotal"])
    avail_word = "MemAvailable (estimated)" if estimated else "MemAvailable"
    suffix = "; ".join(x for x in (gpu_note, drop_note) if x)
    suffix = f"; {suffix}" if suffix else ""

    if workload_gib is None:
        return Result(
            "G3",
            Status.INFO,
            f"{avail_word} {avail_g} GiB of {total_g} GiB (MemFree {free_g}, page cache "
            f"{gib(cache_kib)}, swap free {gib(m.get('SwapFree', 0))} GiB){suffix}; "
            "no workload declared (--spark-workload-gb)",
            readings=readings,
            details=details,
        )

    need = workload_gib + margin_gib
    need_kib = need * KIB_PER_GIB
    readings.insert(0, Reading("workload", round(workload_gib, 1), "GiB"))
    margin = f" + {margin_gib:g} GiB margin" if margin_gib else ""
    what = f"workload {workload_gib:g} GiB{margin}"
    if need_kib <= m["MemFree"]:
        return Result(
            "G3",
            Status.PASS,
            f"{what} fits in MemFree {free_g} GiB ({avail_word} {avail_g} of {total_g} GiB){suffix}",
            readings=readings,
            details=details,
        )
    if need_kib <= available:
        return Result(
            "G3",
            Status.WARN,
            f"{what} fits {avail_word} {avail_g} GiB only once the page cache "
            f"({gib(cache_kib)} GiB) is dropped: MemFree is {free_g} GiB, and CUDA on unified "
            f"memory counts only MemFree as free{suffix}",
            fix=f"between runs, {DROP_CMD} (or --spark-drop-caches as root); not mid-training",
            readings=readings,
            details=details,
        )
    return Result(
        "G3",
        Status.FAIL,
        f"{what} > {avail_word} {avail_g} GiB of {total_g} GiB (MemFree {free_g} GiB){suffix}",
        fix="stop other jobs holding the memory pool (see G6), or shrink the workload "
        "(quantize, smaller batch or context, gradient checkpointing)",
        readings=readings,
        details=details,
    )


def headroom_gb(result: Result) -> float | None:
    """``headroom_gb`` for env-report.json: MemAvailable in GiB (``free -g`` units)."""
    reading = result.reading("mem_available")
    return reading.value if reading is not None and isinstance(reading.value, (int, float)) else None
