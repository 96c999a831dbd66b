"""The facts diagnose gates a log's ambiguous lines on (FIELD-2026-12 §4.3): what each log states
about its machine and job (:func:`log_facts`: its kernel, free 32 MiB blocks, CMA, ranks, hosts),
what the machine whose run failed says (:class:`MachineFacts`, from today's check readings named
in :mod:`~pytest_dgx_spark.readings`), and per log the gates they decide: the log's own facts,
else the job's other logs', else the machine's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_dgx_spark import readings
from pytest_dgx_spark.datadef import define
from pytest_dgx_spark.logread import FileScan
from pytest_dgx_spark.logtable import CONTEXTS, Table
from pytest_dgx_spark.model import Result


@define(frozen=True)
class MachineFacts:
    """What the gates read of the machine whose run failed; ``None`` is "not read"."""

    kernel_release: str | None = None
    #: CmaFree > CmaTotal in /proc/meminfo (the kernel 7.0 KHO/CMA bug)
    cma_free_over_total: bool | None = None
    high_order_blocks_empty: bool | None = None  # /proc/buddyinfo zone Normal: no free block of order >= 9
    image_cuda_newer_than_driver: bool | None = None
    other_gpu_process: bool | None = None  # another process holds GPU memory (G6's reading)

    def gates(self) -> dict[str, bool | None]:
        """The machine's value of each gate of :data:`~pytest_dgx_spark.logtable.GATES`."""
        kernel = self.kernel_release
        return {
            "kernel_7_0_0_1019": kernel.startswith("7.0.0-1019") if kernel else None,
            "cma_free_over_total": self.cma_free_over_total,
            "high_order_blocks_empty": self.high_order_blocks_empty,
            "image_cuda_newer_than_driver": self.image_cuda_newer_than_driver,
            "other_gpu_process": self.other_gpu_process,
        }  # fmt: skip


def _count(text: str) -> int | None:
    """``0``, ``1,417``, ``zero`` or ``no`` as a number of blocks."""
    word = text.strip().lower()
    if word in ("zero", "no", "none"):
        return 0
    digits = word.replace(",", "")
    return int(digits) if digits.isdigit() else None


#: the host in NCCL's line prefix (``spark-fb97:23491:23520 [0] NCCL INFO …``), read from the kept
#: ``nranks`` lines only (matching it in the table would run on every candidate line)
NCCL_HOST = re.compile(r"^\s*(?:\S+\s+)?([A-Za-z][\w.-]*):\d+:\d+ \[\d+\] NCCL ")


def log_facts(scan: FileScan, table: Table) -> dict[str, list[str]]:
    """What one log states about its machine and job: the named groups of its context lines
    (``kernel_release``, ``free_32mib_blocks``, ``nranks``, ``host`` …), each value as read, in order."""
    facts: dict[str, list[str]] = {}
    for hit in scan.context:
        m = table.by_id(hit.sig).pattern.search(hit.text)
        found = dict(m.groupdict()) if m else {}
        if found.get("nranks") and (host := NCCL_HOST.match(hit.text)):
            found["host"] = host.group(1)
        for key, value in found.items():
            if value is not None and value not in facts.setdefault(key, []):
                facts[key].append(value)
    return facts


def fact_gates(facts: Mapping[str, list[str]]) -> dict[str, bool | None]:
    """The gates and context a log's facts decide; ``None`` where it says nothing. Any stated zero
    free 32 MiB blocks, any kernel 7.0.0-1019: a post that compares two states names the failing one."""
    gates: dict[str, bool | None] = {}
    if kernels := facts.get("kernel_release"):
        gates["kernel_7_0_0_1019"] = any(k.startswith("7.0.0-1019") for k in kernels)
    blocks = [n for n in map(_count, facts.get("free_32mib_blocks", [])) if n is not None]
    if blocks:
        gates["high_order_blocks_empty"] = any(n == 0 for n in blocks)
    total, free = _first_count(facts, "cma_total"), _first_count(facts, "cma_free")
    if total is not None and free is not None:
        gates["cma_free_over_total"] = free > total
    gates.update(_job_size(facts))
    for name in ("watchdog_timeout", "rdma_completion_error", "lowprec_kernel"):
        if facts.get(name):
            gates[name] = True
    return gates


def _first_count(facts: Mapping[str, list[str]], key: str) -> int | None:
    """The first value stated for ``key`` as a count (``None``: none stated, or not a count)."""
    values = facts.get(key, [])
    return _count(values[0]) if values else None


def _job_size(facts: Mapping[str, list[str]]) -> dict[str, bool | None]:
    """``multi_node``/``single_node`` from the ranks, nodes and NCCL hosts a log states (none: {})."""
    ranks = [int(n) for n in facts.get("nranks", []) if n.isdigit()]
    nodes = [int(n) for n in facts.get("nodes", []) if n.isdigit()]
    if any(n > 1 for n in ranks + nodes) or len(set(facts.get("host", []))) > 1:
        return {"multi_node": True, "single_node": False}
    if ranks or nodes:
        return {"multi_node": False, "single_node": True}
    return {}


def second(sid: str, ts: tuple[str, str]) -> tuple[str, str, str]:
    """A context line's key in the gates: its entry, its timestamp's kind and its whole second."""
    return sid, ts[0], ts[1].split(".")[0]


def gates_per_log(files: Sequence[FileScan], facts: MachineFacts | None,
                  stated: Sequence[Mapping[str, list[str]]]) -> list[dict[Any, bool | None]]:  # fmt: skip
    """Per log, the gates and context a sign needs: the log's own facts, else the job's other logs',
    else the machine's; and the logs' context lines keyed by second."""
    machine: dict[Any, bool | None] = dict.fromkeys(CONTEXTS)
    machine.update((facts or MachineFacts()).gates())
    for scan in files:  # context lines by second: an Xid at the second a service stopped "cleanly"
        machine.update({second(h.sig, h.ts): True for h in scan.context if h.ts is not None})
    own = [fact_gates(f) for f in stated]
    job = _job_wide(own)
    return [{**machine, **job, **gates} for gates in own]


def _job_wide(own: Sequence[Mapping[str, bool | None]]) -> dict[str, bool]:
    """What holds for the whole job: any log that says more than one node, a 7.0.0-1019 kernel, …"""
    job: dict[str, bool | None] = {}
    for gates in own:
        job.update({k: v for k, v in gates.items() if v or k not in job})
    return {k: v for k, v in job.items() if v is not None}


def _value(live: Mapping[str, Result], shared: readings.Shared) -> Any:
    """A reading's value from today's results; None when the check or the reading is absent."""
    result = live.get(shared.check)
    found = result.reading(shared.name) if result is not None else None
    return None if found is None else found.value


def _cuda(text: Any) -> tuple[int, ...] | None:
    try:
        return tuple(int(p) for p in str(text).split(".")[:2])
    except ValueError:
        return None


def machine_facts(host: Mapping[str, Any], live: Mapping[str, Result]) -> MachineFacts:
    """The facts the gates read, from the run's identity and today's check readings (G1's
    kernel and CMA, G3's free 32 MiB blocks, G9's image and driver CUDA, G6's other processes)."""
    other = _value(live, readings.OTHER_GPU_PROCESSES)
    kernel = _value(live, readings.KERNEL_RELEASE) or host.get("kernel")
    cma_total, cma_free = _value(live, readings.CMA_TOTAL), _value(live, readings.CMA_FREE)
    blocks = _value(live, readings.NORMAL_FREE_BLOCKS)
    image, driver = _cuda(_value(live, readings.IMAGE_CUDA)), _cuda(_value(live, readings.HOST_DRIVER_CUDA))
    return MachineFacts(
        kernel_release=str(kernel) if kernel else None,
        cma_free_over_total=cma_free > cma_total if isinstance(cma_total, int) and isinstance(cma_free, int) else None,
        high_order_blocks_empty=blocks == 0 if isinstance(blocks, (int, float)) else None,
        image_cuda_newer_than_driver=image > driver if image and driver else None,
        other_gpu_process=None if other is None else bool(other),
    )
