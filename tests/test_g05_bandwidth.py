"""G5 — bandwidth budget: the budget per profile, the plan and its step-time
floor, the intrusive copy probe's protocol (through the torch double, whose
copies advance a virtual GPU clock at `copy_gbps`) and its refusals, which are
decided before the torch child runs.

Recorded input: tests/data/h200-cu130/nvml_torch_probe.txt (a real H200:
6016-bit bus, 3201 MHz max memory clock, a 1 GiB copy at 4248 GB/s).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_dgx_spark.checks.g05_bandwidth import check as g5
from pytest_dgx_spark.checks.kit import Params
from pytest_dgx_spark.engine import Engine
from pytest_dgx_spark.model import Status
from pytest_dgx_spark.probes.machine import Machine
from pytest_dgx_spark.settings import Settings
from pytest_dgx_spark.thresholds import defaults

from doubles import gb10


def params(profile: str, options: dict[str, Any] | None = None, **override: float) -> Params:
    return Params(profile=profile, thresholds={**defaults(profile), **override}, options=options or {})


GB10_T = params("gb10")
GENERIC_T = params("generic")


def ev(facts: g5.Facts, profile: str = "gb10", *, plan: float | None = None, workload: float | None = None):
    """Evaluate as the engine does: the plan and workload are options, the
    facts go through their JSON round trip."""
    opts = {"planned_bandwidth": plan, "workload_gb": workload}
    again = g5.Facts.from_dict(json.loads(json.dumps(facts.to_dict())))
    return g5.evaluate(again, params(profile, opts))


GIB_KB = 1024 * 1024


def h200_probe(h200: Path) -> dict[str, float]:
    text = (h200 / "nvml_torch_probe.txt").read_text()
    return {
        "bus": int(re.search(r"'mem_bus_width': (\d+)", text).group(1)),  # type: ignore[union-attr]
        "clock": int(re.search(r"'max_mem_clock': (\d+)", text).group(1)),  # type: ignore[union-attr]
        "copy": float(re.search(r"copy GB/s \(r\+w\) ([\d.]+)", text).group(1)),  # type: ignore[union-attr]
    }


# ---------------------------------------------------------------------- budget


def test_h200_theoretical_peak_from_recorded_nvml(h200: Path) -> None:
    rec = h200_probe(h200)
    assert (rec["bus"], rec["clock"]) == (6016, 3201)
    assert g5.theoretical_peak(int(rec["bus"]), int(rec["clock"])) == pytest.approx(4814.4, abs=0.1)
    assert g5.theoretical_peak(None, 3201) is None


def test_gb10_budget_is_the_measured_decode_and_hardware_figures_and_spec() -> None:
    """bandwidth_1.txt (231-234 GB/s read), bandwidth_2.txt (218 GB/s),
    workload_bandwidth_1.txt (dense decode ~160-190 GB/s effective)."""
    b = g5.budget(g5.Facts(), GB10_T)
    assert (b.decode_low, b.decode_high, b.hardware_low, b.hardware_high) == (160.0, 190.0, 218.0, 234.0)
    assert (b.spec, b.healthy, b.high) == (273.0, 218.0, 190.0)
    assert (
        b.text()
        == "160-190 GB/s real-decode budget (hardware 218-234 GB/s, spec 273 GB/s, GB10 LPDDR5X spec)"
    )


def test_generic_budget_is_a_fraction_of_the_nvml_peak(h200: Path) -> None:
    rec = h200_probe(h200)
    facts = g5.Facts(bus_width_bits=int(rec["bus"]), max_mem_clock_mhz=int(rec["clock"]))
    b = g5.budget(facts, GENERIC_T)
    assert b.spec == pytest.approx(4814.4, abs=0.1)
    assert b.high == pytest.approx(0.7 * 4814.4, abs=0.1)
    assert b.healthy == pytest.approx(0.7 * 4814.4, abs=0.1)
    overridden = g5.budget(facts, params("generic", g5_decode_high_gbps=4000.0))
    assert overridden.high == 4000.0


def test_generic_without_nvml_numbers_has_no_budget_and_says_so() -> None:
    result = ev(g5.Facts(), "generic", plan=500.0)
    assert result.status is Status.SKIP
    assert "no budget (NVML gave no memory bus width or clock)" in result.summary
    assert any("g5_decode_high_gbps" in d for d in result.details)


# ---------------------------------------------------------------------- plan


def test_plan_within_the_real_decode_figure_passes_with_the_step_floor() -> None:
    """The planning figure is real dense decode, ~160-190 GB/s (workload_bandwidth_1.txt)."""
    result = ev(g5.Facts(), plan=150.0)
    assert result.status is Status.PASS and result.codes == []
    assert (
        "planned 150 GB/s within the 160-190 GB/s real-decode budget (hardware 218-234 GB/s" in result.summary
    )
    assert "each GB a step moves costs >= 5.26 ms at 190 GB/s" in result.summary
    assert result.headline == "planned 150 GB/s within 160-190 GB/s real decode"


def test_plan_above_the_hardware_figure_warns_with_both_floors() -> None:
    """273 GB/s is the spec; real GB10s measure 218-234 (bandwidth_1.txt, bandwidth_2.txt)."""
    result = ev(g5.Facts(), plan=273.0)
    assert result.status is Status.WARN and result.codes == ["G5.plan-above-budget"]
    assert "planned 273 GB/s > the 218-234 GB/s the hardware moves in a microbenchmark" in result.summary
    assert ">= 5.26 ms at 190 GB/s, not the 3.66 ms the plan assumes" in result.summary
    assert "190 GB/s" in result.fix
    assert result.headline == "planned 273 GB/s > 218-234 GB/s hardware"
    assert result.short_fix == "plan with <= 190 GB/s"
    assert len(result.short_line()) <= 120


def test_plan_between_decode_and_hardware_warns_naming_real_decode() -> None:
    """A copy kernel reaches 218-234 GB/s, a real decode ~160-190 (workload_bandwidth_1.txt)."""
    result = ev(g5.Facts(), plan=210.0)
    assert result.status is Status.WARN and result.codes == ["G5.plan-above-budget"]
    assert "planned 210 GB/s > the 160-190 GB/s real-decode budget" in result.summary
    assert result.headline == "planned 210 GB/s > 160-190 GB/s real decode"


def test_decode_figure_is_overridable() -> None:
    result = g5.evaluate(g5.Facts(), params("gb10", {"planned_bandwidth": 210.0}, g5_decode_high_gbps=215.0))
    assert result.status is Status.PASS
    assert "within the 160-215 GB/s real-decode budget" in result.summary


def test_declared_workload_turns_the_floor_into_seconds_per_step() -> None:
    result = ev(g5.Facts(), plan=150.0, workload=40.0)
    # 40 GiB = 42.95 GB; at 190 GB/s that is 0.226 s
    assert "a step that touches the declared 40 GiB once takes >= 0.226 s at 190 GB/s" in result.summary


def test_only_a_workload_declared_is_info_with_the_floor() -> None:
    result = ev(g5.Facts(), workload=40.0)
    assert result.status is Status.INFO
    assert ">= 0.226 s" in result.summary


def test_nothing_declared_and_not_intrusive_is_info_stating_the_budget() -> None:
    """Issue 8: SKIP means "could not check"; with no plan G5 ran and states the
    budget (was SKIP)."""
    result = ev(g5.Facts())
    assert result.status is Status.INFO and result.codes == ["G5.budget-only"]
    assert result.summary.startswith("160-190 GB/s real-decode budget (hardware 218-234 GB/s, spec 273")
    assert "no planned bandwidth to judge (--spark-planned-bandwidth)" in result.summary
    assert result.short_line() == "G5 INFO: budget 160-190 GB/s decode, 218-234 GB/s hardware"


def test_generic_without_a_budget_or_a_plan_is_info_too() -> None:
    result = ev(g5.Facts(), "generic")
    assert result.status is Status.INFO and result.codes == ["G5.budget-only"]
    assert result.headline == "no bandwidth budget known"


# ---------------------------------------------------------------------- measurement


def measured(gbps: float, **kw: Any) -> g5.Measurement:
    return g5.Measurement.from_dict({
        "gbps": gbps,
        "samples_gbps": [gbps] * 7,
        "buffer_bytes": 1 << 30,
        "iters": 3,
        "gpu_ms": 12.5,
        **kw,
    })


def test_recorded_h200_copy_is_reported_against_budget_and_peak(h200: Path) -> None:
    rec = h200_probe(h200)
    facts = g5.Facts(
        bus_width_bits=int(rec["bus"]),
        max_mem_clock_mhz=int(rec["clock"]),
        intrusive=True,
        measurement=measured(rec["copy"]),
    )
    result = ev(facts, "generic")
    assert result.status is Status.INFO
    assert (
        "measured 4248 GB/s copy (read+write, 2 x 1024 MiB, median of 7) = 88% of the 4814 GB/s"
        in result.summary
    )
    assert result.reading("measured_copy").value == 4248.4


def test_measured_below_the_healthy_floor_warns() -> None:
    """The healthy reference is the hardware figure, 218 GB/s (bandwidth_2.txt;
    was the 180 GB/s budget: 140 GB/s now warns)."""
    facts = g5.Facts(intrusive=True, measurement=measured(120.0))
    result = ev(facts)
    assert result.status is Status.WARN and result.codes == ["G5.copy-low"]
    assert "< 164 GB/s (0.75 x the 218 GB/s healthy figure)" in result.summary
    assert result.headline == "copy 120 GB/s < 164 GB/s healthy floor"
    assert ev(g5.Facts(intrusive=True, measurement=measured(140.0))).codes == ["G5.copy-low"]
    ok = ev(g5.Facts(intrusive=True, measurement=measured(223.7)))
    assert ok.status is Status.INFO
    assert ok.headline == "copy 224 GB/s (healthy >= 164 GB/s)"


def test_plan_above_what_was_measured_warns_even_inside_the_budget() -> None:
    facts = g5.Facts(intrusive=True, measurement=measured(170.0))
    result = ev(facts, plan=185.0)
    assert result.status is Status.WARN and result.codes == ["G5.plan-above-budget"]
    assert "planned 185 GB/s > the measured 170 GB/s copy" in result.summary


def test_hung_copy_fails_as_driver_not_answering() -> None:
    facts = g5.Facts(intrusive=True, probe_hung="the copy probe made no progress for 3 s")
    result = ev(facts)
    assert result.status is Status.FAIL and result.codes == ["G5.probe-hung"]


def test_refusal_with_a_plan_keeps_the_plan_verdict() -> None:
    facts = g5.Facts(intrusive=True, refusal="MemAvailable 2.0 GiB < 6.0 GiB")
    result = ev(facts, plan=150.0)
    assert result.status is Status.PASS
    assert "copy probe refused: MemAvailable 2.0 GiB < 6.0 GiB" in result.summary


# ---------------------------------------------------------------------- through Machine + the torch double


def machine(
    doubles: Any,
    fake_root: Any,
    *,
    meminfo: str | None = None,
    nvml: dict[str, Any] | None = None,
    timeout: float = 5.0,
    **torch: Any,
) -> Machine:
    root = fake_root({"proc/meminfo": meminfo or gb10.meminfo()})
    doubles.nvml(nvml or gb10.nvml()).torch(gb10.torch(**torch))
    # CuPy is the probe's second choice; hide a real one so the torch double decides
    no_cupy = str(Path(__file__).parent / "doubles" / "no_cupy")
    if no_cupy not in doubles.pythonpath:
        doubles.pythonpath.insert(0, no_cupy)
    return Machine(root=root, env=doubles.env, timeout=timeout)


def test_intrusive_probe_measures_through_the_torch_child(doubles: Any, fake_root: Any) -> None:
    m = machine(doubles, fake_root, copy_gbps=201.5)
    engine = Engine(Settings(intrusive=True), m, ["G5"])
    request = engine.torch_request()
    assert request["bandwidth"]["bytes"] == 1024 << 20
    result = engine.run("G5")
    assert result.status is Status.INFO
    assert result.reading("measured_copy").value == pytest.approx(201.5, abs=0.5)
    assert result.reading("copy_samples").value == 7
    assert "= 74% of the 273 GB/s" in result.summary


def test_probe_buffer_is_never_below_512_mib(doubles: Any, fake_root: Any) -> None:
    m = machine(doubles, fake_root)
    t = Settings(intrusive=True, threshold={"g5_probe_buffer_mib": 64.0})
    assert Engine(t, m, ["G5"]).torch_request()["bandwidth"]["bytes"] == 512 << 20


def test_short_memavailable_refuses_before_the_child_runs(doubles: Any, fake_root: Any) -> None:
    m = machine(doubles, fake_root, meminfo=gb10.meminfo(free_gib=2.0, cache_gib=1.0), copy_gbps=200.0)
    engine = Engine(Settings(intrusive=True), m, ["G5"])
    assert "bandwidth" not in engine.torch_request()
    result = engine.run("G5")
    assert result.status is Status.SKIP and result.codes == ["G5.probe-not-run"]
    assert "copy probe refused: MemAvailable" in result.summary
    assert "the probe needs (2 x 1024 MiB buffers + 4 GiB margin)" in result.summary
    assert m.store.peek("torch") is None  # the torch child never started


def test_other_gpu_work_refuses_the_probe(doubles: Any, fake_root: Any) -> None:
    busy = gb10.nvml(device={"compute_procs": [{"pid": 999999, "used_bytes": 30 << 30}]})
    m = machine(doubles, fake_root, nvml=busy)
    engine = Engine(Settings(intrusive=True), m, ["G5"])
    assert "bandwidth" not in engine.torch_request()
    result = engine.run("G5")
    assert result.status is Status.SKIP and result.codes == ["G5.probe-not-run"]
    assert "G6 sees other GPU work (pid 999999 GPU process" in result.summary


def test_discrete_gpu_without_free_memory_refuses(doubles: Any, fake_root: Any) -> None:
    full = gb10.nvml(
        device={
            "name": "NVIDIA H200",
            "capability": [9, 0],
            "memory": {"total": 141 << 30, "free": 1 << 30, "used": 140 << 30},
        }
    )
    result = Engine(Settings(intrusive=True), machine(doubles, fake_root, nvml=full), ["G5"]).run("G5")
    assert result.status is Status.SKIP and result.codes == ["G5.probe-not-run"]
    assert "GPU 0 has 1.0 GiB free" in result.summary


@pytest.mark.parametrize(
    ("torch", "words"),
    [
        ({"available": False}, "torch sees no CUDA device and CuPy is not installed"),
        (
            {"copy_error": "CUDA out of memory. Tried to allocate 1.00 GiB"},
            "RuntimeError: CUDA out of memory",
        ),
        ({"mem_free": 1 << 30}, "the GPU reports 1.0 GiB free"),
        ({"import_error": "libcudart.so.12: cannot open shared object file"}, "torch not importable"),
    ],
)
def test_probe_problems_skip_with_the_reason(
    doubles: Any, fake_root: Any, torch: dict[str, Any], words: str
) -> None:
    result = Engine(Settings(intrusive=True), machine(doubles, fake_root, **torch), ["G5"]).run("G5")
    assert result.status is Status.SKIP and result.codes == ["G5.probe-not-run"]
    assert words in result.summary  # the reason, as the child gave it


def test_copy_that_hangs_fails_within_the_watchdog(doubles: Any, fake_root: Any) -> None:
    m = machine(doubles, fake_root, timeout=0.5, hang={"where": "copy", "seconds": 60})
    start = time.monotonic()
    result = Engine(Settings(intrusive=True, timeout=0.5), m, ["G5"]).run("G5")
    assert result.status is Status.FAIL and result.codes == ["G5.probe-hung"]
    assert "the copy probe made no progress" in result.summary
    assert "'bandwidth'" in result.summary
    assert time.monotonic() - start < 0.5 * 3 + 3


def test_copy_that_crashes_fails_naming_the_signal(doubles: Any, fake_root: Any) -> None:
    m = machine(doubles, fake_root, crash={"where": "copy", "signal": "SIGSEGV"})
    result = Engine(Settings(intrusive=True), m, ["G5"]).run("G5")
    assert result.status is Status.FAIL and result.codes == ["G5.probe-hung"]
    assert "SIGSEGV" in result.summary


def test_plan_and_probe_together_on_gb10(doubles: Any, fake_root: Any) -> None:
    m = machine(doubles, fake_root, copy_gbps=230.0)
    result = Engine(Settings(intrusive=True, planned_bandwidth=190.0), m, ["G5"]).run("G5")
    assert result.status is Status.PASS
    assert "planned 190 GB/s within" in result.summary and "measured 230 GB/s copy" in result.summary


# ---------------------------------------------------------------------- contract and short lines


@pytest.mark.parametrize(
    ("facts", "plan", "status"),
    [
        (g5.Facts(), None, Status.INFO),
        (g5.Facts(), 150.0, Status.PASS),
        (g5.Facts(), 273.0, Status.WARN),
        (g5.Facts(intrusive=True, measurement=measured(120.0)), None, Status.WARN),
        (g5.Facts(intrusive=True, measurement=measured(230.0)), 190.0, Status.PASS),
        (g5.Facts(intrusive=True, refusal="MemAvailable 2.0 GiB < 6.0 GiB"), None, Status.SKIP),
        (g5.Facts(intrusive=True, probe_hung="the copy probe made no progress for 3 s"), None, Status.FAIL),
    ],
)
def test_facts_round_trip_and_every_result_has_a_short_line(
    facts: g5.Facts, plan: float | None, status: Status
) -> None:
    again = g5.Facts.from_dict(json.loads(json.dumps(facts.to_dict())))
    assert again == facts
    opts = params("gb10", {"planned_bandwidth": plan})
    result = g5.evaluate(again, opts)
    assert result == g5.evaluate(facts, opts)
    assert result.status is status
    assert result.headline
    assert len(result.short_line()) <= 120 and "…" not in result.short_line(), result.short_line()
    if status in (Status.WARN, Status.FAIL):
        assert result.short_fix and result.short_fix in result.short_line()


def test_gb10_figures_come_from_the_captures() -> None:
    """The thresholds' defaults are the numbers the captures hold."""
    data = Path(__file__).parent / "data" / "gb10"
    assert "**231–234 GB/s**" in (data / "bandwidth_1.txt").read_text()
    assert "218 GB/s measured" in (data / "bandwidth_2.txt").read_text()
    decode = (data / "workload_bandwidth_1.txt").read_text()
    assert "~4.0-4.2 tok/s" in decode and "40.61 GB/token" in decode
    low, high = 40.61 * 4.0, 40.61 * 4.2  # 162-171 GB/s effective
    t = defaults("gb10")
    assert t["g5_hardware_low_gbps"] == 218.0 and t["g5_hardware_high_gbps"] == 234.0
    assert t["g5_decode_low_gbps"] <= low < high <= t["g5_decode_high_gbps"]


# ---------------------------------------------------------------------- capture figures, through the engine

GB10_DATA = Path(__file__).parent / "data" / "gb10"


def capture_figures() -> dict[str, float]:
    """The figures as the captures print them: bandwidth_1.txt (a saturating-read kernel,
    **231–234 GB/s**), bandwidth_2.txt (218 GB/s measured), workload_bandwidth_1.txt (a dense
    70B decode, ~4.0-4.2 tok/s x 40.61 GB/token, against Spark's 273 GB/s peak)."""
    read = re.search(r"\*\*(\d+)–(\d+) GB/s\*\*", (GB10_DATA / "bandwidth_1.txt").read_text())
    copy = re.search(r"(\d+) GB/s measured", (GB10_DATA / "bandwidth_2.txt").read_text())
    decode = (GB10_DATA / "workload_bandwidth_1.txt").read_text()
    rate = re.search(r"~(\d+\.\d+)-(\d+\.\d+) tok/s", decode)
    per_token = re.search(r"(\d+\.\d+) GB/token", decode)
    peak = re.search(r"Spark's (\d+) GB/s peak", decode)
    assert read and copy and rate and per_token and peak
    return {
        "read_low": float(read.group(1)),
        "read_high": float(read.group(2)),
        "copy": float(copy.group(1)),
        "decode_high": float(rate.group(2)) * float(per_token.group(1)),
        "spec": float(peak.group(1)),
    }


def test_a_plan_at_the_real_decode_rate_passes_through_the_engine(doubles: Any, fake_root: Any) -> None:
    """workload_bandwidth_1.txt: 4.2 tok/s x 40.61 GB/token = 171 GB/s, what a real dense
    decode streams on a GB10: a plan at that figure is within the budget."""
    plan = round(capture_figures()["decode_high"])  # 170.56, as a user would write it
    assert plan == 171
    result = Engine(Settings(planned_bandwidth=plan), machine(doubles, fake_root), ["G5"]).run("G5")
    assert result.status is Status.PASS, result.line()
    assert result.short_line() == "G5 PASS: planned 171 GB/s within 160-190 GB/s real decode"
    assert (result.reading("planned").value, result.reading("decode_high").value) == (171.0, 190.0)


@pytest.mark.parametrize(
    ("figure", "line"),
    [
        (
            "read_high",
            "G5 WARN: planned 234 GB/s > 160-190 GB/s real decode; fix: plan with <= 190 GB/s",
        ),
        (
            "copy",
            "G5 WARN: planned 218 GB/s > 160-190 GB/s real decode; fix: plan with <= 190 GB/s",
        ),
        ("spec", "G5 WARN: planned 273 GB/s > 218-234 GB/s hardware; fix: plan with <= 190 GB/s"),
    ],
)
def test_a_plan_at_a_microbenchmark_or_the_spec_warns_through_the_engine(
    doubles: Any, fake_root: Any, figure: str, line: str
) -> None:
    """bandwidth_1.txt (234 GB/s read kernel) and bandwidth_2.txt (218 GB/s): what the
    hardware moves in a microbenchmark, not what a decode streams; workload_bandwidth_1.txt's
    273 GB/s peak is the spec, above every measurement."""
    plan = capture_figures()[figure]
    result = Engine(Settings(planned_bandwidth=plan), machine(doubles, fake_root), ["G5"]).run("G5")
    assert result.status is Status.WARN and result.codes == ["G5.plan-above-budget"], result.line()
    assert result.short_line() == line


@pytest.mark.parametrize("figure", ["copy", "read_low", "read_high"])
def test_a_copy_at_the_measured_figures_reads_healthy_through_the_engine(
    doubles: Any, fake_root: Any, figure: str
) -> None:
    """The intrusive probe on a GB10 that copies at bandwidth_2.txt's 218 GB/s or
    bandwidth_1.txt's 231-234 GB/s: healthy (INFO, the hardware figure is the reference)."""
    gbps = capture_figures()[figure]
    result = Engine(Settings(intrusive=True), machine(doubles, fake_root, copy_gbps=gbps), ["G5"]).run("G5")
    assert result.status is Status.INFO, result.line()
    assert result.reading("measured_copy").value == pytest.approx(gbps, abs=0.5)
    assert result.short_line() == f"G5 INFO: copy {gbps:.0f} GB/s (healthy >= 164 GB/s)"


def test_a_copy_at_half_the_measured_figure_warns_through_the_engine(doubles: Any, fake_root: Any) -> None:
    """Half of bandwidth_2.txt's 218 GB/s: below 0.75 x that healthy figure, a WARN."""
    gbps = capture_figures()["copy"] / 2
    result = Engine(Settings(intrusive=True), machine(doubles, fake_root, copy_gbps=gbps), ["G5"]).run("G5")
    assert result.status is Status.WARN and result.codes == ["G5.copy-low"], result.line()
    assert result.short_line().startswith("G5 WARN: copy 109 GB/s < 164 GB/s healthy floor")


def test_a_copy_at_exactly_the_healthy_floor_is_healthy() -> None:
    """The floor is 0.75 x the 218 GB/s hardware figure = 163.5 GB/s and the
    line says "healthy >= floor": a copy of exactly 163.5 GB/s is INFO, one a
    little below WARNs."""
    at = ev(g5.Facts(intrusive=True, measurement=measured(163.5)))
    assert at.status is Status.INFO, at.line()
    below = ev(g5.Facts(intrusive=True, measurement=measured(163.4)))
    assert below.status is Status.WARN and below.codes == ["G5.copy-low"], below.line()
    assert "< 164 GB/s (0.75 x the 218 GB/s healthy figure)" in below.summary


def test_a_plan_of_exactly_the_measured_copy_passes() -> None:
    """A plan inside the budget is held to what was measured too: exactly the
    measured 170 GB/s is within it (PASS), a little more is above it (WARN)."""
    facts = g5.Facts(intrusive=True, measurement=measured(170.0))
    at = ev(facts, plan=170.0)
    assert at.status is Status.PASS, at.line()
    assert "planned 170 GB/s within" in at.summary
    above = ev(facts, plan=170.5)
    assert above.status is Status.WARN and above.codes == ["G5.plan-above-budget"], above.line()
    assert "planned 170.5 GB/s > the measured 170 GB/s copy" in above.summary
