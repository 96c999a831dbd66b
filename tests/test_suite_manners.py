"""The suite leaves the machine as it found it: the unprivileged user that
``nonroot_run`` makes as root is gone when the session that made it ends
(under xdist too), a user that was there before is left alone, and a run that
leaves the account files changed fails, naming the line.

Each case runs a child pytest with only ``suiteuser`` (and xdist) loaded and
a user name of its own (``SPARK_TEST_USER``), so it never touches the outer
run's ``sparktest``.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from suiteuser import ACCOUNT_FILES, accounts_changed, exists, import_problem

from conftest import PYTEST_ARGS

TESTS = Path(__file__).parent

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None or shutil.which("setpriv") is None,
    reason="the suite makes its unprivileged user only as root, with useradd and setpriv",
)

#: two tests that each run a child as the unprivileged user and record its euid
USER_TESTS = """
import json, os, pathlib

def record(nonroot_run, name):
    proc = nonroot_run(["-c", "import os; print(os.geteuid())"])
    assert proc.returncode == 0, proc.stderr
    pathlib.Path(os.environ["SEEN"], name).write_text(proc.stdout.strip())

def test_one(nonroot_run):
    record(nonroot_run, "one")

def test_two(nonroot_run):
    record(nonroot_run, "two")
"""


def lines_naming(user: str) -> list[str]:
    """Every line of the account files about ``user``."""
    found = []
    for name in ACCOUNT_FILES:
        try:
            found += [
                f"{name}: {line}"
                for line in Path(name).read_text().splitlines()
                if line.startswith(f"{user}:")
            ]
        except OSError:
            continue
    return found


def remove_user(user: str) -> None:
    if exists("passwd", user):
        subprocess.run(["userdel", user], capture_output=True, timeout=60)
    if exists("group", user):
        subprocess.run(["groupdel", user], capture_output=True, timeout=60)


@functools.cache
def _nobody_cannot_import() -> str:
    """Why user nobody cannot import pytest_dgx_spark with this interpreter ("" when
    it can): where it cannot, every nonroot_run in a child skips."""
    return import_problem(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable], "/")


@pytest.fixture
def runnable_by_others() -> None:
    """Skips, with the reason, where nonroot_run in a child would skip."""
    why = _nobody_cannot_import()
    if why:
        pytest.skip(f"an unprivileged user cannot import pytest_dgx_spark with {sys.executable}: {why}")


@pytest.fixture
def user(accounts_to_ourselves: None) -> Iterator[str]:
    """A user name no one has, removed afterwards whatever happened."""
    name = f"sparkcheck{os.getpid()}"
    assert not exists("passwd", name), f"{name} is left from an earlier run"
    yield name
    remove_user(name)


def child(project: Path, user: str, *args: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """pytest over ``project`` with only suiteuser and xdist, as ``user``."""
    seen = project / "seen"
    seen.mkdir(exist_ok=True)
    env = dict(os.environ, SPARK_TEST_USER=user, SEEN=str(seen), PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), *filter(None, [env.get("PYTHONPATH")])])
    proc = subprocess.run(
        [sys.executable, *PYTEST_ARGS, "-p", "xdist.plugin", "-p", "suiteuser", "-q", *args, str(project)],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return proc, seen


def test_the_user_made_for_two_xdist_workers_is_gone_when_the_session_ends(
    tmp_path: Path, runnable_by_others: None, user: str
) -> None:
    (tmp_path / "test_user.py").write_text(USER_TESTS)
    proc, seen = child(tmp_path, user, "-n", "2")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "2 passed" in proc.stdout
    euids = {(seen / n).read_text() for n in ("one", "two")}
    assert len(euids) == 1 and euids != {"0"}, euids  # both workers ran as the one user the run made
    assert not exists("passwd", user) and not exists("group", user)
    assert lines_naming(user) == []  # passwd, group, their shadows, subuid/subgid
    assert not (Path("/var/mail") / user).exists()


def test_a_user_that_was_there_before_the_run_is_left_alone(
    tmp_path: Path, runnable_by_others: None, user: str
) -> None:
    made = subprocess.run(["useradd", "--no-create-home", user], capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    before = lines_naming(user)
    (tmp_path / "test_user.py").write_text(USER_TESTS)
    proc, seen = child(tmp_path, user)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert (seen / "one").read_text() == str(int(subprocess.check_output(["id", "-u", user])))
    assert lines_naming(user) == before


def test_a_run_that_leaves_a_user_behind_fails_naming_the_line(
    tmp_path: Path, user: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "test_leak.py").write_text(
        "import os, subprocess\n"
        "def test_leaves_a_user():\n"
        "    subprocess.run(['useradd', '--no-create-home', os.environ['LEAK']], check=True)\n"
    )
    leak = f"{user}x"
    monkeypatch.setenv("LEAK", leak)  # for the child (child() copies os.environ)
    try:
        proc, _ = child(tmp_path, user)
    finally:
        remove_user(leak)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "1 passed" in proc.stdout
    assert f"ERROR: the suite left the machine's accounts changed: /etc/passwd: +{leak}:x:" in proc.stdout


def test_a_changed_shadow_line_is_named_without_its_hash() -> None:
    before = {"/etc/passwd": ["root:x:0:0::/root:/bin/sh"], "/etc/shadow": ["root:$y$secret:1::::::"]}
    after = {"/etc/passwd": [], "/etc/shadow": ["root:$y$other:1::::::"]}
    assert accounts_changed(before, after) == [
        "/etc/passwd: -root:x:0:0::/root:/bin/sh",
        "/etc/shadow: +root",
        "/etc/shadow: -root",
    ]
    assert accounts_changed(before, before) == []
