"""The suite's unprivileged user: an account the machine already has (``nobody``, uid 65534),
never one the suite makes.

Run as root, tests that need a second, unprivileged user (``nonroot_run``) run their child as
uid/gid 65534 through ``setpriv`` (no supplementary groups). Nothing is added to or removed from
``/etc/passwd`` and its siblings (issue 31 item 7: a suite that ran ``useradd`` broke a second run
on the same machine, each seeing the other's account appear), and nothing is left outside the
checkout and pytest's temp root (issue 34 item 10): the scratch folder a case needs is made by the
fixture and removed with it.

Loaded by ``tests/conftest.py`` (``pytest_plugins``).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

#: the unprivileged uid the children run as: an account every Debian/Ubuntu/RHEL box has
NONROOT_UID = 65534


def _name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


#: its name (``nobody``), for messages and ``pwd`` look-ups
NONROOT_USER = _name(NONROOT_UID)


def _gid(uid: int) -> int:
    try:
        return pwd.getpwuid(uid).pw_gid
    except KeyError:
        return uid


#: programs that change the machine's accounts: no test runs them (tests/test_suite_manners.py)
ACCOUNT_TOOLS = ("useradd", "userdel", "usermod", "groupadd", "groupdel", "groupmod", "adduser", "deluser")


def import_problem(prefix: list[str], cwd: str | Path) -> str:
    """Why ``[*prefix, "-c", "import pytest_dgx_spark"]`` fails ("" when it works):
    as another user, this interpreter or this checkout may be out of reach
    (a checkout in a 0700 folder, a Python that finds libpython through a
    RUNPATH under ``/root``)."""
    probe = subprocess.run(
        [*prefix, "-c", "import pytest_dgx_spark"], capture_output=True, text=True, timeout=60, cwd=cwd
    )
    return "" if probe.returncode == 0 else probe.stderr.strip()[-200:] or f"exit {probe.returncode}"


def setpriv_prefix(uid: int = NONROOT_UID) -> list[str]:
    """``setpriv`` dropping to ``uid`` and its group, with no supplementary groups, then Python."""
    return ["setpriv", f"--reuid={uid}", f"--regid={_gid(uid)}", "--clear-groups", sys.executable]


@pytest.fixture
def nonroot_run() -> Iterator[Any]:
    """Run ``python <args>`` as an unprivileged user (``nobody`` when we are root).

    Skips with the reason when that is impossible. ``run.base`` is a scratch
    folder the user can reach (pytest's own tmp folders are private to root),
    removed afterwards.
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
        if shutil.which("setpriv") is None:
            pytest.skip("running as root and no setpriv to run a child as an unprivileged user")
        home = base / "home"
        home.mkdir()
        os.chown(home, NONROOT_UID, _gid(NONROOT_UID))
        prefix = setpriv_prefix()
        why = import_problem(prefix, home)
        if why:
            pytest.skip(f"user {NONROOT_USER} (uid {NONROOT_UID}) cannot import pytest_dgx_spark here: {why}")

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
