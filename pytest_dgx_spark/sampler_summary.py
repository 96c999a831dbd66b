"""What a ``spark_sampler`` run recorded, said: the summary's line, per-GPU lines and flat-power notes,
the series as CSV, the JUnit properties. Pure: the summary and series in, text out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pytest_dgx_spark import thermal
from pytest_dgx_spark.thresholds import defaults


def gpu_summaries(data: Mapping[str, Any], series: Mapping[int, Any], thinned: Mapping[int, Any],
                  flat_power_w: float | None) -> tuple[list[dict[str, Any]], dict[str, int], list[str]]:
    """Per GPU summaries, throttle reasons, and flat-power notes (a cap the reasons do not name)."""
    static = {int(d.get("index", 0)): d for d in data.get("sample_devices") or []}
    gpus, flat_notes = [], []
    throttle: dict[str, int] = {}
    for index, s in sorted(series.items()):
        dev = static.get(index, {})
        limit = dev.get("power_limit_mw")
        entry = {**s.to_dict(), "name": dev.get("name"),
                 "power_limit_w": limit / 1000.0 if isinstance(limit, (int, float)) else None}
        for name, count in s.warn_reasons.items():
            throttle[name] = throttle.get(name, 0) + count
        t = defaults("gb10" if "GB10" in str(dev.get("name") or "").upper() else "generic")
        ceiling = flat_power_w or t["g4_flat_power_w"] or None
        if ceiling is None and entry["power_limit_w"]:
            ceiling = entry["power_limit_w"] * t["g4_flat_power_fraction"]
        flat = thermal.flat_power_climb(
            thinned.get(index, s), ceiling_w=ceiling, rise_c=t["g4_temp_rise_c"],
            band_fraction=t["g4_flat_power_band_fraction"], idle_w=t["g4_idle_power_w"])
        if flat is not None:
            flat_notes.append(f"GPU {index}: power flat at {flat.power_min:.0f}-{flat.power_max:.0f} W "
                              f"(<= {flat.ceiling_w:g} W) while the temperature rose {flat.rise:.1f} C")
        gpus.append(entry)
    return gpus, throttle, flat_notes


def _event_line(e: Mapping[str, Any]) -> str:
    cleared = e["state"] == "clear"
    return (f"  event {e['t']:.1f} s: {e['check']} {'OK' if cleared else e['status']} "
            f"[{e['code']}] {'cleared: ' if cleared else ''}{e['text']}")


def _process_line(p: Mapping[str, Any]) -> str:
    used = p.get("max_used_bytes")
    mem = f"{used / (1 << 30):.1f} GiB" if isinstance(used, int) else "memory [N/A]"
    return f"  GPU process pid {p['pid']} ({p.get('type')}, GPU {p.get('gpu')}): {mem}; {p.get('cmd') or '?'}"


def report_lines(s: Mapping[str, Any], points: Iterable[Mapping[str, Any]]) -> list[str]:
    """The summary lines, then the stored series as CSV (for the report)."""
    lines = [summary_line(s), *(f"  {_gpu_line(g)}" for g in s["gpus"])]
    lines += [f"  flat power: {note}" for note in s["flat_power"]]
    lines += [_event_line(e) for e in s.get("events", [])]
    lines += [_process_line(p) for p in s["processes"][:20]]
    if s.get("stopped") and s["stopped"] != "clean":
        lines.append(f"  stop: {s['stopped']}")
    return [*lines, "t_s,gpu,temperature_c,power_w,clock_sm_mhz,clock_event_reasons", *csv_rows(points)]


def csv_rows(points: Iterable[Mapping[str, Any]]) -> list[str]:
    """One CSV row per GPU per stored sample."""
    rows = []
    for point in points:
        for g in point["gpus"]:
            mw, temp, clock = g.get("power_usage_mw"), g.get("temperature_c"), g.get("clock_sm_mhz")
            watts = f"{mw / 1000:.1f}" if isinstance(mw, (int, float)) else ""
            reasons = "GpuIsLost" if g.get("lost") else "|".join(
                thermal.decode_reasons(thermal.parse_mask(g.get("clock_event_reasons"))))
            rows.append(f"{point['t']},{g.get('index')},{'' if temp is None else temp},{watts},"
                        f"{'' if clock is None else clock},{reasons}")
    return rows


def _stat(d: Mapping[str, Any], unit: str) -> str:
    if d.get("min") is None:
        return "[N/A]"
    return f"{d['min']:.0f}-{d.get('max'):.0f} {unit} (mean {d.get('mean'):.0f})"


def _gpu_line(g: Mapping[str, Any]) -> str:
    name = f" {g['name']}" if g.get("name") else ""
    reasons = ", ".join(f"{k} {v}/{g['samples']}" for k, v in g.get("reasons", {}).items()) or "none"
    lost = f"; LOST at t={g['lost_at']} s" if g.get("lost_at") is not None else ""
    return (f"GPU {g['index']}{name}: {_stat(g['temperature_c'], 'C')}, {_stat(g['power_w'], 'W')}, "
            f"SM {_stat(g['clock_sm_mhz'], 'MHz')}; reasons: {reasons}{lost}")


def counter_slowdown(data: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """Per GPU, the slowdown seconds the counters gained from start to stop (``{}``: none, or not read)."""
    read = data.get("counters_before") or []
    before = {c.get("index"): c.get("us") for c in read if isinstance(c, Mapping)}
    out: dict[str, dict[str, float]] = {}
    for c in (c for c in data.get("counters_after") or [] if isinstance(c, Mapping)):
        delta = thermal.counter_deltas(before.get(c.get("index")), c.get("us"))
        if grew := {n: round(d / 1e6, 3) for n, d in delta.items() if n in thermal.SLOWDOWN_COUNTERS and d}:
            out[str(c.get("index"))] = grew
    return out


def summary_line(s: Mapping[str, Any]) -> str:
    """``spark sampler: 120 samples over 119.8 s; throttled: SwThermalSlowdown in 12``."""
    if not s.get("ok"):
        return f"spark sampler: not sampled: {s.get('reason') or 'no sample taken'}"
    verdict = "not throttled"
    if s.get("throttle_reasons"):
        verdict = "THROTTLED: " + ", ".join(f"{k} in {v} samples" for k, v in s["throttle_reasons"].items())
    elif s.get("flat_power"):
        verdict = "THROTTLED (flat power while heating): " + "; ".join(s["flat_power"])
    if s.get("slowdown_counters"):
        grew = "; ".join(f"GPU {i}: " + ", ".join(f"{k} +{v:g} s" for k, v in c.items())
                         for i, c in s["slowdown_counters"].items())
        so_far = "" if verdict == "not throttled" else verdict + "; "
        verdict = f"{so_far}THROTTLED (clock-event counters): {grew}"
    if s.get("lost"):
        verdict = f"GPU LOST: {s['lost']}; " + verdict
    extra = f"; {len(s['processes'])} GPU processes seen" if s.get("processes") else ""
    took = f"{s['samples']} samples over {s['seconds']:.1f} s every {s['interval_s']:g} s"
    return f"spark sampler: {took}; {verdict}{extra}"


def properties(s: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Flat ``spark.sampler.*`` properties for JUnit (xunit1/legacy only)."""
    out = [("spark.sampler.ok", "yes" if s.get("ok") else "no"),
           ("spark.sampler.samples", str(s.get("samples", 0))),
           ("spark.sampler.throttled",
            "unknown" if s.get("throttled") is None else "yes" if s["throttled"] else "no"),
           ("spark.sampler.throttle_reasons", ",".join(s.get("throttle_reasons") or {}) or "none")]
    gpus = s.get("gpus") or []
    for key, field, pick in (("temperature_max", "temperature_c", max), ("power_max", "power_w", max),
                             ("sm_clock_min", "clock_sm_mhz", min)):
        stat = pick.__name__
        if values := [g[field][stat] for g in gpus if g.get(field, {}).get(stat) is not None]:
            out.append((f"spark.sampler.{key}", f"{pick(values):g}"))
    if not s.get("ok"):
        out.append(("spark.sampler.reason", str(s.get("reason"))))
    return out
