"""The suite leaves the machine as it found it, so that two runs on one machine cannot break each
other (issue 31 item 7, issue 34 item 10):

- no test makes or removes an account: the unprivileged cases run as the machine's own ``nobody``
  (``nonroot_run``, tests/suiteuser.py), and no test or CI script runs ``useradd`` and its kin;
- loading the suite's plugins leaves nothing in the temp folder (the old suiteuser made a
  ``spark-suite-state-*`` folder at configure time that ``pytest --help`` never removed);
- no child a test starts is given a home that is no folder (a home of ``/nonexistent``: as root,
  matplotlib made ``/nonexistent/.cache`` and ``/nonexistent/.config``); such a child gets one
  under ``tmp_path``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from suiteuser import ACCOUNT_TOOLS, NONROOT_UID

from conftest import PYTEST_ARGS

TESTS = Path(__file__).parent
ROOT = TESTS.parent
#: ``"useradd"`` (a program run) in a test, a conftest or a CI script
RUNS_ACCOUNT_TOOL = re.compile(r"""(?:^|["'\s(])(?:""" + "|".join(ACCOUNT_TOOLS) + r""")(?:["'\s]|$)""")
#: a child's home that is no folder (``"HOME": "/nonexistent"``): what writes there as root, matplotlib
#: and fontconfig, makes it, outside the checkout and pytest's temp root
FIXED_HOME = re.compile(r"""["']HOME["']\s*[:=,]\s*["']/nonexistent|\bHOME=/nonexistent""")


def sources() -> list[Path]:
    files = [*TESTS.rglob("*.py"), *(ROOT / ".ci").iterdir(), *(ROOT / "conftest_examples").rglob("*.py")]
    return [p for p in files if p.is_file() and p.name != Path(__file__).name and "__pycache__" not in p.parts]


def test_no_test_or_ci_script_makes_or_removes_an_account() -> None:
    found = []
    for path in sources():
        text = path.read_text(errors="replace")
        for n, line in enumerate(text.splitlines(), 1):
            if RUNS_ACCOUNT_TOOL.search(line) and "ACCOUNT_TOOLS = " not in line:
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert found == [], "run the case as nobody (nonroot_run) instead:\n" + "\n".join(found)


def test_the_account_tool_pattern_sees_a_useradd() -> None:
    assert RUNS_ACCOUNT_TOOL.search('subprocess.run(["useradd", "--no-create-home", name])')
    assert RUNS_ACCOUNT_TOOL.search("useradd -m sparktest")
    assert RUNS_ACCOUNT_TOOL.search("  userdel sparktest")
    assert not RUNS_ACCOUNT_TOOL.search("users added: 3")


def test_no_child_gets_a_home_that_is_no_folder() -> None:
    found = []
    for path in sources():
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if FIXED_HOME.search(line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert found == [], "give the child a home under tmp_path:\n" + "\n".join(found)


def test_the_home_pattern_sees_a_fixed_home() -> None:
    assert FIXED_HOME.search('env = {"PATH": "", "HOME": "/nonexistent"}')
    assert FIXED_HOME.search("HOME=/nonexistent pytest")
    assert not FIXED_HOME.search('env["HOME"] = str(home)')
    assert not FIXED_HOME.search('Redactor({"HOME": "/home/alice"})')  # data, not a child's home


def test_nonroot_run_runs_as_the_machines_nobody(nonroot_run: Any) -> None:
    proc = nonroot_run(["-c", "import os; print(os.geteuid(), os.getegid(), os.getgroups())"])
    assert proc.returncode == 0, proc.stderr
    euid, _, groups = proc.stdout.split(maxsplit=2)
    if os.geteuid() == 0:
        assert int(euid) == NONROOT_UID and groups.strip() == "[]", proc.stdout
    else:
        assert int(euid) == os.geteuid()


USER_TEST = """
def test_as_nobody(nonroot_run):
    assert nonroot_run(["-c", "pass"]).returncode == 0
"""


@pytest.mark.parametrize("args", [["--help"], ["-q"], ["-q", "-n", "2"]], ids=["help", "run", "xdist"])
def test_the_suites_plugins_leave_nothing_in_the_temp_folder(tmp_path: Path, args: list[str]) -> None:
    """A child pytest with suiteuser (and xdist) loaded and a temp folder of its own: afterwards
    that folder holds pytest's own temp root and nothing else."""
    project, tmp = tmp_path / "project", tmp_path / "tmp"
    project.mkdir()
    tmp.mkdir()
    (project / "test_user.py").write_text(USER_TEST)
    env = {**os.environ, "TMPDIR": str(tmp), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), *filter(None, [env.get("PYTHONPATH")])])
    proc = subprocess.run(
        [sys.executable, *PYTEST_ARGS, "-p", "xdist.plugin", "-p", "suiteuser", *args, str(project)],
        cwd=project, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    left = sorted(p.name for p in tmp.iterdir() if not p.name.startswith("pytest-of-"))
    assert left == [], f"left in the temp folder: {left}"
