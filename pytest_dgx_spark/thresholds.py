"""Named thresholds with their GB10 and generic-profile defaults.

Each is a default a user can override (``--spark-threshold NAME=VALUE`` or the
``spark_preflight_threshold`` ini lines), and each verdict quotes the value it
used. The table is ``data/thresholds.json``; where every number comes from is
docs/EVIDENCE.md (most are community observations, not NVIDIA specifications).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple


class Threshold(NamedTuple):
    name: str
    gb10: float
    generic: float
    unit: str
    help: str


#: one row per threshold: [name, gb10 default, generic default, unit, help]
_ROWS = json.loads((Path(__file__).parent / "data" / "thresholds.json").read_text(encoding="utf-8"))
THRESHOLDS: dict[str, Threshold] = {
    row[0]: Threshold(row[0], float(row[1]), float(row[2]), row[3], row[4]) for row in _ROWS
}


def defaults(profile: str) -> dict[str, float]:
    """Default thresholds for ``gb10`` or ``generic``."""
    return {name: (t.gb10 if profile == "gb10" else t.generic) for name, t in THRESHOLDS.items()}
