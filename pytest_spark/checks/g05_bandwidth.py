"""G5 — memory-bandwidth budget: does the plan assume more than the box moves?

Training and decoding on GB10 are bound by its LPDDR5X: 273 GB/s on paper,
and the seed plans with 180-192 GB/s sustained (a community copy figure; a
read kernel reaches 231-234 GB/s, antirez/ds4#773). A throughput plan built
on the spec number misses its schedule. On other GPUs the budget comes from
NVML: bus width x max memory clock x 2 (DDR) / 8, times a sustained fraction.

* ``--spark-planned-bandwidth GBPS``: PASS within the budget, WARN above it,
  with the step-time floor the budget implies (per GB moved, or for the
  declared ``--spark-workload-gb`` when given).
* ``--spark-intrusive``: a copy-bandwidth probe in the one torch child (two
  buffers of >= 512 MiB, CUDA events, warm-up, read + write bytes, median of
  samples). It refuses, before the child runs, when MemAvailable is short or
  G6's survey finds other GPU work (a probe next to someone's job measures
  neither, and on unified memory it can push that job out). Reported
  against the budget and the theoretical peak; WARN below
  ``g5_healthy_fraction`` x the healthy figure.
* Nothing declared and not intrusive: SKIP, saying so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_spark.checks import g06_contention
from pytest_spark.checks.kit import CheckContext
from pytest_spark.model import Reading, Result, Status

GIB = 1 << 30
MIB = 1 << 20
MIN_BUFFER_MIB = 512


@dataclass
class Facts:
    profile: str = "generic"
    gpu_name: str | None = None
    bus_width_bits: int | None = None
    max_mem_clock_mhz: int | None = None
    planned_gbps: float | None = None
    workload_gib: float | None = None
    intrusive: bool = False
    refusal: str | None = None  # why the copy probe was not run
    measurement: dict[str, Any] | None = None  # the torch child's "bandwidth" answer
    probe_problem: str | None = None  # requested but no number: torch missing, no CUDA...
    probe_hung: str | None = None  # the copy hung or crashed: the driver is not answering
    notes: list[str] = field(default_factory=list)


@dataclass
class Budget:
    low: float | None
    high: float | None
    spec: float | None
    spec_source: str

    @property
    def healthy(self) -> float | None:
        """What a healthy box sustains: the budget's low end."""
        return self.low or self.high

    def text(self) -> str:
        if self.high is None:
            return "no budget (NVML gave no memory bus width or clock)"
        band = (
            f"{gbps(self.low)}-{gbps(self.high)}" if self.low and self.low != self.high else gbps(self.high)
        )
        word = "peak" if self.spec_source.startswith("NVML") else "spec"
        spec = f" ({word} {gbps(self.spec)} GB/s, {self.spec_source})" if self.spec else ""
        return f"{band} GB/s budget{spec}"


def gbps(value: float | None) -> str:
    """Whole GB/s above 100 (4814, not 4814.3); three digits below."""
    if value is None:
        return "[N/A]"
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def theoretical_peak(bus_width_bits: int | None, max_mem_clock_mhz: int | None) -> float | None:
    """NVML's bus width x max memory clock x 2 (DDR) / 8 bits, in GB/s.

    H200: 6016 bits x 3201 MHz -> 4814 GB/s (NVIDIA quotes 4.8 TB/s).
    """
    if not bus_width_bits or not max_mem_clock_mhz:
        return None
    return round(bus_width_bits / 8 * max_mem_clock_mhz * 1e6 * 2 / 1e9, 1)


def budget(facts: Facts, thresholds: Mapping[str, float]) -> Budget:
    """GB10: the configured band and spec. Elsewhere: derived from NVML,
    unless the user set the thresholds explicitly."""
    low = thresholds.get("g5_budget_low_gbps", 0.0) or None
    high = thresholds.get("g5_budget_high_gbps", 0.0) or None
    spec = thresholds.get("g5_spec_gbps", 0.0) or None
    source = "configured"
    if facts.profile == "gb10":
        source = "GB10 LPDDR5X spec"
    peak = theoretical_peak(facts.bus_width_bits, facts.max_mem_clock_mhz)
    if spec is None and peak is not None:
        spec, source = peak, f"NVML {facts.bus_width_bits}-bit x {facts.max_mem_clock_mhz} MHz x 2"
    if high is None and spec is not None:
        high = round(spec * thresholds.get("g5_generic_budget_fraction", 0.7), 1)
    if low is None:
        low = high
    if high is not None and low is not None and low > high:
        low, high = high, low
    return Budget(low, high, spec, source)


# ---------------------------------------------------------------------- the probe


def probe_plan(ctx: CheckContext) -> tuple[dict[str, Any] | None, str | None]:
    """(config for the torch child, None) or (None, why it must not run).

    Decided before the child starts, from probes that are cached for the run
    (meminfo, NVML, the process table), so G5's ``run`` later reaches the
    same answer as the ``torch_request`` that built the child's request.
    """
    if not ctx.settings.intrusive:
        return None, "not --spark-intrusive"
    t = ctx.thresholds
    buffer_mib = max(MIN_BUFFER_MIB, int(t.get("g5_probe_buffer_mib", 1024)))
    margin_gib = t.get("g5_probe_margin_gb", 4.0)
    need = 2 * buffer_mib * MIB + margin_gib * GIB
    mem = ctx.machine.meminfo()
    avail_kib = (mem.get("fields") or {}).get("MemAvailable")
    if avail_kib is None:
        return None, f"MemAvailable unreadable ({mem.get('error') or 'not in /proc/meminfo'})"
    if avail_kib * 1024 < need:
        return None, (
            f"MemAvailable {avail_kib / (1 << 20):.1f} GiB < {need / GIB:.1f} GiB the probe needs "
            f"(2 x {buffer_mib} MiB buffers + {margin_gib:g} GiB margin)"
        )
    nv = ctx.machine.nvml()
    for dev in nv.get("devices") or []:
        memory = dev.get("memory")
        free = memory.get("free") if isinstance(memory, Mapping) and dev.get("index", 0) == 0 else None
        if free is not None and free < 2 * buffer_mib * MIB + 512 * MIB:
            return None, f"GPU 0 has {free / GIB:.1f} GiB free, the probe needs 2 x {buffer_mib} MiB"
    others = g06_contention.other_work(ctx)
    if others:
        shown = "; ".join(others[:2]) + (f"; +{len(others) - 2} more" if len(others) > 2 else "")
        return None, f"G6 sees other GPU work ({shown}); a copy probe next to it measures neither"
    return {"bytes": buffer_mib * MIB, "samples": 7, "warmup": 2, "sample_ms": 25.0}, None


def torch_request(ctx: CheckContext) -> dict[str, Any]:
    """Ask the one torch child for the copy probe, when it may run."""
    config, _ = probe_plan(ctx)
    return {"bandwidth": config} if config else {}


def gather(ctx: CheckContext) -> Facts:
    s = ctx.settings
    facts = Facts(
        profile=ctx.profile,
        planned_gbps=s.planned_bandwidth,
        workload_gib=s.workload_gb,
        intrusive=s.intrusive,
    )
    nv = ctx.machine.nvml()
    devices = nv.get("devices") or []
    if devices:
        dev = devices[0]
        facts.gpu_name = dev.get("name")
        width, clock = dev.get("mem_bus_width_bits"), dev.get("max_clock_mem_mhz")
        facts.bus_width_bits = width if isinstance(width, int) and width > 0 else None
        facts.max_mem_clock_mhz = clock if isinstance(clock, int) and clock > 0 else None
    elif not nv.get("ok"):
        facts.notes.append(f"NVML: {nv.get('reason')}")
    if not s.intrusive:
        return facts
    config, refusal = probe_plan(ctx)
    if config is None:
        facts.refusal = refusal
        return facts
    child = ctx.torch()
    answer = child.data.get("bandwidth")
    in_copy = child.step == "bandwidth"
    if isinstance(answer, Mapping) and answer.get("gbps") is not None:
        facts.measurement = dict(answer)
    elif isinstance(answer, Mapping) and (answer.get("skipped") or answer.get("error")):
        facts.probe_problem = str(answer.get("skipped") or answer.get("error"))
    elif in_copy and (child.timed_out or child.signal):
        facts.probe_hung = child.describe("the copy probe")
    elif child.data.get("torch_import_error"):
        facts.probe_problem = f"torch not importable: {child.data['torch_import_error']}"
    elif not child.data.get("cuda_available", False) and child.ok:
        facts.probe_problem = "torch sees no CUDA device"
    elif not child.ok:
        facts.probe_problem = child.describe("the torch child") + " before the copy (see G1)"
    else:
        facts.probe_problem = "the torch child did not run the copy"
    return facts


# ---------------------------------------------------------------------- evaluate


def step_floor(rate: float, workload_gib: float | None) -> str:
    """What a bandwidth means for a step: bytes have to move at least once."""
    if workload_gib:
        seconds = workload_gib * GIB / (rate * 1e9)
        return (
            f"a step that touches the declared {workload_gib:g} GiB once takes >= {seconds:.3g} s "
            f"at {gbps(rate)} GB/s"
        )
    return f"each GB a step moves costs >= {1000.0 / rate:.2f} ms at {gbps(rate)} GB/s"


def _pct(part: float, whole: float | None) -> str:
    return f" = {part / whole:.0%} of the {gbps(whole)} GB/s theoretical peak" if whole else ""


def evaluate(facts: Facts, thresholds: Mapping[str, float]) -> Result:
    """Decide G5 from the plan, the budget and the measurement (pure)."""
    b = budget(facts, thresholds)
    fraction = thresholds.get("g5_healthy_fraction", 0.75)
    details = list(facts.notes)
    readings = [
        Reading("budget_low", b.low, "GB/s"),
        Reading("budget_high", b.high, "GB/s"),
        Reading("spec", b.spec, "GB/s"),
        Reading("mem_bus_width", facts.bus_width_bits, "bit"),
        Reading("max_mem_clock", facts.max_mem_clock_mhz, "MHz"),
    ]
    parts: list[str] = []
    warn_fixes: list[str] = []
    status = Status.SKIP
    measured = facts.measurement.get("gbps") if facts.measurement else None

    if facts.planned_gbps is not None:
        plan = facts.planned_gbps
        readings.insert(0, Reading("planned", plan, "GB/s"))
        if b.high is None:
            parts.append(f"planned {plan:g} GB/s, but {b.text()}")
            details.append("set --spark-threshold g5_budget_high_gbps=... to judge the plan on this GPU")
        elif plan <= b.high and (measured is None or plan <= measured):
            status = Status.PASS
            parts.append(
                f"planned {plan:g} GB/s within the {b.text()}: {step_floor(b.high, facts.workload_gib)}"
            )
        else:
            status = Status.WARN
            cap = b.high if measured is None else min(b.high, measured)
            limit = (
                f"the measured {gbps(measured)} GB/s copy"
                if measured is not None and measured < b.high
                else f"the {b.text()}"
            )
            parts.append(
                f"planned {plan:g} GB/s > {limit}: {step_floor(cap, facts.workload_gib)}, not the "
                f"{_floor_value(plan, facts.workload_gib)} the plan assumes"
            )
            warn_fixes.append(
                f"plan with <= {gbps(cap)} GB/s sustained (the spec figure is not reachable in practice): "
                "lower the throughput target, or move fewer bytes per step (quantize, smaller batch)"
            )

    if facts.measurement:
        m = facts.measurement
        rate = float(m["gbps"])
        buf = int(m.get("buffer_bytes") or 0)
        readings += [
            Reading("measured_copy", round(rate, 1), "GB/s"),
            Reading("copy_samples", len(m.get("samples_gbps") or [])),
            Reading("copy_buffer", round(buf / MIB), "MiB"),
            Reading("copy_gpu_time", m.get("gpu_ms"), "ms"),
            Reading("copy_engine", m.get("engine", "torch")),
        ]
        healthy = b.healthy
        floor = healthy * fraction if healthy else None
        text = (
            f"measured {rate:.0f} GB/s copy (read+write, 2 x {buf / MIB:.0f} MiB, median of "
            f"{len(m.get('samples_gbps') or [])}){_pct(rate, b.spec)}"
        )
        if floor is not None and rate < floor:
            status = Status.WARN
            parts.append(
                f"{text} < {floor:.0f} GB/s ({fraction:g} x the {gbps(healthy)} GB/s healthy figure)"
            )
            warn_fixes.append(
                "re-run on an idle box (G6); a low copy bandwidth on an idle box points at a degraded "
                "power state (G4's clocks) or memory configuration"
            )
        else:
            if status is Status.SKIP:
                status = Status.INFO
            budget_text = f"; {b.text()}" if facts.planned_gbps is None else ""
            parts.append(text + budget_text)
        details.append(f"copy samples (GB/s): {m.get('samples_gbps')}; {m.get('iters')} copies per sample")
    elif facts.probe_hung:
        readings.append(Reading("measured_copy", None, "GB/s"))
        return Result(
            "G5",
            Status.FAIL,
            f"driver not answering: {facts.probe_hung}" + (f"; {parts[0]}" if parts else ""),
            "check `dmesg | grep -i -e NVRM -e Xid`; a wedged driver needs a reboot",
            readings,
            details=details,
        )
    elif facts.intrusive:
        why = facts.refusal or facts.probe_problem or "not run"
        verb = "refused" if facts.refusal else "gave no number"
        details.append(f"copy probe {verb}: {why}")
        if parts:
            parts.append(f"copy probe {verb}: {why}")

    if not parts:
        if facts.workload_gib and b.high:
            return Result(
                "G5",
                Status.INFO,
                f"{b.text()}: {step_floor(b.high, facts.workload_gib)}; no planned bandwidth "
                "(--spark-planned-bandwidth) and no measurement (--spark-intrusive)",
                readings=readings,
                details=details,
            )
        if facts.intrusive:
            why = facts.refusal or facts.probe_problem or "not run"
            summary = f"copy probe {'refused' if facts.refusal else 'gave no number'}: {why}; no planned bandwidth declared"
        else:
            summary = "nothing to judge: no planned bandwidth (--spark-planned-bandwidth) and not intrusive (--spark-intrusive measures the copy bandwidth)"
        return Result("G5", Status.SKIP, f"{summary}; {b.text()}", readings=readings, details=details)
    return Result("G5", status, "; ".join(parts), "; ".join(warn_fixes), readings, details=details)


def _floor_value(gbps: float, workload_gib: float | None) -> str:
    if workload_gib:
        return f"{workload_gib * GIB / (gbps * 1e9):.3g} s"
    return f"{1000.0 / gbps:.2f} ms"


def run(ctx: CheckContext) -> Result:
    return evaluate(gather(ctx), ctx.thresholds)
