"""G10 — two Sparks: DDP/FSDP across nodes, not tensor parallelism.

evaluate() on configs from tests/data/g10 (read by the real parser), gather()
through Machine on real folders and real processes, and the all-reduce probe
for real: gloo on CPU with two processes, through torchrun and without it."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_dgx_spark.checks.g10_multinode import check as g10
from pytest_dgx_spark.checks.g10_multinode.link import hca_selection
from pytest_dgx_spark.checks.g10_multinode.probing import process_sources
from pytest_dgx_spark.checks.kit import CheckContext, Params
from pytest_dgx_spark.checks.record import plain
from pytest_dgx_spark.engine import Engine
from pytest_dgx_spark.model import Result, Status
from pytest_dgx_spark.probes import configs as c
from pytest_dgx_spark.probes import multinode as mn
from pytest_dgx_spark.probes.machine import Machine
from pytest_dgx_spark.settings import Settings

from conftest import DATA
from doubles.procs import running

G10 = DATA / "g10"
NVIDIA_FSDP = G10 / "nvidia_config_finetuning.yaml"
LAUNCH_VARS = (*g10.LAUNCHER_ENV, *g10.TP_ENV, "TORCHELASTIC_USE_AGENT_STORE", "PET_NPROC_PER_NODE")


def source(path: Path, kind: str = "given", name: str | None = None) -> dict[str, Any]:
    return c.read_config(path, name or path.name, kind).to_dict()


def judge(facts: g10.Facts, tp_across_nodes: str = "fail", floor: float = 20.0) -> Result:
    """evaluate() as the engine calls it: on the facts after their JSON round trip
    (and the same Result as on the facts themselves)."""
    params = Params(
        profile="gb10",
        thresholds={"g10_busbw_floor_gbps": floor},
        options={"tp_across_nodes": tp_across_nodes},
    )
    again = g10.Facts.from_dict(json.loads(json.dumps(facts.to_dict())))
    result = g10.evaluate(again, params)
    assert result.to_dict() == g10.evaluate(facts, params).to_dict()
    assert len(result.short_line()) <= 120
    assert result.headline
    if result.status in (Status.FAIL, Status.WARN):
        assert result.short_fix
    return result


def facts_of(**kw: Any) -> g10.Facts:
    """Facts as a capture holds them (plain data: dicts, or the records the probes return)."""
    return g10.Facts.from_dict(plain(kw))


def decide(*sources: Any, env: dict[str, str] | None = None, **kw: Any) -> Result:
    tp = kw.pop("tp_across_nodes", "fail")
    floor = kw.pop("floor", 20.0)
    facts = facts_of(env=env or {}, sources=list(sources), root="/srv/proj", **kw)
    return judge(facts, tp, floor)


#: SPARK_PREFLIGHT_HOST_ROOT of a /proc without processes (set per test below)
QUIET: dict[str, str] = {}


@pytest.fixture(autouse=True)
def _quiet_process_table(quiet_root: Path) -> None:
    """Every machine these tests build sees no process unless the test is about
    processes (see ``quiet_root``); ``engine(real_processes=True)`` lifts it."""
    QUIET["SPARK_PREFLIGHT_HOST_ROOT"] = str(quiet_root)


def clean_env(**extra: str) -> dict[str, str]:
    """The environment for a torchrun test: no launcher variables of the host,
    no GPU (these tests are about the protocol, on gloo; on a one-GPU
    machine two NCCL ranks would share the GPU), and a process table of its
    own (:data:`QUIET`). NCCL runs in benchmarks/gpu_g10_allreduce.sh on a
    machine with one GPU per rank."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    env["CUDA_VISIBLE_DEVICES"] = ""
    env.update(QUIET)
    env.update(extra)
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------- evaluate(): configs


def test_nvidia_fsdp_config_passes() -> None:
    r = decide(source(NVIDIA_FSDP, "found", "configs/config_finetuning.yaml"))
    assert r.status is Status.PASS
    assert r.summary == (
        "2 nodes (configs/config_finetuning.yaml: num_machines = 2), FSDP, tensor parallel 1 "
        "(configs/config_finetuning.yaml: parallelism_config.parallelism_config_tp_size = 1): "
        "data parallel across nodes, as recommended"
    )
    assert r.reading("nodes").value == 2
    assert r.reading("tensor_parallel").value == 1
    assert r.reading("strategy").value == "FSDP"
    assert "configs/config_finetuning.yaml: parallelism_config.parallelism_config_tp_size = 1" in r.details


def test_nvidia_fsdp_config_under_a_two_node_launcher_passes() -> None:
    r = decide(source(NVIDIA_FSDP), env={"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1", "RANK": "0"})
    assert r.status is Status.PASS
    assert r.summary.startswith(
        "rank 0 of 2: 2 nodes (WORLD_SIZE=2, LOCAL_WORLD_SIZE=1), FSDP, tensor parallel 1"
    )


def test_the_placeholder_template_says_why_it_was_not_read() -> None:
    r = decide(source(G10 / "nvidia_config_finetuning.template.yaml"))
    assert r.status is Status.SKIP
    assert r.code == "G10.config-unreadable"
    assert (
        "1 unreadable; nvidia_config_finetuning.template.yaml: invalid YAML: ScannerError: mapping values "
        "are not allowed in this context at line 16, column 24"
    ) in r.summary
    assert r.reading("configs_unreadable").value == 1


def test_vllm_playbook_tp2_on_a_one_gpu_spark_is_a_serving_warn_said_once() -> None:
    """Issue 11: NVIDIA's vLLM two-Spark command is a serving job, judged as one (WARN with the
    NCCL fix; it was a training-rule FAIL), its evidence said once, its fix not a question."""
    r = decide(source(G10 / "vllm_two_sparks.sh"), gpu_count=1)
    assert r.status is Status.WARN
    assert r.codes == ["G10.tp-serving"]
    assert r.summary == (
        "tensor parallel 2 across 2 nodes (vllm_two_sparks.sh: --tensor-parallel-size = 2; "
        "needs 2 GPUs and this machine has 1), a serving job: NVIDIA's vLLM playbook runs TP=2 over two "
        "Sparks, but NCCL all-reduce over the link can hang (vLLM #42354)"
    )
    assert r.summary.count("--tensor-parallel-size = 2") == 1
    assert "?" not in r.fix
    assert r.reading("job_kind").value == "serving"
    assert r.short_line().startswith("G10 WARN: serving: TP 2 across 2 nodes (vllm_two_sparks.sh)")


def test_training_and_serving_across_nodes_are_each_judged(tmp_path: Path) -> None:
    """The NeMo training config FAILs by the TP rule; the vLLM server beside it is named and WARNs."""
    r = decide(
        source(G10 / "nemo_two_nodes_tp2.yaml", "found"), source(G10 / "vllm_two_sparks.sh"), gpu_count=1
    )
    assert r.status is Status.FAIL
    assert r.codes == ["G10.tp-across-nodes"]  # the serving WARN beside it: in the details
    assert r.fix.startswith("train across the Sparks with DDP or FSDP") and "?" not in r.fix
    assert any(d.startswith("also: tensor parallel 2 across 2 nodes (vllm_two_sparks.sh") for d in r.details)
    assert r.reading("job_kind").value == "serving, training"
    assert r.short_line().startswith("G10 FAIL: training: TP 2 across 2 nodes (nemo_two_nodes_tp2.yaml)")


def test_a_job_of_no_known_kind_keeps_the_seed_rule() -> None:
    plain = {
        "name": "launch.sh",
        "kind": "given",
        "findings": [
            {"what": "tp", "value": 2, "key": "--tp-size", "raw": ""},
            {"what": "nodes", "value": 2, "key": "--nnodes", "raw": ""},
        ],
        "error": None,
        "notes": [],
        "role": None,
    }
    r = decide(plain)
    assert r.status is Status.FAIL
    assert r.codes == ["G10.tp-across-nodes"]
    assert "a job not marked as training or serving" in r.summary
    assert "--spark-tp-across-nodes warn" in r.fix and "?" not in r.fix


@pytest.mark.parametrize(
    ("env", "status"),
    [
        ({"VLLM_HOST_IP": "192.168.100.10"}, Status.WARN),
        ({"RAY_ADDRESS": "192.168.100.10:6379"}, Status.WARN),
        ({"RAY_ADDRESS": "127.0.0.1:6379"}, Status.PASS),
        ({}, Status.PASS),
    ],
)
def test_ray_backend_counts_as_multi_node_only_with_a_hint(env: dict[str, str], status: Status) -> None:
    r = decide(source(G10 / "vllm_two_sparks.sh"), env=env, gpu_count=8)
    assert r.status is status  # a vLLM server across nodes: WARN (issue 11), was FAIL
    if status is Status.WARN:
        assert r.codes == ["G10.tp-serving"]
        assert "on a Ray backend with " + next(iter(env)) in r.summary


def test_tp_across_nodes_warn_downgrades() -> None:
    r = decide(source(G10 / "vllm_two_sparks.sh"), gpu_count=1, tp_across_nodes="warn")
    assert r.status is Status.WARN
    assert r.summary.startswith("tensor parallel 2 across 2 nodes")
    assert r.codes == ["G10.tp-serving"]


def test_a_serving_scripts_evidence_is_quoted_once_in_the_details_too() -> None:
    """Issue 11: G10 on NVIDIA's TP=2 vLLM script quoted its evidence twice.
    The line says it once; the details' first line repeated it ("…
    --tensor-parallel-size = 2; vllm_two_sparks.sh: --tensor-parallel-size = 2
    needs 2 GPUs …")."""
    r = decide(source(G10 / "vllm_two_sparks.sh"), gpu_count=1)
    assert r.details[0] == (
        "TP 2 across 2 nodes: vllm_two_sparks.sh: --tensor-parallel-size = 2; "
        "needs 2 GPUs and this machine has 1"
    )
    for text in (r.summary, r.details[0]):
        assert text.count("--tensor-parallel-size = 2") == 1, text


def test_tp2_with_enough_gpus_and_no_node_count_passes() -> None:
    r = decide(source(G10 / "vllm_two_sparks.sh"), gpu_count=8)
    assert r.status is Status.PASS
    assert r.summary == (
        "no sign of more than one node, tensor parallel 2 with no node count of its own "
        "(vllm_two_sparks.sh: --tensor-parallel-size = 2)"
    )
    assert r.short_line() == "G10 PASS: single node, TP 2 (read vllm_two_sparks.sh)"


def test_one_file_with_both_fails_and_ignores_graph_vertices() -> None:
    r = decide(source(G10 / "nemo_two_nodes_tp2.yaml", "found"))
    assert r.status is Status.FAIL
    assert r.codes == ["G10.tp-across-nodes"]
    assert r.summary.startswith(
        "tensor parallel 2 across 2 nodes (nemo_two_nodes_tp2.yaml: model.tensor_model_parallel_size = 2; "
        "nemo_two_nodes_tp2.yaml: trainer.num_nodes = 2)"
    )
    assert r.reading("nodes").value == 2  # not 2708


def test_compose_exec_form_is_a_serving_job() -> None:
    r = decide(source(G10 / "compose_sglang.yaml", "found"))
    assert r.status is Status.WARN  # sglang.launch_server: serving (issue 11), was FAIL
    assert r.codes == ["G10.tp-serving"]
    assert "compose_sglang.yaml: services.sglang.command: --tp = 2" in r.summary


@pytest.mark.parametrize(
    ("env", "nodes_by"),
    [
        ({"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1"}, "WORLD_SIZE=2, LOCAL_WORLD_SIZE=1"),
        ({"GROUP_WORLD_SIZE": "2"}, "GROUP_WORLD_SIZE=2"),
        ({"PET_NNODES": "1:2"}, "PET_NNODES=1:2"),
        ({"SLURM_NNODES": "2"}, "SLURM_NNODES=2"),
        ({"SLURM_JOB_NUM_NODES": "2"}, "SLURM_JOB_NUM_NODES=2"),
        ({"NNODES": "2"}, "NNODES=2"),
        ({"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "1"}, "OMPI_COMM_WORLD_SIZE=2"),
    ],
)
def test_launcher_env_pairs_with_a_found_tp_config(env: dict[str, str], nodes_by: str) -> None:
    r = decide(source(G10 / "torchtitan_tp2.toml", "found"), env=env)
    assert r.status is Status.FAIL
    assert r.codes == ["G10.tp-across-nodes"]
    assert "torchtitan_tp2.toml: parallelism.tensor_parallel_degree = 2" in r.summary
    assert nodes_by in r.summary


def test_single_node_launcher_with_tp_passes() -> None:
    r = decide(source(G10 / "torchtitan_tp2.toml", "found"), env={"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"})
    assert r.status is Status.PASS
    assert r.summary == (
        "single node (WORLD_SIZE=2, LOCAL_WORLD_SIZE=2), tensor parallel 2 within one node "
        "(torchtitan_tp2.toml: parallelism.tensor_parallel_degree = 2)"
    )


@pytest.mark.parametrize("kind", ["given", "found"])
def test_single_node_launcher_is_believed_over_gpu_inference(kind: str) -> None:
    """The launcher's one node is this run's count, for a named config and a found one alike
    (a found TP 2 config on a one-GPU machine was inferred onto two nodes and FAILed)."""
    r = decide(
        source(G10 / "deepspeed_autotp.json", kind),
        env={"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"},
        gpu_count=1,
    )
    assert r.status is Status.PASS


def test_env_tp_with_env_nodes_is_judged_as_vllm_serving() -> None:
    r = decide(env={"VLLM_TENSOR_PARALLEL_SIZE": "2", "NNODES": "2"})
    assert r.status is Status.WARN  # vLLM's variable: a serving job (issue 11), was FAIL
    assert r.codes == ["G10.tp-serving"]
    assert r.summary.startswith("tensor parallel 2 across 2 nodes (VLLM_TENSOR_PARALLEL_SIZE=2; NNODES=2)")


def test_k8s_tp1_passes() -> None:
    r = decide(source(G10 / "k8s_vllm_tp1.yaml", "found"), env={"SLURM_NNODES": "2"})
    assert r.status is Status.PASS
    assert r.summary.startswith("2 nodes (SLURM_NNODES=2), tensor parallel 1 (k8s_vllm_tp1.yaml:")


def test_a_separate_process_is_judged_on_its_own_flags() -> None:
    server = {
        "name": "pid 4242 (vllm)",
        "kind": "process",
        "findings": [{"what": "tp", "value": 2, "key": "--tensor-parallel-size", "raw": ""}],
        "error": None,
        "notes": [],
    }
    # the job spans two nodes, but the server is another job on one node: not paired
    r = decide(server, env={"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1"}, gpu_count=8)
    assert r.status is Status.PASS
    headless = dict(
        server,
        findings=[*server["findings"], {"what": "headless", "value": True, "key": "--headless", "raw": ""}],
    )
    r = decide(headless, gpu_count=8)
    assert r.status is Status.WARN  # a headless vLLM worker serves (issue 11), was FAIL
    assert r.codes == ["G10.tp-serving"]
    assert "pid 4242 (vllm): --headless (a headless vLLM is a worker of a multi-node engine)" in r.summary


def test_tp_and_nodes_in_different_found_files_are_not_one_job() -> None:
    r = decide(source(NVIDIA_FSDP, "found"), source(G10 / "torchtitan_tp2.toml", "found"))
    assert r.status is Status.PASS
    assert "tensor parallel 2 with no node count of its own" in r.summary
    assert any("are in different files: not judged as one job" in d for d in r.details)
    # the default line said "2 nodes, FSDP, TP 2: data parallel across nodes", which reads as
    # TP 2 across the nodes; it names where the TP is and the files it read (issue 11)
    assert r.short_line() == (
        "G10 PASS: 2 nodes, FSDP, TP 2 in another job (torchtitan_tp2.toml): data parallel across nodes "
        "(2 configs read)"
    )


def test_nothing_multi_node_is_a_single_node_pass() -> None:
    """Issue 8: SKIP means "could not check"; a single node with nothing multi-node is PASS."""
    r = decide()
    assert r.status is Status.PASS  # was SKIP
    assert r.summary == (
        "single node: no launcher environment (WORLD_SIZE, NNODES, SLURM_NNODES), no tensor parallelism "
        "or node count (no config found under /srv/proj), no training/serving process with those flags"
    )
    assert r.short_line() == "G10 PASS: single node: nothing multi-node (no config found)"


def test_other_ranks_say_they_are_per_rank_detail() -> None:
    r = decide(source(NVIDIA_FSDP), env={"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1", "RANK": "1"})
    assert r.summary.startswith("rank 1 of 2, this rank only: 2 nodes")
    assert r.reading("rank").value == 1
    # issue 24 item 4: the short line at any width keeps what the rank prefix means
    for width in (60, 80, 120):
        line = r.short_line(width)
        assert line.startswith("G10 PASS: rank 1 of 2, this rank only:"), line
        assert "(detail" not in line and len(line) <= width


# --------------------------------------------------------------------------- evaluate(): the probe

MULTI = {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1", "RANK": "0"}
#: what allreduce_child.py reported on two Sparks-like ranks (numbers as a 200 Gb/s link gives)
PROBE_OK = {
    "ran": True,
    "error": None,
    "hung": False,
    "data": {
        "rank": 0,
        "world_size": 2,
        "backend": "nccl",
        "size_bytes": 512 << 20,
        "busbw_gbps": 22.1,
        "group_busbw_gbps": 22.4,
        "group_algbw_gbps": 22.4,
        "nccl_version": "2.28.9",
        "wrong": False,
    },
}


def test_probe_above_the_floor_rides_on_pass() -> None:
    r = decide(source(NVIDIA_FSDP), env=MULTI, probe=PROBE_OK, intrusive=True)
    assert r.status is Status.PASS
    assert r.summary.endswith("; all-reduce busbw 22.4 GB/s (nccl, 2 ranks, 512 MiB)")
    assert r.reading("allreduce_busbw").value == 22.4
    assert r.reading("allreduce_busbw").unit == "GB/s"
    assert r.reading("busbw_floor").value == 20.0


def test_probe_below_the_floor_across_nodes_warns_first() -> None:
    """Between the FAIL and the WARN floor (5 and 20 GB/s): one twin only, MTU 1500 (issue 8)."""
    slow = {**PROBE_OK, "data": {**PROBE_OK["data"], "group_busbw_gbps": 12.1, "busbw_gbps": 12.0}}
    r = decide(source(NVIDIA_FSDP), env=MULTI, probe=slow, intrusive=True)
    assert r.status is Status.WARN
    assert r.codes == ["G10.busbw-low"]
    assert r.summary.startswith(
        "rank 0 of 2: all-reduce busbw 12.1 GB/s (nccl, 2 ranks, 512 MiB) is below the 20 GB/s floor "
        "for a two-Spark link (20-24 GB/s is healthy); 2 nodes"
    )
    assert decide(source(NVIDIA_FSDP), env=MULTI, probe=slow, intrusive=True, floor=3.0).status is Status.PASS


def test_probe_below_the_floor_within_one_node_is_only_a_reading() -> None:
    slow = {**PROBE_OK, "data": {**PROBE_OK["data"], "backend": "gloo", "group_busbw_gbps": 1.0}}
    single = {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "RANK": "0"}
    r = decide(env=single, probe=slow, intrusive=True)
    assert r.status is Status.PASS
    assert r.summary.endswith("within one node (the two-Spark floor does not apply)")


@pytest.mark.parametrize(
    ("probe", "text"),
    [
        (
            {
                "ran": True,
                "hung": True,
                "error": "all-reduce probe made no progress for 30 s during 'rendezvous' (hung; killed)",
                "data": {},
            },
            "all-reduce probe hung: all-reduce probe made no progress for 30 s during 'rendezvous' (hung; killed)",
        ),
        (
            {
                "ran": True,
                "hung": False,
                "error": "all-reduce failed: DistBackendError: NCCL error",
                "data": {},
            },
            "all-reduce probe failed: all-reduce failed: DistBackendError: NCCL error",
        ),
        (
            {
                **PROBE_OK,
                "data": {**PROBE_OK["data"], "wrong": True, "check": {"expected": 3.0, "got": [3.0, 0.0]}},
            },
            "all-reduce returned wrong values (expected 3.0, got [3.0, 0.0])",
        ),
    ],
    ids=["hung", "error", "wrong"],
)
def test_probe_failures_warn(probe: dict[str, Any], text: str) -> None:
    r = decide(source(NVIDIA_FSDP), env=MULTI, probe=probe, intrusive=True)
    assert r.status is Status.WARN
    assert r.codes == ["G10.allreduce-wrong" if probe["data"].get("wrong") else "G10.probe-failed"]
    assert r.summary.startswith(f"rank 0 of 2: {text}; 2 nodes")


def test_an_all_reduce_child_of_another_shape_is_a_reason_not_a_crash() -> None:
    """The child's data is read into a record once; data of another shape (another version's child)
    is the probe's failure, said with the field, never a crash of G10."""
    from pytest_dgx_spark.checks.g10_multinode.allreduce import summarize_probe
    from pytest_dgx_spark.probes.child import ChildResult

    probe = summarize_probe(ChildResult(data={"backend": "nccl", "world_size": "two"}, finished=True, returncode=0))
    assert probe.ran and probe.error == (
        "the all-reduce child's data cannot be read (world_size: expected an integer or null, got str 'two')"
    )
    r = decide(source(NVIDIA_FSDP), env=MULTI, probe=probe, intrusive=True)
    assert r.status is Status.WARN
    assert r.codes == ["G10.probe-failed"]


def test_probe_without_torch_is_a_note() -> None:
    probe = {"ran": False, "reason": "torch not importable (ModuleNotFoundError: No module named 'torch')"}
    r = decide(source(NVIDIA_FSDP), env=MULTI, probe=probe, intrusive=True)
    assert r.status is Status.PASS
    assert r.summary.endswith(
        "; all-reduce not measured: torch not importable (ModuleNotFoundError: No module named 'torch')"
    )


# --------------------------------------------------------------------------- gather() through Machine


def engine(
    tmp_path: Path, env: dict[str, str] | None = None, *, real_processes: bool = False, **settings: Any
) -> tuple[Engine, Machine]:
    env = env if env is not None else clean_env()
    if real_processes:
        env = {k: v for k, v in env.items() if k != "SPARK_PREFLIGHT_HOST_ROOT"}
    machine = Machine(env=env, timeout=settings.get("timeout", 10.0))
    if not real_processes:
        # this box's process table is not ours to control (other tests spawn fake servers):
        # record an empty one unless the test is about processes
        machine.store.get_or_compute("processes", lambda: {"error": None, "processes": []})
    return Engine(Settings(rootdir=tmp_path, **settings), machine), machine


def test_found_nvidia_config_passes_through_the_engine(tmp_path: Path) -> None:
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "config_finetuning.yaml").write_bytes(NVIDIA_FSDP.read_bytes())
    eng, _ = engine(tmp_path)
    r = eng.run("G10")
    assert r.status is Status.PASS, r.line()
    assert "configs/config_finetuning.yaml: num_machines = 2" in r.summary


def test_given_folder_and_file(tmp_path: Path) -> None:
    given = tmp_path / "launch"
    given.mkdir()
    (given / "nemo.yaml").write_bytes((G10 / "nemo_two_nodes_tp2.yaml").read_bytes())
    eng, _ = engine(tmp_path, config=(given,))
    r = eng.run("G10")
    assert r.status is Status.FAIL
    assert r.codes == ["G10.tp-across-nodes"]
    assert "launch/nemo.yaml: model.tensor_model_parallel_size = 2" in r.summary


def test_gb10_double_one_gpu_turns_tp2_into_two_nodes(tmp_path: Path, doubles: Any) -> None:
    from doubles import gb10

    env = clean_env(**doubles.nvml(gb10.nvml()).env)
    for var in LAUNCH_VARS:
        env.pop(var, None)
    eng, _ = engine(tmp_path, env=env, config=(G10 / "vllm_two_sparks.sh",))
    r = eng.run("G10")
    assert r.status is Status.WARN  # vllm serve: a serving job (issue 11), was FAIL
    assert r.codes == ["G10.tp-serving"]
    assert "needs 2 GPUs and this machine has 1" in r.summary
    assert r.reading("gpus_here").value == 1


def test_a_running_process_with_tp_across_nodes_warns_naming_it(tmp_path: Path) -> None:
    argv = [
        sys.executable,
        "-c",
        "import time; time.sleep(30)",
        "--api-key",
        "sk-Secret123",
        "--tensor-parallel-size",
        "2",
        "--nnodes",
        "2",
    ]
    with running(argv) as proc:
        eng, _ = engine(tmp_path, real_processes=True)
        r = eng.run("G10")
    # another job than this run's, of no known kind: a WARN naming it (issue 34 item 6), was FAIL
    assert r.status is Status.WARN, r.line()
    assert r.codes == ["G10.other-job"]
    assert r.short_line().startswith(f"G10 WARN: running pid {proc.pid} (python"), r.short_line()
    mine = f"TP 2 across 2 nodes: pid {proc.pid} (python"
    (line,) = [d for d in r.details if d.startswith(mine)]
    assert "--tensor-parallel-size = 2" in line and "--nnodes = 2" in line
    assert "sk-Secret123" not in json.dumps(r.to_dict())  # the flags found are shown, never the command


def test_nothing_to_go_on_through_the_engine(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    eng, _ = engine(tmp_path)
    r = eng.run("G10")
    assert r.status is Status.PASS  # single node (issue 8), was SKIP
    assert f"1 config file(s) read under {tmp_path}: pyproject.toml" in r.summary


@pytest.mark.parametrize(
    ("name", "content", "reason"),
    [
        ("huge.yaml", None, "huge.yaml: 10.0 MB, over the 1.0 MB limit for a config: not read"),
        ("blob.json", b"\x00\x01\x02" * 1000, "blob.json: binary, not a text config"),
        (
            "deep.json",
            b"[" * 300_000 + b"]" * 300_000,
            "deep.json: JSON nested too deeply to parse: not read",
        ),
        ("bad.toml", b"[x\n", "bad.toml: invalid TOML: TOMLDecodeError"),
    ],
)
def test_bad_given_configs_are_reasons(tmp_path: Path, name: str, content: bytes | None, reason: str) -> None:
    path = tmp_path / name
    if content is None:
        with open(path, "wb") as fh:
            fh.truncate(10 * 1000 * 1000)
    else:
        path.write_bytes(content)
    eng, _ = engine(tmp_path, config=(path,))
    start = time.monotonic()
    r = eng.run("G10")
    assert time.monotonic() - start < 5
    assert r.status is Status.SKIP
    assert r.code == "G10.config-unreadable"
    assert any(d.startswith(reason) for d in r.details), r.details
    assert reason.split(": ", 1)[1][:20] in r.summary


def test_intrusive_outside_torchrun_says_so(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_bytes(NVIDIA_FSDP.read_bytes())
    eng, _ = engine(tmp_path, intrusive=True)
    r = eng.run("G10")
    assert r.status is Status.PASS
    assert r.summary.endswith("; all-reduce not measured: not launched by torchrun (WORLD_SIZE unset or 1)")


# --------------------------------------------------------------------------- the all-reduce probe, for real (gloo)


def run_ranks(
    tmp_path: Path, envs: list[dict[str, str]], timeout: float = 10.0, **settings: Any
) -> list[g10.Facts]:
    """gather() of G10 on several ranks at once, each through its own Machine."""
    out: list[Any] = [None] * len(envs)

    def one(i: int) -> None:
        machine = Machine(env=clean_env(**envs[i]), timeout=timeout)
        s = Settings(rootdir=tmp_path, intrusive=True, timeout=timeout, **settings)
        out[i] = g10.gather(CheckContext("G10", s, machine, Engine(s, machine)))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(envs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return out


def test_two_ranks_across_two_nodes_measure_the_same_group_figure(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    port = str(free_port())
    base = {
        "WORLD_SIZE": "2",
        "LOCAL_WORLD_SIZE": "1",
        "GROUP_WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": port,
    }
    from conftest import Doubles
    from doubles import gb10

    # one recorded GB10 for both ranks: this machine's own NVML (a GPU the rest of the
    # suite is using) would give each rank's fingerprint its own moment
    nvml = Doubles(tmp_path).nvml(gb10.nvml(devices=[])).env
    base.update(SPARK_FAKE_NVML=nvml["SPARK_FAKE_NVML"], PYTHONPATH=nvml["PYTHONPATH"])
    facts = run_ranks(tmp_path, [dict(base, RANK=str(r), LOCAL_RANK="0", GROUP_RANK=str(r)) for r in (0, 1)])
    for rank, f in enumerate(facts):
        assert f.probe is not None and f.probe.ran and f.probe.error is None, (f.probe, f.fleet)
        d = f.probe.data
        assert (d.rank, d.world_size, d.backend, d.size_bytes) == (rank, 2, "gloo", 8 << 20)
        assert d.wrong is False and d.check is not None and plain(d.check) == {"expected": 3.0, "got": [3.0, 3.0]}
        assert len(d.times_s or []) == g10.PROBE_ITERS["gloo"]
        # nccl-tests' formula: busbw = algbw * 2(n-1)/n, algbw = bytes / time
        assert d.busbw_gbps == pytest.approx((8 << 20) / (d.time_s or 0.0) / 1e9 * 2 * (2 - 1) / 2)
    p0, p1 = facts[0].probe, facts[1].probe
    assert p0 is not None and p1 is not None
    assert p0.data.group_busbw_gbps == pytest.approx(p1.data.group_busbw_gbps)
    # loopback gloo is far below a two-Spark link: the floor applies across nodes
    r0 = judge(facts[0], "fail", 20.0)
    r1 = judge(facts[1], "fail", 20.0)
    assert r0.status is r1.status is Status.WARN
    assert r0.summary.startswith("rank 0 of 2: all-reduce busbw ")
    assert "(measured with gloo on CPU; NCCL on the GPUs would differ)" in r0.summary
    assert r1.summary.startswith(
        "rank 1 of 2, this rank only: all-reduce busbw"
    )
    assert judge(facts[0], "fail", 0.0001).status is Status.PASS


def test_a_missing_peer_cannot_hang_the_session(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    env = {
        "WORLD_SIZE": "2",
        "LOCAL_WORLD_SIZE": "1",
        "RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
    }
    start = time.monotonic()
    (facts,) = run_ranks(tmp_path, [env], timeout=1.0)
    elapsed = time.monotonic() - start
    r = judge(facts, "fail", 20.0)
    # issue 13: the node comparison runs first and names the rank that never came;
    # the bandwidth probe is not started against a job whose nodes did not agree
    assert r.status is Status.FAIL
    assert r.codes == ["G10.rank-missing"]
    assert r.summary.startswith("rank 0 of 2: rank 1 never joined the node comparison (rendezvous failed")
    assert r.headline == "rank 1 never joined the node comparison"
    assert facts.probe is not None and not facts.probe.ran
    assert facts.probe.reason == "the nodes did not agree (see the node comparison)"
    assert r.summary.endswith("; all-reduce not measured: the nodes did not agree (see the node comparison)")
    assert elapsed < 20  # torch import + a 3 s rendezvous at --spark-timeout 1, never the 30 min default


def test_torchrun_two_processes_run_the_cli(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    env = clean_env(OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            str(free_port()),
            "-m",
            "pytest_dgx_spark.cli",
            "--only",
            "G10",
            "--intrusive",
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    # two JSON documents, one per rank, interleaved only at document boundaries
    decoder = json.JSONDecoder()
    text = proc.stdout.strip()
    docs = []
    while text:
        doc, end = decoder.raw_decode(text)
        docs.append(doc)
        text = text[end:].strip()
    results = sorted((d["results"][0] for d in docs), key=lambda r: r["readings"]["rank"]["value"])
    assert [r["readings"]["rank"]["value"] for r in results] == [0, 1]
    assert results[0]["status"] == results[1]["status"] == "PASS"
    assert results[0]["summary"].startswith("rank 0 of 2: single node (WORLD_SIZE=2, LOCAL_WORLD_SIZE=2)")
    assert results[1]["summary"].startswith("rank 1 of 2, this rank only")
    for r in results:
        assert r["readings"]["allreduce_backend"]["value"] == "gloo"
        assert r["readings"]["allreduce_busbw"]["value"] > 0
        assert "within one node (the two-Spark floor does not apply)" in r["summary"]


def test_details_stay_bounded(tmp_path: Path) -> None:
    many = tmp_path / "many.yaml"
    many.write_text("".join(f"job{i}:\n  tensor_parallel_size: 1\n" for i in range(500)))
    r = decide(source(many))
    assert r.status is Status.PASS
    assert len(r.details) == g10.MAX_DETAILS + 1
    assert r.details[-1] == f"and {500 - g10.MAX_DETAILS} more"


# --------------------------------------------------------------------------- the two-Spark link (issue 8)

GB10 = DATA / "gb10"
TWO_NODES = {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1", "RANK": "0"}
#: ibdev2netdev on a Spark with the cable in the outer QSFP port (link_two_spark_ib_write_bw_2.txt)
SPARK_RDMA = {
    "rocep1s0f0": ("enp1s0f0np0", "1: DOWN"),
    "rocep1s0f1": ("enp1s0f1np1", "4: ACTIVE"),
    "roceP2p1s0f0": ("enP2p1s0f0np0", "1: DOWN"),
    "roceP2p1s0f1": ("enP2p1s0f1np1", "4: ACTIVE"),
}


def sys_tree(base: Path, mtu: int = 9000, extra_net: dict[str, int] | None = None) -> Path:
    """A host root with /sys/class/infiniband and /sys/class/net as a Spark shows them."""
    for dev, (netdev, state) in SPARK_RDMA.items():
        port = base / "sys/class/infiniband" / dev / "ports/1"
        (port / "gid_attrs/ndevs").mkdir(parents=True)
        (port / "state").write_text(state + "\n")
        (port / "gid_attrs/ndevs/0").write_text(netdev + "\n")
        net = base / "sys/class/net" / netdev
        net.mkdir(parents=True)
        (net / "mtu").write_text(f"{mtu if 'ACTIVE' in state else 1500}\n")
    for name, value in (extra_net or {}).items():
        (base / "sys/class/net" / name).mkdir(parents=True)
        (base / "sys/class/net" / name / "mtu").write_text(f"{value}\n")
    return base


def run_link(tmp_path: Path, env: dict[str, str], mtu: int = 9000, **net: int) -> Result:
    """G10 through the engine on a crafted host root (SPARK_PREFLIGHT_HOST_ROOT)."""
    root = sys_tree(tmp_path / "host", mtu, net)
    work = tmp_path / "work"
    work.mkdir()
    full = {k: v for k, v in clean_env().items() if not k.startswith("NCCL_")}
    full.update(env, SPARK_PREFLIGHT_HOST_ROOT=str(root))
    eng, _ = engine(work, env=full)
    r = eng.run("G10")
    assert len(r.short_line()) <= 120 and r.headline
    return r


def test_a_hand_set_rank_without_a_rendezvous_point_is_a_note(tmp_path: Path) -> None:
    """RANK/WORLD_SIZE without MASTER_ADDR/MASTER_PORT (torchrun always sets
    both): the nodes cannot be compared, and the details say so."""
    r = run_link(tmp_path, dict(TWO_NODES))
    assert "nodes not compared: MASTER_ADDR and MASTER_PORT unset (torchrun sets both)" in r.details
    assert r.reading("nodes_compared") is None


def test_captures_say_both_twins_and_mtu_9000() -> None:
    """The figures the link rules stand on, read from the captures themselves."""
    assert "Avg bus bandwidth    : 23.1036" in (GB10 / "nccl_two_spark_1.txt").read_text()
    assert "98 Gb/s single-HCA → 161 Gb/s with both HCAs" in (GB10 / "nccl_two_spark_5.txt").read_text()
    config = (GB10 / "two_spark_config_2.txt").read_text()
    assert "export NCCL_IB_HCA=rocep1s0f1,roceP2p1s0f1" in config and "mtu: 9000" in config
    assert "~3 GB/s busbw" in (GB10 / "playbook_issue_nccl_1.txt").read_text()


def test_one_twin_in_nccl_ib_hca_warns_with_both(tmp_path: Path) -> None:
    """nccl_two_spark_5.txt: one HCA caps near half the port; link_two_spark_ib_write_bw_2.txt: the twins."""
    env = {**TWO_NODES, "NCCL_IB_HCA": "rocep1s0f1", "NCCL_SOCKET_IFNAME": "enp1s0f1np1"}
    r = run_link(tmp_path, env)
    assert r.status is Status.WARN
    assert r.codes == ["G10.nccl-ib-hca-twin"]
    assert r.summary.startswith(
        "rank 0 of 2: NCCL_IB_HCA=rocep1s0f1 names rocep1s0f1 but not its twin roceP2p1s0f1"
    )
    assert r.short_line() == (
        "G10 WARN: NCCL_IB_HCA has one RoCE twin of 2 (rocep1s0f1); fix: NCCL_IB_HCA=rocep1s0f1,roceP2p1s0f1"
    )


def test_nccl_ib_hca_naming_no_device_of_this_node_warns(tmp_path: Path) -> None:
    """two_spark_config_1.txt (a two-Spark nccl-env.sh; LOW TRUST): ``NCCL_IB_HCA=mlx5_0``
    where a Spark's RoCE devices are rocep1s0f0 … roceP2p1s0f1 (link_two_spark_ib_write_bw_2.txt,
    link_ibstat_1.txt): NCCL finds no IB device and falls back to TCP sockets."""
    config = (GB10 / "two_spark_config_1.txt").read_text()
    assert "export NCCL_IB_HCA=mlx5_0" in config
    assert "CA 'roceP2p1s0f1'" in (GB10 / "link_ibstat_1.txt").read_text()
    env = dict(re.findall(r"^export (NCCL_\w+|GLOO_\w+)=(\S+)", config.split("---- (B)")[0], re.M))
    assert env["NCCL_IB_HCA"] == "mlx5_0" and env["NCCL_SOCKET_IFNAME"] == "enp1s0f0np0"
    r = run_link(tmp_path, {**TWO_NODES, **env})
    assert r.status is Status.WARN, r.line()
    assert r.codes == ["G10.nccl-ib-hca", "G10.mtu-low"]  # its socket interface, enp1s0f0np0, is at 1500
    assert r.summary.startswith(
        "rank 0 of 2: NCCL_IB_HCA=mlx5_0 selects none of this node's RoCE devices (roceP2p1s0f0, roceP2p1s0f1, "
        "rocep1s0f0, rocep1s0f1): NCCL finds no usable IB device and sends over TCP sockets"
    )
    assert r.short_line() == (
        "G10 WARN: NCCL_IB_HCA=mlx5_0 matches no RoCE device here; fix: NCCL_IB_HCA=roceP2p1s0f1,rocep1s0f1"
    )


def test_nccl_ib_hca_naming_only_down_ports_warns(tmp_path: Path) -> None:
    """playbook_issue_nccl_1.txt recommends ``NCCL_IB_HCA=rocep1s0f0,roceP2p1s0f0`` (its cable
    was in port 0); on a Spark cabled in the outer port those twins are Down
    (link_two_spark_ib_write_bw_2.txt: rocep1s0f0 … (Down), rocep1s0f1 … (Up)), so NCCL has no
    usable IB device and falls back to TCP sockets."""
    value = re.search(r"`NCCL_IB_HCA=([\w,]+)`", (GB10 / "playbook_issue_nccl_1.txt").read_text()).group(1)
    assert value == "rocep1s0f0,roceP2p1s0f0"
    ibdev = (GB10 / "link_two_spark_ib_write_bw_2.txt").read_text()
    assert "rocep1s0f0 port 1 ==> enp1s0f0np0 (Down)" in ibdev
    r = run_link(tmp_path, {**TWO_NODES, "NCCL_IB_HCA": value})
    assert r.status is Status.WARN, r.line()
    assert r.codes == ["G10.nccl-ib-hca"]
    assert "selects only RoCE devices whose port is down (roceP2p1s0f0, rocep1s0f0)" in r.summary
    assert r.short_line() == (
        "G10 WARN: NCCL_IB_HCA=rocep1s0f0,roceP2p1s0f0 names only down ports; fix: NCCL_IB_HCA=roceP2p1s0f1,rocep1s0f1"
    )


def test_the_community_two_spark_config_passes(tmp_path: Path) -> None:
    """two_spark_config_2.txt: both twins, MTU 9000, NCCL_IB_DISABLE=0."""
    env = {
        **TWO_NODES,
        "NCCL_IB_HCA": "rocep1s0f1,roceP2p1s0f1",
        "NCCL_SOCKET_IFNAME": "enp1s0f1np1",
        "NCCL_IB_DISABLE": "0",
    }
    r = run_link(tmp_path, env)
    assert r.status is Status.PASS, r.line()
    assert r.reading("nccl_ib_hca").value == "rocep1s0f1,roceP2p1s0f1"


def test_mtu_below_9000_warns(tmp_path: Path) -> None:
    """two_spark_config_2.txt sets mtu: 9000 on both twins; 1500 is the default."""
    env = {**TWO_NODES, "NCCL_IB_HCA": "rocep1s0f1,roceP2p1s0f1", "NCCL_SOCKET_IFNAME": "enp1s0f1np1"}
    r = run_link(tmp_path, env, mtu=1500)
    assert r.status is Status.WARN
    assert r.codes == ["G10.mtu-low"]
    assert "MTU below 9000 on NCCL's interface: enp1s0f1np1 (1500), enP2p1s0f1np1 (1500)" in r.summary
    assert r.short_line().startswith("G10 WARN: MTU 1500 on enp1s0f1np1, below 9000; fix: set MTU 9000")


def test_socket_interface_mtu_counts_when_sockets_carry_the_data(tmp_path: Path) -> None:
    env = {**TWO_NODES, "NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "enP7s7"}
    r = run_link(tmp_path, env, enP7s7=1500)
    assert r.status is Status.WARN
    assert r.codes == ["G10.nccl-ib-disabled", "G10.mtu-low"]
    assert "enP7s7 (1500)" in r.summary


def test_a_bootstrap_only_socket_interface_is_not_judged(tmp_path: Path) -> None:
    """nccl_two_spark_1.txt: NCCL_SOCKET_IFNAME=wlP9s9 (Wi-Fi) with all four RoCE devices
    (exact '=' list) ran at 23 GB/s: the socket interface only bootstraps."""
    env = {
        **TWO_NODES,
        "NCCL_IB_HCA": "=rocep1s0f0,roceP2p1s0f0,rocep1s0f1,roceP2p1s0f1",
        "NCCL_SOCKET_IFNAME": "wlP9s9",
        "NCCL_IB_DISABLE": "0",
    }
    r = run_link(tmp_path, env, wlP9s9=1500)
    assert r.status is Status.PASS, r.line()


def test_a_down_twin_is_not_asked_for(tmp_path: Path) -> None:
    """Conservative: rocep1s0f0's twin roceP2p1s0f0 is DOWN (no cable in that port)."""
    r = run_link(tmp_path, {**TWO_NODES, "NCCL_IB_HCA": "=rocep1s0f1,roceP2p1s0f1,rocep1s0f0"})
    assert r.status is Status.PASS, r.line()


def test_link_rules_apply_only_across_nodes(tmp_path: Path) -> None:
    env = {"NCCL_IB_HCA": "rocep1s0f1", "NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "enp1s0f1np1"}
    r = run_link(tmp_path, env, mtu=1500)
    assert r.status is Status.PASS
    assert r.summary.startswith("single node: ")


@pytest.mark.parametrize(
    ("value", "chosen"),
    [
        ("rocep1s0f1", ["rocep1s0f1"]),
        ("roce", sorted(SPARK_RDMA)),
        ("=rocep1s0f1:1,roceP2p1s0f1:1", ["roceP2p1s0f1", "rocep1s0f1"]),
        ("^rocep1s0f0,roceP2p1s0f0", ["roceP2p1s0f1", "rocep1s0f1"]),
        ("^=rocep1s0f1", ["roceP2p1s0f0", "roceP2p1s0f1", "rocep1s0f0"]),
    ],
)
def test_nccl_ib_hca_is_read_as_nccl_reads_it(value: str, chosen: list[str]) -> None:
    assert hca_selection(value, sorted(SPARK_RDMA)) == chosen


# --------------------------------------------------------------------------- which configs are read (issue 11)


def test_a_named_config_replaces_the_search(tmp_path: Path) -> None:
    """--spark-config FILE is the only config read: a TP=2 NeMo config under the rootdir is not."""
    (tmp_path / "nemo.yaml").write_bytes((G10 / "nemo_two_nodes_tp2.yaml").read_bytes())
    mine = tmp_path / "launch" / "config_finetuning.yaml"
    mine.parent.mkdir()
    mine.write_bytes(NVIDIA_FSDP.read_bytes())
    eng, _ = engine(tmp_path, config=(mine,))
    r = eng.run("G10")
    assert r.status is Status.PASS, r.line()  # the rootdir's nemo.yaml made it FAIL before
    assert "launch/config_finetuning.yaml: num_machines = 2" in r.summary
    assert r.reading("config_files").value == "launch/config_finetuning.yaml"
    assert not any("nemo" in d for d in r.details)


def test_files_this_tool_wrote_are_never_read_as_configs(tmp_path: Path) -> None:
    """env-report.json, `spark-preflight --json` output and a pytest-json-report file hold our own
    TP findings and verdicts; discovery skips them and says so."""
    from pytest_dgx_spark import report

    earlier = decide(source(G10 / "nemo_two_nodes_tp2.yaml", "found"))
    doc = report.env_report([earlier], strict=False, host={}, settings={"config": ["x"]})
    doc["readings"]["G10"]["tensor_parallel_size"] = 2  # a TP key, as a config would hold it
    (tmp_path / "env-report.json").write_text(json.dumps(doc))
    (tmp_path / "preflight.json").write_text(json.dumps(report.run_block([earlier], strict=False, host={})))
    pytest_report = {"created": 1.0, "exitcode": 0, "root": "/p", "summary": {}, "tests": [], "tp_size": 2}
    (tmp_path / "report.json").write_text(json.dumps(pytest_report))
    (tmp_path / "serve.json").write_text(json.dumps({"tensor_parallel_size": 1}))
    eng, _ = engine(tmp_path)
    r = eng.run("G10")
    assert r.status is Status.PASS, r.line()
    assert r.reading("configs_read").value == 1
    assert r.reading("config_files").value == "serve.json"
    (note,) = [d for d in r.details if d.startswith("not read as configs")]
    assert "env-report.json (an env-report this tool wrote)" in note
    assert "preflight.json (a report or capture this tool wrote)" in note
    assert "report.json (a pytest JSON report)" in note


def test_run_from_a_checkout_of_this_tool_its_own_data_is_no_config() -> None:
    """Issue 34 item 5: from a checkout G10 said ``read pyproject.toml, pytest_dgx_spark/data/known_bad.json,
    and 1 more`` and called ``signatures.json`` "a report or capture this tool wrote"."""
    checkout = Path(c.__file__).resolve().parents[2]
    if not (checkout / "pytest_dgx_spark" / "data").is_dir() or not (checkout / "pyproject.toml").is_file():
        pytest.skip("the package is not in a checkout here (installed from a wheel)")
    eng, _ = engine(checkout)
    r = eng.run("G10")
    said = r.report_text()
    assert "pytest_dgx_spark/" not in said and "signatures.json" not in said, said
    assert "pyproject.toml" in r.reading("config_files").value  # the project's own config is still read


def test_a_fifo_named_like_a_report_does_not_block(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "capture.json")
    eng, _ = engine(tmp_path)
    start = time.monotonic()
    r = eng.run("G10")
    assert time.monotonic() - start < 5
    assert r.status is Status.PASS


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_dgx_spark.cli", "--only", "G10", "-v", *args],
        capture_output=True,
        text=True,
        env=clean_env(),
        cwd=tmp_path,
        timeout=60,
    )


def test_cli_and_pytest_config_replace_the_search(
    tmp_path: Path, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "nemo.yaml").write_bytes((G10 / "nemo_two_nodes_tp2.yaml").read_bytes())
    (tmp_path / "mine.yaml").write_bytes(NVIDIA_FSDP.read_bytes())
    found = _cli(tmp_path)
    assert found.returncode == 1 and "G10 FAIL: tensor parallel 2 across 2 nodes (nemo.yaml" in found.stdout
    named = _cli(tmp_path, "--config", "mine.yaml")
    assert named.returncode == 0, named.stdout + named.stderr
    assert "G10 PASS: 2 nodes (mine.yaml: num_machines = 2)" in named.stdout
    assert "nemo" not in named.stdout
    pytester.path.joinpath("nemo.yaml").write_bytes((G10 / "nemo_two_nodes_tp2.yaml").read_bytes())
    pytester.path.joinpath("mine.yaml").write_bytes(NVIDIA_FSDP.read_bytes())
    monkeypatch.setenv("SPARK_PREFLIGHT_HOST_ROOT", QUIET["SPARK_PREFLIGHT_HOST_ROOT"])
    result = pytester.runpytest(
        "--spark-preflight", "--spark-only", "G10", "--spark-config=mine.yaml", "-p", "no:randomly", "-v"
    )
    text = "\n".join(result.outlines)
    assert "G10 PASS: 2 nodes (mine.yaml: num_machines = 2)" in text
    assert "nemo" not in text


# --------------------------------------------------------------------------- each named config, its own job


def _named_and_found(
    tmp_path: Path, names: tuple[str, ...], env: dict[str, str] | None = None
) -> tuple[Result, Result]:
    """G10 on the same files named with --spark-config and found under the rootdir."""
    project = tmp_path / "project"
    project.mkdir()
    for name in names:
        (project / name).write_bytes((G10 / name).read_bytes())
    named, _ = engine(project, env, config=tuple(project / n for n in names))
    found, _ = engine(project, env)
    return named.run("G10"), found.run("G10")


def test_named_configs_are_judged_each_on_its_own_as_discovery_does(tmp_path: Path) -> None:
    """NVIDIA's FSDP training config and an SGLang compose file named together are two jobs:
    the compose file's TP 2 over 2 nodes is a serving WARN, as when both are found. Named
    together they were merged into one 'training' job and FAILed by the training rule."""
    named, found = _named_and_found(tmp_path, ("nvidia_config_finetuning.yaml", "compose_sglang.yaml"))
    assert named.status is Status.WARN, named.line()
    assert named.short_line().startswith("G10 WARN: serving: TP 2 across 2 nodes (compose_sglang.yaml)")
    assert (named.status, named.headline, named.summary) == (found.status, found.headline, found.summary)


def test_a_named_script_takes_no_node_count_from_another_named_file(tmp_path: Path, doubles: Any) -> None:
    """vllm_two_sparks.sh (TP 2, no node count) beside the FSDP yaml (num_machines: 2): on a
    one-GPU GB10 the script's TP 2 needs the other Spark on its own evidence (a serving WARN),
    not the yaml's node count (which made it a training FAIL)."""
    from doubles import gb10

    env = clean_env(**doubles.nvml(gb10.nvml()).env)
    project = tmp_path / "project"
    project.mkdir()
    given = (project / "nvidia_config_finetuning.yaml", project / "vllm_two_sparks.sh")
    for path in given:
        path.write_bytes((G10 / path.name).read_bytes())
    eng, _ = engine(project, env, config=given)
    r = eng.run("G10")
    assert r.status is Status.WARN, r.line()
    assert r.codes == ["G10.tp-serving"]
    assert r.short_line().startswith("G10 WARN: serving: TP 2 across 2 nodes (vllm_two_sparks.sh)")
    assert "needs 2 GPUs and this machine has 1" in r.summary
    assert "num_machines" not in r.summary.split(", a serving job")[0]
    # with GPUs enough for TP 2, nothing pairs the script with the yaml's two machines
    two = gb10.nvml()
    two["devices"] = [
        two["devices"][0],
        {**two["devices"][0], "uuid": "GPU-second", "pci_bus_id": "00000000:02:00.0"},
    ]
    two_gpus, _ = engine(project, clean_env(**doubles.nvml(two).env), config=given)
    r = two_gpus.run("G10")
    assert r.status is Status.PASS, r.line()
    assert any("are in different files: not judged as one job" in d for d in r.details)


def test_cli_named_configs_are_two_jobs(tmp_path: Path) -> None:
    """The audit's command line: `spark-preflight --only G10 --config A --config B`."""
    for name in ("nvidia_config_finetuning.yaml", "compose_sglang.yaml"):
        (tmp_path / name).write_bytes((G10 / name).read_bytes())
    done = _cli(tmp_path, "--config", "nvidia_config_finetuning.yaml", "--config", "compose_sglang.yaml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "G10 WARN: tensor parallel 2 across 2 nodes (compose_sglang.yaml" in done.stdout
    assert "training" not in done.stdout.splitlines()[0]


# --------------------------------------------------------------------------- only files read are counted


def test_a_named_fifo_is_not_counted_as_read(tmp_path: Path) -> None:
    """A FIFO given as the config is never opened; it was still "1 config file(s) read"."""
    os.mkfifo(tmp_path / "pipe.yaml")
    eng, _ = engine(tmp_path, config=(tmp_path / "pipe.yaml",))
    r = eng.run("G10")
    assert r.status is Status.SKIP, r.line()  # the only named config could not be read
    assert "config file(s) read" not in r.summary
    assert f"no config file read under {tmp_path} (1 unreadable; pipe.yaml: not a regular file" in r.summary
    assert r.reading("configs_read").value == 0
    assert r.reading("configs_unreadable").value == 1
    assert r.reading("config_files") is None
    assert "pipe.yaml: not a regular file (a FIFO, device or folder is never read)" in r.details


def test_a_found_fifo_is_said_in_the_details_not_counted(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "capture.yaml")
    (tmp_path / "serve.yaml").write_text("tensor_parallel_size: 1\n")
    (tmp_path / "plain.yaml").write_text("name: x\n")
    os.mkfifo(tmp_path / "zz.json")
    eng, _ = engine(tmp_path)
    r = eng.run("G10")
    assert r.status is Status.PASS, r.line()
    assert r.reading("configs_read").value == 2
    assert r.reading("config_files").value == "plain.yaml, serve.yaml"
    assert r.reading("configs_unreadable").value == 2
    assert "capture.yaml: not a regular file (a FIFO, device or folder is never read)" in r.details
    # nothing multi-node at all: the single-node line counts what was read
    (tmp_path / "serve.yaml").unlink()
    r = engine(tmp_path)[0].run("G10")
    assert f"1 config file(s) read under {tmp_path}: plain.yaml (2 unreadable; capture.yaml: " in r.summary
    assert r.short_line() == "G10 PASS: single node: nothing multi-node (read plain.yaml)"


# --------------------------------------------------------------------------- a run's test reports


def test_a_runs_allure_output_does_not_hide_the_job(pytester: pytest.Pytester, doubles: Any) -> None:
    """After ``pytest --alluredir=allure-results --html=report.html`` (210 tests: 210 result
    files, past the 200-file cap of the search), G10 read those result files as configs and
    never reached ``serve/serve.yaml`` (TP 2 on a one-GPU GB10): PASS instead of FAIL."""
    pytest.importorskip("allure_pytest")
    pytest.importorskip("pytest_html")
    from doubles import gb10

    pytester.makepyfile(
        test_many="import pytest\n\n@pytest.mark.parametrize('i', range(210))\ndef test_one(i): pass\n"
    )
    pytester.runpytest_inprocess(
        "--alluredir=allure-results", "--html=report.html", "-p", "no:randomly", "-q"
    ).assert_outcomes(passed=210)
    assert len(list((pytester.path / "allure-results").glob("*-result.json"))) == 210
    (pytester.path / "serve").mkdir()
    (pytester.path / "serve" / "serve.yaml").write_text("model: Qwen/Qwen3-8B\ntensor_parallel_size: 2\n")
    env = clean_env(**doubles.nvml(gb10.nvml()).env)
    eng, _ = engine(pytester.path, env)
    r = eng.run("G10")
    assert r.status is Status.FAIL, r.line()
    assert r.codes == ["G10.tp-across-nodes"]
    assert "serve/serve.yaml: tensor_parallel_size = 2" in r.summary
    assert r.reading("config_files").value == "serve/serve.yaml"
    assert "allure" not in r.summary
    assert "test reports not read as configs (Allure, pytest-html): allure-results/, assets/" in r.details


@pytest.mark.parametrize("serving_first", [True, False], ids=["serving-said-first", "training-said-first"])
def test_a_tp_job_its_sources_mark_both_training_and_serving_is_judged_as_training(
    serving_first: bool,
) -> None:
    """One source that says serving (a vLLM backend) and training (Megatron's
    TP key), in either order, and the environment saying both (vLLM's and
    accelerate's TP variables): the stricter rule, training (FAIL by default),
    not the serving WARN."""
    serving = {"what": "backend", "value": "ray", "key": "--distributed-executor-backend", "raw": ""}
    training = {"what": "tp", "value": 2, "key": "tensor_model_parallel_size", "raw": ""}
    nodes = {"what": "nodes", "value": 2, "key": "--nnodes", "raw": ""}
    both = {
        "name": "launch.sh",
        "kind": "given",
        "findings": [serving, training, nodes] if serving_first else [training, serving, nodes],
        "error": None,
        "notes": [],
        "role": None,
    }
    r = decide(both)
    assert r.status is Status.FAIL, r.line()
    assert r.reading("job_kind").value == "training"
    assert r.codes == ["G10.tp-across-nodes"]  # not G10.tp-serving
    assert r.short_line().startswith("G10 FAIL: training: TP 2 across 2 nodes")
    first, second = ("VLLM_TENSOR_PARALLEL_SIZE", "PARALLELISM_CONFIG_TP_SIZE")[:: 1 if serving_first else -1]
    env = {first: "2", second: "2", "SLURM_NNODES": "2"}
    r = decide(env=env)
    assert r.status is Status.FAIL, r.line()
    assert r.reading("job_kind").value == "training"


@pytest.mark.parametrize("busbw", [12.0, 16.0, 19.9])
def test_one_roce_twin_12_to_20_gbs_warns_with_the_default_floor(busbw: float) -> None:
    """The two-Spark link gives 20-24 GB/s with both RoCE twins and about
    half with one (nccl_two_spark_5.txt: 98 Gb/s single-HCA, 161 with both):
    with the default floor (the threshold table's, not one this test sets)
    12-20 GB/s is a WARN naming the floor."""
    one_twin = {**PROBE_OK, "data": {**PROBE_OK["data"], "group_busbw_gbps": busbw, "busbw_gbps": busbw}}
    facts = facts_of(env=MULTI, sources=[source(NVIDIA_FSDP)], root="/srv/proj", probe=one_twin, intrusive=True)
    params = Params(profile="gb10", options={"tp_across_nodes": "fail"})
    r = g10.evaluate(facts, params)
    assert r.status is Status.WARN, r.line()
    assert r.codes == ["G10.busbw-low"]
    assert (
        f"all-reduce busbw {busbw:.1f} GB/s (nccl, 2 ranks, 512 MiB) is below the 20 GB/s floor" in r.summary
    )
    assert r.reading("busbw_floor").value == 20.0
    assert g10.evaluate(facts, Params(profile="generic")).status is Status.WARN
    at_floor = {**PROBE_OK, "data": {**PROBE_OK["data"], "group_busbw_gbps": 20.0, "busbw_gbps": 20.0}}
    facts = facts_of(env=MULTI, sources=[source(NVIDIA_FSDP)], root="/srv/proj", probe=at_floor, intrusive=True)
    assert g10.evaluate(facts, params).status is Status.PASS


# --------------------------------------------------------------------------- issue 24: your own job decides

EVIL_FLAGS = ["--tensor-parallel-size", "2", "--nnodes", "2"]


@pytest.mark.parametrize(
    ("argv", "inner", "name"),
    [
        (["timeout", "60", "python3", "x.py", *EVIL_FLAGS], ["python3", "x.py", *EVIL_FLAGS], "x.py"),
        (["timeout", "-s", "KILL", "-k", "5", "60", "vllm", "serve"], ["vllm", "serve"], "vllm"),
        (
            ["nohup", "python3", "-m", "vllm.entrypoints.openai.api_server"],
            None,
            "vllm.entrypoints.openai.api_server",
        ),
        (["env", "-u", "X", "A=1", "B=2", "torchrun", "t.py"], ["torchrun", "t.py"], "torchrun"),
        (["uv", "run", "--with", "torch", "train.py", "--tp", "2"], ["train.py", "--tp", "2"], "train.py"),
        (["srun", "-N", "2", "--exclusive", "python", "t.py"], ["python", "t.py"], "t.py"),
        (["nohup", "timeout", "60", "python3", "-c", "pass"], ["python3", "-c", "pass"], "python3"),
        (["uv", "pip", "list"], ["uv", "pip", "list"], "uv"),
        (["timeout", "60"], ["timeout", "60"], "timeout"),
    ],
)
def test_the_program_behind_a_wrapper_is_named(argv: list[str], inner: list[str] | None, name: str) -> None:
    from pytest_dgx_spark.probes.gpu_programs import job_name, unwrap

    assert unwrap(argv) == (inner if inner is not None else argv[1:])
    assert job_name(argv) == name


def _table(*procs: tuple[int, int, list[str], bool]) -> list[dict[str, Any]]:
    """(pid, ppid, argv, mine) -> the process table as the scan gives it."""
    return [
        {
            "pid": pid,
            "ppid": ppid,
            "name": argv[0][:15],
            "cmdline": argv,
            "uid": 0 if mine else 4242,
            "sid": 7,
            "self": False,
            "mine": mine,
        }
        for pid, ppid, argv, mine in procs
    ]


def test_a_wrapper_and_the_command_it_runs_are_one_job_named_by_the_program() -> None:
    """``timeout 60 python3 evil.py …`` is two processes with the same flags: one
    job, named ``evil.py`` at the python's pid, never ``timeout`` (issue 24)."""
    table = _table(
        (8275, 1, ["timeout", "60", "python3", "/srv/evil.py", *EVIL_FLAGS], True),
        (8276, 8275, ["python3", "/srv/evil.py", *EVIL_FLAGS], True),
    )
    (src,) = process_sources(table)
    assert src.name == "pid 8276 (evil.py)" and src.owner is None
    r = decide(src)
    assert r.status is Status.WARN, r.line()
    assert r.codes == ["G10.other-job"]
    assert r.short_line().startswith("G10 WARN: running pid 8276 (evil.py): TP 2 across 2 nodes, another job"), (
        r.short_line()
    )
    assert "timeout" not in r.line()
    assert not any("different" in d for d in r.details), r.details


def test_a_process_of_no_known_kind_warns_and_the_job_being_launched_fails() -> None:
    """Issue 34 item 6: an unrelated process of the same user with ``--tensor-parallel-size 2 --nnodes 2``
    gave ``G10 FAIL … a job not marked as training or serving`` and --spark-gate skipped the user's
    training test. It is another job: a WARN naming it. The same flags on the launcher of this run
    (an ancestor: the job being launched) still FAIL, and a training process still FAILs."""
    other = process_sources(_table((8276, 1, ["python3", "/srv/sweep.py", *EVIL_FLAGS], True)))
    r = decide(*other)
    assert r.status is Status.WARN, r.line()
    assert r.codes == ["G10.other-job"]  # not the unmarked job's G10.tp-across-nodes
    assert r.short_line().startswith("G10 WARN: running pid 8276 (sweep.py): TP 2 across 2 nodes, another job")
    launcher = [{**p, "self": True} for p in _table((8300, 1, ["torchrun", "train.py", *EVIL_FLAGS], True))]
    (job,) = process_sources(launcher)
    assert job.kind == "launcher"
    assert decide(job).codes == decide(*other, job).codes == ["G10.tp-across-nodes"]
    assert decide(job).status is Status.FAIL
    assert decide(*other, job).status is Status.FAIL
    training = process_sources(
        _table((8400, 1, ["python3", "train.py", "--tensor-model-parallel-size", "2", "--nnodes", "2"], True))
    )
    assert decide(*training).status is Status.FAIL
    assert decide(*training).codes == ["G10.tp-across-nodes"]


def test_another_users_job_is_a_note_never_a_fail_or_warn() -> None:
    table = _table(
        (8275, 1, ["timeout", "60", "python3", "/srv/evil.py", *EVIL_FLAGS], False),
        (8276, 8275, ["python3", "/srv/evil.py", *EVIL_FLAGS], False),
        (9000, 1, ["vllm", "serve", "m", "--tensor-parallel-size", "4", "--headless"], False),
    )
    sources = process_sources(table)
    assert [s.owner for s in sources] == ["uid 4242", "uid 4242"]
    r = decide(*sources, gpu_count=1)
    assert r.status is Status.PASS, r.line()
    assert r.short_line().startswith("G10 PASS: single node"), r.short_line()
    notes = [d for d in r.details if d.startswith("not judged, another user's job (uid 4242): ")]
    assert notes == [
        "not judged, another user's job (uid 4242): pid 8276 (evil.py): --tensor-parallel-size = 2, --nnodes = 2",
        "not judged, another user's job (uid 4242): pid 9000 (vllm): --tensor-parallel-size = 4, --headless = True",
    ]
    # your own job beside theirs still decides
    mine = process_sources(_table((9100, 1, ["python3", "train.py", *EVIL_FLAGS], True)))
    assert decide(*sources, *mine).codes == ["G10.other-job"]


def _start(prefix: list[str], script: Path, python: str = sys.executable) -> subprocess.Popen[bytes]:
    """``timeout 60 python3 evil.py --tensor-parallel-size 2 --nnodes 2`` in a
    session of its own (as another person's login would be), once the python
    behind ``timeout`` shows its whole command line."""
    argv = [*prefix, "timeout", "60", python, str(script), *EVIL_FLAGS]
    proc = subprocess.Popen(argv, start_new_session=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        kids = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
        pids = kids.read_text().split() if kids.exists() else []
        if pids and Path(f"/proc/{pids[0]}/cmdline").read_bytes().count(b"\0") >= 6:
            break
        time.sleep(0.05)
    return proc


def _stop(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, 9)  # the group this test started: timeout and the python behind it
    proc.wait()


def test_a_running_wrapped_job_of_yours_names_the_program(tmp_path: Path) -> None:
    script = tmp_path / "evil.py"
    script.write_text("import time\ntime.sleep(60)\n")
    proc = _start([], script)
    try:
        eng, _ = engine(tmp_path / "proj", real_processes=True)
        r = eng.run("G10")
    finally:
        _stop(proc)
    assert r.status is Status.WARN, r.line()
    mine = [d for d in r.details if d.startswith("TP 2 across 2 nodes: pid ") and "evil.py" in d]
    assert len(mine) == 1, r.details  # timeout and its python: one job
    assert f"(pid {proc.pid} (timeout))" not in r.line()


def test_a_running_job_of_another_user_is_only_a_note(tmp_path: Path) -> None:
    """A real ``timeout 60 python3 theirs.py …`` of another uid, in its own session. Its own name: a
    test beside it under xdist runs a job of ours with the same flags (``evil.py``), which G10 rightly
    names while both run."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to start a process of another user")
    folder = Path(tempfile.mkdtemp(prefix="spark-other-"))
    try:
        folder.chmod(0o755)
        script = folder / "theirs.py"
        script.write_text("import time\ntime.sleep(60)\n")
        script.chmod(0o644)
        prefix = ["setpriv", "--reuid=4242", "--regid=4242", "--clear-groups"]
        # this interpreter may sit where that user cannot reach (a venv under /root): any it can run
        candidates = [
            sys.executable,
            getattr(sys, "_base_executable", ""),
            *(f"{d}/python3" for d in os.get_exec_path()),
        ]
        python = next(
            (
                py
                for py in candidates
                if py
                and subprocess.run(
                    [*prefix, "timeout", "20", py, "-c", "pass"], capture_output=True
                ).returncode
                == 0
            ),
            None,
        )
        if python is None:
            pytest.skip("uid 4242 can run no Python interpreter here")
        proc = _start(prefix, script, python)
        try:
            eng, _ = engine(tmp_path, real_processes=True)
            r = eng.run("G10")
        finally:
            _stop(proc)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert not any("theirs.py" in t for t in (r.summary, r.headline, r.fix)), r.line()
    notes = [d for d in r.details if d.startswith("not judged, another user's job (uid 4242): pid ")]
    assert len(notes) == 1 and "(theirs.py): --tensor-parallel-size = 2, --nnodes = 2" in notes[0], r.details


# --------------------------------------------------------------------------- issue 22, G10+: a degraded link, a container without RDMA


def posted_busbw() -> tuple[float, float]:
    """nccl_two_spark_7.txt: ``Avg bus bandwidth`` after a reboot, then after moving the QSFP cable
    (it stays there until the next reboot)."""
    text = (GB10 / "nccl_two_spark_7.txt").read_text()
    assert text.startswith("# source:")
    healthy, degraded = (float(x) for x in re.findall(r"# Avg bus bandwidth\s*:\s*([\d.]+)", text))
    return healthy, degraded


def posted_speed_mbps() -> int:
    """nccl_debug_two_spark_1.txt: NCCL's view of the RoCE port, ``speed=200000`` (Mb/s)."""
    text = (GB10 / "nccl_debug_two_spark_1.txt").read_text()
    speeds = set(re.findall(r"name=rocep1s0f1 speed=(\d+)", text))
    assert speeds == {"200000"}
    return int(speeds.pop())


#: the link as read_link() reads a Spark whose outer port is up at 200 G
LINK_200G = {
    "rdma": {
        "rocep1s0f1": {"states": {"1": "4: ACTIVE"}, "netdevs": ["enp1s0f1np1"], "rates": {"1": "200 Gb/sec (4X HDR)"}},
        "rocep1s0f0": {"states": {"1": "1: DOWN"}, "netdevs": ["enp1s0f0np0"], "rates": {"1": "40 Gb/sec (4X QDR)"}},
    },
    "mtu": {"enp1s0f1np1": 9000, "enp1s0f0np0": 1500},
    "speed": {"enp1s0f1np1": 200000, "enp1s0f0np0": None},
    "sysfs": True,
}
LINK_ENV = {**TWO_NODES, "NCCL_IB_HCA": "rocep1s0f1", "NCCL_SOCKET_IFNAME": "enp1s0f1np1"}


def probe_of(busbw: float, backend: str = "nccl") -> dict[str, Any]:
    return {**PROBE_OK, "data": {**PROBE_OK["data"], "backend": backend, "group_busbw_gbps": busbw, "busbw_gbps": busbw}}


def test_a_re_cabled_links_busbw_fails_and_says_the_link_reports_200g() -> None:
    """nccl_two_spark_7.txt: 2.82151 GB/s after re-cabling, over a port that still reports 200 G."""
    assert posted_speed_mbps() == LINK_200G["speed"]["enp1s0f1np1"]
    _, degraded = posted_busbw()
    r = decide(source(NVIDIA_FSDP), env=LINK_ENV, probe=probe_of(degraded), intrusive=True, link=LINK_200G)
    assert r.status is Status.FAIL, r.line()
    assert r.codes == ["G10.busbw-degraded"]
    assert r.summary.startswith(
        "rank 0 of 2: all-reduce busbw 2.8 GB/s (nccl, 2 ranks, 512 MiB) while the link reports enp1s0f1np1 "
        "200 Gb/s, below the 5 GB/s a working two-Spark link never falls to"
    )
    assert "PR #108" in r.fix  # the source the fix cites
    assert r.short_line() == (
        "G10 FAIL: all-reduce 2.8 GB/s, below 5 GB/s (enp1s0f1np1 200 Gb/s); fix: reboot both Sparks; re-seat "
        "the cable"
    )
    assert r.reading("link_speed").value == "enp1s0f1np1 200 Gb/s"
    assert r.reading("busbw_fail_below").value == 5.0


def test_the_same_link_after_a_reboot_passes() -> None:
    healthy, _ = posted_busbw()
    r = decide(source(NVIDIA_FSDP), env=LINK_ENV, probe=probe_of(healthy), intrusive=True, link=LINK_200G)
    assert r.status is Status.PASS, r.line()
    assert r.summary.endswith("; all-reduce busbw 21.4 GB/s (nccl, 2 ranks, 512 MiB)")


def test_the_fail_floor_is_a_threshold() -> None:
    _, degraded = posted_busbw()
    facts = facts_of(env=LINK_ENV, sources=[source(NVIDIA_FSDP)], probe=probe_of(degraded), intrusive=True)
    params = Params(profile="gb10", thresholds={"g10_busbw_fail_gbps": 2.0})
    r = g10.evaluate(facts, params)
    assert r.status is Status.WARN
    assert r.codes == ["G10.busbw-low"]


def test_a_slow_gloo_figure_only_warns() -> None:
    """gloo measures the CPU path: it never FAILs the link."""
    r = decide(source(NVIDIA_FSDP), env=LINK_ENV, probe=probe_of(1.0, "gloo"), intrusive=True, link=LINK_200G)
    assert r.status is Status.WARN
    assert r.codes == ["G10.busbw-low"]
    assert "measured with gloo on CPU" in r.summary


def test_a_degraded_figure_within_one_node_is_not_judged() -> None:
    _, degraded = posted_busbw()
    single = {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "RANK": "0"}
    r = decide(env=single, probe=probe_of(degraded), intrusive=True, link=LINK_200G, container="Docker container")
    assert r.status is Status.PASS, r.line()
    assert r.reading("dev_infiniband") is None


def test_a_container_without_dev_infiniband_fails_on_a_multi_node_job() -> None:
    """FIELD-2026-12 F9 (S46): in a container without /dev/infiniband NCCL logs ``NET/IB : No device
    found`` and falls back to TCP sockets; the host's RoCE devices still show in /sys."""
    facts = dict(link=LINK_200G, container="Docker container (/.dockerenv)", dev_infiniband=None)
    r = decide(source(NVIDIA_FSDP), env=LINK_ENV, **facts)
    assert r.status is Status.FAIL, r.line()
    assert r.codes == ["G10.container-no-rdma"]
    assert "in a container (Docker container (/.dockerenv))" in r.summary  # names the container
    assert "NET/IB : No device found" in r.summary  # the words NCCL logs, to find it by
    assert r.reading("dev_infiniband").value == "absent"
    with_devices = decide(
        source(NVIDIA_FSDP), env=LINK_ENV, **{**facts, "dev_infiniband": ["rdma_cm", "uverbs1", "uverbs3"]},
        memlock={"soft": "unlimited", "hard": "unlimited", "error": None},
    )
    assert with_devices.status is Status.PASS, with_devices.line()
    assert with_devices.reading("memlock").value == "unlimited"


def test_on_the_host_dev_infiniband_is_not_asked_for() -> None:
    r = decide(source(NVIDIA_FSDP), env=LINK_ENV, link=LINK_200G, dev_infiniband=None)
    assert r.status is Status.PASS, r.line()


def test_a_small_memlock_limit_warns_on_a_multi_node_rdma_job() -> None:
    """The kernel's default 8 MiB memlock (Linux 5.16+): ibv_reg_mr fails with 'Cannot allocate memory' (FIELD-2026-12 S31,
    NVIDIA/nccl-tests#206)."""
    memlock = {"soft": 8 << 20, "hard": 8 << 20, "error": None}
    r = decide(source(NVIDIA_FSDP), env=LINK_ENV, link=LINK_200G, memlock=memlock)
    assert r.status is Status.WARN, r.line()
    assert r.codes == ["G10.memlock-low"]
    assert r.summary.startswith("rank 0 of 2: memlock limit 8 MiB (RLIMIT_MEMLOCK of this process), below 1024 MiB")
    assert decide(env=dict(TWO_NODES), memlock=memlock).reading("memlock") is None  # no RDMA: not judged


def test_gather_reads_speed_rate_dev_infiniband_and_memlock_through_the_root(tmp_path: Path) -> None:
    """The planted host root: a Docker container whose host shows RoCE devices at 200 G, no
    /dev/infiniband, an 8 MiB memlock limit (/proc/self/limits as Linux prints it)."""
    root = sys_tree(tmp_path / "host")
    port = root / "sys/class/infiniband/rocep1s0f1/ports/1"
    (port / "rate").write_text("200 Gb/sec (4X HDR)\n")
    (root / "sys/class/net/enp1s0f1np1/speed").write_text(f"{posted_speed_mbps()}\n")
    (root / ".dockerenv").write_text("")
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/self/limits").write_text(
        "Limit                     Soft Limit           Hard Limit           Units     \n"
        "Max locked memory         8388608              8388608              bytes     \n"
    )
    work = tmp_path / "work"
    work.mkdir()
    full = {k: v for k, v in clean_env().items() if not k.startswith("NCCL_")}
    full.update(LINK_ENV, NCCL_IB_HCA="rocep1s0f1,roceP2p1s0f1", SPARK_PREFLIGHT_HOST_ROOT=str(root))
    eng, machine = engine(work, env=full)
    facts = g10.gather(CheckContext("G10", eng.settings, machine, eng))
    assert facts.link is not None
    assert facts.link.speed["enp1s0f1np1"] == 200000
    assert facts.link.rdma["rocep1s0f1"].rates == {"1": "200 Gb/sec (4X HDR)"}
    assert facts.dev_infiniband is None
    assert facts.memlock == mn.Memlock(soft=8388608, hard=8388608, error=None)
    assert facts.container and facts.container.startswith("Docker container")
    r = eng.run("G10")
    assert r.status is Status.FAIL, r.line()
    assert r.codes == ["G10.container-no-rdma"]
    assert r.short_line() == (
        "G10 FAIL: no /dev/infiniband in this container; fix: --device /dev/infiniband --cap-add IPC_LOCK "
        "--ulimit memlock=-1:-1"
    )
    assert any("memlock limit 8 MiB" in t for t in [r.summary, *r.details])


def test_expected_gdr_lines_are_not_findings() -> None:
    """nccl_debug_two_spark_1.txt: on GB10 NCCL always says ``GPU Direct RDMA Disabled`` and
    ``dlvsym failed on mlx5dv_reg_dmabuf_mr`` (no GDR on GB10). G10 reads no NCCL log: a probe
    whose error carries them is judged on its outcome, and a healthy run names neither."""
    text = (GB10 / "nccl_debug_two_spark_1.txt").read_text()
    assert "GPU Direct RDMA Disabled" in text and "dlvsym failed on mlx5dv_reg_dmabuf_mr" in text
    healthy, _ = posted_busbw()
    r = decide(source(NVIDIA_FSDP), env=LINK_ENV, probe=probe_of(healthy), intrusive=True, link=LINK_200G)
    assert not any("GPU Direct" in t or "dlvsym" in t for t in [r.summary, r.fix, *r.details])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Max locked memory         unlimited            unlimited            bytes\n", ("unlimited", "unlimited", None)),
        ("Max locked memory         65536                65536                bytes\n", (65536, 65536, None)),
        ("\x00\xffgarbage\n" * 50, (None, None, "/proc/self/limits has no readable 'Max locked memory' line")),
        ("Max locked memory         lots\n", (None, None, "/proc/self/limits has no readable 'Max locked memory' line")),
    ],
)
def test_memlock_is_read_defensively(tmp_path: Path, text: str, expected: tuple[Any, Any, Any]) -> None:
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/limits").write_text(text)
    got = mn.read_memlock(Machine(root=tmp_path, env={}))
    assert (got.soft, got.hard, got.error) == expected


def test_a_fifo_for_limits_and_speed_never_blocks(tmp_path: Path) -> None:
    """A FIFO planted where /proc/self/limits and a sysfs speed file should be: refused, not read."""
    (tmp_path / "proc/self").mkdir(parents=True)
    os.mkfifo(tmp_path / "proc/self/limits")
    (tmp_path / "sys/class/net/enp1s0f1np1").mkdir(parents=True)
    os.mkfifo(tmp_path / "sys/class/net/enp1s0f1np1/speed")
    machine = Machine(root=tmp_path, env={})
    got = mn.read_memlock(machine)
    assert got.soft is None and got.error and got.error.startswith("cannot read /proc/self/limits")
    assert mn.interface_speed(machine, "enp1s0f1np1") is None
