"""Bad input from the user, given for real: a report path that is a device or
a FIFO, ini values pytest cannot read, and ``--spark-config PATH`` written
with a space (issue 12, items 2, 10 and 11).

Each is one line and a usage exit (pytest 4, ``spark-preflight`` 2), never
a traceback, never a device replaced by a file, never a plain pytest run
stopped by a key it does not need.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_dgx_spark import report

from conftest import PYTEST_CHILD

CLI = "import sys\nfrom pytest_dgx_spark.cli import main\nsys.exit(main())\n"


def cli(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CLI, *args], capture_output=True, text=True, timeout=120, cwd=cwd, env=env
    )


def pytest_run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """pytest in a child: a report path that blocked would hang this test, not the suite."""
    return subprocess.run(
        [*PYTEST_CHILD, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


# --------------------------------------------------------------------------- item 2: report paths


def special_files(tmp_path: Path) -> dict[str, tuple[Path, int]]:
    """``name -> (path, S_IFMT)`` of what must never be renamed over."""
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    link = tmp_path / "to-dev-null.json"
    link.symlink_to("/dev/null")
    out = {"/dev/null": (Path("/dev/null"), stat.S_IFCHR), "fifo": (fifo, stat.S_IFIFO)}
    out["symlink to /dev/null"] = (link, stat.S_IFCHR)
    if Path("/dev/full").exists():
        out["/dev/full"] = (Path("/dev/full"), stat.S_IFCHR)
    return out


KIND_WORDS = {stat.S_IFCHR: "a character device", stat.S_IFIFO: "a FIFO"}


def test_report_path_that_is_a_device_or_fifo_is_refused_by_pytest_and_the_cli(tmp_path: Path) -> None:
    """``--spark-report /dev/null`` (run as root, the atomic rename replaced the
    device with a plain file), ``/dev/full``, a FIFO and a symlink to
    ``/dev/null``: refused at option parsing with one line (pytest exit 4,
    CLI exit 2); each is still what it was afterwards. The space form is
    refused too, one line (the rootdir check of item 11 speaks first)."""
    (tmp_path / "test_user.py").write_text("def test_user():\n    pass\n")
    for name, (path, kind) in special_files(tmp_path).items():
        words = KIND_WORDS[kind]
        ran = pytest_run(["--spark-preflight", f"--spark-report={path}"], tmp_path)
        assert ran.returncode == pytest.ExitCode.USAGE_ERROR, (name, ran.stdout, ran.stderr)
        assert ran.stderr.strip().splitlines() == [
            f"ERROR: --spark-report: {str(path)!r} is {words}, not a regular file; give a file path"
        ], name
        # with a space, an existing path outside the project is first a test path to pytest (item 11)
        spaced = pytest_run(["--spark-preflight", "--spark-report", str(path)], tmp_path)
        assert spaced.returncode == pytest.ExitCode.USAGE_ERROR, (name, spaced.stdout, spaced.stderr)
        assert len(spaced.stderr.strip().splitlines()) == 1, spaced.stderr
        by_cli = cli(["--report", str(path)], tmp_path)
        assert by_cli.returncode == 2, (name, by_cli.stderr)
        assert by_cli.stderr.strip().splitlines() == [
            f"spark-preflight: error: --report: {str(path)!r} is {words}, not a regular file; give a file path"
        ], name
        assert stat.S_IFMT(os.stat(path).st_mode) == kind, f"{name} was replaced"
    assert Path("/dev/null").read_bytes() == b""


def test_write_json_renames_only_over_a_regular_file_or_nothing(tmp_path: Path) -> None:
    """The last line of defence (the per-rank path, a FIFO made after the
    options were read): write_json refuses, leaves the FIFO and the socket as
    they are and no temporary file behind; a symlink to a report is refused
    too (nothing is written through a link, issue 19) and the file it
    points to is left as it was."""
    fifo = tmp_path / "env-report.json"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="a FIFO, not a regular file; nothing was written"):
        report.write_json(fifo, {"verdict": "ready"})
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    sock_path = tmp_path / "sock.json"
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(sock_path))
        with pytest.raises(OSError, match="a socket"):
            report.write_json(sock_path, {})
        assert stat.S_ISSOCK(os.stat(sock_path).st_mode)
    finally:
        sock.close()
    real = tmp_path / "reports" / "real.json"
    real.parent.mkdir()
    real.write_text("{}")
    link = tmp_path / "latest.json"
    link.symlink_to(real)
    with pytest.raises(OSError, match="a symlink is there"):
        report.write_json(link, {"verdict": "blocked"})
    assert link.is_symlink() and json.loads(real.read_text()) == {}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["env-report.json", "latest.json", "reports", "sock.json"]


def test_cli_rank_report_path_that_is_a_fifo_is_one_line(tmp_path: Path) -> None:
    """Under torchrun rank 1 writes ``<stem>.rank1<suffix>``, a path the option
    check never saw; a FIFO there is a one-line error (exit 2), not a hang."""
    os.mkfifo(tmp_path / "env.rank1.json")
    env = dict(os.environ, RANK="1")
    ran = cli(["--only", "G9", "--report", str(tmp_path / "env.json")], tmp_path, env)
    assert ran.returncode == 2, ran.stderr
    assert ran.stderr.strip().splitlines() == [
        f"spark-preflight: error: cannot write {tmp_path / 'env.rank1.json'}: a FIFO, not a regular file; "
        "nothing was written"
    ]
    assert stat.S_ISFIFO(os.stat(tmp_path / "env.rank1.json").st_mode)


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--config", "https://u:CFGPW@h/x.yaml"], "--config"),
        (["--report", "https://u:CFGPW@h/x.json"], "--report"),
        (["--replay", "https://u:CFGPW@h/x.json"], "--replay"),
        (["--capture", "https://u:CFGPW@h/x.json"], "--capture"),
        (["--threshold", "g6_cap_max=https://u:CFGPW@h"], "--threshold"),
        (["--workload-gb", "https://u:CFGPW@h"], "--workload-gb"),
    ],
    ids=["config", "report", "replay", "capture", "threshold", "number"],
)
def test_no_option_echoes_a_password_in_its_error(tmp_path: Path, args: list[str], flag: str) -> None:
    """Item 9's sibling: only --github-url's errors were redacted; a URL with
    credentials pasted into any other option came back whole in the usage
    line ("--report: folder '…/https:/u:CFGPW@h' does not exist"). Every
    option's error is one line naming the option, without the password, in
    the CLI and in pytest."""
    proc = cli(args, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith(f"spark-preflight: error: {flag}") and proc.stderr.count("\n") == 1
    assert "CFGPW" not in proc.stderr, proc.stderr
    spark = [f"--spark-{args[0][2:]}={args[1]}"]
    done = pytest_run(["--spark-preflight", *spark], tmp_path)
    assert done.returncode == pytest.ExitCode.USAGE_ERROR
    assert f"ERROR: --spark-{flag[2:]}" in done.stderr and "CFGPW" not in done.stderr + done.stdout, done.stderr


# --------------------------------------------------------------------------- item 10: ini values


def test_bad_ini_boolean_names_its_key_and_spares_the_plain_run(pytester: pytest.Pytester) -> None:
    """``spark_preflight_strict = maybe``: pytest's own message was "invalid
    truth value 'maybe'" with no key. A plain run does not read the key and
    passes; the preflight run refuses with one line naming it (exit 4)."""
    pytester.makeini("[pytest]\nspark_preflight_strict = maybe\n")
    pytester.makepyfile(test_user="def test_user():\n    pass\n")
    plain = pytester.runpytest("-p", "no:randomly")
    assert plain.ret == pytest.ExitCode.OK
    preflight = pytester.runpytest("-p", "no:randomly", "--spark-preflight")
    assert preflight.ret == pytest.ExitCode.USAGE_ERROR
    assert [ln for ln in preflight.errlines if ln.strip()] == [
        "ERROR: spark_preflight_strict (ini): expected true or false, got 'maybe'"
    ]


def test_bad_spark_preflight_enabled_warns_on_a_plain_run(pytester: pytest.Pytester) -> None:
    """``spark_preflight_enabled = maybe`` stopped every pytest run of the
    project. Now a plain run passes with one warning naming the key; asked for
    explicitly (``--spark-preflight``), the run refuses with that line."""
    pytester.makeini("[pytest]\nspark_preflight_enabled = maybe\n")
    pytester.makepyfile(test_user="def test_user():\n    pass\n")
    plain = pytester.runpytest("-p", "no:randomly")
    assert plain.ret == pytest.ExitCode.OK
    plain.stdout.fnmatch_lines(
        ["*PytestConfigWarning: spark_preflight_enabled (ini): expected true or false, got 'maybe'; "
         "the spark preflight does not run"]
    )
    assert "spark preflight" not in plain.stdout.str().replace("the spark preflight does not run", "")
    asked = pytester.runpytest("-p", "no:randomly", "--spark-preflight")
    assert asked.ret == pytest.ExitCode.USAGE_ERROR
    assert "ERROR: spark_preflight_enabled (ini): expected true or false, got 'maybe'" in asked.errlines


@pytest.mark.parametrize(
    ("key", "why"),
    [("spark_preflight_strict", "expected true or false, got ''"), ("spark_preflight_timeout", "expected a number, got ''")],
    ids=["bool", "number"],
)
def test_an_empty_ini_value_is_refused_alike_by_pytest_and_the_cli(
    pytester: pytest.Pytester, key: str, why: str
) -> None:
    """A sibling of item 10: ``spark_preflight_strict =`` (empty) stopped
    ``pytest --spark-preflight`` (pytest's own bool and float parsing refuse
    it) while ``spark-preflight`` read the same file as "not set" and ran.
    The same input gives the same answer: both refuse, naming the key."""
    pytester.makeini(f"[pytest]\n{key} =\n")
    preflight = pytester.runpytest_subprocess("-p", "no:randomly", "--spark-preflight", "--spark-only", "G3")
    assert preflight.ret == pytest.ExitCode.USAGE_ERROR
    assert [ln for ln in preflight.errlines if ln.strip()] == [f"ERROR: {key} (ini): {why}"]
    proc = cli(["--only", "G3"], cwd=pytester.path)
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", f"spark-preflight: error: {key} (ini): {why}\n")


def test_pyproject_numbers_and_lists_are_ini_values_without_warnings(pytester: pytest.Pytester) -> None:
    """TOML gives ``spark_preflight_timeout = 5`` as a number and ``only`` as a
    list; string-typed keys warned about both (an error from pytest 10). Run
    under ``-W error``: the values apply, and a bad number names its key."""
    pytester.makepyprojecttoml(
        "[tool.pytest.ini_options]\nspark_preflight_timeout = 5\nspark_preflight_only = [\"G9\"]\n"
    )
    ran = pytester.runpytest("-p", "no:randomly", "-W", "error", "--spark-preflight")
    assert ran.ret == pytest.ExitCode.OK, ran.stdout.str()
    ran.stdout.fnmatch_lines(["spark preflight: profile auto, timeout 5 s, only G9", "G9 *"])
    pytester.makepyprojecttoml('[tool.pytest.ini_options]\nspark_preflight_timeout = "soon"\n')
    bad = pytester.runpytest("-p", "no:randomly", "--spark-preflight")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    assert "ERROR: spark_preflight_timeout (ini): expected a number, got 'soon'" in bad.errlines


# --------------------------------------------------------------------------- item 11: --spark-config PATH


def test_spark_config_with_a_space_keeps_the_projects_ini(
    pytester: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """pytest finds the rootdir and ini before it loads plugins, so in
    ``--spark-config PATH`` the PATH read as a test path: with PATH outside the
    project the rootdir moved there and the project's ini (here: run G9 only)
    was silently ignored. That run now stops with one line asking for
    ``--spark-config=PATH``; the ``=`` form, and the space form with a config
    inside the project, run with the project's ini."""
    pytester.makeini("[pytest]\nspark_preflight_only = G9\n")
    pytester.makepyfile(test_user="def test_user():\n    pass\n")
    elsewhere = tmp_path_factory.mktemp("elsewhere") / "train.yaml"
    elsewhere.write_text("tensor_parallel_size: 1\n")
    inside = pytester.path / "configs" / "train.yaml"
    inside.parent.mkdir()
    inside.write_text("tensor_parallel_size: 1\n")

    spaced = pytester.runpytest("-p", "no:randomly", "--spark-preflight", "--spark-config", str(elsewhere))
    assert spaced.ret == pytest.ExitCode.USAGE_ERROR
    lines = [ln for ln in spaced.errlines if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"ERROR: --spark-config {elsewhere}: pytest read "), lines
    assert lines[0].endswith(f"{pytester.path / 'tox.ini'} was not read); write --spark-config={elsewhere}")

    for args in (["--spark-config=" + str(elsewhere)], ["--spark-config", "configs/train.yaml"]):
        ran = pytester.runpytest("-p", "no:randomly", "--spark-preflight", *args)
        assert ran.ret == pytest.ExitCode.OK, (args, ran.stdout.str())
        ran.stdout.fnmatch_lines(["spark preflight: *only G9", f"rootdir: {pytester.path}"])
        assert "G3 " not in ran.stdout.str(), "the ini's spark_preflight_only = G9 applies"


def test_spark_config_with_a_space_costs_a_plain_run_nothing(pytester: pytest.Pytester) -> None:
    """A plain run without ``--spark-*`` values is not asked anything (the
    rootdir check runs only when a ``--spark-<value>`` flag stands alone)."""
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_user="def test_user():\n    pass\n")
    assert pytester.runpytest("-p", "no:randomly").ret == pytest.ExitCode.OK
