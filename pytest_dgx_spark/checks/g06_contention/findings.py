"""G6's finding codes: each stable code its results may carry, with what it means. A code once
released is never renamed or removed; ``docs/REFERENCE.md``'s findings table is built from these."""

from __future__ import annotations

from pytest_dgx_spark.checks.spec import FindingCode

CODES: tuple[FindingCode, ...] = (
    FindingCode("G6.uncapped-process", "FAIL", "another GPU process is uncapped or above the cap"),
    FindingCode("G6.capped-process", "WARN", "another GPU process, capped or small, shares the pool"),
    FindingCode("G6.process-list-unreadable", "WARN", "neither NVML nor nvidia-smi listed the GPU processes"),
    FindingCode("G6.process-table-incomplete", "WARN", "the process table was not read whole"),
    FindingCode("G6.no-gpu", "SKIP", "no NVIDIA GPU to contend for"),
    FindingCode("G6.not-surveyed", "SKIP", "no GPU process list and no process table could be read"),
)
