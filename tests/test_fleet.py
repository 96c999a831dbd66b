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

from conftest import PYTEST_CHILD

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
    # nothing left behind: no fleet child of this test (its MASTER_PORT) still runs
    left = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"G10 fleet child" in cmd and f"MASTER_PORT={port}".encode() in environ:
                left.append(pid)
    assert left == []


def test_not_in_a_job_says_so_without_torch() -> None:
    env = {
        k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    }
    proc = subprocess.run(
        [sys.executable, "-c", EXCHANGE, "5", "PASS", "5"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
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
        (
            {"nccl_torch": "2.28.3"},
            "nodes differ in NCCL (torch's) major.minor: 2.27 on rank 0 (spark-a), 2.28 on rank 1 (spark-b)",
        ),
        (
            {"driver": "590.10.01"},
            "nodes differ in driver major: 580 on rank 0 (spark-a), 590 on rank 1 (spark-b)",
        ),
        (
            {"torch": "2.12.0+cu130"},
            "nodes differ in torch: 2.11.0+cu130 on rank 0 (spark-a), 2.12.0+cu130 on rank 1",
        ),
        (
            {"gpu": "NVIDIA H200"},
            "nodes differ in GPU model: NVIDIA GB10 on rank 0 (spark-a), NVIDIA H200 on rank 1",
        ),
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
        (
            {"packages": {"triton": "3.5.1", "transformers": "4.57.1", "nvidia-nccl-cu13": "2.27.7"}},
            "triton differs",
        ),
        ({"mem_available_kib": 40_000_000}, "MemAvailable much lower on rank 1 (spark-b) 38.1 GiB"),
    ],
)
def test_what_often_breaks_warns(change: dict, expected: str) -> None:
    out = decided(fp(0), fp(1, **change))
    assert out.problems == []
    assert any(t.startswith(expected) for t, _ in out.warnings), out.warnings


# --------------------------------------------------------------------------- two ranks through the CLI


def spark_root(folder: Path) -> str:
    """A machine root holding a Spark's ``/proc/meminfo`` and init as its only
    process (conftest's ``quiet_root`` says why the real table is not used)."""
    from conftest import QUIET_PROC, make_root
    from doubles import gb10

    return str(make_root(folder / "root", {**QUIET_PROC, "proc/meminfo": gb10.meminfo()}))


def rank_cli(
    tmp: Path,
    rank: int,
    port: int,
    *,
    driver: str = "580.173.02",
    pythonpath: str = "",
    timeout: str = "5",
    **extra: str,
) -> subprocess.Popen[str]:
    """``spark-preflight --only G3,G10`` as rank ``rank`` of a two-rank job, on a
    GB10 NVML double whose driver is ``driver``."""
    from conftest import Doubles
    from doubles import gb10

    folder = tmp / f"rank{rank}"
    folder.mkdir(exist_ok=True)
    env = Doubles(folder).nvml(gb10.nvml(driver_version=driver)).env
    env.update(rank_env(rank, 2, port, **extra))
    for key in ("NCCL_IB_HCA", "NCCL_SOCKET_IFNAME", "VIRTUAL_ENV"):
        if key not in extra:
            env.pop(key, None)
    env["SPARK_PREFLIGHT_HOST_ROOT"] = spark_root(folder)
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join([pythonpath, env.get("PYTHONPATH", "")])
    report = tmp / "env-report.json"
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest_spark.cli",
            "--only",
            "G3,G10",
            "--timeout",
            timeout,
            "--report",
            str(report),
            "-v",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=folder,
    )


def g10_of(proc: subprocess.Popen[str]) -> str:
    out, err = proc.communicate(timeout=180)
    line = next((ln for ln in out.splitlines() if ln.startswith("G10 ")), "")
    assert line, out + err
    return line


@needs_torch
def test_a_matching_pair_passes_and_rank_0_writes_the_merged_report(tmp_path: Path) -> None:
    port = free_port()
    a, b = rank_cli(tmp_path, 0, port), rank_cli(tmp_path, 1, port)
    la, lb = g10_of(a), g10_of(b)
    assert la.startswith("G10 PASS: rank 0 of 2: ") and lb.startswith("G10 PASS: rank 1 of 2"), (la, lb)
    merged = json.loads((tmp_path / "env-report.json").read_text())
    assert sorted(merged["nodes"]) == ["0", "1"]
    assert merged["nodes"]["1"]["statuses"]["G3"] in ("INFO", "PASS")
    assert merged["nodes"]["0"]["driver"] == "580.173.02"
    assert merged["cross_node"]["status"] == "PASS"
    rank1 = json.loads((tmp_path / "env-report.rank1.json").read_text())
    assert "nodes" not in rank1  # the others write their own report, as before


@needs_torch
@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            {"extra": {"NCCL_IB_HCA": "rocep1s0f1"}},
            "G10 WARN: rank 0 of 2: NCCL_IB_HCA differs: unset on rank 0",
        ),
        ({"driver": "590.44.01"}, "G10 FAIL: rank 0 of 2: nodes differ in driver major: 580 on rank 0"),
        ({"overlay": "triton"}, "G10 WARN: rank 0 of 2: triton differs: "),
    ],
)
def test_one_rank_that_differs_is_named(tmp_path: Path, change: dict, expected: str) -> None:
    port = free_port()
    kwargs: dict = {}
    if "extra" in change:
        kwargs.update(change["extra"])
    if "driver" in change:
        kwargs["driver"] = change["driver"]
    if "overlay" in change:  # another triton on rank 1's path only
        overlay = tmp_path / "overlay"
        info = overlay / "triton-9.9.9.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: triton\nVersion: 9.9.9\n")
        kwargs["pythonpath"] = str(overlay)
    a, b = rank_cli(tmp_path, 0, port), rank_cli(tmp_path, 1, port, **kwargs)
    la, _ = g10_of(a), g10_of(b)
    assert la.startswith(expected), la
    if "overlay" in change:
        assert "9.9.9 on rank 1" in la


@needs_torch
def test_a_rank_that_never_joins_fails_within_the_timeout_through_the_cli(tmp_path: Path) -> None:
    port = free_port()
    started = time.monotonic()
    line = g10_of(rank_cli(tmp_path, 0, port, timeout="1"))
    assert time.monotonic() - started < 60
    assert line.startswith("G10 FAIL: rank 0 of 2: rank 1 never joined the node comparison"), line


@needs_torch
def test_two_ranks_through_pytest_rank_0_junit_carries_every_node(tmp_path: Path) -> None:
    """Both ranks give the same --junitxml: rank 1 writes its own ``.rank1`` file,
    rank 0's keeps the ``spark.node<k>.*`` suite properties of both nodes."""
    from conftest import Doubles
    from doubles import gb10

    port = free_port()
    junit = tmp_path / "junit.xml"
    procs = []
    for rank in (0, 1):
        folder = tmp_path / f"r{rank}"
        folder.mkdir()
        env = Doubles(folder).nvml(gb10.nvml()).env
        env.update(rank_env(rank, 2, port))
        env["SPARK_PREFLIGHT_HOST_ROOT"] = spark_root(folder)
        procs.append(
            subprocess.Popen(
                [
                    *PYTEST_CHILD,
                    "--spark-preflight",
                    "--spark-only=G3,G10",
                    "--spark-timeout=5",
                    f"--junitxml={junit}",
                    "-q",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env=env,
                cwd=folder,
            )
        )
    outs = [p.communicate(timeout=180)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    xml = junit.read_text()
    assert 'name="spark.node0.hostname"' in xml and 'name="spark.node1.hostname"' in xml
    assert 'name="spark.node1.G3" value="INFO"' in xml
    assert (tmp_path / "junit.rank1.xml").is_file()
    assert "spark.node0" not in (tmp_path / "junit.rank1.xml").read_text()
