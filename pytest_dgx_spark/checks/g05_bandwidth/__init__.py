"""G5 — memory-bandwidth budget: does the plan assume more than the box moves?

This package is the whole check: this spec (read by every pytest run, so plain data), its finding
codes (:mod:`.findings`) and the check itself (:mod:`.check`: its facts, ``gather``, ``evaluate``)."""

from __future__ import annotations

from pytest_dgx_spark.checks.spec import CheckSpec

SPEC = CheckSpec(
    id="G5",
    title="bandwidth budget",
    marker="spark_bandwidth",
    area="of the memory-bandwidth budget",
    needs_torch=True,
)
