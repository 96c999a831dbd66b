"""The checks, found by convention: every package ``checks/g<NN>_<name>/`` is a check, and its
``spec.json`` says what it is (:class:`CheckSpec`). Markers, ``--help``, ``--spark-only`` and every
"the checks are …" text are built from them, so the number of checks and their ids are written
nowhere else. Every pytest run reads it (``--markers``), so the specs are data files, not modules:
pytest imports each module of an installed plugin through its assertion-rewrite hook (some 0.9M
instructions, ~0.25 ms, a small module, on every run), where reading the ten ``spec.json`` files costs
about an eighth of the ten imports. A check's code (``.check``) is imported only by the preflight.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any

from pytest_dgx_spark import checks

__all__ = ["AREA_MARKERS", "BY_ID", "CHECKS", "IDS", "MARKER_ALL", "CheckSpec", "normalize_id"]

#: the marker every check's test carries (``-m spark_preflight``)
MARKER_ALL = "spark_preflight"
#: a spec's fields: name -> (type, default; ``None``: required)
_FIELDS: dict[str, tuple[type, Any]] = {
    "id": (str, None),
    "title": (str, None),
    "marker": (str, None),
    "area": (str, None),
    "needs_torch": (bool, False),
}


class CatalogError(RuntimeError):
    """A check package that breaks the convention (no readable ``spec.json``, its id against its name,
    a duplicate id, one marker with two area phrases): a packaging mistake, said by name at import."""


class CheckSpec:
    """A check's identity and what the plugin builds from it: its test's id and title, its area
    marker (with the phrase the marker's help says of the area: "of thermals and power") and whether
    it reads the run's torch child (the engine starts one only when a selected check does).
    ``module`` is its package's name. Its finding codes are in its ``findings`` module, loaded only
    by the preflight."""

    __slots__ = ("area", "id", "marker", "module", "needs_torch", "title")
    #: the fields in order: ``spec.json``'s, then the package's name
    FIELDS = (*_FIELDS, "module")

    def __init__(self, id: str, title: str, marker: str, area: str, needs_torch: bool = False, module: str = "") -> None:  # fmt: skip
        self.id, self.title, self.marker, self.area = id, title, marker, area
        self.needs_torch, self.module = needs_torch, module

    @property
    def number(self) -> int:
        return int(self.id[1:])

    @property
    def markers(self) -> tuple[str, str]:
        return (MARKER_ALL, self.marker)

    def _key(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.FIELDS)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CheckSpec) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return "CheckSpec({})".format(", ".join(f"{n}={getattr(self, n)!r}" for n in self.FIELDS))


def read_spec(folder: str, name: str) -> CheckSpec:
    """The spec of the check package ``folder/name`` from its ``spec.json``; :class:`CatalogError`
    saying what is wrong with it."""
    where = f"pytest_dgx_spark.checks.{name}"
    try:
        with open(os.path.join(folder, name, "spec.json"), encoding="utf-8") as fh:
            raw = json.load(fh)
    except OSError as exc:
        raise CatalogError(f"{where}: its spec.json cannot be read ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise CatalogError(f"{where}: its spec.json is not JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise CatalogError(f"{where}: its spec.json is not a JSON object")
    unknown = sorted(set(raw) - set(_FIELDS))
    if unknown:
        raise CatalogError(f"{where}: spec.json has unknown fields {unknown} (it takes {sorted(_FIELDS)})")
    values: dict[str, Any] = {}
    for field, (kind, default) in _FIELDS.items():
        value = raw.get(field, default)
        if value is None:
            raise CatalogError(f"{where}: spec.json has no {field!r}")
        if type(value) is not kind or (isinstance(value, str) and not value.strip()):
            raise CatalogError(f"{where}: spec.json's {field!r} is not a {'non-empty string' if kind is str else 'boolean'}")  # fmt: skip
        values[field] = value
    spec = CheckSpec(**values, module=name)
    if spec.id != checks.check_id(name):
        raise CatalogError(f"{where}: spec.json's id {spec.id!r} does not match its name")
    return spec


def discover(folders: Iterable[str] | None = None) -> tuple[CheckSpec, ...]:
    """Every check package (a ``g<NN>_<name>`` folder with an ``__init__.py``) in ``folders``, by
    number; by default the ``checks`` package's path (a test narrows it: tests/onlychecks.py)."""
    specs = []
    for folder in checks.__path__ if folders is None else folders:
        with os.scandir(folder) as entries:
            names = sorted(e.name for e in entries if e.is_dir() and checks.check_id(e.name))
        specs += [read_spec(folder, n) for n in names if os.path.isfile(os.path.join(folder, n, "__init__.py"))]
    specs.sort(key=lambda s: s.number)
    ids = [s.id for s in specs]
    if len(set(ids)) != len(ids):
        raise CatalogError(f"two check packages declare one id: {ids}")
    return tuple(specs)


#: every check, by number
CHECKS: tuple[CheckSpec, ...] = discover()
BY_ID: dict[str, CheckSpec] = {c.id: c for c in CHECKS}
IDS: tuple[str, ...] = tuple(c.id for c in CHECKS)
#: the checks that read the torch child (G1 ABI, G2 flash-attn, G5 copy, G7 arch list)
TORCH_CHECKS: tuple[str, ...] = tuple(c.id for c in CHECKS if c.needs_torch)
#: ``G1..G10``: the span of ids, as help and error lines write it
SPAN = f"{IDS[0]}..{IDS[-1]}" if IDS else ""

_WORDS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
          "twelve")  # fmt: skip
#: ``ten``: how many checks there are, as a sentence says it
HOW_MANY = _WORDS[len(CHECKS)] if len(CHECKS) < len(_WORDS) else str(len(CHECKS))


def _area_markers() -> dict[str, str]:
    """Area marker -> its help, ``DGX Spark preflight checks of … (G3 G6)``, from the specs."""
    by_marker: dict[str, list[CheckSpec]] = {}
    for spec in CHECKS:
        by_marker.setdefault(spec.marker, []).append(spec)
    out: dict[str, str] = {}
    for marker, specs in by_marker.items():
        areas = {s.area for s in specs}
        if len(areas) != 1:
            raise CatalogError(f"marker {marker!r}: its checks say different areas {sorted(areas)}")
        plural = "s" if len(specs) > 1 else ""
        out[marker] = f"DGX Spark preflight check{plural} {specs[0].area} ({' '.join(s.id for s in specs)})"
    return out


#: area marker -> help text, registered by the plugin on every run
AREA_MARKERS: dict[str, str] = _area_markers()


def normalize_id(text: str) -> str | None:
    """``g5`` / ``G05`` / `` 5 `` -> ``G5``; ``None`` when it names no check."""
    t = text.strip().upper().removeprefix("G")
    if not t.isdigit():
        return None
    cid = f"G{int(t)}"
    return cid if cid in BY_ID else None


def legend(ids: Iterable[str], width: int) -> list[str]:
    """``gotchas: G1 CUDA 12/13 ABI, G2 flash-attn and Unsloth, …`` for these checks, each name whole,
    wrapped to ``width``: where a newcomer reads each gotcha's name beside the default lines, whose
    ``G<n> <STATUS>: <text>`` format tools parse and so does not change (issue 34 item 7)."""
    names = [f"{BY_ID[i].id} {BY_ID[i].title}" for i in ids if i in BY_ID]
    lines: list[str] = []
    line = "gotchas:"
    for n, name in enumerate(names):
        piece = name + ("," if n < len(names) - 1 else "")
        if len(line) + 1 + len(piece) > width and line.strip() not in ("", "gotchas:"):
            lines.append(line)
            line = " "
        line += " " + piece
    return [*lines, line] if names else []
