"""G6 — unified-memory contention: who else holds (or will grab) the pool?

On GB10 GPU and CPU share one ~121 GiB pool: a server started with vLLM's default
``--gpu-memory-utilization`` 0.9 leaves training almost nothing, and the failure is an OOM or
a host wedge mid-run (vLLM #46307). G6 lists the other GPU work: NVML's per-process memory
(``nvidia-smi --query-compute-apps`` when NVML is unusable) and the process table for servers
and trainers NVML may not show, each with the cap its flags declare (``probes/gpu_programs.py``).
This pytest, its ancestors, our probe children and its launcher's workers are not "other";
another user's server is (the pool is one). PASS: no other GPU process. WARN: all capped at or
below ``g6_cap_max``. FAIL: one uncapped or above it. SKIP: no NVIDIA GPU, or nothing surveyed.

This module is the check's face (``FACTS``, ``gather``, ``evaluate``, and ``other_work`` for G5); the
package holds its parts: :mod:`.facts` the records, :mod:`.gather` the probing, :mod:`.survey` the
groups and their levels, :mod:`.evaluate` the decision and its words.
"""

from __future__ import annotations

from pytest_dgx_spark.checks.g06_contention import evaluate as decision
from pytest_dgx_spark.checks.g06_contention import gather as probing
from pytest_dgx_spark.checks.g06_contention.evaluate import describe, headline
from pytest_dgx_spark.checks.g06_contention.facts import Facts, Proc
from pytest_dgx_spark.checks.g06_contention.survey import UNSEEN, Group, Judged, Survey, build_groups, judge
from pytest_dgx_spark.checks.kit import CheckContext, Params
from pytest_dgx_spark.model import Result

FACTS = Facts

__all__ = [
    "FACTS", "UNSEEN", "Facts", "Group", "Judged", "Proc", "Survey", "build_groups", "describe", "evaluate",
    "gather", "headline", "judge", "other_work",
]


def gather(ctx: CheckContext) -> Facts:
    """Everything G6 decides on (G5 asks it too, before its copy probe): :mod:`.gather`."""
    return probing.gather(ctx)


def evaluate(facts: Facts, params: Params) -> Result:
    """Decide G6 from the survey (pure: :mod:`.evaluate`)."""
    return decision.evaluate(facts, params)


def other_work(ctx: CheckContext) -> list[str]:
    """Short descriptions of other GPU work (fail or warn level), for G5's
    refusal: a copy probe next to someone else's job measures neither."""
    return [describe(j) for j in judge(gather(ctx), ctx.params()) if j.level != "display"]
