"""Allure (with ``--alluredir``): each check carries its status word, its G-line and its readings.

allure-pytest knows only passed/failed/broken/skipped, so this tags each check with its status word
(and label ``spark_status``), makes the G-line the message and its details the trace, reports a FAIL
(or a WARN under ``--strict``) as "failed", adds readings as ``excluded`` parameters (they must not
split the history), attaches a result's charts (G4's thermal sample), and writes the verdict to
``environment.properties``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from pytest_dgx_spark import outfile
from pytest_dgx_spark.attachments import CHART
from pytest_dgx_spark.model import Result, Status, verdict, verdict_line
from pytest_dgx_spark.report import ordered, profile_label
from pytest_dgx_spark.safe_text import write_line

#: environment.properties keys this plugin owns (others' keys are kept)
ENV_PREFIX = "spark."


def listener(config: pytest.Config) -> Any:
    """allure-pytest's listener, registered only when ``--alluredir`` is given."""
    return config.pluginmanager.get_plugin("allure_listener")


def attach_chart(picture: bytes | None, name: str) -> None:
    if picture is not None:
        import allure  # lazy: allure-pytest is optional and loaded only with --alluredir

        allure.attach(picture, name=name, attachment_type=allure.attachment_type.SVG)


class AllureReport:
    """allure-pytest additions; ``preflight`` exposes ``.settings``, ``.results``, ``.host``."""

    def __init__(self, config: pytest.Config, preflight: Any) -> None:
        self.config = config
        self.preflight = preflight

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # logreport follows makereport, where allure-pytest set status and message.
        # Under xdist the controller sees the worker's report again (``report.node``), no test open.
        data = getattr(report, "spark_result", None)
        if report.when != "call" or not data or getattr(report, "node", None) is not None:
            return
        found = listener(self.config)
        if found is None:
            return
        import allure  # lazy: allure-pytest is optional and loaded only with --alluredir
        from allure_commons.model2 import Status as AllureStatus  # lazy: as above
        from allure_commons.model2 import StatusDetails  # lazy: as above

        result = Result.from_dict(data)
        allure.dynamic.tag(result.status.value)
        allure.dynamic.label("spark_status", result.status.value)
        for reading in result.readings:
            allure.dynamic.parameter(reading.name, reading.render(), excluded=True)
        try:
            test = found.allure_logger.get_test(None)
        except Exception:  # another allure-pytest layout: the labels above still went through
            test = None
        if test is not None:
            test.statusDetails = StatusDetails(message=result.line(), trace=result.report_text())
            strict = self.preflight.settings.strict
            if result.status is Status.FAIL or (strict and result.status is Status.WARN):
                test.status = AllureStatus.FAILED
        for found in result.attached(CHART):
            from pytest_dgx_spark import chart  # lazy: chart code loads only when a chart is asked for

            attach_chart(chart.drawn(found, self.preflight)[0], found.title)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        folder = getattr(self.config.option, "allure_report_dir", None)
        if hasattr(self.config, "workerinput") or listener(self.config) is None or not folder:
            return
        try:
            write_environment(Path(folder), environment(self.preflight))
        except OSError as exc:  # a vanished folder, or a FIFO/device where the file goes
            if (reporter := self.config.pluginmanager.get_plugin("terminalreporter")) is not None:
                why = exc.strerror or exc
                write_line(reporter, f"allure environment.properties not written: {why}", yellow=True)


def environment(preflight: Any) -> dict[str, str]:
    """``spark.*`` properties: verdict, its line, profile, counts per status."""
    results = ordered(preflight.results.values())
    strict = preflight.settings.strict
    return {"spark.verdict": verdict(results, strict=strict).value if results else "no check ran",
            "spark.verdict.line": verdict_line(results, strict=strict) if results else "no check ran",
            "spark.profile": profile_label(preflight.settings.profile, preflight.host),
            **{f"spark.checks.{s.value}": str(sum(r.status is s for r in results)) for s in Status},
            **{f"spark.{r.check_id}": r.status.value for r in results}}


def write_environment(folder: Path, props: Mapping[str, str]) -> None:
    """Merge ``props`` into ``environment.properties``, keeping others' keys; through :mod:`outfile`
    (never through a planted link, never blocking on a FIFO), so anything else raises OSError."""
    path = folder / "environment.properties"
    folder.mkdir(parents=True, exist_ok=True)  # allure-pytest made it already, unless it vanished
    old = outfile.read_existing(path, 1 << 20)
    kept = [line for line in (old or b"").decode("utf-8", errors="replace").splitlines()
            if not line.split("=", 1)[0].strip().startswith(ENV_PREFIX)]
    escaped = {k: v.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
               for k, v in props.items()}
    lines = kept + [f"{k}={v}" for k, v in escaped.items()]
    outfile.write_bytes(path, ("\n".join(lines) + "\n").encode("utf-8"))


def read_environment(path: Path) -> dict[str, str]:
    """The inverse, for tests and tools: ``key=value`` lines into a dict."""
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines() if path.is_file() else []:
        if "=" in line and not line.lstrip().startswith(("#", "!")):
            key, value = line.split("=", 1)
            out[key.strip()] = value.replace("\\n", "\n").replace("\\\\", "\\")
    return out
