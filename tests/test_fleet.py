"""Two nodes, one job: fingerprints exchanged over gloo, and compared.

The exchange runs for real: two local processes play rank 0 and rank 1 of a
job (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT as torchrun sets them) and meet
over a gloo process group on the CPU. Without torch these tests skip.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_dgx_spark import catalog
from pytest_dgx_spark.checks.g10_multinode import nodes
from pytest_dgx_spark.checks.kit import Findings
from pytest_dgx_spark.model import Result, Status
from pytest_dgx_spark.probes.fleet import Exchange, Fingerprint

from conftest import PYTEST_CHILD

EXCHANGE = """
import json, sys
from pytest_dgx_spark.probes.machine import Machine
from pytest_dgx_spark.probes import fleet
m = Machine(timeout=float(sys.argv[1]))
mine = fleet.fingerprint(m, {"G3": sys.argv[2]})
print(json.dumps(fleet.exchange(m, mine, float(sys.argv[3])).to_dict()))
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


def launcher(rank: int, world: int, port: int, **extra: str) -> dict[str, str]:
    """Only what torchrun sets for one rank (and ``extra``): laid over an
    environment the doubles built, it keeps their PYTHONPATH and PATH."""
    return {
        "RANK": str(rank),
        "WORLD_SIZE": str(world),
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        **extra,
    }


#: what torchrun or srun set for a rank: a test's rank gets only its own
JOB_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK")


def without_job_vars(env: dict[str, str]) -> dict[str, str]:
    """``env`` without this host's NCCL, torchelastic and Slurm variables (a rank gets its own)."""
    return {k: v for k, v in env.items() if not k.startswith(("NCCL_", "TORCHELASTIC", "SLURM_"))}


def rank_env(rank: int, world: int, port: int, **extra: str) -> dict[str, str]:
    return {**without_job_vars(dict(os.environ)), **launcher(rank, world, port, **extra)}


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
    out = decided(*fps)
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
    assert fleet_children(port) == []


def fleet_children(port: int) -> list[str]:
    """Fleet children of the job at ``MASTER_PORT=port`` still running (left behind)."""
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
    return left


@needs_torch
def test_a_rank_whose_rank_0_never_arrives_names_rank_0_and_its_store() -> None:
    """Rank 1 alone: nothing listens at MASTER_ADDR:MASTER_PORT (rank 0 hosts the
    store, or torchrun's agent on rank 0's node does)."""
    port = free_port()
    started = time.monotonic()
    rb = result(start(1, 2, port, timeout=3))
    assert time.monotonic() - started < 60
    assert rb["missing"] == [0], rb
    assert f"127.0.0.1:{port}" in rb["error"]
    assert fleet_children(port) == []


#: a rank of another version: its fingerprint's MTU is text, not a number
ODD_PEER = EXCHANGE.replace('mine = fleet.fingerprint(m, {"G3": sys.argv[2]})',
                            'mine = fleet.fingerprint(m, {"G3": sys.argv[2]}); mine.mtu = "jumbo"')


@needs_torch
def test_a_peer_fingerprint_of_another_shape_is_a_reason_not_a_crash() -> None:
    """Two real ranks over gloo; rank 1 sends a fingerprint this version cannot read: every rank's
    exchange says which field, and G10 says the nodes were not compared (it does not crash)."""
    from pytest_dgx_spark.checks.g10_multinode.check import judge_fleet

    port = free_port()
    odd = subprocess.Popen([sys.executable, "-c", ODD_PEER, "5", "PASS", "20"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, env=rank_env(1, 2, port))  # fmt: skip
    ra, rb = result(start(0, 2, port)), result(odd)
    for got in (ra, rb):
        assert got["fingerprints"] is None
        assert got["error"] == (
            "a rank's fingerprint cannot be read (fingerprints[1].mtu: expected an integer or null, got str 'jumbo')"
        )
    out = Findings("G10")
    judge_fleet(Exchange.from_dict(ra), out)
    assert out.codes_of() == ["G10.nodes-not-compared"]
    assert fleet_children(port) == []


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


needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed here")


def fake_nccl(folder: Path, code: int) -> Path:
    """A real ``libnccl.so.2`` (gcc, ELF, soname libnccl.so.2) whose
    ``ncclGetVersion`` answers ``code``, as a system NCCL in an NGC container
    or on DGX OS would; no pip ``nvidia-nccl-*`` metadata says anything about it."""
    folder.mkdir(parents=True)
    src = folder / "nccl.c"
    src.write_text(f"int ncclGetVersion(int *version) {{ *version = {code}; return 0; }}\n")
    lib = folder / "libnccl.so.2"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-Wl,-soname,libnccl.so.2", "-o", str(lib), str(src)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return lib


def torch_own_nccl() -> str | None:
    """The ``libnccl`` this torch loads at import (a CUDA build's pip NCCL),
    else None: then ``dlopen("libnccl.so.2")`` returns that copy, and a
    library a test plants on LD_LIBRARY_PATH cannot answer."""
    probe = subprocess.run(
        [sys.executable, "-c", "import torch; print(*sorted({l.split()[-1] for l in open('/proc/self/maps') "
         "if 'libnccl' in l}))"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return probe.stdout.strip() or None


@needs_torch
@needs_gcc
def test_the_nccl_library_that_loads_is_asked_its_version(tmp_path: Path) -> None:
    own = torch_own_nccl()
    if own:
        pytest.skip(f"this torch loads its own NCCL at import ({own}): a planted libnccl.so.2 cannot answer")
    lib0, lib1 = fake_nccl(tmp_path / "nccl0", 22907), fake_nccl(tmp_path / "nccl1", 23003)
    port = free_port()
    a = start(0, 2, port, LD_LIBRARY_PATH=str(lib0.parent))
    b = start(1, 2, port, LD_LIBRARY_PATH=str(lib1.parent))
    ra, _ = result(a), result(b)
    assert ra.get("error") is None, ra
    fps = ra["fingerprints"]
    assert (fps[0]["nccl_lib"], fps[1]["nccl_lib"]) == ("2.29.7", "2.30.3")
    assert fps[0]["nccl_lib_path"] == str(lib0)
    out = decided(*fps)
    assert any(
        t.startswith("nodes differ in NCCL library major.minor: 2.29 on rank 0") for t, _ in out.problems
    ), out.problems


@pytest.mark.parametrize(
    ("env", "mtu", "ifname"),
    [
        # nccl_two_spark_1.txt: NCCL_IB_HCA names the RoCE devices; wlP9s9 only bootstraps (23 GB/s)
        (
            {"NCCL_IB_HCA": "=rocep1s0f0,roceP2p1s0f0,rocep1s0f1,roceP2p1s0f1", "NCCL_SOCKET_IFNAME": "wlP9s9"},
            9000,
            "enP2p1s0f1np1,enp1s0f1np1",
        ),
        ({"NCCL_IB_HCA": "rocep1s0f1"}, 9000, "enp1s0f1np1"),
        ({"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "wlP9s9"}, 1500, "wlP9s9"),
        ({}, 9000, "enP2p1s0f1np1,enp1s0f1np1"),  # NCCL's default: every RoCE device that is up
    ],
)
def test_the_fingerprint_mtu_is_that_of_the_interfaces_nccl_sends_on(
    tmp_path: Path, env: dict[str, str], mtu: int, ifname: str
) -> None:
    """The MTU compared across nodes is read where G10's link rules say NCCL's
    data goes: the net devices behind the selected RoCE devices, the socket
    interface only when sockets carry the data."""
    from test_g10_multinode import sys_tree

    from pytest_dgx_spark.checks.g10_multinode.link import fleet_interfaces
    from pytest_dgx_spark.probes import fleet
    from pytest_dgx_spark.probes import multinode as mn
    from pytest_dgx_spark.probes.machine import Machine

    root = sys_tree(tmp_path, extra_net={"wlP9s9": 1500})
    machine = Machine(root=root, env=env)
    mine = fleet.fingerprint(machine, {}, interfaces=fleet_interfaces(env, mn.read_link(machine, env)))
    assert (mine.mtu, mine.nccl_ifname) == (mtu, ifname)


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
    """The comparison of ``fps`` (as the exchange brings them: JSON) in the one accumulator."""
    out = Findings("G10")
    nodes.compare([Fingerprint.from_dict(f) for f in fps], out)
    return out


def test_matching_nodes_give_nothing() -> None:
    out = decided(fp(0), fp(1))
    assert out.problems == [] and out.warnings == []
    assert out.result(Status.PASS, "ok").status is Status.PASS


@pytest.mark.parametrize(
    ("change", "code", "expected"),
    [
        (
            {"nccl_torch": "2.28.3"},
            "G10.nodes-differ",
            "nodes differ in NCCL (torch's) major.minor: 2.27 on rank 0 (spark-a), 2.28 on rank 1 (spark-b)",
        ),
        (
            {"driver": "590.10.01"},
            "G10.nodes-differ",
            "nodes differ in driver major: 580 on rank 0 (spark-a), 590 on rank 1 (spark-b)",
        ),
        (
            {"torch": "2.12.0+cu130"},
            "G10.nodes-differ",
            "nodes differ in torch: 2.11.0+cu130 on rank 0 (spark-a), 2.12.0+cu130 on rank 1",
        ),
        (
            {"gpu": "NVIDIA H200"},
            "G10.nodes-differ",
            "nodes differ in GPU model: NVIDIA GB10 on rank 0 (spark-a), NVIDIA H200 on rank 1",
        ),
        ({"statuses": {"G3": "FAIL"}}, "G10.node-fails", "a node fails its own preflight: rank 1 (spark-b): G3 FAIL"),
    ],
)
def test_what_breaks_collectives_fails(change: dict, code: str, expected: str) -> None:
    """A FAIL with its code; its text names what differs and each rank's value."""
    out = decided(fp(0), fp(1, **change))
    assert out.codes_of(out.problems) == [code]
    assert any(t.startswith(expected) for t, _ in out.problems), out.problems


@pytest.mark.parametrize(
    ("change", "code", "names"),
    [
        ({"env": {"NCCL_SOCKET_IFNAME": "enp1s0f1np1", "NCCL_IB_HCA": "rocep1s0f1"}}, "G10.nodes-differ-env",
         "NCCL_IB_HCA"),
        ({"container": {"NVIDIA_PYTORCH_VERSION": "25.10"}}, "G10.nodes-differ-container", "NVIDIA_PYTORCH_VERSION"),
        ({"mtu": 1500}, "G10.nodes-differ-mtu", "9000 on rank 0 (spark-a), 1500 on rank 1"),
        (
            {"packages": {"triton": "3.5.1", "transformers": "4.57.1", "nvidia-nccl-cu13": "2.27.7"}},
            "G10.nodes-differ-packages",
            "triton",
        ),
        ({"mem_available_kib": 40_000_000}, "G10.node-memory-low", "rank 1 (spark-b) 38.1 GiB"),
    ],
)
def test_what_often_breaks_warns(change: dict, code: str, names: str) -> None:
    """A WARN with its code; its text names what differs (the key, or each rank's value)."""
    out = decided(fp(0), fp(1, **change))
    assert out.problems == []
    assert out.codes_of(out.warnings) == [code]
    assert names in out.warnings[0][0], out.warnings


RECORDED = Path(__file__).parent / "data" / "g10" / "fleet_two_ranks_differ.json"


def recorded_pair() -> list[dict]:
    """Two fingerprints two real ranks exchanged, differing in NCCL_IB_HCA and triton."""
    return json.loads(RECORDED.read_text())["fingerprints"]


def test_the_recorded_differing_pair_names_both_differences_in_the_kit_findings() -> None:
    """``nodes.compare`` writes into the one accumulator every check uses
    (``kit.Findings``): G10's ``--spark-intrusive`` gate handed it one, and the
    first difference crashed the check (AttributeError: no ``flag``)."""
    out = decided(*recorded_pair())
    texts = [t for t, _ in out.warnings]
    assert out.problems == []
    assert out.codes_of(out.warnings) == ["G10.nodes-differ-env", "G10.nodes-differ-packages"]
    assert texts[0] == "NCCL_IB_HCA differs: rocep1s0f1,roceP2p1s0f1 on rank 0 (vm), mlx5_9 on rank 1 (vm)", texts
    assert "triton differs: unset on rank 0 (vm), 9.9.9 on rank 1 (vm)" in texts, texts
    r = out.result(Status.PASS, "ok")
    assert r.status is Status.WARN
    assert r.headline == "NCCL_IB_HCA differs: rocep1s0f1,roceP2p1s0f1 on rank 0, mlx5_9 on rank 1 (+1 more)"
    assert r.short_fix == "the same on every node"


@pytest.mark.parametrize(
    ("change", "blocks"),
    [({}, False), ({"driver": "590.44.01"}, True), ({"statuses": {"G3": "FAIL"}}, True)],
    ids=["warnings-only", "driver-major", "a-node-fails"],
)
def test_the_intrusive_gate_decides_on_differing_fingerprints_without_crashing(change: dict, blocks: bool) -> None:
    """The all-reduce probe waits for fingerprints that agree on what breaks
    collectives: a WARN-only difference lets it run, a FAIL one stops it."""
    from pytest_dgx_spark.checks.g10_multinode.probing import fleet_blocks

    fps = recorded_pair()
    fps[1].update(change)
    assert fleet_blocks(Exchange.from_dict({"fingerprints": fps, "rank": 0})) is blocks


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
    only: str = "G3,G10",
    gpus: bool = True,
    link: bool = False,
    job: dict[str, str] | None = None,
    intrusive: bool = False,
    **extra: str,
) -> subprocess.Popen[str]:
    """``spark-preflight --only G3,G10`` (``only=""``: all ten checks) as rank
    ``rank`` of a two-rank job, on a GB10 NVML double whose driver is
    ``driver`` (``gpus=False``: the driver answers, with no GPU, so a CPU-only
    torch is no G1 FAIL); ``link``: a Spark's /sys RoCE tree beside it;
    ``job``: the launcher's variables instead of torchrun's (an srun task's);
    ``intrusive``: with ``--intrusive`` (the all-reduce probe after the comparison)."""
    from conftest import Doubles
    from doubles import gb10

    folder = tmp / f"rank{rank}"
    folder.mkdir(exist_ok=True)
    scenario = gb10.nvml(driver_version=driver, **({} if gpus else {"devices": []}))
    env = {k: v for k, v in without_job_vars(Doubles(folder).nvml(scenario).env).items() if k not in JOB_VARS}
    env.update({**job, **extra} if job is not None else launcher(rank, 2, port, **extra))
    # both ranks share this machine: on a GPU box, NCCL would put them on one GPU
    # ("invalid usage"); these tests are about the comparison and the gloo probe
    env.setdefault("CUDA_VISIBLE_DEVICES", "")
    env.pop("VIRTUAL_ENV", None)
    root = spark_root(folder)
    if link:
        from test_g10_multinode import sys_tree

        sys_tree(Path(root), extra_net={"wlP9s9": 1500})
    env["SPARK_PREFLIGHT_HOST_ROOT"] = root
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join([pythonpath, env.get("PYTHONPATH", "")])
    report = tmp / "env-report.json"
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest_dgx_spark.cli",
            *(["--only", only] if only else []),
            "--timeout",
            timeout,
            "--report",
            str(report),
            "-v",
            *(["--intrusive"] if intrusive else []),
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
    """All ten checks on both ranks: rank 0's report holds each node's ten
    statuses and its own G1-G9 lines; the NCCL interface is a Spark's RoCE
    pair (NCCL_IB_HCA as in nccl_two_spark_1.txt), not the wifi it bootstraps on."""
    port = free_port()
    nccl = {"NCCL_IB_HCA": "=rocep1s0f0,roceP2p1s0f0,rocep1s0f1,roceP2p1s0f1", "NCCL_SOCKET_IFNAME": "wlP9s9"}
    a, b = (rank_cli(tmp_path, r, port, only="", gpus=False, link=True, **nccl) for r in (0, 1))
    la, lb = g10_of(a), g10_of(b)
    assert la.startswith("G10 PASS: rank 0 of 2: ") and lb.startswith("G10 PASS: rank 1 of 2"), (la, lb)
    assert "; 2 ranks compared: same GPU, driver, CUDA, torch, NCCL and settings" in la
    merged = json.loads((tmp_path / "env-report.json").read_text())
    assert sorted(merged["nodes"]) == ["0", "1"]
    checks = [c.id for c in catalog.CHECKS]
    for node in merged["nodes"].values():
        assert sorted(node["statuses"], key=checks.index) == checks
        assert node["statuses"]["G3"] in ("INFO", "PASS")
        for cid in (c for c in checks if c != "G10"):  # each node's own G-line, as that node printed it
            line = node["results"][cid]["line"]
            assert line.startswith(f"{cid} {node['statuses'][cid]}: "), node["results"]
        assert node["results"]["G10"]["status"] == node["statuses"]["G10"]
        assert node["mtu"] == 9000 and node["nccl_ifname"] == "enP2p1s0f1np1,enp1s0f1np1"
        assert node["container"]["image"] == "none found"  # G9's container reading (no marker here)
    assert merged["nodes"]["1"]["results"]["G3"]["line"].startswith("G3 INFO: MemAvailable")
    assert merged["nodes"]["0"]["driver"] == "580.173.02"
    assert merged["cross_node"]["status"] == "PASS"
    rank1 = json.loads((tmp_path / "env-report.rank1.json").read_text())
    assert "nodes" not in rank1  # the others write their own report, as before


NCCL_DIFFERS = ({"extra": {"NCCL_IB_HCA": "rocep1s0f1"}}, "G10 WARN: rank 0 of 2: NCCL_IB_HCA differs: unset on rank 0")
DRIVER_DIFFERS = ({"driver": "590.44.01"}, "G10 FAIL: rank 0 of 2: nodes differ in driver major: 580 on rank 0")
TRITON_DIFFERS = ({"overlay": "triton"}, "G10 WARN: rank 0 of 2: triton differs: ")


@needs_torch
@pytest.mark.parametrize(
    ("change", "expected", "intrusive"),
    [
        # each difference once end to end, and the gate both ways: a FAIL difference stops the
        # probe, a WARN one lets it measure (each pair of processes imports torch: ~4-8 CPU s)
        pytest.param(*NCCL_DIFFERS, False, id="plain-nccl-warn"),
        pytest.param(*DRIVER_DIFFERS, False, id="plain-driver-fail"),
        pytest.param(*DRIVER_DIFFERS, True, id="intrusive-driver-fail"),
        pytest.param(*TRITON_DIFFERS, True, id="intrusive-triton-warn"),
    ],
)
def test_one_rank_that_differs_is_named(tmp_path: Path, change: dict, expected: str, intrusive: bool) -> None:
    """Also under ``--intrusive``, where the comparison first decides whether
    the all-reduce probe may run (it crashed there on any difference)."""
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
    a, b = rank_cli(tmp_path, 0, port, intrusive=intrusive), rank_cli(tmp_path, 1, port, intrusive=intrusive, **kwargs)
    la, lb = g10_of(a), g10_of(b)
    assert la.startswith(expected), la
    assert "crashed" not in la + lb, (la, lb)
    if intrusive:  # a FAIL difference stops the probe; a WARN one lets it measure
        probe = "all-reduce not measured: the nodes did not agree" if "FAIL" in expected else "all-reduce busbw "
        assert probe in la, la
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
def test_rank_1_whose_rank_0_never_arrives_fails_through_the_cli(tmp_path: Path) -> None:
    port = free_port()
    started = time.monotonic()
    proc = rank_cli(tmp_path, 1, port, timeout="1")
    line = g10_of(proc)
    assert time.monotonic() - started < 60
    assert line.startswith("G10 FAIL: rank 1 of 2"), line
    assert "rank 0 never joined the node comparison" in line
    assert f"127.0.0.1:{port}" in line and "install torch" not in line
    assert "fix: start rank 0" in line
    assert proc.returncode == 1
    assert fleet_children(port) == []


@needs_torch
def test_rank_1_whose_rank_0_never_arrives_fails_under_pytest(tmp_path: Path) -> None:
    from conftest import Doubles
    from doubles import gb10

    port = free_port()
    env = without_job_vars(Doubles(tmp_path).nvml(gb10.nvml()).env)
    env.update(launcher(1, 2, port))
    env["SPARK_PREFLIGHT_HOST_ROOT"] = spark_root(tmp_path)
    proc = subprocess.run(
        [*PYTEST_CHILD, "--spark-preflight", "--spark-only=G3,G10", "--spark-timeout=1", "-q", "-rA"],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"rank 0 never joined the node comparison (no rendezvous store answered at 127.0.0.1:{port}" in (
        proc.stdout
    ), proc.stdout
    assert fleet_children(port) == []


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
        env = without_job_vars(Doubles(folder).nvml(gb10.nvml()).env)
        env.update(launcher(rank, 2, port))
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


# --------------------------------------------------------------------------- the short line names every node's value


def g10_on_rank_0(*fps: dict) -> Result:
    """G10 of rank 0 of a two-node job whose exchange brought back ``fps``."""
    from pytest_dgx_spark.checks.g10_multinode import check as g10
    from pytest_dgx_spark.checks.kit import Params

    env = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "spark-a", "MASTER_PORT": "29500"}
    exchanged = {"rank": 0, "world_size": 2, "fingerprints": list(fps)}
    facts = g10.Facts.from_dict({"env": env, "root": "/srv/proj", "fleet": exchanged})
    return g10.evaluate(facts, Params(profile="gb10"))


@pytest.mark.parametrize(
    ("change", "short"),
    [
        (
            {"env": {"NCCL_SOCKET_IFNAME": "enp1s0f1np1", "NCCL_IB_HCA": "rocep1s0f1"}},
            "G10 WARN: NCCL_IB_HCA differs: rocep1s0f1,roceP2p1s0f1 on rank 0, rocep1s0f1 on rank 1; "
            "fix: the same on every node",
        ),
        (
            {"driver": "590.44.01"},
            "G10 FAIL: driver major differs: 580 on rank 0, 590 on rank 1; fix: same image and driver on every node",
        ),
        (
            {"packages": {"triton": "3.5.1", "transformers": "4.57.1", "nvidia-nccl-cu13": "2.27.7"}},
            "G10 WARN: triton differs: 3.5.0 on rank 0, 3.5.1 on rank 1; fix: same package versions on every node",
        ),
        (
            {"statuses": {"G1": "PASS", "G3": "FAIL"}},
            "G10 FAIL: a node fails its own preflight: rank 1 G3; fix: fix that node first",
        ),
        (
            {"mem_available_kib": 40_000_000},
            "G10 WARN: MemAvailable low: rank 1 38.1 GiB, best node 109.7 GiB; fix: free memory there (its G3, G6)",
        ),
    ],
)
def test_the_short_line_names_each_nodes_value(change: dict, short: str) -> None:
    """The default terminal line says the key and every rank's value (the
    hostnames, which take the room, are in the whole line)."""
    r = g10_on_rank_0(fp(0), fp(1, **change))
    assert r.code.startswith(("G10.nodes-differ", "G10.node-"))
    assert r.short_line() == short
    assert "rank 1 (spark-b)" in r.line()


def test_a_matching_pair_says_so_on_the_short_line() -> None:
    """A comparison that ran is not a silent one: the PASS line says the ranks were alike."""
    r = g10_on_rank_0(fp(0), fp(1))
    assert r.short_line() == "G10 PASS: 2 nodes, TP 1: data parallel across nodes; 2 ranks alike"
    assert r.reading("nodes_compared").value == 2


def test_a_differing_container_image_warns() -> None:
    """G9's container reading rides in the fingerprint: one node in the NGC
    image, the other outside any container, differ even without NGC variables."""
    out = decided(
        fp(0, container={"image": "NGC PyTorch image in a Docker container"}),
        fp(1, container={"image": "none found"}),
    )
    assert out.codes_of() == ["G10.nodes-differ-container"]
    assert [t for t, _ in out.warnings] == [
        "container image differs: NGC PyTorch image in a Docker container on rank 0 (spark-a), "
        "none found on rank 1 (spark-b)"
    ]


# --------------------------------------------------------------------------- srun


def srun_task(rank: int, port: int | None = None, tasks: int = 2) -> dict[str, str]:
    """What ``srun --nodes 2 --ntasks-per-node 1`` sets for task ``rank`` (and,
    with ``port``, the MASTER_ADDR/MASTER_PORT the job script exported)."""
    env = {
        "SLURM_JOB_ID": "4242",
        "SLURM_STEP_ID": "0",
        "SLURM_PROCID": str(rank),
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": str(rank),
        "SLURM_NTASKS": str(tasks),
        "SLURM_STEP_NUM_TASKS": str(tasks),
        "SLURM_NNODES": "2",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_JOB_NODELIST": "spark-[1-2]",
    }
    if port is not None:
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    return env


def test_an_srun_task_is_a_rank_and_a_batch_script_is_not() -> None:
    from pytest_dgx_spark import launch
    from pytest_dgx_spark.report import per_rank_path

    assert launch.job_rank(srun_task(1)) == (1, 2)
    assert launch.torchrun_env(srun_task(1))["RANK"] == "1"
    assert launch.torchrun_env(srun_task(1))["WORLD_SIZE"] == "2"
    assert per_rank_path(Path("r/env-report.json"), srun_task(1)) == Path("r/env-report.rank1.json")
    # the batch script itself: SLURM_PROCID=0 and the job's SLURM_NTASKS, but no step
    batch = {k: v for k, v in srun_task(0).items() if not k.startswith("SLURM_STEP")}
    assert launch.job_rank(batch) == (None, None)
    # srun ... torchrun ...: torchrun's workers have their own names
    assert launch.job_rank({**srun_task(0), "RANK": "3", "WORLD_SIZE": "4"}) == (3, 4)


@needs_torch
def test_two_srun_tasks_compare_their_nodes(tmp_path: Path) -> None:
    """srun gives each task SLURM_PROCID and the step's task count, the job
    script MASTER_ADDR/MASTER_PORT: the CLI compares the nodes as under torchrun."""
    port = free_port()
    a = rank_cli(tmp_path, 0, port, job=srun_task(0, port))
    b = rank_cli(tmp_path, 1, port, job={**srun_task(1, port), "NCCL_IB_HCA": "rocep1s0f1"})
    la, lb = g10_of(a), g10_of(b)
    assert la.startswith("G10 WARN: rank 0 of 2: NCCL_IB_HCA differs: unset on rank 0"), la
    assert "rocep1s0f1 on rank 1" in la
    assert lb.startswith("G10 WARN: rank 1 of 2, this rank only"), lb
    merged = json.loads((tmp_path / "env-report.json").read_text())
    assert sorted(merged["nodes"]) == ["0", "1"]
    assert merged["nodes"]["1"]["node_rank"] == "1"  # SLURM_NODEID
    assert "nodes" not in json.loads((tmp_path / "env-report.rank1.json").read_text())
    assert fleet_children(port) == []


def test_an_srun_task_without_a_rendezvous_point_is_told_how_to_give_one(tmp_path: Path) -> None:
    """Plain ``srun spark-preflight``: no MASTER_ADDR/MASTER_PORT. No wait, no
    silent PASS: a WARN that says what to export (and rank 1 writes its own file)."""
    started = time.monotonic()
    proc = rank_cli(tmp_path, 1, 0, job=srun_task(1))
    line = g10_of(proc)
    assert time.monotonic() - started < 60
    assert line.startswith(
        "G10 WARN: rank 1 of 2, this rank only: nodes not compared: "
        "srun task 1 of 2 has no rendezvous point (MASTER_ADDR and MASTER_PORT unset)"
    ), line
    assert 'export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)' in line
    assert (tmp_path / "env-report.rank1.json").is_file() and not (tmp_path / "env-report.json").exists()


# --------------------------------------------------------------------------- torchrun, two "nodes" on one machine


def torchrun_node(tmp: Path, node: int, port: int, *pytest_args: str, **extra: str) -> subprocess.Popen[str]:
    """``torchrun --nnodes 2 --nproc-per-node 1 --node-rank <node> -m pytest
    --spark-preflight …`` on 127.0.0.1, as the README's launch line: torchrun's
    agent on node 0 hosts the store (TORCHELASTIC_USE_AGENT_STORE)."""
    from conftest import Doubles
    from doubles import gb10

    folder = tmp / f"node{node}"
    folder.mkdir()
    env = {k: v for k, v in without_job_vars(Doubles(folder).nvml(gb10.nvml()).env).items() if k not in JOB_VARS}
    env.update(SPARK_PREFLIGHT_HOST_ROOT=spark_root(folder), OMP_NUM_THREADS="1", **extra)
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
        "--node-rank", str(node), "--master-addr", "127.0.0.1", "--master-port", str(port),
        "--rdzv-conf", "timeout=60", "-m", "pytest", "-p", "dgx_spark", "-p", "no:randomly", "-p", "no:cacheprovider",
        "--spark-preflight", *pytest_args,
    ]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=folder)


@needs_torch
def test_two_torchrun_nodes_under_pytest(tmp_path: Path) -> None:
    """The README's torchrun line, one node given another NCCL_IB_HCA: rank 0's
    line names both values, its env-report and JUnit speak for both nodes,
    node 1 writes rank-suffixed files, and no fleet child is left behind."""
    port = free_port()
    report, junit = tmp_path / "env-report.json", tmp_path / "junit.xml"
    args = ("--spark-only=G3,G10", "--spark-timeout=5", f"--spark-report={report}", f"--junitxml={junit}", "-rA")
    procs = [
        torchrun_node(tmp_path, 0, port, *args),
        torchrun_node(tmp_path, 1, port, *args, NCCL_IB_HCA="rocep1s0f1"),
    ]
    outs = [p.communicate(timeout=240)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert "G10 WARN: NCCL_IB_HCA differs: unset on rank 0, rocep1s0f1 on rank 1; fix: the same on every" in outs[0]
    merged = json.loads(report.read_text())
    assert sorted(merged["nodes"]) == ["0", "1"]
    assert merged["nodes"]["1"]["env"]["NCCL_IB_HCA"] == "rocep1s0f1"
    assert merged["cross_node"]["status"] == "WARN"
    assert "nodes" not in json.loads((tmp_path / "env-report.rank1.json").read_text())
    xml = junit.read_text()
    assert 'name="spark.node1.G3" value="INFO"' in xml and 'name="spark.node0.G10" value="PASS"' in xml
    assert "spark.node" not in (tmp_path / "junit.rank1.xml").read_text()
    assert fleet_children(port) == []
