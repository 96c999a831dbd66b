"""The kinds of :class:`~pytest_dgx_spark.model.Attachment` a result may carry, how a check makes one,
and how a report reads one back. A check attaches what it has (a sample series, the nodes it
compared); each report renders the kinds it knows by kind, never by check. Light: the model only
(the chart code loads where a chart is drawn, :mod:`.chart`).

- ``chart``: a thermal series, ``{"title", "samples", "names", "counters_before", "counters_after"}``
  (what :func:`pytest_dgx_spark.chart.from_samples` takes; ``names`` keyed by the GPU index as text,
  as JSON keeps it). html and Allure show it as a picture, ``--spark-report`` writes it beside itself
  as ``<report stem>.<name>.svg``.
- ``nodes``: every rank's fingerprint of a multi-node job, ``{"fingerprints": [...]}``: the merged
  env-report's ``nodes`` and ``cross_node``, JUnit's ``spark.node<k>.*`` properties.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pytest_dgx_spark.model import Attachment, Result

CHART = "chart"
NODES = "nodes"


def thermal_chart(title: str, name: str, *, chart_title: str, samples: Sequence[Mapping[str, Any]],
                  devices: Iterable[Mapping[str, Any]] = (), counters_before: Sequence[Any] = (),
                  counters_after: Sequence[Any] = ()) -> list[Attachment]:
    """A ``chart`` attachment of a sample series, or none for fewer than two samples (nothing to draw)."""
    if len(samples) < 2:
        return []
    names = {str(d.get("index", 0)): str(d["name"]) for d in devices
             if isinstance(d, Mapping) and d.get("name") and isinstance(d.get("index", 0), int)}
    data = {"title": chart_title, "samples": [dict(s) for s in samples], "names": names,
            "counters_before": list(counters_before), "counters_after": list(counters_after)}
    return [Attachment(CHART, title, data, name)]


def node_table(exchanged: Mapping[str, Any] | None, title: str = "nodes") -> list[Attachment]:
    """A ``nodes`` attachment of the fingerprints every rank exchanged, or none when none came back."""
    fingerprints = [dict(fp) for fp in (exchanged or {}).get("fingerprints") or [] if isinstance(fp, Mapping)]
    return [Attachment(NODES, title, {"fingerprints": fingerprints})] if fingerprints else []


def attached(results: Iterable[Result], kind: str) -> list[tuple[Result, Attachment]]:
    """Every attachment of ``kind`` with the result that carries it, in the results' order."""
    return [(r, a) for r in results for a in r.attached(kind)]


def fingerprints(results: Iterable[Result]) -> tuple[Result | None, list[dict[str, Any]]]:
    """The result that compared the nodes of a multi-node job, and every rank's fingerprint
    (``(None, [])``: no result carries a node table)."""
    for result, found in attached(results, NODES):
        data = found.data if isinstance(found.data, Mapping) else {}
        fps = [dict(fp) for fp in data.get("fingerprints") or [] if isinstance(fp, Mapping)]
        if fps:
            return result, fps
    return None, []
