"""G3 — UMA headroom: will the workload fit in the one memory pool?

This package is the whole check: this spec (read by every pytest run, so plain data), its finding
codes (:mod:`.findings`) and the check itself (:mod:`.check`: its facts, ``gather``, ``evaluate``)."""

from __future__ import annotations

from pytest_dgx_spark.checks.spec import CheckSpec

SPEC = CheckSpec(
    id="G3",
    title="UMA headroom",
    marker="spark_memory",
    area="of unified-memory headroom",
    needs_torch=False,
)
