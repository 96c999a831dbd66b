"""spark-preflight: the same lines as the plugin, exit codes 0/1/2, JSON, report."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pytest_dgx_spark import catalog

from conftest import spark_cli as cli

GLINE = re.compile(rf"^(?:{'|'.join(catalog.IDS)}) (?:PASS|FAIL|WARN|SKIP|INFO): \S")
#: an id one past the last check's: no such check
NO_SUCH = f"G{catalog.CHECKS[-1].number + 1}"


@pytest.fixture(autouse=True)
def _gb10(spark_env):
    return spark_env



def test_ten_lines_then_the_verdict_exit_0(tmp_path: Path) -> None:
    proc = cli("--offline", cwd=tmp_path)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0, proc.stderr
    n = len(catalog.IDS)
    assert [ln.split()[0] for ln in lines[:n]] == list(catalog.IDS)
    assert all(GLINE.match(ln) for ln in lines[:n])
    assert lines[n].startswith("verdict: ")
    assert len(lines) == n + 1


def test_fail_exits_1(tmp_path: Path) -> None:
    proc = cli("--only", "G3", "--workload-gb", "500", cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stdout.splitlines()[0].startswith("G3 FAIL: workload 500 GiB")
    assert proc.stdout.splitlines()[-1].startswith("verdict: blocked (G3 failed")


def test_warn_exits_0_and_1_with_strict(tmp_path: Path) -> None:
    assert cli("--only", "G3", "--workload-gb", "100", cwd=tmp_path).returncode == 0
    assert cli("--only", "G3", "--workload-gb", "100", "--strict", cwd=tmp_path).returncode == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--timeout", "-1"], "spark-preflight: error: --timeout: must be > 0, got '-1'"),
        (
            ["--thermal-seconds", "abc"],
            "spark-preflight: error: --thermal-seconds: expected a number, got 'abc'",
        ),
        (
            ["--only", NO_SUCH],
            f"spark-preflight: error: --only: '{NO_SUCH}' is not a check id "
            f"(expected {catalog.SPAN}, e.g. G1,G5)",
        ),
        (
            ["--report", "/nonexistent/dir/r.json"],
            "spark-preflight: error: --report: folder '/nonexistent/dir' does not exist",
        ),
        (["--bogus"], "spark-preflight: error: unrecognized arguments: --bogus"),
    ],
)
def test_bad_option_exits_2_with_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    proc = cli(*args, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [message]


def test_unreadable_project_config_exits_2(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.pytest.ini_options\nbroken = ")
    proc = cli(cwd=tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"spark-preflight: error: {tmp_path / 'pyproject.toml'}: invalid TOML"
    )


def test_reads_the_projects_ini_and_flags_win(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nspark_preflight_only = G3\nspark_preflight_workload_gb = 500\n"
    )
    sub = tmp_path / "sub"
    sub.mkdir()
    proc = cli(cwd=sub)
    assert proc.returncode == 1 and proc.stdout.startswith("G3 FAIL")
    assert cli("--workload-gb", "10", cwd=sub).stdout.startswith("G3 PASS")


def test_json_output(tmp_path: Path) -> None:
    proc = cli("--only", "G3,G9", "--workload-gb", "100", "--json", cwd=tmp_path)
    data = json.loads(proc.stdout)
    assert data["schema"] == "pytest_spark/1"
    assert [r["id"] for r in data["results"]] == ["G3", "G9"]
    assert data["results"][0]["status"] == "WARN"
    assert data["lines"][0].startswith("G3 WARN:")
    assert data["host"]["gpu"] == "NVIDIA GB10"


def test_report_file(tmp_path: Path) -> None:
    proc = cli("--only", "G3", "--report", "env-report.json", cwd=tmp_path)
    assert proc.returncode == 0
    doc = json.loads((tmp_path / "env-report.json").read_text())
    assert doc["checks"]["G3"].startswith("info: ")
    # the nine others are "not run", as pytest's --spark-only says (issue 24 item 3): never ready
    assert {c: v for c, v in doc["checks"].items() if c != "G3"} == {
        c: "not run: deselected (--only G3)" for c in catalog.IDS if c != "G3"
    }
    assert doc["verdict"] == "ready-with-warnings" and doc["platform"] == "dgx-spark"


def test_a_chart_that_cannot_be_written_is_said_not_dropped(tmp_path: Path, matplotlib_loaded: None) -> None:
    """G4's chart goes beside ``--report`` (``r.thermal-g4.svg``). The CLI
    dropped the note when it could not be written there (a FIFO), so the
    user never knew; pytest printed it. Now one warning line on stderr: the
    report itself was written, so the exit code stays."""
    import os
    import stat

    chart = tmp_path / "r.thermal-g4.svg"
    os.mkfifo(chart)
    proc = cli("--only", "G4", "--thermal-seconds", "0.3", "--report", str(tmp_path / "r.json"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == (
        f"spark-preflight: warning: could not write {chart}: a FIFO, not a regular file; nothing was written\n"
    )
    assert stat.S_ISFIFO(chart.stat().st_mode)
    assert json.loads((tmp_path / "r.json").read_text())["checks"]["G4"].startswith("info: ")


def test_cli_and_plugin_print_the_same_lines(pytester: pytest.Pytester) -> None:
    args = ["--only", "G3,G4,G6,G7,G9", "--workload-gb", "100", "--offline"]
    proc = cli(*args, cwd=pytester.path)
    cli_lines = [ln for ln in proc.stdout.splitlines() if GLINE.match(ln)]
    result = pytester.runpytest(
        "--spark-preflight",
        "-p",
        "no:randomly",
        *[a.replace("--", "--spark-", 1) if a.startswith("--") else a for a in args],
    )
    plugin_lines = [ln for ln in result.stdout.lines if GLINE.match(ln)]
    assert cli_lines == plugin_lines
    assert len(cli_lines) == 5


def test_console_script_is_installed() -> None:
    from importlib import metadata

    scripts = {ep.name: ep.value for ep in metadata.entry_points(group="console_scripts")}
    assert scripts["spark-preflight"] == "pytest_dgx_spark.cli:main"
    plugins = {ep.name: ep.value for ep in metadata.entry_points(group="pytest11")}
    assert plugins["dgx_spark"] == "pytest_dgx_spark.plugin"


def test_under_torchrun_only_rank_0_writes_the_report_path(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("RANK", "1")
    proc = cli("--only", "G3", "--report", "env-report.json", cwd=tmp_path)
    assert proc.returncode == 0
    assert not (tmp_path / "env-report.json").exists()
    assert json.loads((tmp_path / "env-report.rank1.json").read_text())["checks"]["G3"].startswith("info: ")


def test_credentials_in_the_github_url_never_reach_the_report(tmp_path: Path) -> None:
    proc = cli(
        "--only",
        "G3",
        "--offline",
        "--github-url",
        "https://user:s3cr3t@ghe.example/api/v3",
        "--report",
        "r.json",
        "--json",
        cwd=tmp_path,
    )
    assert proc.returncode == 0
    assert "s3cr3t" not in proc.stdout + proc.stderr + (tmp_path / "r.json").read_text()
    assert json.loads(proc.stdout)["options"]["github-url"] == "https://ghe.example/api/v3"


# --------------------------------------------------------------------------- robustness (issue 11)


def test_closed_stdout_ends_quietly(tmp_path: Path) -> None:
    """``spark-preflight -v | head -1`` ended in "internal error
    (BrokenPipeError)", exit 2. A reader that closes the pipe is no error of
    ours: nothing on stderr, and 141 (128 + SIGPIPE), what the shell reports
    for a program SIGPIPE stopped."""
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest_dgx_spark.cli", "-v", "--offline", "--only", "G3,G4,G6,G9"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the first line is written
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 141, err
    assert err == ""


def test_absurd_durations_are_refused_at_once(tmp_path: Path) -> None:
    """``--thermal-seconds 1e12 --timeout 3`` was accepted and ran until killed."""
    # G3 only: were the value accepted, this run would still end (with G4, never)
    proc = cli("--thermal-seconds", "1e12", "--timeout", "3", "--only", "G3", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == ["spark-preflight: error: --thermal-seconds: must be <= 3600, got '1e12'"]


def test_gathering_options_on_a_replay_say_they_do_nothing(tmp_path: Path) -> None:
    """A replay decides from the capture's facts: options that change what is
    gathered cannot change them, and one line says so; deciding options
    (--workload-gb, thresholds) still apply, silently."""
    captures = Path(__file__).resolve().parent / "data" / "captures"
    proc = cli(
        "--replay", str(captures / "h200-healthy.json.gz"), "--only", "G3,G4", "--intrusive",
        "--thermal-seconds", "5", "--workload-gb", "10", cwd=tmp_path,
    )  # fmt: skip
    assert proc.stderr.splitlines()[0] == (
        "spark-preflight: note: --intrusive, --thermal-seconds have no effect on a replay: "
        "the capture's facts were gathered by the run that made it"
    )
    assert proc.stderr.splitlines()[1:] == [
        "spark-preflight: note: replay of h200-healthy.json.gz (captured 2026-12-01T05:03:58+0000, host vm, "
        "NVIDIA H200): this machine was not read"
    ]
    assert proc.stdout.startswith("G3 ")
    plain = cli("--replay", str(captures / "h200-healthy.json.gz"), "--only", "G3", "--workload-gb", "10", cwd=tmp_path)
    assert plain.stderr.splitlines() == proc.stderr.splitlines()[1:]
