"""G4's probing: an NVML sample series in a child (else nvidia-smi, :mod:`.smi`), the clock-event
counters around it, and the Xid lines of the kernel log since boot. It reads; it decides nothing."""

from __future__ import annotations

from collections import Counter

from pytest_dgx_spark.checks.g04_thermal import smi
from pytest_dgx_spark.checks.g04_thermal.facts import (
    XID_KEEP,
    Device,
    Facts,
    XidLine,
    answered,
    sample_interval,
)
from pytest_dgx_spark.checks.kit import CheckContext
from pytest_dgx_spark.probes import kernel_log, nvml
from pytest_dgx_spark.probes.nvml import NvmlDevice

#: what a snapshot device keeps of its errors (the static fields' only)
STATIC_ERRORS = ("power_limit_mw", "max_clock_sm_mhz", "name")


def gather(ctx: CheckContext) -> Facts:
    """The facts; a driver is said not to answer only with an NVIDIA device node there."""
    facts = _gather(ctx)
    node = ctx.machine.has_gpu_device_node()
    # no GPU and no NVIDIA device node: no driver to log an Xid, and journalctl costs a
    # machine without a GPU up to a second; a node with a silent driver (Xid 169) is read
    if not (facts.missing and (facts.limited or not node)):
        gather_kernel_log(ctx, facts)
    if facts.missing or node:
        return facts
    if facts.hung:
        facts.missing, facts.hung = f"no NVIDIA device node, and the driver did not answer: {facts.hung}", None
    elif not answered(facts):
        facts.missing, facts.broken = f"no NVIDIA device node; {facts.broken or 'no GPU answered a sample'}", None
    return facts


def gather_kernel_log(ctx: CheckContext, facts: Facts) -> None:
    """The Xid lines of the kernel log since boot (the machine reads it once, bounded)."""
    log = ctx.machine.kernel_log()
    read = kernel_log.outcome(log)
    facts.kernel_log_source = read.source
    if not read.source:
        tried = "; ".join(read.problems) or "no source answered"
        facts.kernel_log_problem = read.denied or f"kernel log not read ({tried})"
        return
    recs = kernel_log.records(log)
    facts.kernel_log_records, facts.kernel_log_cut = len(recs), read.cut
    found = kernel_log.xids(recs)
    facts.xid_counts = dict(Counter(str(x.code) for x in found))
    facts.xids = [XidLine.from_dict(x.to_dict()) for x in list(kernel_log.latest_first(found))[:XID_KEEP]]


def _gather(ctx: CheckContext) -> Facts:
    machine = ctx.machine
    seconds = float(ctx.settings.thermal_seconds)
    nv = nvml.view(machine.nvml())
    if nv.limited:
        return Facts(seconds=seconds, source="none", missing=nv.limited)
    if nv.hung:
        return Facts(seconds=seconds, hung=str(nv.reason))
    if not nv.ok:
        return smi.gather_smi(ctx, nvml_reason=str(nv.reason), nvml_missing=nv.missing)
    if nv.no_gpu:
        return Facts(seconds=seconds, source="none", missing="NVML answered but reports no GPU")
    sample = nvml.view(machine.nvml_sample(seconds, sample_interval(seconds, machine.timeout)))
    facts = Facts(
        seconds=seconds, devices=[static_from_snapshot(d) for d in nv.devices], samples=sample.samples,
        duration_s=sample.duration_s, counters_before=sample.counters_before,
        counters_after=sample.counters_after, counters_source="nvml" if sample.counters_before else None,
    )
    if sample.limited:
        facts.missing = sample.limited
    elif sample.hung:
        facts.hung = str(sample.reason)
    elif not sample.ok:
        facts.broken = str(sample.reason)
    elif not any(c.us for c in (*facts.counters_before, *facts.counters_after)):
        # NVML gave no counters (an older driver or binding): -q after the sample, since boot only
        after = smi.smi_q(ctx, facts, smi.SMI_Q_AFTER)
        if after:
            smi.keep_q(facts, None, after)
            facts.notes.append("NVML gave no clock-event counters: read from nvidia-smi -q after the sample "
                               "(since boot only)")
    return facts


def static_from_snapshot(dev: NvmlDevice) -> Device:
    return Device(index=dev.index, name=dev.name, power_limit_mw=dev.power_limit_mw,
                  max_clock_sm_mhz=dev.max_clock_sm_mhz,
                  errors={k: v for k, v in dev.errors.items() if k in STATIC_ERRORS})
