"""What the preflight says at the end of a pytest run: its terminal section, the ``-v``/``-rA`` words
of a check's test, the "not run" of each check left out (one rule however it was left out), JUnit's
suite properties, pytest-json-report's block and the run's own files (:mod:`.report`). A mixin of
:class:`.session.SparkPreflight`, which holds the state it reads.
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import field
from typing import Any

import pytest

from pytest_dgx_spark import catalog, launch, report
from pytest_dgx_spark.datadef import define
from pytest_dgx_spark.items import FILE_NAME, TEST_STATUS, SparkCheckItem
from pytest_dgx_spark.model import Result, Status, shorten, verdict
from pytest_dgx_spark.safe_text import write_line

COLORS: dict[Status, dict[str, Any]] = {Status.PASS: {"green": True}, Status.INFO: {"cyan": True},
    Status.WARN: {"yellow": True}, Status.SKIP: {"yellow": False}, Status.FAIL: {"red": True, "bold": True}}
VERDICT_COLORS: dict[str, dict[str, Any]] = {"blocked": {"red": True, "bold": True}, "ready-with-warnings": {"yellow": True}}


def junit_xml(config: pytest.Config) -> Any:
    """pytest's JUnit writer when ``--junitxml`` is given, else ``None``. It registers itself as a
    plugin; it is the one whose ``add_global_property`` pytest's documented
    ``record_testsuite_property`` fixture hands out (no public name reaches it from a plugin)."""
    if not getattr(config.option, "xmlpath", None):
        return None
    found = (p for p in config.pluginmanager.get_plugins() if callable(getattr(p, "add_global_property", None)))
    return next(found, None)


@define
class RunResults:
    """Everything the preflight of a run found; sent to xdist workers as a plain dict."""

    results: dict[str, Result] = field(default_factory=dict)
    host: dict[str, Any] = field(default_factory=dict)
    #: what each check's gather recorded (G4's chart is drawn from it, on any process)
    facts: dict[str, Any] = field(default_factory=dict)
    #: checks that ran though their test is not selected, and for whom
    outside: list[str] = field(default_factory=list)
    ran_for: str = ""
    #: the checks this run set out to run (a worker's item outside it was not foreseen)
    planned: list[str] = field(default_factory=list)
    #: ``--spark-diagnose``: the diagnosis of the logs (:meth:`Diagnosis.to_dict`), else empty
    diagnosis: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["results"] = [r.to_dict() for r in self.results.values()]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunResults:
        return cls(**{**data, "results": {r["id"]: Result.from_dict(r) for r in data["results"]}})


class SessionSummary:
    """The end of the run, for :class:`.session.SparkPreflight` (its state, declared here for mypy)."""

    config: pytest.Config
    settings: Any
    run: RunResults
    named: list[str] | None
    deselected: dict[str, str]
    selected: list[str] | None
    session: pytest.Session | None
    tested: set[str]
    is_worker: bool
    _engine: Any
    _collect_errors: int
    _exitstatus: int
    _notes: list[str]
    _started: tuple[float, float]

    @property
    def results(self) -> dict[str, Result]:
        return self.run.results

    @property
    def host(self) -> dict[str, Any]:
        return self.run.host

    @property
    def runs_nothing(self) -> str:
        """The pytest option under which no test runs (``--co``; ``--setup-plan``, which runs nothing;
        ``--setup-only``, which sets fixtures up but runs no test, and a check is a test), else ""."""
        opt = self.config.option
        flags = (("collectonly", "--collect-only"), ("setupplan", "--setup-plan"), ("setuponly", "--setup-only"))
        return next((flag for dest, flag in flags if getattr(opt, dest, False)), "")

    def tests_left(self) -> tuple[list[str], str]:
        """The checks with a result whose selected test never ran (``-x``, ``--maxfail``, Ctrl-C
        stopped the session first), and why: their lines are the preflight's, not passed tests."""
        left = [cid for cid in self.selected or [] if cid in self.results and cid not in self.tested]
        if not left:
            return [], ""
        session = self.session
        stop = (session.shouldfail or session.shouldstop) if session is not None else ""
        if isinstance(stop, str) and stop:
            return left, stop
        if self._exitstatus == pytest.ExitCode.INTERRUPTED:
            return left, "the run was interrupted"
        return left, "the session stopped before them"


    @pytest.hookimpl(tryfirst=True)
    def pytest_report_teststatus(self, report: pytest.TestReport, config: pytest.Config) -> Any:
        # pure: pytest-json-report calls it a second time per report
        data = getattr(report, "spark_result", None)
        if report.when != "call" or not report.passed or not data:
            return None
        return TEST_STATUS.get(data.get("status"))

    @pytest.hookimpl(optionalhook=True)
    def pytest_json_runtest_metadata(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        if call.when != "call" or not isinstance(item, SparkCheckItem) or item.spark_result is None:
            return {}
        return {"spark": item.spark_result.to_dict()}

    @pytest.hookimpl(optionalhook=True)
    def pytest_json_modifyreport(self, json_report: dict[str, Any]) -> None:
        json_report["spark_preflight"] = report.run_block(
            self.results.values(), strict=self.settings.strict, host=self.host, settings=self.settings.to_dict(),
            profile=self._profile_label(), not_run=self.not_run(), extra=self._extra(),
        )  # fmt: skip

    def _profile_label(self) -> str:
        return report.profile_label(self.settings.profile, self.host)

    def not_run(self) -> dict[str, str]:
        """Every check without a result, with why: one rule however it was left
        out, so the verdict is never ``ready`` while a check went unverified."""
        return {cid: self._why_not_run(cid) for cid in self.settings.universe if cid not in self.results}

    def _why_not_run(self, check_id: str) -> str:
        if self._collect_errors:
            return "collection error"
        if self.named is not None and check_id not in self.named:
            return f"deselected ({', '.join(f'{FILE_NAME}::{c}' for c in self.named)} named)"
        if check_id in self.deselected:
            return f"deselected ({self.deselected[check_id]})"
        if self._exitstatus == pytest.ExitCode.INTERRUPTED:
            return "the run was interrupted"
        if self.selected is None and not self.run.planned:
            return "the run stopped before collection finished"
        return "the run stopped before it"

    def why_none_ran(self) -> str:
        """The terminal's line when no check has a result."""
        if self._collect_errors:
            n = self._collect_errors
            return f"no preflight check ran: collection failed ({n} error{'s' if n != 1 else ''}), so no test ran"
        if self._exitstatus == pytest.ExitCode.INTERRUPTED:
            return "no preflight check ran: the run was interrupted"
        whys = self.not_run().values()
        if all(why.startswith("deselected (") for why in whys):
            hows = ", ".join(dict.fromkeys(why.removeprefix("deselected (")[:-1] for why in whys))
            return f"no preflight check ran (all deselected: {hows})"
        return "no preflight check ran: the run stopped before collection finished"

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.is_worker:
            return
        self._exitstatus = int(session.exitstatus)
        results = report.ordered(self.results.values())
        not_run = self.not_run()
        strict = self.settings.strict
        if (
            self.settings.gate and self.run.outside and session.exitstatus == pytest.ExitCode.OK
            and verdict(results, strict=strict).value == "blocked"
        ):  # the gate blocked on checks whose tests were deselected: not a green run
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        xml = junit_xml(self.config)
        if xml is not None and results:
            props = report.suite_properties(results, strict=strict, host=self.host, not_run=not_run)
            if launch.rank(os.environ) == 0:  # rank 0 speaks for every node
                props += report.node_properties(report.fleet_nodes(results))
            if self.run.diagnosis:
                props += [("spark.diagnosis", str(self.run.diagnosis["line"])),
                          ("spark.diagnosis.gotcha", str(self.run.diagnosis["gotcha"] or "unknown"))]  # fmt: skip
            for name, value in props:
                xml.add_global_property(name, value)
        if not self.runs_nothing:  # --co, --setup-plan run nothing by design: no report claims a verdict
            self._notes += report.write_run_files(
                self.settings, results, host=self.host, profile=self._profile_label(),
                store_items=self.store_items, env=os.environ, not_run=not_run, extra=self._extra(),
                started=self._started[0], duration=time.monotonic() - self._started[1],
            )  # fmt: skip
            if session.exitstatus == pytest.ExitCode.OK and any(n.startswith("cannot") for n in self._notes):
                session.exitstatus = pytest.ExitCode.USAGE_ERROR  # the CLI's exit 2: no report, no green run
        v = report.run_verdict(results, strict=strict, not_run=not_run)
        self.config.hook.pytest_spark_preflight_finished(config=self.config, results=results, verdict=v.value)

    def _extra(self) -> dict[str, Any] | None:
        """The reports' ``diagnosis`` key under ``--spark-diagnose``."""
        return {"diagnosis": self.run.diagnosis} if self.run.diagnosis else None

    def store_items(self) -> dict[str, Any]:
        """Every probe answer and fact of the run (what ``--spark-capture`` records)."""
        return self._engine.machine.store.items() if self._engine is not None else {}

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        if self.is_worker or self.runs_nothing:
            return
        results = report.ordered(self.results.values())
        not_run = self.not_run()
        tr = terminalreporter
        tr.write_sep("=", "spark preflight", bold=True)
        if not results:
            write_line(tr, self.why_none_ran())
        elif self.run.outside:
            write_line(tr, self._outside_line())
        verbose = config.get_verbosity() > 0
        width = config.get_terminal_writer().fullwidth
        if config.get_verbosity() >= 0:  # each gotcha's name, for a reader new to the ids (not under -q)
            for line in catalog.legend([r.check_id for r in results], width):
                write_line(tr, line)
        for result in results:  # the short line by default, at most the terminal's width
            if not verbose:
                write_line(tr, result.short_line(width), **COLORS[result.status])
                continue
            # -v: the whole line, its code, details and readings, as the CLI's -v (the FAILURES body has them too)
            first, *rest = result.report_text(codes=True).splitlines()
            write_line(tr, first, **COLORS[result.status])
            for line in rest:
                write_line(tr, line)
        if results:
            groups: dict[str, list[str]] = {}
            for cid, why in not_run.items():
                groups.setdefault(why, []).append(cid)
            for why, ids in groups.items():
                write_line(tr, shorten(f"{', '.join(ids)} not run: {why}", width), yellow=True)
            left, stopped = self.tests_left()
            if left:  # their checks ran; pytest's tally counts none of them
                write_line(tr, shorten(f"{', '.join(left)} tests not run: {stopped} (the lines above are the "
                                       "preflight's, run before the first test)", width), yellow=True)
        v = report.run_verdict(results, strict=self.settings.strict, not_run=not_run).value
        text = report.verdict_text(results, strict=self.settings.strict, not_run=not_run)
        write_line(tr, text, **VERDICT_COLORS.get(v, {"green": True}))
        if self.run.diagnosis:
            for line in self.run.diagnosis["secondary"]:
                write_line(tr, line)
            named = bool(self.run.diagnosis["gotcha"])
            write_line(tr, self.run.diagnosis["line"], red=named, bold=named)
        for note in self._notes:
            write_line(tr, note)

    def _outside_line(self) -> str:
        """Which checks ran without their test, and for whom."""
        outside, why = self.run.outside, self.run.ran_for
        if len(outside) == len(self.results):
            return f"their tests deselected, these checks ran for {why}:"
        return f"{', '.join(outside)}: {'its test' if len(outside) == 1 else 'their tests'} deselected, run for {why}"

