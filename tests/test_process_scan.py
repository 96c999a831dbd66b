"""A full process table cannot hide the server on the GPU (issue 19, item 4).

Planted under a machine root: 600 processes with 16 KB command lines at low
pids, started "first", and an uncapped vLLM with TP 2 at a high pid that NVML
lists on the GPU. The scan used to read command lines in pid order against
one budget, so the vLLM was listed without its flags: G6 FAIL became WARN,
G10 WARN became PASS. Now the GPU's pids are read first, each process gets a
share of the budget, and a scan that read lines only in part is never a PASS.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from pytest_dgx_spark.engine import Engine
from pytest_dgx_spark.model import Status
from pytest_dgx_spark.probes.machine import Machine
from pytest_dgx_spark.settings import Settings

from doubles import gb10

GIB = 1 << 30
VLLM_PID = 30000
VLLM = ["/usr/bin/python3", "/opt/venv/bin/vllm", "serve", "org/model", "--tensor-parallel-size", "2"]


def _proc(root: Path, pid: int, argv: list[str], name: str = "python3") -> None:
    folder = root / "proc" / str(pid)
    folder.mkdir(parents=True, exist_ok=True)
    rest = " ".join(["0"] * 19)
    (folder / "stat").write_text(f"{pid} ({name}) S 1 {rest} 12800 0\n")
    (folder / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")


def _crowded_root(base: Path, crowd: int) -> Path:
    """``crowd`` processes at pids 1000.. with 16 KB command lines (``sleep``
    with one long argument, as anyone can start), /proc/meminfo of a GB10."""
    root = base / "root"
    (root / "proc").mkdir(parents=True)
    (root / "proc" / "meminfo").write_text(gb10.meminfo())
    filler = "x" * 16400
    for pid in range(1000, 1000 + crowd):
        _proc(root, pid, ["sleep", "3600", filler], name="sleep")
    return root


def _run(root: Path, env: dict[str, str], *checks: str) -> dict[str, Any]:
    machine = Machine(root=root, env=env, timeout=20)
    engine = Engine(Settings(rootdir=root, timeout=20), machine, background=False)
    return {c: engine.run(c) for c in checks} | {"table": machine.processes()}


def test_600_long_command_lines_started_first_do_not_hide_an_uncapped_vllm(
    doubles: Any, tmp_path: Path
) -> None:
    root = _crowded_root(tmp_path, 600)
    _proc(root, VLLM_PID, VLLM)
    env = doubles.nvml(gb10.nvml(device={"compute_procs": [{"pid": VLLM_PID, "used_bytes": 40 * GIB}]})).env
    env.pop("WORLD_SIZE", None)
    out = _run(root, env, "G6", "G10")
    vllm = next(p for p in out["table"]["processes"] if p["pid"] == VLLM_PID)
    assert vllm["cmdline"] == VLLM, "the GPU's own pid is read whole, whatever came before it"
    assert out["G6"].status is Status.FAIL, out["G6"].line()
    assert f"pid {VLLM_PID} vLLM" in out["G6"].summary
    assert out["G10"].status is not Status.PASS, out["G10"].line()
    assert "TP 2" in out["G10"].summary or "tensor" in out["G10"].summary.lower(), out["G10"].line()
    # 600 x 16 KB fit the budget: every line was read, nothing says "incomplete"
    assert out["table"]["error"] is None
    assert all(len("\0".join(p["cmdline"])) > 16000 for p in out["table"]["processes"] if p["pid"] < 2000)


def test_a_scan_that_read_command_lines_only_in_part_is_never_a_pass(doubles: Any, tmp_path: Path) -> None:
    """1,600 lines of 16 KB are more than the budget: the scan says it read
    some only in part, and G6 and G10 (which would PASS on what was read) WARN."""
    root = _crowded_root(tmp_path, 1600)
    env = doubles.nvml(gb10.nvml()).env
    out = _run(root, env, "G6", "G10")
    error = out["table"]["error"] or ""
    assert error.startswith("the process scan read ") and "only in part" in error, error
    assert len(out["table"]["processes"]) == 1600  # every process is listed, if only with part of its line
    for check in ("G6", "G10"):
        result = out[check]
        assert result.status is Status.WARN, result.line()
        assert "process table incomplete" in result.summary, result.line()
    # each got its share of the budget, none was starved by those before it
    shares = [len(p["cmdline"][2]) for p in out["table"]["processes"] if len(p["cmdline"]) == 3]
    assert len(shares) == 1600 and min(shares) > 14000, (len(shares), min(shares or [0]))


def test_the_scan_says_whose_each_process_is(tmp_path: Path) -> None:
    """Each process carries its owner's uid and its session; ``mine`` is this
    user's or this session's (issue 24). A planted pid owned by another uid
    (root can chown it) is not mine; one owned by us is."""
    from pytest_dgx_spark.probes.processes import list_processes

    table = list_processes()
    me = next(p for p in table["processes"] if p["pid"] == os.getpid())
    assert (me["uid"], me["sid"], me["mine"], me["self"]) == (os.getuid(), os.getsid(0), True, True)
    root = tmp_path / "root"
    _proc(root, 500, ["python3", "train.py", "--nnodes", "2"])
    _proc(root, 501, ["python3", "evil.py", "--nnodes", "2"])
    if os.geteuid() == 0:
        os.chown(root / "proc" / "501" / "stat", 4242, 4242)
    planted = {p["pid"]: p for p in list_processes(root)["processes"]}
    assert (planted[500]["uid"], planted[500]["sid"], planted[500]["mine"]) == (os.getuid(), 0, True)
    if os.geteuid() == 0:
        assert (planted[501]["uid"], planted[501]["mine"]) == (4242, False)


def test_session_zero_is_no_match(monkeypatch: pytest.MonkeyPatch) -> None:
    """In a container started by root, getsid reports 0 for every process whose
    session leader lives outside the pid namespace: another user's job there
    shares 'session 0' with us and must not become ours (CI ran as root)."""
    from pytest_dgx_spark.probes.processes import mark

    monkeypatch.setattr(os, "getsid", lambda _pid: 0)
    other = {"pid": 999_991, "ppid": 1, "uid": os.getuid() + 4242, "sid": 0}
    assert mark([other])[0]["mine"] is False
    monkeypatch.setattr(os, "getsid", lambda _pid: 77)
    assert mark([{"pid": 999_993, "ppid": 1, "uid": os.getuid() + 4242, "sid": 77}])[0]["mine"] is True
