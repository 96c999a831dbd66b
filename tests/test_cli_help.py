"""spark-preflight's own help (issue 11): texts for a CLI user, choices listed,
exit codes and threshold names in the epilog, no pytest-only ``--gate``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_dgx_spark import cli, options
from pytest_dgx_spark.thresholds import THRESHOLDS

CHECKS = Path(cli.__file__).parent / "checks"


@pytest.fixture(scope="module")
def help_text() -> str:
    return cli.build_parser().format_help()


def test_help_lists_exit_codes_and_every_threshold_name(help_text: str) -> None:
    section = help_text.split("exit codes:", 1)[1]
    for code in ("0", "1", "2", "128+N"):
        assert re.search(rf"^  {re.escape(code)} +\S", section, re.M), code
    for name, t in THRESHOLDS.items():
        assert re.search(rf"^  {name} = {t.gb10:g} / {t.generic:g}\b", help_text, re.M), name


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
    strict = help_text.split("--strict", 2)[2].split("--report")[0]
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
    for path in CHECKS.glob("g*.py"):
        quoted |= set(re.findall(r"--spark-([a-z][a-z-]*[a-z])", path.read_text()))
    assert quoted, "the checks quote some flags"
    parser = cli.build_parser()
    for name in sorted(quoted - options.PYTEST_ONLY):
        opt = options.BY_NAME[name]
        value = [] if opt.kind == "bool" else ["1"]
        ns = parser.parse_args([opt.flag, *value])
        assert getattr(ns, opt.dest) is not None, name
