"""A resource limit is not a wedged driver (issue 19, item 6).

Under ``ulimit -u`` no process or thread can start; that says nothing about
the GPU. G4 calls a driver wedged only when its NVML child ran and hung with
an NVIDIA device node there; a limit is a SKIP saying "resource limit", the
same verdict every time; a pynvml that exits at import is a broken install.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from pytest_dgx_spark.engine import Engine
from pytest_dgx_spark.model import Status
from pytest_dgx_spark.probes.machine import Machine
from pytest_dgx_spark.settings import Settings

#: run as the unprivileged user (RLIMIT_NPROC does not bind root): the limit
#: is set after the interpreter started, then G1-G4 run through the engine
UNDER_LIMIT = textwrap.dedent(
    """
    import json, resource, sys
    from pytest_dgx_spark.engine import Engine
    from pytest_dgx_spark.probes.machine import Machine
    from pytest_dgx_spark.settings import Settings
    root, limit, python = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    machine = Machine(root=root, env={"PATH": "/nonexistent"}, timeout=5, python=python)
    resource.setrlimit(resource.RLIMIT_NPROC, (limit, limit))
    engine = Engine(Settings(thermal_seconds=0, timeout=5), machine, background=False)
    print(json.dumps({c: [engine.run(c).status.value, engine.run(c).line()] for c in ("G1", "G2", "G3", "G4")}))
    """
)


#: which interpreter the unprivileged user can start from a process of its own
#: (one under root's 0700 home runs through setpriv, but a fork of it cannot exec it)
FIND_PYTHON = textwrap.dedent(
    """
    import subprocess, sys
    for cand in sys.argv[1:]:
        try:
            if subprocess.run([cand, "-c", "0"], capture_output=True, timeout=30).returncode == 0:
                print(cand)
                break
        except OSError:
            continue
    """
)


def _env_for_this_package() -> dict[str, str]:
    """The environment, with the pytest_dgx_spark this test imported first on the
    path (a script outside the checkout would otherwise find whichever is installed)."""
    import pytest_dgx_spark

    parent = str(Path(pytest_dgx_spark.__file__).resolve().parent.parent)
    return dict(os.environ, PYTHONPATH=os.pathsep.join([parent, os.environ.get("PYTHONPATH", "")]))


def _user_python(nonroot_run: Any, base: Path) -> str | None:
    finder = base / "find_python.py"
    finder.write_text(FIND_PYTHON)
    finder.chmod(0o644)
    found = nonroot_run([str(finder), sys.executable, os.path.realpath(sys.executable), "/usr/bin/python3"])
    return found.stdout.strip() or None


def _root(base: Path, node: bool) -> Path:
    root = base / ("with-node" if node else "no-node")
    (root / "dev").mkdir(parents=True)
    if node:
        (root / "dev" / "nvidiactl").write_bytes(b"")
    root.chmod(0o755)
    (root / "dev").chmod(0o755)
    return root


# limit 1: not even a fork succeeds; limit 2: the probe starts, the thread reading it cannot
@pytest.mark.parametrize("limit", [1, 2])
@pytest.mark.parametrize("node", [False, True], ids=["no-device-node", "device-node"])
def test_under_ulimit_u_g4_skips_for_the_resource_limit_and_nothing_crashes(
    nonroot_run: Any, node: bool, limit: int
) -> None:
    base = Path(nonroot_run.base)
    script = base / "under_limit.py"
    script.write_text(UNDER_LIMIT)
    script.chmod(0o644)
    root = _root(base, node)
    python = sys.executable
    if limit > 1:  # the probe must start for its reading thread to be refused
        python = _user_python(nonroot_run, base) or ""
        if not python:
            pytest.skip("no Python interpreter the unprivileged user can start from its own process")
    verdicts = []
    for _ in range(2):  # the same run twice: the same verdict
        done = nonroot_run([str(script), str(root), str(limit), python], env=_env_for_this_package())
        assert done.returncode == 0, done.stderr[-2000:]
        verdicts.append(json.loads(done.stdout.strip().splitlines()[-1]))
    # the same verdict each time (which limit hit first, a fork's EAGAIN or the
    # thread, depends on how many processes the user runs meanwhile: the reason may differ)
    kinds = [{c: (v[0], "resource limit" in v[1]) for c, v in run.items()} for run in verdicts]
    assert kinds[0] == kinds[1], verdicts
    lines = verdicts[0]
    status, g4 = lines["G4"]
    assert status == "SKIP", g4
    assert "resource limit" in g4 and "not answering" not in g4 and "reboot" not in g4, g4
    for check in ("G1", "G2", "G3"):
        assert "crashed" not in lines[check][1], lines[check][1]
    assert lines["G1"][0] == "SKIP" and "resource limit" in lines["G1"][1]  # torch never started


def test_a_thread_that_cannot_start_is_a_resource_limit_skip(
    doubles: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failure injected where it happens: starting the thread that reads a
    probe child (what ``ulimit -u`` does to a run with threads to spare for forks)."""
    from doubles import gb10

    real_start = threading.Thread.start

    def start(self: threading.Thread) -> None:
        if self.name.startswith("Thread-") and "_stdout" in repr(getattr(self, "_target", "")):
            raise RuntimeError("can't start new thread")
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    env = doubles.nvml(gb10.nvml()).env
    machine = Machine(root=_root(tmp_path, True), env=env, timeout=5)
    result = Engine(Settings(thermal_seconds=0, timeout=5), machine, background=False).run("G4")
    assert result.status is Status.SKIP, result.line()
    assert "resource limit: can't start a new thread" in result.summary


def test_a_pynvml_that_exits_at_import_is_not_a_wedged_driver(tmp_path: Path) -> None:
    fake = tmp_path / "site"
    fake.mkdir()
    (fake / "pynvml.py").write_text("import sys\nsys.exit(3)\n")
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    for node in (True, False):
        machine = Machine(root=_root(tmp_path / str(node), node), env={"PYTHONPATH": str(fake), "PATH": str(empty)})
        result = Engine(Settings(thermal_seconds=0, timeout=5), machine, background=False).run("G4")
        assert result.status is Status.SKIP, result.line()
        assert "not answering" not in result.summary and "reboot" not in result.fix
        assert "pynvml" in result.summary and "exited 3" in result.summary


def test_an_nvml_child_that_hangs_is_a_wedged_driver_only_with_a_device_node(
    doubles: Any, tmp_path: Path
) -> None:
    from doubles import gb10

    env = doubles.nvml(gb10.nvml(hang={"where": "nvmlInit", "seconds": 60})).env
    verdicts = {}
    for node in (True, False):
        machine = Machine(root=_root(tmp_path / str(node), node), env=env, timeout=1.0)
        verdicts[node] = Engine(Settings(thermal_seconds=0, timeout=1.0), machine, background=False).run("G4")
    assert verdicts[True].status is Status.FAIL and verdicts[True].summary.startswith("driver not answering")
    assert verdicts[False].status is Status.SKIP, verdicts[False].line()
    assert "no NVIDIA device node" in verdicts[False].summary
