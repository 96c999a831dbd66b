"""The background sampler (``GpuSampler`` and the ``spark_sampler`` fixture):
it records in a child, summarises, stays bounded, survives a missing or lost
GPU, stops a hung driver's child, and attaches its series to the report."""

from __future__ import annotations

import json
import time
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from pytest_dgx_spark.sampler import GpuSampler, properties, summary_line

from doubles import gb10
from doubles.procs import alive

GIB = 1 << 30


def wait_samples(s: GpuSampler, n: int, limit: float = 5.0) -> None:
    deadline = time.monotonic() + limit
    while s.summary()["samples"] < n and time.monotonic() < deadline:
        time.sleep(0.02)


def hot_gb10(n: int = 40, **device: Any) -> dict[str, Any]:
    samples = [
        {"temperature_c": 70 + i, "power_usage_mw": 95000, "clock_event_reasons": 0x20 if i >= 5 else 0}
        for i in range(n)
    ]
    return gb10.nvml(device={"samples": samples, **device})


def test_records_throttling_with_statistics_and_stops_cleanly(doubles: Any) -> None:
    sampler = GpuSampler(interval=0.02, env=doubles.nvml(hot_gb10()).env, timeout=2)
    with sampler:
        wait_samples(sampler, 12)
        assert sampler.running
    s = sampler.summary()
    assert s["ok"] and s["stopped"] == "clean"
    assert not alive(sampler.pid)  # type: ignore[arg-type]
    gpu = s["gpus"][0]
    assert gpu["name"] == "NVIDIA GB10" and gpu["power_limit_w"] is None
    assert gpu["temperature_c"]["min"] == 70.0
    assert gpu["temperature_c"]["max"] == 70.0 + s["samples"] - 1
    assert s["throttled"] is True
    assert s["throttle_reasons"]["SwThermalSlowdown"] == s["samples"] - 5
    assert summary_line(s).startswith(f"spark sampler: {s['samples']} samples")
    assert "THROTTLED: SwThermalSlowdown" in summary_line(s)


def test_a_cool_idle_gpu_is_not_throttled(doubles: Any) -> None:
    samples = [{"temperature_c": 40, "power_usage_mw": 10000, "clock_event_reasons": 0x1}] * 5
    with GpuSampler(interval=0.02, env=doubles.nvml(gb10.nvml(device={"samples": samples})).env) as sampler:
        wait_samples(sampler, 4)
    s = sampler.summary()
    assert s["ok"] and s["throttled"] is False
    assert s["gpus"][0]["reasons"] == {"GpuIdle": s["samples"]}
    assert "not throttled" in summary_line(s)


def test_an_idle_gb10_warming_with_the_box_is_not_throttled(doubles: Any) -> None:
    """GB10 reads 0x0, never GpuIdle, while idle (tests/data/gb10/nvidia-smi-q_1.txt) and
    idles at 3-16 W (nvidia-smi_6.txt, nvidia-smi_clocks_power_1.txt): a GPU at 11 W whose
    temperature climbs with the CPU's work is not "flat power while heating"."""
    samples = [
        {"temperature_c": 40 + i, "power_usage_mw": 11000, "clock_event_reasons": 0} for i in range(30)
    ]
    with GpuSampler(interval=0.02, env=doubles.nvml(gb10.nvml(device={"samples": samples})).env) as sampler:
        wait_samples(sampler, 12)
    s = sampler.summary()
    assert s["ok"] and s["gpus"][0]["temperature_c"]["max"] - s["gpus"][0]["temperature_c"]["min"] >= 10
    assert s["flat_power"] == [] and s["throttled"] is False
    loaded = [dict(x, power_usage_mw=60000) for x in samples]
    with GpuSampler(interval=0.02, env=doubles.nvml(gb10.nvml(device={"samples": loaded})).env) as sampler:
        wait_samples(sampler, 12)
    assert sampler.summary()["throttled"] is True  # the same climb under load is the seed's pattern


def test_memory_stays_bounded_while_statistics_cover_every_sample(doubles: Any) -> None:
    with GpuSampler(interval=0.005, max_points=16, env=doubles.nvml(hot_gb10(n=400)).env) as sampler:
        wait_samples(sampler, 80)
    s = sampler.summary()
    assert s["samples"] >= 80
    assert s["stored_points"] <= 16 and s["stride"] >= 4
    assert len(sampler.series()) == s["stored_points"]
    assert s["gpus"][0]["temperature_c"]["n"] == s["samples"]


def test_gpu_processes_seen_during_the_test_are_listed(doubles: Any) -> None:
    import os

    env = doubles.nvml(hot_gb10(compute_procs=[{"pid": os.getpid(), "used_bytes": 3 * GIB}])).env
    with GpuSampler(interval=0.02, procs_every=0.0, env=env) as sampler:
        wait_samples(sampler, 3)
    (p,) = sampler.summary()["processes"]
    assert p["pid"] == os.getpid() and p["max_used_bytes"] == 3 * GIB
    assert "pytest" in (p["cmd"] or "") or "python" in (p["cmd"] or "")
    assert f"GPU process pid {os.getpid()}" in sampler.report_text()


def test_no_nvml_is_a_reason_not_an_exception(doubles: Any) -> None:
    with GpuSampler(interval=0.02, env=doubles.nvml({"init_error": "DriverNotLoaded"}).env) as sampler:
        time.sleep(0.3)
    s = sampler.summary()
    assert s["ok"] is False
    assert "DriverNotLoaded" in s["reason"]
    assert summary_line(s).startswith("spark sampler: not sampled: NVML unavailable")
    assert ("spark.sampler.ok", "no") in properties(s)


def test_gpu_lost_mid_series_is_recorded_with_its_time(doubles: Any) -> None:
    env = doubles.nvml(hot_gb10(lost_after=3)).env
    with GpuSampler(interval=0.02, env=env) as sampler:
        wait_samples(sampler, 6)
    s = sampler.summary()
    assert s["lost"] == [0]
    assert s["gpus"][0]["samples"] == 3
    assert s["gpus"][0]["lost_at"] is not None
    assert "GPU LOST" in summary_line(s)
    assert ",0,,,,GpuIsLost" in sampler.report_text()


def test_a_hung_driver_child_is_killed_at_stop(doubles: Any) -> None:
    env = doubles.nvml(gb10.nvml(hang={"where": "nvmlDeviceGetTemperature", "seconds": 60})).env
    sampler = GpuSampler(interval=0.05, timeout=0.5, env=env).start()
    time.sleep(0.3)
    start = time.monotonic()
    s = sampler.stop()
    assert time.monotonic() - start < 0.05 + 0.5 + 2.5
    assert "did not stop" in s["stopped"]
    assert not alive(sampler.pid)  # type: ignore[arg-type]
    assert s["ok"] is False


def test_report_text_has_a_csv_series(doubles: Any) -> None:
    with GpuSampler(interval=0.02, env=doubles.nvml(hot_gb10()).env) as sampler:
        wait_samples(sampler, 6)
    lines = sampler.report_text().splitlines()
    header = lines.index("t_s,gpu,temperature_c,power_w,clock_sm_mhz,clock_event_reasons")
    rows = [row.split(",") for row in lines[header + 1 :]]
    assert len(rows) == sampler.summary()["stored_points"]
    assert rows[0][1:5] == ["0", "70", "95.0", "2522"]


def test_bad_interval_is_refused() -> None:
    with pytest.raises(ValueError, match="interval"):
        GpuSampler(interval=0)


# ---------------------------------------------------------------------- the fixture


FIXTURE_TEST = """
import pytest

@pytest.mark.parametrize("spark_sampler", [{"interval": 0.02}], indirect=True)
def test_train(spark_sampler):
    import time
    deadline = time.monotonic() + 5
    while spark_sampler.summary()["samples"] < 8 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert spark_sampler.running
"""


def test_fixture_attaches_the_series_to_the_report(
    pytester: pytest.Pytester, doubles: Any, monkeypatch: Any
) -> None:
    doubles.nvml(hot_gb10()).apply(monkeypatch)
    pytester.makepyfile(FIXTURE_TEST)
    result = pytester.runpytest_subprocess("-p", "no:randomly", "-rA", "--junitxml=out.xml")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*Captured stdout teardown*",
            "spark sampler: * samples over * s every 0.02 s; THROTTLED: SwThermalSlowdown*",
            "t_s,gpu,temperature_c,power_w,clock_sm_mhz,clock_event_reasons",
        ]
    )
    case = ET.parse(pytester.path / "out.xml").getroot().find(".//testcase")
    assert case is not None and case.find("properties") is None  # xunit2: none on a test case


def test_fixture_adds_properties_under_xunit1(
    pytester: pytest.Pytester, doubles: Any, monkeypatch: Any
) -> None:
    doubles.nvml(hot_gb10()).apply(monkeypatch)
    pytester.makepyfile(FIXTURE_TEST)
    result = pytester.runpytest_subprocess(
        "-p", "no:randomly", "-o", "junit_family=xunit1", "--junitxml=out.xml"
    )
    result.assert_outcomes(passed=1)
    props = {
        p.get("name"): p.get("value") for p in ET.parse(pytester.path / "out.xml").getroot().iter("property")
    }
    assert props["spark.sampler.throttled"] == "yes"
    assert props["spark.sampler.throttle_reasons"] == "SwThermalSlowdown"
    assert float(props["spark.sampler.temperature_max"]) >= 74


def test_plain_run_defines_the_fixture_without_loading_its_module(pytester: pytest.Pytester) -> None:
    """The fixture is declared by the entry point; its module (and NVML, psutil)
    loads only when a test asks for it (issue 10: a plain run loads nothing more)."""
    pytester.makepyfile(
        """
        import sys
        def test_cheap(request):
            assert "spark_sampler" in request.fixturenames or request.getfixturevalue  # defined
            assert "pynvml" not in sys.modules
            assert "psutil" not in sys.modules
            assert "pytest_dgx_spark.sampler" not in sys.modules
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:randomly", "--fixtures")
    result.stdout.fnmatch_lines(["spark_sampler*"])
    result = pytester.runpytest_subprocess("-p", "no:randomly")
    result.assert_outcomes(passed=1)


def test_fixture_summary_lands_in_pytest_json_report_metadata(
    pytester: pytest.Pytester, doubles: Any, monkeypatch: Any
) -> None:
    pytest.importorskip("pytest_jsonreport")
    doubles.nvml(hot_gb10()).apply(monkeypatch)
    pytester.makepyfile(FIXTURE_TEST)
    result = pytester.runpytest_subprocess("-p", "no:randomly", "--json-report", "--json-report-file=r.json")
    result.assert_outcomes(passed=1)
    (test,) = json.loads((pytester.path / "r.json").read_text())["tests"]
    meta = test["metadata"]["spark_sampler"]
    assert meta["ok"] is True and meta["throttled"] is True
    assert meta["gpus"][0]["name"] == "NVIDIA GB10"


def test_clock_event_counters_that_grew_during_the_test_mark_it_throttled(doubles: Any) -> None:
    """On GB10 the instantaneous reasons read "Not Active" while the cumulative
    counters grow (tests/data/gb10/nvidia-smi_clocks_power_1.txt): the sampler
    reads them at start and at stop, so a long test sees the slowdown."""
    samples = [{"temperature_c": 80, "power_usage_mw": 90000, "clock_event_reasons": 0}] * 5
    counters = {"sw_power_cap": [10800240649, 10900240649], "hw_thermal_slowdown": [1195386, 4195386]}
    env = doubles.nvml(gb10.nvml(device={"samples": samples, "counters": counters})).env
    with GpuSampler(interval=0.02, env=env) as sampler:
        wait_samples(sampler, 3)
    s = sampler.summary()
    assert s["ok"] and s["stopped"] == "clean"
    assert s["throttle_reasons"] == {}
    assert s["slowdown_counters"] == {"0": {"hw_thermal_slowdown": 3.0}}
    assert s["throttled"] is True
    assert "THROTTLED (clock-event counters): GPU 0: hw_thermal_slowdown +3 s" in summary_line(s)


def test_unchanged_counters_are_not_throttling(doubles: Any) -> None:
    samples = [{"temperature_c": 40, "power_usage_mw": 10000, "clock_event_reasons": 0x1}] * 5
    counters = {"sw_power_cap": [50284264713, 50384264713], "sw_thermal_slowdown": 0}
    env = doubles.nvml(gb10.nvml(device={"samples": samples, "counters": counters})).env
    with GpuSampler(interval=0.02, env=env) as sampler:
        wait_samples(sampler, 3)
    s = sampler.summary()
    assert s["slowdown_counters"] == {} and s["throttled"] is False


def test_the_sampler_raises_the_watchers_events(doubles: Any) -> None:
    """SwThermalSlowdown from the 6th sample on: one G4 event that starts (not one per sample), in the
    summary and the report text; a test can assert on ``events("G4")``."""
    with GpuSampler(interval=0.02, env=doubles.nvml(hot_gb10()).env, timeout=2) as sampler:
        wait_samples(sampler, 12)
    found = sampler.events("G4")
    assert [(e["code"], e["state"], e["status"]) for e in found] == [("G4.clock-event", "start", "WARN")]
    assert "SwThermalSlowdown active on GPU 0" in found[0]["text"] and sampler.events("G6") == []
    assert sampler.summary()["events"] == found
    assert "[G4.clock-event] clock-event reason SwThermalSlowdown" in sampler.report_text()


def test_a_sampler_without_a_sample_is_not_read_as_not_throttled(doubles: Any) -> None:
    with GpuSampler(interval=0.02, env=doubles.nvml({"init_error": "DriverNotLoaded"}).env) as sampler:
        time.sleep(0.3)
    s = sampler.summary()
    assert s["ok"] is False and s["throttled"] is None and s["events"] == []
    assert ("spark.sampler.throttled", "unknown") in properties(s)
