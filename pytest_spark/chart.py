"""A small picture of a thermal series: temperature, power and SM clock
against time, with the throttle reasons and the clock-event counters marked.

G4's sample and every ``spark_sampler`` series are lists of
``{"t": seconds, "gpus": [{...}]}``; people read a trend and a red band
faster than 300 numbers. This module turns such a list into plain data
(:class:`ChartData`: the traces and the shaded spans, which the tests read)
and draws it with matplotlib (an optional extra, ``pytest-dgx-spark[chart]``),
imported only when a picture is asked for, on the Agg/SVG canvases through
``matplotlib.figure.Figure`` so that no pyplot state and no GUI backend of
the user's process is touched.

It is tolerant of the sample layout on purpose (G4's facts change shape
over time): a GPU entry may say ``temperature_c`` or ``temp_c``,
``power_usage_mw`` (milliwatts) or ``power_w``, ``clock_sm_mhz`` or
``sm_clock_mhz``, ``clock_event_reasons`` (an NVML mask, int or hex string)
or ``reasons`` (names or a mask), and may carry a ``counters`` mapping
(clock-event reason counters in microseconds); any of them may be missing.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pytest_spark.thermal import decode_reasons, parse_mask

#: said instead of a picture when the extra is not installed
MISSING = "matplotlib is not installed (pip install 'pytest-dgx-spark[chart]')"

#: per-GPU keys, first match wins: (aliases, scale to the plotted unit)
TEMP_KEYS = (("temperature_c", 1.0), ("temp_c", 1.0), ("temperature", 1.0))
POWER_KEYS = (("power_w", 1.0), ("power_usage_mw", 0.001), ("power_mw", 0.001), ("power_usage_w", 1.0))
CLOCK_KEYS = (("clock_sm_mhz", 1.0), ("sm_clock_mhz", 1.0), ("clocks_sm_mhz", 1.0), ("sm_mhz", 1.0))
COUNTER_KEYS = ("counters", "clock_event_counters", "event_counters", "reason_counters")

#: reasons that are not a slowdown and are not shaded
QUIET_REASONS = frozenset({"GpuIdle"})
#: span colours: heat red, power supply orange, power cap pale yellow, counters purple
COLOURS = {
    "SwThermalSlowdown": "#d62728",
    "HwThermalSlowdown": "#8c1010",
    "HwPowerBrakeSlowdown": "#ff7f0e",
    "HwSlowdown": "#e377c2",
    "SwPowerCap": "#f2d64b",
    "counter": "#9467bd",
}
DEFAULT_COLOUR = "#7f7f7f"
#: the smallest y range drawn per row, so that noise on a flat line (1 W on
#: 100 W, a 1 C step) does not fill the axis and look like a swing
MIN_SPAN = {"temp_c": 10.0, "power_w": 20.0, "sm_mhz": 200.0}


class ChartUnavailable(RuntimeError):
    """No picture could be drawn; the message is the one line saying why."""


@dataclass
class Trace:
    """One GPU's readings, aligned on ``t`` (``None`` where not read)."""

    gpu: int
    label: str
    t: list[float] = field(default_factory=list)
    temp_c: list[float | None] = field(default_factory=list)
    power_w: list[float | None] = field(default_factory=list)
    sm_mhz: list[float | None] = field(default_factory=list)


@dataclass
class Span:
    """A time range where a reason was active (or a counter grew) on one GPU."""

    gpu: int
    reason: str
    start: float
    end: float
    kind: str = "reason"  # "reason" | "counter"
    samples: int = 1

    @property
    def gid(self) -> str:
        """The SVG element id of its shaded band (tests and viewers find it by this)."""
        safe = re.sub(r"[^A-Za-z0-9_-]", "_", self.reason)
        return f"spark-{self.kind}-{safe}-gpu{self.gpu}-{self.start:g}".replace(".", "_")


@dataclass
class ChartData:
    """What the picture shows, as data: the traces, the spans, a title."""

    title: str
    traces: list[Trace] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------------- data


def _number(gpu: Mapping[str, Any], keys: Sequence[tuple[str, float]]) -> float | None:
    for key, scale in keys:
        value = gpu.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        return round(float(value) * scale, 3)
    return None


def reasons_of(gpu: Mapping[str, Any]) -> list[str]:
    """Active clock-event reasons of one GPU entry, by name."""
    if gpu.get("lost"):
        return ["GpuIsLost"]
    raw = gpu.get("clock_event_reasons", gpu.get("reasons"))
    if isinstance(raw, (list, tuple)):
        return [str(r) for r in raw if str(r)]
    return decode_reasons(parse_mask(raw))


def counters_of(gpu: Mapping[str, Any]) -> dict[str, float]:
    for key in COUNTER_KEYS:
        raw = gpu.get(key)
        if isinstance(raw, Mapping):
            return {
                str(k): float(v)
                for k, v in raw.items()
                if isinstance(v, (int, float)) and not isinstance(v, bool)
            }
    return {}


def _time(sample: Mapping[str, Any], fallback: float) -> float:
    t = sample.get("t")
    return float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else fallback


def _runs(times: list[float], active: list[bool]) -> list[tuple[float, float, int]]:
    """Contiguous runs of ``True`` as (start, end, samples); a run ends at the
    next sample's time (or one typical step after the last sample)."""
    step = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else 1.0
    out: list[tuple[float, float, int]] = []
    start = None
    for i, on in enumerate(active):
        if on and start is None:
            start = i
        if start is not None and (not on or i == len(active) - 1):
            last = i if on else i - 1
            end = times[last + 1] if last + 1 < len(times) else times[last] + step
            out.append((times[start], end, last - start + 1))
            start = None
    return out


def from_samples(
    samples: Iterable[Mapping[str, Any]],
    *,
    title: str,
    names: Mapping[int, str] | None = None,
) -> ChartData | None:
    """Chart data from ``{"t", "gpus"}`` samples; ``None`` when there is
    nothing to draw (fewer than two samples with a reading)."""
    per_gpu: dict[int, list[tuple[float, Mapping[str, Any]]]] = {}
    for n, sample in enumerate(s for s in samples if isinstance(s, Mapping)):
        t = _time(sample, float(n))
        for pos, gpu in enumerate(g for g in sample.get("gpus") or [] if isinstance(g, Mapping)):
            index = gpu.get("index", pos)
            per_gpu.setdefault(int(index) if isinstance(index, int) else pos, []).append((t, gpu))
    data = ChartData(title=title)
    for index, points in sorted(per_gpu.items()):
        name = (names or {}).get(index)
        trace = Trace(index, f"GPU {index}" + (f" {name}" if name else ""))
        for t, gpu in points:
            trace.t.append(t)
            trace.temp_c.append(_number(gpu, TEMP_KEYS))
            trace.power_w.append(_number(gpu, POWER_KEYS))
            trace.sm_mhz.append(_number(gpu, CLOCK_KEYS))
        readable = sum(1 for i in range(len(trace.t)) if trace.temp_c[i] is not None or trace.power_w[i] is not None
                       or trace.sm_mhz[i] is not None)
        if readable < 2:
            continue
        data.traces.append(trace)
        data.spans.extend(_reason_spans(index, points))
        data.spans.extend(_counter_spans(index, points))
    if not data.traces:
        return None
    seen: dict[str, int] = {}
    for span in data.spans:
        seen[span.reason] = seen.get(span.reason, 0) + span.samples
    for reason, count in seen.items():
        data.notes.append(f"{reason}: {count} samples")
    return data


def _reason_spans(index: int, points: list[tuple[float, Mapping[str, Any]]]) -> list[Span]:
    times = [t for t, _ in points]
    active = [set(reasons_of(g)) - QUIET_REASONS for _, g in points]
    spans = []
    for reason in sorted(set().union(*active)):
        for start, end, n in _runs(times, [reason in a for a in active]):
            spans.append(Span(index, reason, start, end, "reason", n))
    return spans


def _counter_spans(index: int, points: list[tuple[float, Mapping[str, Any]]]) -> list[Span]:
    """Where a clock-event counter grew between two samples: a slowdown the
    instantaneous reasons can miss (it happened between two reads)."""
    times = [t for t, _ in points]
    counters = [counters_of(g) for _, g in points]
    spans = []
    for name in sorted({k for c in counters for k in c}):
        grew = [False] + [
            name in counters[i] and name in counters[i - 1] and counters[i][name] > counters[i - 1][name]
            for i in range(1, len(counters))
        ]
        for start, end, n in _runs(times, grew):
            # a growth at sample i happened between samples i-1 and i
            i = times.index(start)
            spans.append(Span(index, f"{name} counter", times[max(i - 1, 0)], end, "counter", n))
    return spans


def find_samples(obj: Any, depth: int = 0) -> list[dict[str, Any]] | None:
    """The first list of ``{"gpus": [...]}`` samples in a facts mapping
    (``samples`` first), whatever the facts' exact layout."""
    if isinstance(obj, list):
        if obj and all(isinstance(x, Mapping) and isinstance(x.get("gpus"), list) for x in obj[:5]):
            return [dict(x) for x in obj]
        return None
    if isinstance(obj, Mapping) and depth < 4:
        keys = sorted(obj, key=lambda k: (k != "samples", str(k)))
        for key in keys:
            found = find_samples(obj[key], depth + 1)
            if found:
                return found
    return None


def device_names(facts: Mapping[str, Any]) -> dict[int, str]:
    """``{index: name}`` from a facts mapping's ``devices`` list, if any."""
    names = {}
    for dev in facts.get("devices") or []:
        if isinstance(dev, Mapping) and dev.get("name") and isinstance(dev.get("index", 0), int):
            names[int(dev.get("index", 0))] = str(dev["name"])
    return names


def from_facts(facts: Mapping[str, Any], *, title: str = "G4 thermal sample") -> ChartData | None:
    """Chart data from G4's stored facts (``None``: no series to draw)."""
    samples = find_samples(facts)
    if not samples:
        return None
    return from_samples(samples, title=title, names=device_names(facts))


# ---------------------------------------------------------------------- drawing


def _matplotlib() -> Any:
    try:
        import matplotlib
        from matplotlib.figure import Figure
    except ImportError:
        raise ChartUnavailable(MISSING) from None
    except Exception as exc:  # a broken install: say so, never crash the run
        raise ChartUnavailable(f"matplotlib failed to import: {type(exc).__name__}: {exc}") from None
    return matplotlib, Figure


def render(data: ChartData, fmt: str = "svg") -> bytes:
    """Draw ``data`` as ``svg`` or ``png`` bytes; :class:`ChartUnavailable` says why not."""
    if fmt not in ("svg", "png"):
        raise ValueError(f"unknown chart format {fmt!r}")
    matplotlib, figure_class = _matplotlib()
    rc = {"svg.fonttype": "none", "svg.hashsalt": "pytest-dgx-spark", "font.size": 8}
    with matplotlib.rc_context(rc):
        fig = figure_class(figsize=(7.2, 4.6), dpi=100)
        axes = fig.subplots(3, 1, sharex=True)
        _plot(data, axes)
        fig.suptitle(data.title, fontsize=9)
        fig.tight_layout()
        buf = io.BytesIO()
        metadata = {"Date": None} if fmt == "svg" else {}
        fig.savefig(buf, format=fmt, metadata=metadata)
    return buf.getvalue()


def _plot(data: ChartData, axes: Sequence[Any]) -> None:
    rows = (("temp_c", "temperature (C)"), ("power_w", "power (W)"), ("sm_mhz", "SM clock (MHz)"))
    for ax, (attr, label) in zip(axes, rows, strict=True):
        for trace in data.traces:
            pts = [(t, v) for t, v in zip(trace.t, getattr(trace, attr), strict=True) if v is not None]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], linewidth=1.2, label=trace.label,
                        gid=f"spark-{attr}-gpu{trace.gpu}")
        ax.set_ylabel(label)
        _min_span(ax, MIN_SPAN[attr])
        ax.grid(True, linewidth=0.3, alpha=0.5)
    handles: dict[str, Any] = {}
    for span in data.spans:
        colour = COLOURS["counter"] if span.kind == "counter" else COLOURS.get(span.reason, DEFAULT_COLOUR)
        for n, ax in enumerate(axes):
            patch = ax.axvspan(
                span.start, span.end, color=colour, alpha=0.28 if span.kind == "reason" else 0.18,
                hatch="//" if span.kind == "counter" else None, linewidth=0,
            )
            patch.set_gid(span.gid if n == 0 else f"{span.gid}-{n}")
            handles.setdefault(span.reason, patch)
    axes[-1].set_xlabel("time (s)")
    lines, labels = axes[0].get_legend_handles_labels()
    lines += list(handles.values())
    labels += list(handles)
    if lines:
        axes[0].legend(lines, labels, loc="upper left", fontsize=7, ncol=min(len(lines), 3), framealpha=0.8)


def _min_span(ax: Any, span: float) -> None:
    lo, hi = ax.get_ylim()
    if hi - lo < span:
        mid = (lo + hi) / 2
        ax.set_ylim(mid - span / 2, mid + span / 2)


def draw(data: ChartData | None, fmt: str = "svg") -> tuple[bytes | None, str | None]:
    """``(picture, None)``, or ``(None, why)``; never raises for a missing extra."""
    if data is None:
        return None, "no series to draw"
    try:
        return render(data, fmt), None
    except ChartUnavailable as exc:
        return None, str(exc)
    except Exception as exc:  # a picture is decoration: it never fails a report or the run
        return None, f"matplotlib failed: {type(exc).__name__}: {exc}"


def write(path: Path, data: ChartData) -> str:
    """Write the chart (format from the suffix) and return the one-line note."""
    from pytest_spark.report import write_bytes

    fmt = "png" if path.suffix.lower() == ".png" else "svg"
    picture, why = draw(data, fmt)
    if picture is None:
        return f"thermal chart not drawn: {why}"
    try:
        write_bytes(path, picture)
    except OSError as exc:
        return f"could not write {path}: {exc.strerror or exc}"
    return f"thermal chart written to {path}"


def beside(report: Path, name: str) -> Path:
    """``env-report.json`` + ``g4`` -> ``env-report.g4.svg`` (same folder)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "chart"
    return Path(report).with_name(f"{Path(report).stem}.{safe}.svg")
