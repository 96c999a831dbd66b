"""G4 — thermals and power: the reason bits, the series rules, NVML and the
nvidia-smi fallback, and the faults a wedged or missing driver produces.

Recorded input: tests/data/h200-cu130/query_gpu.csv (a real H200, idle:
38 C, 107.19 W of 700 W, 450 MHz, reasons 0x1). GB10 facts (power limit
N/A, SwThermalSlowdown fires) come from docs/EVIDENCE.md via tests/doubles/gb10.py.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_dgx_spark.checks.g04_thermal import check as g4
from pytest_dgx_spark.checks.kit import Params
from pytest_dgx_spark.checks.record import plain
from pytest_dgx_spark.engine import Engine
from pytest_dgx_spark.model import Status
from pytest_dgx_spark.probes.machine import Machine
from pytest_dgx_spark.probes.nvml import NvmlDevice
from pytest_dgx_spark.settings import Settings
from pytest_dgx_spark.thermal import (
    REASON_BITS,
    WARN_MASK,
    CounterSet,
    decode_reasons,
    parse_mask,
    parse_smi_q,
    seconds_text,
)
from pytest_dgx_spark.thresholds import defaults

from doubles import gb10
from doubles.procs import alive


def make_facts(**kw: Any) -> g4.Facts:
    """G4's facts from JSON-shaped fields, as a capture rebuilds them (the kernel log: not read)."""
    return g4.Facts.from_dict({"kernel_log_problem": None, **plain(kw)})


def params(profile: str, **override: float) -> Params:
    return Params(profile=profile, thresholds={**defaults(profile), **override})


GB10_T = params("gb10")
GENERIC_T = params("generic")
FIELDS = g4.smi_fields(g4.smi_argv("clocks_event_reasons.active"))


def series(
    temps: list[float], watts: list[float], reasons: int | list[int] = 0, clock: int = 2405, index: int = 0
) -> list[dict[str, Any]]:
    masks = reasons if isinstance(reasons, list) else [reasons] * len(temps)
    return [
        {
            "t": round(i * 0.5, 2),
            "gpus": [
                {
                    "index": index,
                    "temperature_c": t,
                    "power_usage_mw": int(w * 1000),
                    "clock_sm_mhz": clock,
                    "clock_event_reasons": m,
                }
            ],
        }
        for i, (t, w, m) in enumerate(zip(temps, watts, masks, strict=True))
    ]


def gb10_facts(samples: list[dict[str, Any]], **kw: Any) -> g4.Facts:
    dev = {"index": 0, "name": "NVIDIA GB10", "power_limit_mw": None, "max_clock_sm_mhz": 3003, "errors": {}}
    return make_facts(seconds=kw.pop("seconds", 5.0), devices=[dev], samples=samples, duration_s=5.0, **kw)


# ---------------------------------------------------------------------- reason bits


@pytest.mark.parametrize(("bit", "name"), REASON_BITS)
def test_each_reason_bit_decodes_to_its_nvml_name(bit: int, name: str) -> None:
    assert decode_reasons(bit) == [name]


def test_unknown_bits_are_shown_as_hex_next_to_known_ones() -> None:
    assert decode_reasons(0x20 | 0x1000) == ["SwThermalSlowdown", "0x1000"]
    assert decode_reasons(0) == []
    assert decode_reasons(None) == []


def test_warn_mask_is_thermal_hw_slowdown_and_power_brake_only() -> None:
    warned = decode_reasons(WARN_MASK)
    assert warned == ["HwSlowdown", "SwThermalSlowdown", "HwThermalSlowdown", "HwPowerBrakeSlowdown"]


@pytest.mark.parametrize(
    ("raw", "mask"),
    [
        ("0x0000000000000001", 1),
        ("0x20", 0x20),
        (64, 64),
        ("12", 12),
        ("[N/A]", None),
        (True, None),
        (-1, None),
    ],
)
def test_masks_parse_from_nvml_ints_and_nvidia_smi_hex(raw: Any, mask: int | None) -> None:
    assert parse_mask(raw) == mask


# ---------------------------------------------------------------------- recorded H200


def test_recorded_h200_query_gpu_csv_parses_with_its_header_and_units(h200: Path) -> None:
    text = (h200 / "query_gpu.csv").read_text()
    statics, sample, problems = plain(g4.parse_smi(text, FIELDS, t=0.0))
    assert problems == []
    assert statics[0]["name"] == "NVIDIA H200"
    assert statics[0]["power_limit_mw"] == 700000
    gpu = sample["gpus"][0]
    assert gpu["temperature_c"] == 38
    assert gpu["power_usage_mw"] == 107190
    assert gpu["clock_sm_mhz"] == 450
    assert gpu["clock_event_reasons"] == 1


def test_recorded_idle_h200_is_info_with_its_readings_and_gpuidle_ignored(h200: Path) -> None:
    statics, sample, _ = g4.parse_smi((h200 / "query_gpu.csv").read_text(), FIELDS, t=0.0)
    facts = make_facts(source="nvidia-smi", seconds=0, devices=statics, samples=[sample])
    result = g4.evaluate(facts, GENERIC_T)
    assert result.status is Status.INFO
    assert "38 C" in result.summary and "107 W" in result.summary and "limit 700 W" in result.summary
    assert "GpuIdle (idle)" in result.summary
    assert result.reading("power_limit").value == 700.0
    assert result.reading("clock_event_reasons").value == "GpuIdle"


def test_recorded_noheader_temperature_power_line_parses(h200: Path) -> None:
    line = (h200 / "query_temp_power_noheader.csv").read_text().strip()  # "38, 105.28"
    _, sample, problems = plain(g4.parse_smi(line, ["temperature.gpu", "power.draw"], t=0.0))
    assert problems == []
    assert sample["gpus"][0]["temperature_c"] == 38
    assert sample["gpus"][0]["power_usage_mw"] == 105280


# ---------------------------------------------------------------------- evaluate


def test_gb10_power_limit_na_is_a_reading_not_an_error() -> None:
    result = g4.evaluate(gb10_facts(series([45, 45, 46], [11, 11.5, 12])), GB10_T)
    assert result.status is Status.INFO
    assert "limit [N/A]" in result.summary
    assert result.reading("power_limit").value is None
    assert result.reading("temperature_max").value == 46.0
    assert result.reading("power_mean").value == 11.5


@pytest.mark.parametrize(
    ("mask", "name", "fix_word"),
    [
        (0x20, "SwThermalSlowdown", "-lgc"),
        (0x40, "HwThermalSlowdown", "-lgc"),
        (0x80, "HwPowerBrakeSlowdown", "power supply"),
        (0x8, "HwSlowdown", "cooling"),
    ],
)
def test_active_thermal_or_brake_reason_warns_naming_it(mask: int, name: str, fix_word: str) -> None:
    result = g4.evaluate(gb10_facts(series([80, 85, 88], [90, 91, 90], [0, mask, mask])), GB10_T)
    assert result.status is Status.WARN and result.code == "G4.throttle-reasons"  # first of those it found
    assert f"{name} in 2/3 samples" in result.summary  # the reason named, with its count
    assert fix_word in result.fix


def test_idle_and_software_power_cap_are_ignored() -> None:
    result = g4.evaluate(gb10_facts(series([40, 40, 40], [20, 20, 20], [0x1, 0x5, 0x4])), GB10_T)
    assert result.status is Status.INFO and result.codes == []
    assert "SwPowerCap in 2/3" in result.summary


def test_unknown_reason_bit_is_reported_in_hex_but_does_not_warn() -> None:
    result = g4.evaluate(gb10_facts(series([40, 40], [20, 20], 0x1000)), GB10_T)
    assert result.status is Status.INFO
    assert "0x1000" in result.summary
    assert result.reading("clock_event_reasons").value == "0x1000"


def test_flat_power_under_ceiling_while_temperature_climbs_warns_with_the_numbers() -> None:
    temps = [60, 61, 62, 63, 64, 65, 66, 67, 68, 69]
    result = g4.evaluate(gb10_facts(series(temps, [95, 96] * 5)), GB10_T)
    assert result.status is Status.WARN and result.codes == ["G4.flat-power"]
    assert "power flat at 95-96 W" in result.summary
    assert "100 W ceiling" in result.summary
    assert "rose 8.0 C" in result.summary  # mean of last two (68.5) - mean of first two (60.5)


def test_power_ramping_up_with_temperature_is_warm_up_not_a_plateau() -> None:
    temps = [40, 42, 44, 46, 48, 50, 52, 54, 56, 58]
    watts = [10, 20, 30, 40, 50, 60, 70, 80, 90, 95]
    assert g4.evaluate(gb10_facts(series(temps, watts)), GB10_T).status is Status.INFO


def test_an_idle_gpu_never_matches_the_flat_power_rule() -> None:
    temps = [40, 41, 42, 43, 44, 45, 46, 47, 48, 49]
    result = g4.evaluate(gb10_facts(series(temps, [5] * 10, 0x1)), GB10_T)
    assert result.status is Status.INFO
    assert any("idle in most samples" in d for d in result.details)


def test_generic_profile_derives_the_ceiling_from_the_enforced_limit() -> None:
    dev = {
        "index": 0,
        "name": "NVIDIA H200",
        "power_limit_mw": 700000,
        "max_clock_sm_mhz": 1980,
        "errors": {},
    }
    temps = [50, 51, 52, 53, 54, 55, 56, 57, 58, 59]
    facts = make_facts(seconds=5, devices=[dev], samples=series(temps, [300, 310] * 5), duration_s=5)
    result = g4.evaluate(facts, GENERIC_T)
    assert result.status is Status.WARN and result.codes == ["G4.flat-power"]
    assert "350 W ceiling" in result.summary and "limit 700 W" in result.summary
    assert result.reading("flat_power_ceiling").value == 350.0
    above = make_facts(seconds=5, devices=[dev], samples=series(temps, [600, 610] * 5), duration_s=5)
    assert g4.evaluate(above, GENERIC_T).status is Status.INFO


def test_flat_power_threshold_override_is_used_and_quoted() -> None:
    temps = [60, 61, 62, 63, 64, 65, 66, 67, 68, 69]
    t = params("gb10", g4_flat_power_w=90.0)
    assert g4.evaluate(gb10_facts(series(temps, [95] * 10)), t).status is Status.INFO
    t = params("gb10", g4_flat_power_w=120.0)
    result = g4.evaluate(gb10_facts(series(temps, [95] * 10)), t)
    assert result.codes == ["G4.flat-power"] and "120 W ceiling" in result.summary


def test_hung_driver_fails_and_missing_gpu_skips() -> None:
    hung = g4.evaluate(make_facts(hung="NVML made no progress for 1 s during 'nvmlInit'"), GB10_T)
    assert hung.status is Status.FAIL and hung.codes == ["G4.driver-not-answering"]
    missing = g4.evaluate(make_facts(missing="NVML unavailable (DriverNotLoaded)"), GB10_T)
    assert missing.status is Status.SKIP and missing.codes == ["G4.no-gpu"]
    assert "DriverNotLoaded" in missing.summary


def test_gpu_lost_mid_sample_is_a_fail_with_when_not_an_exception() -> None:
    samples = series([50, 51], [40, 40])
    samples.append({"t": 1.0, "gpus": [{"index": 0, "errors": {"temperature_c": {"name": "GpuIsLost"}}}]})
    result = g4.evaluate(gb10_facts(samples), GB10_T)
    assert result.status is Status.FAIL and result.codes == ["G4.gpu-lost"]
    assert "(GpuIsLost at t=1.0 s, after 2 readings)" in result.summary  # when, and after how many


def test_errors_only_is_a_fail_but_not_supported_fields_are_readings() -> None:
    bad = [
        {
            "t": 0,
            "gpus": [
                {
                    "index": 0,
                    "errors": {"temperature_c": {"name": "Unknown"}, "power_usage_mw": {"name": "Unknown"}},
                }
            ],
        }
    ]
    result = g4.evaluate(gb10_facts(bad), GB10_T)
    assert result.status is Status.FAIL and result.codes == ["G4.gpu-errors"]
    assert "Unknown" in result.summary  # the error named
    na = [
        {
            "t": 0,
            "gpus": [
                {"index": 0, "temperature_c": 41, "errors": {"power_usage_mw": {"name": "NotSupported"}}}
            ],
        }
    ]
    ok = g4.evaluate(gb10_facts(na), GB10_T)
    assert ok.status is Status.INFO and ok.codes == []
    assert ok.reading("power_max").value is None


def test_two_gpus_get_per_gpu_readings_and_one_line() -> None:
    samples = [
        {"t": 0, "gpus": [series([40], [60])[0]["gpus"][0], series([70], [300], index=1)[0]["gpus"][0]]},
    ]
    devs = [
        {"index": 0, "name": "NVIDIA H200", "power_limit_mw": 700000},
        {"index": 1, "name": "NVIDIA H200", "power_limit_mw": 700000},
    ]
    result = g4.evaluate(make_facts(seconds=0, devices=devs, samples=samples), GENERIC_T)
    assert result.status is Status.INFO
    assert result.summary.startswith("2 GPUs (NVIDIA H200): 40-70 C")
    assert result.reading("gpu1_temperature_max").value == 70.0
    assert "\n" not in result.line()


# ---------------------------------------------------------------------- nvidia-smi parsing


@pytest.mark.parametrize(
    ("line", "key", "error"),
    [
        ("0, NVIDIA GB10, 45, 11.2, [N/A], 2405, 3003, 0x0", "power_limit_mw", "NotSupported"),
        ("0, NVIDIA GB10, 45, [Not Supported], 100, 2405, 3003, 0x0", "power_usage_mw", "NotSupported"),
        ("0, NVIDIA GB10, [Unknown Error], 11.2, 100, 2405, 3003, 0x0", "temperature_c", "Unknown"),
        ("0, NVIDIA GB10, [GPU is lost], 11.2, 100, 2405, 3003, 0x0", "temperature_c", "GpuIsLost"),
        ("0, NVIDIA GB10, 45, 11.2, 100, 2405, 3003, [N/A]", "clock_event_reasons", "NotSupported"),
    ],
)
def test_nvidia_smi_placeholders_become_named_errors(line: str, key: str, error: str) -> None:
    statics, sample, _ = plain(g4.parse_smi(line, FIELDS, t=0.0))
    errors = {**statics[0]["errors"], **sample["gpus"][0].get("errors", {})}
    assert errors[key]["name"] == error


def test_nvidia_smi_empty_lines_header_only_and_short_lines_are_tolerated() -> None:
    statics, sample, problems = plain(g4.parse_smi("\n\n", FIELDS, t=0.0))
    assert statics == [] and sample["gpus"] == [] and problems == []
    header = "index, name, temperature.gpu, power.draw [W]\n"
    assert g4.parse_smi(header, FIELDS, t=0.0)[0] == []
    statics, _, problems = g4.parse_smi("0, NVIDIA GB10, 45\n", FIELDS, t=0.0)
    assert statics == [] and "3 of 8 columns" in problems[0]


def test_sample_interval_stays_inside_the_watchdog_and_bounded() -> None:
    assert g4.sample_interval(1.0, 10.0) == 0.1
    assert g4.sample_interval(600.0, 10.0) == 2.0  # 300 samples
    assert g4.sample_interval(600.0, 1.0) == 0.5  # never longer than half the timeout


# ---------------------------------------------------------------------- through Machine


#: a root with an NVIDIA device node (G4 calls a driver wedged only with one
#: there), planted so the verdict does not depend on this box's /dev
_NODE_ROOT: list[Path] = []


@pytest.fixture(autouse=True)
def _gpu_node_root(tmp_path_factory: pytest.TempPathFactory) -> None:
    if not _NODE_ROOT:
        root = tmp_path_factory.mktemp("gpu-node-root")
        (root / "dev").mkdir()
        (root / "dev" / "nvidiactl").write_bytes(b"")
        _NODE_ROOT.append(root)


def run_g4(env: dict[str, str], *, seconds: float = 0.3, timeout: float = 5.0, root: Path | None = None):
    machine = Machine(env=env, timeout=timeout, root=root or _NODE_ROOT[0])
    start = time.monotonic()
    result = Engine(Settings(thermal_seconds=seconds, timeout=timeout), machine).run("G4")
    return result, time.monotonic() - start


def no_nvml(doubles: Any, error: str = "DriverNotLoaded") -> Any:
    return doubles.nvml({"init_error": error})


def test_gb10_nvml_sample_over_time(doubles: Any) -> None:
    samples = [{"temperature_c": 45 + (i % 3), "power_usage_mw": 11000 + 500 * (i % 2)} for i in range(20)]
    result, _ = run_g4(doubles.nvml(gb10.nvml(device={"samples": samples})).env, seconds=0.3)
    assert result.status is Status.INFO
    assert result.reading("source").value == "nvml"
    assert result.reading("samples").value >= 3
    assert result.reading("temperature_min").value == 45.0
    assert result.reading("temperature_max").value == 47.0
    assert result.reading("power_limit").value is None
    assert result.reading("sm_clock_rated").value == 3003


def test_zero_seconds_takes_one_snapshot(doubles: Any) -> None:
    result, _ = run_g4(doubles.nvml(gb10.nvml()).env, seconds=0)
    assert result.status is Status.INFO
    assert result.reading("samples").value == 1
    assert "one snapshot (nvml)" in result.summary


def test_gb10_thermal_slowdown_from_nvml_warns(doubles: Any) -> None:
    samples = [{"temperature_c": 91, "power_usage_mw": 98000, "clock_event_reasons": 0x20}]
    result, _ = run_g4(doubles.nvml(gb10.nvml(device={"samples": samples})).env, seconds=0)
    assert result.codes == ["G4.throttle-reasons", "G4.temperature-high"]
    assert "SwThermalSlowdown in 1/1 samples (max 91 C)" in result.summary


def test_nvml_hang_fails_within_the_timeout(doubles: Any) -> None:
    env = doubles.nvml(gb10.nvml(hang={"where": "nvmlInit", "seconds": 60})).env
    result, took = run_g4(env, timeout=1.0)
    assert result.status is Status.FAIL and result.codes == ["G4.driver-not-answering"]
    assert "nvmlInit" in result.summary  # where it hung
    assert took < 1.0 + 2.5


def test_gpu_lost_mid_sample_through_nvml(doubles: Any) -> None:
    samples = [{"temperature_c": 60, "power_usage_mw": 90000}] * 10
    env = doubles.nvml(gb10.nvml(device={"samples": samples, "lost_after": 3})).env
    result, _ = run_g4(env, seconds=1.0)
    assert result.status is Status.FAIL and result.codes == ["G4.gpu-lost"]
    assert "after 3 readings" in result.summary


def test_nvml_unknown_errors_everywhere_fail(doubles: Any) -> None:
    env = doubles.nvml(gb10.nvml(device={"temperature_c": "Unknown", "power_usage_mw": "Unknown"})).env
    result, _ = run_g4(env, seconds=0)
    assert result.status is Status.FAIL and result.codes == ["G4.gpu-errors"]


def test_nvml_init_unknown_without_nvidia_smi_fails_not_skips(doubles: Any) -> None:
    env = no_nvml(doubles, "Unknown").env
    env["PATH"] = str(doubles.folder / "empty-bin")
    result, _ = run_g4(env)
    assert result.status is Status.FAIL and result.codes == ["G4.driver-not-answering"]
    assert "Unknown" in result.summary


def test_driver_not_loaded_and_no_nvidia_smi_skips_saying_why(doubles: Any) -> None:
    env = no_nvml(doubles).env
    env["PATH"] = str(doubles.folder / "empty-bin")
    result, _ = run_g4(env)
    assert result.status is Status.SKIP and result.codes == ["G4.no-gpu"]
    assert "DriverNotLoaded" in result.summary and "nvidia-smi: not found on PATH" in result.summary


SMI_GB10 = """#!/bin/sh
echo "0, NVIDIA GB10, 45, 11.20, [N/A], 2405, 3003, 0x0000000000000000"
"""


def test_nvidia_smi_fallback_when_nvml_is_unusable(doubles: Any) -> None:
    doubles.tool("nvidia-smi", SMI_GB10)
    result, _ = run_g4(no_nvml(doubles, "LibraryNotFound").env, seconds=0)
    assert result.status is Status.INFO
    assert result.reading("source").value == "nvidia-smi"
    assert result.reading("temperature_max").value == 45.0
    assert result.reading("power_limit").value is None
    assert any("NVML" in d and "LibraryNotFound" in d for d in result.details)


def test_nvidia_smi_series_samples_repeatedly(doubles: Any, tmp_path: Path) -> None:
    counter = tmp_path / "count"
    doubles.tool(
        "nvidia-smi",
        f"""#!/bin/sh
n=$(cat {counter} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {counter}
echo "0, NVIDIA GB10, $((40+n)), 11.20, [N/A], 2405, 3003, 0x0000000000000000"
""",
    )
    result, _ = run_g4(no_nvml(doubles).env, seconds=0.6)
    assert result.status is Status.INFO
    assert result.reading("samples").value >= 2
    assert result.reading("temperature_max").value > result.reading("temperature_min").value


def test_old_driver_field_name_is_retried(doubles: Any) -> None:
    doubles.tool(
        "nvidia-smi",
        """#!/bin/sh
case "$*" in
  *clocks_event_reasons*) echo 'Field "clocks_event_reasons.active" is not a valid field to query.'; exit 2;;
esac
echo "0, NVIDIA GB10, 45, 11.20, [N/A], 2405, 3003, 0x0000000000000020"
""",
    )
    result, _ = run_g4(no_nvml(doubles).env, seconds=0)
    assert result.status is Status.WARN and result.codes == ["G4.throttle-reasons"]
    assert "SwThermalSlowdown" in result.summary
    assert any("does not know clocks_event_reasons.active" in d for d in result.details)


def test_nvidia_smi_that_hangs_fails_in_time_and_its_process_group_is_gone(
    doubles: Any, tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    doubles.tool("nvidia-smi", f"#!/bin/sh\nsleep 30 &\necho $$ $! > {pids}\nwait\n")
    result, took = run_g4(no_nvml(doubles).env, timeout=1.0)
    assert result.status is Status.FAIL
    assert result.codes == ["G4.driver-not-answering"]
    assert result.summary.startswith("driver not answering: nvidia-smi did not answer within 1.0 s")
    assert took < 1.0 + 2.5
    shell, sleeper = (int(p) for p in pids.read_text().split())
    deadline = time.monotonic() + 2
    while (alive(shell) or alive(sleeper)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(shell) and not alive(sleeper)


@pytest.mark.parametrize(
    ("script", "status", "code", "words"),
    [
        (
            "echo 'Unable to determine the device handle for GPU0000:01:00.0: Unknown Error' >&2; exit 255",
            Status.FAIL,
            "G4.driver-not-answering",
            "nvidia-smi exited 255: Unable",
        ),
        (
            "echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'; exit 9",
            Status.SKIP,
            "G4.no-gpu",
            "nvidia-smi exited 9",
        ),
        ("echo 'No devices were found'; exit 6", Status.SKIP, "G4.no-gpu", "No devices"),
        (
            "echo 'Unable to determine the device handle: GPU is lost.'; exit 15",
            Status.FAIL,
            "G4.driver-not-answering",
            "fallen off the bus",
        ),
        ("exit 0", Status.SKIP, "G4.no-gpu", "listed no GPU"),
        (
            "echo 'index, name, temperature.gpu, power.draw [W], enforced.power.limit [W], clocks.current.sm [MHz], clocks.max.sm [MHz], clocks_event_reasons.active'",
            Status.SKIP,
            "G4.no-gpu",
            "listed no GPU",
        ),
        (
            "echo; echo '0, NVIDIA GB10, 45, [Not Supported], [N/A], 2405, 3003, [N/A]'; echo",
            Status.INFO,
            "",
            "[N/A] (limit [N/A])",
        ),
    ],
)
def test_nvidia_smi_fallback_faults(doubles: Any, script: str, status: Status, code: str, words: str) -> None:
    doubles.tool("nvidia-smi", f"#!/bin/sh\n{script}\n")
    result, _ = run_g4(no_nvml(doubles).env, seconds=0, timeout=2.0)
    assert result.status is status and result.code == code, result.line()
    assert words in result.summary  # what nvidia-smi said, or the [N/A] it printed


# ---------------------------------------------------------------------- recorded real series

#: NVML snapshots + series recorded on real GPUs by benchmarks/gpu_machine_checks.sh
RECORDED = sorted((Path(__file__).parent / "data").glob("*/nvml_sample_*.json"))


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_recorded_real_series_evaluate_to_their_own_ranges(path: Path) -> None:
    doc = json.loads(path.read_text())
    devices = [g4.static_from_snapshot(NvmlDevice.from_dict(d)) for d in doc["nvml"]["devices"]]
    samples = doc["sample"]["samples"]
    profile = "gb10" if any("GB10" in str(d.name) for d in devices) else "generic"
    facts = make_facts(seconds=10, devices=devices, samples=samples, duration_s=doc["sample"]["duration_s"])
    result = g4.evaluate(facts, params(profile))
    temps = [g["temperature_c"] for s in samples for g in s["gpus"] if g.get("temperature_c") is not None]
    watts = [
        g["power_usage_mw"] / 1000 for s in samples for g in s["gpus"] if g.get("power_usage_mw") is not None
    ]
    assert result.status in (Status.INFO, Status.WARN), result.line()
    assert result.reading("samples").value == len(samples)
    assert result.reading("temperature_max").value == round(max(temps), 1)
    assert result.reading("power_max").value == round(max(watts), 1)


# ---------------------------------------------------------------------- clock-event counters (issue 8)

GB10_DATA = Path(__file__).parent / "data" / "gb10"


def gb10_q_counters() -> dict[str, int]:
    """The counters a real GB10 printed in ``nvidia-smi -q -d PERFORMANCE``
    (tests/data/gb10/nvidia-smi-q_1.txt: SW Power Capping 50284264713 us)."""
    (gpu,) = plain(parse_smi_q((GB10_DATA / "nvidia-smi-q_1.txt").read_text()))
    return gpu["us"]


def table_counters() -> dict[str, int]:
    """The cumulative counters tabulated from ``nvidia-smi -q`` on a GB10 node
    (tests/data/gb10/nvidia-smi_clocks_power_1.txt: SW Power Capping
    10,800,240,649 us, HW Thermal Slowdown 1,195,386 us)."""
    names = {
        "SW Power Capping": "sw_power_cap",
        "HW Thermal Slowdown": "hw_thermal_slowdown",
        "HW Power Brake": "hw_power_brake_slowdown",
        "Sync Boost": "sync_boost",
    }
    text = (GB10_DATA / "nvidia-smi_clocks_power_1.txt").read_text()
    out = {}
    for label, value in re.findall(r"^\| \**([A-Za-z ]+?)\** \| \**([\d,]+)", text, re.M):
        if label in names:
            out[names[label]] = int(value.replace(",", ""))
    return out


def idle_gb10_samples(n: int = 20, temp: int = 45) -> list[dict[str, Any]]:
    return [{"temperature_c": temp, "power_usage_mw": 11000, "clock_event_reasons": 0} for _ in range(n)]


def test_gb10_q_capture_parses_counters_and_ignores_the_instantaneous_reasons() -> None:
    """tests/data/gb10/nvidia-smi-q_1.txt: every reason "Not Active", the
    counters populated; the author's annotation after a value is ignored."""
    (gpu,) = plain(parse_smi_q((GB10_DATA / "nvidia-smi-q_1.txt").read_text()))
    assert gpu["us"] == {
        "sw_power_cap": 50284264713,
        "sync_boost": 0,
        "sw_thermal_slowdown": 0,
        "hw_thermal_slowdown": 0,
        "hw_power_brake_slowdown": 0,
    }
    assert gpu["errors"] == {}


def test_h200_q_capture_parses_counters_and_tlimit_margins(h200: Path) -> None:
    """tests/data/h200-cu130/nvidia-smi-q.txt: counters 0 us, GPU T.Limit Temp 49 C."""
    (gpu,) = plain(parse_smi_q((h200 / "nvidia-smi-q.txt").read_text()))
    assert gpu["us"]["sw_power_cap"] == 0 and len(gpu["us"]) == 5
    assert gpu["temps"]["current_c"] == 38
    assert gpu["temps"]["tlimit_c"] == 49
    assert gpu["temps"]["slowdown_tlimit_c"] == -2
    assert seconds_text(50284264713) == "14.0 h" and seconds_text(1195386) == "1.2 s"


def test_healthy_idle_gb10_with_hours_of_power_capping_is_info_with_the_counters(doubles: Any) -> None:
    """nvidia-smi-q_1.txt's counters, unchanged during the sample: 14 h of SW
    power capping is the part floating against its package budget, not a fault."""
    us = gb10_q_counters()
    env = doubles.nvml(gb10.nvml(device={"samples": idle_gb10_samples(), "counters": us})).env
    result, _ = run_g4(env, seconds=0.3)
    assert result.status is Status.INFO, result.line()
    assert (
        "clock-event counters since boot: power cap 14.0 h, thermal 0 s, power brake 0 s; "
        "slowdown +0 s in the sample" in result.summary
    )
    assert result.reading("sw_power_cap_since_boot").value == 50284.265
    assert result.reading("sw_thermal_slowdown_in_sample").value == 0.0
    assert result.short_line() == (
        "G4 INFO: GB10 45 C, 11 W, SM 2522 MHz; since boot: power cap 14.0 h, thermal 0 s, brake 0 s "
        "(+0 s in sample)"
    )


def test_thermal_slowdown_growing_during_the_sample_warns(doubles: Any) -> None:
    """nvidia-smi_clocks_power_1.txt's counters (1.2 s of HW thermal slowdown
    since boot, under 10 s) plus 2.5 s more during the sample: the instantaneous
    reasons read 0 throughout, as that capture says they do."""
    before = table_counters()
    assert before["sw_power_cap"] == 10800240649 and before["hw_thermal_slowdown"] == 1195386
    counters = {k: [v, v + (2_500_000 if k == "hw_thermal_slowdown" else 0)] for k, v in before.items()}
    env = doubles.nvml(gb10.nvml(device={"samples": idle_gb10_samples(), "counters": counters})).env
    result, _ = run_g4(env, seconds=0.3)
    assert result.status is Status.WARN and result.codes == ["G4.clocks-cut"], result.line()
    assert "HW thermal +2.5 s (clock-event counters)" in result.summary
    assert "-lgc" in result.fix
    assert result.headline == "HW thermal +2.5 s during the sample"
    assert result.reading("hw_thermal_slowdown_in_sample").value == 2.5
    assert len(result.short_line()) <= 120


def test_unchanged_counters_from_the_table_capture_are_info() -> None:
    """nvidia-smi_clocks_power_1.txt: 3 h power capping, 1.2 s HW thermal since
    boot (below g4_slowdown_since_boot_s = 10 s), nothing during the sample."""
    us = table_counters()
    facts = gb10_facts(series([50, 50], [15.57, 15.57]), counters_source="nvml")
    facts.counters_before = facts.counters_after = [CounterSet.from_dict({"index": 0, "us": us})]
    result = g4.evaluate(facts, GB10_T)
    assert result.status is Status.INFO and result.codes == []
    assert "power cap 3.0 h, thermal 1.2 s, power brake 0 s" in result.summary


def test_large_thermal_slowdown_since_boot_warns_and_the_threshold_is_overridable() -> None:
    """thermal_1.txt: a GB10 at 91-92 C had accumulated 27.6 s of SW thermal
    slowdown; above g4_slowdown_since_boot_s (10 s) it warns even when the
    short sample saw none."""
    assert "accumulated 27.6\nseconds" in (GB10_DATA / "thermal_1.txt").read_text().replace(
        "accumulated 27.6 seconds", "accumulated 27.6\nseconds"
    )
    us = {"sw_power_cap": 0, "sw_thermal_slowdown": 27_600_000, "hw_thermal_slowdown": 0}
    facts = gb10_facts(series([60, 60], [40, 40]), counters_source="nvml")
    facts.counters_before = facts.counters_after = [CounterSet.from_dict({"index": 0, "us": us})]
    result = g4.evaluate(facts, GB10_T)
    assert result.status is Status.WARN and result.codes == ["G4.clocks-cut-since-boot"]
    assert "SW thermal 28 s (> g4_slowdown_since_boot_s = 10 s" in result.summary
    assert "--spark-thermal-seconds 900" in result.fix
    assert g4.evaluate(facts, params("gb10", g4_slowdown_since_boot_s=60.0)).status is Status.INFO


def test_power_brake_growth_warns_with_the_supply_fix() -> None:
    facts = gb10_facts(series([50, 50], [30, 30]), counters_source="nvml")
    facts.counters_before = [CounterSet.from_dict({"index": 0, "us": {"hw_power_brake_slowdown": 0}})]
    facts.counters_after = [CounterSet.from_dict({"index": 0, "us": {"hw_power_brake_slowdown": 400_000}})]
    result = g4.evaluate(facts, GB10_T)
    assert result.status is Status.WARN and result.codes == ["G4.clocks-cut"]
    assert "power brake +0.4 s" in result.summary and "USB-C PD" in result.fix
    assert result.short_fix == "check the power adapter; full AC power cycle"


def test_counters_not_supported_are_a_note_and_the_line_is_unchanged(doubles: Any) -> None:
    env = doubles.nvml(gb10.nvml(device={"samples": idle_gb10_samples(), "counters": "NotSupported"})).env  # no counters
    result, _ = run_g4(env, seconds=0.2)
    assert result.status is Status.INFO
    assert "counters" not in result.summary
    assert any("clock-event counters [N/A] (NotSupported)" in d for d in result.details)


def test_at_the_gb10_throttle_trip_warns() -> None:
    """thermal_2.txt (d): throttled at 86-87 C, clear at 85-86 C."""
    assert "86–87 °C" in (GB10_DATA / "thermal_2.txt").read_text()
    result = g4.evaluate(gb10_facts(series([80, 84, 87], [40, 70, 95])), GB10_T)
    assert result.status is Status.WARN and result.codes == ["G4.temperature-high"]
    assert "reached 87 C, at or above g4_hot_c = 85 C" in result.summary
    assert "(GB10's throttle trip is 86-87 C)" in result.summary  # 85 C is a margin below it
    assert result.headline == "GPU 0 at 87 C (warns from 85 C; GB10 trips at 86-87 C)"
    assert len(result.short_line()) <= 120
    assert g4.evaluate(gb10_facts(series([80, 84, 84], [40, 70, 95])), GB10_T).status is Status.INFO


def test_tlimit_margin_from_nvml_is_a_reading_and_warns_when_thin(doubles: Any) -> None:
    """The ``-q`` Temperature section prints margins ("GPU T.Limit Temp 13 C");
    NVML's margin temperature is the same number."""
    samples = [dict(s, tlimit_c=13) for s in idle_gb10_samples()]
    result, _ = run_g4(doubles.nvml(gb10.nvml(device={"samples": samples})).env, seconds=0.2)
    assert result.status is Status.INFO
    assert "45 C, T.Limit margin 13 C, 11 W (limit [N/A])" in result.summary
    assert result.reading("tlimit_margin_min").value == 13.0
    thin = series([70, 71], [60, 60])
    for s in thin:
        s["gpus"][0]["tlimit_c"] = 2
    warned = g4.evaluate(gb10_facts(thin), GB10_T)
    assert warned.status is Status.WARN and warned.codes == ["G4.tlimit-margin"]
    assert "T.Limit margin 2 C" in warned.summary


def table_watts(name: str) -> list[float]:
    """The Pwr:Usage of every GPU row of a real GB10's nvidia-smi table (``| N/A   36C    P8   3W /  N/A  |``)."""
    text = (GB10_DATA / name).read_text()
    assert text.startswith("# source:")
    return [float(w) for w in re.findall(r"^\| N/A\s+\d+C\s+P\d+\s+(\d+)W /\s+N/A\s+\|", text, re.M)]


def test_an_idle_gb10_warming_with_the_box_is_not_the_flat_power_pattern(doubles: Any) -> None:
    """GB10 never sets GpuIdle: its instantaneous reasons read "Not Active" (0x0) while
    idle (tests/data/gb10/nvidia-smi-q_1.txt, nvidia-smi_clocks_power_1.txt). An idle
    Spark draws 3 W (nvidia-smi_6.txt's table) to 15.57 W (nvidia-smi_clocks_power_1.txt)
    and warms with the CPU's work (thermal_2.txt (e): CPU at 90-92 C): power flat
    "under 100 W" while the temperature climbs is the box, not a throttled GPU.

    Verdict change: this was a WARN ("power flat at 3-15.6 W while temperature rose"),
    so a healthy idle Spark never passed the 15-minute plateau check."""
    (idle,) = table_watts("nvidia-smi_6.txt")
    assert idle == 3.0
    assert (
        "NVIDIA GB10, 2522 MHz, 3003 MHz, 50, 15.57 W"
        in (GB10_DATA / "nvidia-smi_clocks_power_1.txt").read_text()
    )
    assert "SW Power Cap                      : Not Active" in (GB10_DATA / "nvidia-smi-q_1.txt").read_text()
    temps = [36] + [50] * 19
    watts = [idle] + [15.57] * 19
    samples = [
        {"temperature_c": t, "power_usage_mw": int(w * 1000), "clock_event_reasons": 0}
        for t, w in zip(temps, watts, strict=True)
    ]
    result, _ = run_g4(doubles.nvml(gb10.nvml(device={"samples": samples})).env, seconds=0.3)
    assert result.status is Status.INFO, result.line()
    assert result.reading("temperature_rise").value >= 5  # it did climb
    assert any("with the power at idle (<= g4_idle_power_w = 20 W): the box warmed" in d for d in result.details)
    # the same series judged without the idle band (generic: GpuIdle alone decides) is the old WARN
    plain = g4.evaluate(
        gb10_facts(series([36, 50, 50, 50], [3, 15.57, 15.57, 15.57])), params("gb10", g4_idle_power_w=0)
    )
    assert plain.codes == ["G4.flat-power"] and "power flat at 3-15.6 W" in plain.summary


def test_a_loaded_gb10_above_the_idle_band_still_meets_the_flat_power_rule() -> None:
    """nvidia-smi_clocks_power_2.txt: a GB10 at 95 % load under a 2000 MHz cap drew
    36-37 W (59 W uncapped), well above the 20 W idle band: flat there while the chip
    heats 48 -> 58 C is the seed's pattern, and still WARNs."""
    text = (GB10_DATA / "nvidia-smi_clocks_power_2.txt").read_text()
    assert "58°C, 36.7W, 95%, 1989 MHz" in text
    result = g4.evaluate(gb10_facts(series([48, 50, 52, 54, 56, 58], [36.7] * 6)), GB10_T)
    assert result.status is Status.WARN and result.codes == ["G4.flat-power"], result.line()
    assert "power flat at 36.7 W" in result.summary


def test_a_threshold_not_given_is_the_tables_not_a_second_default() -> None:
    """Params without a threshold falls back to pytest_dgx_spark/thresholds.py,
    the one table: G4 read g4_tlimit_margin_c through its own default of 0 C
    (the table says 3 C, both profiles), so a 2 C margin went unnoticed."""
    thin = series([70, 71], [60, 60])
    for s in thin:
        s["gpus"][0]["tlimit_c"] = 2
    for profile in ("gb10", "generic"):
        bare = g4.evaluate(gb10_facts(thin), Params(profile=profile))
        assert bare.status is Status.WARN and bare.codes == ["G4.tlimit-margin"], (profile, bare.line())
        assert "T.Limit margin 2 C (<= g4_tlimit_margin_c = 3 C)" in bare.summary
        assert bare.line() == g4.evaluate(gb10_facts(thin), Params(profile=profile, thresholds=defaults(profile))).line()


SMI_FROM_CAPTURES = """#!/bin/sh
case "$1" in
  -q) sed '1d' {q} ;;
  *) printf 'name, clocks.current.graphics [MHz], clocks.max.graphics [MHz], temperature.gpu, power.draw [W]\\n'
     printf 'NVIDIA GB10, 2522 MHz, 3003 MHz, 50, 15.57 W\\n' ;;
esac
"""


def test_nvidia_smi_fallback_reads_power_and_counters_from_real_gb10_output(doubles: Any) -> None:
    """The fallback path on what real GB10s print: the query row of
    nvidia-smi_clocks_power_1.txt (50 C, 15.57 W, no power limit) and the
    ``-q -d PERFORMANCE`` text of nvidia-smi-q_1.txt (14 h of power capping)."""
    doubles.tool("nvidia-smi", SMI_FROM_CAPTURES.format(q=GB10_DATA / "nvidia-smi-q_1.txt"))
    result, _ = run_g4(no_nvml(doubles, "LibraryNotFound").env, seconds=0)
    assert result.status is Status.INFO, result.line()
    assert result.reading("source").value == "nvidia-smi"
    assert result.reading("temperature_max").value == 50.0
    assert result.reading("power_max").value == 15.6
    assert result.reading("power_limit").value is None
    assert "clock-event counters since boot: power cap 14.0 h, thermal 0 s, power brake 0 s" in result.summary
    assert result.reading("sw_power_cap_since_boot").value == 50284.265


def test_nvml_without_counter_fields_reads_them_from_nvidia_smi_q(doubles: Any) -> None:
    """NVML answers the samples but not the clock-event field values: the counters
    nvidia-smi -q -d PERFORMANCE prints on a GB10 (tests/data/gb10/nvidia-smi-q_1.txt:
    14 h of SW power capping) still give the since-boot totals, read once after the sample."""
    doubles.tool("nvidia-smi", SMI_FROM_CAPTURES.format(q=GB10_DATA / "nvidia-smi-q_1.txt"))
    nvml = gb10.nvml(device={"samples": idle_gb10_samples(), "counters": "NotSupported"})
    result, _ = run_g4(doubles.nvml(nvml).env, seconds=0.2)
    assert result.status is Status.INFO, result.line()
    assert result.reading("source").value == "nvml"
    assert "clock-event counters since boot: power cap 14.0 h, thermal 0 s, power brake 0 s" in result.summary
    assert "in the sample" not in result.summary  # one reading: no growth is claimed
    assert result.reading("sw_power_cap_since_boot").value == 50284.265
    assert result.reading("sw_power_cap_in_sample").value is None
    assert any("read from nvidia-smi -q after the sample" in d for d in result.details)


def test_nvidia_smi_fallback_reads_the_h200_tlimit_margin(doubles: Any, h200: Path) -> None:
    doubles.tool(
        "nvidia-smi",
        f"""#!/bin/sh
case "$1" in
  -q) cat {h200 / "nvidia-smi-q.txt"} ;;
  *) cat {h200 / "query_gpu.csv"} ;;
esac
""",
    )
    result, _ = run_g4(no_nvml(doubles).env, seconds=0)
    assert result.status is Status.INFO, result.line()
    assert "T.Limit margin 49 C" in result.summary
    assert "power cap 0 s, thermal 0 s, power brake 0 s" in result.summary


def test_recorded_h200_nvml_counters_zero_is_info(doubles: Any, h200: Path) -> None:
    """tests/data/h200-cu130/nvml_clock_event_counters.txt: all five field ids
    answer 0 on an idle H200."""
    text = (h200 / "nvml_clock_event_counters.txt").read_text()
    ids = {
        74: "sw_power_cap",
        76: "sync_boost",
        269: "sw_thermal_slowdown",
        270: "hw_thermal_slowdown",
        271: "hw_power_brake_slowdown",
    }
    us = {
        ids[int(f)]: int(v)
        for f, v in re.findall(r"^field (\d+) nvmlReturn 0 valueType 3 ullVal (\d+)", text, re.M)
    }
    assert len(us) == 5
    dev = {
        "name": "NVIDIA H200",
        "capability": [9, 0],
        "power_limit_mw": 700000,
        "counters": us,
        "samples": [{"temperature_c": 38, "power_usage_mw": 107190, "clock_event_reasons": 1}],
    }
    result, _ = run_g4(doubles.nvml(gb10.nvml(device=dev)).env, seconds=0)
    assert result.status is Status.INFO, result.line()
    assert "power cap 0 s, thermal 0 s, power brake 0 s" in result.summary
    # the default line says the same in four words, so it fits (it was cut: "SM 345-1980 MHz…")
    short = result.short_line()
    assert short.endswith("; no clock events since boot") and "…" not in short and len(short) <= 120, short


def test_the_short_line_keeps_counters_that_counted() -> None:
    """A GB10 that spent hours power-capped (nvidia-smi_clocks_power_1.txt: 3.0 h
    SW power cap, 1.2 s HW thermal on a working node) keeps the figures in its
    default line; only an all-zero set is said as "no clock events"."""
    samples = series([35, 35], [11.2, 11.2], clock=2522)
    facts = gb10_facts(samples)
    us = {"sw_power_cap": 10_800_000_000, "sw_thermal_slowdown": 0, "hw_thermal_slowdown": 1_200_000,
          "hw_power_brake_slowdown": 0}  # fmt: skip
    facts.counters_before = facts.counters_after = [CounterSet.from_dict({"index": 0, "us": us})]
    short = g4.evaluate(facts, GB10_T).short_line()
    assert "since boot: power cap 3.0 h, thermal 1.2 s, brake 0 s (+0 s in sample)" in short, short
    facts.counters_before = facts.counters_after = [CounterSet.from_dict({"index": 0, "us": dict.fromkeys(us, 0)})]
    assert g4.evaluate(facts, GB10_T).short_line().endswith("; no clock events since boot")


def test_a_long_default_line_drops_the_counters_that_stayed_at_zero() -> None:
    """tests/data/captures/h200-load: an H200 under a bf16 load at its 700 W limit
    (SwPowerCap in every sample, 2.7 h of power cap since boot). Its default line
    was cut before the counters ("SM 1425-1560 MHz…"); now it keeps the one that
    counted."""
    samples = series([57, 58], [689, 697], reasons=4, clock=1560)
    for sample, clock in zip(samples, (1425, 1560), strict=True):
        sample["gpus"][0].update(clock_sm_mhz=clock, tlimit_c=29)
    facts = gb10_facts(samples)
    facts.devices[0].name, facts.devices[0].power_limit_mw = "NVIDIA H200", 700_000
    us = {"sw_power_cap": 9_720_000_000, "sw_thermal_slowdown": 0, "hw_thermal_slowdown": 0,
          "hw_power_brake_slowdown": 0}  # fmt: skip
    facts.counters_before = facts.counters_after = [CounterSet.from_dict({"index": 0, "us": us})]
    short = g4.evaluate(facts, GENERIC_T).short_line()
    assert short.endswith("; since boot: power cap 2.7 h") and len(short) <= 120, short
    # a counter that grew during the sample is no INFO to compact: it is the WARN's finding
    facts.counters_after = [CounterSet.from_dict({"index": 0, "us": {**us, "sw_thermal_slowdown": 1_500_000}})]
    grown = g4.evaluate(facts, GENERIC_T)
    assert grown.short_line().startswith("G4 WARN: SW thermal +1.5 s during the sample; fix: cool it")


@pytest.mark.parametrize("warm", [False, True])
def test_facts_round_trip_through_json_to_the_same_result(warm: bool) -> None:
    temps = [60 + i for i in range(10)] if warm else [45] * 10
    facts = gb10_facts(series(temps, [95, 96] * 5), counters_source="nvml", notes=["NVML: ok"])
    facts.counters_before = [CounterSet.from_dict({"index": 0, "us": {"sw_power_cap": 5, "sw_thermal_slowdown": 0}})]
    facts.counters_after = [CounterSet.from_dict({"index": 0, "us": {"sw_power_cap": 9, "sw_thermal_slowdown": 3_000_000}})]
    again = g4.Facts.from_dict(json.loads(json.dumps(facts.to_dict())))
    assert again == facts
    assert g4.evaluate(again, GB10_T) == g4.evaluate(facts, GB10_T)
    assert g4.evaluate(again, GB10_T).status is Status.WARN


def _lost() -> g4.Facts:
    samples = series([50, 51], [40, 40])
    samples.append({"t": 1.0, "gpus": [{"index": 0, "errors": {"temperature_c": {"name": "GpuIsLost"}}}]})
    return gb10_facts(samples)


@pytest.mark.parametrize(
    ("facts", "status"),
    [
        (gb10_facts(series([45, 45, 46], [11, 11.5, 12])), Status.INFO),
        (gb10_facts(series([80, 85, 88], [90, 91, 90], [0, 0x20, 0x20])), Status.WARN),
        (gb10_facts(series([60 + i for i in range(10)], [95, 96] * 5)), Status.WARN),
        (_lost(), Status.FAIL),
        (make_facts(hung="NVML made no progress for 1 s during 'nvmlInit'"), Status.FAIL),
        (make_facts(missing="NVML unavailable: Driver Not Loaded (DriverNotLoaded)"), Status.SKIP),
    ],
)
def test_every_result_has_a_headline_that_fits_the_short_line(facts: g4.Facts, status: Status) -> None:
    result = g4.evaluate(facts, GB10_T)
    assert result.status is status
    assert result.headline
    assert len(result.short_line()) <= 120 and "…" not in result.short_line(), result.short_line()
    if status in (Status.WARN, Status.FAIL):
        assert result.short_fix and result.short_fix in result.short_line()


@pytest.mark.parametrize(("top", "status"), [(85.0, Status.WARN), (84.9, Status.INFO)])
def test_a_maximum_exactly_at_g4_hot_c_warns_at_or_above(top: float, status: Status) -> None:
    """g4_hot_c (85 C on GB10) is a margin below the 86-87 C trip, and the
    line says "at or above": a sample that reaches it exactly WARNs, one a
    tenth below does not. Power above the flat-power ceiling, no reason bit:
    the heat rule alone decides."""
    result = g4.evaluate(gb10_facts(series([80, 84, top], [110, 111, 110])), GB10_T)
    assert result.status is status, result.line()
    assert result.codes == (["G4.temperature-high"] if status is Status.WARN else [])
    if status is Status.WARN:
        assert "reached 85 C, at or above g4_hot_c = 85 C" in result.summary
        assert result.headline == "GPU 0 at 85 C (warns from 85 C; GB10 trips at 86-87 C)"


@pytest.mark.parametrize(("margin", "status"), [(3, Status.WARN), (4, Status.INFO)])
def test_a_tlimit_margin_exactly_g4_tlimit_margin_c_warns(margin: float, status: Status) -> None:
    """The line says "<= g4_tlimit_margin_c": a T.Limit margin of exactly 3 C
    (the table's default) is about to slow down for heat and WARNs; 4 C is
    not. Cool chip, power above the flat-power ceiling: that rule alone."""
    samples = series([70, 71], [110, 110])
    for s in samples:
        s["gpus"][0]["tlimit_c"] = margin
    result = g4.evaluate(gb10_facts(samples), GB10_T)
    assert result.status is status, result.line()
    assert result.codes == (["G4.tlimit-margin"] if status is Status.WARN else [])
    if status is Status.WARN:
        assert f"T.Limit margin {margin} C (<= g4_tlimit_margin_c = 3 C)" in result.summary
