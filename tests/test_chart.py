"""The thermal chart: data from recorded series, a valid picture, the throttle span shown.

Series: ``nvml_sample_load.json`` (an H200 under a bf16 matmul loop, 101
samples with SwPowerCap active throughout) and a GB10-shaped series (power
~100 W, the temperature rising to 87 C, SwThermalSlowdown for ten samples).
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from pytest_spark import chart

from conftest import H200

SVG_NS = "{http://www.w3.org/2000/svg}"


def gb10_series(n: int = 60, hot: tuple[int, int] = (40, 50)) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        mask = 0x20 if hot[0] <= i < hot[1] else 0x1 if i < 5 else 0
        out.append({"t": float(i), "gpus": [{
            "index": 0, "temperature_c": 60 + min(27, i // 2), "power_usage_mw": 100000 + (i % 3) * 500,
            "clock_sm_mhz": 1900 if mask == 0x20 else 2400, "clock_event_reasons": mask,
        }]})
    return out


def h200_load() -> dict[str, Any]:
    return json.loads((H200 / "nvml_sample_load.json").read_text())


def test_h200_load_series_becomes_traces_and_a_power_cap_span() -> None:
    doc = h200_load()
    data = chart.from_samples(doc["sample"]["samples"], title="H200", names={0: "NVIDIA H200"})
    assert data is not None
    (trace,) = data.traces
    assert trace.label == "GPU 0 NVIDIA H200" and len(trace.t) == 101
    assert trace.temp_c[0] == 60 and trace.power_w[0] == pytest.approx(690.702)  # mW -> W
    assert trace.sm_mhz[0] == 1485
    (span,) = data.spans
    assert (span.reason, span.start, span.samples) == ("SwPowerCap", 0.0, 101)
    assert span.end > doc["sample"]["samples"][-1]["t"]  # the last sample's step is covered too


def test_gb10_series_marks_the_thermal_span_and_not_idle() -> None:
    data = chart.from_samples(gb10_series(), title="GB10")
    assert data is not None
    assert [(s.reason, s.start, s.end, s.samples) for s in data.spans] == [("SwThermalSlowdown", 40.0, 50.0, 10)]
    assert max(v for v in data.traces[0].temp_c if v is not None) == 87
    assert data.notes == ["SwThermalSlowdown: 10 samples"]


def test_svg_parses_and_holds_the_throttle_span_element() -> None:
    pytest.importorskip("matplotlib")
    data = chart.from_samples(gb10_series(), title="GB10")
    assert data is not None
    svg = chart.render(data, "svg")
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG_NS}svg"
    ids = {el.get("id") for el in root.iter() if el.get("id")}
    span = data.spans[0]
    assert span.gid in ids  # the shaded band on the temperature axis
    assert {f"{span.gid}-1", f"{span.gid}-2"} <= ids  # and on power and clock
    assert {"spark-temp_c-gpu0", "spark-power_w-gpu0", "spark-sm_mhz-gpu0"} <= ids
    assert b"SwThermalSlowdown" in svg  # the legend names it


def test_png_has_the_png_signature() -> None:
    pytest.importorskip("matplotlib")
    data = chart.from_samples(h200_load()["sample"]["samples"], title="H200")
    assert data is not None
    png = chart.render(data, "png")
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) < 300_000


def test_tolerates_other_key_names_missing_keys_and_counters() -> None:
    samples = [
        {"t": 0.0, "gpus": [{"temp_c": 50, "power_w": 90.0, "sm_clock_mhz": 2400, "counters": {"SwThermal": 0}}]},
        {"t": 1.0, "gpus": [{"temp_c": 55, "reasons": ["HwPowerBrakeSlowdown"], "counters": {"SwThermal": 0}}]},
        {"t": 2.0, "gpus": [{"power_w": 91.0, "counters": {"SwThermal": 250000}}]},
        {"t": 3.0, "gpus": [{}]},
    ]
    data = chart.from_samples(samples, title="odd")
    assert data is not None
    trace = data.traces[0]
    assert trace.temp_c == [50, 55, None, None] and trace.power_w == [90.0, None, 91.0, None]
    kinds = {(s.kind, s.reason, s.start, s.end) for s in data.spans}
    assert ("reason", "HwPowerBrakeSlowdown", 1.0, 2.0) in kinds
    assert ("counter", "SwThermal counter", 1.0, 3.0) in kinds  # grew between t=1 and t=2


def test_nothing_to_draw_is_none() -> None:
    assert chart.from_samples([], title="x") is None
    assert chart.from_samples([{"t": 0, "gpus": [{"temperature_c": 50}]}], title="one snapshot") is None
    assert chart.from_facts({"source": "none", "missing": "no GPU"}) is None


def test_from_facts_finds_the_samples_wherever_they_are() -> None:
    facts = {"devices": [{"index": 0, "name": "NVIDIA GB10"}], "sample": {"series": gb10_series()}}
    data = chart.from_facts(facts)
    assert data is not None and data.traces[0].label == "GPU 0 NVIDIA GB10"


def test_without_matplotlib_no_picture_and_one_line_why(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    data = chart.from_samples(gb10_series(), title="GB10")
    assert chart.draw(data, "svg") == (None, chart.MISSING)
    note = chart.write(tmp_path / "c.svg", data)  # type: ignore[arg-type]
    assert note == "thermal chart not drawn: matplotlib is not installed (pip install 'pytest-dgx-spark[chart]')"
    assert not (tmp_path / "c.svg").exists()
