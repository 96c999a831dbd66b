"""tests/laterchecks.py: a run's lines taken back to the checks a golden text names, on a catalog
with one check more than the golden text (an 11th, ``G<last+1>``, made up here)."""

from __future__ import annotations

import pytest
from laterchecks import named, outcomes_without_later, without_later

from pytest_dgx_spark import catalog

LAST = catalog.IDS[-1]
NEW = f"G{catalog.CHECKS[-1].number + 1}"
#: a golden run of every check the catalog has now: one line each and the verdict
GOLDEN = [f"{cid} PASS: fine" for cid in catalog.IDS]


@pytest.fixture
def one_more(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(catalog, "IDS", (*catalog.IDS, NEW))


def test_with_every_check_named_the_lines_come_back_as_they_are() -> None:
    got = [*GOLDEN, f"{NEW} SKIP: new", "verdict: whatever (x; 1 PASS)"]
    assert named(GOLDEN) == set(catalog.IDS)
    assert without_later(got, GOLDEN) == got


def test_a_later_skip_leaves_the_named_checks_ready(one_more: None) -> None:
    n = len(GOLDEN)
    verdict = f"verdict: ready-with-warnings ({NEW} skipped; {n} PASS, 1 SKIP)"
    got = [*GOLDEN, f"{NEW} SKIP: not read", verdict]
    assert without_later(got, [*GOLDEN, "verdict: ready"]) == [*GOLDEN, f"verdict: ready ({n} PASS)"]


def test_a_later_check_leaves_the_causes_and_counts_of_the_others(one_more: None) -> None:
    verdict = (f"verdict: ready-with-warnings (G4, {NEW} skipped and G8 skipped by choice; "
               "4 PASS, 3 SKIP, 2 INFO)")
    got = ["G4 SKIP: x", f"{NEW} SKIP: y", verdict]
    want = ["G4 SKIP: x",
            "verdict: ready-with-warnings (G4 skipped and G8 skipped by choice; 4 PASS, 2 SKIP, 2 INFO)"]
    assert without_later(got, GOLDEN) == want


def test_a_later_fail_no_longer_blocks_and_a_named_fail_still_does(one_more: None) -> None:
    n = len(GOLDEN)
    got = [*GOLDEN, f"{NEW} FAIL: swap", f"verdict: blocked ({NEW} failed; {n} PASS, 1 FAIL)"]
    assert without_later(got, GOLDEN)[-1] == f"verdict: ready ({n} PASS)"
    got = ["G3 FAIL: big", f"{NEW} FAIL: swap", f"verdict: blocked (G3, {NEW} failed; 2 FAIL)"]
    want = ["G3 FAIL: big", "verdict: blocked (G3 failed; 1 FAIL)"]
    assert without_later(got, ["G3 FAIL: big", *GOLDEN]) == want


def test_a_later_check_not_run_leaves_the_list_and_count(one_more: None) -> None:
    others = [c for c in catalog.IDS if c != "G3"]  # the catalog with NEW
    got = ["G3 INFO: x", f"{', '.join(others)} not run: deselected (-k G3)",
           f"verdict: ready-with-warnings (1 INFO, {len(others)} not run)"]
    golden_names = [f"{c} PASS: fine" for c in catalog.IDS if c != NEW]
    assert without_later(got, golden_names) == [
        "G3 INFO: x", f"{', '.join(c for c in others if c != NEW)} not run: deselected (-k G3)",
        f"verdict: ready-with-warnings (1 INFO, {len(others) - 1} not run)",
    ]


def test_pytest_outcomes_lose_the_later_checks_tests(one_more: None) -> None:
    got = ["G3 WARN: x", f"{NEW} PASS: y", "verdict: x"]
    assert outcomes_without_later({"passed": 1, "warned": 1}, got, GOLDEN) == {"warned": 1}
    assert outcomes_without_later({"passed": 2}, ["G3 PASS: x"], GOLDEN) == {"passed": 2}
