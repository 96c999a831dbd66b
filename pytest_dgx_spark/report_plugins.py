"""Where the preflight shows up besides the terminal's own section.

:func:`register` is called once by ``SparkPreflight`` (so only with
``--spark-preflight``). It always adds :class:`PreflightExtras` (cheap: no
imports) and, when installed, the pytest-html and Allure plugins of
:mod:`pytest_dgx_spark.html_report` and :mod:`pytest_dgx_spark.allure_report`.

:class:`PreflightExtras` does three things pytest alone would not:

* **WARN in ``-r`` short summaries.** pytest's "short test summary info"
  lists only its own categories (``-rA`` shows PASSED, SKIPPED, FAILED …);
  a WARN is in the ``warned`` category and was left out. With ``-ra``,
  ``-rA``, ``-rw`` or ``-rW`` each WARN gets a line ``WARN <nodeid> - <G-line>``
  at the end of that section (``w`` because a WARN is the check's warning;
  ``W`` is the letter the progress line prints for it).
* **No reruns of a check** under pytest-rerunfailures: a FAIL is the
  machine's state, not flakiness. Each check item gets rerunfailures' own
  marker ``flaky(reruns=0, condition=False)``; the condition also beats
  ``--reruns-mode append`` and ``--force-reruns``.
* **Charts beside ``env-report.json``** for each ``spark_sampler`` test
  (G4's chart is written by :func:`pytest_dgx_spark.report.write_run_files`).
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

#: reportchars that ask for WARN lines (see the module docstring)
WARN_CHARS = frozenset("aAwW")
#: pytest's own short-summary letters and the stats category each prints
PYTEST_CHARS = {"x": "xfailed", "X": "xpassed", "f": "failed", "s": "skipped", "p": "passed", "E": "error"}

_g4_cache: weakref.WeakKeyDictionary[Any, tuple[bytes | None, str | None]] = weakref.WeakKeyDictionary()


def register(config: pytest.Config, preflight: Any) -> None:
    pm = config.pluginmanager
    pm.register(PreflightExtras(config, preflight), "dgx_spark_extras")
    pm.register(WarnShortSummary(config), "dgx_spark_short_summary")
    if pm.hasplugin("html"):
        from pytest_dgx_spark.html_report import HtmlReport

        pm.register(HtmlReport(config, preflight), "dgx_spark_html")
    if pm.hasplugin("allure_pytest"):
        from pytest_dgx_spark.allure_report import AllureReport

        pm.register(AllureReport(config, preflight), "dgx_spark_allure")


# --------------------------------------------------------------------------- charts


def html_wanted(config: pytest.Config) -> bool:
    return bool(config.pluginmanager.hasplugin("html") and config.getoption("htmlpath", None))


def allure_wanted(config: pytest.Config) -> bool:
    return config.pluginmanager.get_plugin("allure_listener") is not None


def g4_facts(preflight: Any) -> dict[str, Any] | None:
    """G4's facts as gathered in this process (or replayed), if G4 ran here."""
    replay = getattr(preflight, "replay", None)
    if replay is not None:
        entry = (replay.get("checks") or {}).get("G4") or {}
        return entry.get("facts") if isinstance(entry.get("facts"), dict) else None
    try:
        stored = preflight.engine.facts("G4")
    except Exception:  # no engine in this process: no chart, never a failed report
        return None
    facts = stored.get("facts") if isinstance(stored, dict) else None
    return facts if isinstance(facts, dict) else None


def g4_chart(preflight: Any) -> tuple[bytes | None, str | None]:
    """G4's chart as SVG, drawn once per process: ``(svg, None)`` or ``(None, why)``."""
    if preflight in _g4_cache:
        return _g4_cache[preflight]
    from pytest_dgx_spark import chart

    facts = g4_facts(preflight)
    data = chart.from_facts(facts, title="G4 thermal sample") if facts else None
    found = chart.draw(data, "svg")
    _g4_cache[preflight] = found
    return found


def sampler_chart(item: pytest.Item) -> tuple[bytes | None, str | None] | None:
    """The chart of the ``spark_sampler`` series this test recorded (None: it used none)."""
    from pytest_dgx_spark import sampler

    stored = item.stash.get(sampler.SERIES_KEY, None)
    if not stored:
        return None
    cached = item.stash.get(sampler.CHART_KEY, None)
    if cached is not None:
        return cached
    from pytest_dgx_spark import chart

    data = chart.from_samples(
        stored["samples"], title=f"spark_sampler: {item.name}", names=stored.get("names"),
        counters_before=stored.get("counters_before"), counters_after=stored.get("counters_after"),
    )
    found = chart.draw(data, "svg") if data is not None else None
    if found is not None:
        item.stash[sampler.CHART_KEY] = found
    return found


def sampler_hooks(config: pytest.Config) -> None:
    """Register the pytest-html/Allure sampler-chart hooks once (called by the
    fixture's teardown, so a run that never samples never loads them)."""
    pm = config.pluginmanager
    if html_wanted(config) and pm.get_plugin("dgx_spark_sampler_html") is None:
        from pytest_dgx_spark.html_report import SamplerHtml

        pm.register(SamplerHtml(), "dgx_spark_sampler_html")
    if allure_wanted(config) and pm.get_plugin("dgx_spark_sampler_allure") is None:
        from pytest_dgx_spark.allure_report import SamplerAllure

        pm.register(SamplerAllure(config), "dgx_spark_sampler_allure")


# --------------------------------------------------------------------------- the plugin


def wants_warn_lines(reportchars: str) -> bool:
    """``-ra``/``-rA``/``-rw``/``-rW`` (a later ``N`` cancels, as pytest's does)."""
    wanted = False
    for char in reportchars or "":
        if char == "N":
            wanted = False
        elif char in WARN_CHARS:
            wanted = True
    return wanted


def reruns_requested(config: pytest.Config) -> bool:
    """``--reruns``/``--force-reruns``/the ``reruns`` ini key: only then do the
    checks need the marker (without it rerunfailures leaves every test alone)."""
    for name in ("reruns", "force_reruns"):
        if config.getoption(name, None):
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

    # ------------------------------------------------------------------ reruns

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        if not self.config.pluginmanager.hasplugin("rerunfailures") or not reruns_requested(self.config):
            return
        from pytest_dgx_spark.session import SparkCheckItem

        for item in items:
            if isinstance(item, SparkCheckItem) and item.get_closest_marker("flaky") is None:
                item.add_marker(pytest.mark.flaky(reruns=0, condition=False))

    # ------------------------------------------------------------------ sampler charts beside the report

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        rep = yield
        report_path = getattr(self.preflight.settings, "report", None)
        if call.when == "teardown" and report_path is not None:
            found = sampler_chart(item)
            if found is not None:
                rep.spark_chart_note = self._write_sampler_chart(item, found, Path(report_path))
        return rep

    def _write_sampler_chart(self, item: pytest.Item, found: tuple[bytes | None, str | None], report: Path) -> str:
        from pytest_dgx_spark import chart
        from pytest_dgx_spark.report import per_rank_path, write_bytes

        picture, why = found
        if picture is None:
            return f"{item.name}: thermal chart not drawn: {why}"
        target = chart.beside(per_rank_path(report, os.environ), f"thermal-{item.name}")
        try:
            write_bytes(target, picture)
        except OSError as exc:
            return f"could not write {target}: {exc.strerror or exc}"
        return f"thermal chart written to {target}"

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        note = getattr(report, "spark_chart_note", None)
        if note and not hasattr(self.config, "workerinput"):
            self.notes.append(str(note))

    # ------------------------------------------------------------------ terminal

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        from pytest_dgx_spark.safe_text import write_line

        for note in self.notes:
            write_line(terminalreporter, note)



def _on_ci() -> bool:
    try:
        from _pytest.terminal import running_on_ci
    except ImportError:  # pragma: no cover - older pytest
        return bool(os.environ.get("CI") or os.environ.get("BUILD_NUMBER"))
    return bool(running_on_ci())


class WarnShortSummary:
    """WARN lines in pytest's "short test summary info" (see the module docstring)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> Generator[None, None, None]:
        # Outermost wrapper: pytest writes its short summary in the finally of
        # its own wrapper, so this runs right after it.
        try:
            return (yield)
        finally:
            self.write(terminalreporter)

    def write(self, tr: Any) -> None:
        if getattr(tr, "no_summary", False) or not wants_warn_lines(self.config.option.reportchars):
            return
        lines = self.warn_lines(tr)
        if not lines:
            return
        chars = getattr(tr, "reportchars", "")
        printed = any(tr.stats.get(cat) for char, cat in PYTEST_CHARS.items() if char in chars)
        if not printed:
            tr.write_sep("=", "short test summary info", cyan=True, bold=True)
        from pytest_dgx_spark.safe_text import write_line

        tw = getattr(tr, "_tw", None)
        word = tw.markup("WARN", yellow=True) if tw is not None else "WARN"  # our own colour, not escaped
        for line in lines:
            write_line(tr, line.removeprefix("WARN"), lead=word)

    def warn_lines(self, tr: Any) -> list[str]:
        """``WARN <nodeid> - <G-line>``, cut to the terminal's width as pytest
        cuts its own lines (in full under ``-vv`` or on CI); plain text, the
        word coloured by :meth:`write`."""
        lines = []
        full = _on_ci() or self.config.option.verbose >= 2
        tw = getattr(tr, "_tw", None)
        width = getattr(tw, "fullwidth", 120)
        for rep in tr.stats.get("warned", []):
            data = getattr(rep, "spark_result", None) or {}
            if getattr(rep, "when", None) != "call" or data.get("status") != "WARN":
                continue
            head = f"WARN {rep.nodeid}"
            msg = f" - {data.get('line', '')}"
            if not full and len(head) + len(msg) > width:
                room = width - len(head) - 3
                msg = msg[:room] + "..." if room > 6 else ""
            lines.append(head + msg)
        return lines
