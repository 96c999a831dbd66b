"""A probe's pipe held open by someone else never holds the run (issue 19, item 3).

Each case is a real process tree: the probe forks a grandchild that keeps the
probe's stdout and stderr open and sleeps, out of reach of the probe's group
kill (a session of its own, like a daemon ``import torch`` starts or a helper
that called ``setsid``; or a group of its own, stopped, like a child that
SIGKILL does not reach yet). Every call must return within its timeout plus a
small margin, and each test kills the grandchild it started, by pid.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import pytest_dgx_spark
from pytest_dgx_spark.probes.child import run_python
from pytest_dgx_spark.probes.commands import run_command

#: the probe: forks a grandchild that holds the pipes (``mode``), writes both
#: pids, prints a line, then sleeps ``argv[3]`` seconds (0: exits at once)
HOLDER = textwrap.dedent(
    """
    import json, os, signal, sys, time
    pidfile, mode, linger = sys.argv[1], sys.argv[2], float(sys.argv[3])
    with open(pidfile + ".probe", "w") as f:
        f.write(str(os.getpid()))
    if mode != "none":
        if os.fork() == 0:
            if mode == "setsid":
                os.setsid()
            else:  # "stopped": a group of its own, stopped: killpg of the probe misses it
                os.setpgid(0, 0)
            with open(pidfile + ".tmp", "w") as f:
                f.write(str(os.getpid()))
            os.rename(pidfile + ".tmp", pidfile)
            if mode == "stopped":
                # the kernel sends SIGHUP + SIGCONT to a stopped group orphaned
                # when the probe dies: it lives on, still holding the pipes
                signal.signal(signal.SIGHUP, signal.SIG_IGN)
                os.kill(os.getpid(), signal.SIGSTOP)
            time.sleep(30)
            os._exit(0)
        while not os.path.exists(pidfile):
            time.sleep(0.01)
    print(json.dumps({"begin": "hold", "scale": 1}), flush=True)
    if linger <= 0:
        print(json.dumps({"done": True}), flush=True)
        sys.exit(0)
    time.sleep(linger)
    """
)


def _alive(pid: int) -> bool:
    """Running (a zombie nobody reaped yet counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def _kill(pid_path: Path) -> None:
    """SIGKILL the process whose pid the holder wrote there, if it is still ours."""
    try:
        pid = int(pid_path.read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return
    if b"holder.py" in cmdline or b"import json, os, signal" in cmdline:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    pidfile = tmp_path / "grandchild.pid"
    yield script, pidfile
    for path in (pidfile, Path(str(pidfile) + ".probe")):
        _kill(path)


@pytest.mark.parametrize(
    ("mode", "linger"),
    [
        ("setsid", 0),  # the probe exits; a helper in another session keeps its pipes (a daemon)
        ("setsid", 60),  # the probe hangs too: killed at the timeout, its helper is out of reach
        ("stopped", 60),  # the holder is stopped in a group of its own: SIGKILL of the group misses it
    ],
)
def test_run_command_returns_within_its_timeout_whoever_holds_the_pipe(
    holder: tuple[Path, Path], mode: str, linger: float
) -> None:
    script, pidfile = holder
    start = time.monotonic()
    result = run_command([sys.executable, str(script), str(pidfile), mode, str(linger)], timeout=2)
    elapsed = time.monotonic() - start
    grandchild = int(pidfile.read_text())
    assert _alive(grandchild), "the grandchild still holds the pipe: the case is real"
    assert elapsed < 2 + 3, f"run_command took {elapsed:.1f} s with timeout 2"
    if linger:
        assert result.timed_out and result.describe().endswith("did not answer within 2 s (killed)")
    else:  # it exited 0 and said what it had to: its output is whole, the held pipe is noted
        assert result.ok and result.returncode == 0
        assert '"begin": "hold"' in result.stdout
        assert "holds it" in (result.extra.pipes_held or "")


@pytest.mark.parametrize(
    ("mode", "linger"),
    [("setsid", 0), ("setsid", 60), ("stopped", 60)],
)
def test_probe_child_returns_within_its_allowance_whoever_holds_the_pipe(
    holder: tuple[Path, Path], mode: str, linger: float
) -> None:
    script, pidfile = holder
    source = script.read_text()
    start = time.monotonic()
    result = run_python(source, args=[str(pidfile), mode, str(linger)], step_timeout=2, total_timeout=4)
    elapsed = time.monotonic() - start
    assert _alive(int(pidfile.read_text()))
    # allowance 2 s (+2 s for kill_group's reap, +1 s for the readers)
    assert elapsed < 2 + 3, f"the probe child took {elapsed:.1f} s with a 2 s allowance"
    if linger:
        assert result.timed_out and result.step == "hold"
    else:  # done and exited 0: a daemon keeping stdout open is not a hang
        assert result.ok, result.describe()


DRIVER = textwrap.dedent(
    """
    import os, signal, sys, threading
    from pytest_dgx_spark.probes.commands import run_command
    how, script, pidfile = sys.argv[1:4]
    argv = [sys.executable, script, pidfile, "none" if how == "thread" else "setsid", "60"]
    if how == "signal":  # pytest-timeout's signal method: an exception in the main thread
        def on_alarm(signum, frame):
            raise RuntimeError("Timeout (pytest-timeout, method signal)")
        signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, 1.5)
        try:
            run_command(argv, timeout=60)
        except RuntimeError as exc:
            print("interrupted:", exc, flush=True)
    else:  # its thread method: os._exit from a timer thread, no finally runs
        threading.Timer(1.5, lambda: os._exit(1)).start()
        run_command(argv, timeout=60)
    """
)


@pytest.mark.parametrize("how", ["signal", "thread"])
def test_a_probe_interrupted_by_pytest_timeout_does_not_outlive_it(holder: tuple[Path, Path], how: str) -> None:
    """``signal``: the exception lands before ``kill_group``; the probe (and its
    pipes) must still be dealt with at once. ``thread``: pytest ends with
    ``os._exit``; the probe dies with it (PR_SET_PDEATHSIG)."""
    script, pidfile = holder
    driver = script.with_name("driver.py")
    driver.write_text(DRIVER)
    # the driver imports the pytest_dgx_spark this test imported (not whatever sys.path finds first)
    package_parent = str(Path(pytest_dgx_spark.__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([package_parent, os.environ.get("PYTHONPATH", "")]))
    start = time.monotonic()
    try:
        out = subprocess.run(
            [sys.executable, str(driver), how, str(script), str(pidfile)],
            capture_output=True,
            text=True,
            timeout=15,
            env=env,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the interrupted run did not end within 15 s (a close waiting for a held pipe)")
    elapsed = time.monotonic() - start
    probe = int(Path(str(pidfile) + ".probe").read_text())
    deadline = time.monotonic() + 2
    while _alive(probe) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(probe), f"the probe (pid {probe}) outlived the run interrupted by the {how} method"
    assert elapsed < 1.5 + 3, f"the interrupted run took {elapsed:.1f} s"
    if how == "signal":
        assert "interrupted: Timeout" in out.stdout, out.stderr
        assert _alive(int(pidfile.read_text()))  # its helper held the pipe all along
    else:
        assert out.returncode == 1
