"""The docs say what the program does, where a test can hold them to it (issue 34 item 2):
the captures CAPTURE.md lists are the files shipped, the verdict rule is one text in the
README and REFERENCE.md and the program decides by it, what each ``--help`` lists, and the
checks: one row each in REFERENCE.md's table, and no page that counts them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_dgx_spark import catalog, cli, options
from pytest_dgx_spark.model import Result, Status, verdict
from pytest_dgx_spark.thresholds import THRESHOLDS

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
CAPTURES = ROOT / "tests" / "data" / "captures"
RULE = re.compile(r"The verdict is `blocked` on .*?else `ready`\.", re.S)


def words(text: str) -> str:
    return " ".join(text.split())


def test_capture_md_lists_every_shipped_capture_and_no_other() -> None:
    """It said "four H200 captures and one of the GB10 double" and missed h100-field.json.gz."""
    text = (DOCS / "CAPTURE.md").read_text()
    listed = set(re.findall(r"^- `([\w.-]+\.json\.gz)`", text, re.M))
    shipped = {p.name for p in CAPTURES.glob("*.json.gz")}
    assert shipped and listed == shipped, (sorted(listed), sorted(shipped))


def test_the_verdict_rule_is_one_text_in_the_readme_and_the_reference() -> None:
    """REFERENCE.md said "ready-with-warnings on any WARN or SKIP"; a SKIP you asked for is by choice."""
    found = {name: [words(m) for m in RULE.findall(path.read_text())]
             for name, path in (("README", ROOT / "README.md"), ("REFERENCE", DOCS / "REFERENCE.md"))}  # fmt: skip
    assert all(len(rules) == 1 for rules in found.values()), found
    assert found["README"] == found["REFERENCE"], found
    assert "a SKIP you did not ask for" in found["README"][0] and "a check not run" in found["README"][0]


def _r(cid: str, status: Status, by_choice: bool = False) -> Result:
    return Result(cid, status, "x", by_choice=by_choice)


@pytest.mark.parametrize(
    ("results", "strict", "not_run", "expected"),
    [
        ([_r("G1", Status.PASS), _r("G8", Status.SKIP, by_choice=True)], False, (), "ready"),
        ([_r("G1", Status.PASS), _r("G8", Status.SKIP)], False, (), "ready-with-warnings"),
        ([_r("G1", Status.PASS)], False, ("G2",), "ready-with-warnings"),
        ([_r("G1", Status.WARN)], False, (), "ready-with-warnings"),
        ([_r("G1", Status.WARN)], True, (), "blocked"),
        ([_r("G1", Status.FAIL), _r("G8", Status.SKIP, by_choice=True)], False, (), "blocked"),
        ([_r("G1", Status.PASS), _r("G3", Status.INFO)], False, (), "ready"),
    ],
)
def test_the_program_decides_by_that_rule(results: list[Result], strict: bool, not_run: tuple[str, ...],
                                          expected: str) -> None:  # fmt: skip
    assert verdict(results, strict=strict, not_run=not_run).value == expected


def test_what_each_help_is_said_to_list_it_lists() -> None:
    """REFERENCE.md said ``spark-preflight --help`` lists every option and threshold: the
    thresholds are under ``--help-thresholds``."""
    text = words((DOCS / "REFERENCE.md").read_text())
    assert "`spark-preflight --help` lists every option and threshold" not in text
    assert "`spark-preflight --help` lists every option, `spark-preflight --help-thresholds` every threshold" in text
    shown = cli.build_parser().format_help()
    for opt in options.OPTIONS:
        if options.cli_shown(opt, ""):
            assert re.search(rf"^  {re.escape(opt.cli_flag)}\b", shown, re.M), opt.cli_flag
    listed = cli.thresholds_help()
    assert all(re.search(rf"^  {name} = ", listed, re.M) for name in THRESHOLDS)


def test_the_reference_has_one_row_per_check() -> None:
    """A check's docs row: its line in REFERENCE.md's table under "The checks" (id, gotcha,
    marker, what it reads, what it decides), in the catalog's order, with the check's marker.
    Adding a check adds that row; no other page lists or counts the checks (next test)."""
    text = (DOCS / "REFERENCE.md").read_text()
    table = text.split("\n## The checks\n", 1)[1].split("\n#", 1)[0]
    rows = re.findall(r"^\| (G\d+) \| [^|]+ \| `(\w+)` \|", table, re.M)
    assert rows == [(c.id, c.marker) for c in catalog.CHECKS]


def test_no_page_counts_the_checks() -> None:
    """"The ten checks" or "G1–G10" on a page is wrong the day another check lands, and a new
    check edits one docs row, not every page that counts. SEED.md tells where the first ten
    came from: history, not a count of today's checks."""
    first, last = catalog.IDS[0], catalog.IDS[-1]
    counting = re.compile(
        rf"\b(?:{catalog.HOW_MANY}|{len(catalog.IDS)})[ -](?:known |preflight )?"
        r"(?:checks?|gotchas|lines|test results)\b"
        rf"|\b{first} ?(?:–|-|\.\.) ?{last}\b",
        re.IGNORECASE,
    )
    pages = [ROOT / "README.md", *(p for p in sorted(DOCS.glob("*.md")) if p.name != "SEED.md")]
    said = {p.name: counting.findall(words(p.read_text())) for p in pages}
    assert {name: found for name, found in said.items() if found} == {}
