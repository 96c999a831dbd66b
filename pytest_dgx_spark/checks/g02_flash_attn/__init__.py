"""G2 — flash-attn, and Unsloth's override of ``attn_implementation``.

This package is the whole check: this spec (read by every pytest run, so plain data), its finding
codes (:mod:`.findings`) and the check itself (:mod:`.check`: its facts, ``gather``, ``evaluate``)."""

from __future__ import annotations

from pytest_dgx_spark.checks.spec import CheckSpec

SPEC = CheckSpec(
    id="G2",
    title="flash-attn and Unsloth",
    marker="spark_launch",
    area="that catch launch failures",
    needs_torch=True,
)
