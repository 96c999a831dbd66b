"""A small picture of a thermal series: temperature, power and SM clock against time, with
throttle reasons and clock-event counter growth shaded.

:func:`from_samples` turns a series a check attached (:func:`from_attachment`) or a ``spark_sampler``
series (``{"t", "gpus": [...]}``, values under any of several names, any missing) into :class:`ChartData`; :func:`render` draws it
with matplotlib (the ``[chart]`` extra) through ``Figure``, touching no pyplot state or GUI backend.
A slowdown counter that grew between the reads around a series is a hatched band over the whole
window (when in it is not known).
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, field
from itertools import groupby
from pathlib import Path
from typing import Any
from weakref import WeakKeyDictionary

from pytest_dgx_spark import outfile, thermal
from pytest_dgx_spark.datadef import define
from pytest_dgx_spark.model import Attachment
from pytest_dgx_spark.safe_text import shortened

#: said instead of a picture when the extra is not installed
MISSING = "matplotlib is not installed (pip install 'pytest-dgx-spark[chart]')"

#: per-GPU keys, first match wins: (aliases, scale to the plotted unit)
TEMP_KEYS = (("temperature_c", 1.0), ("temp_c", 1.0), ("temperature", 1.0))
POWER_KEYS = (("power_w", 1.0), ("power_usage_mw", 0.001), ("power_mw", 0.001), ("power_usage_w", 1.0))
CLOCK_KEYS = (("clock_sm_mhz", 1.0), ("sm_clock_mhz", 1.0), ("clocks_sm_mhz", 1.0), ("sm_mhz", 1.0))

#: span colours: heat red, power supply orange, power cap pale yellow, counters purple, the rest grey
COLOURS = {"SwThermalSlowdown": "#d62728", "HwThermalSlowdown": "#8c1010", "HwPowerBrakeSlowdown": "#ff7f0e",
           "HwSlowdown": "#e377c2", "SwPowerCap": "#f2d64b", "counter": "#9467bd"}
DEFAULT_COLOUR = "#7f7f7f"
#: the most note lines drawn under the chart (the data keeps them all), and each one's height
MAX_NOTE_LINES = 6
NOTE_HEIGHT_IN = 0.16
INDENT = "\u00a0" * 4
#: the legend entry of the counter bands (each band's own text names the counter)
COUNTER_LEGEND = "clock-event counter grew"
#: the smallest y range drawn per row, so that noise on a flat line (1 W on
#: 100 W, a 1 C step) does not fill the axis and look like a swing
MIN_SPAN = {"temp_c": 10.0, "power_w": 20.0, "sm_mhz": 200.0}


class ChartUnavailable(RuntimeError):
    """No picture could be drawn; the message is the one line saying why."""


@define
class Trace:
    """One GPU's readings, aligned on ``t`` (``None`` where not read)."""

    gpu: int
    label: str
    t: list[float] = field(default_factory=list)
    temp_c: list[float | None] = field(default_factory=list)
    power_w: list[float | None] = field(default_factory=list)
    sm_mhz: list[float | None] = field(default_factory=list)


@define
class Span:
    """A time range where a reason was active, or (``kind="counter"``) the window in which the
    counter ``reason`` grew by ``seconds``, ``label`` the text drawn on its band."""

    gpu: int
    reason: str
    start: float
    end: float
    kind: str = "reason"  # "reason" | "counter"
    samples: int = 1
    label: str = ""
    seconds: float | None = None

    @property
    def gid(self) -> str:
        """The SVG element id of its shaded band (tests and viewers find it by this)."""
        safe = re.sub(r"[^A-Za-z0-9_-]", "_", self.reason)
        return f"spark-{self.kind}-{safe}-gpu{self.gpu}-{self.start:g}".replace(".", "_")


@define
class ChartData:
    """What the picture shows, as data: the traces, the spans, a title."""

    title: str
    traces: list[Trace] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _number(
    gpu: Mapping[str, Any], keys: Sequence[tuple[str, float]], digits: int | None = 3
) -> float | None:
    """The first key's number, scaled (and rounded); None when no key holds one."""
    for key, scale in keys:
        if (value := thermal.number(gpu.get(key))) is not None:
            return value * scale if digits is None else round(value * scale, digits)
    return None


def reasons_of(gpu: Mapping[str, Any]) -> list[str]:
    """Active clock-event reasons of one GPU entry, by name."""
    if gpu.get("lost"):
        return ["GpuIsLost"]
    raw = gpu.get("clock_event_reasons", gpu.get("reasons"))
    if isinstance(raw, (list, tuple)):
        return [str(r) for r in raw if str(r)]
    return thermal.decode_reasons(thermal.parse_mask(raw))


def counters_by_gpu(entries: Any) -> dict[int, dict[str, int]]:
    """``[{"index", "us": {counter: us}}]`` -> ``{index: {counter: us}}``, malformed entries left out."""
    out: dict[int, dict[str, int]] = {}
    for entry in entries if isinstance(entries, (list, tuple)) else []:
        if isinstance(entry, Mapping) and isinstance(entry.get("us"), Mapping):
            index = entry.get("index", 0)
            us = {str(k): v for k, v in entry["us"].items() if isinstance(v, int) and not isinstance(v, bool)}
            if isinstance(index, int) and us:
                out[index] = us
    return out


def _runs(times: list[float], active: list[bool]) -> list[tuple[float, float, int]]:
    """Contiguous runs of ``True`` as (start, end, samples), each ending at the next sample's time."""
    step = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else 1.0
    out: list[tuple[float, float, int]] = []
    start = 0
    for on, run in groupby(active):
        n = len(list(run))
        if on:
            end = times[start + n] if start + n < len(times) else times[start + n - 1] + step
            out.append((times[start], end, n))
        start += n
    return out


def _per_gpu(samples: Iterable[Mapping[str, Any]]) -> dict[int, list[tuple[float, Mapping[str, Any]]]]:
    """The samples' readings by GPU index, each with its time (its position where it has none)."""
    per_gpu: dict[int, list[tuple[float, Mapping[str, Any]]]] = {}
    for n, sample in enumerate(s for s in samples if isinstance(s, Mapping)):
        t = _number(sample, (("t", 1.0),), None)
        for pos, gpu in enumerate(g for g in sample.get("gpus") or [] if isinstance(g, Mapping)):
            index = gpu.get("index", pos)
            index = int(index) if isinstance(index, int) else pos
            per_gpu.setdefault(index, []).append((float(n) if t is None else t, gpu))
    return per_gpu


def from_samples(samples: Iterable[Mapping[str, Any]], *, title: str, names: Mapping[int, str] | None = None,
                 counters_before: Any = None, counters_after: Any = None) -> ChartData | None:
    """Chart data from samples and the counters read around them; None without two readings."""
    data = ChartData(title=title)
    before, after = counters_by_gpu(counters_before), counters_by_gpu(counters_after)
    counter_notes = []
    for index, points in sorted(_per_gpu(samples).items()):
        name = (names or {}).get(index)
        readings = ([_number(g, keys) for _, g in points] for keys in (TEMP_KEYS, POWER_KEYS, CLOCK_KEYS))
        trace = Trace(index, f"GPU {index}" + (f" {name}" if name else ""), [t for t, _ in points], *readings)
        rows = zip(trace.temp_c, trace.power_w, trace.sm_mhz, strict=True)
        if sum(any(v is not None for v in row) for row in rows) < 2:  # fewer than two samples with a reading
            continue
        data.traces.append(trace)
        active = [set(reasons_of(g)) - {"GpuIdle"} for _, g in points]  # GpuIdle is no slowdown: not shaded
        data.spans += [Span(index, reason, start, end, "reason", n) for reason in sorted(set().union(*active))
                       for start, end, n in _runs(trace.t, [reason in a for a in active])]
        if index in after:
            window = _runs(trace.t, [True] * len(trace.t))[0]
            data.spans += _counter_spans(index, window, before.get(index), after[index])
            counter_notes.append(counters_note(index, before.get(index), after[index], window[1] - window[0]))
    if not data.traces:
        return None
    seen: Counter[str] = Counter()
    for span in (s for s in data.spans if s.kind == "reason"):
        seen[span.reason] += span.samples
    data.notes = [f"{reason}: {count} samples" for reason, count in seen.items()] + counter_notes
    return data


def _counter_spans(
    gpu: int, window: tuple[float, float, int], before: Mapping[str, int] | None, after: Mapping[str, int]
) -> list[Span]:
    """One band over the sampled window per slowdown counter that grew across it."""
    start, end, n = window
    delta = thermal.counter_deltas(before, after)
    return [Span(gpu, name, start, end, "counter", n, f"{thermal.WORDS[name]} +{thermal.seconds_text(grew)} "
                 "during the sample", round(grew / 1e6, 3))
            for name in thermal.SLOWDOWN_COUNTERS if (grew := delta.get(name)) and fits(grew, end - start)]


def fits(grew_us: int, seconds: float) -> bool:
    """Whether a growth fits the sample, with slack: more is a counter reset or another unit."""
    return grew_us / 1e6 <= seconds * 1.25 + 1.0


def counters_note(index: int, before: Mapping[str, int] | None, after: Mapping[str, int], seconds: float) -> str:
    """``GPU 0 clock-event counters since boot: power cap 3.0 h, …; during the sample: SW thermal +3 s``."""
    delta = thermal.counter_deltas(before, after)
    totals = [f"{word} {thermal.seconds_text(after[name])}" for name, _, word in thermal.COUNTERS
              if name in after and (name != "sync_boost" or after[name])]
    grown = [(f"{word} +{thermal.seconds_text(d)}", fits(d, seconds))
             for name, _, word in thermal.COUNTERS if (d := delta.get(name))]
    held, too_long = [t for t, fit in grown if fit], [t for t, fit in grown if not fit]
    note = f"GPU {index} clock-event counters since boot: {', '.join(totals)}"
    if held:
        note += f"; during the sample: {', '.join(held)}"
    if too_long:
        note += (f"; not drawn: {', '.join(too_long)}, more than the {seconds:.1f} s sampled "
                 "(a counter reset, or not microseconds?)")
    return note


def find_samples(obj: Any, depth: int = 0) -> list[dict[str, Any]] | None:
    """The first list of ``{"gpus": [...]}`` samples in a facts mapping (``samples`` first)."""
    if isinstance(obj, list):
        if obj and all(isinstance(x, Mapping) and isinstance(x.get("gpus"), list) for x in obj[:5]):
            return [dict(x) for x in obj]
        return None
    if isinstance(obj, Mapping) and depth < 4:
        for key in sorted(obj, key=lambda k: (k != "samples", str(k))):
            if found := find_samples(obj[key], depth + 1):
                return found
    return None


def from_facts(facts: Mapping[str, Any], *, title: str = "thermal sample") -> ChartData | None:
    """Chart data from a check's stored facts holding a sample series (``None``: no series to draw)."""
    if not (samples := find_samples(facts)):
        return None
    names = {int(dev.get("index", 0)): str(dev["name"]) for dev in facts.get("devices") or []
             if isinstance(dev, Mapping) and dev.get("name") and isinstance(dev.get("index", 0), int)}
    return from_samples(samples, title=title, names=names,
                        counters_before=facts.get("counters_before"), counters_after=facts.get("counters_after"))


def render(data: ChartData, fmt: str = "svg") -> bytes:
    """Draw ``data`` as ``svg`` or ``png`` bytes; :class:`ChartUnavailable` says why not."""
    if fmt not in ("svg", "png"):
        raise ValueError(f"unknown chart format {fmt!r}")
    try:
        import matplotlib  # lazy: the optional [chart] extra, only when a picture is asked for
        from matplotlib.figure import Figure  # lazy: as above
    except ImportError:
        raise ChartUnavailable(MISSING) from None
    except Exception as exc:  # a broken install: say so, never crash the run
        raise ChartUnavailable(f"matplotlib failed to import: {type(exc).__name__}: {exc}") from None
    lines = note_lines(data.notes)
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "pytest-dgx-spark", "font.size": 8}):
        fig = Figure(figsize=(7.2, 4.6 + NOTE_HEIGHT_IN * len(lines)), dpi=100)
        axes = fig.subplots(3, 1, sharex=True)
        _plot(data, axes)
        fig.suptitle(data.title, fontsize=9)
        bottom = (NOTE_HEIGHT_IN * len(lines) + 0.05) / fig.get_figheight() if lines else 0.0
        for n, line in enumerate(lines):
            y = (NOTE_HEIGHT_IN * (len(lines) - n - 0.5)) / fig.get_figheight()
            fig.text(0.01, y, line, fontsize=7, va="center", gid=f"spark-note-{n}")
        fig.tight_layout(rect=(0, bottom, 1, 1))
        buf = io.BytesIO()
        fig.savefig(buf, format=fmt, metadata={"Date": None} if fmt == "svg" else {})
    return buf.getvalue()


def note_lines(notes: Sequence[str]) -> list[str]:
    """Notes broken at ``; ``, indented with no-break spaces (SVG drops leading ones), MAX_NOTE_LINES."""
    lines: list[str] = []
    for note in notes:
        parts = note.split("; ")
        lines.append(parts[0] + (";" if len(parts) > 1 else ""))
        lines.extend(f"{INDENT}{p}" + (";" if i < len(parts) - 2 else "") for i, p in enumerate(parts[1:]))
    return shortened(lines, MAX_NOTE_LINES - 1) if len(lines) > MAX_NOTE_LINES else lines


def _plot(data: ChartData, axes: Sequence[Any]) -> None:
    from matplotlib.colors import to_rgba  # lazy: as in render
    from matplotlib.transforms import blended_transform_factory  # lazy: as in render

    rows = (("temp_c", "temperature (C)"), ("power_w", "power (W)"), ("sm_mhz", "SM clock (MHz)"))
    for ax, (attr, label) in zip(axes, rows, strict=True):
        for trace in data.traces:
            if pts := [(t, v) for t, v in zip(trace.t, getattr(trace, attr), strict=True) if v is not None]:
                ax.plot(*zip(*pts, strict=True), linewidth=1.2, label=trace.label,
                        gid=f"spark-{attr}-gpu{trace.gpu}")
        ax.set_ylabel(label)
        (lo, hi), least = ax.get_ylim(), MIN_SPAN[attr]
        if hi - lo < least:
            ax.set_ylim((lo + hi) / 2 - least / 2, (lo + hi) / 2 + least / 2)
        ax.grid(True, linewidth=0.3, alpha=0.5)
    handles: dict[str, Any] = {}
    for span in data.spans:
        counter = span.kind == "counter"
        colour = COLOURS["counter"] if counter else COLOURS.get(span.reason, DEFAULT_COLOUR)
        for n, ax in enumerate(axes):
            patch = ax.axvspan(span.start, span.end, facecolor=to_rgba(colour, 0.12 if counter else 0.28),
                               edgecolor="none", linewidth=0)
            patch.set_gid(span.gid if n == 0 else f"{span.gid}-{n}")
            if counter:  # its hatch on a patch of its own: SVG fades a hatch by its patch's fill opacity
                patch = ax.axvspan(span.start, span.end, facecolor="none", edgecolor=to_rgba(colour, 0.35),
                                   hatch="//", linewidth=0)
                patch.set_gid(f"{span.gid}-hatch-{n}")
            handles.setdefault(COUNTER_LEGEND if counter else span.reason, patch)
    # each counter band's growth written on it, top right, one line per band
    where = blended_transform_factory(axes[0].transData, axes[0].transAxes)
    box = {"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": "#9467bd", "alpha": 0.85}
    for k, span in enumerate(s for s in data.spans if s.kind == "counter"):
        text = f"GPU {span.gpu}: {span.label}" if len(data.traces) > 1 else span.label
        axes[0].text(span.end, 0.95 - 0.14 * k, text, transform=where, ha="right", va="top", fontsize=7,
                     color="#4b2a7b", gid=f"{span.gid}-label", bbox=box)
    axes[-1].set_xlabel("time (s)")
    lines, labels = axes[0].get_legend_handles_labels()
    lines, labels = lines + list(handles.values()), labels + list(handles)
    if lines:  # above the plot, where it hides no band and no counter text
        axes[0].legend(lines, labels, loc="lower left", bbox_to_anchor=(0.0, 1.02), borderaxespad=0.0,
                       fontsize=7, ncol=min(len(lines), 4), frameon=False)


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
    picture, why = draw(data, "png" if path.suffix.lower() == ".png" else "svg")
    if picture is None:
        return f"thermal chart not drawn: {why}"
    try:
        outfile.write_bytes(path, picture)
    except OSError as exc:
        return f"could not write {path}: {exc.strerror or exc}"
    return f"thermal chart written to {path}"


def beside(report: Path, name: str) -> Path:
    """``env-report.json`` + ``thermal-g4`` -> ``env-report.thermal-g4.svg`` (same folder)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "chart"
    return Path(report).with_name(f"{Path(report).stem}.{safe}.svg")


Drawn = tuple[bytes | None, str | None]
#: pictures drawn, per run (its preflight), by their attachment's content: html and Allure show the same
#: one, Allure from the report's copy of the result
_drawn: WeakKeyDictionary[Any, dict[str, Drawn]] = WeakKeyDictionary()


def from_attachment(found: Attachment) -> ChartData | None:
    """Chart data from a ``chart`` attachment (:mod:`.attachments`); None: nothing to draw."""
    data = found.data if isinstance(found.data, Mapping) else {}
    names = {int(k): str(v) for k, v in (data.get("names") or {}).items() if str(k).isdigit()}
    samples = data.get("samples")
    samples = samples if isinstance(samples, list) else []
    return from_samples(samples, title=str(data.get("title") or found.title), names=names,
                        counters_before=data.get("counters_before"),
                        counters_after=data.get("counters_after"))  # fmt: skip


def drawn(found: Attachment, run: Any) -> Drawn:
    """A ``chart`` attachment as an SVG for the html and Allure reports, drawn once per ``run`` (any
    object that lives as long as the run: the preflight)."""
    key = hashlib.sha256(json.dumps(found.to_dict(), sort_keys=True, default=str).encode()).hexdigest()
    mine = _drawn.setdefault(run, {})
    if key not in mine:
        mine[key] = draw(from_attachment(found), "svg")
    return mine[key]
