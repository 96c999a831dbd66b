"""G4's two rules from issue 22: Xid events since boot (N7) and a stuck low-power state (N5).

N7 is decided on the posted kernel lines (tests/data/gb10/dmesg_xid_1.txt: Xid 119/120 from a
GSP crash; dmesg_xid_2.txt: Xid 13 under vLLM, the service exiting 0; dmesg_xid_4.txt: Xid 13
Illegal Instruction; dmesg_xid_5.txt: Xid 169 with the proprietary modules) planted as
``dev/kmsg`` records under a machine root. N5 is decided on the posted figures of
tests/data/gb10/nvidia-smi_clocks_power_4.txt: 96 % utilisation at 799 MHz and 19.5 W, no
throttle reason (stuck), and 2281 MHz / 92.5 W under the same load after pulling AC power.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_kernel_log import XID_13_ILLEGAL, XID_13_VLLM, XID_119_120, XID_169

from pytest_dgx_spark.checks.g04_thermal import check as g4
from pytest_dgx_spark.checks.kit import Params
from pytest_dgx_spark.checks.record import plain
from pytest_dgx_spark.engine import Engine
from pytest_dgx_spark.model import Status
from pytest_dgx_spark.probes.machine import Machine
from pytest_dgx_spark.settings import Settings
from pytest_dgx_spark.thresholds import defaults

from doubles import gb10

GB10_T = Params(profile="gb10", thresholds=defaults("gb10"))
GENERIC_T = Params(profile="generic", thresholds=defaults("generic"))


def make_facts(**kw: Any) -> g4.Facts:
    """G4's facts from JSON-shaped fields, as a capture rebuilds them (the kernel log: not read)."""
    return g4.Facts.from_dict({"kernel_log_problem": None, **plain(kw)})


def loaded(util: float, clock: float, watts: float, n: int = 6, reasons: int = 0) -> list[dict[str, Any]]:
    """Samples of a GB10 under a steady load (temperature cool, as the post says)."""
    return [
        {"t": i * 0.5, "gpus": [{"index": 0, "temperature_c": 52, "power_usage_mw": int(watts * 1000),
                                 "clock_sm_mhz": clock, "clock_event_reasons": reasons, "utilization_gpu": util}]}
        for i in range(n)
    ]


def facts(samples: list[dict[str, Any]], **kw: Any) -> g4.Facts:
    dev = {"index": 0, "name": "NVIDIA GB10", "power_limit_mw": None, "max_clock_sm_mhz": 3003, "errors": {}}
    kw.setdefault("kernel_log_source", "/dev/kmsg")
    return make_facts(seconds=3.0, devices=[dev], samples=samples, duration_s=3.0, **kw)


def run_g4(root: Path, nvml: dict[str, Any], doubles: Any, seconds: float = 0.3) -> Any:
    doubles.nvml(nvml)
    machine = Machine(env=doubles.env, timeout=5.0, root=root)
    return Engine(Settings(thermal_seconds=seconds, timeout=5.0), machine).run("G4")


def spark_root(tmp_path: Path, kmsg_lines: list[str] | None) -> Path:
    root = tmp_path / "root"
    (root / "dev").mkdir(parents=True)
    (root / "dev" / "nvidiactl").write_bytes(b"")
    if kmsg_lines is not None:
        (root / "dev" / "kmsg").write_text(gb10.kmsg(kmsg_lines))
    return root


# ---------------------------------------------------------------------- N7: Xid since boot, through the machine


def test_the_healthy_kernel_log_is_info_with_its_reading(tmp_path: Path, doubles: Any) -> None:
    result = run_g4(spark_root(tmp_path, [gb10.GPU_FOUND]), gb10.nvml(), doubles)
    assert (result.status, result.codes) == (Status.INFO, []), result.line()
    assert result.reading("kernel_log_source").value == "/dev/kmsg"
    assert result.reading("xid_events").value == 0
    assert "kernel log (/dev/kmsg, 1 records since boot): no Xid" in result.details


def test_a_gsp_crash_fails_with_the_hotplug_and_suspend_fix(tmp_path: Path, doubles: Any) -> None:
    """dmesg_xid_1.txt: Xid 119 then 120 (GSP timeout, GSP task exception)."""
    result = run_g4(spark_root(tmp_path, [gb10.GPU_FOUND, *XID_119_120]), gb10.nvml(), doubles)
    assert (result.status, result.codes) == (Status.FAIL, ["G4.xid-hardware"]), result.line()
    assert "(GSP): Xid 119 x1, Xid 120 x1; latest: Xid 120 at 7.1 s" in result.summary
    assert "pid 9111 python: GSP task exception: load access fault" in result.summary
    assert "options nvidia NVreg_EnableHotplugDetection=0" in result.fix
    assert "nvidia-suspend, nvidia-hibernate and nvidia-resume" in result.fix
    assert result.short_line() == (
        "G4 FAIL: Xid 120 since boot (GSP fault); fix: NVreg_EnableHotplugDetection=0; disable nvidia-suspend; reboot"
    )
    assert result.reading("xid_hardware").value == 2
    # -v lists them, the latest first
    listed = [d for d in result.details if d.startswith("Xid")]
    assert listed[0].startswith("Xid 120 at 7.1 s (PCI:000f:01:00), pid 9111 python") and listed[1].startswith("Xid 119")


def test_xid_169_fails_with_the_open_kernel_modules_fix(tmp_path: Path, doubles: Any) -> None:
    """dmesg_xid_5.txt: proprietary 580.173.02 modules on GB10."""
    result = run_g4(spark_root(tmp_path, XID_169), gb10.nvml(), doubles)
    assert (result.status, result.codes) == (Status.FAIL, ["G4.xid-hardware"])  # the finding, by its code
    assert "open kernel modules" in result.fix
    assert result.short_fix == "install the open kernel modules; reboot"


def test_xid_169_with_no_gpu_answering_fails_instead_of_skipping(tmp_path: Path, doubles: Any) -> None:
    """The same post: "nvidia-smi hanging and then reporting no devices": no GPU to sample, and
    the kernel log says why."""
    result = run_g4(spark_root(tmp_path, XID_169), {"init_error": "DriverNotLoaded"}, doubles)
    assert (result.status, result.codes) == (Status.FAIL, ["G4.xid-hardware"]), result.line()
    assert "Xid 169 x1" in result.summary
    assert "open kernel modules" in result.fix


def test_application_xids_warn_naming_the_process_and_counting(tmp_path: Path, doubles: Any) -> None:
    """dmesg_xid_2.txt: 91 Xid 13 in one second and one Xid 43 (the line names no process)."""
    lines = [gb10.GPU_FOUND, *XID_13_VLLM * 91, "NVRM: Xid (PCI:000f:01:00): 43, pid=1977, name=vllm, Ch 00000010"]
    result = run_g4(spark_root(tmp_path, lines), gb10.nvml(), doubles)
    assert (result.status, result.codes) == (Status.WARN, ["G4.xid-application"]), result.line()
    assert "(pid 1977 vllm): Xid 13 x91, Xid 43 x1; latest: Xid 43" in result.summary
    assert "update or patch the kernel path" in result.fix and "a service may still exit 0" in result.fix
    assert result.reading("xid_application").value == 92
    assert "kernel log (/dev/kmsg, 93 records since boot): 92 Xid events (application 92); latest first:" in result.details
    assert "and 82 earlier Xid events" in result.details


def test_an_xid_13_without_a_process_says_it_is_not_named() -> None:
    """dmesg_xid_4.txt: ``Xid (PCI:000f:01:00): 13, Graphics SM Warp Exception: Illegal Instruction Parameter``."""
    f = facts(loaded(0, 2522, 11), xids=[{"code": 13, "pci": "PCI:000f:01:00", "pid": None, "name": None,
                                          "message": XID_13_ILLEGAL[0].split("13, ", 1)[1], "seq": 9, "t": 3.0}],
              xid_counts={"13": 1}, kernel_log_records=9)
    result = g4.evaluate(f, GB10_T)
    assert result.codes == ["G4.xid-application"]
    assert result.headline == "Xid 13 since boot (the process not named in the line)"


def test_an_unclassified_xid_warns_with_the_catalogue() -> None:
    f = facts(loaded(0, 2522, 11), xids=[{"code": 31, "pci": "p", "pid": None, "name": None, "message": "m", "seq": 1, "t": 1.0},
                                         {"code": 999, "pci": "p", "pid": None, "name": None, "message": "m", "seq": 2, "t": 2.0}],
              xid_counts={"31": 1, "999": 1})
    result = g4.evaluate(f, GB10_T)
    assert (result.status, result.codes) == (Status.WARN, ["G4.xid-application", "G4.xid-other"])
    assert "Xid catalogue" in result.fix


def test_an_unreadable_kernel_log_is_a_detail_never_a_verdict() -> None:
    how = ("the kernel log is not readable as this user (dmesg: dmesg: read kernel buffer failed: Operation not permitted); "
           "allow it: `sudo sysctl kernel.dmesg_restrict=0`, or run as root, or add the user to the `adm` or "
           "`systemd-journal` group for journalctl")
    result = g4.evaluate(facts(loaded(0, 2522, 11), kernel_log_source=None, kernel_log_problem=how), GB10_T)
    assert result.status is Status.INFO
    assert f"Xid events since boot not read: {how}" in result.details
    assert result.reading("kernel_log_source").value == "none"


def test_xid_facts_round_trip_through_json() -> None:
    f = facts(loaded(96, 799, 19.5), xids=[{"code": 120, "pci": "p", "pid": 1, "name": "python", "message": "m", "seq": 2, "t": 1.0}],
              xid_counts={"120": 1})
    again = g4.Facts.from_dict(json.loads(json.dumps(f.to_dict())))
    assert again == f and g4.evaluate(again, GB10_T) == g4.evaluate(f, GB10_T)


def test_a_capture_without_the_kernel_log_facts_replays_saying_so() -> None:
    old = facts(loaded(0, 2522, 11)).to_dict()
    for name in g4.Facts.NOT_CAPTURED:
        old.pop(name)
    result = g4.evaluate(g4.Facts.from_dict(old), GB10_T)
    assert result.status is Status.INFO
    assert "Xid events since boot not read: not in this capture (written before G4 read the kernel log)" in result.details


# ---------------------------------------------------------------------- N5: stuck low-power state


def test_the_posted_stuck_state_fails_with_the_power_brick_fix() -> None:
    """96 % utilisation, 799 MHz, 19.5 W, no throttle reason (nvidia-smi_clocks_power_4.txt)."""
    result = g4.evaluate(facts(loaded(96, 799, 19.5)), GB10_T)
    assert (result.status, result.codes) == (Status.FAIL, ["G4.low-power-stuck"]), result.line()
    assert "SM clock median 799 MHz, power median 19.5 W, both under the low-power gate (1400 MHz, 30 W)" in result.summary
    assert "unplug the power brick from the wall and from the Spark, wait 60 s" in result.fix
    assert result.short_line() == "G4 FAIL: stuck low-power state: 799 MHz, 19.5 W at 96 % load; fix: unplug the power brick (wall + Spark), wait 60 s"
    assert result.reading("loaded_sm_clock_median").value == 799 and result.reading("utilization_max").value == 96


def test_the_same_load_after_pulling_ac_power_passes() -> None:
    """After the full AC removal: 2281 MHz, 92.5 W (same post)."""
    result = g4.evaluate(facts(loaded(96, 2281, 92.5)), GB10_T)
    assert (result.status, result.codes) == (Status.INFO, []), result.line()
    assert any(d.endswith("SM clock median 2281 MHz, power median 92.5 W: no stuck low-power state") for d in result.details)


def test_an_idle_gpu_cannot_tell_and_says_so() -> None:
    result = g4.evaluate(facts(loaded(3, 799, 11)), GB10_T)
    assert result.status is Status.INFO
    assert "GPU: not under load (utilisation max 3 % < g4_low_power_util_pct = 80 %): cannot tell a stuck low-power state from an idle GPU" in result.details


def test_no_utilisation_reading_is_a_detail() -> None:
    samples = loaded(96, 799, 19.5)
    for s in samples:
        del s["gpus"][0]["utilization_gpu"]
    result = g4.evaluate(facts(samples), GB10_T)
    assert result.status is Status.INFO
    assert "GPU: utilisation not read (nvml): a stuck low-power state was not judged" in result.details


def test_a_heat_reason_explains_a_low_clock_and_is_not_the_stuck_state() -> None:
    result = g4.evaluate(facts(loaded(96, 799, 19.5, reasons=0x40)), GB10_T)
    assert result.status is Status.WARN and "G4.low-power-stuck" not in result.codes


@pytest.mark.parametrize(("name", "value", "status"), [("g4_low_power_clock_mhz", 700, Status.INFO),
                                                        ("g4_low_power_w", 19, Status.INFO),
                                                        ("g4_low_power_util_pct", 97, Status.INFO),
                                                        ("g4_low_power_clock_mhz", 800, Status.FAIL)])
def test_the_gate_thresholds_are_configurable(name: str, value: float, status: Status) -> None:
    params = Params(profile="gb10", thresholds={**defaults("gb10"), name: value})
    result = g4.evaluate(facts(loaded(96, 799, 19.5)), params)
    assert (result.status, result.codes) == (status, ["G4.low-power-stuck"] if status is Status.FAIL else [])


@pytest.mark.parametrize(("util", "status"), [(80, Status.FAIL), (80.0, Status.FAIL), (79.9, Status.INFO)])
def test_exactly_the_utilisation_gate_is_under_load(util: float, status: Status) -> None:
    """Issue 34 item 16: ``g4_low_power_util_pct`` (80 %) is "at least": 80 % is under load."""
    result = g4.evaluate(facts(loaded(util, 799, 19.5)), GB10_T)
    assert result.status is status, result.line()
    assert result.reading("loaded_samples").value == (6 if status is Status.FAIL else 0)


def test_the_generic_profile_leaves_the_gb10_rule_off() -> None:
    """An H200 at 450 MHz idle or any non-GB10 GPU: the PD state is GB10's."""
    result = g4.evaluate(facts(loaded(96, 799, 19.5)), GENERIC_T)
    assert result.status is Status.INFO and result.reading("loaded_samples") is None


def test_nvml_utilisation_reaches_the_rule_through_the_child(tmp_path: Path, doubles: Any) -> None:
    samples = [{"temperature_c": 52, "power_usage_mw": 19500, "clock_sm_mhz": 799, "utilization_gpu": 96}] * 4
    result = run_g4(spark_root(tmp_path, [gb10.GPU_FOUND]), gb10.nvml(device={"samples": samples}), doubles)
    assert (result.status, result.codes) == (Status.FAIL, ["G4.low-power-stuck"]), result.line()
    assert result.headline == "stuck low-power state: 799 MHz, 19.5 W at 96 % load"


def test_our_own_resource_limit_with_an_old_hardware_xid_stays_a_skip() -> None:
    """Issue 34 item 16: a limit of this box (``ulimit -u``) stopped the sampling: G4 judged nothing
    about the GPU, so an old hardware Xid in the kernel log is a detail, not the FAIL it is when no
    GPU answers (``test_xid_169_with_no_gpu_answering_fails_instead_of_skipping``)."""
    xid = {"code": 120, "pci": "PCI:000f:01:00", "pid": 7, "name": "python", "message": "m", "seq": 1, "t": 1.0}
    limited = make_facts(seconds=3.0, samples=[], missing=f"{g4.LIMITED}can't start a new thread",
                       kernel_log_source="/dev/kmsg", xids=[xid], xid_counts={"120": 1})
    result = g4.evaluate(limited, GB10_T)
    assert (result.status, result.codes) == (Status.SKIP, ["G4.resource-limit"]), result.line()
    assert result.headline == "not checked (resource limit)"
    assert any(d.startswith("Xid 120 at 1.0 s") for d in result.details)
    gone = g4.evaluate(make_facts(seconds=3.0, samples=[], missing="NVML: LibraryNotFound", kernel_log_source="/dev/kmsg",
                                xids=[xid], xid_counts={"120": 1}), GB10_T)
    assert (gone.status, gone.codes) == (Status.FAIL, ["G4.xid-hardware"]), gone.line()  # the Xid is why


# ---------------------------------------------------------------------- --spark-xid-class


def _one(code: int) -> g4.Facts:
    return facts(loaded(0, 2522, 11), xids=[{"code": code, "pci": "PCI:000f:01:00", "pid": 7, "name": "python",
                                             "message": "m", "seq": 1, "t": 1.0}], xid_counts={str(code): 1})


@pytest.mark.parametrize(("code", "chosen", "status", "found"), [
    (13, "ignore", Status.INFO, ""), (109, "hardware", Status.FAIL, "G4.xid-hardware"),
    (120, "application", Status.WARN, "G4.xid-application"), (120, None, Status.FAIL, "G4.xid-hardware"),
])
def test_an_xid_class_given_replaces_the_shipped_one(code: int, chosen: str | None, status: Status, found: str) -> None:
    params = GB10_T.replace(options={"xid_class": {str(code): chosen}} if chosen else {})
    result = g4.evaluate(_one(code), params)
    assert (result.status, result.code) == (status, found), result.line()
    assert any(d.startswith(f"Xid {code} at 1.0 s") for d in result.details)


def test_the_xid_class_option_reaches_g4_through_settings_and_ini(spark_env: Any) -> None:
    from pytest_dgx_spark.options import BY_NAME
    from pytest_dgx_spark.settings import parse_value

    given = parse_value(BY_NAME["xid-class"], ["119=application 43=IGNORE", "0109=hardware"], "ini", Path("."))
    assert given == {"119": "application", "43": "ignore", "109": "hardware"}
    params = Params.from_settings(Settings(xid_class=given), "gb10")
    assert g4.evaluate(_one(119), params).codes == ["G4.xid-application"]
    assert Params.from_dict(json.loads(json.dumps(params.to_dict()))).option("xid_class") == given


def test_a_user_clock_cap_under_load_is_not_the_stuck_state() -> None:
    """nvidia-smi_clocks_power_2.txt: a GB10 capped with ``-lgc 300,2000`` runs 1989 MHz at
    36-37 W under 95 % load: above both gates, no FAIL."""
    result = g4.evaluate(facts(loaded(95, 1989, 36.5)), GB10_T)
    assert (result.status, result.codes) == (Status.INFO, []), result.line()
    assert any(d.endswith("SM clock median 1989 MHz, power median 36.5 W: no stuck low-power state") for d in result.details)


def test_no_gpu_and_no_device_node_reads_no_kernel_log(tmp_path: Path, doubles: Any) -> None:
    """A machine without NVIDIA's driver has no Xid to read, and journalctl would cost it up to a second."""
    root = tmp_path / "root"
    (root / "dev").mkdir(parents=True)
    (root / "dev" / "kmsg").write_text(gb10.kmsg(XID_169))
    result = run_g4(root, {"init_error": "DriverNotLoaded"}, doubles)
    assert result.status is Status.SKIP, result.line()
    assert not any("Xid" in d or "kernel log" in d for d in result.details)
