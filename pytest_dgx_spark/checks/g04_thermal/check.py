"""G4 — thermals and power: is the GPU being slowed down by heat or power?

A hot GB10 cuts its clocks (open-gpu-kernel-modules#1358); one on a degraded USB-C PD supply runs
capped without an error. G4 samples temperature, power and its limit, the SM clock, the T.Limit margin
and the clock-event reasons for ``--spark-thermal-seconds`` through NVML (in a child), else nvidia-smi,
and the cumulative clock-event counters around the sample (on GB10 the instant reasons read "Not
Active" while the counters show hours of capping: nvidia-smi-q_1.txt). Issue 22 adds two faults these
do not show: Xid lines in the kernel log since boot (N7: a vLLM service killed by Xid 13 exits
``status=0/SUCCESS``; GSP crashes, Xid 119/120, need a reboot), and a stuck low-power state under load
(N5: 96 % utilisation at 799 MHz and 19.5 W with no throttle reason, cured only by pulling AC power).

This module is the check's face (``FACTS``, ``gather``, ``evaluate``); the package holds its parts:
:mod:`.facts` the records, :mod:`.gather` and :mod:`.smi` the probing, :mod:`.evaluate` the decision
with :mod:`.stages`, :mod:`.low_power` and :mod:`.xid`, :mod:`.figures` the words and readings.
"""

from __future__ import annotations

from pytest_dgx_spark import attachments
from pytest_dgx_spark.checks.g04_thermal import evaluate as decision
from pytest_dgx_spark.checks.g04_thermal import gather as probing
from pytest_dgx_spark.checks.g04_thermal.facts import LIMITED, Device, Facts, XidLine, sample_interval
from pytest_dgx_spark.checks.g04_thermal.findings import XID_APP_FIX, XID_FIXES, XID_OTHER_FIX
from pytest_dgx_spark.checks.g04_thermal.gather import static_from_snapshot
from pytest_dgx_spark.checks.g04_thermal.smi import parse_smi, smi_argv, smi_fields
from pytest_dgx_spark.checks.g04_thermal.xid import xid_class
from pytest_dgx_spark.checks.kit import CheckContext, Params
from pytest_dgx_spark.checks.record import plain
from pytest_dgx_spark.model import Result

FACTS = Facts


def gather(ctx: CheckContext) -> Facts:
    """The sample series, the counters around it and the kernel log's Xids (:mod:`.gather`)."""
    return probing.gather(ctx)


def evaluate(facts: Facts, params: Params) -> Result:
    """Decide G4 from a sample series, the clock-event counters and the Xids (pure: :mod:`.evaluate`),
    with the series attached for the reports' chart (an attachment: no report names G4)."""
    result = decision.evaluate(facts, params)
    result.attachments += attachments.thermal_chart(
        "G4 thermals", "thermal-g4", chart_title="G4 thermal sample", samples=plain(facts.samples),
        devices=plain(facts.devices), counters_before=plain(facts.counters_before),
        counters_after=plain(facts.counters_after))  # fmt: skip
    return result

__all__ = [
    "FACTS", "LIMITED", "XID_APP_FIX", "XID_FIXES", "XID_OTHER_FIX", "Device", "Facts", "XidLine", "evaluate",
    "gather", "parse_smi", "sample_interval", "smi_argv", "smi_fields", "static_from_snapshot", "xid_class",
]
