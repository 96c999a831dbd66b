"""The plugin object registered with ``--spark-preflight``: the checks are items
``spark_preflight::G<n>`` (:mod:`.items`), added to pytest's collection before its own selection
(``--deselect``, ``-k``, ``-m``) so that it selects them as any test, and run first. The preflight
runs once, before the first test (on the xdist controller, whose workers receive it); what it says at
the end of the run is :mod:`.summary`'s.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Generator, Iterable
from typing import Any

import pytest

from pytest_dgx_spark import capture, catalog, launch, outfile, report, report_plugins
from pytest_dgx_spark.engine import Engine
from pytest_dgx_spark.hooks import PLUGIN_NAME
from pytest_dgx_spark.items import (
    FILE_NAME,
    ChecksFirst,
    SparkCheckItem,
    SparkPreflightFile,
    collect_the_rest,
    named_checks,
)
from pytest_dgx_spark.model import PreflightResults, Result, Status
from pytest_dgx_spark.options import BY_NAME
from pytest_dgx_spark.probes.commands import install_signal_handlers, restore_signal_handlers
from pytest_dgx_spark.probes.machine import Machine
from pytest_dgx_spark.probes.store import MemoryStore
from pytest_dgx_spark.safe_text import visible
from pytest_dgx_spark.settings import OptionError, Settings, settings_from_pytest
from pytest_dgx_spark.summary import RunResults, SessionSummary

#: ``workerinput`` key of the run's results (:meth:`RunResults.to_dict`)
RESULTS_KEY = "spark_preflight_results"
#: pytest's own selection options, as a check's "not run: deselected (...)" names them
SELECTION = (("keyword", "-k"), ("markexpr", "-m"))
#: options that deselect after pytest's own selection, as "not run" names them
LATER = (("lf", "--lf"), ("stepwise", "--sw"))


def start(config: pytest.Config) -> None:
    """Read the settings (and any capture to replay), guard other plugins' outputs, register the plugin."""
    try:
        settings = settings_from_pytest(config)
        replay = capture.load(settings.replay) if settings.replay is not None else None
    except (OptionError, capture.CaptureError) as exc:
        raise pytest.UsageError(visible(str(exc))) from None
    if replay is not None:
        settings = capture.replay_settings(settings, replay)  # the captured run's checks and --strict
    for dest, flag, folder in FOREIGN_OUTPUTS:
        value = getattr(config.option, dest, None)
        if not value:
            continue
        if launch.rank(os.environ) != 0:  # under torchrun rank N writes <stem>.rankN<suffix>
            value = str(report.per_rank_path(value, os.environ))
            setattr(config.option, dest, value)  # before those plugins read it (plugin.py: tryfirst)
        try:  # never written through a path another user planted
            outfile.check_foreign(str(value), folder=folder)
        except outfile.Refused as exc:
            raise pytest.UsageError(visible(f"{flag}: {str(value)!r} refused: {exc.strerror}")) from None
    early = sys.modules.get("pytest_dgx_spark.early")
    distributed = bool(getattr(config.option, "numprocesses", None)) or getattr(config.option, "dist", "no") != "no"
    torch_read = set(settings.selected) & set(catalog.TORCH_CHECKS)
    if early is not None and (settings.replay is not None or distributed or not torch_read):
        early.drop()  # the torch child started while pytest loaded is of no use to this run
    config.pluginmanager.register(SparkPreflight(config, settings, replay), PLUGIN_NAME)


#: other plugins' outputs (JUnit, pytest-html, Allure): (option dest, its flag, a folder?)
FOREIGN_OUTPUTS = (
    ("xmlpath", "--junitxml", False), ("htmlpath", "--html", False), ("allure_report_dir", "--alluredir", True)
)


class SparkPreflight(SessionSummary):
    """Hooks active only with ``--spark-preflight``."""

    def __init__(self, config: pytest.Config, settings: Settings, replay: dict[str, Any] | None = None) -> None:
        self.config, self.settings, self.replay = config, settings, replay
        workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
        self.is_worker = workerinput is not None
        sent = (workerinput or {}).get(RESULTS_KEY)
        self.run = RunResults.from_dict(sent) if sent else RunResults()
        #: check ids named as node ids (``None``: none named), and the other arguments (collected by pytest)
        named = named_checks(config)
        self.named: list[str] | None = named[0] if named else None
        self.rest_args: list[str] = named[1] if named else []
        self.selecting = False  # within pytest's own selection (pytest_deselected says why)
        self.deselected: dict[str, str] = {}  # why each check's test is not selected
        self.selected: list[str] | None = None  # None: collection never finished
        self.session: pytest.Session | None = None
        self.tested: set[str] = set()  # checks whose test reported (ran, in this process or a worker)
        self._engine: Engine | None = None
        self._collect_errors = 0
        self._exitstatus = int(pytest.ExitCode.OK)
        self._notes: list[str] = []
        #: when the run started (epoch seconds, monotonic): the Prometheus textfile's time and duration
        self._started = (time.time(), time.monotonic())
        if not self.is_worker:  # SIGTERM/SIGHUP end the run like Ctrl-C, after killing every probe group
            install_signal_handlers()
        config.pluginmanager.register(ChecksFirst(), "dgx_spark_checks_first")
        config.pluginmanager.register(SelectionDone(self), "dgx_spark_selection_done")
        report_plugins.register(config, self)
        #: ``--spark-diagnose``'s signature table and logs, read at configure: a bad --spark-signatures
        #: or a log that cannot be read (missing, a folder, binary, a cut gzip) is a usage error before
        #: any test runs, not exit 4 after the whole session
        self.signatures: Any = None
        self.scans: list[Any] = []
        if settings.diagnose and not self.is_worker:
            self.signatures, self.scans = self._read_logs(settings)

    @staticmethod
    def _read_logs(settings: Settings) -> tuple[Any, list[Any]]:
        """The signature table and every ``--spark-diagnose`` log scanned, or a one-line usage error."""
        from pytest_dgx_spark import logscan  # lazy: only with --spark-diagnose

        try:
            table = logscan.load_table(settings.signatures)
        except logscan.TableError as exc:
            raise pytest.UsageError(visible(f"{BY_NAME['signatures'].flag}: {exc}")) from None
        flag = BY_NAME["diagnose"].flag
        try:
            scans = logscan.scan_logs([str(p) for p in settings.diagnose], [], table, settings.timeout,
                                      gunzip_limit=int(settings.gunzip_max_mib * logscan.MIB),
                                      limit_flag=BY_NAME["gunzip-max-mib"].flag)  # fmt: skip
        except logscan.LogError as exc:
            raise pytest.UsageError(visible(f"{flag}: {exc}")) from None
        unread = [scan.error for scan in scans if scan.error]
        if unread:
            raise pytest.UsageError(visible(f"{flag}: {'; '.join(unread)}"))
        return table, scans

    @property
    def engine(self) -> Engine:
        """This process's engine; on a worker it only answers ``facts`` (from the controller)."""
        if self._engine is None:
            if self.replay is not None:
                machine: Any = capture.ReplayMachine(self.replay)
            else:
                store = MemoryStore({f"facts:{cid}": facts for cid, facts in self.run.facts.items()})
                machine = Machine(timeout=self.settings.timeout, store=store, judged=self.settings.python)
            self._engine = Engine(self.settings, machine, self.settings.selected, replay=self.replay)
        return self._engine

    def enabled(self) -> list[str]:
        """The checks this run is to check: --spark-only's, or those named."""
        return [c for c in self.settings.selected if self.named is None or c in self.named]

    def run_preflight(self, selected: list[str], wants_all: str) -> None:
        """Run the selected checks once, before the first test, and every enabled one when
        ``wants_all`` (the gate, the fixture) says who needs them."""
        enabled = self.enabled()
        ids = [c for c in catalog.IDS if c in selected or (wants_all and c in enabled)]
        self.run.planned = ids
        if not ids:
            return
        engine = self.engine
        engine.selected = tuple(ids)
        results = engine.run_many(ids)
        try:
            host: dict[str, Any] = dict(engine.machine.identity())
        except Exception:  # identity is decoration; it never fails the run
            host = {}
        diagnosis: dict[str, Any] = {}
        if self.signatures is not None:  # --spark-diagnose: the logs decide each check's outcome first
            results, diagnosis = self.diagnose(results, host)
        outside = [r.check_id for r in results if r.check_id not in selected]
        facts = {cid: engine.facts(cid) for cid in ids if engine.facts(cid)}
        ran_for = wants_all if outside else ""
        self.run = RunResults({r.check_id: r for r in results}, host, facts, outside, ran_for, ids, diagnosis)
        for result in results:
            self.config.hook.pytest_spark_preflight_result(config=self.config, result=result)

    def diagnose(self, live: list[Result], host: dict[str, Any]) -> tuple[list[Result], dict[str, Any]]:
        """The checks' results with the logs' evidence (``--spark-diagnose``), and the diagnosis."""
        from pytest_dgx_spark.diagnose import diagnose_run  # lazy: only with --spark-diagnose

        ran = {r.check_id: r for r in live}
        scans = self.scans  # read at configure
        lines, diag = diagnose_run(scans, self.signatures, ran, host)
        self._notes += [f"note: {scan.name}: {n}" for scan in scans for n in scan.notes]
        self._notes += [f"cannot read log {e}" for e in diag.errors]
        return [r for r in lines if r.check_id in ran], diag.to_dict()

    def result_for(self, check_id: str) -> Result:
        """A check item's result; a SKIP saying why when the preflight did not run it."""
        found = self.results.get(check_id)
        if found is not None:
            return found
        why = "the preflight did not run it"
        if self.is_worker:
            why = ("the xdist controller ran the preflight before this selection was known (e.g. --lf); "
                   "run it without -n to check it")  # fmt: skip
        return Result(check_id, Status.SKIP, f"not run: {why}", headline="not run: selection not foreseen")

    def fixture_results(self) -> PreflightResults:
        if self.runs_nothing:
            pytest.skip(f"no preflight check ran: {self.runs_nothing} runs no test")
        if not self.results:
            pytest.skip("no preflight check ran (all deselected); select one for the spark_preflight fixture")
        return PreflightResults(self.results.values(), strict=self.settings.strict)

    def pytest_report_header(self, config: pytest.Config) -> str:
        s = self.settings
        parts = [f"profile {s.profile}", f"timeout {s.timeout:g} s"]
        if s.only:
            parts.append("only " + ",".join(s.only))
        flags = ("strict", "gate", "intrusive", "offline", "drop_caches")
        parts += [flag.replace("_", "-") for flag in flags if getattr(s, flag)]
        if s.python:  # which interpreter G1, G2, G7 and G9 judge
            parts.append(f"python {s.python}")
        return "spark preflight: " + ", ".join(parts)

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.session = session

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection(self, session: pytest.Session) -> object:
        """A check's node id among the arguments: pytest collects the other arguments (it would find
        no file for the check's); the check items come in :meth:`pytest_collection_modifyitems`."""
        if self.named is None:
            return None
        return collect_the_rest(session, self, self.rest_args)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self._collect_errors += report.failed

    def check_items(self, session: pytest.Session, collect: bool) -> list[SparkCheckItem]:
        """The check items (through ``genitems``, so pytest counts them, when ``collect``)."""
        path = self.config.rootpath / FILE_NAME
        node = SparkPreflightFile.from_parent(session, path=path, ids=self.named or self.settings.universe)
        found = session.genitems(node) if collect else node.collect()
        return [i for i in found if isinstance(i, SparkCheckItem)]

    def spark_only(self, checks: list[SparkCheckItem], tell: bool = True) -> list[SparkCheckItem]:
        """The checks --spark-only (or a replayed capture) keeps; the others deselected (``tell``: to pytest)."""
        why = f"--spark-only {','.join(self.settings.only)}" if self.settings.only else "not in the capture"
        dropped = [i for i in checks if i.spec.id not in self.settings.selected]
        for item in dropped:
            self.deselected[item.spec.id] = why
        if dropped and tell:
            self.config.hook.pytest_deselected(items=dropped)
        return [i for i in checks if i not in dropped]

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        """The check items, first, before pytest's own ``--deselect``, ``-k`` and ``-m`` see them (and
        any other plugin's selection): they select the checks as any test."""
        keep = self.spark_only(self.check_items(session, collect=True))
        items[:0] = keep
        self.selecting = True  # until SelectionDone
        if keep and config.pluginmanager.hasplugin("rerunfailures") and report_plugins.reruns_requested(config):
            for item in keep:  # a FAIL is the machine's state, not flakiness: never rerun
                item.add_marker(pytest.mark.flaky(reruns=0, condition=False))

    def pytest_deselected(self, items: Iterable[pytest.Item]) -> None:
        """Why each check's test is not selected, by who deselected it when."""
        for item in items:
            if isinstance(item, SparkCheckItem) and item.spec.id not in self.deselected:
                self.deselected[item.spec.id] = self._why_deselected(item)

    def _why_deselected(self, item: SparkCheckItem) -> str:
        """``--deselect`` when a prefix names it; else pytest's ``-k``/``-m`` as given (both when both:
        pytest does not say which one left it out), else what deselects after them."""
        if self.selecting:
            if any(item.nodeid.startswith(p) for p in self.config.getoption("deselect", None) or ()):
                return "--deselect"
            given = [(flag, str(self.config.getoption(dest, None) or "").strip()) for dest, flag in SELECTION]
            if any(value for _, value in given):
                return ", ".join(f"{flag} {value}" for flag, value in given if value)
        return self._later()

    def _later(self) -> str:
        return ", ".join(flag for dest, flag in LATER if self.config.getoption(dest, None)) or "another plugin"

    def select_as_pytest(self, checks: list[SparkCheckItem]) -> list[str]:
        """xdist's controller collects nothing: pytest's own ``--deselect``, ``-k`` and ``-m`` (its
        ``main`` and ``mark`` plugins' ``pytest_collection_modifyitems``) on the check items alone."""
        pm = self.config.pluginmanager
        own = [pm.get_plugin("main"), pm.get_plugin("mark")]
        hook = pm.subset_hook_caller("pytest_collection_modifyitems", [p for p in pm.get_plugins() if p not in own])
        items: list[pytest.Item] = list(checks)
        self.selecting = True
        try:
            hook(session=self.session, config=self.config, items=items)
        finally:
            self.selecting = False
        return [i.spec.id for i in items if isinstance(i, SparkCheckItem)]

    @pytest.hookimpl(tryfirst=True)
    def pytest_make_collect_report(self, collector: pytest.Collector) -> pytest.CollectReport | None:
        # the file is not on disk: --lf's file skipper would drop it for that alone
        if isinstance(collector, SparkPreflightFile):
            return pytest.CollectReport(collector.nodeid, "passed", None, list(collector.collect()))
        return None

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """The final selection (--lf deselects after every other plugin)."""
        self.collection_finished(item.nodeid for item in session.items)

    def collection_finished(self, nodeids: Iterable[str]) -> None:
        ids = set(nodeids)
        self.selected = [cid for cid in catalog.IDS if f"{FILE_NAME}::{cid}" in ids]
        for cid in self.enabled():
            if cid not in self.selected and cid not in self.deselected:
                self.deselected[cid] = self._later()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> None:
        """Without xdist: the preflight of the selected checks, before the first test."""
        if self.is_worker or self.config.pluginmanager.hasplugin("dsession") or self.runs_nothing:
            return
        if session.testsfailed and not self.config.option.continue_on_collection_errors:
            return  # pytest stops for the collection errors
        selected = self.selected or []
        fixture = not selected and any("spark_preflight" in getattr(i, "fixturenames", ()) for i in session.items)
        why = "--spark-gate" if self.settings.gate else "the spark_preflight fixture" if fixture else ""
        self.run_preflight(selected, why)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_setupnodes(self, config: pytest.Config, specs: Any) -> None:
        """xdist's controller: decide the selection and run the preflight before any worker starts."""
        assert self.session is not None
        if self.runs_nothing:
            return
        selected = self.select_as_pytest(self.spark_only(self.check_items(self.session, collect=False), tell=False))
        self.run_preflight(selected, "--spark-gate" if self.settings.gate else "")

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[RESULTS_KEY] = self.run.to_dict()

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self.collection_finished(ids)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if not self.settings.gate or isinstance(item, SparkCheckItem):
            return
        failed = PreflightResults(self.results.values(), strict=self.settings.strict).failed
        if failed:
            also = f" (also {', '.join(failed[1:])})" if len(failed) > 1 else ""
            # reported at the user's test, not inside this plugin
            raise pytest.skip.Exception(f"spark preflight {failed[0]} failed{also}", _use_item_location=True)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
        rep = yield
        if isinstance(item, SparkCheckItem) and call.when == "call" and item.spark_result is not None:
            rep.spark_result = item.spark_result.to_dict()
        return rep

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Which checks' tests ran (xdist hands the controller the workers' reports)."""
        cid = report.nodeid.partition(f"{FILE_NAME}::")[2] if report.nodeid.startswith(f"{FILE_NAME}::") else ""
        if cid in catalog.IDS:
            self.tested.add(cid)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self._engine is not None:
            self._engine.close()  # a run stopped early (-x, Ctrl-C) leaves no probe behind
        early = sys.modules.get("pytest_dgx_spark.early")
        if early is not None:  # a torch child started while pytest loaded, never claimed
            early.drop()
        restore_signal_handlers()


class SelectionDone:
    """The end of pytest's own selection: the last plain ``pytest_collection_modifyitems`` runs after
    pytest's ``--deselect``, ``-k`` and ``-m`` (plain ones), before the wrappers that deselect later (--lf)."""

    def __init__(self, plugin: SparkPreflight) -> None:
        self.plugin = plugin

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self) -> None:
        self.plugin.selecting = False
