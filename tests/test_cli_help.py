"""spark-preflight's own help (issue 11, issue 24 item 9): texts for a CLI user, choices listed,
grouped, at most 80 columns, exit codes in the epilog, thresholds in ``--help-thresholds``,
no pytest-only ``--gate``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_dgx_spark import cli, options
from pytest_dgx_spark.thresholds import THRESHOLDS

CHECKS = Path(cli.__file__).parent / "checks"


@pytest.fixture(scope="module")
def help_text() -> str:
    return cli.build_parser().format_help()


def test_help_lists_exit_codes_and_help_thresholds_every_threshold_name(help_text: str) -> None:
    """Issue 24, item 9: the thresholds moved from ``--help`` to ``--help-thresholds``."""
    section = help_text.split("exit codes:", 1)[1]
    for code in ("0", "1", "2", "128+N", "141"):
        assert re.search(rf"^  {re.escape(code)} +\S", section, re.M), code
    listed = subprocess.run([sys.executable, "-m", "pytest_dgx_spark.cli", "--help-thresholds"],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert listed.returncode == 0 and listed.stderr == ""
    for name, t in THRESHOLDS.items():
        assert re.search(rf"^  {name} = {t.gb10:g} / {t.generic:g}\b", listed.stdout, re.M), name
        assert name not in help_text.replace("NAME=VALUE", ""), name


@pytest.mark.parametrize("columns", ["200", "80", "60"])
def test_help_is_grouped_and_at_most_80_columns(columns: str) -> None:
    """140 lines, one flat group of 20 options, 19 lines wider than 80 columns: now
    grouped, and as wide as the terminal up to 80."""
    shown = subprocess.run([sys.executable, "-m", "pytest_dgx_spark.cli", "--help"], capture_output=True,
                           text=True, timeout=60, env={**os.environ, "COLUMNS": columns})  # fmt: skip
    assert shown.returncode == 0
    lines = shown.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, [line for line in lines if len(line) > 80]
    for title in ("what to check:", "how the machine is probed:", "output and files:", "configuration (as pytest's):"):
        assert title in lines, title
    groups = shown.stdout.split("\n\n")
    assert max(len(re.findall(r"^  --", g, re.M)) for g in groups) < 12


def test_help_lists_the_choices(help_text: str) -> None:
    for choices in ("{auto,gb10,generic}", "{fail,warn}", "{nvfp4,fp8,bf16}"):
        assert choices in help_text


def test_help_speaks_to_a_cli_user(help_text: str) -> None:
    """No test to fail or skip, no README beside an installed command, each
    option listed once (the ``--spark-`` twin is accepted, not listed)."""
    assert "fails the test" not in help_text
    assert "README" not in help_text
    assert not re.search(r"^\s+--gate\b", help_text, re.M)
    assert not re.search(r"^\s+--\w[\w-]*.*, --spark-", help_text, re.M)
    strict = help_text.split("\n  --strict", 1)[1].split("--report")[0]
    assert "exit code 1" in strict


def test_gate_is_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    for flag in ("--gate", "--spark-gate"):
        assert cli.main([flag]) == cli.EXIT_USAGE
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("spark-preflight: error: --gate is a pytest option")


def test_every_flag_a_check_line_quotes_is_accepted_by_the_cli() -> None:
    """Check lines are shared with pytest and quote ``--spark-<name>``; the CLI
    accepts that spelling, so the advice works as written."""
    quoted = set()
    for path in CHECKS.glob("g*/*.py"):
        quoted |= set(re.findall(r"--spark-([a-z][a-z-]*[a-z])", path.read_text()))
    assert quoted, "the checks quote some flags"
    parser = cli.build_parser()
    for name in sorted(quoted - options.PYTEST_ONLY):
        opt = options.BY_NAME[name]
        value = [] if opt.kind == "bool" else ["1"]
        ns = parser.parse_args([opt.flag, *value])
        assert getattr(ns, opt.dest) is not None, name


def _help(*args: str) -> str:
    shown = subprocess.run([sys.executable, "-m", "pytest_dgx_spark.cli", *args, "--help"], capture_output=True,
                           text=True, timeout=60, env={**os.environ, "COLUMNS": "80"})  # fmt: skip
    assert shown.returncode == 0 and shown.stderr == "", shown.stderr
    return shown.stdout


def test_the_top_level_usage_shows_the_subcommand_and_offers_no_diagnose_flag(help_text: str) -> None:
    """Issue 34 item 3: the usage line did not show ``diagnose`` yet listed ``--diagnose LOG``, which
    always fails outside it (it still does, in one line, and the subcommand reads it)."""
    usage = help_text.split("\n\n", 1)[0]
    assert "spark-preflight diagnose" in usage, usage
    assert "diagnose " in help_text.split("commands", 1)[1].split("\n\n", 1)[0]
    assert not re.search(r"--diagnose\b|--signatures\b", help_text), help_text


def test_diagnose_help_leads_with_its_own_options_and_is_short() -> None:
    """It was ~100 lines, the preflight's options first and its own last, after --intrusive and
    --drop-caches; the live checks still take them, unlisted."""
    text = _help("diagnose")
    lines = text.splitlines()
    assert len(lines) <= 45, text
    flags = re.findall(r"^  (-[\w-]+|LOG)\b", text, re.M)
    assert flags[:4] == ["LOG", "-h", "--kernel-log", "--no-machine"], flags
    for flag in ("--intrusive", "--drop-caches", "--workload-gb", "--diagnose"):
        assert not re.search(rf"^  {flag}\b|\[{flag}\b", text, re.M), flag
    assert "spark-preflight --help" in text  # where the rest are
    ns = cli.build_diagnose_parser().parse_args(["--workload-gb", "70", "--intrusive", "a.log"])
    assert (ns.spark_workload_gb, ns.spark_intrusive, ns.logs) == ("70", True, ["a.log"])


def test_pytest_help_shows_the_choices(pytester: pytest.Pytester) -> None:
    """``pytest --help`` showed ``--spark-profile=PROFILE``: the values, like the CLI's, from options.py."""
    result = pytester.runpytest_subprocess("-p", "dgx_spark", "--help")
    text = result.stdout.str()
    for flag in ("--spark-profile={auto,gb10,generic}", "--spark-precision={nvfp4,fp8,bf16}",
                 "--spark-tp-across-nodes={fail,warn}"):  # fmt: skip
        assert flag in text, flag
