"""The thermal chart: data from recorded series, a valid picture, the throttle span shown.

Series: ``nvml_sample_load.json`` (an H200 under a bf16 matmul loop, 101
samples with SwPowerCap active throughout) and a GB10-shaped series (power
~100 W, the temperature rising to 87 C, SwThermalSlowdown for ten samples).
The clock-event counters are read before and after a series (G4's
``counters_before``/``counters_after``, the sampler's too): their growth is a
hatched band over the sampled window with its seconds written on it, and the
since-boot totals are a note under the chart.
"""

from __future__ import annotations

import base64
import io
import json
import re
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from pytest_dgx_spark import chart

from conftest import H200
from doubles import gb10

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


#: the SwPowerCap band's colour on white: #f2d64b at alpha 0.28
POWER_CAP_ON_WHITE = (251, 243, 205)


def band_pixels(png: bytes, rgb: tuple[int, int, int]) -> float:
    """The share of the picture's pixels within 3 of ``rgb`` (decoded, not sniffed)."""
    from matplotlib.image import imread

    pixels = imread(io.BytesIO(png), format="png")
    assert pixels.ndim == 3 and pixels.shape[2] in (3, 4)
    want = [c / 255 for c in rgb]
    close = (abs(pixels[:, :, 0] - want[0]) <= 3 / 255) & (abs(pixels[:, :, 1] - want[1]) <= 3 / 255) & (
        abs(pixels[:, :, 2] - want[2]) <= 3 / 255
    )
    return float(close.mean())


def svg_ids_and_texts(svg: bytes) -> tuple[set[str], list[str]]:
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG_NS}svg"
    ids = {el.get("id", "") for el in root.iter() if el.get("id")}
    texts = ["".join(el.itertext()) for el in root.iter(f"{SVG_NS}text")]
    return ids, texts


def test_h200_png_and_svg_show_the_power_cap_span() -> None:
    """The recorded H200 load run: SwPowerCap set in all 101 samples is a band
    across all three rows; the idle run (no reason) draws none."""
    pytest.importorskip("matplotlib")
    doc = h200_load()
    data = chart.from_samples(doc["sample"]["samples"], title="H200")
    assert data is not None
    png = chart.render(data, "png")
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) < 300_000
    assert band_pixels(png, POWER_CAP_ON_WHITE) > 0.3  # three plot areas of pale yellow
    idle_samples = json.loads((H200 / "nvml_sample_idle.json").read_text())["sample"]["samples"]
    idle = chart.from_samples(idle_samples, title="H200 idle")
    assert idle is not None and idle.spans == []
    assert band_pixels(chart.render(idle, "png"), POWER_CAP_ON_WHITE) < 0.001
    ids, texts = svg_ids_and_texts(chart.render(data, "svg"))
    (span,) = data.spans
    assert {span.gid, f"{span.gid}-1", f"{span.gid}-2"} <= ids
    assert "SwPowerCap" in texts  # its legend entry


def test_tolerates_other_key_names_and_missing_keys() -> None:
    samples = [
        {"t": 0.0, "gpus": [{"temp_c": 50, "power_w": 90.0, "sm_clock_mhz": 2400}]},
        {"t": 1.0, "gpus": [{"temp_c": 55, "reasons": ["HwPowerBrakeSlowdown"]}]},
        {"t": 2.0, "gpus": [{"power_w": 91.0}]},
        {"t": 3.0, "gpus": [{}]},
    ]
    data = chart.from_samples(samples, title="odd", counters_before=[{"index": 0, "us": "garbage"}],
                              counters_after=[{"index": 0}, "not a mapping"])  # type: ignore[list-item]
    assert data is not None
    trace = data.traces[0]
    assert trace.temp_c == [50, 55, None, None] and trace.power_w == [90.0, None, 91.0, None]
    assert [(s.kind, s.reason, s.start, s.end) for s in data.spans] == [("reason", "HwPowerBrakeSlowdown", 1.0, 2.0)]
    assert data.notes == ["HwPowerBrakeSlowdown: 1 samples"]  # unreadable counters: no note, no crash


# ---------------------------------------------------------------------- clock-event counters


def h200_counters() -> dict[str, int]:
    """tests/data/h200-cu130/nvml_clock_event_counters.txt: the five NVML field
    values of that H200 (all 0 us)."""
    ids = {74: "sw_power_cap", 76: "sync_boost", 269: "sw_thermal_slowdown", 270: "hw_thermal_slowdown",
           271: "hw_power_brake_slowdown"}
    text = (H200 / "nvml_clock_event_counters.txt").read_text()
    found = re.findall(r"^field (\d+) nvmlReturn 0 valueType 3 ullVal (\d+)", text, re.M)
    assert len(found) == 5
    return {ids[int(f)]: int(v) for f, v in found}


def h200_g4_facts() -> dict[str, Any]:
    """G4's facts (its own dataclass, through its JSON round trip) of the
    recorded H200 load series, the counters as that H200 read them before,
    and after: 10.3 s more power capping and 3 s of SW thermal slowdown."""
    from pytest_dgx_spark.checks.g04_thermal import check as g4

    doc = h200_load()
    before = h200_counters()
    after = {**before, "sw_power_cap": before["sw_power_cap"] + 10_257_500,
             "sw_thermal_slowdown": before["sw_thermal_slowdown"] + 3_000_000}
    dev = doc["nvml"]["devices"][0]
    facts = g4.Facts.from_dict({
        "seconds": 10.0, "duration_s": doc["sample"]["duration_s"], "samples": doc["sample"]["samples"],
        "devices": [{"index": 0, "name": dev["name"], "power_limit_mw": dev["power_limit_mw"],
                     "max_clock_sm_mhz": dev["max_clock_sm_mhz"], "errors": {}}],
        "counters_before": [{"index": 0, "us": before, "errors": {}}],
        "counters_after": [{"index": 0, "us": after, "errors": {}}], "counters_source": "nvml",
    })
    return json.loads(json.dumps(facts.to_dict()))


def test_h200_g4_facts_counter_growth_is_a_band_and_a_note() -> None:
    facts = h200_g4_facts()
    data = chart.from_facts(facts)
    assert data is not None
    counter = [s for s in data.spans if s.kind == "counter"]
    assert [(s.reason, s.start, s.samples, s.label) for s in counter] == [
        ("sw_thermal_slowdown", 0.0, 101, "SW thermal +3 s during the sample")
    ]
    assert counter[0].end > facts["samples"][-1]["t"]  # over the whole sampled window
    assert counter[0].seconds == 3.0
    assert [s.reason for s in data.spans if s.kind == "reason"] == ["SwPowerCap"]
    assert (
        "GPU 0 clock-event counters since boot: power cap 10 s, SW thermal 3 s, HW thermal 0 s, "
        "power brake 0 s; during the sample: power cap +10 s, SW thermal +3 s"
    ) in data.notes


def test_h200_g4_counter_band_and_its_seconds_are_drawn() -> None:
    pytest.importorskip("matplotlib")
    data = chart.from_facts(h200_g4_facts())
    assert data is not None
    (span,) = [s for s in data.spans if s.kind == "counter"]
    ids, texts = svg_ids_and_texts(chart.render(data, "svg"))
    assert {span.gid, f"{span.gid}-1", f"{span.gid}-2", f"{span.gid}-label"} <= ids
    assert "SW thermal +3 s during the sample" in texts  # written on the band
    assert any(t.startswith("GPU 0 clock-event counters since boot: power cap 10 s") for t in texts)


def test_unchanged_counters_draw_no_band_but_keep_the_since_boot_note() -> None:
    facts = h200_g4_facts()
    facts["counters_after"] = facts["counters_before"]
    data = chart.from_facts(facts)
    assert data is not None
    assert [s.kind for s in data.spans] == ["reason"]
    assert data.notes[-1] == (
        "GPU 0 clock-event counters since boot: power cap 0 s, SW thermal 0 s, HW thermal 0 s, power brake 0 s"
    )


def test_gb10_g4_gather_counters_become_a_band(doubles: Any) -> None:
    """G4 itself, on the GB10 double: counters of a real Spark
    (nvidia-smi_clocks_power_1.txt: 3.0 h power capping, 1.2 s HW thermal)
    read before the 0.3 s sample and, 0.25 s of SW thermal slowdown later, after it."""
    from pytest_dgx_spark.engine import Engine
    from pytest_dgx_spark.probes.machine import Machine
    from pytest_dgx_spark.settings import Settings

    base = gb10.NVML["devices"][0]["counters"]
    counters = {k: [v, v + (250_000 if k == "sw_thermal_slowdown" else 0)] for k, v in base.items()}
    samples = [{"temperature_c": 80 + i, "power_usage_mw": 100000, "clock_sm_mhz": 2405,
                "clock_event_reasons": 0} for i in range(10)]
    env = doubles.nvml(gb10.nvml(device={"samples": samples, "counters": counters})).env
    engine = Engine(Settings(thermal_seconds=0.3, timeout=5.0), Machine(env=env, timeout=5.0))
    result = engine.run("G4")
    assert "SW thermal +0.25 s" in result.summary, result.line()  # G4 saw it too
    facts = engine.facts("G4")["facts"]
    data = chart.from_facts(facts)
    assert data is not None and data.traces[0].label == "GPU 0 NVIDIA GB10"
    (span,) = data.spans
    assert (span.kind, span.reason, span.label) == ("counter", "sw_thermal_slowdown",
                                                    "SW thermal +0.25 s during the sample")
    assert span.start == data.traces[0].t[0] and span.end > data.traces[0].t[-1]
    assert data.notes == [
        "GPU 0 clock-event counters since boot: power cap 3.0 h, SW thermal 0.25 s, HW thermal 1.2 s, "
        "power brake 0 s; during the sample: SW thermal +0.25 s"
    ]


SAMPLER_TEST = textwrap.dedent(
    """
    import pytest

    @pytest.mark.parametrize("spark_sampler", [{"interval": 0.02}], indirect=True)
    def test_train(spark_sampler):
        import time
        deadline = time.monotonic() + 5
        while spark_sampler.summary()["samples"] < 6 and time.monotonic() < deadline:
            time.sleep(0.02)
    """
)


def test_sampler_chart_marks_the_counters_it_read(pytester: pytest.Pytester, doubles: Any,
                                                  monkeypatch: pytest.MonkeyPatch, matplotlib_loaded: None) -> None:
    """A ``spark_sampler`` test on a GB10-shaped GPU whose HW thermal counter
    grew 0.1 s while the instantaneous reasons read 0: the chart in the
    pytest-html report and the one attached in Allure have the band and its seconds."""
    pytest.importorskip("pytest_html")
    pytest.importorskip("allure_pytest")
    samples = [{"temperature_c": 70 + i, "power_usage_mw": 95000, "clock_event_reasons": 0} for i in range(40)]
    counters = {"sw_power_cap": [10800240649, 10800340649], "hw_thermal_slowdown": [1195386, 1295386]}
    doubles.nvml(gb10.nvml(device={"samples": samples, "counters": counters})).apply(monkeypatch)
    pytester.makepyfile(SAMPLER_TEST)
    result = pytester.runpytest_subprocess("-p", "no:randomly", "--html=report.html", "--self-contained-html",
                                           "--alluredir=allure")
    result.assert_outcomes(passed=1)
    (doc,) = [json.loads(p.read_text()) for p in (pytester.path / "allure").glob("*-result.json")]
    (attached,) = [a for a in doc["attachments"] if a["name"] == "spark_sampler thermals"]
    for svg in (sampler_svg(pytester.path / "report.html"), (pytester.path / "allure" / attached["source"]).read_bytes()):
        ids, texts = svg_ids_and_texts(svg)
        assert any(i.startswith("spark-counter-hw_thermal_slowdown-gpu0-") for i in ids), sorted(ids)
        assert "HW thermal +0.1 s during the sample" in texts
        assert any(t.startswith("GPU 0 clock-event counters since boot: power cap 3.0 h") for t in texts)


def sampler_svg(report: Path) -> bytes:
    """The ``spark_sampler thermals`` image of pytest-html's data blob, decoded."""
    import html

    blob = re.search(r'data-jsonblob="([^"]*)"', report.read_text(encoding="utf-8"))
    assert blob
    tests = json.loads(html.unescape(blob.group(1)))["tests"]
    images = [e for rows in tests.values() for row in rows for e in row.get("extras", [])
              if e.get("name") == "spark_sampler thermals"]
    assert len(images) == 1
    return base64.b64decode(images[0]["content"].split(",", 1)[1])


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


def test_four_gpus_label_each_band_and_cap_the_drawn_notes() -> None:
    """Four GPUs whose SW thermal counters all grew: each band's text names its
    GPU, the data keeps every note, the picture draws at most six lines."""
    samples = [{"t": float(i), "gpus": [{"index": g, "temperature_c": 70 + i, "power_w": 100.0}
                                        for g in range(4)]} for i in range(5)]
    before = [{"index": g, "us": {"sw_power_cap": 0, "sw_thermal_slowdown": 0}} for g in range(4)]
    after = [{"index": g, "us": {"sw_power_cap": 0, "sw_thermal_slowdown": 1_500_000 * (g + 1)}} for g in range(4)]
    data = chart.from_samples(samples, title="4 GPUs", counters_before=before, counters_after=after)
    assert data is not None
    assert [(s.gpu, s.label) for s in data.spans] == [
        (g, f"SW thermal +{t} during the sample") for g, t in enumerate(("1.5 s", "3 s", "4.5 s", "6 s"))
    ]
    assert len(data.notes) == 4
    lines = chart.note_lines(data.notes)
    assert len(lines) == chart.MAX_NOTE_LINES and lines[-1] == "and 3 more"
    assert lines[:2] == ["GPU 0 clock-event counters since boot: power cap 0 s, SW thermal 1.5 s;",
                         "\u00a0" * 4 + "during the sample: SW thermal +1.5 s"]
    pytest.importorskip("matplotlib")
    _, texts = svg_ids_and_texts(chart.render(data, "svg"))
    assert "GPU 3: SW thermal +6 s during the sample" in texts
    assert "and 3 more" in texts


def test_growth_longer_than_the_sample_is_not_drawn_as_in_the_sample() -> None:
    """A real H200 G4 run (driver 580, 10 s under a bf16 matmul loop, SwPowerCap
    in 86 of 100 samples) stored sw_power_cap 0 before and 8,648,604,000 after:
    NVML's field values count nanoseconds, and read as microseconds that is
    2.4 h "in" a 10 s sample. The chart does not draw or state a growth the
    sample cannot hold; it says why instead."""
    facts = h200_g4_facts()
    facts["counters_before"][0]["us"] = {**facts["counters_before"][0]["us"], "sw_power_cap": 0}
    facts["counters_after"][0]["us"] = {**facts["counters_after"][0]["us"], "sw_power_cap": 8_648_604_000,
                                        "sw_thermal_slowdown": 5_000_000_000}
    data = chart.from_facts(facts)
    assert data is not None
    assert [s.kind for s in data.spans] == ["reason"]  # no SW thermal band for +1.4 h in 10 s
    assert data.notes[-1] == (
        "GPU 0 clock-event counters since boot: power cap 2.4 h, SW thermal 1.4 h, HW thermal 0 s, "
        "power brake 0 s; not drawn: power cap +2.4 h, SW thermal +1.4 h, more than the 10.1 s sampled "
        "(a counter reset, or not microseconds?)"
    )
