"""The Slurm recipes (issue 33 item 3) on a real single-node cluster: Debian's ``slurm-wlm`` and
``munge``, started here on 127.0.0.1 from a generated ``slurm.conf`` holding the README's own
``Prolog=`` and ``HealthCheckProgram=`` lines (their folder, ``/usr/local/bin``, moved to this test's).

The node is the GB10 double (tests/doubles/gb10.py) through the host root. Healthy, a job runs to
completion; a hardware Xid planted in its ``/dev/kmsg`` fails the prolog (slurmd drains the node and
holds the requeued job), the health check names the drain ``spark-preflight: G4 FAIL …``; the fault
removed, the health check resumes the node and the released job runs. A drain an admin made for
another reason is left alone.

What Slurm itself cannot be asked to do (the drain decision on every state) is tested on
:func:`pytest_dgx_spark.slurm.decide`. Without the daemons this test skips, and fails under CI
(``CI`` set), where ``.ci/run`` installs them.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_dgx_spark import slurm
from pytest_dgx_spark.slurm import Outcome, decide

from conftest import Doubles, make_root
from doubles import gb10

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()
#: read when the module is imported, before the autouse fixture scrubs the environment
UNDER_CI = bool(os.environ.get("CI"))
DAEMONS = ("munged", "munge", "slurmctld", "slurmd", "scontrol", "sbatch")
#: where the README's lines say the recipes are installed (``pip install`` as root)
README_BIN = "/usr/local/bin/"
XID_79 = gb10.kmsg([gb10.GPU_FOUND, "NVRM: Xid (PCI:000f:01:00): 79, pid=0, GPU has fallen off the bus."])
#: bounds of each wait on the cluster (the daemons answer within seconds on an idle box)
WAIT_S = 90.0
HEALTH_INTERVAL_S = 2  # each wait on the health check is about one interval


def readme_conf_lines() -> list[str]:
    """The README's ``slurm.conf`` block, its setting lines."""
    block = re.search(r"```slurm\.conf\n(.*?)```", README, re.S)
    assert block, "README.md has no ```slurm.conf block (its Slurm section)"
    return [line for line in block.group(1).splitlines() if line and not line.startswith("#")]


def test_the_readme_block_names_the_installed_recipes() -> None:
    lines = dict(line.split("=", 1) for line in readme_conf_lines())
    assert lines["Prolog"] == README_BIN + "spark-slurm-prolog"
    assert lines["HealthCheckProgram"] == README_BIN + "spark-slurm-health"
    assert lines["HealthCheckNodeState"] == "ANY"  # a drained node is checked too: else never resumed
    pyproject = (REPO / "pyproject.toml").read_text()
    assert 'spark-slurm-prolog = "pytest_dgx_spark.slurm:prolog"' in pyproject
    assert 'spark-slurm-health = "pytest_dgx_spark.slurm:health"' in pyproject


# --------------------------------------------------------------------------- the decision, on every state

FAIL = Outcome(1, failing=["G4 FAIL G4.xid-hardware"])
BROKEN = Outcome(2, error="the preflight took more than 30 s (--budget)")
OK = Outcome(0)
OURS = FAIL.reason()


@pytest.mark.parametrize(
    ("outcome", "state", "reason", "on_error", "note", "action"),
    [
        (FAIL, "IDLE", "", False, False, "drain"),
        (FAIL, "MIXED", "", False, False, "drain"),
        (FAIL, "IDLE+DRAIN", OURS, False, False, "leave"),  # already drained for this: no rewrite
        (FAIL, "IDLE+DRAIN", "spark-preflight: G6 FAIL G6.other-process", False, False, "drain"),  # renamed
        (FAIL, "IDLE+DRAIN", "disk replaced, ticket 42", False, False, "leave"),  # an admin's drain
        (FAIL, "IDLE+DRAIN", "Prolog error", False, True, "drain"),  # our prolog's drain, named
        (FAIL, "IDLE+DRAIN", "Prolog error", False, False, "leave"),  # another prolog's
        (OK, "IDLE+DRAIN", OURS, False, False, "resume"),
        (OK, "MIXED+DRAIN", OURS, False, False, "resume"),
        (OK, "IDLE+DRAIN", "Prolog error", False, True, "resume"),
        (OK, "IDLE+DRAIN", "disk replaced, ticket 42", False, False, "leave"),
        (OK, "IDLE+DRAIN", "Prolog error", False, False, "leave"),
        (OK, "IDLE", "", False, False, "leave"),
        (BROKEN, "IDLE", "", False, False, "leave"),  # could not run: a healthy node stays up
        (BROKEN, "IDLE", "", True, False, "drain"),  # unless --drain-on-error
        (BROKEN, "IDLE+DRAIN", OURS, False, False, "leave"),  # nor is a drain lifted on no news
    ],
)
def test_the_health_check_drains_resumes_or_leaves(
    outcome: Outcome, state: str, reason: str, on_error: bool, note: bool, action: str
) -> None:
    assert decide(outcome, state, reason, on_error, note) == action


def test_a_reason_names_the_check_and_code_or_the_headline() -> None:
    assert FAIL.reason() == "spark-preflight: G4 FAIL G4.xid-hardware"
    assert slurm._finding({"id": "G4", "status": "FAIL", "codes": [], "headline": "Xid 79 since boot"}) == (
        "G4 FAIL (Xid 79 since boot)"
    )
    assert BROKEN.reason().startswith("spark-preflight: could not run: the preflight took more than")
    assert len(Outcome(1, failing=["G4 FAIL " + "x" * 500]).reason()) == slurm.MAX_REASON


def test_a_preflight_past_its_budget_is_stopped_and_drains_nothing(tmp_path: Path) -> None:
    """A wedged probe: the budget ends the child's whole group, and the outcome is "could not run".
    NVML is the pynvml double's "library not found" (a GPU machine's real NVML would answer G4, and
    the hung nvidia-smi would never be asked)."""
    doubles = Doubles(tmp_path).nvml({"init_error": "LibraryNotFound"})
    doubles.tool("nvidia-smi", "#!/bin/sh\nsleep 60\n")
    env = {**doubles.env, "SPARK_PREFLIGHT_HOST_ROOT": str(tmp_path)}
    started = time.monotonic()
    outcome = slurm.run_preflight(["--only", "G4", "--timeout", "30"], 1.5, env)
    assert time.monotonic() - started < 15
    assert outcome.code == 2 and not outcome.failed and "more than 1.5 s" in outcome.error
    assert decide(outcome, "IDLE", "", False, False) == "leave"


@pytest.mark.parametrize(
    ("kmsg", "flags", "code", "note"),
    [
        (XID_79, [], 1, True),  # a FAIL: Slurm drains the node and holds the job
        (gb10.HEALTHY_KMSG, [], 0, False),
        (gb10.HEALTHY_KMSG, ["--bogus"], 0, False),  # could not run: the node stays up
        (gb10.HEALTHY_KMSG, ["--bogus", "--drain-on-error"], 1, True),
    ],
    ids=["fail", "healthy", "could-not-run", "could-not-run-drain-on-error"],
)
def test_the_prologs_exit_code_and_its_note_for_the_health_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    kmsg: str, flags: list[str], code: int, note: bool,
) -> None:  # fmt: skip
    """The prolog as slurmd runs it (no arguments but the args file's), on a planted host."""
    root = make_root(tmp_path / "host", {"dev/kmsg": kmsg, "dev/nvidiactl": "", "proc/1/cgroup": "0::/\n"})
    args = tmp_path / "slurm.args"
    args.write_text("# as an admin writes it\n" + " ".join(flags) + "\n")
    monkeypatch.setenv("SPARK_PREFLIGHT_HOST_ROOT", str(root))
    monkeypatch.setenv(slurm.ARGS_FILE_ENV, str(args))
    monkeypatch.setenv(slurm.STATE_DIR_ENV, str(tmp_path / "state"))
    assert slurm.prolog([]) == code
    said = capsys.readouterr().err
    assert (tmp_path / "state" / "prolog-failed").exists() == note
    if kmsg is XID_79:
        assert said.startswith("spark-preflight: prolog: G4 FAIL"), said
    elif flags:
        assert "spark-preflight: prolog: could not run: " in said and "--bogus" in said, said


# --------------------------------------------------------------------------- the real cluster


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _missing() -> str:
    gone = [name for name in DAEMONS if shutil.which(name) is None and not Path("/usr/sbin", name).exists()]
    if gone:
        return f"Slurm/munge not installed (no {', '.join(gone)}): apt-get install slurm-wlm munge"
    if os.geteuid() != 0:
        return "slurmd must run as root to start jobs as their user"
    return ""


def _tool(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


class Cluster:
    """munged, slurmctld and slurmd in the foreground, children of this test, stopped by pid."""

    def __init__(self, base: Path, env: dict[str, str]) -> None:
        self.base, self.env = base, env
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, *argv: str, log: str) -> None:
        with open(self.base / log, "wb") as out:
            self.procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=self.env,
                                               cwd=self.base, start_new_session=True))  # fmt: skip

    def run(self, *argv: str) -> str:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, env=self.env, cwd=self.base)
        assert done.returncode == 0, f"{' '.join(argv)}: {done.stderr or done.stdout}\n{self.logs()}"
        return done.stdout

    def node(self) -> tuple[str, str]:
        out = self.run(_tool("scontrol"), "show", "node", "spark1", "-o")
        state = re.search(r"\bState=(\S+)", out)
        reason = re.search(r"\bReason=(.*?)(?: \[[^\]]*\])?\s*$", out.strip())
        return (state.group(1) if state else ""), (reason.group(1) if reason else "")

    def job(self, job_id: str) -> tuple[str, str]:
        out = self.run(_tool("scontrol"), "show", "job", job_id, "-o")
        state, reason = re.search(r"\bJobState=(\S+)", out), re.search(r"\bReason=(\S+)", out)
        return (state.group(1) if state else ""), (reason.group(1) if reason else "")

    def wait(self, what: str, ready: Callable[[], Any]) -> Any:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            for proc in self.procs:
                assert proc.poll() is None, (
                    f"{proc.args[0]} exited ({proc.returncode}) waiting for {what}\n{self.logs()}"
                )
            got = ready()
            if got:
                return got
            time.sleep(0.5)
        pytest.fail(f"not within {WAIT_S:g} s: {what}; node {self.node()}\n{self.logs()}")

    def logs(self) -> str:
        tails = []
        for name in ("slurmctld.log", "slurmd.log", "health.log"):
            path = self.base / name
            if path.exists():
                tails.append(f"--- {name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-15:]))
        return "\n".join(tails)

    def stop(self) -> None:
        for proc in reversed(self.procs):  # slurmd, slurmctld, then munged
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=20)


def _wrapper(path: Path, entry: str, env: dict[str, str], runs: Path) -> None:
    """What ``pip install`` puts at the README's path, with the planted machine in its environment
    (slurmd passes its programs an environment of its own, so the test's cannot reach them). Each
    run is counted in ``runs``; while ``<runs>.pause`` exists the program is not run (the test
    decides when the health check may look, so that the prolog meets the fault first)."""
    exports = "".join(f"export {k}='{v}'\n" for k, v in sorted(env.items()))
    path.write_text(
        f"#!/bin/sh\n{exports}[ -e '{runs}.pause' ] && {{ echo paused >> '{runs}'; exit 0; }}\n"
        f"echo run >> '{runs}'\nexec '{sys.executable}' -m pytest_dgx_spark.slurm {entry} \"$@\"\n"
    )
    path.chmod(0o755)


@pytest.fixture
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, Path]]:
    why = _missing()
    if why:
        if UNDER_CI:
            pytest.fail(f"CI must run the real Slurm test: {why}")
        pytest.skip(why)
    # a short folder: slurmd's and munged's socket paths must fit sun_path (108 bytes)
    base = tmp_path_factory.mktemp("slurm")
    base.chmod(0o755)  # munged: every folder above its socket must be searchable by all
    for sub in ("state", "spool", "bin", "munge-key", "spark-state"):
        (base / sub).mkdir()
    key = base / "munge-key" / "munge.key"
    key.write_bytes(os.urandom(128))
    key.chmod(0o400)
    (base / "munge-key").chmod(0o700)
    spark = {"proc/meminfo": gb10.meminfo(), "proc/1/cgroup": "0::/\n", **gb10.stack_files()}
    spark |= gb10.memory_files()
    root = make_root(base / "host", {**spark, "dev/kmsg": gb10.HEALTHY_KMSG})
    (base / "doubles").mkdir()
    doubles = Doubles(base / "doubles").nvml(gb10.nvml()).torch(gb10.torch())
    conf = base / "slurm.conf"
    planted = {k: doubles.env[k] for k in ("SPARK_FAKE_NVML", "SPARK_FAKE_TORCH", "PYTHONPATH", "PATH")}
    planted |= {"SPARK_PREFLIGHT_HOST_ROOT": str(root), "SPARK_PREFLIGHT_PYTHON_PATH": "",
                slurm.STATE_DIR_ENV: str(base / "spark-state"),
                slurm.ARGS_FILE_ENV: str(base / "none"),
                "SLURM_CONF": str(conf)}  # fmt: skip
    lines = []
    for line in readme_conf_lines():
        name, value = line.split("=", 1)
        if name == "HealthCheckInterval":  # the README's 300 s; a test looks every few seconds
            continue
        if value.startswith(README_BIN):
            program = base / "bin" / value[len(README_BIN) :]
            entry = "prolog" if name == "Prolog" else "health"
            _wrapper(program, entry, planted, base / f"{entry}.log")
            line = f"{name}={program}"
        lines.append(line)
    sock = base / "munge.sock"
    host = socket.gethostname().split(".")[0]
    conf.write_text("\n".join([
        "ClusterName=sparktest", f"SlurmctldHost={host}(127.0.0.1)", "SlurmUser=root", "SlurmdUser=root",
        f"SlurmctldPort={_free_port()}", f"SlurmdPort={_free_port()}",
        "AuthType=auth/munge", "CredType=cred/munge",
        f"AuthInfo=socket={sock}", f"StateSaveLocation={base / 'state'}", f"SlurmdSpoolDir={base / 'spool'}",
        f"SlurmctldPidFile={base / 'slurmctld.pid'}", f"SlurmdPidFile={base / 'slurmd.pid'}",
        f"SlurmctldLogFile={base / 'slurmctld.log'}", f"SlurmdLogFile={base / 'slurmd.log'}",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SelectType=select/linear",
        # a job starts when submitted or released, not up to 3 s later (batch_sched_delay) or, where
        # that event met the node busy, at the next full pass (sched_interval, 60 s by default)
        "SchedulerType=sched/builtin", "SchedulerParameters=batch_sched_delay=0,sched_interval=1",
        "SwitchType=switch/none", "MpiDefault=none",
        "JobCompType=jobcomp/none",
        "AccountingStorageType=accounting_storage/none", "JobAcctGatherType=jobacct_gather/none",
        "ReturnToService=2", "SlurmdTimeout=300", "MailProg=/bin/true",
        *lines,  # the README's
        f"HealthCheckInterval={HEALTH_INTERVAL_S}",
        f"NodeName=spark1 NodeAddr=127.0.0.1 NodeHostname={host} CPUs=1 RealMemory=100 State=UNKNOWN",
        "PartitionName=debug Nodes=spark1 Default=YES MaxTime=INFINITE State=UP", "",
    ]))  # fmt: skip
    env = {"PATH": os.environ["PATH"], "SLURM_CONF": str(conf), "HOME": str(base), "LANG": "C.UTF-8"}
    c = Cluster(base, env)
    try:
        c.start(_tool("munged"), "-F", "-f", f"--socket={sock}", f"--key-file={key}",
                f"--pid-file={base / 'munged.pid'}", f"--seed-file={base / 'munged.seed'}",
                f"--log-file={base / 'munged.log'}", log="munged.out")  # fmt: skip
        c.wait("munged's socket", sock.exists)
        c.start(_tool("slurmctld"), "-D", "-i", "-f", str(conf), log="slurmctld.out")
        c.start(_tool("slurmd"), "-D", "-N", "spark1", "-f", str(conf), log="slurmd.out")
        yield c, root
    finally:
        try:
            subprocess.run(
                [_tool("scancel"), "--full", "-u", "root"], capture_output=True, timeout=30, env=env
            )
        except (OSError, subprocess.SubprocessError):
            pass
        c.stop()


def _health_runs(c: Cluster, what: str = "run") -> int:
    log = c.base / "health.log"
    return log.read_text().splitlines().count(what) if log.exists() else 0


def test_a_real_cluster_drains_on_a_fail_holds_the_job_and_resumes_once_healthy(
    cluster: tuple[Cluster, Path],
) -> None:
    c, root = cluster
    sbatch, scontrol = _tool("sbatch"), _tool("scontrol")
    # healthy: the node comes up and a job runs to completion
    c.wait("the node up and not drained", lambda: (s := c.node()[0]) and "DRAIN" not in s and "DOWN" not in s
           and "NOT_RESPONDING" not in s and s.startswith(("IDLE", "MIXED", "ALLOC")))  # fmt: skip
    first = c.run(sbatch, "--parsable", "-o", str(c.base / "job-%j.out"), "--wrap", "echo trained").strip()
    c.wait("the healthy node's job to complete", lambda: c.job(first)[0] == "COMPLETED")
    assert (c.base / f"job-{first}.out").read_text().strip() == "trained"
    assert _health_runs(c) >= 1

    # a hardware Xid, met by the next job's prolog (the health check paused until then)
    pause = c.base / "health.log.pause"
    pause.touch()
    paused = _health_runs(c, "paused")
    c.wait("the health check paused", lambda: _health_runs(c, "paused") > paused)
    (root / "dev" / "kmsg").write_text(XID_79)
    second = c.run(sbatch, "--parsable", "-o", str(c.base / "job-%j.out"), "--wrap", "echo trained").strip()
    c.wait(
        "the job held after its prolog failed",
        lambda: c.job(second) == ("PENDING", "launch_failed_requeued_held"),
    )
    state, reason = c.node()
    assert "DRAIN" in state and reason.startswith(slurm.PROLOG_REASON), (state, reason)
    held = c.base / f"job-{second}.out"  # slurmd says there why the job did not start; it did not
    assert "trained" not in (held.read_text() if held.exists() else "")

    # the health check takes the prolog's drain over, naming the check and its code
    pause.unlink()
    state, reason = c.wait("the drain named by the health check",
                           lambda: (n := c.node())[1].startswith(slurm.PREFIX) and n)  # fmt: skip
    assert "DRAIN" in state
    assert reason.startswith("spark-preflight: G4 FAIL"), reason
    assert "G4." in reason or "Xid 79" in reason, reason  # its finding code, or until codes land its headline

    # the fault removed: the health check resumes the node it drained, and the released job runs
    (root / "dev" / "kmsg").write_text(gb10.HEALTHY_KMSG)
    c.wait("the node resumed by the health check", lambda: "DRAIN" not in c.node()[0])
    c.run(scontrol, "release", second)
    c.run(scontrol, "update", f"jobid={second}", "starttime=now")  # a requeued job waits 2 min by default
    c.wait("the released job to complete", lambda: c.job(second)[0] == "COMPLETED")
    assert held.read_text().strip().endswith("trained")

    # the job-script line (docs/SLURM.md): a failed run's log diagnosed into the job's own output
    crash = "import sys; sys.exit('OSError: libcudart.so.12: cannot open shared object file')"
    line = (f"'{sys.executable}' -c \"{crash}\" > train.log 2>&1"
            f" || '{sys.executable}' -m pytest_dgx_spark diagnose train.log --offline --only G1")  # fmt: skip
    third = c.run(sbatch, "--parsable", "-D", str(c.base), "-o", str(c.base / "job-%j.out"), "--wrap", line).strip()
    c.wait("the diagnosing job to end", lambda: c.job(third)[0] in ("COMPLETED", "FAILED"))
    diagnosis = (c.base / f"job-{third}.out").read_text()
    assert 'G1 FAIL: train.log:1: "OSError: libcudart.so.12' in diagnosis, diagnosis

    # an admin's drain: the health check, though the node is healthy, leaves it drained
    c.run(scontrol, "update", "nodename=spark1", "state=drain", "reason=new DIMM, ticket 42")
    runs = _health_runs(c)
    c.wait("two health check runs", lambda: _health_runs(c) >= runs + 2)
    state, reason = c.node()
    assert "DRAIN" in state and reason == "new DIMM, ticket 42"
