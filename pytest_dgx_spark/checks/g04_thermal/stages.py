"""G4's decisions on the sample series: per GPU (lost, errors only, throttle reasons, heat, flat power),
on the clock-event counters around the sample, and (issue 22, N5) a stuck low-power state under load."""

from __future__ import annotations

from pytest_dgx_spark import thermal
from pytest_dgx_spark.checks.g04_thermal.facts import Device, Facts
from pytest_dgx_spark.checks.g04_thermal.figures import fmt, rnd, span, watts
from pytest_dgx_spark.checks.g04_thermal.findings import (
    BRAKE_FIX,
    BRAKE_SHORT,
    COOL_FIX,
    COOL_SHORT,
    DRIVER_FIX,
    DRIVER_SHORT,
    FLAT_FIX,
    FLAT_SHORT,
    HW_SLOWDOWN_FIX,
)
from pytest_dgx_spark.checks.kit import Findings, Params
from pytest_dgx_spark.model import Reading
from pytest_dgx_spark.thermal import GpuSeries


def gpu_stage(s: GpuSeries, dev: Device, many: bool, params: Params, out: Findings,
              ceilings: list[float]) -> list[Reading]:
    """One GPU: lost or errors only (FAIL), reasons, heat, flat power (WARN); readings if several GPUs."""
    label = f"GPU {s.index}" + (f" ({dev.name})" if dev.name else "")
    if s.lost:
        out.fail(f"{label} was lost mid-sample (GpuIsLost at t={s.lost_at:.1f} s, after {s.samples} "
                 "readings)", DRIVER_FIX, f"GPU {s.index} lost mid-sample (t={s.lost_at:.1f} s)",
                 DRIVER_SHORT, code="G4.gpu-lost")
        return []
    real = {k: v for k, v in sorted(s.errors.items()) if v != "NotSupported"}
    if s.temperature.n == 0 and s.power_w.n == 0 and real:
        errs = ", ".join(f"{k}: {v}" for k, v in real.items())
        out.fail(f"{label} answered errors only ({errs})", DRIVER_FIX, f"GPU {s.index} answered errors only",
                 DRIVER_SHORT, code="G4.gpu-errors")
        return []
    out.note(*(f"{label}: {key} answered {name}" for key, name in real.items()))
    _reasons_stage(s, label, out)
    _heat_stage(s, label, params, out)
    limit_w = watts(dev.power_limit_mw)
    ceiling = _flat_ceiling(limit_w, params)
    if ceiling:
        ceilings.append(ceiling)
    _flat_stage(s, label, limit_w, ceiling, params, out)
    if s.busy is False and s.temperature.n > 1:
        out.note(f"{label}: idle in most samples; the flat-power rule needs load")
    return _per_gpu_readings(s) if many else []


def _flat_ceiling(limit_w: float | None, params: Params) -> float | None:
    """'Well under the limit': g4_flat_power_w (GB10: the seed's 100 W; its limit reads N/A), else a share."""
    flat_w = params.threshold("g4_flat_power_w")
    share = limit_w * params.threshold("g4_flat_power_fraction") if limit_w else None
    return flat_w if flat_w > 0 else share


def _per_gpu_readings(s: GpuSeries) -> list[Reading]:
    i = s.index
    return [Reading(f"gpu{i}_temperature_max", rnd(s.temperature.max), "C"),
            Reading(f"gpu{i}_power_max", rnd(s.power_w.max), "W"),
            Reading(f"gpu{i}_sm_clock_min", rnd(s.clock_sm.min, 0), "MHz"),
            Reading(f"gpu{i}_reasons", ",".join(s.reasons) or "none")]


def _reasons_stage(s: GpuSeries, label: str, out: Findings) -> None:
    throttle = s.warn_reasons
    if not throttle:
        return
    names = ", ".join(f"{n} in {c}/{s.reason_samples} samples" for n, c in throttle.items())
    first = next(iter(throttle))
    fixes: list[tuple[str, str]] = []
    if {"SwThermalSlowdown", "HwThermalSlowdown"} & set(throttle):
        fixes.append((COOL_FIX, COOL_SHORT))
    if "HwPowerBrakeSlowdown" in throttle:
        fixes.append((BRAKE_FIX, BRAKE_SHORT))
    if set(throttle) == {"HwSlowdown"}:
        fixes.append(HW_SLOWDOWN_FIX)
    tmax = fmt(s.temperature.max, "C")
    out.warn(f"{label}: {names} (max {tmax})", "; ".join(f for f, _ in fixes),
             f"{first} in {throttle[first]}/{s.reason_samples} samples, max {tmax}",
             fixes[0][1] if fixes else "", code="G4.throttle-reasons")


def _heat_stage(s: GpuSeries, label: str, params: Params, out: Findings) -> None:
    """At the throttle trip (GB10: 86-87 C, thermal_2.txt), or almost no T.Limit margin left."""
    hot, margin = params.threshold("g4_hot_c"), params.threshold("g4_tlimit_margin_c")
    tmax, tlim = s.temperature.max, s.tlimit.min
    if hot > 0 and tmax is not None and tmax >= hot:
        # g4_hot_c is a margin below the trip (GB10's default 85 C), not the trip
        gb10 = " (GB10's throttle trip is 86-87 C)" if params.gb10 else ""
        trip = "; GB10 trips at 86-87 C" if params.gb10 else ""
        text = f"{label} reached {fmt(tmax, 'C')}, at or above g4_hot_c = {hot:g} C{gb10}"
        out.warn(text, COOL_FIX, f"GPU {s.index} at {fmt(tmax, 'C')} (warns from {hot:g} C{trip})", COOL_SHORT,
                 code="G4.temperature-high")
    elif margin > 0 and tlim is not None and tlim <= margin:
        out.warn(f"{label}: T.Limit margin {fmt(tlim, 'C')} (<= g4_tlimit_margin_c = {margin:g} C) at "
                 f"{fmt(tmax, 'C')}: about to slow down for heat", COOL_FIX,
                 f"GPU {s.index} {fmt(tlim, 'C')} from its slowdown limit", COOL_SHORT,
                 code="G4.tlimit-margin")


def _flat_stage(s: GpuSeries, label: str, limit_w: float | None, ceiling: float | None, params: Params,
                out: Findings) -> None:
    """The seed's pattern: power flat well under the limit while the chip heats."""
    idle_w = params.threshold("g4_idle_power_w")
    flat = thermal.flat_power_climb(s, ceiling_w=ceiling, rise_c=params.threshold("g4_temp_rise_c"),
                                    band_fraction=params.threshold("g4_flat_power_band_fraction"))
    if flat is not None and idle_w > 0 and flat.power_max <= idle_w:
        out.note(f"{label}: the temperature rose {flat.rise:.1f} C with the power at idle (<= "
                 f"g4_idle_power_w = {idle_w:g} W): the box warmed, not this GPU's load (the flat-power rule "
                 "needs load)")
    elif flat is not None:
        band = span(flat.power_min, flat.power_max, "W")
        out.warn(
            f"{label}: power flat at {band} (under the {fmt(ceiling, 'W')} ceiling; limit {fmt(limit_w, 'W')}) "
            f"while the temperature rose {flat.rise:.1f} C ({fmt(flat.temp_start)}->{fmt(flat.temp_end, 'C')}) "
            f"in {flat.seconds:.1f} s", FLAT_FIX,
            f"power flat at {band} while temperature rose {flat.rise:.1f} C", FLAT_SHORT, code="G4.flat-power",
        )
    elif ceiling is None and s.power_w.n:
        out.note(f"{label}: no enforced power limit and g4_flat_power_w = 0, so the flat-power rule was not applied")


def counters_stage(facts: Facts, params: Params, out: Findings) -> list[Reading]:
    """Each GPU's counters judged and read out; SW power capping is not judged."""
    before = {c.index: c for c in facts.counters_before}
    after = {c.index: c for c in facts.counters_after if c.us}
    if not after:
        errs = sorted({name for c in facts.counters_before for name in c.error_names()})
        if facts.counters_source or errs:
            out.note(f"clock-event counters [N/A] ({', '.join(errs) or 'not read after the sample'})")
        return []
    readings: list[Reading] = []
    for index, a in sorted(after.items()):
        us = a.read()
        delta = thermal.counter_deltas(before[index].us if index in before else None, a.us)
        _counter_findings(f"GPU {index}" if len(after) > 1 else "GPU", us, delta, params, out)
        readings += _counter_readings(f"gpu{index}_" if len(after) > 1 else "", us, delta)
    return readings


def _counter_readings(prefix: str, us: dict[str, int | None], delta: dict[str, int | None]) -> list[Reading]:
    """Each counter since boot and in the sample, in seconds."""
    return [Reading(f"{prefix}{name}_{when}", None if value is None else round(value / 1e6, 3), "s")
            for name, _, _ in thermal.COUNTERS for when, value in (("since_boot", us[name]), ("in_sample", delta[name]))]


def _counter_findings(where: str, us: dict[str, int | None], delta: dict[str, int | None], params: Params,
                      out: Findings) -> None:
    """WARN when thermal or brake slowdown grew in the sample, or since boot beyond the threshold."""
    growth_s, boot_s = params.threshold("g4_slowdown_growth_s"), params.threshold("g4_slowdown_since_boot_s")
    grew = {n: d for n, d in delta.items() if n in thermal.SLOWDOWN_COUNTERS and d and d / 1e6 > growth_s}
    slowdown = {n: v for n in thermal.SLOWDOWN_COUNTERS if (v := us[n])}
    if grew:
        words = ", ".join(f"{thermal.WORDS[n]} +{thermal.seconds_text(d)}" for n, d in grew.items())
        brake = set(grew) == {"hw_power_brake_slowdown"}
        out.warn(f"{where} clocks cut during the sample: {words} (clock-event counters)",
                 BRAKE_FIX if brake else COOL_FIX, f"{words} during the sample",
                 BRAKE_SHORT if brake else COOL_SHORT, code="G4.clocks-cut")
    elif sum(slowdown.values()) / 1e6 > boot_s:
        words = ", ".join(f"{thermal.WORDS[n]} {thermal.seconds_text(v)}" for n, v in slowdown.items())
        out.warn(f"{where} clocks were cut since the driver loaded: {words} (> g4_slowdown_since_boot_s = "
                 f"{boot_s:g} s; none during the sample)", COOL_FIX + "; then re-run the 15-minute check "
                 "(--spark-thermal-seconds 900)", f"{words} since boot (> {boot_s:g} s)",
                 "check cooling; re-run with --spark-thermal-seconds 900", code="G4.clocks-cut-since-boot")
