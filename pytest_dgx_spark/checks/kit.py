"""What every check is built from: its context, its facts, its parameters, the one accumulator.

The contract: ``FACTS = Facts`` (a :class:`FactsBase` dataclass), ``gather(ctx) -> Facts``
reads the machine and decides nothing, ``evaluate(facts, params) -> Result`` decides and
reads nothing. Facts travel as JSON and parameters are rebuilt from the options, so
``--spark-replay`` decides a capture again elsewhere, with other thresholds.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from pytest_dgx_spark.checks.record import FactsError, Record, plain  # noqa: F401  (FactsError: re-exported)
from pytest_dgx_spark.datadef import define
from pytest_dgx_spark.model import Reading, Result, Status
from pytest_dgx_spark.options import BY_NAME, OPTIONS
from pytest_dgx_spark.probes.commands import ResourceLimit
from pytest_dgx_spark.safe_text import plus_more, shortened
from pytest_dgx_spark.thresholds import defaults

if TYPE_CHECKING:  # pragma: no cover
    from pytest_dgx_spark.probes.child import ChildResult
    from pytest_dgx_spark.probes.machine import MachineLike
    from pytest_dgx_spark.settings import Settings

T = TypeVar("T", bound="FactsBase")


class _Engine(Protocol):  # what a check may ask of the engine, no more
    selected: tuple[str, ...]

    def profile(self) -> str: ...

    def torch(self) -> ChildResult: ...

    def params(self) -> Params: ...

    def run(self, check_id: str) -> Result: ...  # another check's result (G10 gathers the node's)


@define
class CheckContext:
    """What a check's ``gather(ctx)`` gets: the options, the machine, the engine."""

    check_id: str
    settings: Settings
    machine: MachineLike
    engine: _Engine

    @property
    def selected(self) -> tuple[str, ...]:
        return self.engine.selected

    def torch(self) -> ChildResult:
        """The run's torch child; one a limit of this box stopped (``ulimit -u``) raises (the check SKIPs)."""
        child = self.engine.torch()
        if child.resource_limit:
            raise ResourceLimit(child.resource_limit)
        return child

    def params(self) -> Params:
        return self.engine.params()


#: the option values an ``evaluate`` may read (``Settings`` attribute names): those declared ``param=True``
PARAM_OPTIONS = tuple(o.attr for o in OPTIONS if o.param)


@define(frozen=True)
class Params:
    """The resolved thresholds (profile defaults, then overrides) and the options a decision reads."""

    profile: str = "generic"
    thresholds: Mapping[str, float] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)

    def threshold(self, name: str) -> float:
        """The run's value, else the profile's default from the one table (a check keeps no copy)."""
        return float(self.thresholds[name] if name in self.thresholds else defaults(self.profile)[name])

    def option(self, name: str) -> Any:
        """The run's value of a :data:`PARAM_OPTIONS` option, else the option table's default."""
        if name not in PARAM_OPTIONS:
            raise KeyError(f"{name!r} is not an option a decision reads (declared param=True)")
        value = self.options.get(name)
        return BY_NAME[name.replace("_", "-")].default if value is None else value

    @property
    def gb10(self) -> bool:
        return self.profile == "gb10"

    @classmethod
    def from_settings(cls, settings: Settings, profile: str) -> Params:
        opts = {name: getattr(settings, name, None) for name in PARAM_OPTIONS}
        return cls(profile=profile, thresholds=settings.thresholds(profile), options=opts)

    def to_dict(self) -> dict[str, Any]:
        return {"profile": self.profile, "thresholds": dict(self.thresholds), "options": dict(self.options)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Params:
        return cls(str(data.get("profile") or "generic"), dict(data.get("thresholds") or {}),
                   dict(data.get("options") or {}))

    def replace(self, **changes: Any) -> Params:
        return dataclasses.replace(self, **changes)


@define
class ChildFacts(Record):
    """How the run's torch child went, as a check records it (``steps``: seconds per step). All
    defaults (an older capture's ``{}``): not recorded."""

    ok: bool = False
    signal: str | None = None
    timed_out: bool = False
    step: str | None = None
    error: str | None = None
    finished: bool = False
    describe: str = ""
    steps: dict[str, float] = field(default_factory=dict)

    @property
    def recorded(self) -> bool:
        return self != ChildFacts()


def child_facts(child: ChildResult) -> ChildFacts:
    """The torch child's outcome."""
    return ChildFacts(
        ok=child.ok, signal=child.signal, timed_out=child.timed_out, step=child.step, error=child.error,
        finished=child.finished, describe=child.describe("torch child"), steps=dict(child.step_seconds),
    )  # fmt: skip


class FactsBase(Record):
    """A check's ``Facts`` dataclass: a JSON round trip that rebuilds each field as its type says
    (:mod:`.record`). A field added after captures were written is named in ``ADDED`` (with why; its
    default must mean "not read") or ``NOT_CAPTURED`` (with the value that says so); else its absence
    is a SKIP. A newer capture's extra fact is ignored, not an error."""

    NOT_CAPTURED: ClassVar[Mapping[str, Any]] = {}

    @classmethod
    def from_dict(cls: type[T], data: Any) -> T:
        given = {**copy.deepcopy(dict(cls.NOT_CAPTURED)), **dict(data or {})}
        return super().from_dict(given)


def said(env: Mapping[str, str], name: str) -> str:
    """A variable's value: "" when it is unset or empty (the one rule for "set")."""
    return env.get(name) or ""


def first_n(items: Sequence[str], n: int = 3, *, sep: str = "; ") -> str:
    """``a; b; c; and 4 more`` — the one rule for shortening a list in a line."""
    return sep.join(shortened(items, n))


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``1 process`` / ``3 processes``."""
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"


@define
class Findings:
    """The one accumulator every ``evaluate`` (and the node comparison) writes into: problems FAIL,
    warnings WARN; a finding's short form for the default line is kept in :attr:`short` by its text."""

    check_id: str
    problems: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[tuple[str, str]] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    readings: list[Reading] = field(default_factory=list)
    short: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: a finding's stable code (``G4.xid-hardware``) by its text; a finding without one has none here
    codes: dict[str, str] = field(default_factory=dict)

    def fail(self, text: str, fix: str = "", headline: str = "", short_fix: str = "", *, code: str = "") -> None:
        self.flag(Status.FAIL, text, fix, headline, short_fix, code=code)

    def warn(self, text: str, fix: str = "", headline: str = "", short_fix: str = "", *, code: str = "") -> None:
        self.flag(Status.WARN, text, fix, headline, short_fix, code=code)

    def flag(self, status: Status, text: str, fix: str = "", headline: str = "", short_fix: str = "", *,
             code: str = "") -> None:
        """A FAIL (``status`` FAIL) or a WARN (any other), with its short form and its stable code."""
        (self.problems if status is Status.FAIL else self.warnings).append((text, fix))
        if headline or short_fix:
            self.short.setdefault(text, (headline or text, short_fix))
        if code:
            self.codes.setdefault(text, code)

    def note(self, *texts: str) -> None:
        self.details.extend(t for t in texts if t)

    def read(self, name: str, value: Any, unit: str = "") -> None:
        self.readings.append(Reading(name, value, unit))

    @property
    def status(self) -> Status | None:
        return Status.FAIL if self.problems else Status.WARN if self.warnings else None

    def first_short(self) -> tuple[str, str]:
        """``(headline, short fix)`` of the first problem (else warning), counting the rest."""
        pairs = self.problems or self.warnings
        if not pairs:
            return "", ""
        text, fix = pairs[0]
        headline, short_fix = self.short.get(text, (text, fix))
        return plus_more(headline, len(pairs)), short_fix

    def codes_of(self, pairs: Sequence[tuple[str, str]] | None = None) -> list[str]:
        """The codes of ``pairs`` (default: the problems, else the warnings), in order, each once."""
        pairs = (self.problems or self.warnings) if pairs is None else pairs
        return list(dict.fromkeys(self.codes[t] for t, _ in pairs if t in self.codes))

    def result(self, ok_status: Status | str = Status.PASS, ok_summary: str = "", *, shown: int = 3,
               headline: str = "", short_fix: str = "", ok_code: str = "") -> Result:
        """FAIL with the problems, else WARN with the warnings, else ``ok_status`` (with ``ok_code``
        where that status states a finding: an INFO, a SKIP that says why); what the line leaves
        out goes first in the details."""
        pairs = self.problems or self.warnings
        if not pairs:
            return Result(self.check_id, Status(ok_status), ok_summary, readings=list(self.readings),
                          details=list(self.details), headline=headline, codes=[ok_code] if ok_code else [])
        codes = self.codes_of(pairs)
        texts = [t for t, _ in pairs]
        fixes = list(dict.fromkeys(f for _, f in pairs[:shown] if f))
        first_head, first_fix = self.first_short()
        return Result(
            self.check_id, Status.FAIL if self.problems else Status.WARN, first_n(texts, shown),
            fix="; ".join(fixes), readings=list(self.readings), details=[*texts[shown:], *self.details],
            headline=headline or first_head,
            short_fix=short_fix or (first_fix if texts[0] in self.short else "") or next(iter(fixes), ""),
            codes=codes,
        )  # fmt: skip
