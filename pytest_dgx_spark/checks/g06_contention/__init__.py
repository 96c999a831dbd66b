"""G6 — unified-memory contention: who else holds (or will grab) the pool?

This package is the whole check: this spec (read by every pytest run, so plain data), its finding
codes (:mod:`.findings`) and the check itself (:mod:`.check`: its facts, ``gather``, ``evaluate``)."""

from __future__ import annotations

from pytest_dgx_spark.checks.spec import CheckSpec

SPEC = CheckSpec(
    id="G6",
    title="UMA contention",
    marker="spark_memory",
    area="of unified-memory headroom",
    needs_torch=False,
)
