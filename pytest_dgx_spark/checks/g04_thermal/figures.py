"""How G4 says what it saw: numbers as a person reads them, the INFO line and its headline, the
clock-event counters in words, and the readings every result carries."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from pytest_dgx_spark import thermal
from pytest_dgx_spark.checks.g04_thermal.facts import Device, Facts
from pytest_dgx_spark.model import SHORT_WIDTH, Reading
from pytest_dgx_spark.thermal import CounterSet, GpuSeries


def device_of(static: Mapping[int, Device], index: int) -> Device:
    """GPU ``index``'s static facts; a device that read nothing when the snapshot did not list it."""
    return static[index] if index in static else Device()


def fmt(value: float | None, unit: str = "") -> str:
    if value is None:
        return "[N/A]"
    text = f"{value:.0f}" if abs(value) >= 100 or float(value).is_integer() else f"{value:.1f}"
    return f"{text} {unit}".rstrip() if unit else text


def span(lo: float | None, hi: float | None, unit: str) -> str:
    if lo is None or hi is None:
        return "[N/A]"
    return fmt(lo, unit) if fmt(lo) == fmt(hi) else f"{fmt(lo)}-{fmt(hi, unit)}"


def rnd(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def watts(mw: float | None) -> float | None:
    return None if mw is None else mw / 1000.0


def stat_range(all_s: Sequence[GpuSeries], stat: str) -> tuple[float | None, float | None]:
    lows = [v for s in all_s if (v := getattr(s, stat).min) is not None]
    highs = [v for s in all_s if (v := getattr(s, stat).max) is not None]
    return (min(lows) if lows else None, max(highs) if highs else None)


def _counter_figures(facts: Facts) -> tuple[dict[str, int | None], list[tuple[str, str]], str | None] | None:
    """First GPU: counters, ``[(name, "3.0 h")]`` since boot (thermal summed), slowdown in the sample."""
    a = next((c for c in facts.counters_after if c.us), None)
    if a is None:
        return None
    us = a.read()
    b = next((c for c in facts.counters_before if c.index == a.index), CounterSet())
    thermal_us = [v for n in ("sw_thermal_slowdown", "hw_thermal_slowdown") if (v := us[n]) is not None]
    parts = [("power cap", thermal.seconds_text(us["sw_power_cap"])),
             ("thermal", thermal.seconds_text(sum(thermal_us)) if thermal_us else "[N/A]"),
             ("power brake", thermal.seconds_text(us["hw_power_brake_slowdown"]))]
    grown = [d for n, d in thermal.counter_deltas(b.us, a.us).items()
             if n in thermal.SLOWDOWN_COUNTERS and d is not None]
    return us, parts, thermal.seconds_text(sum(grown)) if grown else None


def counters_text(facts: Facts) -> str:
    """``clock-event counters since boot: power cap 14.0 h, …; slowdown +0 s in the sample``."""
    if (figures := _counter_figures(facts)) is None:
        return ""
    _, parts, during = figures
    grown = f"; slowdown +{during} in the sample" if during is not None else ""
    return "clock-event counters since boot: " + ", ".join(f"{n} {v}" for n, v in parts) + grown


def counters_short(facts: Facts, room: int) -> str:
    """The counters in ``room`` characters where it can: none, else every figure, else those not 0."""
    if (figures := _counter_figures(facts)) is None:
        return ""
    us, parts, during = figures
    if all(us[n] == 0 for n in ("sw_power_cap", *thermal.SLOWDOWN_COUNTERS)):
        return "no clock events since boot"

    def text(shown: Sequence[tuple[str, str]], grown: str | None) -> str:
        named = ", ".join(f"{n.replace('power brake', 'brake')} {v}" for n, v in shown)
        return f"since boot: {named}" + (f" (+{grown} in sample)" if grown is not None else "")

    whole = text(parts, during)
    counted = [(n, v) for n, v in parts if v != "0 s"]
    if len(whole) <= room or not counted:
        return whole
    return text(counted, during if during != "0 s" else None)


def reasons_text(s: GpuSeries) -> str:
    if not s.reason_samples:
        return "clock-event reasons [N/A]"
    if not s.reasons:
        return "no clock-event reason"
    named = {"GpuIdle": "GpuIdle (idle)", "SwPowerCap": "SwPowerCap in {c}/{n} (at its power limit)"}
    return "reasons: " + ", ".join(named.get(k, k + " in {c}/{n}").format(c=c, n=s.reason_samples)
                                   for k, c in s.reasons.items())


def tlimit_margin(facts: Facts, all_s: Sequence[GpuSeries]) -> float | None:
    """The smallest "GPU T.Limit Temp" seen: NVML's margin in the samples, or ``nvidia-smi -q``'s."""
    values = [v for s in all_s if (v := s.tlimit.min) is not None]
    values += [v for t in facts.temps_q for k, v in t.items() if k == "tlimit_c" and v is not None]
    return min(values) if values else None


def overview(series: Mapping[int, GpuSeries], static: Mapping[int, Device], facts: Facts, how: str) -> tuple[str, str]:
    """(the line, its headline): ranges, limit, clock, T.Limit margin, reasons seen, counters."""
    all_s = list(series.values())
    temps, power = span(*stat_range(all_s, "temperature"), "C"), span(*stat_range(all_s, "power_w"), "W")
    clock = span(*stat_range(all_s, "clock_sm"), "MHz")
    limits = {watts(device_of(static, i).power_limit_mw) for i in series}
    limit = fmt(next(iter(limits)), "W") if len(limits) == 1 else "varies"
    names = sorted({d.name for d in static.values() if d.name})
    if len(all_s) == 1:
        s = all_s[0]
        who = f"GPU {s.index}" + (f" {names[0]}" if names else "")
        mean = f" (mean {fmt(s.temperature.mean)})" if s.temperature.min != s.temperature.max else ""
        reasons = reasons_text(s)
    else:
        who, mean = f"{len(all_s)} GPUs" + (f" ({', '.join(names)})" if names else ""), ""
        seen = sorted({name for s in all_s for name in s.reasons})
        reasons = ("reasons seen: " + ", ".join(seen)) if seen else "no clock-event reason"
    margin = tlimit_margin(facts, all_s)
    margin_text = f", T.Limit margin {fmt(margin, 'C')}" if margin is not None else ""
    counters = counters_text(facts)
    line = f"{who}: {temps}{mean}{margin_text}, {power} (limit {limit}), SM {clock}; {reasons}; " + (
        f"{counters}; " if counters else ""
    ) + f"{how} ({facts.source})"
    short_who = names[0].removeprefix("NVIDIA ") if len(names) == 1 else who
    head = f"{short_who} {temps}{margin_text}, {power}, SM {clock}; "
    return line, head + (counters_short(facts, SHORT_WIDTH - len(f"G4 INFO: {head}")) or reasons)


def readings(facts: Facts, series: Mapping[int, GpuSeries], static: Mapping[int, Device],
             ceilings: list[float]) -> list[Reading]:
    all_s = list(series.values())

    def pick(fn: Callable[[list[float]], float], values: Sequence[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return rnd(fn(known)) if known else None

    def spread(name: str, stat: str, unit: str) -> list[Reading]:  # min, max, mean over every GPU
        (lo, hi), n = stat_range(all_s, stat), sum(getattr(s, stat).n for s in all_s)
        mean = rnd(sum(getattr(s, stat).total for s in all_s) / n) if n else None
        return [Reading(f"{name}_min", rnd(lo), unit), Reading(f"{name}_max", rnd(hi), unit),
                Reading(f"{name}_mean", mean, unit)]

    rises = [w[1] - w[0] for s in all_s if (w := thermal.window_means(s.points, 1))]
    devices = [device_of(static, i) for i in series]
    reasons = sorted({name for s in all_s for name in s.reasons})
    return [
        *spread("temperature", "temperature", "C"), Reading("temperature_rise", pick(max, rises), "C"),
        *spread("power", "power_w", "W"),
        Reading("power_limit", pick(max, [watts(d.power_limit_mw) for d in devices]), "W"),
        Reading("flat_power_ceiling", pick(max, ceilings), "W"),
        *spread("sm_clock", "clock_sm", "MHz"),
        Reading("tlimit_margin_min", rnd(tlimit_margin(facts, all_s)), "C"),
        Reading("sm_clock_rated", pick(max, [d.max_clock_sm_mhz for d in devices]), "MHz"),
        Reading("clock_event_reasons", ",".join(reasons) or "none"),
        Reading("samples", max((s.samples for s in all_s), default=0)),
        Reading("sample_seconds", rnd(facts.duration_s, 2), "s"),
        Reading("gpus", len(all_s)),
        Reading("source", facts.source),
    ]
