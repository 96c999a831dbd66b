"""Finding codes (issue 31, item 3): one registry (``pytest_dgx_spark/codes.py``), a code at every
finding site, none renamed once released, docs/REFERENCE.md's table generated from the registry,
and one snapshot of every finding's text, rendered from recorded facts.

``tests/data/findings/corpus.json`` holds, per code, the facts and options that make a check say
it (recorded from the check tests' own inputs; a few built by hand for findings the tests reach
only in a child). After a change of wording, run ``python tests/test_finding_codes.py --update``
and read the diff of ``tests/data/findings/snapshot.txt``.

A check added later keeps its examples at home: its own test module (``tests/test_g<NN>_*.py``)
declares ``FINDING_EXAMPLES = {"G11.swap-on": {"facts": {...}, "params": {...}}, ...}``, a literal
(read here without importing the module), one entry per code of its ``findings.py``; an entry may
add ``"line"``, the whole G-line the check must print for it. So a new check edits neither
corpus.json nor snapshot.txt, and a code has its example in exactly one of the two homes.
"""

from __future__ import annotations

import ast
import functools
import importlib
import json
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from declared import literal_in

from pytest_dgx_spark import catalog, codes
from pytest_dgx_spark.checks.kit import Params
from pytest_dgx_spark.model import Result, Status

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "pytest_dgx_spark"
CORPUS = ROOT / "tests" / "data" / "findings" / "corpus.json"
SNAPSHOT = ROOT / "tests" / "data" / "findings" / "snapshot.txt"
RELEASED = ROOT / "tests" / "data" / "released_codes.txt"
#: the name a check's own test module gives its examples (see the module's docstring)
EXAMPLES_NAME = "FINDING_EXAMPLES"
REFERENCE = ROOT / "docs" / "REFERENCE.md"
STATUSES = {s.value for s in Status}
#: the keywords that carry a code at a finding site
CODE_KEYWORDS = ("code", "codes", "ok_code")


@cache
def corpus() -> dict[str, dict[str, Any]]:
    data: dict[str, dict[str, Any]] = json.loads(CORPUS.read_text(encoding="utf-8"))
    return data


def _declared_in(path: Path) -> Iterator[tuple[str, Any]]:
    """``(code, entry)`` of the top-level ``FINDING_EXAMPLES = {...}`` literal of a test module."""
    return literal_in(path, EXAMPLES_NAME)


@cache
def declared() -> dict[str, dict[str, Any]]:
    """The examples the checks' own test modules declare (``tests/test_g<NN>_*.py``), by code."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted((ROOT / "tests").glob("test_g[0-9]*.py")):
        for code, entry in _declared_in(path):
            assert code not in out, f"{path.name}: {code}'s example is declared twice"
            assert isinstance(entry, dict) and isinstance(entry.get("facts"), dict), (
                f"{path.name}: {EXAMPLES_NAME}[{code!r}] needs a 'facts' table")  # fmt: skip
            out[code] = {"check": code.split(".", 1)[0], "params": {}, **entry}
    return out


def examples() -> dict[str, dict[str, Any]]:
    """Every code's example: corpus.json's, and those the checks' test modules declare."""
    return {**corpus(), **declared()}


def decide(entry: dict[str, Any]) -> Result:
    """The check's own decision on the recorded facts and options (pure: nothing is probed)."""
    module = importlib.import_module(f"pytest_dgx_spark.checks.{catalog.BY_ID[entry['check']].module}.check")
    facts, params = module.FACTS.from_dict(entry["facts"]), Params.from_dict(entry["params"])
    result: Result = module.evaluate(facts, params)
    return result


def render() -> str:
    """Every finding of corpus.json once: its code, the whole G-line, and the default short line."""
    blocks = []
    for code in (c for c in codes.CODES if c in corpus()):
        r = decide(corpus()[code])
        blocks.append(f"{code}\n  {r.line()}\n  {r.short_line()}\n")
    return "\n".join(blocks)


def released() -> list[str]:
    lines = RELEASED.read_text(encoding="utf-8").splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]


def literal_codes(node: ast.AST) -> list[str]:
    """The code literals of a ``code=``-style argument: a string, ``a if c else b``, a list of those
    (a forwarded name has none of its own: its caller's literal is what the scan reads)."""
    if isinstance(node, ast.Constant):
        return [node.value] if isinstance(node.value, str) and node.value else []
    if isinstance(node, ast.IfExp):
        return literal_codes(node.body) + literal_codes(node.orelse)
    if isinstance(node, (ast.List, ast.Tuple)):
        return [c for e in node.elts for c in literal_codes(e)]
    return []


def built_at_run_time(node: ast.AST) -> bool:
    """A code made of pieces (an f-string, ``+``, ``%``, ``.format``): no scan could list it."""
    return any(
        isinstance(n, (ast.JoinedStr, ast.BinOp))
        or (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "format")
        for n in ast.walk(node)
    )


@functools.cache
def package_trees() -> dict[str, ast.Module]:
    """The package's modules, parsed once per process (two tests walk them; neither changes them)."""
    paths = sorted(PACKAGE.rglob("*.py"))
    return {str(p.relative_to(ROOT)): ast.parse(p.read_text(encoding="utf-8")) for p in paths}


def code_strings(tree: ast.AST) -> set[str]:
    """Every string constant of a module that is a whole code (``"G4.xid-hardware"``)."""
    return {
        n.value for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and codes.CODE_FORMAT.fullmatch(n.value)
    }  # fmt: skip


# ------------------------------------------------------------------------------ the registry


def test_each_registry_row_is_a_well_formed_code_of_a_check() -> None:
    rows = (*codes._ROWS, *codes._WATCH_ROWS)
    assert len(rows) == len(codes.CODES) + len(codes.WATCH), "a code is declared twice"
    assert not set(codes.CODES) & set(codes.WATCH), "a watch code is a check's code too"
    for row in rows:
        assert codes.CODE_FORMAT.fullmatch(row.code), row
        assert row.check in catalog.IDS, row
        assert set(row.status.split("/")) <= STATUSES, row
        assert row.meaning and "\n" not in row.meaning and len(row.meaning) <= 110, row
    for slug, (status, meaning) in codes.PER_CHECK.items():
        assert codes.CODE_FORMAT.fullmatch(f"G1.{slug}") and status in STATUSES and meaning


def test_known_takes_registry_rows_and_each_checks_shared_codes_only() -> None:
    assert codes.known("G4.xid-hardware")
    assert codes.known("G10.check-crashed") and codes.known("G2.log-sign")
    assert not codes.known(f"G{catalog.CHECKS[-1].number + 1}.check-crashed")  # no such check
    assert not codes.known("G4.xid-hardware-2") and not codes.known("G4.log") and not codes.known("")


def test_every_code_at_a_finding_site_is_in_the_registry_and_visible_to_this_scan() -> None:
    """Statically, over the whole package: no ``code=``/``codes=``/``ok_code=`` argument is built at
    run time (so the literals are every code a check can emit), and each literal, there or
    anywhere else a whole code is written (a table row), is a registry row."""
    unseen, unknown = [], []
    for name, tree in package_trees().items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            for kw in node.keywords:
                if kw.arg in CODE_KEYWORDS:
                    if built_at_run_time(kw.value):
                        unseen.append(f"{name}:{kw.value.lineno}: {ast.unparse(kw.value)}")
                    unknown += [f"{name}:{kw.value.lineno}: {c}" for c in literal_codes(kw.value)
                                if not codes.known(c)]
        unknown += [f"{name}: {c}" for c in code_strings(tree) if not codes.known(c)]
    assert not unseen, "a code made at run time, not a literal this scan can check: " + "; ".join(unseen)
    assert not unknown, "codes not in pytest_dgx_spark/codes.py: " + "; ".join(unknown)


def test_every_registry_code_is_said_by_some_check() -> None:
    """No dead row: each code is written at a finding site (its row stays once released)."""
    said = set().union(*(code_strings(t) for n, t in package_trees().items() if not n.endswith("codes.py")))
    assert [c for c in [*codes.CODES, *codes.WATCH] if c not in said] == []


# ------------------------------------------------------------------------------ released codes


def test_no_released_code_is_renamed_or_removed() -> None:
    gone = [c for c in released() if not codes.known(c)]
    assert not gone, f"released codes missing from pytest_dgx_spark/codes.py (never rename one): {gone}"


def test_every_code_of_a_released_check_is_listed_as_released() -> None:
    """A new code of a released check gets its line in tests/data/released_codes.txt, so its removal
    is caught later. A check none of whose codes is listed has not shipped yet (a check being
    added): its codes get their lines when it ships, and from then on this holds them."""
    listed = set(released())
    shipped = {c.split(".", 1)[0] for c in listed}
    every = [*codes.CODES, *codes.WATCH, *(f"{cid}.{slug}" for cid in catalog.IDS for slug in codes.PER_CHECK)]
    assert [c for c in every if c.split(".", 1)[0] in shipped and c not in listed] == []
    assert {"G1", "G4", "G10"} <= shipped  # the list is read: it names the released checks


# ------------------------------------------------------------------------------ the docs


def test_reference_findings_table_is_the_registry() -> None:
    doc = REFERENCE.read_text(encoding="utf-8")
    assert codes.with_table(doc) == doc, (
        "docs/REFERENCE.md's findings table is stale: "
        "python -m pytest_dgx_spark.codes --update docs/REFERENCE.md"
    )


def test_the_generator_rewrites_only_the_table(tmp_path: Path) -> None:
    page = tmp_path / "REFERENCE.md"
    page.write_text(f"before\n{codes.TABLE_START}\n| stale |\n{codes.TABLE_END}\nafter\n", encoding="utf-8")
    assert codes.main(["--update", str(page)]) == 0
    text = page.read_text(encoding="utf-8")
    assert text.startswith(f"before\n{codes.TABLE_START}\n| code | status | meaning |\n")
    assert "| stale |" not in text and text.endswith(f"{codes.TABLE_END}\nafter\n")
    assert "| `G4.xid-hardware` | FAIL |" in text and "| `G<n>.check-crashed` | FAIL |" in text
    with pytest.raises(ValueError, match="findings table"):
        codes.with_table("no table here")


# ------------------------------------------------------------------------------ every finding, once


def test_every_registry_code_has_recorded_facts_that_say_it() -> None:
    assert sorted(set(codes.CODES) - set(examples())) == []
    assert sorted(set(examples()) - set(codes.CODES)) == []
    assert sorted(set(corpus()) & set(declared())) == [], "a code's example lives in one home"


@pytest.mark.parametrize("code", list(codes.CODES))
def test_the_recorded_facts_give_the_code_and_a_status_it_may_carry(code: str) -> None:
    result = decide(examples()[code])
    assert code in result.codes, result.line()
    assert result.check_id == codes.CODES[code].check
    if result.code == code:  # the line's own: its status is one the row allows
        assert result.status.value in codes.CODES[code].status.split("/"), result.line()
    assert all(codes.known(c) for c in result.codes)


def test_every_fail_and_warn_of_the_recorded_facts_carries_a_code() -> None:
    loud = [r for r in map(decide, examples().values()) if r.status in (Status.FAIL, Status.WARN)]
    assert loud and [r.line() for r in loud if not r.codes] == []


def test_snapshot_renders_every_findings_text_once() -> None:
    """What each finding says, in one file: a change of wording shows here as a diff to read."""
    got = render()
    want = SNAPSHOT.read_text(encoding="utf-8")
    assert got == want, "a finding's text changed: python tests/test_finding_codes.py --update; read the diff"


def test_a_declared_example_says_its_line() -> None:
    """A check's own examples (not in the snapshot): the whole G-line, where the example gives it."""
    said = {code: decide(entry).line() for code, entry in declared().items() if "line" in entry}
    assert {code: declared()[code]["line"] for code in said} == said


def test_examples_are_read_from_a_test_modules_literal(tmp_path: Path) -> None:
    """The reader behind :func:`declared`: the top-level literal only, a non-literal said by name."""
    module = tmp_path / "test_g99_demo.py"
    module.write_text(
        'FINDING_EXAMPLES = {"G99.demo": {"facts": {"n": 1}, "line": "G99 WARN: n"}}\n'
        "def test_x():\n    FINDING_EXAMPLES = {}\n",
        encoding="utf-8",
    )
    assert list(_declared_in(module)) == [("G99.demo", {"facts": {"n": 1}, "line": "G99 WARN: n"})]
    module.write_text("FINDING_EXAMPLES = dict(made_at_run_time())\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="FINDING_EXAMPLES must be a literal"):
        list(_declared_in(module))


if __name__ == "__main__" and sys.argv[1:] == ["--update"]:
    SNAPSHOT.write_text(render(), encoding="utf-8")
    print(f"wrote {SNAPSHOT.relative_to(ROOT)}")


def test_every_watch_event_code_is_a_registry_row() -> None:
    """watch's table of event codes (with their fixes) names only registry codes, and every watch-only
    row is one of its events: the two stay in step."""
    from pytest_dgx_spark.watch import rules

    assert [c for c in rules.CODES if not codes.known(c)] == []
    assert sorted(c for c in codes.WATCH if c not in rules.CODES) == []
