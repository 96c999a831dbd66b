"""The plugin object registered when ``--spark-preflight`` is given.

How the ten checks become ten tests:

* Collection: a ``pytest.File`` named ``spark_preflight`` (at the rootdir,
  not on disk) is collected through ``session.genitems`` at the start of
  ``pytest_collection_modifyitems``, so its ten items are counted and seen by
  ``--lf``, ``-k``, ``-m`` and xdist like any other test. They run first:
  after every other plugin reordered (pytest-randomly shuffles), they are put
  back in front, G1..G10. Node ids are ``spark_preflight::G1``, and pytest
  takes them back as arguments (``pytest --spark-preflight spark_preflight::G3``):
  ``pytest_collection`` removes them from ``config.args`` before pytest
  resolves the rest as paths.
* ``-k G1`` matches ``G10`` too (``-k`` is a substring match); while pytest
  evaluates ``-k`` the plugin rewrites a bare check id into
  ``(G1 and not spark_check_G10)``, so an id selects exactly its check.
* Outcomes: PASS/INFO/WARN pass (WARN in a ``warned`` category, letter W),
  SKIP skips with the G-line as reason, FAIL fails with the G-line as
  message and no traceback. The result rides on ``report.spark_result``,
  which xdist carries to the controller.
* Once per run: the engine's store is a folder shared by xdist workers
  (its path travels in ``workerinput``), so each probe and each check runs
  once whichever worker asks first.
* Signals: SIGINT, SIGTERM and SIGHUP kill every probe group, then end the
  run as interrupted. Probes run in their own session, so nothing else would
  reach them. The xdist controller passes the signal on to its workers (each
  leaves its pid in the store folder) and kills any still alive 3 s later.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Generator, Iterable
from pathlib import Path
from typing import Any

import pytest

from pytest_dgx_spark import catalog, report
from pytest_dgx_spark.engine import Engine
from pytest_dgx_spark.model import PreflightResults, Result, Status, verdict
from pytest_dgx_spark.probes.commands import install_signal_handlers, restore_signal_handlers
from pytest_dgx_spark.probes.machine import Machine
from pytest_dgx_spark.probes.store import MemoryStore, SharedStore
from pytest_dgx_spark.safe_text import visible, write_line
from pytest_dgx_spark.settings import Settings

FILE_NAME = "spark_preflight"
ORDER = {cid: n for n, cid in enumerate(catalog.IDS)}
STORE_KEY = "spark_preflight_store"
WORKERS = "workers"  # the store folder's list of worker pids
_IDENT = re.compile(r"[\w:+\-.\[\]\\/]+")
_KEYWORDS = {"and", "or", "not"}


class SparkCheckFailed(Exception):
    """Raised by a check item; its message is the G-line, ``text`` the G-line
    with the check's details and readings (the failure's body, said once)."""

    def __init__(self, line: str, text: str | None = None) -> None:
        super().__init__(line)
        self.text = text or line


def rewrite_keyword_expression(expr: str) -> str:
    """Make a bare check id in ``-k`` select that check only.

    pytest's ``-k`` matches substrings, so ``G1`` also selects ``G10``. Each
    item carries the extra keyword ``spark_check_<id>``; ``G1`` becomes
    ``(G1 and not spark_check_G10)``. User tests keep their usual matching.
    """

    def replace(match: re.Match[str]) -> str:
        token = match.group(0)
        if token.lower() in _KEYWORDS or not re.fullmatch(r"[Gg]\d+", token):
            return token
        longer = [c for c in catalog.IDS if token.lower() in c.lower() and c.lower() != token.lower()]
        if not longer:
            return token
        excluded = " or ".join(f"spark_check_{c}" for c in longer)
        return f"({token} and not ({excluded}))"

    return _IDENT.sub(replace, expr)


class SparkPreflightFile(pytest.File):
    """The ten checks' parent; ``path`` is ``<rootdir>/spark_preflight``."""

    def collect(self) -> Iterable[pytest.Item]:
        for spec in catalog.CHECKS:
            yield SparkCheckItem.from_parent(self, name=spec.id, spec=spec)


class SparkCheckItem(pytest.Item):
    def __init__(self, *, spec: catalog.CheckSpec, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec = spec
        self.spark_result: Result | None = None
        for marker in spec.markers:
            self.add_marker(marker)
        self.extra_keyword_matches.add(f"spark_check_{spec.id}")

    def runtest(self) -> None:
        plugin: SparkPreflight = self.config.pluginmanager.get_plugin("dgx_spark_preflight")
        plugin.engine.prefetch()
        result = plugin.engine.run(self.spec.id)
        self.spark_result = result
        if plugin.junit_family in ("xunit1", "legacy"):
            self.user_properties.extend(report.case_properties(result))
        if result.status is Status.FAIL:
            # the failure's body carries the whole text: no captured copy beside it
            raise SparkCheckFailed(result.line(), result.report_text())
        if result.status is Status.WARN and plugin.settings.strict:
            line = f"{result.line()} (a failure under --spark-strict)"
            raise SparkCheckFailed(line, "\n".join([line, *result.report_text().splitlines()[1:]]))
        self.add_report_section("call", "stdout", result.report_text() + "\n")
        if result.status is Status.SKIP:
            try:
                raise pytest.skip.Exception(result.line(), _use_item_location=True)
            except TypeError:  # pragma: no cover - pytest without _use_item_location
                pytest.skip(result.line())

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, SparkCheckFailed):
            line = str(excinfo.value)
            # Build pytest's own "no traceback" failure (what pytest.fail(msg,
            # pytrace=False) gives) and make its message exactly the G-line,
            # without the "Failed: " prefix, so JUnit's message= is the line.
            failed = pytest.fail.Exception(excinfo.value.text, pytrace=False)
            try:
                raise failed
            except pytest.fail.Exception:
                info = pytest.ExceptionInfo.from_current()
            rep = super().repr_failure(info)
            try:
                crash = dataclasses.replace(rep.reprcrash, message=line)  # type: ignore[union-attr]
                rep.reprcrash = crash  # type: ignore[union-attr]
                chain = getattr(rep, "chain", None)
                if chain:
                    tb, _, descr = chain[-1]
                    chain[-1] = (tb, crash, descr)
            except (AttributeError, TypeError):  # pragma: no cover - defensive
                pass
            return rep
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"{self.spec.id} {self.spec.title}"


class SparkPreflight:
    """Hooks active only with ``--spark-preflight``."""

    def __init__(self, config: pytest.Config, settings: Settings, replay: dict[str, Any] | None = None) -> None:
        self.config = config
        self.settings = settings
        self.is_worker = hasattr(config, "workerinput")
        self.results: dict[str, Result] = {}
        self.host: dict[str, Any] = {}
        #: the checks this run is to check: --spark-only's, or those named as node ids
        self.enabled: list[str] = list(settings.selected)
        #: the enabled checks whose tests are still selected once every
        #: deselection (-k, -m, --deselect, --lf) is done; set when collection finishes
        self.selected: list[str] = list(settings.selected)
        self._engine: Engine | None = None
        self._store_dir: str | None = None
        self._saved_keyword: str | None = None
        #: check ids named as node ids on the command line (``spark_preflight::G3``)
        self.requested: list[str] | None = None
        #: collection finished here (on the xdist controller it never runs)
        self._collected = False
        self._collect_errors = 0
        #: checks run without their item (all deselected, asked by the gate or
        #: the fixture): why, and whether a worker already sent them on
        self.outside_reason: str | None = None
        self.outside_ids: set[str] = set()
        self._outside: list[Result] = []
        #: the run's exit status as pytest_sessionfinish saw it (for "why not run")
        self._exitstatus: int = pytest.ExitCode.OK
        self._outside_sent = False
        #: the capture being replayed (``--spark-replay``), loaded once by pytest_configure
        self.replay: dict[str, Any] | None = replay
        self._xdist: _XdistController | None = None
        if not self.is_worker and config.pluginmanager.hasplugin("xdist"):
            self._xdist = _XdistController(self)
            config.pluginmanager.register(self._xdist, "dgx_spark_xdist")
        # SIGTERM/SIGHUP end the run like Ctrl-C, after killing every probe
        # group (probes run in their own session: a CI runner's group kill
        # misses them); the xdist controller passes the signal to its workers.
        install_signal_handlers(self._xdist.forward if self._xdist else None)
        if self.is_worker:
            self._announce_worker()
        from pytest_dgx_spark import report_plugins  # pytest-html, Allure, -r WARN lines, reruns

        report_plugins.register(config, self)
        if not self.is_worker:
            self.short_failures = _ShortFailures()
            config.pluginmanager.register(self.short_failures, "dgx_spark_short_failures")

    # ------------------------------------------------------------------ engine

    @property
    def junit_family(self) -> str:
        try:
            return str(self.config.getini("junit_family"))
        except (ValueError, KeyError):
            return "xunit2"

    def store(self) -> MemoryStore:
        if self.is_worker:
            folder = self.config.workerinput.get(STORE_KEY)  # type: ignore[attr-defined]
            if folder:
                return SharedStore(Path(folder))
        return MemoryStore()

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            if self.replay is not None:
                from pytest_dgx_spark.capture import ReplayMachine

                machine: Any = ReplayMachine(self.replay)
                self._engine = Engine(self.settings, machine, self.engine_ids(), replay=self.replay)
                return self._engine
            store = self.store()
            machine = Machine(timeout=self.settings.timeout, store=store)
            shared = isinstance(store, SharedStore)
            self._engine = Engine(self.settings, machine, self.engine_ids(), background=not shared)
        return self._engine

    def engine_ids(self) -> list[str]:
        """The checks this process may run: every enabled one under the gate
        (it needs them all), else the selected ones (all enabled when none is)."""
        return self.enabled if self.settings.gate else (self.selected or self.enabled)

    def store_items(self) -> dict[str, Any]:
        """Every probe answer and fact of the run, from whichever process made it."""
        if self._store_dir is not None:
            return SharedStore(Path(self._store_dir)).items()
        return self.engine.machine.store.items() if self._engine is not None else {}

    def _announce_worker(self) -> None:
        """An xdist worker leaves its pid in the shared store folder, so the
        controller can pass a SIGTERM on to it (xdist does not say worker pids)."""
        folder = self.config.workerinput.get(STORE_KEY)  # type: ignore[attr-defined]
        if not folder:
            return
        try:
            workers = Path(folder) / WORKERS
            workers.mkdir(exist_ok=True)
            (workers / str(os.getpid())).touch()
        except OSError:
            pass

    def store_dir(self) -> str:
        """Controller side: the folder workers share (made on first use)."""
        if self._store_dir is None:
            self._store_dir = tempfile.mkdtemp(prefix="spark-preflight-")
        return self._store_dir

    # ------------------------------------------------------------------ header

    def pytest_report_header(self, config: pytest.Config) -> str:
        s = self.settings
        parts = [f"profile {s.profile}", f"timeout {s.timeout:g} s"]
        if s.only:
            parts.append("only " + ",".join(s.only))
        for flag in ("strict", "gate", "intrusive", "offline", "drop_caches"):
            if getattr(s, flag):
                parts.append(flag.replace("_", "-"))
        return "spark preflight: " + ", ".join(parts)

    # ------------------------------------------------------------------ collection

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection(self, session: pytest.Session) -> None:
        """Take our node ids out of ``config.args`` before pytest resolves them
        as paths (it would say "file or directory not found")."""
        try:
            self.requested = take_check_args(self.config, self.settings.only)
        except ValueError as exc:
            raise pytest.UsageError(visible(str(exc))) from None
        self.enabled = list(self.requested or self.settings.selected)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self._collect_errors += 1

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> Generator[None, None, None]:
        node = SparkPreflightFile.from_parent(session, path=config.rootpath / FILE_NAME)
        ours = [i for i in session.genitems(node) if isinstance(i, SparkCheckItem)]
        wanted = self.requested or self.settings.selected
        keep = [i for i in ours if i.spec.id in wanted]
        dropped = [i for i in ours if i not in keep]
        if dropped and not self.requested:  # checks not named as arguments are not deselected: not asked for
            config.hook.pytest_deselected(items=dropped)
        items[:0] = keep
        keyword = config.option.keyword or ""
        if keyword.strip():
            self._saved_keyword = keyword
            config.option.keyword = rewrite_keyword_expression(keyword)
        try:
            result = yield
            checks_first(items)  # after pytest-randomly and any other reordering
            return result
        finally:
            if self._saved_keyword is not None:
                config.option.keyword = self._saved_keyword
                self._saved_keyword = None

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Which checks run is known only now: --lf's wrapper deselects after
        ours has finished (so taking ``items`` there said 10 selected checks
        while --lf had dropped them all)."""
        self.collection_finished([item.nodeid for item in session.items])

    def collection_finished(self, nodeids: Iterable[str]) -> None:
        """The checks among the run's final node ids (here, or every xdist worker's)."""
        ids = set(nodeids)
        self.selected = [cid for cid in catalog.IDS if f"{FILE_NAME}::{cid}" in ids]
        self._collected = True

    @pytest.hookimpl(tryfirst=True)
    def pytest_make_collect_report(self, collector: pytest.Collector) -> pytest.CollectReport | None:
        # The file is not on disk; --lf's file skipper would drop it for that
        # reason alone ("skipped 1 file"). Its items are static: collect them
        # here, and let --lf select among them in pytest_collection_modifyitems.
        if isinstance(collector, SparkPreflightFile):
            return pytest.CollectReport(collector.nodeid, "passed", None, list(collector.collect()))
        return None

    # ------------------------------------------------------------------ running

    def results_view(
        self, asker: str = "the spark_preflight fixture", ids: Iterable[str] | None = None
    ) -> PreflightResults:
        """Results of ``ids`` (default: the selected checks, all enabled ones
        when none is selected), computed once and shared with the items.

        Checks run here without their item (deselected by -k, -m, --deselect
        or --lf) are still this run's results: the terminal section, the
        reports and the exit code show them (``asker`` says who needed them)."""
        wanted = list(ids) if ids is not None else (self.selected or self.enabled)
        results = self.engine.run_many(wanted)
        outside = [r for r in results if r.check_id not in self.selected]
        if outside and not self._outside:
            self._outside = outside
            self.outside_reason = asker
            if not self.is_worker:
                self._record_outside([r.to_dict() for r in outside], asker)
        return PreflightResults(results, strict=self.settings.strict)

    def _record_outside(self, data: list[dict[str, Any]], asker: str) -> None:
        """Controller side: keep checks that ran for the gate or the fixture
        (their own tests deselected) as results of the run."""
        self.outside_reason = self.outside_reason or asker
        for entry in data:
            result = Result.from_dict(entry)
            if result.check_id not in self.results:
                self.outside_ids.add(result.check_id)
                self.results[result.check_id] = result
                self.config.hook.pytest_spark_preflight_result(config=self.config, result=result)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if not self.settings.gate or isinstance(item, SparkCheckItem):
            return
        failed = self.results_view("--spark-gate", self.enabled).failed  # the gate needs every enabled check
        if failed:
            also = f" (also {', '.join(failed[1:])})" if len(failed) > 1 else ""
            reason = f"spark preflight {failed[0]} failed{also}"
            try:  # report the skip at the user's test, not inside this plugin
                raise pytest.skip.Exception(reason, _use_item_location=True)
            except TypeError:  # pragma: no cover - pytest without _use_item_location
                pytest.skip(reason)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, Any, Any]:
        rep = yield
        if self._outside and not self._outside_sent and self.is_worker:
            # an xdist worker ran checks for the gate/fixture: the controller reports them
            rep.spark_outside = {"asker": self.outside_reason, "results": [r.to_dict() for r in self._outside]}
            self._outside_sent = True
        if isinstance(item, SparkCheckItem) and call.when == "call":
            if item.spark_result is not None:
                rep.spark_result = item.spark_result.to_dict()
            try:
                rep.spark_host = self.engine.machine.identity()
            except Exception:  # identity is decoration; never fail a report on it
                rep.spark_host = {}
        return rep

    @pytest.hookimpl(tryfirst=True)
    def pytest_report_teststatus(self, report: pytest.TestReport, config: pytest.Config) -> Any:
        # Pure: pytest-json-report calls this a second time per report.
        if report.when != "call" or not report.passed:
            return None
        data = getattr(report, "spark_result", None)
        if not data:
            return None
        status = data.get("status")
        if status == "WARN":
            return "warned", "W", ("WARN", {"yellow": True})
        if status == "INFO":
            return "passed", "I", ("INFO", {"cyan": True})
        return None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        outside = getattr(report, "spark_outside", None)
        if outside and not self.is_worker:
            self._record_outside(list(outside.get("results") or []), str(outside.get("asker") or "the gate"))
        data = getattr(report, "spark_result", None)
        if report.when != "call" or not data:
            return
        result = Result.from_dict(data)
        self.results[result.check_id] = result
        if not self.host and getattr(report, "spark_host", None):
            self.host = dict(report.spark_host)
        if not self.is_worker:
            self.config.hook.pytest_spark_preflight_result(config=self.config, result=result)

    # ------------------------------------------------------------------ json-report

    @pytest.hookimpl(optionalhook=True)
    def pytest_json_runtest_metadata(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        if call.when != "call" or not isinstance(item, SparkCheckItem) or item.spark_result is None:
            return {}
        return {"spark": item.spark_result.to_dict()}

    @pytest.hookimpl(optionalhook=True)
    def pytest_json_modifyreport(self, json_report: dict[str, Any]) -> None:
        json_report["spark_preflight"] = self.run_block()

    def run_block(self) -> dict[str, Any]:
        return report.run_block(
            self.results.values(),
            strict=self.settings.strict,
            host=self.host,
            settings=self.settings.to_dict(),
            profile=self._profile_label(),
            not_run=self.not_run(),
        )

    def _profile_label(self) -> str:
        if self.settings.profile != "auto":
            return self.settings.profile
        if self.host:
            return "gb10" if self.host.get("gb10") else "generic"
        return "auto"

    # ------------------------------------------------------------------ end of run

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.is_worker:
            return
        self._exitstatus = int(session.exitstatus)
        results = report.ordered(self.results.values())
        not_run = self.not_run()
        if self._gate_blocked_a_green_run(results, session.exitstatus):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        try:
            from _pytest.junitxml import xml_key

            xml = self.config.stash.get(xml_key, None)
        except ImportError:  # pragma: no cover - pytest without junitxml
            xml = None
        if xml is not None and results:
            props = report.suite_properties(results, strict=self.settings.strict, host=self.host, not_run=not_run)
            from pytest_dgx_spark import launch

            if launch.rank(os.environ) == 0:  # rank 0 speaks for every node
                props += report.node_properties(report.fleet_nodes(self.store_items()))
            for name, value in props:
                xml.add_global_property(name, value)
        if not self.config.option.collectonly:  # --co runs nothing by design: no report claims a verdict
            notes = report.write_run_files(
                self.settings,
                results,
                host=self.host,
                profile=self._profile_label(),
                store_items=self.store_items,
                env=os.environ,
                not_run=not_run,
            )
            self._report_notes = list(notes)
            if session.exitstatus == pytest.ExitCode.OK and any(n.startswith("cannot write") for n in notes):
                session.exitstatus = pytest.ExitCode.USAGE_ERROR  # the CLI's exit 2: no report, no green run
        v = report.run_verdict(results, strict=self.settings.strict, not_run=not_run)
        self.config.hook.pytest_spark_preflight_finished(config=self.config, results=results, verdict=v.value)

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        if not self.is_worker:
            self.short_failures.restore(terminalreporter)
        if self.is_worker or config.option.collectonly:
            return
        results = report.ordered(self.results.values())
        not_run = self.not_run()
        tr = terminalreporter
        tr.write_sep("=", "spark preflight", bold=True)
        if not results:
            write_line(tr, self.why_none_ran(exitstatus))
        elif self.outside_reason:
            write_line(tr, self._outside_line(results))
        verbose = config.get_verbosity() > 0
        for result in results:
            # one short line each by default; -v gives the whole line (and -rA/JUnit/JSON the details)
            write_line(tr, result.line() if verbose else result.short_line(), **COLORS[result.status])
        if results:
            for why, ids in _grouped(not_run):
                write_line(tr, f"{', '.join(ids)} not run: {why}", yellow=True)
        v = report.run_verdict(results, strict=self.settings.strict, not_run=not_run)
        markup = {"red": True, "bold": True} if v.value == "blocked" else (
            {"yellow": True} if v.value == "ready-with-warnings" else {"green": True}
        )
        write_line(tr, report.verdict_text(results, strict=self.settings.strict, not_run=not_run), **markup)
        for note in getattr(self, "_report_notes", ()):
            write_line(tr, note)

    def _outside_line(self, results: list[Result]) -> str:
        """Which checks ran without their test, and for whom."""
        outside = [r.check_id for r in results if r.check_id in self.outside_ids]
        if len(outside) == len(results):
            return f"their tests deselected, these checks ran for {self.outside_reason}:"
        tests = "its test" if len(outside) == 1 else "their tests"
        return f"{', '.join(outside)}: {tests} deselected, run for {self.outside_reason}"

    def _gate_blocked_a_green_run(self, results: list[Result], exitstatus: int) -> bool:
        """The gate ran checks without their tests (deselected by -k, -m,
        --deselect or --lf) and they block: the run is not green, though no
        test failed."""
        if not (self.settings.gate and self.outside_reason) or exitstatus != pytest.ExitCode.OK:
            return False
        return verdict(results, strict=self.settings.strict).value == "blocked"

    def not_run(self) -> dict[str, str]:
        """Each enabled check without a result, with why: env-report lists it
        (``"not run: …"``), the terminal says it, and the verdict is never
        ``ready`` while a check went unverified."""
        return {cid: self._why_not_run(cid) for cid in self.enabled if cid not in self.results}

    def _why_not_run(self, check_id: str) -> str:
        if self._collect_errors:
            return "collection error"
        if not self._collected:
            return "the run stopped before collection finished"
        if check_id not in self.selected:
            how = self.deselected_by()
            return f"deselected ({how})" if how else "deselected"
        if self._exitstatus == pytest.ExitCode.INTERRUPTED:
            return "the run was interrupted"
        return "the run stopped before it"

    def deselected_by(self) -> str:
        """The selection options of this run (``-k one_step, --lf``): what
        deselected a check that has no test in it."""
        opt = self.config.option
        found = []
        keyword = self._saved_keyword or getattr(opt, "keyword", "")
        if keyword:
            found.append(f"-k {keyword}")
        if getattr(opt, "markexpr", ""):
            found.append(f"-m {opt.markexpr}")
        for dest, flag in (("deselect", "--deselect"), ("lf", "--lf"), ("stepwise", "--sw")):
            if getattr(opt, dest, None):
                found.append(flag)
        return ", ".join(found)

    def why_none_ran(self, exitstatus: int) -> str:
        """The terminal's line when no check has a result: say what happened."""
        if self._collect_errors:
            n = self._collect_errors
            return f"no preflight check ran: collection failed ({n} error{'s' if n != 1 else ''}), so no test ran"
        if exitstatus == pytest.ExitCode.INTERRUPTED:
            return "no preflight check ran: the run was interrupted"
        if self._collected and self.selected:
            return f"no preflight check ran: the run stopped before its {len(self.selected)} selected checks"
        if self._collected or self._xdist is not None:
            how = self.deselected_by()
            return f"no preflight check ran (all deselected: {how})" if how else "no preflight check ran (all deselected)"
        return "no preflight check ran: the run stopped before collection finished"

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self._engine is not None:
            self._engine.close()  # a run stopped early (-x, Ctrl-C) leaves no probe behind
        early = sys.modules.get("pytest_dgx_spark.early")
        if early is not None:  # a torch child started while pytest loaded, never claimed
            early.drop()
        restore_signal_handlers()
        if self._xdist is not None:
            self._xdist.reap()
        if self._store_dir is not None:
            shutil.rmtree(self._store_dir, ignore_errors=True)


COLORS: dict[Status, dict[str, bool]] = {
    Status.PASS: {"green": True},
    Status.INFO: {"cyan": True},
    Status.WARN: {"yellow": True},
    Status.SKIP: {"yellow": False},
    Status.FAIL: {"red": True, "bold": True},
}


def _grouped(not_run: dict[str, str]) -> list[tuple[str, list[str]]]:
    """``{check: why}`` as ``[(why, [checks])]``, in check order."""
    groups: dict[str, list[str]] = {}
    for cid in catalog.IDS:
        if cid in not_run:
            groups.setdefault(not_run[cid], []).append(cid)
    return list(groups.items())


def full_text_wanted(config: pytest.Config) -> bool:
    """``-v`` or ``-rA``: a check's whole text, details and readings on the terminal."""
    return config.get_verbosity() > 0 or "A" in str(getattr(config.option, "reportchars", "") or "")


def _is_check_failure(rep: Any) -> bool:
    return (
        getattr(rep, "when", None) == "call"
        and bool(getattr(rep, "spark_result", None))
        and str(getattr(rep, "nodeid", "")).startswith(f"{FILE_NAME}::")
    )


class _ShortFailures:
    """The default terminal says a check's FAIL once: its short line in the
    spark preflight section (issue 11: a FAIL's text was printed four times,
    in bodies of 330+ characters with every detail and reading).

    Without ``-v``/``-rA``, the check failures leave pytest's FAILURES
    section (held back while pytest writes it), and the short test summary
    lists them by id, pointing at the section. The reports themselves are
    untouched, and JUnit, JSON, html and Allure were written from them
    already (at session finish, before any terminal summary)."""

    def __init__(self) -> None:
        self._held: list[Any] | None = None

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: Any, config: pytest.Config) -> Generator[None, None, None]:
        stats = terminalreporter.stats
        failed = stats.get("failed") or []
        if not full_text_wanted(config) and any(_is_check_failure(r) for r in failed):
            self._held = list(failed)
            stats["failed"] = [r for r in failed if not _is_check_failure(r)]
        try:
            return (yield)
        finally:
            self.restore(terminalreporter)

    def restore(self, terminalreporter: Any) -> None:
        """Put the held failures back (called once pytest's FAILURES section
        is written), each check's as a one-line pointer for the short summary."""
        if self._held is None:
            return
        held, self._held = self._held, None
        terminalreporter.stats["failed"] = [_pointer(r) if _is_check_failure(r) else r for r in held]


def _pointer(rep: Any) -> Any:
    """A copy of a check's failed report whose message points at the section."""
    import copy

    cid = str(rep.nodeid).rpartition("::")[2]
    spec = catalog.BY_ID.get(cid)
    short = copy.copy(rep)
    short.longrepr = f"{spec.title if spec else cid}: see the spark preflight section"
    return short


def take_check_args(config: pytest.Config, only: tuple[str, ...] = ()) -> list[str] | None:
    """Remove ``spark_preflight[::G<n>]`` from ``config.args``; the ids asked for.

    The node ids pytest prints for the checks name a file that is not on disk,
    so pytest's own resolution of arguments would refuse them. The id as
    printed (``spark_preflight::G3``, relative to the rootdir) and any path
    that points at ``<rootdir>/spark_preflight`` from the invocation folder
    count. ``None`` when no argument names the checks (all enabled ones are
    collected, as before); an unknown id raises ValueError (one line).
    """
    target = config.rootpath / FILE_NAME
    here = config.invocation_params.dir
    if target.exists() or (here / FILE_NAME).exists():  # a real file of that name: pytest's to resolve
        return None
    rest: list[str] = []
    wanted: list[str] = []
    enabled = list(only or catalog.IDS)
    for arg in config.args:
        path, _, name = str(arg).partition("::")
        # the id as printed (relative to the rootdir) works from a subfolder too
        if path != FILE_NAME and Path(os.path.abspath(here / path)) != target:
            rest.append(arg)
            continue
        if not name:  # the file: every enabled check (--spark-only still applies)
            wanted.extend(enabled)
        elif name in catalog.IDS:
            wanted.append(name)
        else:
            raise ValueError(f"{arg}: no such check; the checks are {FILE_NAME}::G1 .. {FILE_NAME}::G10")
    if not wanted:
        return None
    config.args[:] = rest  # nothing left: only the named checks are collected
    return [cid for cid in catalog.IDS if cid in wanted]


def checks_first(items: list[pytest.Item]) -> None:
    """Put the check items first, G1..G10, keeping the others' order."""
    checks = sorted((i for i in items if isinstance(i, SparkCheckItem)), key=lambda i: ORDER[i.spec.id])
    if checks and items[: len(checks)] != checks:
        items[:] = [*checks, *(i for i in items if not isinstance(i, SparkCheckItem))]


class _XdistController:
    """Registered on the xdist controller only: hands workers the store folder."""

    def __init__(self, plugin: SparkPreflight) -> None:
        self.plugin = plugin
        self.signalled: list[int] = []  # worker pids a signal was passed to

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[STORE_KEY] = self.plugin.store_dir()

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        """The controller collects nothing: a worker's final node ids say
        which checks were selected."""
        self.plugin.collection_finished(ids)

    def workers(self) -> list[int]:
        """Live worker pids: announced in the store folder and children of ours."""
        if self.plugin._store_dir is None:
            return []
        try:
            names = os.listdir(Path(self.plugin._store_dir) / WORKERS)
        except OSError:
            return []
        me = os.getpid()
        return [int(n) for n in names if n.isdigit() and _parent_of(int(n)) == me]

    def forward(self, signum: int) -> None:
        """Pass a SIGINT/SIGTERM/SIGHUP on to every worker as SIGTERM: each kills
        its own probe groups and ends. (Run inside the signal handler.)"""
        for pid in self.workers():
            try:
                os.kill(pid, signal.SIGTERM)
                self.signalled.append(pid)
            except OSError:
                pass

    def reap(self, grace: float = 3.0) -> None:
        """After a forwarded signal: SIGKILL a worker still alive after ``grace``
        seconds (its probes are gone already; it must not outlive the run)."""
        deadline = time.monotonic() + grace
        left = list(self.signalled)
        while left and time.monotonic() < deadline:
            left = [pid for pid in left if _parent_of(pid) == os.getpid()]
            if left:
                time.sleep(0.05)
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def _parent_of(pid: int) -> int | None:
    """The parent pid of a live (not zombie) process, from /proc; None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] in (b"Z", b"X"):
        return None
    return int(fields[1])
