"""A golden run's lines, spelled out for the checks a test names, compared with a run of every check.

A test that spells out a whole run (every check's line on a planted Spark, and the verdict) says
what those checks print there. A check added later prints its own line beside them and moves the
verdict's counts: :func:`without_later` takes a run's lines back to the checks the golden text
names (their lines, the verdict's causes and counts, the verdict the named checks alone give), so
the golden text keeps asserting every word about its checks while the later one is judged by its
own test. With no later check (every catalog id named) the lines come back as they are.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from pytest_dgx_spark import catalog

STATUSES = ("PASS", "FAIL", "WARN", "SKIP", "INFO")
_LINE = re.compile(r"^((?:G\d+, )*G\d+) (?:(PASS|FAIL|WARN|SKIP|INFO):|(?:tests )?not run:)")
_VERDICT = re.compile(r"^verdict: (\S+)(?: \((.*)\))?$")
_CAUSE = re.compile(r"^((?:G\d+, )*G\d+) (failed|skipped by choice|skipped|WARN under --strict)$")


def named(lines: Sequence[str]) -> set[str]:
    """The check ids the lines name at their start (``G3 INFO: …``, ``G1, G2 not run: …``)."""
    return {i for ln in lines if (m := _LINE.match(ln)) for i in m.group(1).split(", ")}


def without_later(got: Sequence[str], golden: Sequence[str]) -> list[str]:
    """``got`` as the checks ``golden`` names alone would have printed it."""
    later = set(catalog.IDS) - named(golden)
    if not later:
        return list(got)
    out: list[str] = []
    tally: dict[str, int] = {}
    not_run = 0
    for line in got:
        m = _LINE.match(line)
        if m is None:
            out.append(line)
            continue
        ids = m.group(1).split(", ")
        gone = [i for i in ids if i in later]
        if m.group(2):  # a check's line
            if gone:
                tally[m.group(2)] = tally.get(m.group(2), 0) + 1
                continue
        elif gone:  # a "not run" line naming a later check
            not_run += len(gone) if "tests not run" not in line else 0
            kept = [i for i in ids if i not in later]
            if not kept:
                continue
            line = ", ".join(kept) + line[len(m.group(1)) :]
        out.append(line)
    return [_verdict(ln, later, tally, not_run) if ln.startswith("verdict: ") else ln for ln in out]


def _verdict(line: str, later: set[str], gone: dict[str, int], not_run: int) -> str:
    m = _VERDICT.match(line)
    if m is None or not m.group(2):
        return line
    *cause_text, tally_text = m.group(2).split("; ")
    counts: dict[str, int] = {}
    for part in tally_text.split(", "):
        n, _, what = part.partition(" ")
        counts[what] = int(n) - (not_run if what == "not run" else gone.get(what, 0))
    causes = []
    for part in "; ".join(cause_text).split(" and ") if cause_text else []:
        c = _CAUSE.match(part)
        if c is None:  # a shortened list ("and 6 more"): left as it is
            causes.append(part)
            continue
        kept = [i for i in c.group(1).split(", ") if i not in later]
        if kept:
            causes.append(f"{', '.join(kept)} {c.group(2)}")
    word = m.group(1)
    if not any(c.endswith((" failed", "WARN under --strict")) for c in causes) and counts.get("FAIL", 0) == 0:
        skipped = any(c.endswith(" skipped") for c in causes)
        warned = counts.get("WARN", 0) or counts.get("not run", 0) or skipped
        word = "ready-with-warnings" if warned else "ready"
    tally = [f"{counts[s]} {s}" for s in (*STATUSES, "not run") if counts.get(s)]
    inside = "; ".join(p for p in (" and ".join(causes), ", ".join(tally)) if p)
    return f"verdict: {word} ({inside})" if inside else f"verdict: {word}"


#: the pytest outcome of a check's test, by its status
OUTCOME = {"PASS": "passed", "INFO": "passed", "WARN": "warned", "FAIL": "failed", "SKIP": "skipped"}


def outcomes_without_later(
    outcomes: Mapping[str, int], got: Sequence[str], golden: Sequence[str]
) -> dict[str, int]:
    """pytest's outcome counts less the tests of the checks ``golden`` does not name (their
    statuses read from their lines in ``got``)."""
    later = set(catalog.IDS) - named(golden)
    out = dict(outcomes)
    for line in got:
        m = _LINE.match(line)
        if m and m.group(2) and m.group(1) in later:
            out[OUTCOME[m.group(2)]] -= 1
    return {k: v for k, v in out.items() if v}
