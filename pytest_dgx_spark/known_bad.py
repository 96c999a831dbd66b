"""The known-bad list: kernels, drivers and module flavours that broke real Sparks.

A DGX OS update can bring a kernel or driver that breaks a box that passed yesterday. The list
ships as data (``data/known_bad.json``) so a new report becomes an entry, not a code change, and
a user adds entries without a release (``--spark-known-bad=PATH``; the format is in
docs/REFERENCE.md, "The known-bad list"). G1 records the entries it read in its facts, so a replay
decides with the list the run had; matching here is pure: ``kernel`` and ``driver`` are ``fnmatch``
patterns, every key of ``match`` must hold, and a reading that could not be made matches nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from pytest_dgx_spark.checks.record import Record
from pytest_dgx_spark.datadef import define
from pytest_dgx_spark.probes import procfs

#: a known-bad file larger than this is refused (the shipped one is some 4 KiB)
MAX_BYTES = 1 << 20
STATUSES = ("FAIL", "WARN")
PLATFORMS = ("gb10", "any")
FLAVOURS = ("open", "proprietary")
#: the conditions that turn an entry's WARN into a FAIL on this boot
FAIL_IF = {
    "cma_free_above_total": "CmaFree > CmaTotal in /proc/meminfo (the bug is active on this boot)",
    "no_gpu": "NVML sees no GPU",
}
MATCH_KEYS = ("kernel", "driver", "flavour")
KEYS = ("id", "platform", "match", "status", "fail_if", "breaks", "fix", "sources", "short", "short_fix")
#: the default line's room for an entry's ``short`` (what breaks) and ``short_fix``
SHORT_MAX = 60


@define
class Entry(Record):
    """One validated entry; G1's facts keep the entries a run decided with (a field an older
    capture lacks takes its default: what its absence meant)."""

    id: str = ""
    platform: str = "any"
    match: dict[str, str] = field(default_factory=dict)
    status: str = "WARN"
    fail_if: str | None = None
    breaks: str = ""
    fix: str = ""
    sources: list[str] = field(default_factory=list)
    short: str | None = None  # what breaks, in a few words, for the default line
    short_fix: str | None = None
    origin: str = ""  # "shipped" or the user's file


class KnownBadError(ValueError):
    """A known-bad file that cannot be used, in one line."""


@define(frozen=True)
class Reading(Record):
    """What an entry is matched against (``None``: not read)."""

    kernel: str | None = None
    driver: str | None = None
    flavour: str | None = None
    gb10: bool = False
    cma_free_above_total: bool = False
    no_gpu: bool = False


def _text(entry: Mapping[str, Any], key: str, where: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value.strip():
        raise KnownBadError(f"{where}: {key!r} must be a non-empty string")
    return value.strip()


def _match(raw: Any, where: str) -> dict[str, str]:
    if not isinstance(raw, Mapping) or not raw:
        raise KnownBadError(f"{where}: 'match' must be an object with one or more of {', '.join(MATCH_KEYS)}")
    if unknown := sorted(set(raw) - set(MATCH_KEYS)):
        raise KnownBadError(f"{where}: unknown match key {unknown[0]!r} (known: {', '.join(MATCH_KEYS)})")
    out = {key: _text(raw, key, f"{where}: match") for key in raw}
    if "flavour" in out and out["flavour"] not in FLAVOURS:
        raise KnownBadError(f"{where}: match 'flavour' must be one of {', '.join(FLAVOURS)}, got {out['flavour']!r}")
    return out


def _choice(entry: Mapping[str, Any], key: str, choices: tuple[str, ...] | list[str], where: str) -> str:
    value = _text(entry, key, where)
    if value not in choices:
        raise KnownBadError(f"{where}: {key!r} must be one of {', '.join(choices)}, got {value!r}")
    return value


def entry(raw: Any, where: str, origin: str) -> Entry:
    """One validated entry; :class:`KnownBadError` names what is wrong."""
    if not isinstance(raw, Mapping):
        raise KnownBadError(f"{where}: an entry must be an object, got {type(raw).__name__}")
    if unknown := sorted(set(raw) - set(KEYS)):
        raise KnownBadError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(KEYS)})")
    sources = raw.get("sources")
    if not isinstance(sources, list) or not sources or not all(isinstance(s, str) and s.strip() for s in sources):
        raise KnownBadError(f"{where}: 'sources' must be a non-empty list of strings (where the failure was reported)")
    out = Entry(
        id=_text(raw, "id", where),
        platform=_choice(raw, "platform", PLATFORMS, where) if "platform" in raw else "any",
        match=_match(raw.get("match"), where),
        status=_choice(raw, "status", STATUSES, where),
        fail_if=_choice(raw, "fail_if", list(FAIL_IF), where) if "fail_if" in raw else None,
        breaks=_text(raw, "breaks", where),
        fix=_text(raw, "fix", where),
        sources=[s.strip() for s in sources],
        origin=origin,
    )
    for key in ("short", "short_fix"):
        if key in raw:
            text = _text(raw, key, where)
            if len(text) > SHORT_MAX:
                raise KnownBadError(f"{where}: {key!r} is for the default line: at most {SHORT_MAX} characters")
            setattr(out, key, text)
    return out


def parse(text: str, origin: str) -> list[Entry]:
    """The entries of one file's text (``{"entries": [...]}``)."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise KnownBadError(f"{origin}: not JSON ({exc})") from None
    except RecursionError:  # thousands of nested brackets: json's recursion limit, one line here
        raise KnownBadError(f"{origin}: not JSON (nested too deeply)") from None
    entries = data.get("entries") if isinstance(data, Mapping) else None
    if not isinstance(entries, list):
        raise KnownBadError(f'{origin}: expected an object {{"entries": [...]}}')
    return [entry(raw, f"{origin}: entry {i + 1}", origin) for i, raw in enumerate(entries)]


def load(path: Path) -> list[Entry]:
    """A user's file: a regular file, at most :data:`MAX_BYTES`, read without blocking."""
    try:
        raw = procfs.read_regular(path, MAX_BYTES + 1)
    except OSError as exc:
        raise KnownBadError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_BYTES:
        raise KnownBadError(f"{path}: larger than {MAX_BYTES // 1024} KiB; a known-bad list is a few entries")
    return parse(raw.decode("utf-8", errors="replace"), str(path))


def shipped() -> list[Entry]:
    """The list this release ships."""
    return parse((Path(__file__).parent / "data" / "known_bad.json").read_text(encoding="utf-8"), "shipped")


def _holds(pattern: str, value: object) -> bool:
    return isinstance(value, str) and fnmatchcase(value, pattern)


def matches(item: Entry, reading: Reading) -> bool:
    """Every key of the entry's ``match`` holds for ``reading``, on its platform."""
    if item.platform == "gb10" and not reading.gb10:
        return False
    values = {key: getattr(reading, key) for key in MATCH_KEYS}
    return bool(item.match) and all(_holds(pattern, values.get(key)) for key, pattern in item.match.items())


def status(item: Entry, reading: Reading) -> str:
    """The entry's status on this boot: its ``fail_if`` condition turns a WARN into a FAIL."""
    cond = item.fail_if
    return "FAIL" if cond in FAIL_IF and getattr(reading, str(cond)) else item.status or "WARN"
