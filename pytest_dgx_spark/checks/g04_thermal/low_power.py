"""Issue 22, N5: a stuck low-power state under load — 96 % utilisation at 799 MHz and 19.5 W with no
throttle reason, cured only by pulling AC power. Each GPU is judged on its own loaded samples."""

from __future__ import annotations

from collections.abc import Sequence

from pytest_dgx_spark import thermal
from pytest_dgx_spark.checks.g04_thermal.facts import Facts
from pytest_dgx_spark.checks.g04_thermal.figures import fmt, rnd
from pytest_dgx_spark.checks.g04_thermal.findings import LOW_POWER_FIX, LOW_POWER_SHORT
from pytest_dgx_spark.checks.kit import Findings, Params
from pytest_dgx_spark.model import Reading
from pytest_dgx_spark.thermal import GpuReading

GATES = ("g4_low_power_util_pct", "g4_low_power_clock_mhz", "g4_low_power_w")


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def low_power_stage(facts: Facts, params: Params, out: Findings) -> list[Reading]:
    """N5: under load, SM clock and power both low with no heat or brake reason: a stuck low-power
    state. Each GPU is judged on its own load; readings only for the first GPU (the run's row)."""
    gate, clock_max, watts_max = (params.threshold(n) for n in GATES)
    if clock_max <= 0 or watts_max <= 0:
        return []
    by_gpu: dict[int, list[GpuReading]] = {}
    for sample in facts.samples:
        for gpu in sample.gpus:
            by_gpu.setdefault(gpu.index, []).append(gpu)
    readings: list[Reading] = []
    for index, gpus in sorted(by_gpu.items()):
        label = f"GPU {index}" if len(by_gpu) > 1 else "GPU"
        readings += _low_power_gpu(label, gpus, index == min(by_gpu), (gate, clock_max, watts_max), facts.source, out)
    return readings


def _loaded_medians(loaded: Sequence[GpuReading]) -> tuple[float, float, bool] | None:
    """``(SM clock median MHz, power median W, a throttle reason seen)``; None: clock or power not read."""
    clocks = [float(g.clock_sm_mhz) for g in loaded if g.clock_sm_mhz is not None]
    watts = [float(g.power_usage_mw) / 1000.0 for g in loaded if g.power_usage_mw is not None]
    masks = [m for g in loaded if (m := thermal.parse_mask(g.clock_event_reasons)) is not None]
    if not clocks or not watts:
        return None
    return _median(clocks), _median(watts), any(m & thermal.WARN_MASK for m in masks)


def _low_power_gpu(
    label: str, gpus: Sequence[GpuReading], first: bool, gates: tuple[float, float, float], source: str, out: Findings
) -> list[Reading]:
    gate, clock_max, watts_max = gates
    utils = [float(g.utilization_gpu) for g in gpus if g.utilization_gpu is not None]
    loaded = [g for g in gpus if g.utilization_gpu is not None and g.utilization_gpu >= gate]
    readings: list[Reading] = []
    if first:
        readings += [Reading("utilization_max", max(utils) if utils else None, "%"), Reading("loaded_samples", len(loaded))]
    if not utils:
        out.note(f"{label}: utilisation not read ({source}): a stuck low-power state was not judged")
        return readings
    if not loaded:
        out.note(f"{label}: not under load (utilisation max {max(utils):g} % < g4_low_power_util_pct = {gate:g} %): "
                 "cannot tell a stuck low-power state from an idle GPU")
        return readings
    medians = _loaded_medians(loaded)
    if medians is None:
        out.note(f"{label}: under load but the SM clock or power was not read: a stuck low-power state was not judged")
        return readings
    clock, power, throttled = medians
    seen = (f"{label} under load ({len(loaded)} samples at >= {gate:g} % utilisation): SM clock median "
            f"{fmt(clock, 'MHz')}, power median {fmt(power, 'W')}")
    if first:
        readings += [Reading("loaded_sm_clock_median", rnd(clock, 0), "MHz"), Reading("loaded_power_median", rnd(power), "W")]
    if clock < clock_max and power < watts_max and not throttled:
        out.fail(f"{seen}, both under the low-power gate ({clock_max:g} MHz, {watts_max:g} W) with no "
                 "throttle reason: a stuck low-power state", LOW_POWER_FIX,
                 f"stuck low-power state: {fmt(clock, 'MHz')}, {fmt(power, 'W')} at {max(utils):g} % load",
                 LOW_POWER_SHORT, code="G4.low-power-stuck")
    else:
        out.note(f"{seen}: no stuck low-power state" + (" (a throttle reason explains the clock)" if throttled else ""))
    return readings
