"""The checks, found by convention: every package ``checks/g<NN>_<name>/`` whose ``__init__``
holds a ``SPEC`` (:class:`~pytest_dgx_spark.checks.spec.CheckSpec`) is a check. Markers, ``--help``,
``--spark-only`` and every "the checks are …" text are built from them, so the number of checks and
their ids are written nowhere else. Every pytest run reads it (``--markers``): the spec packages are
plain data, standard library only; a check's code (``.check``) is imported only by the preflight.
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Iterable

from pytest_dgx_spark import checks
from pytest_dgx_spark.checks.spec import MARKER_ALL, CheckSpec

__all__ = ["AREA_MARKERS", "BY_ID", "CHECKS", "IDS", "MARKER_ALL", "CheckSpec", "normalize_id"]

#: a check's package: ``g01_cuda_abi`` is G1's
_PACKAGE = re.compile(r"g(\d{2})_[a-z0-9_]+")


class CatalogError(RuntimeError):
    """A check package that breaks the convention (its SPEC's id against its name, a duplicate id,
    one marker with two area phrases): a packaging mistake, said by name at import."""


def _discover() -> tuple[CheckSpec, ...]:
    specs: list[CheckSpec] = []
    for folder in checks.__path__:
        with os.scandir(folder) as entries:
            names = sorted(e.name for e in entries if e.is_dir() and _PACKAGE.fullmatch(e.name))
        for name in names:
            if not os.path.isfile(os.path.join(folder, name, "__init__.py")):
                continue
            spec = getattr(importlib.import_module(f"{checks.__name__}.{name}"), "SPEC", None)
            if not isinstance(spec, CheckSpec):
                raise CatalogError(f"pytest_dgx_spark.checks.{name}: no SPEC = CheckSpec(...) in its __init__")
            match = _PACKAGE.fullmatch(name)
            if match is None or spec.id != f"G{int(match.group(1))}":
                raise CatalogError(f"pytest_dgx_spark.checks.{name}: SPEC.id {spec.id!r} does not match its name")
            specs.append(spec._replace(module=name))
    specs.sort(key=lambda s: s.number)
    ids = [s.id for s in specs]
    if len(set(ids)) != len(ids):
        raise CatalogError(f"two check packages declare one id: {ids}")
    return tuple(specs)


#: every check, by number
CHECKS: tuple[CheckSpec, ...] = _discover()
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
