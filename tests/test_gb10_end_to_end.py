"""All ten checks against a DGX Spark (GB10) we do not have: the exact lines.

The double sits at the machine-probe boundary (``tests/doubles/spark_scene.py``):
NVML answers as ``NVIDIA GB10`` with capability (12, 1), memory
``NotSupported``, power limit ``N/A`` and working per-process memory; the one
torch child reports ``2.11.0+cu130`` with the stock cu130 arch list
``['sm_80','sm_90','sm_100','sm_110','sm_120']`` (no sm_121, no PTX); ``/proc/meminfo``
is a 121.7 GiB Spark holding 17 GiB of page cache; the site-packages hold real
gcc-built ELF files linked against stub CUDA runtimes; a real sleeping
process stands in for a vLLM server; G8 asks a real HTTP server on
127.0.0.1; ``nvidia-smi`` and ``ldconfig`` on PATH print what a Spark prints.
Every check's own code runs, through ``pytest --spark-preflight`` and through
``spark-preflight``, and both must print the same ten lines, word for word.

Why exact lines: the G-line is the product (the seed's format, the CLI's
output, every report's message). A reworded or host-dependent line is a
change a Spark owner sees, so it must show up here as a failing test.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from laterchecks import outcomes_without_later, without_later
from localserver import ISSUES_PATH, Answer, LocalServer
from tlsserver import TlsServer, tls_cert_fixture, tls_server_fixture  # noqa: F401 - tls_cert, tls_server

from doubles import elfkit, gb10
from doubles.spark_scene import (
    DATA,
    GIB,
    NGC_CUDA_ENV,
    NGC_PYTORCH_ENV,
    Scene,
    assert_clean,
    failure_message,
    has_json_report,
    run_cli,
    run_plugin,
    section,
)

ISSUES = (DATA / "github" / "issues_open.json").read_bytes()
TOKEN = "ghp_" + "E2eSparkTokenNeverPrinted0123"
#: the sample length: short, and every sample alike (a mean over a
#: timing-dependent number of samples would not give a fixed line)
THERMAL = "0.3"

G4_INFO = "G4 INFO: GB10 35 C, 11.2 W, SM 2522 MHz; since boot: power cap 3.0 h, thermal 1.2 s, brake 0 s (+0 s in sample)"
G7_PASS = "G7 PASS: torch 2.11.0+cu130 runs on SM121 through its sm_120 cubins"
G9_NGC_CUDA = "G9 PASS: container: NGC CUDA image in a Docker container; declared requirements hold"


def one_line_changed(lines: list[str], changed: str, verdict: str) -> list[str]:
    """``lines`` (a run's check lines and its verdict) with the line of ``changed``'s check
    replaced by it and the verdict by ``verdict``: one planted fault, one line moves."""
    check = changed.split(" ", 1)[0] + " "
    return [changed if line.startswith(check) else line for line in lines[:-1]] + [verdict]


def both_print(plugin: pytest.RunResult, cli: subprocess.CompletedProcess[str], expected: list[str]) -> None:
    """The plugin's section and the CLI's output are ``expected``, line for line: one run, two doors."""
    assert without_later(section(plugin.outlines), expected) == expected, plugin.stdout.str()
    assert without_later(cli.stdout.splitlines(), expected) == expected, cli.stdout + cli.stderr


def healthy_lines() -> list[str]:
    """What the owner of a healthy Spark reads by default (see :func:`healthy_spark`):
    one short line per check, and ``ready``: nothing to warn about, nothing unchecked."""
    return [
        "G1 PASS: torch 2.11.0+cu130 on driver CUDA 13.0, 1 CUDA module on CUDA 13, kernel ok",
        "G2 PASS: flash-attn not installed: attention on PyTorch SDPA",
        "G3 INFO: MemAvailable 112.8 of 121.7 GiB; no workload declared",
        G4_INFO,
        "G5 INFO: budget 160-190 GB/s decode, 218-234 GB/s hardware",
        "G6 PASS: no other GPU process",
        G7_PASS,
        "G8 PASS: no open issue names 'pytorch-fine-tune' (9 checked)",
        G9_NGC_CUDA,
        "G10 PASS: single node: nothing multi-node (no config found)",
        "verdict: ready (7 PASS, 3 INFO)",
    ]


def ready_lines(vllm_pid: int) -> list[str]:
    """A Spark ready to fine-tune across two Sparks, a capped vLLM beside it (see :func:`ready_spark`)."""
    return [
        "G1 PASS: torch 2.11.0+cu130 on driver CUDA 13.0, 2 CUDA modules on CUDA 13, kernel ok",
        "G2 PASS: flash-attn not installed: attention on PyTorch SDPA",
        "G3 PASS: workload 60 GiB fits in MemFree 96.0 GiB",
        G4_INFO,
        "G5 PASS: planned 150 GB/s within 160-190 GB/s real decode",
        f"G6 WARN: pid {vllm_pid} vLLM 40.0 GiB NVML: cap 0.4 <= 0.5; fix: check G3's headroom; stop it for a "
        "whole-pool run",
        G7_PASS,
        "G8 PASS: no open issue names 'pytorch-fine-tune' (9 checked)",
        G9_NGC_CUDA,
        "G10 PASS: 2 nodes, FSDP, TP 1: data parallel across nodes (read configs/config_finetuning.yaml)",
        "verdict: ready-with-warnings (8 PASS, 1 WARN, 1 INFO)",
    ]


def blocked_lines(vllm_pid: int) -> list[str]:
    """What the owner of a broken Spark reads (see :func:`blocked_spark`)."""
    return [
        "G1 FAIL: flash-attn 2.7.4.post1: flash_attn_2_cuda.so: libcudart.so.12 not found; fix: reinstall flash-attn "
        "for CUDA 13",
        "G2 FAIL: flash-attn 2.7.4.post1 does not import: libcudart.so.12 not found; fix: pip uninstall flash-attn",
        "G3 WARN: workload 100 GiB fits only after dropping 17.2 GiB of page cache…; fix: drop the page cache between "
        "runs…",
        G4_INFO,
        "G5 WARN: planned 273 GB/s > 218-234 GB/s hardware; fix: plan with <= 190 GB/s",
        f"G6 FAIL: pid {vllm_pid} vLLM 60.0 GiB NVML: cap 0.9 > 0.5; fix: kill {vllm_pid}, or restart capped at <= 0.5",
        G7_PASS,
        "G8 WARN: 1 open issue names the 'vllm' playbook (#79); fix: read #79 before following it",
        "G9 WARN: NGC torch 2.9.0a0+50eac811a6 replaced by 2.11.0+cu130; fix: fresh container, or pip -c "
        "/etc/pip/constraint.txt",
        "G10 WARN: serving: TP 2 across 2 nodes (vllm_two_sparks.sh); fix: serve with DGX OS's system NCCL (vLLM "
        "#42354)",
        "verdict: blocked (G1, G2, G6 failed; 1 PASS, 3 FAIL, 5 WARN, 1 INFO)",
    ]


def blocked_fail_lines(vllm_pid: int) -> list[str]:
    """The whole G-lines of the broken Spark's FAILs: each failure's message (and JUnit's)."""
    ext = f"flash_attn_2_cuda{elfkit.EXT_SUFFIX}"
    return [
        "G1 FAIL: 1 shared object links another CUDA major than torch 2.11.0+cu130 (CUDA 13.0): flash-attn "
        f"2.7.4.post1 ({ext} -> libcudart.so.12: cannot open shared object file); fix: pip uninstall flash-attn "
        "and reinstall builds for CUDA 13 (cu130 wheels, or an NGC container that ships them)",
        "G2 FAIL: flash-attn 2.7.4.post1 is installed but does not import: ImportError: libcudart.so.12: cannot "
        "open shared object file: No such file or directory; fix: pip uninstall flash-attn (transformers then uses "
        "PyTorch SDPA, as fast on Blackwell), or use a container that ships a matching build (NGC "
        "nvcr.io/nvidia/pytorch:25.09-py3 has flash-attn 2.7.4)",
        f"G6 FAIL: 1 other GPU process uncapped or above 0.5: pid {vllm_pid} vLLM (cap 0.9, 60.0 GiB NVML) [NVML]; "
        f"fix: stop it before a run that needs the unified pool (kill {vllm_pid}), or restart it capped at <= 0.5 "
        "(vLLM --gpu-memory-utilization, SGLang --mem-fraction-static, TGI --cuda-memory-fraction); on GB10 vLLM "
        "may overshoot its cap at startup (vLLM #46307)",
    ]


# --------------------------------------------------------------------------- the two Sparks


@pytest.fixture
def server() -> Iterator[LocalServer]:
    with LocalServer() as s:
        s.answers[ISSUES_PATH] = Answer(body=ISSUES)
        yield s


@pytest.fixture
def scene(kit: elfkit.Kit, tmp_path: Path) -> Iterator[Scene]:
    s = Scene(tmp_path / "spark", kit)
    yield s
    s.stop()


def healthy_spark(scene: Scene, run_dir: Path) -> list[str]:
    """A healthy Spark as its owner first meets it: stock cu130 torch in NVIDIA's
    CUDA 13.0 container, nothing else on the GPU, one node, no workload declared
    yet. It must read ``ready``: no WARN and no SKIP (issue 8)."""
    scene.files({".dockerenv": "", "proc/1/cgroup": "0::/\n"})
    scene.env_vars.update(NGC_CUDA_ENV)
    scene.cuda13_stack()
    scene.triton()  # its bundled ptxas-blackwell compiles sm_121a
    scene.python_headers()  # Triton builds its launcher with them
    scene.install("transformers", "4.57.1")
    (run_dir / "pytest.ini").write_text("[pytest]\n")
    return ["--thermal-seconds", THERMAL, "--playbook", "pytorch-fine-tune", "--timeout", "5"]


def ready_spark(scene: Scene, run_dir: Path) -> tuple[list[str], int]:
    """A Spark ready to fine-tune across two Sparks with FSDP (NVIDIA's
    pytorch-fine-tune playbook): cu130 torch in NVIDIA's CUDA 13.0 container,
    a vLLM capped at 0.4 next to it. Returns the spark-preflight options and
    the vLLM's pid."""
    scene.files({".dockerenv": "", "proc/1/cgroup": "0::/\n"})
    scene.env_vars.update(NGC_CUDA_ENV)
    scene.cuda13_stack()
    scene.install("cu13-kernels", "1.0", {"cu13rp" + elfkit.EXT_SUFFIX: scene.kit.ext13_rpath})
    scene.install("transformers", "4.57.1")
    scene.install("unsloth", "2025.11.1", requires=["torch>=2.4"])
    vllm = scene.gpu_process(
        "vllm", "serve", "Qwen/Qwen3-8B", "--gpu-memory-utilization", "0.4", used_bytes=40 * GIB
    )
    configs = run_dir / "configs"
    configs.mkdir()
    # the playbook's accelerate config with main_process_ip filled in, as it tells you to
    (configs / "config_finetuning.yaml").write_bytes(
        (DATA / "g10" / "nvidia_config_finetuning.yaml").read_bytes()
    )
    (run_dir / "pytest.ini").write_text("[pytest]\n")
    args = ["--thermal-seconds", THERMAL, "--workload-gb", "60", "--planned-bandwidth", "150"]
    args += [
        "--playbook",
        "pytorch-fine-tune",
        "--config",
        "configs/config_finetuning.yaml",
        "--timeout",
        "5",
    ]
    return args, vllm


def blocked_spark(scene: Scene, run_dir: Path) -> tuple[list[str], int]:
    """The same Spark gone wrong: a flash-attn wheel built for CUDA 12 (a real
    module linked against a stub ``libcudart.so.12``), pip's torch over NGC
    PyTorch's, vLLM at its default 0.9 and NVIDIA's TP=2 two-Spark command."""
    scene.files({".dockerenv": "", "proc/1/cgroup": "0::/\n"})
    scene.env_vars.update(NGC_PYTORCH_ENV)
    scene.cuda13_stack()
    scene.install(
        "flash-attn",
        "2.7.4.post1",
        {
            "flash_attn_2_cuda" + elfkit.EXT_SUFFIX: scene.kit.ext12,
            "flash_attn/__init__.py": "import flash_attn_2_cuda\n__version__ = '2.7.4.post1'\n",
        },
        requires=["torch", "einops"],
    )
    scene.install("einops", "0.8.1")
    vllm = scene.gpu_process("vllm", "serve", "meta-llama/Llama-3.3-70B-Instruct", used_bytes=60 * GIB)
    (run_dir / "vllm_two_sparks.sh").write_bytes((DATA / "g10" / "vllm_two_sparks.sh").read_bytes())
    (run_dir / "pytest.ini").write_text("[pytest]\n")
    args = ["--thermal-seconds", THERMAL, "--workload-gb", "100", "--planned-bandwidth", "273"]
    args += ["--playbook", "vllm", "--config", "vllm_two_sparks.sh", "--timeout", "5"]
    return args, vllm


# --------------------------------------------------------------------------- the tests


def test_a_healthy_spark_reads_ready_with_no_warn_and_no_skip(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, scene: Scene, server: LocalServer
) -> None:
    """Issue 8's bar: a healthy Spark (values as real Sparks posted them, tests/data/gb10/)
    reads ``verdict: ready`` through pytest and the CLI: G1 PASS, G3 INFO, G4 INFO,
    G5 INFO, G7 PASS, G10 PASS, G8 answered by a server with no matching issue."""
    args = [*healthy_spark(scene, pytester.path), "--github-url", server.url]
    plugin = run_plugin(pytester, monkeypatch, scene, args)
    cli = run_cli(scene, pytester.path, args)

    expected = healthy_lines()
    both_print(plugin, cli, expected)
    assert plugin.ret == pytest.ExitCode.OK and cli.returncode == 0
    outcomes = outcomes_without_later(plugin.parseoutcomes(), section(plugin.outlines), expected)
    assert outcomes == {"passed": 10}
    assert all(len(line) <= 120 for line in expected)
    assert_clean(plugin.stdout.str(), plugin.stderr.str(), cli.stderr)
    # the whole lines are one -v away, and in --json
    block = json.loads(run_cli(scene, pytester.path, [*args, "--json"]).stdout)
    assert block["verdict"] == "ready"
    full = {r["id"]: r["line"] for r in block["results"]}
    assert full["G7"] == (
        "G7 PASS: NVIDIA GB10 is SM121 (12.1); torch 2.11.0+cu130 arch list sm_80, sm_90, sm_100, sm_110, sm_120: "
        "its sm_120 cubins run on 12.1; TORCH_CUDA_ARCH_LIST unset; no NVFP4 kernel library installed (vLLM, "
        "FlashInfer, TensorRT-LLM); triton 3.6.0 compiles for sm_121a"
    )
    g7 = next(r for r in block["results"] if r["id"] == "G7")
    assert g7["readings"]["triton_sm121_compile"]["value"] == "ok"
    assert g7["readings"]["python_h"]["value"] == "found"
    assert full["G4"].startswith(
        "G4 INFO: GPU 0 NVIDIA GB10: 35 C, 11.2 W (limit [N/A]), SM 2522 MHz; no clock-event reason; clock-event "
        "counters since boot: power cap 3.0 h, thermal 1.2 s, power brake 0 s; slowdown +0 s in the sample"
    )


#: N3 (issue 22), one planted fault at a time on the healthy Spark: the files as the posts show them
#: (tests/data/gb10/: proc_meminfo_4.txt's Cma lines on error_nccl_enomem_1.txt's kernel; dmesg_xid_5.txt's
#: proprietary 580.173.02 modules, in the proprietary layout of tests/data/driver/nvidia_version_formats.txt)
N3_FAULTS = {
    "kernel 7.0.0-1019 with CmaFree > CmaTotal": (
        {"proc/sys/kernel/osrelease": "7.0.0-1019-nvidia\n",
         "proc/meminfo": gb10.meminfo() + "CmaTotal:              0 kB\nCmaFree:          940604 kB\n"},
        "G1 FAIL: kernel 7.0.0-1019-nvidia: NCCL memory registration fails; fix: boot 6.17.0-1032-nvidia or add kho=off",
    ),
    "proprietary modules": (
        {"proc/driver/nvidia/version": "NVRM version: NVIDIA UNIX aarch64 Kernel Module  580.173.02  "
                                       "Fri Sep 13 11:01:10 UTC 2024\n"},
        "G1 FAIL: proprietary modules 580.173.02: Xid 169, the GPU never starts; fix: install "
        "nvidia-driver-580-open, reboot",
    ),
    "a module older than the library": (
        {"proc/driver/nvidia/version": "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.95.05\n"},
        "G1 FAIL: kernel module 580.95.05 != user-space driver 580.173.02; fix: reboot (or reload the nvidia modules)",
    ),
}  # fmt: skip


@pytest.mark.parametrize("fault", list(N3_FAULTS))
def test_a_spark_with_a_known_bad_stack_reads_blocked_and_replays_so(
    pytester: pytest.Pytester, scene: Scene, server: LocalServer, fault: str
) -> None:
    """The healthy Spark with one N3 fault planted: G1 names it with its fix, the other nine
    lines stay the healthy ones, the verdict is blocked, and its capture replays to the same."""
    files, g1_line = N3_FAULTS[fault]
    args = [*healthy_spark(scene, pytester.path), "--github-url", server.url]
    scene.files(files)
    capture = pytester.path / "n3.json"
    cli = run_cli(scene, pytester.path, [*args, "--capture", str(capture)])
    lines, healthy = without_later(cli.stdout.splitlines(), healthy_lines()), healthy_lines()
    assert lines[0] == g1_line and len(lines[0]) <= 120, cli.stdout + cli.stderr
    assert lines[1:10] == healthy[1:10]
    assert lines[10].startswith("verdict: blocked (G1 failed") and cli.returncode == 1
    replay = run_cli(scene, pytester.path, ["--replay", str(capture)])
    assert replay.stdout.splitlines()[0] == g1_line, replay.stdout + replay.stderr


def test_the_healthy_sparks_g1_reads_its_kernel_and_module(
    pytester: pytest.Pytester, scene: Scene, server: LocalServer
) -> None:
    """The new readings are in --json (and so in the env-report): the double's healthy stack."""
    args = [*healthy_spark(scene, pytester.path), "--github-url", server.url, "--only", "G1", "--json"]
    block = json.loads(run_cli(scene, pytester.path, args).stdout)
    g1 = next(r for r in block["results"] if r["id"] == "G1")
    text = json.dumps(g1)
    assert g1["status"] == "PASS" and "6.17.0-1031-nvidia" in text and "580.173.02 (open)" in text, text


def test_a_ready_spark_prints_these_ten_lines_through_plugin_and_cli(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, scene: Scene, server: LocalServer
) -> None:
    args, vllm = ready_spark(scene, pytester.path)
    args += ["--github-url", server.url]
    plugin = run_plugin(pytester, monkeypatch, scene, args)
    cli = run_cli(scene, pytester.path, args)

    expected = ready_lines(vllm)
    plugin_text = plugin.stdout.str()
    both_print(plugin, cli, expected)
    assert plugin.ret == pytest.ExitCode.OK and cli.returncode == 0
    outcomes = outcomes_without_later(plugin.parseoutcomes(), section(plugin.outlines), expected)
    assert outcomes == {"passed": 9, "warned": 1}
    assert cli.stderr == ""
    assert_clean(plugin_text, plugin.stderr.str(), cli.stderr)
    # NVML answered, so its fallback (a process launch per query) was never needed
    assert scene.smi_calls() == []
    # one lookup per run, both runs
    assert len(server.requests_to()) == 2


def test_a_blocked_spark_prints_these_fail_lines_through_plugin_and_cli(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, scene: Scene, server: LocalServer
) -> None:
    args, vllm = blocked_spark(scene, pytester.path)
    args += ["--github-url", server.url]
    plugin = run_plugin(pytester, monkeypatch, scene, args)
    cli = run_cli(scene, pytester.path, args)

    expected = blocked_lines(vllm)
    plugin_text = plugin.stdout.str()
    both_print(plugin, cli, expected)
    assert plugin.ret == pytest.ExitCode.TESTS_FAILED and cli.returncode == 1
    outcomes = outcomes_without_later(plugin.parseoutcomes(), section(plugin.outlines), expected)
    assert outcomes == {"failed": 3, "passed": 2, "warned": 5}
    # each FAIL is reported by its G-line alone (pytest.fail(pytrace=False)), never a traceback
    assert_clean(plugin_text, plugin.stderr.str(), cli.stderr)
    # by default each FAIL's whole line is in its FAILURES body (issue 24 item 1) and its
    # short line in the section; the short summary names each failed check
    fails = blocked_fail_lines(vllm)
    for line in fails:
        cid = line.split(" ", 1)[0]
        assert [ln for ln in plugin.outlines if ln.startswith(f"{cid} FAIL")] == [
            line, next(e for e in expected if e.startswith(f"{cid} FAIL"))
        ]
        assert any(ln.startswith(f"FAILED spark_preflight::{cid} - ") for ln in plugin.outlines)
    # under -rA each FAIL's report is its whole G-line alone (pytest.fail(pytrace=False)), never a traceback
    full = run_plugin(pytester, monkeypatch, scene, args, "-rA")
    assert [failure_message(full.outlines, ln.split(" ", 1)[0]) for ln in fails] == fails


def test_the_token_appears_in_no_output_of_a_full_run(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    scene: Scene,
    tls_server: TlsServer,
    tmp_path: Path,
) -> None:
    """GITHUB_TOKEN is sent to the API and written nowhere: terminal (verbose,
    with every report section), JUnit XML with system-out, env-report.json,
    pytest-json-report, and spark-preflight's stdout, stderr, --json and
    --report, all from one scene. The token goes only over https, so
    the server here is the https one."""
    server = tls_server
    server.answers[ISSUES_PATH] = Answer(body=ISSUES)
    args, _ = ready_spark(scene, pytester.path)
    scene.env_vars["GITHUB_TOKEN"] = TOKEN
    out = tmp_path / "out"
    out.mkdir()
    reports = [
        f"--junitxml={out / 'junit.xml'}",
        "-o",
        "junit_logging=system-out",
        "-v",
        "-rA",
    ]
    if has_json_report():
        reports += ["--json-report", f"--json-report-file={out / 'report.json'}"]
    args += ["--github-url", server.url]
    plugin = run_plugin(
        pytester, monkeypatch, scene, [*args, "--report", str(out / "env-report.json")], *reports
    )
    cli = run_cli(scene, pytester.path, [*args, "--json", "--report", str(out / "cli-report.json")])

    assert plugin.ret == pytest.ExitCode.OK and cli.returncode == 0, cli.stderr
    assert [r["line"] for r in json.loads(cli.stdout)["results"]][7].startswith("G8 PASS: no open issue")
    assert all(s.headers.get("authorization") == f"Bearer {TOKEN}" for s in server.requests_to())
    assert len(server.requests_to()) == 2
    outputs = {
        "terminal": plugin.stdout.str() + plugin.stderr.str(),
        "cli stdout": cli.stdout,
        "cli stderr": cli.stderr,
    }
    for path in sorted(out.iterdir()):
        outputs[path.name] = path.read_text()
    expected_files = {"junit.xml", "env-report.json", "cli-report.json"} | (
        {"report.json"} if has_json_report() else set()
    )
    assert expected_files <= set(outputs)
    for name, text in outputs.items():
        assert TOKEN not in text, name
    # the reports did carry G8's result (they were really written, not empty)
    for name in expected_files:
        assert "G8" in outputs[name], name


# --------------------------------------------------------------------------- the double speaks as a Spark


def capture_block(name: str, command: str) -> list[str]:
    """The lines a real Spark printed after ``command`` in a capture (up to a blank line or fence)."""
    lines = (DATA / "gb10" / name).read_text().splitlines()
    assert lines[0].startswith("# source:")
    start = next(i for i, ln in enumerate(lines) if ln.lstrip("$ ").startswith(command))
    out = []
    for ln in lines[start + 1 :]:
        if not ln.strip() or ln.startswith("```"):
            break
        out.append(ln)
    return out


@pytest.mark.parametrize(
    ("name", "command"),
    [
        (
            "nvml_memory_1.txt",
            "nvidia-smi --query-gpu=memory.total,memory.used,memory.free,utilization.gpu,power.draw,temperature.gpu "
            "--format=csv",
        ),
        ("nvidia-smi-query_3.txt", "nvidia-smi --query-gpu=index,name,memory.total,memory.free --format=csv"),
    ],
)
def test_the_doubles_nvidia_smi_prints_what_a_spark_printed(scene: Scene, name: str, command: str) -> None:
    """tests/data/gb10/nvml_memory_1.txt (nvitop PR #208, driver 580.173.02) and
    nvidia-smi-query_3.txt (unsloth PR #10703): the double's ``--query-gpu`` answer is the
    capture's, header, units and ``[N/A]`` included, word for word."""
    import shlex
    import subprocess

    expected = capture_block(name, command)
    argv = shlex.split(command)
    out = subprocess.run(argv, capture_output=True, text=True, env=scene.env(), timeout=10, check=True)
    assert out.stdout.splitlines() == expected


def test_the_doubles_table_and_counters_have_the_captures_layout(scene: Scene) -> None:
    """nvidia-smi_3.txt's table (GB10 row, ``Not Supported`` memory, ``N/A`` cap) and
    nvidia-smi-q_1.txt's ``Clocks Event Reasons Counters`` section: same columns, labels and
    indentation; the values are the double's own (35 C, 11 W; nvidia-smi_clocks_power_1.txt's counters)."""
    import subprocess

    table = subprocess.run(["nvidia-smi"], capture_output=True, text=True, env=scene.env(), timeout=10).stdout
    real = (DATA / "gb10" / "nvidia-smi_3.txt").read_text()
    for header in real.splitlines()[7:13]:  # the column headers and the GB10 row, not the version line
        assert header.rstrip() in table.splitlines(), header
    assert (
        "| N/A   35C    P8             11W /  N/A  | Not Supported          |      0%      Default |" in table
    )
    q = subprocess.run(
        ["nvidia-smi", "-q"], capture_output=True, text=True, env=scene.env(), timeout=10
    ).stdout
    labels = [ln.split(":")[0] for ln in (DATA / "gb10" / "nvidia-smi-q_1.txt").read_text().splitlines()]
    section = labels.index("    Clocks Event Reasons Counters")
    ours = [ln.split(":")[0] for ln in q.splitlines()]
    start = ours.index("    Clocks Event Reasons Counters")
    assert ours[start : start + 6] == labels[section : section + 6]


def test_nvfp4_declared_in_the_ini_warns_on_the_healthy_spark_through_plugin_and_cli(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, scene: Scene, server: LocalServer
) -> None:
    """The healthy Spark of torch_arch_list_1.txt (stock cu130 torch, no NVFP4 kernel library)
    whose owner plans NVFP4: ``spark_preflight_precision = nvfp4`` in the ini (the plugin) and
    ``--precision nvfp4`` (the CLI) give G7 the same WARN (error_nvfp4_1.txt: "Failed to run
    cutlass FP4 gemm on sm120" where nothing targets sm_121a); every other line stays healthy."""
    assert "Failed to run cutlass FP4 gemm on sm120" in (DATA / "gb10" / "error_nvfp4_1.txt").read_text()
    args = [*healthy_spark(scene, pytester.path), "--github-url", server.url]
    (pytester.path / "pytest.ini").write_text("[pytest]\nspark_preflight_precision = nvfp4\n")
    plugin = run_plugin(pytester, monkeypatch, scene, args)
    cli = run_cli(scene, pytester.path, [*args, "--precision", "nvfp4"])
    g7 = (
        "G7 WARN: NVFP4 planned, but no installed kernel targets sm_121a/sm_120f; fix: use FP8, or NVFP4 "
        "builds for sm_121a"
    )
    expected = one_line_changed(healthy_lines(), g7, "verdict: ready-with-warnings (6 PASS, 1 WARN, 3 INFO)")
    both_print(plugin, cli, expected)


def test_an_image_built_for_a_newer_cuda_blocks_the_healthy_spark(
    pytester: pytest.Pytester, scene: Scene, server: LocalServer
) -> None:
    """Issue 22, N2 (container_error_driver_1.txt): the healthy Spark's container, but the image
    was built with a CUDA 13.2 toolchain while DGX OS's 580 driver gives CUDA 13.0 and no
    forward-compatibility driver is in use. One planted fault: only G9's line changes."""
    assert "cudaErrorUnsupportedPtxVersion" in (DATA / "gb10" / "container_error_driver_1.txt").read_text()
    args = [*healthy_spark(scene, pytester.path), "--github-url", server.url]
    scene.env_vars.update({"CUDA_VERSION": "13.2.0", "NVIDIA_REQUIRE_CUDA": "cuda>=13.2 brand=unknown"})
    cli = run_cli(scene, pytester.path, args)
    g9 = (
        "G9 FAIL: image needs CUDA 13.2, host driver 580.173.02 gives CUDA 13.0; fix: a CUDA 13.0 image; keep the "
        "NGC ENTRYPOINT"
    )
    expected = one_line_changed(healthy_lines(), g9, "verdict: blocked (G9 failed; 6 PASS, 1 FAIL, 3 INFO)")
    assert without_later(cli.stdout.splitlines(), expected) == expected, cli.stdout + cli.stderr


def test_a_two_spark_container_without_dev_infiniband_is_named_with_its_fix(
    pytester: pytest.Pytester, scene: Scene, server: LocalServer
) -> None:
    """Issue 22, G10+ (FIELD-2026-12 F9): the ready two-Spark FSDP job, in a container started
    without ``--device /dev/infiniband`` while the host's RoCE port shows in /sys
    (link_two_spark_ib_write_bw_2.txt: rocep1s0f1 ==> enp1s0f1np1, Up). One planted fault."""
    args, vllm = ready_spark(scene, pytester.path)
    port = "sys/class/infiniband/rocep1s0f1/ports/1"
    scene.files({
        f"{port}/state": "4: ACTIVE\n",
        f"{port}/rate": "200 Gb/sec (4X HDR)\n",
        f"{port}/gid_attrs/ndevs/0": "enp1s0f1np1\n",
        "sys/class/net/enp1s0f1np1/mtu": "9000\n",
        "sys/class/net/enp1s0f1np1/speed": "200000\n",
    })
    cli = run_cli(scene, pytester.path, [*args, "--github-url", server.url])
    g10 = (
        "G10 FAIL: no /dev/infiniband in this container; fix: --device /dev/infiniband --cap-add IPC_LOCK "
        "--ulimit memlock=-1:-1"
    )
    expected = one_line_changed(ready_lines(vllm), g10, "verdict: blocked (G10 failed; 7 PASS, 1 FAIL, 1 WARN, 1 INFO)")
    assert without_later(cli.stdout.splitlines(), expected) == expected, cli.stdout + cli.stderr


def g3_fragmented_4k(scene: Scene) -> list[str]:
    """Worker 1 of MiaAI-Lab/DeepSeek-v4.1-Flash-DGX-Sparks #23 (memory_fragmentation_1.txt): zone
    Normal without a free block of 4 MiB, MemAvailable ~118 GiB in page cache, compaction failing."""
    buddy = gb10.buddyinfo_fragmented_4k()
    pages = gb10.free_pages(buddy)
    scene.files({
        "proc/meminfo": gb10.meminfo(free_gib=pages * 4 / gb10.GIB_KB, cache_gib=114.0),
        "proc/buddyinfo": buddy,
        "proc/vmstat": gb10.vmstat(pages, 912_004, 401_733, 2_117),
    })
    return []


def g3_cgroup_limit(scene: Scene) -> list[str]:
    """A container limited to 69 GiB (AEON-7/vllm-ultimate-dgx-spark#9) for an 80 GiB job."""
    scene.files({"sys/fs/cgroup/memory.max": str(69 << 30) + "\n"})
    return ["--workload-gb", "80"]


def g3_ray(scene: Scene) -> list[str]:
    """Ray installed with its memory monitor on (MiaAI-Lab/GLM-5.3-Flash-NVFP4-Dual-DGX-Spark PR #2)."""
    scene.install("ray", "2.49.2")
    return []


@pytest.mark.parametrize(
    ("plant", "g3", "verdict"),
    [
        (g3_fragmented_4k, "G3 FAIL: memory fragmented: 0 free 32 MiB blocks in zone Normal (want >= 200); fix: reboot",
         "verdict: blocked (G3 failed; 7 PASS, 1 FAIL, 2 INFO)"),
        (g3_cgroup_limit, "G3 FAIL: cgroup memory limit 69 GiB < workload 80 GiB; fix: raise the container's memory limit",
         "verdict: blocked (G3 failed; 7 PASS, 1 FAIL, 2 INFO)"),
        (g3_ray, "G3 WARN: Ray's memory monitor kills workers at 0.95 of node memory; fix: RAY_memory_monitor_refresh_ms=0 "
         "on every node", "verdict: ready-with-warnings (7 PASS, 1 WARN, 2 INFO)"),
    ],
    ids=["fragmented", "cgroup-limit", "ray-monitor"],
)
def test_one_planted_memory_fault_names_itself_in_g3(
    pytester: pytest.Pytester, scene: Scene, server: LocalServer, plant, g3: str, verdict: str
) -> None:
    """Issue 22 N4/N6, one fault at a time on the healthy Spark: G3 names it with its fix, the
    other nine lines stay the healthy ones."""
    args = [*healthy_spark(scene, pytester.path), "--github-url", server.url, *plant(scene)]
    cli = run_cli(scene, pytester.path, args)
    expected = [g3 if line.startswith("G3 ") else line for line in healthy_lines()[:-1]]
    lines = without_later(cli.stdout.splitlines(), healthy_lines())
    assert lines[:2] + lines[3:-1] == expected[:2] + expected[3:], cli.stdout + cli.stderr
    assert (lines[2], lines[-1]) == (g3, verdict), cli.stdout + cli.stderr


# --------------------------------------------------------------------------- issue 22: N5 and N7 planted, one at a time

#: the posted kernel lines (tests/data/gb10/dmesg_xid_1.txt, dmesg_xid_2.txt), as /dev/kmsg records
_XID_GSP = [
    "NVRM: Xid (PCI:000f:01:00): 119, pid=3849, name=KMS thread, Timeout after 45s of waiting for RPC response from GPU0 GSP!",
    "NVRM: Xid (PCI:000f:01:00): 120, pid=9111, name=python, GSP task exception: load access fault",
]
_XID_APP = ["NVRM: Xid (PCI:000f:01:00): 13, Graphics SM Global Exception on (GPC 0, TPC 1, SM 0): Multiple Warp Errors"]
#: nvidia-smi_clocks_power_4.txt: 96 % utilisation at 799 MHz and 19.5 W, no throttle reason
_STUCK = [{"temperature_c": 52, "power_usage_mw": 19500, "clock_sm_mhz": 799, "clock_event_reasons": 0, "utilization_gpu": 96}]
#: the same box after pulling AC power: 2281 MHz, 92.5 W
_UNSTUCK = [{"temperature_c": 52, "power_usage_mw": 92500, "clock_sm_mhz": 2281, "clock_event_reasons": 0, "utilization_gpu": 96}]


@pytest.mark.parametrize(
    ("kmsg", "samples", "g4_line", "verdict"),
    [
        (
            _XID_GSP,
            None,
            "G4 FAIL: Xid 120 since boot (GSP fault); fix: NVreg_EnableHotplugDetection=0; disable nvidia-suspend; reboot",
            "verdict: blocked (G4 failed; 7 PASS, 1 FAIL, 2 INFO)",
        ),
        (
            _XID_APP * 91,
            None,
            "G4 WARN: Xid 13 since boot (the process not named in the line); fix: update/patch the faulting kernel path",
            "verdict: ready-with-warnings (7 PASS, 1 WARN, 2 INFO)",
        ),
        (
            [],
            _STUCK,
            "G4 FAIL: stuck low-power state: 799 MHz, 19.5 W at 96 % load; fix: unplug the power brick (wall + Spark), wait 60 s",
            "verdict: blocked (G4 failed; 7 PASS, 1 FAIL, 2 INFO)",
        ),
        ([], _UNSTUCK, "G4 INFO: GB10 52 C, 92.5 W, SM 2281 MHz; since boot: power cap 3.0 h, thermal 1.2 s, brake 0 s (+0 s in sample)",
         "verdict: ready (7 PASS, 3 INFO)"),
    ],
    ids=["xid-gsp-119-120", "xid-13-vllm", "stuck-low-power", "after-ac-power-removal"],
)
def test_a_healthy_spark_with_one_planted_kernel_or_power_fault_names_it_with_its_fix(
    scene: Scene, server: LocalServer, tmp_path: Path, kmsg: list[str], samples: list[dict[str, object]] | None,
    g4_line: str, verdict: str,
) -> None:
    """Issue 22's bar for N7 and N5: the healthy Spark with one fault planted as users posted it."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    args = [*healthy_spark(scene, run_dir), "--github-url", server.url]
    scene.files({"dev/kmsg": gb10.kmsg([gb10.GPU_FOUND, *kmsg])})
    if samples is not None:
        scene.nvml["devices"][0]["samples"] = samples
    cli = run_cli(scene, run_dir, args)
    lines = without_later(cli.stdout.splitlines(), healthy_lines())
    assert lines[3] == g4_line, cli.stdout + cli.stderr
    assert lines[-1] == verdict
    assert all(line == want for line, want in zip(lines, healthy_lines(), strict=True) if not line.startswith(("G4", "verdict")))
    assert_clean(cli.stderr)


def test_diagnose_reads_this_machines_kernel_log_with_the_training_log(
    scene: Scene, server: LocalServer, tmp_path: Path
) -> None:
    """Issue 23 on a live machine: the training log shows nothing known, the Spark's own kernel
    log (its /dev/kmsg under the root) holds the GSP Xids of dmesg_xid_1.txt: diagnose reads
    it without --kernel-log, cites it as ``kmsg:LINE``, and G4's live reading confirms it."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    args = [*healthy_spark(scene, run_dir), "--github-url", server.url]
    scene.files({"dev/kmsg": gb10.kmsg([gb10.GPU_FOUND, *_XID_GSP])})
    (run_dir / "train.log").write_text("step 100 loss 2.31\nstep 200 loss 2.02\n")
    cli = run_cli(scene, run_dir, ["diagnose", "train.log", *args])
    lines = cli.stdout.splitlines()
    g4 = next(line for line in lines if line.startswith("G4 "))
    assert g4.startswith('G4 FAIL: kmsg:2: "NVRM: Xid (PCI:000f:01:00): 119'), cli.stdout + cli.stderr
    assert lines[-1] == "diagnosis: G4 (first failure at kmsg:2)", cli.stdout + cli.stderr
    assert cli.returncode == 1


def test_triton_with_a_ptxas_that_rejects_sm_121a_blocks_the_healthy_spark(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, scene: Scene, server: LocalServer
) -> None:
    """N1 (issue 22), one fault planted: the healthy Spark with pytorch-triton 3.5.0, whose bundled
    ptxas 12.8 rejects sm_121a (error_triton_ptxas_1.txt, triton #8539; measured with triton 3.5.0
    in tests/data/triton/compile_sm121_triton350.json). G7's compile child meets ptxas's error
    and FAILs with the posted fix; every other line stays healthy."""
    posted = (DATA / "gb10" / "error_triton_ptxas_1.txt").read_text()
    assert "ptxas fatal   : Value 'sm_121a' is not defined" in posted
    args = [*healthy_spark(scene, pytester.path), "--github-url", server.url]
    for info in scene.site.glob("triton-*.dist-info"):  # the healthy one's Triton 3.6.0 goes
        shutil.rmtree(info)
    shutil.rmtree(scene.site / "triton" / "backends" / "nvidia" / "bin")
    scene.triton("3.5.0+git7416ffcb", {"ptxas": "12.8"})
    plugin = run_plugin(pytester, monkeypatch, scene, args)
    cli = run_cli(scene, pytester.path, args)
    g7 = (
        "G7 FAIL: triton's ptxas rejects sm_121a (torch.compile); "
        "fix: export TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas"
    )
    expected = one_line_changed(healthy_lines(), g7, "verdict: blocked (G7 failed; 6 PASS, 1 FAIL, 3 INFO)")
    both_print(plugin, cli, expected)


def test_fp8_planned_on_the_healthy_spark_names_cublas_tn_only(
    pytester: pytest.Pytester, scene: Scene, server: LocalServer
) -> None:
    """G7+ (issue 22, FIELD-2026-12 F11), one change: the healthy Spark's owner plans FP8. Its
    pip torch brings nvidia-cublas 13.1.0.3, and block-scaled FP8 GEMMs are TN-only on cc 12.x
    before cuBLAS 13.6 (pytorch PR #198188, #192707): G7 WARNs, read from the version."""
    args = [*healthy_spark(scene, pytester.path), "--github-url", server.url, "--precision", "fp8"]
    cli = run_cli(scene, pytester.path, args)
    g7 = (
        "G7 WARN: cuBLAS 13.1 < 13.6: FP8 training GEMMs TN-only on SM12x; fix: FP8 per-tensor or BF16 for "
        "training"
    )
    expected = one_line_changed(healthy_lines(), g7, "verdict: ready-with-warnings (6 PASS, 1 WARN, 3 INFO)")
    assert without_later(cli.stdout.splitlines(), expected) == expected, cli.stdout + cli.stderr
