"""The result of one check, and the verdict over several: plain data that survives
a JSON round trip (``env-report.json``, pytest-json-report, captures, other processes)."""

from __future__ import annotations

import enum
import math
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import field
from typing import Any

from pytest_dgx_spark.datadef import define
from pytest_dgx_spark.safe_text import shortened, visible

SCHEMA = "pytest_spark/1"


class Status(str, enum.Enum):
    """The five outcomes a check can have (SPEC "Statuses")."""

    PASS = "PASS"
    FAIL = "FAIL"
    WARN = "WARN"
    SKIP = "SKIP"
    INFO = "INFO"

    def __str__(self) -> str:
        return self.value


@define(frozen=True)
class Reading:
    """A value with its unit; ``None`` is "not available" (``[N/A]``). Text is escaped as it comes in:
    a string value is often a name someone else chose (a process, a file)."""

    name: str
    value: int | float | str | bool | None
    unit: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", visible(self.name))
        object.__setattr__(self, "unit", visible(self.unit))
        if isinstance(self.value, str):
            object.__setattr__(self, "value", visible(self.value))

    def render(self) -> str:
        value = self.value
        if value is None:
            return "[N/A]"
        text = ("yes" if value else "no") if isinstance(value, bool) else (
            _format_float(value) if isinstance(value, float) else str(value))
        return f"{text} {self.unit}" if self.unit else text

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "unit": self.unit}


@define(frozen=True)
class Attachment:
    """What a result carries for the reports that can show it (G4's thermal series, G10's node table):
    ``kind`` says how ``data`` (plain JSON) reads, ``title`` names it where it is shown, ``name`` where
    it is written beside a report (a file-safe word). A report renders the kinds it knows and leaves
    the rest: no report names a check."""

    kind: str
    title: str
    data: Any = None
    name: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "title": self.title, "data": self.data, "name": self.name}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Attachment:
        return cls(str(data.get("kind") or ""), visible(str(data.get("title") or "")), data.get("data"),
                   str(data.get("name") or ""))


def _format_float(value: float) -> str:
    if math.isnan(value) or math.isinf(value):
        return str(value)
    if abs(value) >= 10000:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}".rstrip("0").rstrip(".") if value else "0"


def one_line(text: str) -> str:
    """Whitespace collapsed and controls escaped: every text of a :class:`Result` passes here,
    so no output of one can forge a line."""
    return visible(" ".join(str(text).split()))


#: the widest default terminal line
SHORT_WIDTH = 120


def shorten(text: str, width: int) -> str:
    """Cut ``text`` to ``width`` characters at a clause or word boundary, with "…"."""
    text = one_line(text)
    if len(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    cut = text[: width - 1]
    for sep in ("; ", " (", ", ", " — ", " "):
        at = cut.rfind(sep)
        if at >= width // 2:
            cut = cut[:at]
            break
    return cut.rstrip(" ;,(—") + "…"


@define
class Result:
    """What one check decided: status, a one-line summary, the fix, readings."""

    check_id: str
    status: Status
    summary: str
    fix: str = ""
    readings: list[Reading] = field(default_factory=list)
    duration_s: float = 0.0
    details: list[str] = field(default_factory=list)
    #: the finding and the fix in a few words, for the default terminal line (empty: cut from summary, fix)
    headline: str = ""
    short_fix: str = ""
    #: a SKIP the user asked for (``--spark-offline``): not a warning, the run can be ``ready``
    by_choice: bool = False
    #: the stable codes of the findings behind this status (``G4.xid-hardware``), first the line's own
    codes: list[str] = field(default_factory=list)
    #: what the reports that can show it render (a chart, a node table), by kind
    attachments: list[Attachment] = field(default_factory=list)

    @property
    def code(self) -> str:
        """The first finding's stable code, or ``""`` when it has none."""
        return self.codes[0] if self.codes else ""

    def __post_init__(self) -> None:
        self.status = Status(self.status)
        for name in ("check_id", "summary", "fix", "headline", "short_fix"):
            setattr(self, name, one_line(getattr(self, name)))
        self.details = [one_line(d) for d in self.details if str(d).strip()]

    @property
    def loud(self) -> bool:
        return self.status in (Status.FAIL, Status.WARN)

    @property
    def text(self) -> str:
        """The text of the G-line: the summary, and the fix for FAIL/WARN."""
        return f"{self.summary}; fix: {self.fix}" if self.fix and self.loud else self.summary

    def line(self) -> str:
        """``G<n> <STATUS>: <text>`` — the fixed format shared with preflight.sh."""
        return f"{self.check_id} {self.status.value}: {self.text}"

    def short_line(self, width: int = SHORT_WIDTH) -> str:
        """The default terminal line, at most ``width`` characters: ``G<n> STATUS: finding; fix: short``."""
        head = f"{self.check_id} {self.status.value}: "
        finding = self.headline or self.summary
        fix = (self.short_fix or self.fix) if self.loud else ""
        if fix:
            budget = width - len(head) - len("; fix: ")
            fix_part = shorten(fix, max(budget // 2, budget - len(finding)))
            return f"{head}{shorten(finding, budget - len(fix_part))}; fix: {fix_part}"
        return head + shorten(finding, width - len(head))

    def reading(self, name: str) -> Reading | None:
        return next((r for r in self.readings if r.name == name), None)

    def attached(self, kind: str) -> list[Attachment]:
        """The attachments of one ``kind`` (``"chart"``, ``"nodes"``), in the order attached."""
        return [a for a in self.attachments if a.kind == kind]

    def code_line(self) -> str:
        """``code: G4.xid-hardware`` (``codes: A, B`` for several), or ``""`` without a code: what
        ``-v`` prints under the G-line, so a reader can key on the finding, not its words."""
        if not self.codes:
            return ""
        return f"code{'s' if len(self.codes) > 1 else ''}: {', '.join(self.codes)}"

    def report_text(self, *, codes: bool = False) -> str:
        """The G-line, its codes (``codes``: the CLI's ``-v``), then details and readings one per line
        (``<system-out>``, the FAILURES body, ``-v``)."""
        code = self.code_line() if codes else ""
        lines = [self.line(), *(f"  {c}" for c in [code] if c), *(f"  {d}" for d in self.details)]
        return "\n".join(lines + [f"  {r.name} = {r.render()}" for r in self.readings])

    def seed_value(self) -> str:
        """The seed's env-report vocabulary: ``pass`` | ``fail: …`` | ``warn: …`` (status word first)."""
        word = self.status.value.lower()
        return word if self.status is Status.PASS or not self.summary else f"{word}: {self.summary}"

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.check_id, "status": self.status.value, "summary": self.summary, "fix": self.fix,
                "line": self.line(), "readings": {r.name: r.to_dict() for r in self.readings},
                "details": list(self.details), "duration_s": round(self.duration_s, 4),
                "headline": self.headline, "short_fix": self.short_fix, "by_choice": self.by_choice,
                "codes": list(self.codes)} | (
                    {"attachments": [a.to_dict() for a in self.attachments]} if self.attachments else {})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Result:
        readings = dict(data.get("readings") or {})
        return cls(
            str(data["id"]), Status(data["status"]), str(data.get("summary", "")), str(data.get("fix", "")),
            [Reading(name, spec.get("value"), spec.get("unit", "")) for name, spec in readings.items()],
            float(data.get("duration_s", 0.0)), list(data.get("details") or []),
            str(data.get("headline") or ""), str(data.get("short_fix") or ""), bool(data.get("by_choice")),
            [str(c) for c in data.get("codes") or [] if isinstance(c, str)],
            [Attachment.from_dict(a) for a in data.get("attachments") or [] if isinstance(a, Mapping)],
        )  # fmt: skip


class Verdict(str, enum.Enum):
    """The seed's verdict vocabulary for ``env-report.json``."""

    READY = "ready"
    READY_WITH_WARNINGS = "ready-with-warnings"
    BLOCKED = "blocked"

    def __str__(self) -> str:
        return self.value


def _skipped(r: Result) -> bool:
    """A SKIP that verified nothing the user wanted checked (not one they asked for)."""
    return r.status is Status.SKIP and not r.by_choice


def verdict(results: Iterable[Result], *, strict: bool = False, not_run: Collection[str] | None = None,
            ) -> Verdict:
    """``blocked`` on any FAIL (or WARN when strict); ``ready-with-warnings`` on any WARN, a SKIP the
    user did not ask for, or a check that did not run (deselected: it verified nothing); else ``ready``."""
    rs = list(results)
    statuses = {r.status for r in rs}
    if Status.FAIL in statuses or (strict and Status.WARN in statuses):
        return Verdict.BLOCKED
    if Status.WARN in statuses or any(_skipped(r) for r in rs) or not_run:
        return Verdict.READY_WITH_WARNINGS
    return Verdict.READY


def _ids(ids: list[str]) -> str:
    return ", ".join(shortened(ids, 4))


def _causes(v: Verdict, by: Mapping[Status, list[str]], results: list[Result], strict: bool) -> list[str]:
    """What made the verdict so where the counts alone do not say it."""
    if v is Verdict.BLOCKED:
        causes = [f"{_ids(by[Status.FAIL])} failed"] if by[Status.FAIL] else []
        if strict and by[Status.WARN]:
            causes.append(f"{_ids(by[Status.WARN])} WARN under --strict")
        return causes
    if by[Status.WARN]:
        return []
    # no WARN: a SKIP made it so, or the user's own choice left it ready
    skipped = [r.check_id for r in results if _skipped(r)]
    chosen = [r.check_id for r in results if r.status is Status.SKIP and r.by_choice]
    return [f"{_ids(ids)} {why}" for ids, why in ((skipped, "skipped"), (chosen, "skipped by choice")) if ids]


def verdict_line(results: list[Result], *, strict: bool = False, not_run: Collection[str] | None = None,
                 ) -> str:
    """``verdict: blocked (G1, G6 failed; 1 PASS, 2 FAIL)``: the verdict, its causes, the counts."""
    v = verdict(results, strict=strict, not_run=not_run)
    by = {s: [r.check_id for r in results if r.status is s] for s in Status}
    tally = [f"{len(ids)} {s.value}" for s, ids in by.items() if ids]
    if not_run:
        tally.append(f"{len(not_run)} not run")
    causes = " and ".join(_causes(v, by, results, strict))
    inside = "; ".join(part for part in (causes, ", ".join(tally)) if part)
    return f"verdict: {v.value} ({inside})" if inside else f"verdict: {v.value}"


class PreflightResults(Mapping[str, Result]):
    """What the ``spark_preflight`` fixture gives a test: results by check id.

    >>> results["G3"].status, results.verdict, results.failed
    """

    def __init__(self, results: Iterable[Result], *, strict: bool = False) -> None:
        self._by_id = {r.check_id: r for r in results}
        self.strict = strict

    def __getitem__(self, key: str) -> Result:
        return self._by_id[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_id)

    def __len__(self) -> int:
        return len(self._by_id)

    @property
    def verdict(self) -> str:
        return verdict(self._by_id.values(), strict=self.strict).value

    @property
    def failed(self) -> list[str]:
        """Ids that FAILed (and WARNed, under ``--spark-strict``)."""
        bad = {Status.FAIL, Status.WARN} if self.strict else {Status.FAIL}
        return [cid for cid, r in self._by_id.items() if r.status in bad]
