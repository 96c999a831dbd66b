"""What every check is built from: the context it gathers with, the facts it
records, the parameters it decides with, and the accumulator it decides into.

The contract (one shape for all ten checks)::

    FACTS = Facts                                   # a dataclass, see FactsBase
    def gather(ctx: CheckContext) -> Facts          # reads the machine, decides nothing
    def evaluate(facts: Facts, params: Params) -> Result   # decides, reads nothing

``gather`` is the only place a check touches the machine (through
``ctx.machine``); ``evaluate`` is a pure function of plain data. That is what
lets ``--spark-capture`` record a run and ``--spark-replay`` decide it again
on another machine, with other thresholds: the facts travel as JSON, the
parameters are rebuilt from the options.

This module imports nothing of the engine (the engine imports it), so the
checks and the engine no longer import each other.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from pytest_dgx_spark.model import Reading, Result, Status

if TYPE_CHECKING:  # pragma: no cover
    from pytest_dgx_spark.probes.child import ChildResult
    from pytest_dgx_spark.probes.machine import Machine
    from pytest_dgx_spark.settings import Settings

T = TypeVar("T", bound="FactsBase")


class _Engine(Protocol):  # what a check may ask of the engine, no more
    selected: tuple[str, ...]

    def profile(self) -> str: ...

    def torch(self) -> ChildResult: ...

    def params(self) -> Params: ...


# --------------------------------------------------------------------------- context


@dataclass
class CheckContext:
    """What a check's ``gather(ctx)`` gets: the options, the machine, the engine."""

    check_id: str
    settings: Settings
    machine: Machine
    engine: _Engine

    @property
    def profile(self) -> str:
        return self.engine.profile()

    @property
    def thresholds(self) -> dict[str, float]:
        return self.settings.thresholds(self.profile)

    @property
    def selected(self) -> tuple[str, ...]:
        return self.engine.selected

    def torch(self) -> ChildResult:
        """The run's torch child. One stopped by a limit of this box or user
        (no process or thread could start: ``ulimit -u``) raises
        :class:`~pytest_dgx_spark.probes.commands.ResourceLimit`, which the engine
        turns into this check's SKIP: it says nothing about torch or the GPU."""
        child = self.engine.torch()
        if child.resource_limit:
            from pytest_dgx_spark.probes.commands import ResourceLimit

            raise ResourceLimit(child.resource_limit)
        return child

    def params(self) -> Params:
        """The run's parameters, as the engine hands them to every ``evaluate``
        (one place builds them; a gather that decides for another check's
        sake, G5 asking G6, decides with the same ones)."""
        return self.engine.params()


# --------------------------------------------------------------------------- params

#: the option values a check's ``evaluate`` may read (``Settings`` attribute names);
#: everything else an option changes is what ``gather`` collects
PARAM_OPTIONS = (
    "workload_gb",
    "planned_bandwidth",
    "playbook",
    "tp_across_nodes",
    "intrusive",
    "offline",
    "strict",
    "precision",
)


@dataclass(frozen=True)
class Params:
    """The thresholds and options one decision is made with.

    ``thresholds`` are the resolved values (profile defaults, then the
    user's overrides); ``options`` are the few option values a decision
    reads. A replay rebuilds them from the capture and the replay's own
    ``--spark-threshold``/``--spark-profile``.
    """

    profile: str = "generic"
    thresholds: Mapping[str, float] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)

    def threshold(self, name: str) -> float:
        """The value in force: the run's, else the profile's default from the
        one table (:mod:`pytest_dgx_spark.thresholds`). A check passes no default
        of its own: a second copy of a default drifts (G4 read a T.Limit
        margin of 0 C where the table says 3 C)."""
        if name in self.thresholds:
            return float(self.thresholds[name])
        from pytest_dgx_spark.thresholds import defaults

        return float(defaults(self.profile)[name])

    def option(self, name: str) -> Any:
        """The run's value of a :data:`PARAM_OPTIONS` option, else the option
        table's default (:mod:`pytest_dgx_spark.options`, the one source)."""
        if name not in PARAM_OPTIONS:
            raise KeyError(f"{name!r} is not an option a decision reads (PARAM_OPTIONS)")
        value = self.options.get(name)
        if value is None:
            from pytest_dgx_spark.options import BY_NAME

            value = BY_NAME[name.replace("_", "-")].default
        return value

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
        return cls(
            profile=str(data.get("profile") or "generic"),
            thresholds=dict(data.get("thresholds") or {}),
            options=dict(data.get("options") or {}),
        )

    def replace(self, **changes: Any) -> Params:
        return dataclasses.replace(self, **changes)


# --------------------------------------------------------------------------- facts


def plain(value: Any) -> Any:
    """``value`` as JSON-plain data: dataclasses to dicts, tuples and sets to
    lists, non-finite floats to strings (JSON has no NaN)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
        return [plain(v) for v in items]
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return str(value)
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


class FactsBase:
    """Mixin for a check's ``Facts`` dataclass: a JSON round trip.

    Fields hold plain data (str, int, float, bool, None, lists and dicts of
    them). A field holding a nested dataclass names its class in
    ``NESTED = {"field": Class}`` (a list of them: the same, the class of
    one item), so ``from_dict`` rebuilds it.
    """

    NESTED: ClassVar[Mapping[str, type]] = {}

    def to_dict(self) -> dict[str, Any]:
        return plain(self)

    @classmethod
    def from_dict(cls: type[T], data: Mapping[str, Any]) -> T:
        known = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        kwargs: dict[str, Any] = {}
        for name, value in dict(data or {}).items():
            if name not in known:
                continue  # a newer capture's extra fact: ignored, not an error
            nested = cls.NESTED.get(name)
            if nested is not None and value is not None:
                value = _rebuild(nested, value)
            kwargs[name] = value
        return cls(**kwargs)


def _rebuild(kind: type, value: Any) -> Any:
    build: Callable[[Any], Any] = getattr(kind, "from_dict", None) or (lambda d: kind(**d))
    if isinstance(value, list):
        return [build(v) for v in value]
    if (
        isinstance(value, dict)
        and value
        and all(isinstance(v, dict) for v in value.values())
        and not (
            set(value) & {f.name for f in dataclasses.fields(kind)}  # type: ignore[arg-type]
        )
    ):
        return {k: build(v) for k, v in value.items()}  # a mapping of them
    return build(value)


# --------------------------------------------------------------------------- deciding


def shortened(items: Sequence[str], n: int = 3) -> list[str]:
    """``[a, b, c, "and 4 more"]``: the first ``n`` non-empty items and how
    many were left out; :func:`first_n` joins it into a line, a check's
    details take it as separate lines."""
    texts = [str(i) for i in items if str(i)]
    return [*texts[:n], f"and {len(texts) - n} more"] if len(texts) > n else texts


def first_n(items: Sequence[str], n: int = 3, *, sep: str = "; ") -> str:
    """``a; b; c; and 4 more`` — the one rule for shortening a list in a line."""
    return sep.join(shortened(items, n))


def plus_more(first: str, total: int) -> str:
    """``first (+3 more)``: the short line's form of :func:`first_n`, the first
    of ``total`` findings and a count of the rest (one finding: just it)."""
    return first if total <= 1 else f"{first} (+{total - 1} more)"


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``1 process`` / ``3 processes``."""
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"


@dataclass
class Findings:
    """The one accumulator every check's ``evaluate`` writes into, and the
    node comparison (``checks/nodes.py``) too.

    Stages append problems (FAIL), warnings (WARN), notes for the details,
    and readings; :meth:`result` turns them into one :class:`Result` with
    the one shortening rule. A finding may carry its short form for the
    default terminal line (``headline``, ``short_fix``), kept in
    :attr:`short` by its text; otherwise its text and fix are it.

    One type with one set of methods: G10 once handed a plain accumulator
    to the node comparison, which wrote into a subclass's extra method, and
    crashed exactly when two nodes differed.
    """

    check_id: str
    problems: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[tuple[str, str]] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    readings: list[Reading] = field(default_factory=list)
    #: a finding's text -> its short form (headline, short fix), when it has one
    short: dict[str, tuple[str, str]] = field(default_factory=dict)

    def fail(self, text: str, fix: str = "", headline: str = "", short_fix: str = "") -> None:
        self.problems.append((text, fix))
        self._keep_short(text, headline, short_fix)

    def warn(self, text: str, fix: str = "", headline: str = "", short_fix: str = "") -> None:
        self.warnings.append((text, fix))
        self._keep_short(text, headline, short_fix)

    def flag(self, status: Status, text: str, fix: str = "", headline: str = "", short_fix: str = "") -> None:
        """A FAIL (``status`` FAIL) or a WARN (any other), with its short form."""
        (self.fail if status is Status.FAIL else self.warn)(text, fix, headline, short_fix)

    def _keep_short(self, text: str, headline: str, short_fix: str) -> None:
        if headline or short_fix:
            self.short.setdefault(text, (headline or text, short_fix))

    def note(self, *texts: str) -> None:
        self.details.extend(t for t in texts if t)

    def read(self, name: str, value: Any, unit: str = "") -> None:
        self.readings.append(Reading(name, value, unit))

    @property
    def status(self) -> Status | None:
        if self.problems:
            return Status.FAIL
        if self.warnings:
            return Status.WARN
        return None

    def first_short(self) -> tuple[str, str]:
        """``(headline, short fix)`` of the first problem (else warning), the
        headline counting the rest (:func:`plus_more`); ``("", "")`` when
        nothing was found. A finding without a short form gives its text and fix."""
        pairs = self.problems or self.warnings
        if not pairs:
            return "", ""
        text, fix = pairs[0]
        headline, short_fix = self.short.get(text, (text, fix))
        return plus_more(headline, len(pairs)), short_fix

    def result(
        self,
        ok_status: Status | str = Status.PASS,
        ok_summary: str = "",
        *,
        shown: int = 3,
        headline: str = "",
        short_fix: str = "",
    ) -> Result:
        """FAIL with the problems, else WARN with the warnings, else
        ``ok_status`` with ``ok_summary``; what the line leaves out goes
        first in the details."""
        pairs = self.problems or self.warnings
        if not pairs:
            return Result(
                self.check_id,
                Status(ok_status),
                ok_summary,
                readings=list(self.readings),
                details=list(self.details),
                headline=headline,
            )
        status = Status.FAIL if self.problems else Status.WARN
        texts = [t for t, _ in pairs]
        summary = first_n(texts, shown)
        fixes = list(dict.fromkeys(f for _, f in pairs[:shown] if f))
        details = [*texts[shown:], *self.details]
        first_head, first_fix = self.first_short()
        return Result(
            self.check_id,
            status,
            summary,
            fix="; ".join(fixes),
            readings=list(self.readings),
            details=details,
            headline=headline or first_head,
            short_fix=short_fix or (first_fix if texts[0] in self.short else "") or (fixes[0] if fixes else ""),
        )
