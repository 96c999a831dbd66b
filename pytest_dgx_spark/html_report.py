"""pytest-html: each check's row reads as the terminal does.

pytest-html knows only pytest's outcomes and a WARN is a passed test to pytest, so a WARN row stays
in the "Passed" filter (its filters and sort read the row's outcome, not the cell) but its Result cell
is the text ``WARN`` (INFO ``INFO``: what copy-paste and a screen reader get, as the terminal's -v
says it), the counts read ``8 Passed, 1 Warned``, a skip's log says its reason, and *Status*, *Check*
and *Readings* columns are added; the summary gets the verdict and counts, a row whose result carries a
chart (G4's thermal sample) the picture. pytest-html is imported only while reporting.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from html import escape
from typing import Any

import pytest

from pytest_dgx_spark.attachments import CHART
from pytest_dgx_spark.model import Reading, Result, Status, verdict_line
from pytest_dgx_spark.report import ordered

#: the Status cell: a symbol that tells the rows apart at a glance, then the word
SYMBOLS = {"PASS": "✓", "INFO": "ℹ", "WARN": "⚠", "SKIP": "○", "FAIL": "✗"}
HEADER = ('<th class="sortable" data-column-type="sparkStatus">Status</th>', "<th>Check</th>",
          "<th>Readings</th>")
#: the Result cell's text for a passed check, as the terminal's -v says it (pytest-html's filters and
#: sort read the row's outcome, "Passed", from its data, not this text: issue 34 item 9)
WORDS = {"WARN": "WARN", "INFO": "INFO"}
#: the words coloured as the terminal colours them; lines stay whole
STYLE = """<style>
td.col-result.spark-WARN { color: #c77c00; }
td.col-result.spark-INFO { color: #138496; }
td.col-sparkStatus, td.col-sparkCheck, span.spark-reading { white-space: nowrap; }
td.col-sparkCheck { max-width: 52em; overflow: hidden; text-overflow: ellipsis; }
</style>"""


def html_wanted(config: pytest.Config) -> bool:
    return bool(config.pluginmanager.hasplugin("html") and config.getoption("htmlpath", None))


def readings_parts(readings: Mapping[str, Any]) -> list[str]:
    """``name = value unit`` for each reading (``[N/A]`` for None)."""
    specs = {name: spec if isinstance(spec, Mapping) else {"value": spec} for name, spec in readings.items()}
    parsed = {name: Reading(name, s.get("value"), s.get("unit", "")) for name, s in specs.items()}
    return [f"{name} = {r.render()}" for name, r in parsed.items()]


def chart_extra(picture: bytes | None, why: str | None, name: str) -> dict[str, Any]:
    """The chart as pytest-html's image extra, or one html line saying why not."""
    from pytest_html import extras  # lazy: only while pytest-html builds its report

    if picture is None:
        return extras.html(f"<p>{escape(name)}: no chart ({escape(why or 'no series')})</p>")
    return extras.svg(base64.b64encode(picture).decode("ascii"), name=name)


def skip_reason(report: Any) -> str | None:
    """``Skipped: why`` from a skip's ``(path, line, reason)`` longrepr, else None."""
    longrepr = getattr(report, "longrepr", None)
    if report.skipped and isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return None


class HtmlReport:
    """pytest-html hooks; ``preflight`` exposes ``.settings`` and ``.results``."""

    def __init__(self, config: pytest.Config, preflight: Any) -> None:
        self.config = config
        self.preflight = preflight
        self.page: Any = None
        self.warned = 0

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_report_title(self, report: Any) -> None:
        self.page = report  # pytest-html's report data: its outcome counts are set right at the end

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_table_header(self, cells: list[str]) -> None:
        cells[1:1] = list(HEADER)

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_table_row(self, report: Any, cells: list[str]) -> None:
        data = getattr(report, "spark_result", None) or {}
        status = data.get("status") if report.when == "call" else None
        word = WORDS.get(status or "") if report.passed else None
        self._restore_outcomes()
        if word and cells and cells[0].startswith('<td class="col-result">'):
            self.warned += status == "WARN"
            cells[0] = f'<td class="col-result spark-{status}">{word}</td>'  # the text itself, not a CSS word
        line = escape(Result.from_dict(data).line()) if status else ""
        check = f'<td class="col-sparkCheck" title="{line}">{line}</td>'
        readings = "; ".join(f'<span class="spark-reading">{escape(text)}</span>'
                             for text in readings_parts(data.get("readings") or {})) if status else ""
        # a no-break space keeps symbol and word on one line in a narrow column
        word = f"{SYMBOLS.get(status, '')}\u00a0{status}".strip() if status else ""
        cells[1:1] = [f'<td class="col-sparkStatus">{escape(word)}</td>', check,
                      f'<td class="col-sparkReadings">{readings}</td>']

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_table_html(self, report: Any, data: list[str]) -> None:
        reason = skip_reason(report)
        if reason is not None and data and data[0] == escape(report.longreprtext) + "\n":
            data[0] = escape(reason) + "\n"

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_summary(self, prefix: list[str]) -> None:
        self._restore_outcomes()
        self._count_warned()
        prefix.append(STYLE)
        results = ordered(self.preflight.results.values())
        if not results:
            prefix.append("<p>spark preflight: no check ran</p>")
            return
        counts = ", ".join(f"{n} {s.value}" for s in Status if (n := sum(r.status is s for r in results)))
        line = verdict_line(results, strict=self.preflight.settings.strict)
        prefix.append(f"<p><strong>spark preflight {escape(line)}</strong></p>")
        prefix.append(f"<p>checks: {escape(counts)}</p>")
        loud = "".join(f"<li>{SYMBOLS[r.status.value]} {escape(r.line())}</li>" for r in results if r.loud)
        if loud:
            prefix.append(f"<ul>{loud}</ul>")

    def _restore_outcomes(self) -> None:
        """pytest-html reads a row's outcome (its filters, sort and row class) from the Result cell's text:
        a WARN or INFO row's outcome is put back to "Passed", which pytest decided, so the "Passed"
        filter still shows and hides it. Each row is in the page's data once added (after this hook
        ran for it): done at the next row and at the summary, before the final page is written."""
        data = getattr(self.page, "data", None)
        tests = data.get("tests") if isinstance(data, dict) else None
        for rows in tests.values() if isinstance(tests, dict) else ():
            for row in rows if isinstance(rows, list) else ():
                if isinstance(row, dict) and row.get("result") in WORDS.values():
                    row["result"] = "Passed"

    def _count_warned(self) -> None:
        """``8 Passed, 1 Warned`` where pytest-html counted 9 passed: the one
        "Passed" filter box still shows (and hides) both."""
        outcomes = getattr(self.page, "outcomes", None)
        passed = outcomes.get("passed") if isinstance(outcomes, dict) else None
        if self.warned and isinstance(passed, dict) and isinstance(passed.get("value"), int):
            passed["value"] -= self.warned
            passed["label"] = f"{passed.get('label', 'Passed')}, {self.warned} Warned"
            self.warned = 0

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        rep = yield
        result = getattr(item, "spark_result", None) if call.when == "call" else None
        charts = result.attached(CHART) if isinstance(result, Result) else []
        if charts and html_wanted(self.config):
            from pytest_dgx_spark import chart  # lazy: chart code loads only when a chart is asked for

            for found in charts:
                picture, why = chart.drawn(found, self.preflight)
                if picture is not None or (why and why != "no series to draw"):
                    rep.extras = [*getattr(rep, "extras", []), chart_extra(picture, why, found.title)]
        return rep
