"""G7 — SM121: can the installed stack run on GB10, and where it uses NVFP4, FP8 or

This package is the whole check: this spec (read by every pytest run, so plain data), its finding
codes (:mod:`.findings`) and the check itself (:mod:`.check`: its facts, ``gather``, ``evaluate``)."""

from __future__ import annotations

from pytest_dgx_spark.checks.spec import CheckSpec

SPEC = CheckSpec(
    id="G7",
    title="NVFP4 vs FP8",
    marker="spark_precision",
    area="of NVFP4 vs FP8 on SM121",
    needs_torch=True,
)
