"""G5 — memory-bandwidth budget: does the plan assume more than the box moves?

GB10's LPDDR5X is 273 GB/s on paper, 218-234 GB/s in copy microbenchmarks (bandwidth_*.txt) and
~160-190 GB/s in a real dense decode (workload_bandwidth_1.txt); elsewhere both come from NVML.
A plan PASSes within the decode figure; ``--spark-intrusive`` adds a copy probe in the torch child
that WARNs below ``g5_healthy_fraction`` x the hardware figure. Nothing to judge: INFO.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Any

from pytest_dgx_spark.checks.g05_bandwidth.budget import Budget, budget, gbps, theoretical_peak

# G5 refuses its probe on G6's judgement of other GPU work (see other_work there)
from pytest_dgx_spark.checks.g06_contention import check as g06_contention
from pytest_dgx_spark.checks.kit import CheckContext, FactsBase, Findings, Params, first_n
from pytest_dgx_spark.checks.record import FactsError, Record
from pytest_dgx_spark.datadef import define
from pytest_dgx_spark.model import Reading, Result, Status
from pytest_dgx_spark.probes import nvml
from pytest_dgx_spark.probes.child import ChildResult

GIB = 1 << 30
MIB = 1 << 20
MIN_BUFFER_MIB = 512


@define
class Measurement(Record):
    """The torch child's copy probe answer (``torch_bandwidth.py``): the median GB/s of its samples."""

    gbps: float = 0.0
    samples_gbps: list[float] = field(default_factory=list)
    buffer_bytes: int = 0
    gpu_ms: float | None = None
    iters: int | None = None
    engine: str = "torch"
    samples: int | None = None
    wall_s: float | None = None


@define
class CopyAnswer(Record):
    """What the copy step answered: a measurement (``gbps`` given), or why not (``skipped``, ``error``)."""

    gbps: float | None = None
    skipped: str | None = None
    error: str | None = None


@define
class Facts(FactsBase):
    gpu_name: str | None = None
    bus_width_bits: int | None = None
    max_mem_clock_mhz: int | None = None
    intrusive: bool = False
    refusal: str | None = None  # why the copy probe was not run
    measurement: Measurement | None = None
    probe_problem: str | None = None  # requested but no number: torch missing, no CUDA...
    probe_hung: str | None = None  # the copy hung or crashed: the driver is not answering
    notes: list[str] = field(default_factory=list)


FACTS = Facts

__all__ = ["FACTS", "Budget", "CopyAnswer", "Facts", "Measurement", "budget", "evaluate", "gather", "gbps",
           "probe_plan", "step_floor", "theoretical_peak", "torch_request"]


def probe_plan(ctx: CheckContext) -> tuple[dict[str, Any] | None, str | None]:
    """(config for the torch child, None) or (None, why it must not run), from probes
    cached for the run, so ``gather`` reaches the same answer as ``torch_request``."""
    if not ctx.settings.intrusive:
        return None, "not --spark-intrusive"
    params = ctx.params()
    buffer_mib = max(MIN_BUFFER_MIB, int(params.threshold("g5_probe_buffer_mib")))
    margin_gib = params.threshold("g5_probe_margin_gb")
    need = 2 * buffer_mib * MIB + margin_gib * GIB
    mem = ctx.machine.meminfo()
    avail_kib = mem["fields"].get("MemAvailable")
    if avail_kib is None:
        return None, f"MemAvailable unreadable ({mem['error'] or 'not in /proc/meminfo'})"
    if avail_kib * 1024 < need:
        return None, (
            f"MemAvailable {avail_kib / (1 << 20):.1f} GiB < {need / GIB:.1f} GiB the probe needs "
            f"(2 x {buffer_mib} MiB buffers + {margin_gib:g} GiB margin)"
        )
    for dev in nvml.view(ctx.machine.nvml()).devices:
        free = dev.memory.free if dev.memory is not None and dev.index == 0 else None
        if free is not None and free < 2 * buffer_mib * MIB + 512 * MIB:
            return None, f"GPU 0 has {free / GIB:.1f} GiB free, the probe needs 2 x {buffer_mib} MiB"
    others = g06_contention.other_work(ctx)
    if others:
        return None, (f"G6 sees other GPU work ({first_n(others, 2)}); a copy probe next to it "
                      "measures neither")
    return {"bytes": buffer_mib * MIB, "samples": 7, "warmup": 2, "sample_ms": 25.0}, None


def torch_request(ctx: CheckContext) -> dict[str, Any]:
    """Ask the one torch child for the copy probe, when it may run."""
    config, _ = probe_plan(ctx)
    return {"bandwidth": config} if config else {}


def gather(ctx: CheckContext) -> Facts:
    facts = Facts(intrusive=ctx.settings.intrusive)
    nv = nvml.view(ctx.machine.nvml())
    if nv.devices:
        dev = nv.devices[0]
        facts.gpu_name = dev.name
        width, clock = dev.mem_bus_width_bits, dev.max_clock_mem_mhz
        facts.bus_width_bits = width if width is not None and width > 0 else None
        facts.max_mem_clock_mhz = clock if clock is not None and clock > 0 else None
    elif not nv.ok:
        facts.notes.append(f"NVML: {nv.reason}")
    if facts.intrusive:
        config, facts.refusal = probe_plan(ctx)
        if config is not None:
            _probe_outcome(ctx.torch(), facts)
    return facts


def _probe_outcome(child: ChildResult, facts: Facts) -> None:
    """The copy's number, or why there is none (hung in the copy: the driver)."""
    data = child.data
    measured, problem = _copy_answer(data.get("bandwidth"))
    if measured is not None:
        facts.measurement = measured
    elif problem:
        facts.probe_problem = problem
    elif child.step == "bandwidth" and (child.timed_out or child.signal):
        facts.probe_hung = child.describe("the copy probe")
    elif data.get("torch_import_error"):
        facts.probe_problem = f"torch not importable: {data['torch_import_error']}"
    elif not data.get("cuda_available", False) and child.ok:
        facts.probe_problem = "torch sees no CUDA device"
    elif not child.ok:
        facts.probe_problem = child.describe("the torch child") + " before the copy (see G1)"
    else:
        facts.probe_problem = "the torch child did not run the copy"


def _copy_answer(raw: Any) -> tuple[Measurement | None, str | None]:
    """(the measurement, None), or (None, why the copy step gave none; None when it did not answer)."""
    if not isinstance(raw, Mapping):
        return None, None
    try:
        said = CopyAnswer.from_dict(raw)
        return (Measurement.from_dict(raw), None) if said.gbps is not None else (None, said.skipped or said.error)
    except FactsError as exc:  # not what the child writes: said as why there is no number
        return None, f"copy probe answer unreadable ({exc})"


def _floor_value(rate: float, workload_gib: float | None) -> str:
    return f"{workload_gib * GIB / (rate * 1e9):.3g} s" if workload_gib else f"{1000.0 / rate:.2f} ms"


def step_floor(rate: float, workload_gib: float | None) -> str:
    """What a bandwidth means for a step: bytes have to move at least once."""
    costs = f"{_floor_value(rate, workload_gib)} at {gbps(rate)} GB/s"
    if workload_gib:
        return f"a step that touches the declared {workload_gib:g} GiB once takes >= {costs}"
    return f"each GB a step moves costs >= {costs}"


#: a stage's part of the line, and its headline when it is fine (None: it warned, into Findings)
Part = tuple[str, "str | None"]


def evaluate(facts: Facts, params: Params) -> Result:
    """Decide G5 from the plan, the budget and the measurement (pure)."""
    b = budget(facts, params)
    plan, workload = params.option("planned_bandwidth"), params.option("workload_gb")
    out = Findings("G5", details=list(facts.notes))
    parts: list[Part] = []
    for name in ("decode_low", "decode_high", "hardware_low", "hardware_high", "spec"):
        out.read(name, getattr(b, name), "GB/s")
    out.read("mem_bus_width", facts.bus_width_bits, "bit")
    out.read("max_mem_clock", facts.max_mem_clock_mhz, "MHz")
    status = Status.INFO
    if plan is not None:
        measured = facts.measurement.gbps if facts.measurement else None
        status, part = _plan_stage(float(plan), workload, b, measured, out)
        parts.append(part)
    if facts.measurement:
        parts.append(_measurement_stage(facts.measurement, b, params, plan is None, out))
    elif facts.probe_hung:
        out.read("measured_copy", None, "GB/s")
        summary = f"driver not answering: {facts.probe_hung}" + (f"; {parts[0][0]}" if parts else "")
        fix = "check `dmesg | grep -i -e NVRM -e Xid`; a wedged driver needs a reboot"
        return Result("G5", Status.FAIL, summary, fix, out.readings, details=out.details,
                      headline="copy probe hung: driver not answering",
                      short_fix="dmesg | grep -i Xid; reboot", codes=["G5.probe-hung"])
    elif facts.intrusive:
        text = _probe_missing(facts)
        out.note(text)
        if parts:
            parts.append((text, None))
    if not parts:
        return _nothing_to_judge(facts, b, workload, out)
    info = [head for _, head in parts if head]
    head, short_fix = out.short[out.warnings[0][0]] if out.warnings else (first_n(info, 2), "")
    fix = "; ".join(dict.fromkeys(f for _, f in out.warnings))
    return Result("G5", Status.WARN if out.warnings else status, "; ".join(text for text, _ in parts), fix,
                  out.readings, details=out.details, headline=head, short_fix=short_fix, codes=out.codes_of())


def _plan_stage(
    plan: float, workload: float | None, b: Budget, measured: float | None, out: Findings
) -> tuple[Status, Part]:
    """PASS within the real-decode figure (and what was measured), WARN above."""
    out.readings.insert(0, Reading("planned", plan, "GB/s"))
    high = b.high
    if high is None:
        out.note("set --spark-threshold g5_decode_high_gbps=... to judge the plan on this GPU")
        return Status.SKIP, (f"planned {plan:g} GB/s, but {b.text()}", f"planned {plan:g} GB/s: no budget to "
                             "judge it")
    if plan <= high and (measured is None or plan <= measured):
        part = f"planned {plan:g} GB/s within the {b.text()}: {step_floor(high, workload)}"
        return Status.PASS, (part, f"planned {plan:g} GB/s within {b.decode_text()} GB/s real decode")
    cap = high if measured is None else min(high, measured)
    if measured is not None and measured < high:
        limit, short = f"the measured {gbps(measured)} GB/s copy", f"measured {gbps(measured)} GB/s"
    elif b.hardware_high and plan > b.hardware_high:
        spec = f", spec {gbps(b.spec)} GB/s" if b.spec else ""
        limit = (f"the {b.hardware_text()} GB/s the hardware moves in a microbenchmark (real decode "
                 f"{b.decode_text()} GB/s{spec})")
        short = f"{b.hardware_text()} GB/s hardware"
    else:
        limit, short = f"the {b.text()}", f"{b.decode_text()} GB/s real decode"
    text = (f"planned {plan:g} GB/s > {limit}: {step_floor(cap, workload)}, not the "
            f"{_floor_value(plan, workload)} the plan assumes")
    out.warn(text, f"plan with <= {gbps(cap)} GB/s sustained (the spec figure is not reachable in practice): "
             "lower the throughput target, or move fewer bytes per step (quantize, smaller batch)",
             f"planned {plan:g} GB/s > {short}", f"plan with <= {gbps(cap)} GB/s",
             code="G5.plan-above-budget")
    return Status.WARN, (text, None)


def _measurement_stage(m: Measurement, b: Budget, params: Params, no_plan: bool, out: Findings) -> Part:
    """The copy probe against the hardware figure (the healthy reference)."""
    rate, buf, n = m.gbps, m.buffer_bytes, len(m.samples_gbps)
    out.read("measured_copy", round(rate, 1), "GB/s")
    out.read("copy_samples", n)
    out.read("copy_buffer", round(buf / MIB), "MiB")
    out.read("copy_gpu_time", m.gpu_ms, "ms")
    out.read("copy_engine", m.engine)
    fraction, healthy = params.threshold("g5_healthy_fraction"), b.healthy
    floor = healthy * fraction if healthy else None
    peak = f" = {rate / b.spec:.0%} of the {gbps(b.spec)} GB/s theoretical peak" if b.spec else ""
    text = f"measured {rate:.0f} GB/s copy (read+write, 2 x {buf / MIB:.0f} MiB, median of {n}){peak}"
    out.note(f"copy samples (GB/s): {m.samples_gbps}; {m.iters} copies per sample")
    if floor is not None and rate < floor:
        low = f"{text} < {floor:.0f} GB/s ({fraction:g} x the {gbps(healthy)} GB/s healthy figure)"
        out.warn(low, "re-run on an idle box (G6); a low copy bandwidth on an idle box points at a degraded "
                 "power state (G4's clocks) or memory configuration",
                 f"copy {rate:.0f} GB/s < {floor:.0f} GB/s healthy floor",
                 "re-run idle; check G4 clocks and power state", code="G5.copy-low")
        return low, None
    healthy_text = f"copy {rate:.0f} GB/s (healthy >= {gbps(floor)} GB/s)"
    return text + (f"; {b.text()}" if no_plan else ""), healthy_text


def _probe_missing(facts: Facts) -> str:
    verb = "refused" if facts.refusal else "gave no number"
    return f"copy probe {verb}: {facts.refusal or facts.probe_problem or 'not run'}"


def _nothing_to_judge(facts: Facts, b: Budget, workload: float | None, out: Findings) -> Result:
    """No plan and no number: INFO with the budget; SKIP when the asked-for probe could not run."""
    if facts.intrusive:
        what = _probe_missing(facts)
        summary = f"{what}; no planned bandwidth declared; {b.text()}"
        return Result("G5", Status.SKIP, summary, readings=out.readings, details=out.details, headline=what,
                      codes=["G5.probe-not-run"])
    floor = f": {step_floor(b.high, workload)}" if workload and b.high else ""
    summary = (f"{b.text()}{floor}; no planned bandwidth to judge (--spark-planned-bandwidth) and no "
               "measurement (--spark-intrusive)")
    head = f"budget {b.decode_text()} GB/s decode, {b.hardware_text()} GB/s hardware"
    return Result("G5", Status.INFO, summary, readings=out.readings, details=out.details,
                  headline=head if b.high else "no bandwidth budget known", codes=["G5.budget-only"])
