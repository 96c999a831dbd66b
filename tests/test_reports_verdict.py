"""The verdict line says what made it so (issue 24, item 4).

``ready-with-warnings`` with no WARN names the SKIPs that made it; a SKIP the
user asked for (``--spark-offline``) is not a warning, so such a run reads
``ready``; ``--spark-strict`` blocks on a WARN and says so, never "failed".
"""

from __future__ import annotations

import json

import pytest

from pytest_dgx_spark import catalog
from pytest_dgx_spark.model import Result, Status, verdict, verdict_line


def r(cid: str, status: Status, **kw: bool) -> Result:
    return Result(cid, status, f"{cid} {status.value.lower()}", **kw)


def test_a_skip_that_made_the_verdict_is_named() -> None:
    rs = [r("G1", Status.PASS), r("G7", Status.SKIP)]
    assert verdict_line(rs) == "verdict: ready-with-warnings (G7 skipped; 1 PASS, 1 SKIP)"
    # with a WARN the counts say why: the line is as before
    assert verdict_line([*rs, r("G5", Status.WARN)]) == "verdict: ready-with-warnings (1 PASS, 1 WARN, 1 SKIP)"
    many = [r(c, Status.SKIP) for c in catalog.IDS]
    assert verdict_line(many) == (
        f"verdict: ready-with-warnings (G1, G2, G3, G4, and {len(many) - 4} more skipped; {len(many)} SKIP)"
    )


def test_a_skip_by_the_users_choice_leaves_the_run_ready() -> None:
    offline = r("G8", Status.SKIP, by_choice=True)
    rs = [r("G1", Status.PASS), offline]
    assert verdict(rs) is verdict(rs[:1]) and verdict(rs).value == "ready"
    assert verdict_line(rs) == "verdict: ready (G8 skipped by choice; 1 PASS, 1 SKIP)"
    both = [*rs, r("G7", Status.SKIP)]
    assert verdict_line(both) == "verdict: ready-with-warnings (G7 skipped and G8 skipped by choice; 1 PASS, 2 SKIP)"
    assert verdict(rs, not_run={"G3": "deselected"}).value == "ready-with-warnings"  # not run: not verified
    assert Result.from_dict(offline.to_dict()).by_choice and not Result.from_dict({"id": "G1", "status": "PASS"}).by_choice


def test_strict_blocks_on_a_warn_without_calling_it_a_failure() -> None:
    rs = [r("G1", Status.PASS), r("G6", Status.WARN)]
    assert verdict_line(rs, strict=True) == "verdict: blocked (G6 WARN under --strict; 1 PASS, 1 WARN)"
    rs.append(r("G3", Status.FAIL))
    assert verdict_line(rs, strict=True) == (
        "verdict: blocked (G3 failed and G6 WARN under --strict; 1 PASS, 1 FAIL, 1 WARN)"
    )
    assert verdict_line(rs) == "verdict: blocked (G3 failed; 1 PASS, 1 FAIL, 1 WARN)"


def test_short_line_takes_the_terminals_width() -> None:
    long = Result("G3", Status.WARN, "workload fits only after dropping the page cache " * 4, "free memory " * 6)
    for width in (60, 80, 200):
        line = long.short_line(width)
        assert len(line) <= width and line.startswith("G3 WARN: ") and "; fix: " in line
    assert long.short_line() == long.short_line(120)


@pytest.fixture
def gb10(spark_env):
    return spark_env


def test_offline_on_purpose_reads_ready_in_the_terminal_and_the_report(pytester: pytest.Pytester, gb10) -> None:
    """All ten on a healthy GB10 double with ``--spark-offline``: G8's SKIP was
    asked for, so the run reads ``ready`` and says why G8 did not look. (With
    ``--spark-only G8`` the nine others would be "not run": never ``ready``.)"""
    result = pytester.runpytest("-p", "no:randomly", "--spark-preflight", "--spark-offline",
                                "--spark-report", "env-report.json")
    result.stdout.fnmatch_lines(["G8 SKIP: offline*", "verdict: ready (G8 skipped by choice; * 1 SKIP*)"])
    assert result.ret == 0
    assert json.loads((pytester.path / "env-report.json").read_text())["verdict"] == "ready"


def test_strict_warn_says_strict_in_the_terminal(pytester: pytest.Pytester, gb10) -> None:
    result = pytester.runpytest("-p", "no:randomly", "--spark-preflight", "--spark-only", "G3", "--spark-strict",
                                "--spark-workload-gb", "100")
    others = len(catalog.IDS) - 1
    result.stdout.fnmatch_lines(
        ["G3 WARN: *", f"verdict: blocked (G3 WARN under --strict; 1 WARN, {others} not run)"]
    )
    assert "failed;" not in result.stdout.str().split("spark preflight =")[-1]
