"""Allure: each check carries its status word, its G-line and its readings.

allure-pytest knows only passed/failed/broken/skipped, so a WARN is a green
"passed" and a FAIL (our own exception, not an ``AssertionError``) is
"broken" with the exception's class name in front of the message. This
plugin, once allure-pytest has filled the call phase in:

* tags the check with its status word (``WARN``: one tag filter finds every
  WARN) and sets the label ``spark_status`` to it;
* makes the G-line the status message (statusDetails.message), with the
  details and readings as the trace, and reports a FAIL as "failed";
* adds each reading as a parameter (``excluded``, so the readings, which
  change run to run, do not split the check's history);
* attaches G4's thermal chart (and a ``spark_sampler`` test's);
* writes the verdict and the counts to ``environment.properties`` in the
  results folder at the end of the run.

Registered only when allure-pytest is installed and ``--spark-preflight``
is given; it does nothing unless ``--alluredir`` is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

#: environment.properties keys this plugin owns (others' keys are kept)
ENV_PREFIX = "spark."


def listener(config: pytest.Config) -> Any:
    """allure-pytest's listener, registered only when ``--alluredir`` is given."""
    return config.pluginmanager.get_plugin("allure_listener")


def current_test(config: pytest.Config) -> Any:
    found = listener(config)
    if found is None:
        return None
    try:
        return found.allure_logger.get_test(None)
    except Exception:  # another allure-pytest layout: labels still work through allure.dynamic
        return None


def attach_chart(picture: bytes | None, name: str) -> None:
    if picture is None:
        return
    import allure

    allure.attach(picture, name=name, attachment_type=allure.attachment_type.SVG)


class AllureReport:
    """allure-pytest additions; ``preflight`` is the session's ``SparkPreflight``."""

    def __init__(self, config: pytest.Config, preflight: Any) -> None:
        self.config = config
        self.preflight = preflight

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # logreport follows makereport, where allure-pytest set status and message.
        # Under xdist the worker that ran the check did all this; the controller
        # sees the same report again (``report.node`` set) with no Allure test open.
        data = getattr(report, "spark_result", None)
        if report.when != "call" or not data or getattr(report, "node", None) is not None:
            return
        if listener(self.config) is None:
            return
        import allure

        status = str(data.get("status"))
        allure.dynamic.tag(status)
        allure.dynamic.label("spark_status", status)
        from pytest_dgx_spark.html_report import readings_text  # one rendering of readings

        for name, spec in (data.get("readings") or {}).items():
            text = readings_text({name: spec}).split(" = ", 1)[-1]
            allure.dynamic.parameter(name, text, excluded=True)
        self._status_details(data)
        if data.get("id") == "G4":
            from pytest_dgx_spark import report_plugins

            picture, _ = report_plugins.g4_chart(self.preflight)
            attach_chart(picture, "G4 thermals")

    def _status_details(self, data: Mapping[str, Any]) -> None:
        from allure_commons.model2 import Status as AllureStatus
        from allure_commons.model2 import StatusDetails

        from pytest_dgx_spark.model import Result

        test = current_test(self.config)
        if test is None:
            return
        result = Result.from_dict(data)
        test.statusDetails = StatusDetails(message=result.line(), trace=result.report_text())
        if result.status.value == "FAIL" or (
            result.status.value == "WARN" and self.preflight.settings.strict
        ):
            test.status = AllureStatus.FAILED

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(self.config, "workerinput") or listener(self.config) is None:
            return
        folder = getattr(self.config.option, "allure_report_dir", None)
        if not folder:
            return
        try:
            write_environment(Path(folder), environment(self.preflight))
        except OSError as exc:  # a vanished folder, or a FIFO/device where the file goes
            reporter = self.config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                from pytest_dgx_spark.safe_text import write_line

                write_line(reporter, f"allure environment.properties not written: {exc.strerror or exc}", yellow=True)


class SamplerAllure:
    """The ``spark_sampler`` chart, attached to the test that used it."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        rep = yield
        if call.when == "teardown" and listener(self.config) is not None:
            from pytest_dgx_spark import report_plugins

            found = report_plugins.sampler_chart(item)
            if found is not None:
                attach_chart(found[0], "spark_sampler thermals")
        return rep


def environment(preflight: Any) -> dict[str, str]:
    """``spark.*`` properties: verdict, its line, profile, counts per status."""
    from pytest_dgx_spark.model import Status, verdict, verdict_line
    from pytest_dgx_spark.report import ordered

    results = ordered(preflight.results.values())
    strict = preflight.settings.strict
    props = {
        "spark.verdict": verdict(results, strict=strict).value if results else "no check ran",
        "spark.verdict.line": verdict_line(results, strict=strict) if results else "no check ran",
        "spark.profile": str(preflight._profile_label()),
    }
    for status in Status:
        props[f"spark.checks.{status.value}"] = str(sum(1 for r in results if r.status is status))
    for r in results:
        props[f"spark.{r.check_id}"] = r.status.value
    return props


def _escape(value: str) -> str:
    """A Java properties value on one line."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


def write_environment(folder: Path, props: Mapping[str, str]) -> None:
    """Merge ``props`` into ``environment.properties`` (keys of others kept).

    Read without blocking and written atomically, only over a regular file
    (:mod:`pytest_dgx_spark.outfile`): a FIFO planted there blocked ``write_text``
    forever (no reader), after every test had run, and a symlink planted
    there is neither read (a root-only file's lines would be kept in a
    readable one) nor written through. Anything else raises
    :class:`OSError` and is left as it is."""
    from pytest_dgx_spark import outfile

    path = folder / "environment.properties"
    kept: list[str] = []
    folder.mkdir(parents=True, exist_ok=True)  # allure-pytest made it already, unless it vanished
    old = outfile.read_existing(path, 1 << 20)  # never through a planted link (issue 19)
    if old is not None:
        text = old.decode("utf-8", errors="replace")
        for line in text.splitlines():
            key = line.split("=", 1)[0].strip()
            if not key.startswith(ENV_PREFIX):
                kept.append(line)
    lines = kept + [f"{k}={_escape(v)}" for k, v in props.items()]
    outfile.write_bytes(path, ("\n".join(lines) + "\n").encode("utf-8"))


def read_environment(path: Path) -> dict[str, str]:
    """The inverse, for tests and tools: ``key=value`` lines into a dict."""
    out = {}
    for line in _lines(path):
        if "=" in line and not line.lstrip().startswith(("#", "!")):
            key, value = line.split("=", 1)
            out[key.strip()] = value.replace("\\n", "\n").replace("\\\\", "\\")
    return out


def _lines(path: Path) -> Iterable[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
