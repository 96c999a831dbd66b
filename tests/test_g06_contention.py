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
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_dgx_spark.checks.g06_contention import check as g6
from pytest_dgx_spark.checks.kit import CheckContext, Params
from pytest_dgx_spark.checks.record import plain
from pytest_dgx_spark.engine import Engine
from pytest_dgx_spark.model import Status
from pytest_dgx_spark.probes.child import PROTOCOL, SCRIPTS
from pytest_dgx_spark.probes.gpu_programs import (
    classify,
    flag_value,
    is_launcher,
    is_probe_child,
    parse_compute_apps,
    reduce_cmdline,
)
from pytest_dgx_spark.probes.machine import Machine
from pytest_dgx_spark.settings import Settings
from pytest_dgx_spark.thresholds import defaults

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
    found = classify(cmdline)
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
    assert classify(cmdline) is None


def test_unreadable_cap_counts_as_uncapped_and_says_so() -> None:
    found = classify([PY, "/usr/bin/vllm", "serve", "m", "--gpu-memory-utilization", "lots"])
    assert found is not None and found.cap is None
    assert "unreadable --gpu-memory-utilization 'lots'" in found.cap_source


def test_vllm_default_is_a_threshold() -> None:
    found = classify([PY, "/usr/bin/vllm", "serve", "m"], vllm_default=0.92)
    assert found is not None and found.cap == 0.92
    assert "0.92" in found.cap_source


def test_flag_value_takes_the_last_one_like_argparse() -> None:
    args = ["--gpu-memory-utilization", "0.9", "--gpu-memory-utilization=0.4"]
    assert flag_value(args, "--gpu-memory-utilization") == "0.4"


def test_recorded_h200_query_compute_apps_header_only_has_no_process(h200: Path) -> None:
    assert parse_compute_apps((h200 / "query_apps.csv").read_text()) == []


def test_query_compute_apps_rows_and_na_memory() -> None:
    text = (
        "pid, process_name, used_gpu_memory [MiB]\n4242, /usr/bin/python3, 40960 MiB\n77, ollama, [N/A]\n\n"
    )
    rows = parse_compute_apps(text)
    assert [(r.pid, r.used) for r in rows] == [(4242, 40 * GIB), (77, None)]
    assert rows[1].name == "ollama"


# ---------------------------------------------------------------------- grouping + verdicts


def proc(pid: int, ppid: int, cmdline: list[str], *, me: bool = False, rss: int = 50 << 20) -> dict[str, Any]:
    """A process as G6's facts record it: the reduced command line only."""
    return {
        "pid": pid,
        "ppid": ppid,
        "name": os.path.basename(cmdline[0]) if cmdline else "",
        "cmd": reduce_cmdline(cmdline),
        "self": me,
        "rss_bytes": rss,
        "probe": is_probe_child(cmdline),
    }


def table(*procs: dict[str, Any]) -> dict[int, dict[str, Any]]:
    base = [
        proc(1, 0, ["/sbin/init"], me=True),
        proc(10, 1, ["bash"], me=True),
        proc(11, 10, [PY, "-m", "pytest"], me=True),
    ]
    return {p["pid"]: p for p in [*base, *procs]}


def facts_of(entries: list[dict[str, Any]], procs: dict[int, dict[str, Any]]) -> g6.Facts:
    return g6.Facts.from_dict(
        {"processes": list(procs.values()), "entries": entries, "mem_total_bytes": int(121.7 * GIB),
         "scanned": len(procs)}
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
    assert (result.status, result.codes) == (Status.PASS, [])
    assert result.summary.startswith("no other GPU process")
    assert result.reading("other_gpu_processes").value == 0


def test_capped_at_or_below_half_warns_listing_pid_name_memory_and_cap() -> None:
    server = proc(100, 1, [PY, "/usr/bin/vllm", "serve", "m", "--gpu-memory-utilization", "0.5"])
    result = verdict([{"pid": 100, "used": 12 * GIB, "type": "compute", "gpu": "0"}], server)
    assert (result.status, result.codes) == (Status.WARN, ["G6.capped-process"])
    assert "pid 100 vLLM (cap 0.5, 12.0 GiB NVML)" in result.summary
    assert result.reading("pid_100").value == "vLLM cap 0.5 12.0 GiB"


def test_vllm_at_its_default_fails() -> None:
    server = proc(100, 1, [PY, "/usr/bin/vllm", "serve", "m"])
    result = verdict([], server)
    assert (result.status, result.code) == (Status.FAIL, "G6.uncapped-process")
    assert "pid 100 vLLM (cap 0.9, rss 50 MiB)" in result.summary
    assert "kill 100" in result.fix
    assert any("vLLM default 0.9" in d for d in result.details)


def test_more_than_three_to_kill_are_counted_not_dropped() -> None:
    """The fix named the first three pids and silently left out the rest
    (``kill 100 101 102`` for five servers); it now counts them, by the kit's
    "first N, and M more" rule."""
    servers = [proc(100 + i, 1, [PY, "/usr/bin/vllm", "serve", "m"]) for i in range(5)]
    result = verdict([], *servers)
    assert (result.status, result.code) == (Status.FAIL, "G6.uncapped-process")
    assert "(kill 100 101 102 and 2 more)" in result.fix
    assert "kill 100 101 102 and 2 more, or restart" in result.short_line()


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
    assert (result.status, result.code) == (Status.FAIL, "G6.uncapped-process")
    assert "no cap" in result.summary
    assert result.reading("uncapped_or_over_cap").value == 1


def test_a_capped_server_that_uses_more_than_the_cap_fails() -> None:
    server = proc(100, 1, [PY, "/usr/bin/vllm", "serve", "m", "--gpu-memory-utilization", "0.4"])
    result = verdict([{"pid": 100, "used": 80 * GIB, "type": "compute", "gpu": "0"}], server)
    assert (result.status, result.code) == (Status.FAIL, "G6.uncapped-process")
    assert any("capped at 0.4 but uses 66% of the pool" in d for d in result.details)


def test_unrecognised_gpu_processes_are_judged_by_their_memory() -> None:
    small = verdict(
        [{"pid": 500, "used": 2 * GIB, "type": "compute", "gpu": "0"}], proc(500, 1, [PY, "notebook.py"])
    )
    assert (small.status, small.codes) == (Status.WARN, ["G6.capped-process"])
    big = verdict(
        [{"pid": 500, "used": 90 * GIB, "type": "compute", "gpu": "0"}], proc(500, 1, [PY, "notebook.py"])
    )
    assert (big.status, big.code) == (Status.FAIL, "G6.uncapped-process")


def test_the_desktop_does_not_count_but_is_listed() -> None:
    xorg = proc(600, 1, ["/usr/lib/xorg/Xorg", "vt2"])
    result = verdict([{"pid": 600, "used": 80 << 20, "type": "graphics", "gpu": "0"}], xorg)
    assert (result.status, result.codes) == (Status.PASS, [])
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
    assert verdict([], server, t=dict(T, g6_cap_max=0.7)).codes == ["G6.capped-process"]


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
    doubles: Any, spawn: Any, tmp_path: Path, fake_root: Any
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
    # only these two in the survey: other tests' real servers and trainers would crowd the summary
    result = Engine(
        Settings(), Machine(root=gb10_root(fake_root, hot.pid, cool.pid), env=env, timeout=5)
    ).run("G6")
    assert (result.status, result.code) == (Status.FAIL, "G6.uncapped-process")
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
    assert (result.status, result.code) == (Status.FAIL, "G6.uncapped-process")  # NVML still sees the 70 GiB process
    assert "pid 4242 GPU process" in result.summary
    assert "cannot list processes" in result.summary


# ---------------------------------------------------------------------- contract, captures, faults

GB10_DATA = Path(__file__).parent / "data" / "gb10"
SECRETS = ("SECRET123", "hf_SECRETTOKEN", "/home/alice")


def run_g6(env: dict[str, str], root: Path | None = None, **kw: Any) -> tuple[Any, Engine]:
    engine = Engine(Settings(**kw), Machine(root=root, env=env, timeout=5))
    return engine.run("G6"), engine


def test_facts_round_trip_through_json_to_the_same_result() -> None:
    procs = table(
        proc(100, 1, [PY, "/usr/bin/vllm", "serve", "m", "--gpu-memory-utilization", "0.4"]),
        proc(101, 100, ["VLLM::EngineCore"]),
        proc(200, 1, [PY, "train.py"]),
    )
    facts = facts_of([{"pid": 101, "used": 30 * GIB, "type": "compute", "gpu": "0"}], procs)
    facts.notes.append("a note")
    again = g6.Facts.from_dict(json.loads(json.dumps(facts.to_dict())))
    assert g6.evaluate(again, P) == g6.evaluate(facts, P)
    assert g6.evaluate(again, P).status is Status.FAIL


@pytest.mark.parametrize(
    "cmdline",
    [
        [
            PY,
            "/home/alice/.venv/bin/vllm",
            "serve",
            "org/m",
            "--api-key",
            "SECRET123",
            "--gpu-memory-utilization=0.4",
        ],
        [PY, "-m", "vllm.entrypoints.openai.api_server", "--hf_token", "hf_SECRETTOKEN", "--model", "m"],
        [PY, "/home/alice/site/vllm/entrypoints/openai/api_server.py", "--api-key=SECRET123"],
        [PY, "-m", "sglang.launch_server", "--model-path", "/home/alice/m", "--mem-fraction-static", "0.4"],
        ["/home/alice/bin/llama-server", "-m", "/home/alice/x.gguf", "--api-key", "SECRET123"],
        [PY, "-u", "/home/alice/train.py", "--hf_token", "hf_SECRETTOKEN"],
        ["text-generation-launcher", "--model-id", "m", "--cuda-memory-fraction", "0.35"],
        [PY, "/usr/bin/torchrun", "--nproc-per-node", "2", "/home/alice/train.py", "--api-key", "SECRET123"],
        [PY, "-c", "import os; os.environ['HF_TOKEN']='hf_SECRETTOKEN'"],
        ["/usr/bin/ollama", "serve"],
        ["sleep", "SECRET123"],
    ],
)
def test_the_reduced_command_line_classifies_the_same_and_keeps_no_secret(cmdline: list[str]) -> None:
    """Issue 12: only the program, a known subcommand and the cap flags are kept."""
    reduced = reduce_cmdline(cmdline)
    assert classify(reduced) == classify(cmdline)
    assert is_launcher(reduced) == is_launcher(cmdline)
    assert not any(s in " ".join(reduced) for s in SECRETS), reduced


@pytest.mark.parametrize("raw", ["nan", "-0.5", "0", "inf", "1.5"])
def test_a_cap_that_is_no_fraction_counts_as_uncapped_with_a_note(
    doubles: Any, spawn: Any, tmp_path: Path, raw: str
) -> None:
    """Issue 12: a real vLLM-named process started with ``--gpu-memory-utilization
    nan`` (or -0.5, 0, inf, 1.5) was "capped"; now it is uncapped, and says why."""
    vllm = console_script(tmp_path / "bin", "vllm")
    p = spawn([sys.executable, str(vllm), "serve", "m", "--gpu-memory-utilization", raw])
    wait_for_cmdline(p.pid, "serve")
    found = judged(doubles.nvml(gb10.nvml()).env, {p.pid})[p.pid]
    assert found.group.cap is None and found.level == "fail"
    assert f"unreadable --gpu-memory-utilization '{raw}' (not a fraction in (0, 1])" in found.why


def test_real_secrets_in_argv_stay_out_of_the_result_and_the_facts(
    doubles: Any, spawn: Any, tmp_path: Path, fake_root: Any
) -> None:
    """Issue 12: a real process started as ``vllm serve … --api-key SECRET123
    --hf_token hf_SECRETTOKEN``; G6 FAILs on it, and neither the Result, its
    dict, nor the facts the engine keeps for capture carry a secret."""
    home = tmp_path / "home" / "alice"
    home.mkdir(parents=True)
    vllm = console_script(home / "bin", "vllm")
    argv = [
        sys.executable,
        str(vllm),
        "serve",
        "org/m",
        "--api-key",
        "SECRET123",
        "--hf_token",
        "hf_SECRETTOKEN",
    ]
    p = spawn(argv)
    wait_for_cmdline(p.pid, "SECRET123")
    env = doubles.nvml(gb10.nvml(device={"compute_procs": [{"pid": p.pid, "used_bytes": 40 * GIB}]})).env
    # only this process in the survey: the busy machine's own trainers would crowd the summary
    result, engine = run_g6(env, root=gb10_root(fake_root, p.pid))
    assert (result.status, result.code) == (Status.FAIL, "G6.uncapped-process") and f"pid {p.pid} vLLM" in result.summary
    assert any(f"pid {p.pid} vLLM" in d and d.endswith("vllm serve") for d in result.details)
    dumped = json.dumps(result.to_dict()) + json.dumps(engine.facts("G6")) + result.report_text()
    for secret in (*SECRETS[:2], str(home)):
        assert secret not in dumped


def gb10_root(fake_root: Any, *pids: int) -> Path:
    """A machine root with the GB10 double's /proc/meminfo (a 121.7 GiB pool)
    whose ``/proc/<pid>`` for each given REAL pid links to the real one (and a
    crafted init, so the table is never empty). Other processes of this busy
    machine stay out of the survey."""
    root = fake_root({"proc/meminfo": gb10.meminfo()})
    proc_tree(root, 1, 0, ["/sbin/init"], name="init")
    for pid in pids:
        os.symlink(f"/proc/{pid}", root / "proc" / str(pid))
    return root


def proc_tree(root: Path, pid: int, ppid: int, argv: list[str], name: str = "python3") -> None:
    """A crafted ``/proc/<pid>`` under a machine root: ``stat`` and ``cmdline``."""
    folder = root / "proc" / str(pid)
    folder.mkdir(parents=True, exist_ok=True)
    rest = " ".join(["0"] * 19)
    (folder / "stat").write_text(f"{pid} ({name}) S {ppid} {rest} 12800 0\n")
    (folder / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")


def test_secrets_stay_out_of_terminal_junit_json_and_env_report(
    pytester: pytest.Pytester, spark_env: Any
) -> None:
    """Issue 12, end to end: a vLLM with ``--api-key SECRET123 --hf_token …``
    planted under the machine root (SPARK_PREFLIGHT_HOST_ROOT) and holding
    40 GiB per NVML; ``pytest --spark-preflight -rA -v --junitxml --json-report
    --spark-report`` and ``spark-preflight --json`` name it in G6's FAIL, and
    no output carries the secrets."""
    argv = [PY, "/home/alice/.venv/bin/vllm", "serve", "org/m", "--api-key", "SECRET123"]
    argv += ["--hf_token", "hf_SECRETTOKEN", "--gpu-memory-utilization", "0.9"]
    proc_tree(spark_env.root, 4242, 1, argv)
    spark_env.nvml_scenario["devices"][0]["compute_procs"] = [{"pid": 4242, "used_bytes": 40 * GIB}]
    spark_env.doubles.nvml(spark_env.nvml_scenario)
    args = ["--spark-preflight", "--spark-only", "G6", "-rA", "-v", "--junitxml=r.xml", "-p", "no:randomly"]
    args += ["--json-report", "--json-report-file=r.json", "--spark-report", "env-report.json"]
    result = pytester.runpytest_subprocess(*args)
    out = result.stdout.str() + result.stderr.str()
    assert "G6 FAIL: 1 other GPU process uncapped or above 0.5: pid 4242 vLLM (cap 0.9, 40.0 GiB NVML)" in out
    assert "vllm serve --gpu-memory-utilization=0.9" in out  # the reduced command line, in the details
    cli = subprocess.run(
        [sys.executable, "-m", "pytest_dgx_spark.cli", "--only", "G6", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=pytester.path,
    )
    assert '"G6 FAIL: 1 other GPU process uncapped' in cli.stdout, cli.stderr
    files = [pytester.path / name for name in ("r.xml", "r.json", "env-report.json")]
    for text in [out, cli.stdout + cli.stderr, *(f.read_text() for f in files)]:
        for secret in SECRETS:
            assert secret not in text


def test_no_gpu_skips_whatever_the_process_table_names(doubles: Any, spawn: Any, tmp_path: Path) -> None:
    """Issue 11: a machine without a GPU FAILed G6 when a process was named like
    vLLM. A real vLLM-named process; NVML answers with no device (and, second,
    no NVML library and nvidia-smi exiting 9): SKIP, the process in the text."""
    vllm = console_script(tmp_path / "bin", "vllm")
    p = spawn([sys.executable, str(vllm), "serve", "m"])
    wait_for_cmdline(p.pid, "serve")
    no_device, _ = run_g6(doubles.nvml(gb10.nvml(devices=[])).env)
    assert (no_device.status, no_device.codes) == (Status.SKIP, ["G6.no-gpu"])
    assert no_device.summary.startswith("no NVIDIA GPU to contend for (NVML answered but reports no GPU)")
    assert "; the process table names pid " in no_device.summary
    assert any(d.startswith(f"FAIL pid {p.pid} vLLM") for d in no_device.details)
    doubles.tool(
        "nvidia-smi", "#!/bin/sh\necho 'NVIDIA-SMI has failed because it couldn'\\''t communicate'\nexit 9\n"
    )
    no_driver, _ = run_g6(doubles.nvml({"init_error": "LibraryNotFound"}).env)
    assert (no_driver.status, no_driver.codes) == (Status.SKIP, ["G6.no-gpu"])
    assert no_driver.headline == "no NVIDIA GPU to contend for"


def test_unreadable_pids_are_skipped_and_counted(doubles: Any, fake_root: Any) -> None:
    """Issue 12: one pid whose ``stat`` is a symlink loop and one whose
    ``cmdline`` is, under the machine root, next to a vLLM: the scan goes on,
    the vLLM is judged, and both unreadable pids are counted."""
    root = fake_root({"proc/meminfo": gb10.meminfo()})
    proc_tree(root, 100, 1, [PY, "/usr/bin/vllm", "serve", "m"])
    (root / "proc/200").mkdir()
    os.symlink("loop", root / "proc/200/stat")
    os.symlink("stat", root / "proc/200/loop")
    proc_tree(root, 300, 1, ["sleep", "9"], name="sleep")
    (root / "proc/300/cmdline").unlink()
    os.symlink("cmdline", root / "proc/300/cmdline")
    result, _ = run_g6(doubles.nvml(gb10.nvml()).env, root)
    assert (result.status, result.code) == (Status.FAIL, "G6.uncapped-process") and "pid 100 vLLM" in result.summary
    assert result.reading("processes_scanned").value == 2
    assert result.reading("processes_unreadable").value == 2
    assert any(
        d.startswith("2 processes unreadable, skipped or listed without a command line: pid 200: ")
        and "symbolic links" in d
        for d in result.details
    )


def test_a_fifo_for_a_pids_files_does_not_block_the_scan(doubles: Any, fake_root: Any) -> None:
    """Issue 12: a FIFO where ``/proc/<pid>/cmdline`` or ``stat`` should be
    (no writer: a plain open() never returns) is refused and counted."""
    import threading

    root = fake_root({"proc/meminfo": gb10.meminfo()})
    proc_tree(root, 100, 1, [PY, "/usr/bin/vllm", "serve", "m"])
    proc_tree(root, 200, 1, ["x"])
    (root / "proc/200/cmdline").unlink()
    os.mkfifo(root / "proc/200/cmdline")
    (root / "proc/300").mkdir()
    os.mkfifo(root / "proc/300/stat")
    box: dict[str, Any] = {}
    worker = threading.Thread(
        target=lambda: box.update(r=run_g6(doubles.nvml(gb10.nvml()).env, root)[0]), daemon=True
    )
    worker.start()
    worker.join(20)
    assert not worker.is_alive(), "G6's process scan blocked on a FIFO"
    result = box["r"]
    assert (result.status, result.code) == (Status.FAIL, "G6.uncapped-process") and "pid 100 vLLM" in result.summary
    assert result.reading("processes_unreadable").value == 2
    assert any("not a regular file (a FIFO)" in d for d in result.details)


#: a sitecustomize that makes one path's open() never return, in whatever
#: process reads it: what a read of /proc/<pid>/cmdline does when that process
#: is stuck in the kernel holding its memory lock (a CUDA job wedged in the
#: driver). The real one is uninterruptible; this one at least never returns.
STUCK_READ = """
import os, time
_stuck = os.environ.get("SPARK_TEST_STUCK_PATH")
_open = os.open
def _blocking_open(path, *args, **kwargs):
    if _stuck and os.fspath(path) == _stuck:
        time.sleep(3600)
    return _open(path, *args, **kwargs)
os.open = _blocking_open
"""


def test_a_pid_whose_cmdline_read_never_returns_does_not_block_the_run(
    doubles: Any, fake_root: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 12 (item 4's last sibling): reading a process's cmdline blocks in
    the kernel while that process holds its memory lock, with no timeout that
    ends it. G6 and G10 scanned /proc in the pytest process, so one wedged
    CUDA job hung the whole preflight. The scan runs in a child now: G6
    answers within its timeout, names the pid and the file, keeps what was
    read before it (the vLLM at pid 100), and NVML still judges."""
    root = fake_root({"proc/meminfo": gb10.meminfo()})
    proc_tree(root, 100, 1, [PY, "/usr/bin/vllm", "serve", "m"])
    proc_tree(root, 4242, 1, [PY, "train.py"])
    proc_tree(root, 4300, 1, ["sleep", "9"], name="sleep")
    hook = tmp_path / "stuck"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(STUCK_READ)
    env = doubles.nvml(gb10.nvml()).env
    env["PYTHONPATH"] = os.pathsep.join([str(hook), env.get("PYTHONPATH", "")])
    env["SPARK_TEST_STUCK_PATH"] = str(root / "proc/4242/cmdline")
    # the kernel blocks that read in every process, this one too (where the scan used to run)
    real_open, stuck = os.open, env["SPARK_TEST_STUCK_PATH"]

    def blocking_open(path: Any, *args: Any, **kwargs: Any) -> int:
        if os.fspath(path) == stuck:
            time.sleep(3600)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", blocking_open)
    engine = Engine(Settings(), Machine(root=root, env=env, timeout=1))
    box: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: box.update(r=engine.run("G6")), daemon=True)
    start = time.monotonic()
    worker.start()
    worker.join(20)
    assert not worker.is_alive(), "G6's process scan blocked on a stuck cmdline read"
    assert time.monotonic() - start < 10  # a step timeout of 1 s, not the hour the read would take
    result = box["r"]
    assert (result.status, result.code) == (Status.FAIL, "G6.uncapped-process") and "pid 100 vLLM" in result.summary
    table = engine.machine.processes()
    assert [p["pid"] for p in table["processes"]] == [100]
    assert table["error"].startswith(
        "the process scan stopped: reading /proc/4242/cmdline did not return within 1.0 s"
    )
    assert "wedged GPU driver" in table["error"] and "1 processes read before it" in table["error"]
    assert any("process table: the process scan stopped" in d for d in [result.summary, *result.details])


def table_rows(name: str) -> list[tuple[int, str, str, int]]:
    """The ``Processes:`` rows of an nvidia-smi table: (pid, type, name, MiB)."""
    rows = re.findall(
        r"^\|\s+\d+\s+\S+\s+\S+\s+(\d+)\s+([CG])\s+(\S+)\s+(\d+)MiB \|$", (GB10_DATA / name).read_text(), re.M
    )
    return [(int(pid), kind, prog, int(mib)) for pid, kind, prog, mib in rows]


def test_gb10_desktop_processes_from_a_real_table_are_listed_not_counted(
    doubles: Any, fake_root: Any
) -> None:
    """nvidia-smi_4.txt (a DGX Spark, driver 580.95.05): memory ``Not Supported``
    but the process table lists Xorg 84 MiB, gnome-shell 125 MiB, firefox
    273 MiB, all type G. Through NVML's per-process answer: PASS, 3 desktop
    processes not counted, each with its memory in the details."""
    rows = table_rows("nvidia-smi_4.txt")
    assert [(r[0], r[3]) for r in rows] == [(4174, 84), (4399, 125), (4761, 273)]
    graphics = [{"pid": pid, "used_bytes": mib << 20} for pid, kind, _, mib in rows if kind == "G"]
    result, _ = run_g6(doubles.nvml(gb10.nvml(device={"graphics_procs": graphics})).env, gb10_root(fake_root))
    assert (result.status, result.codes) == (Status.PASS, [])
    assert result.summary == "no other GPU process [NVML; 3 desktop graphics processes not counted]"
    assert any(d.startswith("DISPLAY pid 4761 GPU process") and "GPU 0: 273 MiB" in d for d in result.details)


def test_gb10_query_compute_apps_with_a_gpu_uuid_column(doubles: Any, fake_root: Any) -> None:
    """nvidia-smi-query_1.txt (a GB10): ``--query-compute-apps=gpu_uuid,pid,
    process_name,used_memory`` prints ``GPU-..., 114687, /usr/local/bin/python,
    19135`` while device memory is ``[N/A]``. Without NVML in Python G6 reads
    that list; the process's 18.7 GiB is in the finding."""
    line = next(
        ln for ln in (GB10_DATA / "nvidia-smi-query_1.txt").read_text().splitlines() if ln.startswith("GPU-")
    )
    assert plain(parse_compute_apps(line)) == [
        {"pid": 114687, "used": 19135 << 20, "type": "compute", "gpu": "0", "name": "python"}
    ]
    doubles.tool("nvidia-smi", f"#!/bin/sh\necho '{line}'\n")
    result, _ = run_g6(doubles.nvml({"init_error": "LibraryNotFound"}).env, gb10_root(fake_root))
    assert (result.status, result.codes) == (Status.WARN, ["G6.capped-process"])
    assert result.headline == "pid 114687 GPU process (python) 18.7 GiB NVML: no cap known, 15% of the pool"
    assert result.summary.endswith("[nvidia-smi --query-compute-apps]")


def test_gb10_vllm_worker_holding_89_gib_over_its_cap_fails(
    doubles: Any, spawn: Any, tmp_path: Path, fake_root: Any
) -> None:
    """nvml_process_memory_1.txt (nvtop PR #511, a DGX Spark with 121.690 GiB):
    NVML per process reports a vLLM worker at 89.276 GiB. A real vLLM started
    capped at 0.5 whose worker NVML sees at that figure: FAIL, 73 % of the pool,
    the memory in the headline and the short line within 120 characters."""
    assert "| vLLM worker serving | 89.276 GiB |" in (GB10_DATA / "nvml_process_memory_1.txt").read_text()
    vllm = console_script(tmp_path / "bin", "vllm")
    p = spawn([sys.executable, str(vllm), "serve", "m", "--gpu-memory-utilization", "0.5"])
    wait_for_cmdline(p.pid, "serve")
    used = int(89.276 * GIB)
    env = doubles.nvml(gb10.nvml(device={"compute_procs": [{"pid": p.pid, "used_bytes": used}]})).env
    result, _ = run_g6(env, gb10_root(fake_root, p.pid))
    assert (result.status, result.code) == (Status.FAIL, "G6.uncapped-process")
    assert result.headline == f"pid {p.pid} vLLM 89.3 GiB NVML: uses 73% of the pool > 0.5"
    assert any("capped at 0.5 but uses 73% of the pool" in d for d in result.details)
    assert len(result.short_line()) <= 120 and f"kill {p.pid}" in result.short_line()


@pytest.mark.parametrize(
    "entries_and_procs",
    [
        ([], []),
        (
            [{"pid": 100, "used": 12 * GIB, "type": "compute", "gpu": "0"}],
            [[PY, "/usr/bin/vllm", "serve", "m", "--gpu-memory-utilization", "0.5"]],
        ),
        (
            [],
            [
                [PY, "/usr/bin/vllm", "serve", "m"],
                ["/usr/bin/ollama", "serve"],
                [PY, "train.py"],
                [PY, "sft.py"],
            ],
        ),
    ],
)
def test_every_result_has_a_headline_and_a_short_line(entries_and_procs: Any) -> None:
    entries, cmdlines = entries_and_procs
    procs = table(*[proc(100 + i, 1, c) for i, c in enumerate(cmdlines)])
    result = g6.evaluate(facts_of(entries, procs), P)
    assert result.headline and len(result.short_line()) <= 120
    if result.status in (Status.FAIL, Status.WARN):
        assert result.short_fix and "; fix: " in result.short_line()


def test_process_table_reads_names_with_parentheses_and_marks_nothing_foreign(fake_root: Any) -> None:
    """``/proc/<pid>/stat`` puts the name in parentheses, and a name may hold
    ``) (`` itself; the ppid and rss are read after the last ``)``."""
    from pytest_dgx_spark.probes.processes import list_processes

    root = fake_root({})
    proc_tree(root, 7, 1, ["./a.out"], name="evil) S 99 (x")
    table = list_processes(root)
    assert table["error"] is None and table["unreadable"] == 0
    (p,) = table["processes"]
    assert (p["pid"], p["ppid"], p["name"], p["cmdline"]) == (7, 1, "evil) S 99 (x", ["./a.out"])
    assert p["rss_bytes"] == 12800 * os.sysconf("SC_PAGE_SIZE") and p["self"] is False


# ---------------------------------------------------------------------- a title in argv[0]

#: what ``setproctitle`` or ``exec -a`` leave in argv[0]: the whole command line, secrets included
TITLE = "python -m vllm.entrypoints.openai.api_server --model x --api-key SECRET456"
#: a token in the program's own slot
TOKEN_TITLE = "hf_" + "ProgramSlotSecret0123456789"


@pytest.mark.parametrize(
    ("cmdline", "reduced"),
    [
        ([TITLE, "900"], ["python", "-m", "vllm.entrypoints.openai.api_server"]),
        (
            [TITLE + " --gpu-memory-utilization 0.4"],
            ["python", "-m", "vllm.entrypoints.openai.api_server", "--gpu-memory-utilization=0.4"],
        ),
        (["/opt/bin/vllm serve org/m --hf_token hf_" + "x" * 20], ["vllm", "serve"]),
        ([TOKEN_TITLE, "900"], ["<redacted>"]),
        (["--api-key=SECRET456"], ["--api-key=<redacted>"]),
        (["sshd: alice@pts/0"], ["sshd:"]),
    ],
)
def test_a_title_in_argv0_is_split_before_it_is_reduced(cmdline: list[str], reduced: list[str]) -> None:
    """``reduce_cmdline`` kept ``basename(argv[0])`` whole, so a process that
    rewrote argv[0] into its whole command line showed it, secrets and all. A
    title is split into words first (and classifies as the server it names);
    a token or a secret flag in the program's slot is redacted."""
    assert reduce_cmdline(cmdline) == reduced
    kind = classify(cmdline)
    if "vllm" in " ".join(reduced):
        assert kind is not None and kind.kind == "vLLM"
        assert classify(reduced) == kind


def test_a_title_in_argv0_reaches_no_output(
    pytester: pytest.Pytester, spark_env: Any, monkeypatch: pytest.MonkeyPatch, spawn: Any
) -> None:
    """Real processes started with ``exec -a TITLE sleep 900`` (their argv[0]
    is the title), listed by a fake ``nvidia-smi`` with the title as process
    name (NVML absent), and one pid from another namespace whose nvidia-smi
    name holds a secret: G6 FAILs on the vLLM the title names, and no output
    (terminal, JUnit, env report, capture, JSON report, CLI, --json) carries
    a secret."""
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash is needed for exec -a")
    vllm = spawn([bash, "-c", 'exec -a "$0" sleep 900', TITLE])
    other = spawn([bash, "-c", 'exec -a "$0" sleep 900', TOKEN_TITLE])
    wait_for_cmdline(vllm.pid, "SECRET456")
    wait_for_cmdline(other.pid, TOKEN_TITLE)
    proc_tree(spark_env.root, 1, 0, ["/sbin/init"], name="init")
    for pid in (vllm.pid, other.pid):
        os.symlink(f"/proc/{pid}", spark_env.root / "proc" / str(pid))
    rows = [
        f"{vllm.pid}, {TITLE}, 40960",
        f"{other.pid}, {TOKEN_TITLE}, 2048",
        "999999, sk-SECRET789abcdefghijkl --x, 1024",
    ]
    spark_env.doubles.nvml({"init_error": "LibraryNotFound"})
    spark_env.doubles.tool("nvidia-smi", "#!/bin/sh\n" + "".join(f"echo '{r}'\n" for r in rows))
    spark_env.doubles.apply(monkeypatch)
    from every_output import every_output, leaks

    outputs = every_output(pytester, ["--spark-preflight", "--spark-only", "G6"], ["--only", "G6"])
    assert f"G6 FAIL: 1 other GPU process uncapped or above 0.5: pid {vllm.pid} vLLM" in outputs["pytest -v"]
    assert "vllm.entrypoints.openai.api_server" in outputs["pytest -v"]
    assert f"pid {vllm.pid} vLLM" in outputs["cli --json"]
    assert leaks(outputs, "SECRET456", TOKEN_TITLE, "SECRET789") == []
    # the reduced command line has no positional argument (the capture keeps nvidia-smi's raw rows)
    assert leaks({k: v for k, v in outputs.items() if k != "capture.json"}, "--model x") == []


@pytest.mark.parametrize("others", [(), ("bash",)], ids=["no-process", "a-shell"])
def test_an_unreadable_gpu_process_list_with_no_process_is_a_warn_never_a_pass(
    others: tuple[str, ...],
) -> None:
    """Neither NVML nor nvidia-smi gave a GPU process list (a hung driver),
    and the process table shows no server or trainer: an unknown program
    holding GPU memory would not show, so G6 WARNs (never PASS) and points at
    G4, where the driver that does not answer is reported."""
    procs = table(*(proc(200 + i, 1, [name]) for i, name in enumerate(others)))
    facts = facts_of([], procs)
    facts.nvml, facts.gpu_source = "nvmlInit hung (killed after 10 s)", "none"
    result = g6.evaluate(facts, P)
    assert (result.status, result.codes) == (Status.WARN, ["G6.process-list-unreadable"]), result.line()
    assert result.summary.startswith(
        "GPU process list unreadable (NVML and nvidia-smi did not answer, see G4)"
    )
    assert result.headline == "GPU process list unreadable (NVML and nvidia-smi did not answer)"
    assert result.short_fix == "see G4; rerun once nvidia-smi answers"
    assert result.reading("other_gpu_processes").value == 0
    assert result.reading("nvml").value == "nvmlInit hung (killed after 10 s)"


@pytest.mark.parametrize(
    ("cmdline", "start"),
    [
        ([PY, "/usr/bin/vllm", "serve", "m", "--gpu-memory-utilization", "0.4"], "pid 100 vLLM (cap 0.4"),
        (["/opt/app/unknown-worker"], "pid 100 GPU process (unknown-worker, no cap, 50.0 GiB NVML)"),
    ],
    ids=["capped-server", "unknown-program"],
)
def test_holding_exactly_g6_cap_max_of_the_pool_warns_and_a_byte_more_fails(
    cmdline: list[str], start: str
) -> None:
    """g6_cap_max (0.5) is the most another process may hold: a capped server
    or an unrecognised program at exactly half the GPU's memory is a WARN
    ("> 0.5" is the FAIL), one byte more a FAIL."""
    procs = table(proc(100, 1, cmdline))
    for used, status in ((50 * GIB, Status.WARN), (50 * GIB + 1, Status.FAIL)):
        facts = facts_of([{"pid": 100, "used": used, "type": "compute", "gpu": "0"}], procs)
        facts.gpu_totals = {"0": 100 * GIB}
        result = g6.evaluate(facts, P)
        assert result.status is status, (used, result.line())
        if status is Status.WARN:
            assert start in result.summary, result.summary


def test_another_users_server_still_counts_and_says_whose() -> None:
    """The pool is one, whoever holds it: another user's uncapped vLLM is still
    G6's FAIL (issue 24 leaves G6's rule as it is), and the details say whose."""
    theirs = proc(40, 1, [PY, "/usr/bin/vllm", "serve", "m"]) | {"owner": "uid 4242"}
    r = verdict([{"pid": 40, "used": 60 * GIB, "type": "compute", "gpu": "0"}], theirs)
    assert (r.status, r.code) == (Status.FAIL, "G6.uncapped-process"), r.line()
    (line,) = [d for d in r.details if d.startswith("FAIL pid 40 ")]
    assert line.endswith("another user's (uid 4242): its memory is the pool's all the same"), line
    mine = verdict(
        [{"pid": 40, "used": 60 * GIB, "type": "compute", "gpu": "0"}],
        proc(40, 1, [PY, "/usr/bin/vllm", "serve", "m"]),
    )
    assert not any("another user's" in d for d in mine.details)
