"""pytest-html: each check's row says WARN/INFO/…, its G-line and its readings.

pytest-html's Result column can only hold pytest's outcomes (its filter
boxes hide any other word), so a WARN there reads "Passed". This plugin
adds three columns through pytest-html's own hooks: *Status* (the check's
status word with a symbol, so a WARN row reads differently from a PASS row
without any stylesheet), *Check* (the G-line) and *Readings*. The summary
gets the verdict and the counts per status; G4's row (and a
``spark_sampler`` test's) gets the thermal chart as an image extra.

Registered only when pytest-html is installed and ``--spark-preflight`` is
given; it imports nothing from pytest-html until a report is being built.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from html import escape
from typing import Any

import pytest

#: the Status cell: a symbol that tells the rows apart at a glance, then the word
SYMBOLS = {"PASS": "✓", "INFO": "ℹ", "WARN": "⚠", "SKIP": "○", "FAIL": "✗"}
HEADER = (
    '<th class="sortable" data-column-type="sparkStatus">Status</th>',
    "<th>Check</th>",
    "<th>Readings</th>",
)


def status_cell(status: str | None) -> str:
    # a no-break space keeps symbol and word on one line in a narrow column
    word = f"{SYMBOLS.get(status, '')}\u00a0{status}".strip() if status else ""
    return f'<td class="col-sparkStatus">{escape(word)}</td>'


def readings_text(readings: Mapping[str, Any]) -> str:
    """``name = value unit`` for each reading, ``; ``-joined (``[N/A]`` for None)."""
    from pytest_dgx_spark.model import Reading

    parts = []
    for name, spec in readings.items():
        spec = spec if isinstance(spec, Mapping) else {"value": spec}
        parts.append(f"{name} = {Reading(name, spec.get('value'), spec.get('unit', '')).render()}")
    return "; ".join(parts)


def chart_extra(picture: bytes | None, why: str | None, name: str) -> dict[str, Any]:
    """The chart as pytest-html's image extra, or one html line saying why not."""
    from pytest_html import extras

    if picture is None:
        return extras.html(f"<p>{escape(name)}: no chart ({escape(why or 'no series')})</p>")
    return extras.svg(base64.b64encode(picture).decode("ascii"), name=name)


class HtmlReport:
    """pytest-html hooks; ``preflight`` is the session's ``SparkPreflight``."""

    def __init__(self, config: pytest.Config, preflight: Any) -> None:
        self.config = config
        self.preflight = preflight

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_table_header(self, cells: list[str]) -> None:
        cells[1:1] = list(HEADER)

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_table_row(self, report: Any, cells: list[str]) -> None:
        data = getattr(report, "spark_result", None) or {}
        status = data.get("status") if report.when == "call" else None
        line = escape(str(data.get("line", ""))) if status else ""
        readings = escape(readings_text(data.get("readings") or {})) if status else ""
        cells[1:1] = [status_cell(status), f'<td class="col-sparkCheck">{line}</td>',
                      f'<td class="col-sparkReadings">{readings}</td>']

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_summary(self, prefix: list[str], summary: list[str], postfix: list[str],
                                    session: pytest.Session) -> None:
        from pytest_dgx_spark.model import Status, verdict_line
        from pytest_dgx_spark.report import ordered

        results = ordered(self.preflight.results.values())
        if not results:
            prefix.append("<p>spark preflight: no check ran</p>")
            return
        counts = ", ".join(
            f"{sum(1 for r in results if r.status is s)} {s.value}"
            for s in Status if any(r.status is s for r in results)
        )
        line = verdict_line(results, strict=self.preflight.settings.strict)
        prefix.append(f"<p><strong>spark preflight {escape(line)}</strong></p>")
        prefix.append(f"<p>checks: {escape(counts)}</p>")
        loud = [r for r in results if r.status in (Status.FAIL, Status.WARN)]
        if loud:
            items = "".join(f"<li>{SYMBOLS[r.status.value]} {escape(r.line())}</li>" for r in loud)
            prefix.append(f"<ul>{items}</ul>")

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        rep = yield
        from pytest_dgx_spark.session import SparkCheckItem

        if call.when == "call" and isinstance(item, SparkCheckItem) and item.spec.id == "G4":
            from pytest_dgx_spark import report_plugins

            if not report_plugins.html_wanted(self.config):
                return rep
            picture, why = report_plugins.g4_chart(self.preflight)
            if picture is not None or (why and why != "no series to draw"):
                rep.extras = [*getattr(rep, "extras", []), chart_extra(picture, why, "G4 thermals")]
        return rep


class SamplerHtml:
    """The ``spark_sampler`` chart on the test's teardown report (pytest-html
    gathers the extras of every phase into the test's row)."""

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        rep = yield
        if call.when == "teardown":
            from pytest_dgx_spark import report_plugins

            found = report_plugins.sampler_chart(item)
            if found is not None:
                picture, why = found
                rep.extras = [*getattr(rep, "extras", []), chart_extra(picture, why, "spark_sampler thermals")]
        return rep
