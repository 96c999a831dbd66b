"""The suite's unprivileged user, and the promise that the machine's user
database is as the suite found it.

Run as root, tests that need a second, unprivileged user (``nonroot_run``)
make one (``sparktest``) with ``useradd``. A test leaves the machine as it
found it, so:

- the run that made the user removes it (with its group, its mail spool and
  its subordinate ids) when the whole session ends, and only then: under
  xdist every worker may be using it, so the controller removes it after the
  last worker is done. The worker that made it leaves a marker in a folder
  the controller created and handed to the workers (``pytest_configure_node``);
  workers make it in turn (see ``made_here``);
- a user that was there before the run is never touched;
- at the end the account files (``/etc/passwd``, ``/etc/group``, their
  shadows, ``/etc/subuid``/``subgid``) must read as they did at the start:
  otherwise the session fails, naming the lines that changed.

Loaded by ``tests/conftest.py`` (``pytest_plugins``); a test that checks this
loads it in a child pytest with ``-p suiteuser``. ``SPARK_TEST_USER`` names
another user, so such a child never touches the outer run's ``sparktest``.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

NONROOT_USER = os.environ.get("SPARK_TEST_USER", "sparktest")
#: the account files useradd and userdel write
ACCOUNT_FILES = ("/etc/passwd", "/etc/group", "/etc/shadow", "/etc/gshadow", "/etc/subuid", "/etc/subgid")

_STATE = pytest.StashKey[Path]()
_ACCOUNTS = pytest.StashKey[dict[str, list[str]]]()
#: the key of ``workerinput`` that carries the controller's state folder
_WORKER_KEY = "spark_suite_state"


def accounts() -> dict[str, list[str]]:
    """The lines of each account file (missing or unreadable: no lines)."""
    lines: dict[str, list[str]] = {}
    for name in ACCOUNT_FILES:
        try:
            lines[name] = Path(name).read_text(errors="replace").splitlines()
        except OSError:
            lines[name] = []
    return lines


def accounts_changed(before: dict[str, list[str]], after: dict[str, list[str]]) -> list[str]:
    """``+line``/``-line`` per account file that changed (password hashes
    not shown: only the name of a shadow line)."""
    changed = []
    for name in ACCOUNT_FILES:
        old, new = before.get(name, []), after.get(name, [])
        secret = "shadow" in name
        for sign, lines in (("+", [x for x in new if x not in old]), ("-", [x for x in old if x not in new])):
            changed += [f"{name}: {sign}{line.split(':')[0] if secret else line}" for line in lines]
    return changed


def exists(kind: str, name: str) -> bool:
    """Whether ``getent passwd|group name`` knows it."""
    return subprocess.run(["getent", kind, name], capture_output=True, timeout=30).returncode == 0


def pytest_configure(config: pytest.Config) -> None:
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None and _WORKER_KEY in workerinput:
        config.stash[_STATE] = Path(workerinput[_WORKER_KEY])
        return
    config.stash[_STATE] = Path(tempfile.mkdtemp(prefix="spark-suite-state-"))
    config.stash[_ACCOUNTS] = accounts()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist: each worker records what it made in the controller's folder."""
    node.workerinput[_WORKER_KEY] = str(node.config.stash[_STATE])


def made_here(config: pytest.Config) -> int:
    """The uid of the unprivileged user, made now unless it exists; the run
    that made it records that, to remove it at the end. Skips with the
    reason when it cannot be made.

    Workers take turns (a lock in the run's state folder): ``useradd`` checks
    the name before it locks ``/etc/passwd``, so two made at once both answer
    0 and the second rewrites the first's entry with another uid under a
    test that is already using the first."""
    state = config.stash[_STATE]
    with open(state / "useradd.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not exists("passwd", NONROOT_USER):
            group_existed = exists("group", NONROOT_USER)
            made = subprocess.run(
                ["useradd", "--no-create-home", NONROOT_USER], capture_output=True, text=True, timeout=60
            )
            if made.returncode != 0:
                pytest.skip(f"cannot create an unprivileged user: {made.stderr.strip()}")
            marker = state / f"user-{NONROOT_USER}-{os.getpid()}.json"
            marker.write_text(json.dumps({"user": NONROOT_USER, "group": not group_existed}))
    return int(subprocess.run(["id", "-u", NONROOT_USER], capture_output=True, text=True, timeout=30).stdout)


def import_problem(prefix: list[str], cwd: str | Path) -> str:
    """Why ``[*prefix, "-c", "import pytest_dgx_spark"]`` fails ("" when it works):
    as another user, this interpreter or this checkout may be out of reach
    (a checkout in a 0700 folder, a Python that finds libpython through a
    RUNPATH under ``/root``)."""
    probe = subprocess.run(
        [*prefix, "-c", "import pytest_dgx_spark"], capture_output=True, text=True, timeout=60, cwd=cwd
    )
    return "" if probe.returncode == 0 else probe.stderr.strip()[-200:] or f"exit {probe.returncode}"


def remove_made_users(state: Path) -> list[str]:
    """userdel each user a marker in ``state`` names (its group too when the
    run made it); the problems met, one line each."""
    problems = []
    for marker in sorted(state.glob("user-*.json")):
        made = json.loads(marker.read_text())
        user = made["user"]
        spool = Path("/var/mail") / user
        gone = subprocess.run(["userdel", user], capture_output=True, text=True, timeout=60)
        if gone.returncode != 0:
            problems.append(f"userdel {user}: {gone.stderr.strip()}")
        if made["group"] and exists("group", user):
            subprocess.run(["groupdel", user], capture_output=True, timeout=60)
        if spool.is_file():  # a mail spool useradd made (CREATE_MAIL_SPOOL=yes)
            spool.unlink()
    return problems


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if hasattr(config, "workerinput") or _ACCOUNTS not in config.stash:
        return  # a worker: the controller cleans up once every worker is done
    state = config.stash[_STATE]
    problems = remove_made_users(state)
    shutil.rmtree(state, ignore_errors=True)
    problems += [
        f"the suite left the machine's accounts changed: {line}"
        for line in accounts_changed(config.stash[_ACCOUNTS], accounts())
    ]
    if not problems:
        return
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.ensure_newline()
    for line in problems:
        if reporter is not None:
            reporter.write_line(f"ERROR: {line}", red=True)
        else:  # pragma: no cover - -p no:terminal
            print(f"ERROR: {line}", file=sys.stderr)
    if session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture
def nonroot_run(pytestconfig: pytest.Config) -> Iterator[Any]:
    """Run ``python <args>`` as an unprivileged user (made here if we are root).

    Skips with the reason when that is impossible. ``run.base`` is a scratch
    folder the user can reach (pytest's own tmp folders are private to root).
    """
    base = Path(tempfile.mkdtemp(prefix="spark-nonroot-"))
    base.chmod(0o755)
    try:
        if os.geteuid() != 0:

            def run_as_self(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
                return subprocess.run(
                    [sys.executable, *args], capture_output=True, text=True, timeout=60, cwd=base, **kwargs
                )

            run_as_self.base = base  # type: ignore[attr-defined]
            yield run_as_self
            return
        if shutil.which("useradd") is None or shutil.which("setpriv") is None:
            pytest.skip("running as root and no useradd/setpriv to make an unprivileged user")
        uid = made_here(pytestconfig)
        home = base / "home"
        home.mkdir()
        os.chown(home, uid, -1)
        prefix = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--init-groups", sys.executable]
        why = import_problem(prefix, home)
        if why:
            pytest.skip(f"user {NONROOT_USER} cannot import pytest_dgx_spark here: {why}")

        def run(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
            env = dict(kwargs.pop("env", os.environ))
            env["HOME"] = str(home)
            return subprocess.run(
                [*prefix, *args],
                capture_output=True,
                text=True,
                timeout=60,
                cwd=kwargs.pop("cwd", home),
                env=env,
                **kwargs,
            )

        run.base = base  # type: ignore[attr-defined]
        yield run
    finally:
        shutil.rmtree(base, ignore_errors=True)
