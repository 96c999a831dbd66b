"""G5 — memory-bandwidth budget: does the plan assume more than the box moves?

Training and decoding on GB10 are bound by its LPDDR5X: 273 GB/s on paper.
Real GB10s measure 218-234 GB/s in copy and read microbenchmarks
(fixtures bandwidth_1.txt, bandwidth_2.txt, bandwidth_3.txt), and a real dense
decode sustains ~160-190 GB/s effective (workload_bandwidth_1.txt). A
throughput plan built on the spec number, or on the microbenchmark, misses its
schedule. The two figures are thresholds (``g5_hardware_*``, ``g5_decode_*``).
On other GPUs both come from NVML: bus width x max memory clock x 2 (DDR) / 8,
times a sustained fraction.

* ``--spark-planned-bandwidth GBPS``: PASS within the real-decode figure, WARN
  above it, with the step-time floor it implies (per GB moved, or for the
  declared ``--spark-workload-gb`` when given).
* ``--spark-intrusive``: a copy-bandwidth probe in the one torch child (two
  buffers of >= 512 MiB, CUDA events, warm-up, read + write bytes, median of
  samples). It refuses, before the child runs, when MemAvailable is short or
  G6's survey finds other GPU work (a probe next to someone's job measures
  neither, and on unified memory it can push that job out). WARN below
  ``g5_healthy_fraction`` x the hardware figure (the healthy reference).
* Nothing declared and not intrusive: INFO with the budget (the check ran;
  there was no plan to judge). SKIP only when a requested probe could not run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_dgx_spark.checks import g06_contention
from pytest_dgx_spark.checks.kit import CheckContext, FactsBase, Findings, Params, first_n
from pytest_dgx_spark.model import Reading, Result, Status

GIB = 1 << 30
MIB = 1 << 20
MIN_BUFFER_MIB = 512


@dataclass
class Facts(FactsBase):
    gpu_name: str | None = None
    bus_width_bits: int | None = None
    max_mem_clock_mhz: int | None = None
    intrusive: bool = False
    refusal: str | None = None  # why the copy probe was not run
    measurement: dict[str, Any] | None = None  # the torch child's "bandwidth" answer
    probe_problem: str | None = None  # requested but no number: torch missing, no CUDA...
    probe_hung: str | None = None  # the copy hung or crashed: the driver is not answering
    notes: list[str] = field(default_factory=list)


FACTS = Facts


@dataclass
class Budget:
    """What the memory moves: in a real dense decode (the planning figure) and
    in a microbenchmark (the hardware figure, the probe's healthy reference)."""

    decode_low: float | None
    decode_high: float | None
    hardware_low: float | None
    hardware_high: float | None
    spec: float | None
    spec_source: str

    @property
    def healthy(self) -> float | None:
        """What a healthy box's copy reaches: the hardware figure's low end."""
        return self.hardware_low or self.hardware_high

    @property
    def high(self) -> float | None:
        """The most a plan may assume: the real-decode figure's high end."""
        return self.decode_high or self.hardware_high

    def decode_text(self) -> str:
        return _band(self.decode_low, self.decode_high)

    def hardware_text(self) -> str:
        return _band(self.hardware_low, self.hardware_high)

    def text(self) -> str:
        if self.high is None:
            return "no budget (NVML gave no memory bus width or clock)"
        word = "peak" if self.spec_source.startswith("NVML") else "spec"
        spec = f"{word} {gbps(self.spec)} GB/s, {self.spec_source}" if self.spec else ""
        if self.decode_text() == self.hardware_text():
            return f"{self.decode_text()} GB/s budget" + (f" ({spec})" if spec else "")
        return f"{self.decode_text()} GB/s real-decode budget (hardware {self.hardware_text()} GB/s" + (
            f", {spec})" if spec else ")"
        )


def _band(low: float | None, high: float | None) -> str:
    if low and high and gbps(low) != gbps(high):
        return f"{gbps(low)}-{gbps(high)}"
    return gbps(high or low)


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


def budget(facts: Facts, params: Params) -> Budget:
    """GB10: the configured (measured) figures and spec. Elsewhere: derived
    from NVML, unless the user set the thresholds explicitly."""

    def pair(low_name: str, high_name: str, derived: float | None) -> tuple[float | None, float | None]:
        low = params.threshold(low_name) or None
        high = params.threshold(high_name) or None
        high = high or low or derived
        low = low or high
        return (high, low) if low and high and low > high else (low, high)

    spec = params.threshold("g5_spec_gbps") or None
    source = "GB10 LPDDR5X spec" if params.gb10 else "configured"
    peak = theoretical_peak(facts.bus_width_bits, facts.max_mem_clock_mhz)
    if spec is None and peak is not None:
        spec, source = peak, f"NVML {facts.bus_width_bits}-bit x {facts.max_mem_clock_mhz} MHz x 2"
    sustained = round(spec * params.threshold("g5_generic_budget_fraction"), 1) if spec else None
    hw_low, hw_high = pair("g5_hardware_low_gbps", "g5_hardware_high_gbps", sustained)
    dec_low, dec_high = pair("g5_decode_low_gbps", "g5_decode_high_gbps", sustained)
    return Budget(dec_low, dec_high, hw_low, hw_high, spec, source)


# ---------------------------------------------------------------------- the probe


def probe_plan(ctx: CheckContext) -> tuple[dict[str, Any] | None, str | None]:
    """(config for the torch child, None) or (None, why it must not run).

    Decided before the child starts, from probes that are cached for the run
    (meminfo, NVML, the process table), so G5's ``gather`` later reaches the
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
        return (
            None,
            f"G6 sees other GPU work ({first_n(others, 2)}); a copy probe next to it measures neither",
        )
    return {"bytes": buffer_mib * MIB, "samples": 7, "warmup": 2, "sample_ms": 25.0}, None


def torch_request(ctx: CheckContext) -> dict[str, Any]:
    """Ask the one torch child for the copy probe, when it may run."""
    config, _ = probe_plan(ctx)
    return {"bandwidth": config} if config else {}


def gather(ctx: CheckContext) -> Facts:
    s = ctx.settings
    facts = Facts(intrusive=s.intrusive)
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


@dataclass
class _Out:
    """G5's line in the making: its parts in order (what is fine and what
    warns), the status, the headlines of what is fine. Its warnings, with
    their fixes and short forms, go into the one ``kit.Findings`` (``f``)."""

    status: Status = Status.INFO
    parts: list[str] = field(default_factory=list)
    info: list[str] = field(default_factory=list)  # headlines of what is fine
    readings: list[Reading] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    f: Findings = field(default_factory=lambda: Findings("G5"))

    def warn(self, text: str, fix: str, headline: str, short_fix: str) -> None:
        """A warning, said in the line where it falls among the parts."""
        self.status = Status.WARN
        self.parts.append(text)
        self.f.warn(text, fix, headline, short_fix)

    def result(self) -> Result:
        if self.f.warnings:
            head, short_fix = self.f.short.get(self.f.warnings[0][0], ("", ""))
        else:
            head, short_fix = first_n(self.info, 2), ""
        return Result(
            "G5",
            self.status,
            "; ".join(self.parts),
            "; ".join(dict.fromkeys(fix for _, fix in self.f.warnings)),
            self.readings,
            details=self.details,
            headline=head,
            short_fix=short_fix,
        )


def evaluate(facts: Facts, params: Params) -> Result:
    """Decide G5 from the plan, the budget and the measurement (pure)."""
    b = budget(facts, params)
    plan = params.option("planned_bandwidth")
    workload = params.option("workload_gb")
    out = _Out(details=list(facts.notes))
    out.readings = [
        Reading("decode_low", b.decode_low, "GB/s"),
        Reading("decode_high", b.decode_high, "GB/s"),
        Reading("hardware_low", b.hardware_low, "GB/s"),
        Reading("hardware_high", b.hardware_high, "GB/s"),
        Reading("spec", b.spec, "GB/s"),
        Reading("mem_bus_width", facts.bus_width_bits, "bit"),
        Reading("max_mem_clock", facts.max_mem_clock_mhz, "MHz"),
    ]
    measured = facts.measurement.get("gbps") if facts.measurement else None
    if plan is not None:
        _plan_stage(float(plan), workload, b, measured, out)
    if facts.measurement:
        _measurement_stage(facts.measurement, b, params, plan is None, out)
    elif facts.probe_hung:
        out.readings.append(Reading("measured_copy", None, "GB/s"))
        return Result(
            "G5",
            Status.FAIL,
            f"driver not answering: {facts.probe_hung}" + (f"; {out.parts[0]}" if out.parts else ""),
            "check `dmesg | grep -i -e NVRM -e Xid`; a wedged driver needs a reboot",
            out.readings,
            details=out.details,
            headline="copy probe hung: driver not answering",
            short_fix="dmesg | grep -i Xid; reboot",
        )
    elif facts.intrusive:
        _probe_missing_stage(facts, out)
    if not out.parts:
        return _nothing_to_judge(facts, b, workload, out)
    return out.result()


def _plan_stage(plan: float, workload: float | None, b: Budget, measured: float | None, out: _Out) -> None:
    """PASS within the real-decode figure (and what was measured), WARN above."""
    out.readings.insert(0, Reading("planned", plan, "GB/s"))
    high = b.high
    if high is None:
        out.status = Status.SKIP
        out.parts.append(f"planned {plan:g} GB/s, but {b.text()}")
        out.info.append(f"planned {plan:g} GB/s: no budget to judge it")
        out.details.append("set --spark-threshold g5_decode_high_gbps=... to judge the plan on this GPU")
        return
    if plan <= high and (measured is None or plan <= measured):
        out.status = Status.PASS
        out.parts.append(f"planned {plan:g} GB/s within the {b.text()}: {step_floor(high, workload)}")
        out.info.append(f"planned {plan:g} GB/s within {b.decode_text()} GB/s real decode")
        return
    cap = high if measured is None else min(high, measured)
    if measured is not None and measured < high:
        limit, short = f"the measured {gbps(measured)} GB/s copy", f"measured {gbps(measured)} GB/s"
    elif b.hardware_high and plan > b.hardware_high:
        spec = f", spec {gbps(b.spec)} GB/s" if b.spec else ""
        limit = (
            f"the {b.hardware_text()} GB/s the hardware moves in a microbenchmark "
            f"(real decode {b.decode_text()} GB/s{spec})"
        )
        short = f"{b.hardware_text()} GB/s hardware"
    else:
        limit = f"the {b.text()}"
        short = f"{b.decode_text()} GB/s real decode"
    out.warn(
        f"planned {plan:g} GB/s > {limit}: {step_floor(cap, workload)}, not the "
        f"{_floor_value(plan, workload)} the plan assumes",
        f"plan with <= {gbps(cap)} GB/s sustained (the spec figure is not reachable in practice): "
        "lower the throughput target, or move fewer bytes per step (quantize, smaller batch)",
        f"planned {plan:g} GB/s > {short}",
        f"plan with <= {gbps(cap)} GB/s",
    )


def _measurement_stage(m: Mapping[str, Any], b: Budget, params: Params, no_plan: bool, out: _Out) -> None:
    """The copy probe against the hardware figure (the healthy reference)."""
    rate = float(m["gbps"])
    buf = int(m.get("buffer_bytes") or 0)
    n = len(m.get("samples_gbps") or [])
    out.readings += [
        Reading("measured_copy", round(rate, 1), "GB/s"),
        Reading("copy_samples", n),
        Reading("copy_buffer", round(buf / MIB), "MiB"),
        Reading("copy_gpu_time", m.get("gpu_ms"), "ms"),
        Reading("copy_engine", m.get("engine", "torch")),
    ]
    fraction = params.threshold("g5_healthy_fraction")
    healthy = b.healthy
    floor = healthy * fraction if healthy else None
    text = f"measured {rate:.0f} GB/s copy (read+write, 2 x {buf / MIB:.0f} MiB, median of {n}){_pct(rate, b.spec)}"
    if floor is not None and rate < floor:
        out.warn(
            f"{text} < {floor:.0f} GB/s ({fraction:g} x the {gbps(healthy)} GB/s healthy figure)",
            "re-run on an idle box (G6); a low copy bandwidth on an idle box points at a degraded "
            "power state (G4's clocks) or memory configuration",
            f"copy {rate:.0f} GB/s < {floor:.0f} GB/s healthy floor",
            "re-run idle; check G4 clocks and power state",
        )
    else:
        out.parts.append(text + (f"; {b.text()}" if no_plan else ""))
        out.info.append(f"copy {rate:.0f} GB/s (healthy >= {gbps(floor)} GB/s)")
    out.details.append(f"copy samples (GB/s): {m.get('samples_gbps')}; {m.get('iters')} copies per sample")


def _probe_missing_stage(facts: Facts, out: _Out) -> None:
    why = facts.refusal or facts.probe_problem or "not run"
    verb = "refused" if facts.refusal else "gave no number"
    out.details.append(f"copy probe {verb}: {why}")
    if out.parts:
        out.parts.append(f"copy probe {verb}: {why}")


def _nothing_to_judge(facts: Facts, b: Budget, workload: float | None, out: _Out) -> Result:
    """No plan and no number: INFO with the budget; SKIP only when the probe
    was asked for and could not run (that is "could not check")."""
    budget_short = (
        f"budget {b.decode_text()} GB/s decode, {b.hardware_text()} GB/s hardware"
        if b.high
        else "no bandwidth budget known"
    )
    if facts.intrusive:
        why = facts.refusal or facts.probe_problem or "not run"
        verb = "refused" if facts.refusal else "gave no number"
        summary = f"copy probe {verb}: {why}; no planned bandwidth declared; {b.text()}"
        return Result(
            "G5",
            Status.SKIP,
            summary,
            readings=out.readings,
            details=out.details,
            headline=f"copy probe {verb}: {why}",
        )
    floor = f": {step_floor(b.high, workload)}" if workload and b.high else ""
    summary = (
        f"{b.text()}{floor}; no planned bandwidth to judge (--spark-planned-bandwidth) and no "
        "measurement (--spark-intrusive)"
    )
    return Result(
        "G5", Status.INFO, summary, readings=out.readings, details=out.details, headline=budget_short
    )


def _floor_value(gbps: float, workload_gib: float | None) -> str:
    if workload_gib:
        return f"{workload_gib * GIB / (gbps * 1e9):.3g} s"
    return f"{1000.0 / gbps:.2f} ms"
