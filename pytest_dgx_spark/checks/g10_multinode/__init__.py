"""G10 — two Sparks: data parallel (DDP/FSDP) across nodes, not tensor parallel.

This package is the whole check: this spec (read by every pytest run, so plain data), its finding
codes (:mod:`.findings`) and the check itself (:mod:`.check`: its facts, ``gather``, ``evaluate``)."""

from __future__ import annotations

from pytest_dgx_spark.checks.spec import CheckSpec

SPEC = CheckSpec(
    id="G10",
    title="two-Spark parallelism",
    marker="spark_multinode",
    area="of two-Spark parallelism",
    needs_torch=False,
)
