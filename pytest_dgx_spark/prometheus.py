"""The run as a node_exporter textfile-collector file (``--prometheus-textfile``, issue 33 item 2).

A check that silently produces no metric alerts nobody, so every check of the catalog has a status
series, a check that did not run included (``status="not_run"`` with its reason). The file is
written by :mod:`.outfile`: a temporary file beside it renamed over it, so node_exporter never reads
half a file (its temporary name does not end in ``.prom``, so the collector never reads it either).
Written by hand in the text exposition format 0.0.4: the format is a few lines of rules, and
``prometheus_client`` is a test dependency only (its parser reads every file the tests write).

:func:`write_textfile` is the one entry: the preflight (CLI and plugin) calls it at the end of a run,
``spark-preflight watch`` after every sample.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path

from pytest_dgx_spark import __version__, catalog, outfile
from pytest_dgx_spark.model import Reading, Result, Status, Verdict

PREFIX = "spark_preflight"
#: every status a check series can have: the five of a result and ``not_run``
STATUSES = ("pass", "fail", "warn", "skip", "info", "not_run")
VERDICTS = tuple(v.value for v in Verdict)
#: a label value longer than this is cut (a reason is a line, never a page)
MAX_LABEL = 300

#: a reading's unit -> (metric name suffix, factor to the base unit); a unit not here is skipped
UNITS: dict[str, tuple[str, float]] = {
    "B": ("bytes", 1.0), "bytes": ("bytes", 1.0), "kB": ("bytes", 1024.0), "KiB": ("bytes", 1024.0),
    "MiB": ("bytes", 1024.0**2), "GiB": ("bytes", 1024.0**3), "TiB": ("bytes", 1024.0**4),
    "KB": ("bytes", 1e3), "MB": ("bytes", 1e6), "GB": ("bytes", 1e9), "TB": ("bytes", 1e12),
    "B/s": ("bytes_per_second", 1.0), "MB/s": ("bytes_per_second", 1e6), "GB/s": ("bytes_per_second", 1e9),
    "MiB/s": ("bytes_per_second", 1024.0**2), "GiB/s": ("bytes_per_second", 1024.0**3),
    "s": ("seconds", 1.0), "ms": ("seconds", 1e-3), "us": ("seconds", 1e-6), "µs": ("seconds", 1e-6),
    "ns": ("seconds", 1e-9), "min": ("seconds", 60.0),
    "C": ("celsius", 1.0), "°C": ("celsius", 1.0),
    "W": ("watts", 1.0), "mW": ("watts", 1e-3),
    "Hz": ("hertz", 1.0), "kHz": ("hertz", 1e3), "MHz": ("hertz", 1e6), "GHz": ("hertz", 1e9),
    "%": ("ratio", 0.01), "bit": ("bits", 1.0), "": ("", 1.0),
}  # fmt: skip
#: a unit word a reading's name may end in (``headroom_gb``): dropped, the suffix says the base unit
_UNIT_WORDS = {"b", "kb", "kib", "mb", "mib", "gb", "gib", "tb", "tib", "gbps", "s", "ms", "us", "ns", "c",
               "w", "mw", "hz", "khz", "mhz", "ghz", "pct", "percent", "bytes", "seconds", "celsius", "watts",
               "hertz", "bits", "bit"}  # fmt: skip
_NOT_NAME = re.compile(r"[^a-zA-Z0-9_]+")


def escape_label(value: object) -> str:
    """A label value as the text format requires: backslash, double quote and newline escaped."""
    text = str(value)
    if len(text) > MAX_LABEL:
        text = text[: MAX_LABEL - 1] + "…"
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def number(value: float) -> str:
    """A sample value: Go's and Python's parsers read ``NaN``, ``+Inf`` and ``-Inf``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 2**53:
        return str(int(value))
    return format(float(value), ".15g")  # 0.4504, not 0.45039999999999997 (ms times 1e-3)


def metric_name(reading: str, unit: str) -> str | None:
    """``("headroom_gb", "GiB")`` -> ``spark_preflight_headroom_bytes``; ``None`` for a unit with no base."""
    if unit not in UNITS:
        return None
    suffix = UNITS[unit][0]
    words = [w for w in _NOT_NAME.sub("_", reading).lower().split("_") if w]
    while words and (words[-1] in _UNIT_WORDS or words[-1] == suffix):
        words.pop()  # the suffix says the unit; "time_s" and "copy_gbps" keep no stale one
    base = "_".join(words) or "value"
    if base[0].isdigit():
        base = "r_" + base
    name = base + (f"_{suffix}" if suffix else "")
    return f"{PREFIX}_reading_{name}" if name in HELP else f"{PREFIX}_{name}"


def base_value(reading: Reading) -> float | None:
    """The reading in its base unit, ``None`` when it is not a number (text, yes/no, not available)."""
    value = reading.value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or reading.unit not in UNITS:
        return None
    suffix, factor = UNITS[reading.unit]
    base = float(value) * factor
    return float(round(base)) if suffix in ("bytes", "bits") and math.isfinite(base) else base


class _Families:
    """Samples grouped by family, each family's HELP and TYPE once, in the order first seen."""

    def __init__(self) -> None:
        self.help: dict[str, str] = {}
        self.samples: dict[str, list[tuple[dict[str, str], float]]] = {}
        self.seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()

    def add(self, name: str, help_text: str, labels: Mapping[str, object], value: float) -> None:
        key = tuple(sorted((k, str(v)) for k, v in labels.items()))
        if (name, key) in self.seen:  # node_exporter refuses a file with a series twice
            return
        self.seen.add((name, key))
        self.help.setdefault(name, help_text)
        self.samples.setdefault(name, []).append(({k: str(v) for k, v in labels.items()}, value))

    def text(self) -> str:
        out: list[str] = []
        for name, samples in self.samples.items():
            out += [f"# HELP {name} {_escape_help(self.help[name])}", f"# TYPE {name} gauge"]
            for labels, value in samples:
                inner = ",".join(f'{k}="{escape_label(v)}"' for k, v in labels.items())
                out.append(f"{name}{{{inner}}} {number(value)}" if inner else f"{name} {number(value)}")
        return "\n".join(out) + "\n"


#: each family this module writes itself (without the prefix) and its HELP text
HELP = {
    "build_info": "pytest-dgx-spark version, what ran (preflight or watch) and the Python judged; always 1",
    "verdict": "1 for the run's verdict (ready, ready-with-warnings, blocked), 0 for the others",
    "run_timestamp_seconds": "when the run started, seconds since the Unix epoch",
    "run_duration_seconds": "how long the run took, in seconds",
    "check_status": "1 for the check's status, 0 for the others; not_run: the check did not run (deselected, "
    "stopped before it, the run interrupted)",
    "check_reason": "why a check was skipped or did not run (1 per such check)",
    "finding": "1 per finding behind the check's status, with its stable code (G<n>.<slug>)",
}


def render(
    results: Iterable[Result], verdict: Verdict | str, started: float, duration: float, *,
    not_run: Mapping[str, str] | None = None, readings: Iterable[Reading] = (), mode: str = "preflight",
    python: str | None = None, checks: Collection[str] = catalog.IDS,
) -> str:
    """The text of the file: see :func:`write_textfile`."""
    fam = _Families()

    def add(family: str, labels: Mapping[str, object], value: float) -> None:
        fam.add(f"{PREFIX}_{family}", HELP[family], labels, value)

    by_id = {r.check_id: r for r in results}
    add("build_info", {"version": __version__, "mode": mode, **({"python": python} if python else {})}, 1)
    v = Verdict(str(verdict))
    for word in VERDICTS:
        add("verdict", {"verdict": word}, 1 if word == v.value else 0)
    add("run_timestamp_seconds", {}, started)
    add("run_duration_seconds", {}, duration)
    for cid in [*checks, *(c for c in by_id if c not in checks)]:
        spec = catalog.BY_ID.get(cid)
        result = by_id.get(cid)
        status = result.status.value.lower() if result else "not_run"
        for word in STATUSES:
            labels = {"check": cid, "title": spec.title if spec else cid, "status": word}
            add("check_status", labels, 1 if word == status else 0)
        if result is None or result.status is Status.SKIP:
            why = (result.summary if result else (not_run or {}).get(cid)) or "did not run"
            chosen = "true" if result is not None and result.by_choice else "false"
            add("check_reason", {"check": cid, "status": status, "reason": why, "by_choice": chosen}, 1)
        if result is None:
            continue
        for code in dict.fromkeys(result.codes):
            add("finding", {"check": cid, "code": code, "status": status}, 1)
        _readings(fam, result.readings, cid)
    _readings(fam, readings, "watch" if mode == "watch" else "run")
    return fam.text()


def _readings(fam: _Families, readings: Iterable[Reading], check: str) -> None:
    for reading in readings:
        value, name = base_value(reading), metric_name(reading.name, reading.unit)
        if value is None or name is None:
            continue
        unit = f" (from {reading.unit})" if reading.unit else ""
        fam.add(name, f"check reading {reading.name}{unit}, in base units", {"check": check}, value)


def write_textfile(
    path: str | Path, results: Iterable[Result], verdict: Verdict | str, started: float, duration: float, *,
    not_run: Mapping[str, str] | None = None, readings: Iterable[Reading] = (), mode: str = "preflight",
    python: str | None = None, checks: Collection[str] = catalog.IDS,
) -> None:
    """Replace ``path`` (a ``*.prom`` file in node_exporter's ``--collector.textfile.directory``) with
    the run in the textfile-collector format, atomically, through :mod:`.outfile`.

    ``results``: the checks' results; a check of ``checks`` without one is ``status="not_run"`` with
    the reason from ``not_run`` (``{check id: why}``) or "did not run". ``verdict``: ready,
    ready-with-warnings or blocked. ``started``: the run's start, seconds since the epoch;
    ``duration``: seconds. ``readings``: more readings of the run (watch's samples), with their units.
    ``mode``: "preflight" or "watch"; ``python``: the interpreter judged (``--python``).
    Raises :class:`OSError` (:class:`outfile.Refused` for a path it will not write)."""
    text = render(results, verdict, started, duration, not_run=not_run, readings=readings, mode=mode,
                  python=python, checks=checks)  # fmt: skip
    outfile.write_bytes(path, text.encode("utf-8"))


def run_duration(results: Iterable[Result]) -> float:
    """The checks' time when the caller did not time the run (a replay)."""
    return round(sum(r.duration_s for r in results), 4)

