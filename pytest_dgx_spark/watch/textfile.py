"""The watch's ``--prometheus-textfile`` (issue 33), refreshed every sample: G3, G4 and G6 by the worst
condition active now (or instant seen), with its codes; the other checks ``not_run`` and why; the
sample's readings in base units. The file is written as the preflight's is (:mod:`.prometheus`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pytest_dgx_spark import catalog, prometheus
from pytest_dgx_spark.model import Reading, Result, Status
from pytest_dgx_spark.watch.conditions import Active
from pytest_dgx_spark.watch.sample import WatchSample

#: the checks a watch samples (the rest are ``not_run`` in its Prometheus textfile)
WATCHED = ("G3", "G4", "G6")
RANK = {"FAIL": 0, "WARN": 1, "INFO": 2}


def results(active: Iterable[Active], instants: Mapping[str, tuple[str, str]]) -> list[Result]:
    """One result per watched check: its worst condition (status, text) and the codes of all, else PASS."""
    found: dict[str, list[tuple[str, str, str]]] = {}
    for a in active:
        found.setdefault(a.code.split(".", 1)[0], []).append((a.status, a.code, a.text))
    for code, (status, text) in instants.items():
        found.setdefault(code.split(".", 1)[0], []).append((status, code, text))
    out = []
    for cid in WATCHED:
        mine = sorted(found.get(cid, []), key=lambda f: RANK.get(f[0], 3))
        if mine:
            codes = list(dict.fromkeys(c for _, c, _ in mine))
            out.append(Result(cid, Status(mine[0][0]), mine[0][2], codes=codes))
        else:
            out.append(Result(cid, Status.PASS, "no condition active"))
    return out


def readings(s: WatchSample) -> list[Reading]:
    """Each GPU's temperature, power and SM clock, and MemAvailable."""
    out = []
    for g in s.gpus or []:
        i = g.get("index", 0)
        mw = g.get("power_usage_mw")
        out += [Reading(f"gpu{i}_temperature_c", g.get("temperature_c"), "C"),
                Reading(f"gpu{i}_power_w", (mw or 0) / 1000 if mw is not None else None, "W"),
                Reading(f"gpu{i}_clock_sm_mhz", g.get("clock_sm_mhz"), "MHz")]  # fmt: skip
    if s.mem_available_kb is not None:
        out.append(Reading("mem_available_kib", s.mem_available_kb, "KiB"))
    return out


def write(path: str, active: Iterable[Active], instants: Mapping[str, tuple[str, str]], s: WatchSample,
          started: float, seconds: float) -> None:
    """Write the textfile for this sample (OSError when it cannot be written)."""
    rs = results(active, instants)
    statuses = {r.status for r in rs}
    verdict = ("blocked" if Status.FAIL in statuses else
               "ready-with-warnings" if Status.WARN in statuses else "ready")  # fmt: skip
    not_run = {cid: "not watched: watch samples G3, G4 and G6" for cid in catalog.IDS if cid not in WATCHED}
    prometheus.write_textfile(path, rs, verdict, started, seconds, not_run=not_run, readings=readings(s),
                              mode="watch")  # fmt: skip
