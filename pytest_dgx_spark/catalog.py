"""The ten gotchas as static data: id, title, area marker, implementing module.
Every pytest run reads it (``--markers``): standard library only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

MARKER_ALL = "spark_preflight"

#: area marker -> help text, registered by the plugin on every run
AREA_MARKERS: dict[str, str] = {
    "spark_launch": "DGX Spark preflight checks that catch launch failures (G1 G2 G9)",
    "spark_memory": "DGX Spark preflight checks of unified-memory headroom (G3 G6)",
    "spark_thermal": "DGX Spark preflight check of thermals and power (G4)",
    "spark_bandwidth": "DGX Spark preflight check of the memory-bandwidth budget (G5)",
    "spark_precision": "DGX Spark preflight check of NVFP4 vs FP8 on SM121 (G7)",
    "spark_upstream": "DGX Spark preflight check of upstream playbook issues (G8)",
    "spark_multinode": "DGX Spark preflight check of two-Spark parallelism (G10)",
}


class CheckSpec(NamedTuple):
    id: str
    number: int
    title: str
    marker: str
    module: str

    @property
    def markers(self) -> tuple[str, str]:
        return (MARKER_ALL, self.marker)


CHECKS: tuple[CheckSpec, ...] = (
    CheckSpec("G1", 1, "CUDA 12/13 ABI", "spark_launch", "g01_cuda_abi"),
    CheckSpec("G2", 2, "flash-attn and Unsloth", "spark_launch", "g02_flash_attn"),
    CheckSpec("G3", 3, "UMA headroom", "spark_memory", "g03_uma_headroom"),
    CheckSpec("G4", 4, "thermals and power", "spark_thermal", "g04_thermal"),
    CheckSpec("G5", 5, "bandwidth budget", "spark_bandwidth", "g05_bandwidth"),
    CheckSpec("G6", 6, "UMA contention", "spark_memory", "g06_contention"),
    CheckSpec("G7", 7, "NVFP4 vs FP8", "spark_precision", "g07_nvfp4"),
    CheckSpec("G8", 8, "stale playbooks", "spark_upstream", "g08_playbooks"),
    CheckSpec("G9", 9, "container vs bare pip", "spark_launch", "g09_container"),
    CheckSpec("G10", 10, "two-Spark parallelism", "spark_multinode", "g10_multinode"),
)

BY_ID: dict[str, CheckSpec] = {c.id: c for c in CHECKS}
IDS: tuple[str, ...] = tuple(c.id for c in CHECKS)
#: the checks that read the torch child (G1 ABI, G2 flash-attn, G5 copy, G7 arch list)
TORCH_CHECKS: tuple[str, ...] = ("G1", "G2", "G5", "G7")


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
