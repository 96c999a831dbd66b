"""G8 — stale playbooks: does an open issue name the playbook you follow?

This package is the whole check: this spec (read by every pytest run, so plain data), its finding
codes (:mod:`.findings`) and the check itself (:mod:`.check`: its facts, ``gather``, ``evaluate``)."""

from __future__ import annotations

from pytest_dgx_spark.checks.spec import CheckSpec

SPEC = CheckSpec(
    id="G8",
    title="stale playbooks",
    marker="spark_upstream",
    area="of upstream playbook issues",
    needs_torch=False,
)
