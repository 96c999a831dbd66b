"""The torch child started while pytest loads (pytest_dgx_spark/early.py).

Real pytest processes on the GB10 double with a device node under its
machine root: a project conftest that takes 2.5 s to import stands for
pytest's own start (plugins, collection). The torch double logs each import
with its pid and time, so a test sees when torch was imported and how often.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_dgx_spark import early

from conftest import PYTEST_CHILD
from doubles.procs import group_gone

PYTEST = [*PYTEST_CHILD, "-q"]


@pytest.mark.parametrize(
    ("argv", "env", "why"),
    [
        (["-q"], {}, "the command line does not ask for the preflight"),
        (["--spark-preflight", "-n", "2"], {}, "-n given"),
        (["--spark-preflight", "-nauto"], {}, "-nauto given"),
        (["--spark-preflight", "--numprocesses=2"], {}, "--numprocesses given"),
        (["--spark-preflight", "-k", "G5"], {}, "-k given"),
        (["--spark-preflight", "--spark-replay", "x.json"], {}, "--spark-replay given"),
        (["--spark-preflight", "--spark-replay=x.json"], {}, "--spark-replay given"),
        (["--spark-preflight", "--co"], {}, "--co given"),
        # the torch child runs in the interpreter --spark-python names, started with its options
        (["--spark-preflight", "--spark-python=/job/venv/bin/python"], {}, "--spark-python given"),
        (["--spark-preflight", "--setup-plan"], {}, "--setup-plan given"),
        (["--spark-preflight", "--setup-only"], {}, "--setup-only given"),
        (["--spark-preflight", "--setuponly"], {}, "--setuponly given"),
        (["--spark-preflight", "--spark-only", "G3,G4"], {}, "--spark-only names no check that reads torch"),
        (["--spark-preflight", "--spark-only=g3"], {}, "--spark-only names no check that reads torch"),
        (["-q"], {"PYTEST_ADDOPTS": "--spark-preflight -n 4"}, "-n given"),
    ],
)
def test_what_keeps_the_torch_child_from_starting_early(
    tmp_path: Path, argv: list[str], env: dict[str, str], why: str
) -> None:
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "nvidiactl").write_text("")
    assert early.wanted(argv, {"SPARK_PREFLIGHT_HOST_ROOT": str(tmp_path), **env}) == why


def test_what_lets_it_start(tmp_path: Path) -> None:
    env = {"SPARK_PREFLIGHT_HOST_ROOT": str(tmp_path)}
    assert early.wanted(["--spark-preflight"], env) == "no NVIDIA device node"
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "nvidia0").write_text("")
    assert early.wanted(["--spark-preflight"], env) is None
    assert early.wanted(["--spark-preflight", "--spark-only", "G3,G5"], env) is None
    assert early.wanted(["-q"], {**env, "PYTEST_ADDOPTS": "--spark-preflight"}) is None
    assert early.wanted(["-q"], {**env, "PYTEST_ADDOPTS": "'unclosed"}) == (
        "the command line does not ask for the preflight"
    )


def imports(log: Path) -> list[tuple[int, float]]:
    """(pid, time) of every import of the torch double."""
    if not log.exists():
        return []
    return [(int(ln.split()[2]), float(ln.split()[3])) for ln in log.read_text().splitlines()]


def project(tmp_path: Path, conftest: str = "") -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "pytest.ini").write_text("[pytest]\n")
    (folder / "conftest.py").write_text(
        "import os, time\n"
        "open(os.path.join(os.path.dirname(__file__), 'conftest.t'), 'w').write(str(time.time()))\n"
        "time.sleep(2.5)  # pytest's own start: plugins and collection\n" + conftest
    )
    return folder


def run(
    spark_env: Any, folder: Path, *args: str, only: str | None = "G1"
) -> subprocess.CompletedProcess[str]:
    """``pytest --spark-preflight`` on the GB10 double, with a device node under
    its machine root (``only=None``: the checks the ini file selects)."""
    node = spark_env.root / "dev" / "nvidia0"
    node.parent.mkdir(exist_ok=True)
    node.write_text("")
    selection = ["--spark-only", only] if only else []
    return subprocess.run(
        [*PYTEST, "--spark-preflight", *selection, "--spark-timeout", "10", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=spark_env.doubles.env,
        cwd=folder,
    )


def test_pytest_imports_torch_while_it_is_still_starting(tmp_path: Path, spark_env: Any) -> None:
    folder = project(tmp_path)
    proc = run(spark_env, folder, "-rA")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    conftest_at = float((folder / "conftest.t").read_text())
    (pid, torch_at), *more = imports(spark_env.torch_log)
    assert more == [], "the child started early was the run's torch child"
    assert torch_at < conftest_at + 2.0, "torch was imported while the conftest still loaded"
    assert "G1 PASS: torch 2.11.0+cu130" in proc.stdout
    assert group_gone(pid, wait=2)


def test_a_conftest_that_changes_the_environment_gets_a_fresh_child(tmp_path: Path, spark_env: Any) -> None:
    """The child started early saw the environment before the conftest set
    CUDA_VISIBLE_DEVICES: the run does not use it, kills it, and starts its own."""
    folder = project(tmp_path, "os.environ['CUDA_VISIBLE_DEVICES'] = '0'\n")
    proc = run(spark_env, folder)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (first, _), (second, _) = imports(spark_env.torch_log)
    assert first != second
    assert group_gone(first, wait=2) and group_gone(second, wait=2)


def test_a_run_that_stops_on_a_bad_option_leaves_no_child(tmp_path: Path, spark_env: Any) -> None:
    folder = project(tmp_path)
    proc = run(spark_env, folder, "--spark-timeout=soon")
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout + proc.stderr
    assert "INTERNALERROR" not in proc.stdout + proc.stderr
    deadline = time.monotonic() + 10
    while not imports(spark_env.torch_log) and time.monotonic() < deadline:
        time.sleep(0.05)  # the child may still be importing when pytest is gone
    ((pid, _),) = imports(spark_env.torch_log)
    assert group_gone(pid, wait=5), "the child left once pytest was gone"


GONE_CHECK = """
import json, os


def test_the_early_child_is_gone_before_the_tests_run():
    log = json.load(open(os.environ["SPARK_FAKE_TORCH"]))["log"]
    pid = int(open(log).read().split()[2])
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        state = "gone"
    assert state in ("gone", "Z", "X"), state
"""


@pytest.mark.parametrize("ini", ["spark_preflight_only = G3", "addopts = -p xdist -n 1"])
def test_an_ini_that_needs_no_torch_here_kills_the_child_at_configure(
    tmp_path: Path, spark_env: Any, ini: str
) -> None:
    """The command line said ``--spark-preflight``; the ini says this process
    reads no torch (only G3; or xdist workers run the checks): the child
    started early is gone before any test runs, not only at the end."""
    folder = project(tmp_path)
    (folder / "pytest.ini").write_text(f"[pytest]\n{ini}\n")
    (folder / "test_user.py").write_text(GONE_CHECK)
    proc = run(spark_env, folder, "-rA", only=None)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PASSED test_user.py::test_the_early_child_is_gone_before_the_tests_run" in proc.stdout
    found = imports(spark_env.torch_log)
    # the early child imported torch; under xdist the worker's own G1 child did too
    assert len(found) == (1 if "only" in ini else 2), found  # (-p xdist: plugin autoload is off in tests)


def test_a_failing_early_start_never_stops_pytest(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_dgx_spark import plugin

    def boom(*args: object, **kwargs: object) -> bool:
        raise OSError("planted")

    monkeypatch.setattr(early, "start", boom)
    monkeypatch.setattr(sys, "argv", ["pytest", "--spark-preflight"])
    assert plugin.start_early() == "OSError: planted"
    monkeypatch.setattr(sys, "argv", ["pytest", "-q"])
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    assert plugin.start_early() is None  # a plain run does not even look
