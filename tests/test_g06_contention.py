"""G6 — unified-memory contention: command-line recognition and caps, the
grouping of servers with their workers, the verdicts, and the survey against
REAL processes (children whose argv is what vLLM, Ollama, llama.cpp and a
trainer show in /proc) plus NVML process lists from the pynvml double.

Other tests may run processes at the same time on this machine, so the
integration tests assert on the pids they started, not on the whole table.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_spark.checks import g06_contention as g6
from pytest_spark.checks.kit import CheckContext, Params
from pytest_spark.engine import Engine
from pytest_spark.model import Status
from pytest_spark.options import Settings
from pytest_spark.probes.child import PROTOCOL, SCRIPTS
from pytest_spark.probes.machine import Machine
from pytest_spark.thresholds import defaults

from doubles import gb10

T = defaults("gb10")
P = Params(profile="gb10", thresholds=T)
GIB = 1 << 30
PY = "/usr/bin/python3"


# ---------------------------------------------------------------------- command lines


@pytest.mark.parametrize(
    ("cmdline", "kind", "cap"),
    [
        (
            [PY, "/usr/local/bin/vllm", "serve", "Qwen/Qwen3-8B", "--gpu-memory-utilization", "0.9"],
            "vLLM",
            0.9,
        ),
        ([PY, "/usr/local/bin/vllm", "serve", "m", "--gpu-memory-utilization=0.45"], "vLLM", 0.45),
        (["/usr/local/bin/vllm", "serve", "m", "--gpu_memory_utilization", "0.3"], "vLLM", 0.3),
        ([PY, "/usr/local/bin/vllm", "serve", "m"], "vLLM", 0.9),  # the default
        (
            [
                PY,
                "-m",
                "vllm.entrypoints.openai.api_server",
                "--model",
                "m",
                "--gpu-memory-utilization",
                "0.5",
            ],
            "vLLM",
            0.5,
        ),
        (["VLLM::EngineCore"], "vLLM", 0.9),
        (
            [PY, "-m", "sglang.launch_server", "--model-path", "m", "--mem-fraction-static", "0.4"],
            "SGLang",
            0.4,
        ),
        ([PY, "-m", "sglang.launch_server", "--model-path", "m"], "SGLang", None),
        (["/usr/local/bin/ollama", "serve"], "Ollama", None),
        (["/usr/lib/ollama/ollama", "runner", "--model", "/root/.ollama/blobs/sha256-1"], "Ollama", None),
        (["./build/bin/llama-server", "-m", "model.gguf", "-ngl", "99"], "llama.cpp", None),
        ([PY, "/usr/local/bin/trtllm-serve", "m"], "TRT-LLM", 0.9),
        (
            [PY, "/usr/local/bin/trtllm-serve", "m", "--kv_cache_free_gpu_memory_fraction", "0.3"],
            "TRT-LLM",
            0.3,
        ),
        (["text-generation-launcher", "--model-id", "m", "--cuda-memory-fraction", "0.35"], "TGI", 0.35),
        (["/usr/src/server/text-generation-server", "serve", "m"], "TGI", 1.0),
        ([PY, "/usr/local/bin/torchrun", "--nproc-per-node", "2", "train.py"], "trainer", None),
        ([PY, "/usr/local/bin/accelerate", "launch", "sft.py"], "trainer", None),
        ([PY, "/usr/local/bin/deepspeed", "train.py"], "trainer", None),
        ([PY, "-m", "torch.distributed.run", "train.py"], "trainer", None),
        ([PY, "-u", "train.py", "--lr", "1e-4"], "trainer", None),
        ([PY, "scripts/run_train.py"], "trainer", None),
        ([PY, "-W", "ignore", "finetune_lora.py"], "trainer", None),
        (["python3.12", "my-sft.py"], "trainer", None),
    ],
)
def test_recognised_workloads_and_their_caps(cmdline: list[str], kind: str, cap: float | None) -> None:
    found = g6.classify(cmdline)
    assert found is not None
    assert (found.kind, found.cap) == (kind, cap)


@pytest.mark.parametrize(
    "cmdline",
    [
        ["/usr/local/bin/ollama", "run", "llama3"],  # a client
        [PY, "/usr/local/bin/vllm", "chat"],  # a client
        [PY, "trainer_utils.py"],
        [PY, "-c", "import train"],
        [PY, "-m", "pytest", "tests/test_train.py"],
        ["/bin/bash", "train.sh"],
        ["sleep", "60"],
        [],
    ],
)
def test_not_gpu_workloads(cmdline: list[str]) -> None:
    assert g6.classify(cmdline) is None


def test_unreadable_cap_counts_as_uncapped_and_says_so() -> None:
    found = g6.classify([PY, "/usr/bin/vllm", "serve", "m", "--gpu-memory-utilization", "lots"])
    assert found is not None and found.cap is None
    assert "unreadable --gpu-memory-utilization 'lots'" in found.cap_source


def test_vllm_default_is_a_threshold() -> None:
    found = g6.classify([PY, "/usr/bin/vllm", "serve", "m"], vllm_default=0.92)
    assert found is not None and found.cap == 0.92
    assert "0.92" in found.cap_source


def test_flag_value_takes_the_last_one_like_argparse() -> None:
    args = ["--gpu-memory-utilization", "0.9", "--gpu-memory-utilization=0.4"]
    assert g6.flag_value(args, "--gpu-memory-utilization") == "0.4"


def test_recorded_h200_query_compute_apps_header_only_has_no_process(h200: Path) -> None:
    assert g6.parse_compute_apps((h200 / "query_apps.csv").read_text()) == []


def test_query_compute_apps_rows_and_na_memory() -> None:
    text = (
        "pid, process_name, used_gpu_memory [MiB]\n4242, /usr/bin/python3, 40960 MiB\n77, ollama, [N/A]\n\n"
    )
    rows = g6.parse_compute_apps(text)
    assert [(r["pid"], r["used"]) for r in rows] == [(4242, 40 * GIB), (77, None)]
    assert rows[1]["name"] == "ollama"


# ---------------------------------------------------------------------- grouping + verdicts


def proc(pid: int, ppid: int, cmdline: list[str], *, me: bool = False, rss: int = 50 << 20) -> dict[str, Any]:
    """A process as G6's facts record it: the reduced command line only."""
    return {
        "pid": pid,
        "ppid": ppid,
        "name": os.path.basename(cmdline[0]) if cmdline else "",
        "cmd": g6.reduce_cmdline(cmdline),
        "self": me,
        "rss_bytes": rss,
        "probe": g6.is_probe_child(cmdline),
    }


def table(*procs: dict[str, Any]) -> dict[int, dict[str, Any]]:
    base = [
        proc(1, 0, ["/sbin/init"], me=True),
        proc(10, 1, ["bash"], me=True),
        proc(11, 10, [PY, "-m", "pytest"], me=True),
    ]
    return {p["pid"]: p for p in [*base, *procs]}


def facts_of(entries: list[dict[str, Any]], procs: dict[int, dict[str, Any]]) -> g6.Facts:
    return g6.Facts(
        processes=list(procs.values()), entries=entries, mem_total_bytes=int(121.7 * GIB), scanned=len(procs)
    )


def groups(entries: list[dict[str, Any]], procs: dict[int, dict[str, Any]], **kw: Any) -> g6.Survey:
    return g6.build_groups(facts_of(entries, procs), **kw)


def test_server_workers_fold_into_the_server_with_their_nvml_memory() -> None:
    procs = table(
        proc(100, 1, [PY, "/usr/bin/vllm", "serve", "m", "--gpu-memory-utilization", "0.4"]),
        proc(101, 100, ["VLLM::EngineCore"]),
    )
    survey = groups([{"pid": 101, "used": 30 * GIB, "type": "compute", "gpu": "0"}], procs)
    assert len(survey.groups) == 1
    g = survey.groups[0]
    assert (g.pid, g.kind, g.cap, sorted(g.pids)) == (100, "vLLM", 0.4, [100, 101])
    assert g.used_by_gpu == {"0": 30 * GIB}


def test_self_probe_children_and_our_launchers_workers_are_not_other_work() -> None:
    marker = (SCRIPTS / PROTOCOL).read_text()
    procs = table(
        proc(20, 1, [PY, "/usr/bin/torchrun", "--nproc-per-node", "2", "-m", "pytest"], me=True),
        proc(21, 20, [PY, "-u", "train.py"]),  # a sibling rank of our own job
        proc(30, 11, [PY, "-c", marker + "\nmain()\n", "{}"]),  # our NVML/torch child
    )
    entries = [
        {"pid": 11, "used": GIB, "type": "compute", "gpu": "0"},
        {"pid": 21, "used": GIB, "type": "compute", "gpu": "0"},
        {"pid": 30, "used": GIB, "type": "compute", "gpu": "0"},
    ]
    survey = groups(entries, procs)
    assert survey.groups == []
    reasons = " ".join(survey.excluded)
    assert "pid 11: this pytest" in reasons
    assert "pid 21: a worker of the launcher" in reasons
    assert "pid 30: a pytest-dgx-spark probe child" in reasons
    assert g6.evaluate(facts_of(entries, procs), P).status is Status.PASS


def test_a_pid_from_another_namespace_is_listed_by_nvml_alone() -> None:
    survey = groups(
        [{"pid": 424242, "used": 2 * GIB, "type": "compute", "gpu": "0", "name": "python3"}], table()
    )
    (g,) = survey.groups
    assert g.kind == "GPU process" and g.name == "python3"


def verdict(entries: list[dict[str, Any]], *extra: dict[str, Any], t: dict[str, float] = T):
    return g6.evaluate(facts_of(entries, table(*extra)), Params(profile="gb10", thresholds=t))


def test_no_other_process_passes() -> None:
    result = verdict([])
    assert result.status is Status.PASS
    assert result.summary.startswith("no other GPU process")
    assert result.reading("other_gpu_processes").value == 0


def test_capped_at_or_below_half_warns_listing_pid_name_memory_and_cap() -> None:
    server = proc(100, 1, [PY, "/usr/bin/vllm", "serve", "m", "--gpu-memory-utilization", "0.5"])
    result = verdict([{"pid": 100, "used": 12 * GIB, "type": "compute", "gpu": "0"}], server)
    assert result.status is Status.WARN
    assert "pid 100 vLLM (cap 0.5, 12.0 GiB NVML)" in result.summary
    assert result.reading("pid_100").value == "vLLM cap 0.5 12.0 GiB"


def test_vllm_at_its_default_fails() -> None:
    server = proc(100, 1, [PY, "/usr/bin/vllm", "serve", "m"])
    result = verdict([], server)
    assert result.status is Status.FAIL
    assert "pid 100 vLLM (cap 0.9, rss 50 MiB)" in result.summary
    assert "kill 100" in result.fix
    assert any("vLLM default 0.9" in d for d in result.details)


@pytest.mark.parametrize(
    "cmdline",
    [
        ["/usr/local/bin/ollama", "serve"],
        ["llama-server", "-m", "x.gguf"],
        [PY, "-m", "sglang.launch_server", "--model-path", "m"],
        [PY, "train.py"],
    ],
)
def test_uncapped_servers_and_trainers_fail(cmdline: list[str]) -> None:
    result = verdict([], proc(100, 1, cmdline))
    assert result.status is Status.FAIL
    assert "no cap" in result.summary
    assert result.reading("uncapped_or_over_cap").value == 1


def test_a_capped_server_that_uses_more_than_the_cap_fails() -> None:
    server = proc(100, 1, [PY, "/usr/bin/vllm", "serve", "m", "--gpu-memory-utilization", "0.4"])
    result = verdict([{"pid": 100, "used": 80 * GIB, "type": "compute", "gpu": "0"}], server)
    assert result.status is Status.FAIL
    assert any("capped at 0.4 but uses 66% of the pool" in d for d in result.details)


def test_unrecognised_gpu_processes_are_judged_by_their_memory() -> None:
    small = verdict(
        [{"pid": 500, "used": 2 * GIB, "type": "compute", "gpu": "0"}], proc(500, 1, [PY, "notebook.py"])
    )
    assert small.status is Status.WARN
    big = verdict(
        [{"pid": 500, "used": 90 * GIB, "type": "compute", "gpu": "0"}], proc(500, 1, [PY, "notebook.py"])
    )
    assert big.status is Status.FAIL


def test_the_desktop_does_not_count_but_is_listed() -> None:
    xorg = proc(600, 1, ["/usr/lib/xorg/Xorg", "vt2"])
    result = verdict([{"pid": 600, "used": 80 << 20, "type": "graphics", "gpu": "0"}], xorg)
    assert result.status is Status.PASS
    assert "1 desktop graphics process not counted" in result.summary
    assert result.reading("desktop_processes").value == 1


def test_discrete_gpu_fraction_uses_that_gpus_memory() -> None:
    facts = facts_of(
        [{"pid": 500, "used": 100 * GIB, "type": "compute", "gpu": "0"}], table(proc(500, 1, [PY, "nb.py"]))
    )
    facts.gpu_totals = {"0": 141 * GIB}
    generic = Params(profile="generic", thresholds=defaults("generic"))
    assert g6.evaluate(facts, generic).status is Status.FAIL  # 71 % of the H200


def test_cap_max_threshold_is_respected() -> None:
    server = proc(100, 1, [PY, "/usr/bin/vllm", "serve", "m", "--gpu-memory-utilization", "0.6"])
    assert verdict([], server).status is Status.FAIL
    assert verdict([], server, t=dict(T, g6_cap_max=0.7)).status is Status.WARN


# ---------------------------------------------------------------------- REAL processes


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Any]:
    """Start real processes with a given argv; kill them all at teardown."""
    started: list[subprocess.Popen[bytes]] = []

    def start(argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        p = subprocess.Popen(argv, env=env, cwd=tmp_path, stdin=subprocess.DEVNULL, start_new_session=True)
        started.append(p)
        return p

    yield start
    for p in started:
        p.kill()
        p.wait(timeout=5)


def wait_for_cmdline(pid: int, word: str) -> None:
    """Until the child has exec'd (its /proc cmdline shows ``word``)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            if word in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                return
        except OSError:
            pass
        time.sleep(0.02)
    raise AssertionError(f"pid {pid} never showed {word!r}")


def console_script(folder: Path, name: str) -> Path:
    """A Python console script like pip installs (run through the interpreter)."""
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text("import time\ntime.sleep(60)\n")
    return path


@pytest.fixture(scope="session")
def sleeper_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real ELF that sleeps whatever its argv says (copied under server names)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build a sleeper binary")
    folder = tmp_path_factory.mktemp("sleeper")
    src = folder / "sleeper.c"
    src.write_text(
        "#include <unistd.h>\nint main(void) { for (int i = 0; i < 600; i++) sleep(1); return 0; }\n"
    )
    out = folder / "sleeper"
    subprocess.run([cc, "-O1", "-o", str(out), str(src)], check=True, capture_output=True)
    return out


def judged(env: dict[str, str], pids: set[int], t: dict[str, float] = T) -> dict[int, g6.Judged]:
    machine = Machine(env=env, timeout=5)
    engine = Engine(Settings(), machine)
    ctx = CheckContext("G6", engine.settings, machine, engine)
    facts = g6.gather(ctx)
    facts = g6.Facts.from_dict(json.loads(json.dumps(facts.to_dict())))  # as the engine stores them
    return {
        j.group.pid: j for j in g6.judge(facts, Params(profile="gb10", thresholds=t)) if j.group.pid in pids
    }


def test_real_vllm_console_script_at_09_fails_and_at_04_warns(
    doubles: Any, spawn: Any, tmp_path: Path
) -> None:
    vllm = console_script(tmp_path / "bin", "vllm")
    hot = spawn([sys.executable, str(vllm), "serve", "Qwen/Qwen3-8B", "--gpu-memory-utilization", "0.9"])
    cool = spawn([sys.executable, str(vllm), "serve", "small", "--gpu-memory-utilization=0.4"])
    for p in (hot, cool):
        wait_for_cmdline(p.pid, "serve")
    env = doubles.nvml(gb10.nvml(device={"compute_procs": [{"pid": hot.pid, "used_bytes": 40 * GIB}]})).env
    found = judged(env, {hot.pid, cool.pid})
    assert found[hot.pid].level == "fail" and found[hot.pid].group.used_bytes == 40 * GIB
    assert found[cool.pid].level == "warn" and found[cool.pid].group.cap == 0.4
    result = Engine(Settings(), Machine(env=env, timeout=5)).run("G6")
    assert result.status is Status.FAIL
    assert f"pid {hot.pid} vLLM (cap 0.9, 40.0 GiB NVML)" in result.summary


def test_real_python_m_vllm_entrypoint(doubles: Any, spawn: Any, tmp_path: Path) -> None:
    pkg = tmp_path / "site" / "vllm" / "entrypoints" / "openai"
    pkg.mkdir(parents=True)
    for folder in (pkg.parent.parent, pkg.parent, pkg):
        (folder / "__init__.py").write_text("")
    (pkg / "api_server.py").write_text("import time\ntime.sleep(60)\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "site"))
    p = spawn(
        [
            sys.executable,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            "m",
            "--gpu-memory-utilization=0.45",
        ],
        env,
    )
    wait_for_cmdline(p.pid, "api_server")
    found = judged(doubles.nvml(gb10.nvml()).env, {p.pid})
    assert found[p.pid].group.kind == "vLLM" and found[p.pid].level == "warn"


@pytest.mark.parametrize(
    ("name", "args", "kind"),
    [("ollama", ["serve"], "Ollama"), ("llama-server", ["-m", "model.gguf"], "llama.cpp")],
)
def test_real_binaries_without_a_cap_fail(
    doubles: Any, spawn: Any, tmp_path: Path, sleeper_binary: Path, name: str, args: list[str], kind: str
) -> None:
    exe = tmp_path / name
    shutil.copy(sleeper_binary, exe)
    p = spawn([str(exe), *args])
    wait_for_cmdline(p.pid, name)
    found = judged(doubles.nvml(gb10.nvml()).env, {p.pid})
    assert found[p.pid].group.kind == kind
    assert found[p.pid].level == "fail" and "uncapped" in found[p.pid].why


def test_real_trainer_with_nvml_memory_and_its_worker(doubles: Any, spawn: Any, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        "import subprocess, sys, time\n"
        "w = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(w.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    p = subprocess.Popen(
        [sys.executable, "-u", str(script), "--epochs", "1"], stdout=subprocess.PIPE, cwd=tmp_path
    )
    try:
        worker = int(p.stdout.readline())  # type: ignore[union-attr]
        env = doubles.nvml(gb10.nvml(device={"compute_procs": [{"pid": worker, "used_bytes": 3 * GIB}]})).env
        found = judged(env, {p.pid})
        g = found[p.pid].group
        assert g.kind == "trainer" and worker in g.pids and g.used_bytes == 3 * GIB
        assert found[p.pid].level == "fail"
    finally:
        subprocess.run(["pkill", "-P", str(p.pid)], check=False)
        p.kill()
        p.wait(timeout=5)


def test_the_pytest_process_itself_on_the_gpu_is_not_contention(doubles: Any) -> None:
    env = doubles.nvml(gb10.nvml(device={"compute_procs": [{"pid": os.getpid(), "used_bytes": GIB}]})).env
    machine = Machine(env=env, timeout=5)
    engine = Engine(Settings(), machine)
    facts = g6.gather(CheckContext("G6", engine.settings, machine, engine))
    survey = g6.build_groups(facts)
    assert all(os.getpid() not in g.pids for g in survey.groups)
    assert any(f"pid {os.getpid()}: this pytest" in e for e in survey.excluded)


def test_nvml_unavailable_falls_back_to_nvidia_smi_compute_apps(doubles: Any) -> None:
    doubles.tool(
        "nvidia-smi",
        "#!/bin/sh\necho '999999, /usr/bin/python3, 2048'\n",
    )
    env = doubles.nvml({"init_error": "LibraryNotFound"}).env
    found = judged(env, {999999})
    assert found[999999].group.used_bytes == 2 * GIB
    assert found[999999].group.kind == "GPU process"


def test_a_fake_root_without_proc_is_a_note_not_a_crash(doubles: Any, fake_root: Any) -> None:
    root = fake_root({"proc/meminfo": gb10.meminfo()})
    env = doubles.nvml(gb10.nvml(device={"compute_procs": [{"pid": 4242, "used_bytes": 70 * GIB}]})).env
    result = Engine(Settings(), Machine(root=root, env=env, timeout=5)).run("G6")
    assert result.status is Status.FAIL  # NVML still sees the 70 GiB process
    assert "pid 4242 GPU process" in result.summary
    assert "cannot list processes" in result.summary
