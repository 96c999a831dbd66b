"""G4 — thermals and power: is the GPU being slowed down by heat or power?

This package is the whole check: this spec (read by every pytest run, so plain data), its finding
codes (:mod:`.findings`) and the check itself (:mod:`.check`: its facts, ``gather``, ``evaluate``)."""

from __future__ import annotations

from pytest_dgx_spark.checks.spec import CheckSpec

SPEC = CheckSpec(
    id="G4",
    title="thermals and power",
    marker="spark_thermal",
    area="of thermals and power",
    needs_torch=False,
)
