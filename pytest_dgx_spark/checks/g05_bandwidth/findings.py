"""G5's finding codes: each stable code its results may carry, with what it means. A code once
released is never renamed or removed; ``docs/REFERENCE.md``'s findings table is built from these."""

from __future__ import annotations

from pytest_dgx_spark.checks.spec import FindingCode

CODES: tuple[FindingCode, ...] = (
    FindingCode("G5.probe-hung", "FAIL", "the copy probe hung: the driver is not answering"),
    FindingCode("G5.plan-above-budget", "WARN", "the planned bandwidth is above what this memory sustains"),
    FindingCode("G5.copy-low", "WARN", "the measured copy bandwidth is below the healthy floor"),
    FindingCode("G5.budget-only", "INFO", "no planned bandwidth and no measurement: the budget only"),
    FindingCode("G5.probe-not-run", "SKIP", "the asked-for copy probe was refused or gave no number"),
)
