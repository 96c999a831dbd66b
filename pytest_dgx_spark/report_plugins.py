"""Where the preflight shows up besides the terminal's own section, registered once with
``--spark-preflight`` (:func:`register`, given the run's plugin): ``WARN <nodeid> - <G-line>`` lines
in ``-r`` short summaries (pytest's lists only its own categories); no reruns of a check under
pytest-rerunfailures (a FAIL is the machine's state, not flakiness); charts beside
``env-report.json`` for each ``spark_sampler`` test; the pytest-html and Allure plugins.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_dgx_spark import outfile
from pytest_dgx_spark.report import per_rank_path
from pytest_dgx_spark.safe_text import write_line

if TYPE_CHECKING:
    from pytest_dgx_spark.chart import Drawn

#: reportchars that ask for WARN lines
WARN_CHARS = frozenset("aAwW")
#: pytest's own short-summary letters and the stats category each prints
PYTEST_CHARS = {"x": "xfailed", "X": "xpassed", "f": "failed", "s": "skipped", "p": "passed", "E": "error"}
#: the node ids of the checks' items
CHECK_PREFIX = "spark_preflight::"


def register(config: pytest.Config, preflight: Any) -> None:
    pm = config.pluginmanager
    pm.register(PreflightExtras(config, preflight), "dgx_spark_extras")
    pm.register(WarnShortSummary(config), "dgx_spark_short_summary")
    # each report's module loads only where its plugin is
    if pm.hasplugin("html"):
        from pytest_dgx_spark.html_report import HtmlReport

        pm.register(HtmlReport(config, preflight), "dgx_spark_html")
    if pm.hasplugin("allure_pytest"):
        from pytest_dgx_spark.allure_report import AllureReport

        pm.register(AllureReport(config, preflight), "dgx_spark_allure")


def sampler_chart(item: pytest.Item) -> Drawn | None:
    """The chart of the ``spark_sampler`` series this test kept, if any. The fixture's first use loads
    the sampler module, so in a process where it is not loaded no test kept a series, and this does
    not load it (some 50 KB of bytecode a preflight run would read through pytest's rewriter)."""
    sampler = sys.modules.get("pytest_dgx_spark.sampler")
    found: Drawn | None = None if sampler is None else sampler.sampler_chart(item)
    return found


def wants_warn_lines(reportchars: str) -> bool:
    """``-ra``/``-rA``/``-rw``/``-rW`` after the last ``N`` (which cancels what came before, as pytest's)."""
    return any(char in WARN_CHARS for char in (reportchars or "").rpartition("N")[2])


def reruns_requested(config: pytest.Config) -> bool:
    """``--reruns``/``--force-reruns``/the ``reruns`` ini key: only then do the checks need the marker."""
    if config.getoption("reruns", None) or config.getoption("force_reruns", None):
        return True
    try:
        return bool(config.getini("reruns"))
    except (ValueError, KeyError):
        return False


class PreflightExtras:
    def __init__(self, config: pytest.Config, preflight: Any) -> None:
        self.config = config
        self.preflight = preflight
        self.notes: list[str] = []

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        if not self.config.pluginmanager.hasplugin("rerunfailures") or not reruns_requested(self.config):
            return
        for item in [i for i in items if i.nodeid.startswith(CHECK_PREFIX) or hasattr(i, "spark_result")]:
            if item.get_closest_marker("flaky") is None:
                item.add_marker(pytest.mark.flaky(reruns=0, condition=False))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        rep = yield
        report_path = getattr(self.preflight.settings, "report", None)
        if call.when == "teardown" and report_path is not None and (found := sampler_chart(item)) is not None:
            rep.spark_chart_note = self._write_sampler_chart(item, found, Path(report_path))
        return rep

    def _write_sampler_chart(self, item: pytest.Item, found: Drawn, report: Path) -> str:
        picture, why = found
        if picture is None:
            return f"{item.name}: thermal chart not drawn: {why}"
        from pytest_dgx_spark import chart  # lazy: chart code loads only when a chart is asked for

        target = chart.beside(per_rank_path(report, os.environ), f"thermal-{item.name}")
        try:
            outfile.write_bytes(target, picture)
        except OSError as exc:
            return f"could not write {target}: {exc.strerror or exc}"
        return f"thermal chart written to {target}"

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        note = getattr(report, "spark_chart_note", None)
        if note and not hasattr(self.config, "workerinput"):
            self.notes.append(str(note))

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        for note in self.notes:
            write_line(terminalreporter, note)


def _on_ci() -> bool:
    """pytest's documented rule for "on CI" (``CI`` or ``BUILD_NUMBER`` set and not empty, see its
    environment variables reference), under which it prints short-summary lines whole."""
    return any(os.environ.get(name) for name in ("CI", "BUILD_NUMBER"))


class WarnShortSummary:
    """WARN lines in pytest's "short test summary info"."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> Generator[None, None, None]:
        # Outermost wrapper: pytest writes its short summary in the finally of its own, so this follows it.
        try:
            return (yield)
        finally:
            self.write(terminalreporter)

    def write(self, tr: Any) -> None:
        if getattr(tr, "no_summary", False) or not wants_warn_lines(self.config.option.reportchars):
            return
        tw = self.config.get_terminal_writer()
        lines = self.warn_lines(tr, tw.fullwidth)
        if not lines:
            return
        chars = getattr(tr, "reportchars", "")
        if not any(tr.stats.get(cat) for char, cat in PYTEST_CHARS.items() if char in chars):
            tr.write_sep("=", "short test summary info", cyan=True, bold=True)
        word = tw.markup("WARN", yellow=True)  # our own colour, not escaped
        for line in lines:
            write_line(tr, line.removeprefix("WARN"), lead=word)

    def warn_lines(self, tr: Any, width: int = 120) -> list[str]:
        """``WARN <nodeid> - <G-line>``, cut to the terminal's width as pytest
        cuts its own lines (in full under ``-vv`` or on CI)."""
        lines = []
        full = _on_ci() or self.config.option.verbose >= 2
        for rep in tr.stats.get("warned", []):
            data = getattr(rep, "spark_result", None) or {}
            if getattr(rep, "when", None) != "call" or data.get("status") != "WARN":
                continue
            head, msg = f"WARN {rep.nodeid}", f" - {data.get('line', '')}"
            if not full and len(head) + len(msg) > width:
                room = width - len(head) - 3
                msg = msg[:room] + "..." if room > 6 else ""
            lines.append(head + msg)
        return lines
