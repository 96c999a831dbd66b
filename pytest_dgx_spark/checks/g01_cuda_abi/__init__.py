"""G1 — CUDA 12/13 ABI: find the module linked to the wrong CUDA major before it segfaults.

This package is the whole check: this spec (read by every pytest run, so plain data), its finding
codes (:mod:`.findings`) and the check itself (:mod:`.check`: its facts, ``gather``, ``evaluate``)."""

from __future__ import annotations

from pytest_dgx_spark.checks.spec import CheckSpec

SPEC = CheckSpec(
    id="G1",
    title="CUDA 12/13 ABI",
    marker="spark_launch",
    area="that catch launch failures",
    needs_torch=True,
)
