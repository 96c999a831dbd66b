"""Faults of the GPU side, injected for real, through a whole pytest run.

The checks' own tests (tests/test_g04_thermal.py, test_g01_cuda_abi.py ...)
prove each check decides right on a fault. These run the plugin the way a
user does, so they also prove what only a whole run can: no INTERNALERROR,
no traceback, every affected check's exact line, each within
``--spark-timeout`` plus a small margin, and a hung child's whole process
group gone afterwards.

* ``nvidia-smi`` is a real script on PATH that hangs (with a grandchild),
  exits non-zero, or prints ``[N/A]``, ``[Not Supported]``, an empty line or
  only its header — while NVML is unusable, so G4 and G6 fall back to it;
* NVML (the pynvml double raising the real binding's error classes) is
  missing, has no driver, answers ``Unknown``, or loses the GPU mid-sample;
* the one torch child really dies of SIGSEGV or SIGABRT, really hangs,
  prints garbage or half a line.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from laterchecks import without_later

from pytest_dgx_spark import catalog

from doubles import gb10
from doubles.procs import alive, group_gone, live_members
from doubles.spark_scene import Scene, assert_clean, run_cli, run_plugin, section

TIMEOUT = 1.0
#: start-up of a child, the reap of a killed group, a loaded CI box
MARGIN = 1.5
DRIVER_FIX = (
    "check `dmesg | grep -i -e NVRM -e Xid` (Xid 79: fallen off the bus); a wedged driver needs a "
    "reboot (on GB10 a full AC power cycle if it persists)"
)


def preflight(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, scene: Scene, *args: str
) -> tuple[Any, dict[str, Any], float]:
    """One ``pytest --spark-preflight`` run: (result, env-report, wall seconds)."""
    report = scene.base / "env-report.json"
    start = time.monotonic()
    result = run_plugin(
        pytester,
        monkeypatch,
        scene,
        ["--timeout", str(TIMEOUT), "--offline", "--report", str(report), *args],
        "-v",  # the whole lines: a fault's reason is the point here
    )
    took = time.monotonic() - start
    assert_clean(result.stdout.str(), result.stderr.str())
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), result.stdout.str()
    return result, json.loads(report.read_text()), took


# --------------------------------------------------------------------------- nvidia-smi

SMI_HANG = """#!/bin/sh
echo $$ >> {pids}
sleep 30 &
echo $! >> {pids}
wait
"""

#: what G6 makes of a process nvidia-smi lists without memory (GB10 in a container)
SMI_G6_NA = (
    "G6 WARN: 1 other GPU process, capped at <= 0.5 or small: pid 4242 GPU process (python3, no cap, "
    "memory [N/A]) [nvidia-smi --query-compute-apps]; fix: a small job can share the pool with capped servers "
    "(the seed ran a <4 GB LoRA next to vLLM at 0.5); check G3's headroom, and stop them before a run that "
    "needs the whole pool"
)

SMI_FAULTS = {
    "hang": SMI_HANG,
    "exit-9": """#!/bin/sh
echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running."
exit 9
""",
    "exit-255": """#!/bin/sh
echo "Unable to determine the device handle for GPU0000:0F:01.0: Unknown Error" >&2
exit 255
""",
    "n/a": """#!/bin/sh
case "$*" in
  *compute-apps*) echo "4242, python3, [N/A]" ;;
  *) echo "0, NVIDIA GB10, [N/A], [N/A], [N/A], [N/A], [N/A], [N/A]" ;;
esac
""",
    "not-supported": """#!/bin/sh
case "$*" in
  *compute-apps*) echo "4242, python3, [Not Supported]" ;;
  *) echo "0, NVIDIA GB10, 45, [Not Supported], [Not Supported], 2405, 3003, [Not Supported]" ;;
esac
""",
    "empty-line": """#!/bin/sh
echo
""",
    "header-only": """#!/bin/sh
case "$*" in
  *compute-apps*) echo "pid, process_name, used_gpu_memory [MiB]" ;;
  *) echo "index, name, temperature.gpu, power.draw [W], enforced.power.limit [W], clocks.current.sm [MHz], clocks.max.sm [MHz], clocks_event_reasons.active" ;;
esac
""",
}


#: G6 when neither NVML nor nvidia-smi gives a GPU process list on a machine that has a GPU
G6_BLIND = (
    "G6 WARN: GPU process list unreadable (NVML and nvidia-smi did not answer, see G4); the process table "
    "shows no inference server or trainer, but another program holding GPU memory would not show; "
    "fix: see G4: a driver that does not answer is the first problem; rerun once nvidia-smi answers"
)

#: the checks a run of G4 and G6 alone leaves out
OTHERS = len(catalog.IDS) - 2
#: per fault: G4's line, G6's line, the verdict
SMI_EXPECTED: dict[str, tuple[str, str, str]] = {
    "hang": (
        f"G4 FAIL: driver not answering: nvidia-smi did not answer within {TIMEOUT} s (killed); fix: {DRIVER_FIX}",
        G6_BLIND,
        f"verdict: blocked (G4 failed; 1 FAIL, 1 WARN, {OTHERS} not run)",
    ),
    "exit-9": (
        "G4 SKIP: no NVIDIA GPU: nvidia-smi exited 9: NVIDIA-SMI has failed because it couldn't communicate "
        "with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running. (NVML: "
        "NVML unavailable: NVML Shared Library Not Found (LibraryNotFound))",
        "G6 SKIP: no NVIDIA GPU to contend for (NVML unavailable: NVML Shared Library Not Found (LibraryNotFound)); "
        "the process table shows no inference server or trainer",
        f"verdict: ready-with-warnings (G4, G6 skipped; 2 SKIP, {OTHERS} not run)",
    ),
    "exit-255": (
        "G4 FAIL: GPU/driver not answering: nvidia-smi exited 255: Unable to determine the device handle for "
        f"GPU0000:0F:01.0: Unknown Error; fix: {DRIVER_FIX}",
        G6_BLIND,
        f"verdict: blocked (G4 failed; 1 FAIL, 1 WARN, {OTHERS} not run)",
    ),
    "n/a": (
        "G4 INFO: GPU 0 NVIDIA GB10: [N/A], [N/A] (limit [N/A]), SM [N/A]; clock-event reasons [N/A]; "
        "sampled 0.5 s (nvidia-smi)",
        SMI_G6_NA,
        f"verdict: ready-with-warnings (1 WARN, 1 INFO, {OTHERS} not run)",
    ),
    "not-supported": (
        "G4 INFO: GPU 0 NVIDIA GB10: 45 C, [N/A] (limit [N/A]), SM 2405 MHz; clock-event reasons [N/A]; "
        "sampled 0.5 s (nvidia-smi)",
        SMI_G6_NA,
        f"verdict: ready-with-warnings (1 WARN, 1 INFO, {OTHERS} not run)",
    ),
    "empty-line": (
        "G4 SKIP: no NVIDIA GPU: nvidia-smi answered but listed no GPU (NVML: NVML unavailable: NVML Shared "
        "Library Not Found (LibraryNotFound))",
        "G6 PASS: no other GPU process [nvidia-smi --query-compute-apps]",
        f"verdict: ready-with-warnings (G4 skipped; 1 PASS, 1 SKIP, {OTHERS} not run)",
    ),
    "header-only": (
        "G4 SKIP: no NVIDIA GPU: nvidia-smi answered but listed no GPU (NVML: NVML unavailable: NVML Shared "
        "Library Not Found (LibraryNotFound))",
        "G6 PASS: no other GPU process [nvidia-smi --query-compute-apps]",
        f"verdict: ready-with-warnings (G4 skipped; 1 PASS, 1 SKIP, {OTHERS} not run)",
    ),
}


@pytest.mark.parametrize("fault", list(SMI_FAULTS))
def test_nvidia_smi_faults_through_pytest(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, scene: Scene, fault: str
) -> None:
    """NVML unusable, so G4 and G6 ask nvidia-smi, which misbehaves: each gets
    its exact line (FAIL "driver not answering" for the hang, SKIP or INFO with
    the reason otherwise), in bounded time; a hung nvidia-smi is killed with
    its whole process group (the ``sleep`` it started included)."""
    pids = scene.base / "smi-pids"
    scene.tool("nvidia-smi", SMI_FAULTS[fault].format(pids=pids))
    scene.nvml = {"init_error": "LibraryNotFound"}
    result, report, took = preflight(
        pytester, monkeypatch, scene, "--only", "G4,G6", "--thermal-seconds", "0.5"
    )

    g4, g6, verdict = SMI_EXPECTED[fault]
    assert section(result.outlines) == [g4, g6, verdict]
    assert all(t <= TIMEOUT + MARGIN for t in report["timings"].values()), report["timings"]
    # never the hung tool's 30 s sleep: the whole run (a pytest start included, slow on a loaded box)
    # ends well before it; the checks' own bound is the timings above
    assert took < 15, f"the run took {took:.1f} s: something waited on the hung nvidia-smi"
    if fault == "hang":
        started = [int(p) for p in pids.read_text().split()]
        # G4's query started a shell and its sleep; G6 did not ask the wedged driver again (issue 34 item 13)
        assert len(started) == 2, started
        for shell in started[0::2]:  # nvidia-smi led its own group, its sleep in it
            assert group_gone(shell), f"nvidia-smi's group {shell} still has {live_members(shell)}"


#: nvidia-smi answering with numbers out of any range (a sibling of issue 12.7:
#: a tool's output is data, as a header is): an infinite temperature, NaN power,
#: a 26-digit clock, 1e400 (inf) as the GPU index, a counter of 42 digits, a used
#: memory of 1e999 MiB and a 23-digit pid
SMI_ABSURD = r"""#!/bin/sh
q=""; apps=""
for a in "$@"; do case "$a" in -q) q=1 ;; --query-compute-apps=*) apps=1 ;; esac; done
if [ -n "$apps" ]; then
  echo "99999999999999999999999, python3, 1e999"
  echo "4242, python3, 1e999"
  exit 0
fi
if [ -n "$q" ]; then
  printf '%s\n' "GPU 0000000F:01:00.0" "    Clocks Event Reasons Counters" \
    "        SW Power Capping                  : 1e999 us" \
    "        HW Thermal Slowdown               : 999999999999999999999999999999999999999999 us" \
    "        HW Power Braking                  : {digits400} us" \
    "    Temperature" "        GPU T.Limit Temp                  : -1e999 C"
  exit 0
fi
echo "{query}"
"""
#: the --query-gpu row: every number out of range, or sane ones (so the counters are read and shown)
ABSURD_ROW = "1e400, NVIDIA GB10, 1e999, nan, -inf, 99999999999999999999999999, 1e400, 0x0000000000000000"
SANE_ROW = "0, NVIDIA GB10, 45, 12.5, [N/A], 2405, 3003, 0x0000000000000000"


@pytest.mark.parametrize("row", [ABSURD_ROW, SANE_ROW], ids=["absurd-query", "absurd-counters"])
def test_nvidia_smi_numbers_out_of_any_range_are_unknown_not_a_crash(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, scene: Scene, row: str
) -> None:
    """G4 and G6 crashed on them ("OverflowError: cannot convert float infinity
    to integer"), each a FAIL "the check itself crashed". Now a value no GPU
    reports is an error reading, named (G4 judges a GPU that answers only
    errors as it judged unparseable answers: the driver is not answering
    sanely), and an impossible pid or memory figure is no process or [N/A]."""
    scene.tool("nvidia-smi", SMI_ABSURD.replace("{query}", row).replace("{digits400}", "9" * 400))
    scene.nvml = {"init_error": "LibraryNotFound"}
    result, _, _ = preflight(pytester, monkeypatch, scene, "--only", "G4,G6", "--thermal-seconds", "0.5")
    g4, g6, _ = section(result.outlines)
    assert "crashed" not in g4 + g6, (g4, g6)
    if row == ABSURD_ROW:
        assert g4 == (
            "G4 FAIL: GPU/driver stopped answering: GPU 0 (NVIDIA GB10) answered errors only (clock_sm_mhz: "
            f"OutOfRange, power_usage_mw: OutOfRange, temperature_c: OutOfRange); fix: {DRIVER_FIX}"
        )
    else:  # the counters of 42 and 400 digits and 1e999 are unknown (400 digits: OverflowError in us / 1e6)
        assert g4 == (
            "G4 INFO: GPU 0 NVIDIA GB10: 45 C, 12.5 W (limit [N/A]), SM 2405 MHz; no clock-event reason; "
            "sampled 0.5 s (nvidia-smi)"
        )
    assert g6.startswith("G6 WARN: 1 other GPU process, capped at <= 0.5 or small: pid 4242 GPU process "
                         "(python3, no cap, memory [N/A])"), g6


# --------------------------------------------------------------------------- NVML

G2_PASS = "G2 PASS: flash-attn is not installed: attention runs on PyTorch SDPA"
G3_INFO = (
    "G3 INFO: MemAvailable 112.8 GiB of 121.7 GiB (MemFree 96.0, page cache 17.2, swap free 16.0 GiB); "
    "{nvml}no workload declared (--spark-workload-gb)"
)
G3_NA = "NVML memory [N/A] (NotSupported), as on GB10's unified memory; "
#: nothing declared: G5 ran and states its budget (issue 8: INFO, not SKIP)
G5_INFO = (
    "G5 INFO: {budget}; no planned bandwidth to judge (--spark-planned-bandwidth) and no measurement "
    "(--spark-intrusive)"
)
GB10_BUDGET = "160-190 GB/s real-decode budget (hardware 218-234 GB/s, spec 273 GB/s, GB10 LPDDR5X spec)"
NO_BUDGET = "no budget (NVML gave no memory bus width or clock)"
#: a healthy GB10 torch: its sm_120 cubins run on 12.1 (issue 8: was a WARN)
G7_PASS = (
    "G7 PASS: NVIDIA GB10 is SM121 (12.1); torch 2.11.0+cu130 arch list {archs}: its sm_120 cubins run on 12.1; "
    "TORCH_CUDA_ARCH_LIST unset; no NVFP4 kernel library installed (vLLM, FlashInfer, TensorRT-LLM)"
)
#: the torch child died before its arch list: G7 could not judge torch (INFO, not PASS)
G7_UNKNOWN = (
    "G7 INFO: NVIDIA GB10 is SM121 (12.1); torch arch list {archs}; TORCH_CUDA_ARCH_LIST unset; no NVFP4 "
    "kernel library installed (vLLM, FlashInfer, TensorRT-LLM)"
)
STOCK_ARCHS = "sm_80, sm_90, sm_100, sm_110, sm_120"
#: G4 read through the GB10 double's nvidia-smi (tests/data/gb10/nvml_memory_1.txt's 35 C and
#: 11.17 W, nvidia-smi_clocks_power_1.txt's 2522 MHz and counters)
G4_SMI_HEAD = (
    "G4 INFO: GPU 0 NVIDIA GB10: 35 C, 11.2 W (limit [N/A]), SM 2522 MHz; no clock-event reason; "
    "clock-event counters since boot: power cap 3.0 h, thermal 1.2 s, power brake 0 s; "
    "slowdown +0 s in the sample; "
)
G8_OFFLINE = "G8 SKIP: offline: GitHub not contacted, playbook issues not checked"
G9_PASS = "G9 PASS: container: Docker container (/.dockerenv); no training stack installed; declared requirements hold"
#: a single node with nothing multi-node: PASS (issue 8: SKIP means "could not check"), was SKIP
G10_SKIP = (
    "G10 PASS: single node: no launcher environment (WORLD_SIZE, NNODES, SLURM_NNODES), no tensor "
    "parallelism or node count (no config found under {root}), no training/serving process with those flags"
)


def g1_pass(driver: str, gpu: str = "NVIDIA GB10") -> str:
    return (
        f"G1 PASS: torch 2.11.0+cu130 (CUDA 13.0), {driver}; no extension module links a CUDA runtime; "
        f"tiny kernel ran on {gpu}; 0 shared objects scanned"
    )


NO_LIB = "NVML unavailable: NVML Shared Library Not Found (LibraryNotFound)"
NO_DRIVER = "NVML unavailable: Driver Not Loaded (DriverNotLoaded)"
UNKNOWN_FIELDS = (
    "temperature_c",
    "power_usage_mw",
    "clock_sm_mhz",
    "clock_event_reasons",
    "name",
    "capability",
)
LOST_SAMPLES = [{"temperature_c": 61, "power_usage_mw": 92000}] * 20

#: fault -> (the NVML scenario, whether GB10's nvidia-smi is on PATH)
NVML_FAULTS: dict[str, tuple[dict[str, Any], bool]] = {
    # nvidia-ml-py installed but libnvidia-ml.so.1 absent (a container without the
    # driver's libraries mounted); nvidia-smi there and answering as a GB10 does
    "library-missing": ({"init_error": "LibraryNotFound"}, True),
    "driver-not-loaded": ({"init_error": "DriverNotLoaded"}, False),
    "unknown": (
        gb10.nvml(device={**dict.fromkeys(UNKNOWN_FIELDS, "Unknown"), "compute_procs": "Unknown"}),
        False,
    ),
    "gpu-lost": (gb10.nvml(device={"samples": LOST_SAMPLES, "lost_after": 2}), False),
}


def nvml_expected(fault: str, root: Path) -> list[str]:
    """All ten lines of a GB10 whose NVML has ``fault`` (G8 offline, nothing declared)."""
    g7 = G7_PASS.format(archs=STOCK_ARCHS)
    tail = [G8_OFFLINE, G9_PASS, G10_SKIP.format(root=root)]
    if fault == "library-missing":
        return [
            g1_pass("driver CUDA version unknown"),
            G2_PASS,
            G3_INFO.format(nvml=""),
            G4_SMI_HEAD +
            "sampled 0.3 s (nvidia-smi)",
            G5_INFO.format(budget=NO_BUDGET),
            "G6 PASS: no other GPU process [nvidia-smi --query-compute-apps]",
            f"G7 SKIP: no NVIDIA GPU found ({NO_LIB}): NVFP4 on SM121 does not apply",
            *tail,
            "verdict: ready-with-warnings (G7 skipped and G8 skipped by choice; 5 PASS, 2 SKIP, 3 INFO)",
        ]
    if fault == "driver-not-loaded":
        return [
            g1_pass("driver CUDA version unknown"),
            G2_PASS,
            G3_INFO.format(nvml=""),
            f"G4 SKIP: no NVIDIA GPU: {NO_DRIVER}; nvidia-smi: not found on PATH",
            G5_INFO.format(budget=NO_BUDGET),
            f"G6 SKIP: no NVIDIA GPU to contend for ({NO_DRIVER}); the process table shows no inference server "
            "or trainer",
            f"G7 SKIP: no NVIDIA GPU found ({NO_DRIVER}): NVFP4 on SM121 does not apply",
            *tail,
            "verdict: ready-with-warnings (G4, G6, G7 skipped and G8 skipped by choice; 4 PASS, 4 SKIP, 2 INFO)",
        ]
    if fault == "unknown":
        g4 = (
            "G4 FAIL: GPU/driver stopped answering: GPU 0 answered errors only (clock_event_reasons: Unknown, "
            f"clock_sm_mhz: Unknown, power_usage_mw: Unknown, temperature_c: Unknown); fix: {DRIVER_FIX}"
        )
        g1 = g1_pass("driver supports CUDA 13.0", gpu="GPU")
    else:
        g4 = (
            "G4 FAIL: GPU/driver stopped answering: GPU 0 (NVIDIA GB10) was lost mid-sample (GpuIsLost at "
            f"t=<T> s, after 2 readings); fix: {DRIVER_FIX}"
        )
        g1 = g1_pass("driver supports CUDA 13.0")
    return [
        g1,
        G2_PASS,
        G3_INFO.format(nvml=G3_NA),
        g4,
        G5_INFO.format(budget=NO_BUDGET if fault == "unknown" else GB10_BUDGET),
        "G6 PASS: no other GPU process [NVML]",
        g7,
        *tail,
        "verdict: blocked (G4 failed; 6 PASS, 1 FAIL, 1 SKIP, 2 INFO)",
    ]


@pytest.mark.parametrize("fault", list(NVML_FAULTS))
def test_nvml_faults_through_pytest(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, scene: Scene, fault: str
) -> None:
    """Every check that reads NVML gets a reading or a reason, never an
    exception: all ten exact lines for each NVML failure. (GB10's memory
    ``NotSupported`` is in every GB10 scene: G3's ``[N/A]`` here and in
    tests/test_gb10_end_to_end.py.)"""
    scene.nvml, smi = NVML_FAULTS[fault]
    if not smi:
        (scene.bin / "nvidia-smi").unlink()
    scene.env_vars["PATH"] = str(scene.bin)  # no host nvidia-smi either (a GPU CI box has one)
    result, report, _ = preflight(pytester, monkeypatch, scene, "--thermal-seconds", "0.3")

    lines = section(result.outlines)
    expected = nvml_expected(fault, pytester.path)
    if fault == "gpu-lost":
        # the one measured value in a line: when the loss came (samples are 0.1 s apart)
        t = re.search(r"GpuIsLost at t=(\d+\.\d) s", lines[3])
        assert t is not None and 0.1 <= float(t.group(1)) <= 1.0, lines[3]
        expected[3] = expected[3].replace("<T>", t.group(1))
    assert without_later(lines, expected) == expected
    assert all(t <= TIMEOUT + MARGIN for t in report["timings"].values()), report["timings"]


# --------------------------------------------------------------------------- the torch child

TORCH_FAULTS: dict[str, dict[str, Any]] = {
    "sigsegv": {"crash": {"where": "kernel", "signal": "SIGSEGV"}},
    "sigabrt": {"crash": {"where": "import", "signal": "SIGABRT"}},
    "hang": {"hang": {"where": "kernel", "seconds": 60}},
    "garbage": {"garbage": "Illegal instruction (core dumped) \x1b[31mnot json\x1b[0m {half"},
    "half": {"half": True},
}
FIX_KERNEL = (
    "run `python -c 'import torch; print(torch.ones(1).cuda())'` to see it; make torch's CUDA major match "
    "the driver's (nvidia-smi) and this GPU"
)
FIX_IMPORT = "run `python -c 'import torch'` to see it; reinstall torch (cu130 wheels or an NGC container)"
FIX_HUNG = (
    "tiny kernel hung: a wedged driver looks like this — check `dmesg` for Xid/NVRM errors and nvidia-smi; "
    "reboot if they are there"
)
CRASH_HINT = " (a crash at the first CUDA call is the classic sign of a build for another CUDA major)"


def torch_expected(fault: str) -> list[str]:
    """G1, G2, G5 (intrusive: it wants the copy) and G7 when the torch child has ``fault``."""
    archs = {
        "sigabrt": "unknown (torch child was killed by SIGABRT during 'import torch')",
        "half": "unknown (torch child stopped before finishing during 'import torch' (output incomplete))",
    }.get(fault, STOCK_ARCHS)
    if fault == "garbage":  # lines that are not JSON are counted, never fatal
        g1 = g1_pass("driver supports CUDA 13.0")
        g5 = (
            "G5 INFO: measured 200 GB/s copy (read+write, 2 x 1024 MiB, median of 7) = 73% of the 273 GB/s "
            f"theoretical peak; {GB10_BUDGET}"
        )
        return [g1, G2_PASS, g5, G7_PASS.format(archs=archs)]
    died, fix = {
        "sigsegv": (f"was killed by SIGSEGV during 'tiny kernel'{CRASH_HINT}", FIX_KERNEL),
        "sigabrt": ("was killed by SIGABRT during 'import torch'", FIX_IMPORT),
        "hang": (f"made no progress for {2 * TIMEOUT} s during 'tiny kernel' (hung; killed)", FIX_HUNG),
        "half": ("stopped before finishing during 'import torch' (output incomplete)", FIX_IMPORT),
    }[fault]
    g5 = (
        f"G5 SKIP: copy probe gave no number: the torch child {died.replace(CRASH_HINT, '')} before the copy "
        f"(see G1); no planned bandwidth declared; {GB10_BUDGET}"
    )
    g7 = (G7_PASS if archs == STOCK_ARCHS else G7_UNKNOWN).format(archs=archs)
    return [f"G1 FAIL: torch child {died}; fix: {fix}", G2_PASS, g5, g7]


@pytest.mark.parametrize("fault", list(TORCH_FAULTS))
def test_torch_child_faults_through_pytest(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, scene: Scene, fault: str
) -> None:
    """The one torch child really dies (SIGSEGV at the first kernel, SIGABRT
    in ``import torch``), really hangs, or prints garbage or half a line: G1
    FAILs naming the signal or the hang and its step, the checks sharing the
    child say why they got nothing, and a hung child's group is gone."""
    log = scene.base / "torch.log"
    scene.torch = gb10.torch(log=str(log), **TORCH_FAULTS[fault])
    result, report, _ = preflight(pytester, monkeypatch, scene, "--only", "G1,G2,G5,G7", "--intrusive")

    assert section(result.outlines)[:-1] == torch_expected(fault)
    imports = log.read_text().splitlines()
    assert len(imports) == 1, "one torch child for the four checks"
    # a step gets the timeout times its scale (the kernel step: 2)
    assert report["timings"]["G1"] <= 2 * TIMEOUT + MARGIN, report["timings"]
    if fault == "hang":
        child = int(imports[0].split()[2])  # "import torch <pid> <time>"
        assert group_gone(child), f"the torch child's group still has {live_members(child)}"


@pytest.mark.parametrize("how", ["cli", "pytest"])
def test_a_worker_torch_forks_at_import_ends_with_the_run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, scene: Scene, tmp_path: Path, how: str
) -> None:
    """Issue 34 item 15: a torch whose import forks a worker that stays in the probe's process
    group (sleeping 30 s, the child's pipes inherited) outlived ``spark-preflight --only G1,G2,G7
    --timeout 2``: the torch child itself exited 0, so its group was never killed. Every group
    the run created ends with its probe, whatever the leader did."""
    pidfile = tmp_path / "worker.pid"
    scene.torch = gb10.torch(fork_sleeper={"seconds": 30, "pidfile": str(pidfile)})
    args = ["--only", "G1,G2,G7", "--timeout", "2", "--offline"]
    if how == "cli":
        done = run_cli(scene, tmp_path, args)
        assert done.returncode == 0, done.stdout + done.stderr
        out = done.stdout
    else:
        out = run_plugin(pytester, monkeypatch, scene, args).stdout.str()
    assert "G1 PASS: torch 2.11.0+cu130" in out, out
    worker = int(pidfile.read_text())
    deadline = time.monotonic() + 2  # a killed orphan is reaped by init: not at once
    while alive(worker) and time.monotonic() < deadline:
        time.sleep(0.05)
    survived = alive(worker)
    if survived:  # this test's own cleanup: the worker it planted, by pid
        os.kill(worker, signal.SIGKILL)
    assert not survived, f"torch's worker {worker} outlived the run"


# --------------------------------------------------------------------------- no interpreter for the probes


def test_probe_children_that_cannot_start_are_reasons_not_a_wedged_driver(
    monkeypatch: pytest.MonkeyPatch, scene: Scene
) -> None:
    """The Python the probe children run with cannot be executed (a deleted
    venv, an interpreter under a folder this user cannot enter): the checks
    that need a child say so; G4 takes nvidia-smi's snapshot instead of
    blaming the driver (nvidia-smi answered)."""
    from pytest_dgx_spark.engine import Engine
    from pytest_dgx_spark.probes.machine import Machine
    from pytest_dgx_spark.settings import Settings

    from doubles.spark_scene import isolated_path, preimport

    preimport()
    monkeypatch.setattr(sys, "path", isolated_path())
    missing = scene.base / "gone" / "python3"
    project = scene.base / "project"
    project.mkdir()
    machine = Machine(root=scene.root, env=scene.env(), timeout=TIMEOUT, python=str(missing))
    settings = Settings(timeout=TIMEOUT, thermal_seconds=0.3, offline=True, rootdir=project)
    lines = [r.line() for r in Engine(settings, machine).run_many()]

    enoent = "could not start: No such file or directory"
    expected = [
        f"G1 FAIL: torch child {enoent}; fix: check the Python interpreter pytest runs",
        G2_PASS,
        G3_INFO.format(nvml=""),
        G4_SMI_HEAD +
        "one snapshot (nvidia-smi)",
        G5_INFO.format(budget=NO_BUDGET),
        "G6 PASS: no other GPU process [nvidia-smi --query-compute-apps]",
        f"G7 SKIP: no NVIDIA GPU found (NVML child {enoent}): NVFP4 on SM121 does not apply",
        G8_OFFLINE,
        G9_PASS,
        G10_SKIP.format(root=project),
    ]
    assert without_later(lines, expected) == expected
