"""Two nodes, one job: fingerprints exchanged over gloo, and compared.

The exchange runs for real: two local processes play rank 0 and rank 1 of a
job (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT as torchrun sets them) and meet
over a gloo process group on the CPU. Without torch these tests skip.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_spark.checks import nodes
from pytest_spark.checks.kit import Findings
from pytest_spark.model import Status

EXCHANGE = """
import json, sys
from pytest_spark.probes.machine import Machine
from pytest_spark.probes import fleet
m = Machine(timeout=float(sys.argv[1]))
mine = fleet.fingerprint(m, {"G3": sys.argv[2]})
print(json.dumps(fleet.exchange(m, mine, float(sys.argv[3]))))
"""


def has_torch() -> bool:
    probe = subprocess.run(
        [sys.executable, "-c", "import torch.distributed as d; assert d.is_gloo_available()"],
        capture_output=True,
        timeout=120,
    )
    return probe.returncode == 0


needs_torch = pytest.mark.skipif(not has_torch(), reason="torch with gloo is not installed here")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rank_env(rank: int, world: int, port: int, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "TORCHELASTIC"))}
    env.update(
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK="0",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        **extra,
    )
    return env


def start(rank: int, world: int, port: int, status: str = "PASS", timeout: float = 20, **extra: str):
    return subprocess.Popen(
        [sys.executable, "-c", EXCHANGE, "5", status, str(timeout)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=rank_env(rank, world, port, **extra),
    )


def result(proc: subprocess.Popen[str]) -> dict:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


@needs_torch
def test_two_ranks_exchange_their_fingerprints_over_gloo() -> None:
    port = free_port()
    a = start(0, 2, port, NCCL_IB_HCA="rocep1s0f1")
    b = start(1, 2, port, "FAIL", NCCL_IB_HCA="rocep1s0f1,roceP2p1s0f1")
    ra, rb = result(a), result(b)
    assert ra.get("error") is None, ra
    assert [fp["rank"] for fp in ra["fingerprints"]] == ["0", "1"]
    assert ra["fingerprints"] == rb["fingerprints"]
    fps = ra["fingerprints"]
    assert fps[0]["env"]["NCCL_IB_HCA"] == "rocep1s0f1"
    assert fps[1]["statuses"] == {"G3": "FAIL"}
    assert fps[0]["torch"].startswith("2.")
    out = Findings("G10")
    nodes.compare(fps, out)
    assert any("NCCL_IB_HCA differs: rocep1s0f1 on rank 0" in t for t, _ in out.warnings)
    assert any("rank 1" in t and "G3 FAIL" in t for t, _ in out.problems)


@needs_torch
def test_a_rank_that_never_joins_is_named_within_the_timeout() -> None:
    port = free_port()
    started = time.monotonic()
    a = start(0, 2, port, timeout=4)
    ra = result(a)
    assert time.monotonic() - started < 60
    assert ra["error"].startswith(("rendezvous failed", "fingerprint exchange failed"))
    assert ra["missing"] == [1]
    # nothing left behind: no process of this test still runs the exchange
    left = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"pytest_spark_fleet" in cmd or (b"fleet_child" in cmd and str(port).encode() in cmd):
                left.append(pid)
    assert left == []


def test_not_in_a_job_says_so_without_torch() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    proc = subprocess.run(
        [sys.executable, "-c", EXCHANGE, "5", "PASS", "5"], capture_output=True, text=True, timeout=120, env=env
    )
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "not a multi-process job" in out["error"]


# --------------------------------------------------------------------------- pure comparison


def fp(rank: int, **changes) -> dict:
    base = {
        "rank": str(rank),
        "hostname": f"spark-{'ab'[rank]}",
        "gpu": "NVIDIA GB10",
        "capability": "12.1",
        "driver": "580.95.05",
        "cuda_driver": "13.0",
        "python": "3.12.3",
        "torch": "2.11.0+cu130",
        "torch_cuda": "13.0",
        "nccl_torch": "2.27.7",
        "packages": {"triton": "3.5.0", "transformers": "4.57.1", "nvidia-nccl-cu13": "2.27.7"},
        "container": {"NVIDIA_PYTORCH_VERSION": "25.09"},
        "env": {"NCCL_SOCKET_IFNAME": "enp1s0f1np1", "NCCL_IB_HCA": "rocep1s0f1,roceP2p1s0f1"},
        "mtu": 9000,
        "mem_available_kib": 115_000_000,
        "mem_free_kib": 100_000_000,
        "statuses": {"G1": "PASS", "G3": "INFO"},
    }
    base.update(changes)
    return base


def decided(*fps: dict) -> Findings:
    out = Findings("G10")
    nodes.compare(list(fps), out)
    return out


def test_matching_nodes_give_nothing() -> None:
    out = decided(fp(0), fp(1))
    assert out.problems == [] and out.warnings == []
    assert out.result(Status.PASS, "ok").status is Status.PASS


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"nccl_torch": "2.28.3"}, "nodes differ in NCCL (torch's) major.minor: 2.27 on rank 0 (spark-a), 2.28 on rank 1 (spark-b)"),
        ({"driver": "590.10.01"}, "nodes differ in driver major: 580 on rank 0 (spark-a), 590 on rank 1 (spark-b)"),
        ({"torch": "2.12.0+cu130"}, "nodes differ in torch: 2.11.0+cu130 on rank 0 (spark-a), 2.12.0+cu130 on rank 1"),
        ({"gpu": "NVIDIA H200"}, "nodes differ in GPU model: NVIDIA GB10 on rank 0 (spark-a), NVIDIA H200 on rank 1"),
        ({"statuses": {"G3": "FAIL"}}, "a node fails its own preflight: rank 1 (spark-b): G3 FAIL"),
    ],
)
def test_what_breaks_collectives_fails(change: dict, expected: str) -> None:
    out = decided(fp(0), fp(1, **change))
    assert any(t.startswith(expected) for t, _ in out.problems), out.problems


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"env": {"NCCL_SOCKET_IFNAME": "enp1s0f1np1", "NCCL_IB_HCA": "rocep1s0f1"}}, "NCCL_IB_HCA differs"),
        ({"container": {"NVIDIA_PYTORCH_VERSION": "25.10"}}, "container NVIDIA_PYTORCH_VERSION differs"),
        ({"mtu": 1500}, "MTU of the NCCL interface differs: 9000 on rank 0 (spark-a), 1500 on rank 1"),
        ({"packages": {"triton": "3.5.1", "transformers": "4.57.1", "nvidia-nccl-cu13": "2.27.7"}}, "triton differs"),
        ({"mem_available_kib": 40_000_000}, "MemAvailable much lower on rank 1 (spark-b) 38.1 GiB"),
    ],
)
def test_what_often_breaks_warns(change: dict, expected: str) -> None:
    out = decided(fp(0), fp(1, **change))
    assert out.problems == []
    assert any(t.startswith(expected) for t, _ in out.warnings), out.warnings
