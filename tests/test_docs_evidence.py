"""Every threshold has its figure and where it comes from, in the repository.

docs/EVIDENCE.md's threshold table and docs/REFERENCE.md's (the reference the
README links to) must list every key of
``pytest_dgx_spark/thresholds.py`` with its defaults, and each source must be a
capture file that is in ``tests/data/`` (each starts with its ``# source:``
line) with its public address, or say "chosen, no source" and why. A figure
changed in the code without its row, or a row citing a file the repository
does not have, fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_dgx_spark.thresholds import THRESHOLDS

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
CAPTURE_FILE = re.compile(r"`(?:tests/data/[\w./-]+/)?([\w.-]+\.txt)`")


def table(text: str, heading: str) -> dict[str, list[str]]:
    """The rows of the first table under ``heading``: key -> cells."""
    section = text.split(heading, 1)[1] if heading in text else ""
    rows: dict[str, list[str]] = {}
    for line in section.splitlines():
        if rows and not line.startswith("|"):
            break
        m = re.match(r"\| `(\w+)` \|", line)
        if m:
            rows[m.group(1)] = [c.strip() for c in line.strip().strip("|").split(" | ")]
    return rows


def cited_files(cell: str) -> list[Path]:
    found = []
    for m in CAPTURE_FILE.finditer(cell):
        hits = sorted(DATA.glob(f"*/{m.group(1)}"))
        assert hits, f"{m.group(1)} is cited but not in tests/data/"
        found.extend(hits)
    return found


EVIDENCE = table((ROOT / "docs" / "EVIDENCE.md").read_text(), "## Where each threshold comes from")
REFERENCE = table((ROOT / "docs" / "REFERENCE.md").read_text(), "### Thresholds")


@pytest.mark.parametrize("name", sorted(THRESHOLDS))
def test_evidence_gives_every_threshold_its_value_and_source(name: str) -> None:
    assert name in EVIDENCE, f"{name} has no row in docs/EVIDENCE.md"
    _key, gb10, generic, _unit, source = EVIDENCE[name]
    t = THRESHOLDS[name]
    assert (gb10, generic.split(" ")[0]) == (f"{t.gb10:g}", f"{t.generic:g}")
    files = cited_files(source)
    assert "chosen, no source" in source or "https://" in source or files, f"{name}: no source: {source}"
    for path in files:  # a public capture: its first line says where it was posted, and so does the row
        if path.parent.name == "gb10":
            assert path.read_text().startswith("# source:"), path
            assert "https://" in source or "not recorded" in source, f"{name}: {path.name} without its address"


@pytest.mark.parametrize("name", sorted(THRESHOLDS))
def test_the_reference_table_shows_every_threshold_with_a_source(name: str) -> None:
    assert name in REFERENCE, f"{name} has no row in docs/REFERENCE.md's thresholds table"
    _key, gb10, generic, _unit, _what, source = REFERENCE[name]
    assert (gb10, generic.split(" ")[0]) == (f"{THRESHOLDS[name].gb10:g}", f"{THRESHOLDS[name].generic:g}")
    cited_files(source)
    assert source not in ("", "—"), f"{name}: no source in docs/REFERENCE.md"
    assert "chosen" in source or CAPTURE_FILE.search(source) or "https://" in source, source
