"""The plugin object registered with ``--spark-preflight``: the ten checks are items
``spark_preflight::G<n>`` of a file at the rootdir that is not on disk, run first. Their
selection is decided by :func:`why_deselected`, alike with or without xdist; the preflight
runs once, before the first test (on the xdist controller, whose workers receive it).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from _pytest.junitxml import xml_key
from _pytest.mark import KeywordMatcher, MarkMatcher
from _pytest.mark.expression import Expression

from pytest_dgx_spark import capture, catalog, launch, outfile, report, report_plugins
from pytest_dgx_spark.engine import Engine
from pytest_dgx_spark.hooks import PLUGIN_NAME
from pytest_dgx_spark.model import PreflightResults, Result, Status, shorten, verdict
from pytest_dgx_spark.options import BY_NAME
from pytest_dgx_spark.probes.commands import install_signal_handlers, restore_signal_handlers
from pytest_dgx_spark.probes.machine import Machine
from pytest_dgx_spark.probes.store import MemoryStore
from pytest_dgx_spark.safe_text import visible, write_line
from pytest_dgx_spark.settings import OptionError, Settings, settings_from_pytest

FILE_NAME = "spark_preflight"
ORDER = {cid: n for n, cid in enumerate(catalog.IDS)}
#: ``workerinput`` key of the run's results (:meth:`RunResults.to_dict`)
RESULTS_KEY = "spark_preflight_results"
#: the check ids named on the command line (``spark_preflight::G3``), and whether any path was named too
NAMED_KEY = pytest.StashKey[tuple[list[str], bool]]()
NAMED_WORKER_KEY = "spark_preflight_named"
COLORS: dict[Status, dict[str, Any]] = {Status.PASS: {"green": True}, Status.INFO: {"cyan": True},
    Status.WARN: {"yellow": True}, Status.SKIP: {"yellow": False}, Status.FAIL: {"red": True, "bold": True}}
VERDICT_COLORS: dict[str, dict[str, Any]] = {"blocked": {"red": True, "bold": True}, "ready-with-warnings": {"yellow": True}}
#: a passed check's outcome as pytest shows it: WARN as ``warned`` (W), INFO as ``I``
TEST_STATUS = {
    "WARN": ("warned", "W", ("WARN", {"yellow": True})), "INFO": ("passed", "I", ("INFO", {"cyan": True}))
}


@dataclass
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


class SparkCheckFailed(Exception):
    """A check item's failure: the message is the G-line, ``text`` the whole text."""

    def __init__(self, line: str, text: str) -> None:
        super().__init__(line)
        self.text = text


class SparkPreflightFile(pytest.File):
    """The checks' parent; ``path`` is ``<rootdir>/spark_preflight``."""

    def __init__(self, *, ids: Sequence[str] = catalog.IDS, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.ids = list(ids)

    def collect(self) -> Iterable[pytest.Item]:
        specs = [c for c in catalog.CHECKS if c.id in self.ids]
        return [SparkCheckItem.from_parent(self, name=c.id, spec=c) for c in specs]


class SparkCheckItem(pytest.Item):
    def __init__(self, *, spec: catalog.CheckSpec, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec = spec
        self.spark_result: Result | None = None
        for marker in spec.markers:
            self.add_marker(marker)
        self.extra_keyword_matches.add(f"spark_check_{spec.id}")

    def runtest(self) -> None:
        plugin: Any = self.config.pluginmanager.get_plugin(PLUGIN_NAME)
        result = self.spark_result = plugin.result_for(self.spec.id)
        try:
            family = str(self.config.getini("junit_family"))
        except (ValueError, KeyError):
            family = "xunit2"
        if family in ("xunit1", "legacy"):
            self.user_properties.extend(report.case_properties(result))
        text = result.report_text()
        if result.status is Status.FAIL:
            raise SparkCheckFailed(result.line(), text)  # the body holds the whole text, once
        if result.status is Status.WARN and plugin.settings.strict:
            line = f"{result.line()} (a failure under --spark-strict)"
            raise SparkCheckFailed(line, "\n".join([line, *text.splitlines()[1:]]))
        self.add_report_section("call", "stdout", text + "\n")
        if result.status is Status.SKIP:
            raise pytest.skip.Exception(result.line(), _use_item_location=True)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if not isinstance(excinfo.value, SparkCheckFailed):
            return super().repr_failure(excinfo)
        # pytest's own "no traceback" failure with the whole text as its body, and
        # the G-line as its message (JUnit's message=, the short summary)
        try:
            raise pytest.fail.Exception(excinfo.value.text, pytrace=False)
        except pytest.fail.Exception:
            rep = super().repr_failure(pytest.ExceptionInfo.from_current())
        crash = getattr(rep, "reprcrash", None)
        if crash is not None:
            rep.reprcrash = dataclasses.replace(crash, message=str(excinfo.value))  # type: ignore[union-attr]
            tb, _, descr = rep.chain[-1]  # type: ignore[union-attr]
            rep.chain[-1] = (tb, rep.reprcrash, descr)  # type: ignore[union-attr]
        return rep

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"{self.spec.id} {self.spec.title}"


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

#: options whose value is never a test path (``--deselect spark_preflight::G3``, ``-m spark_preflight``)
VALUE_OPTIONS = frozenset({"-k", "-m", "--deselect", "-p", "-o", "--override-ini", "--ignore", "--ignore-glob"})


def take_check_args(
    args: list[str], positional: Sequence[str], rootpath: Path, here: Path
) -> tuple[list[str], bool] | None:
    """Remove ``spark_preflight[::G<n>]`` from ``args`` before pytest resolves them as paths: the ids
    named (the file alone names all ten) and whether other paths are left, or ``None`` when none
    names a check. ``positional``: pytest's parse of the paths."""
    target = rootpath / FILE_NAME
    if target.exists() or (here / FILE_NAME).exists():  # a real file of that name: pytest's to resolve
        return None
    ours: list[str] = []
    for arg in positional:
        path, _, name = str(arg).partition("::")
        if path != FILE_NAME and Path(os.path.abspath(here / path)) != target:
            continue
        if name and name not in catalog.IDS:
            ids = f"{FILE_NAME}::{catalog.IDS[0]} .. {FILE_NAME}::{catalog.IDS[-1]}"
            raise pytest.UsageError(visible(f"{arg}: no such check; the checks are {ids}"))
        ours.append(str(arg))
    if not ours:
        return None
    args[:] = [a for i, a in enumerate(args) if a not in ours or (i and args[i - 1] in VALUE_OPTIONS)]
    names = {a.partition("::")[2] for a in ours}
    named = [cid for cid in catalog.IDS if cid in names or "" in names]
    return named, len(positional) > len(ours)


def _keyword_matcher(item: SparkCheckItem) -> Any:
    """pytest's ``-k`` matching, except that a bare check id names that check only."""
    names = KeywordMatcher.from_item(item)

    def match(ident: str, /, **kwargs: Any) -> bool:
        if ident[:1] in "gG" and ident[1:].isdigit():
            return ident.upper() == item.spec.id
        return names(ident, **kwargs)

    return match


def _evaluates(expr: str, option: str, matcher: Any) -> bool:
    try:
        return bool(Expression.compile(expr).evaluate(matcher))
    except Exception as exc:  # pytest says the same of its own -k/-m, as a usage error
        raise pytest.UsageError(visible(f"Wrong expression passed to '{option}': {expr}: {exc}")) from None


def why_deselected(item: SparkCheckItem, config: pytest.Config, settings: Settings) -> str | None:
    """Which selection option leaves this check's test out (``None``: selected)."""
    if item.spec.id not in settings.selected:
        return f"--spark-only {','.join(settings.only)}" if settings.only else "not in the capture"
    keyword = (config.option.keyword or "").strip()
    if keyword and not _evaluates(keyword, "-k", _keyword_matcher(item)):
        return f"-k {keyword}"
    markexpr = (config.option.markexpr or "").strip()
    if markexpr and not _evaluates(markexpr, "-m", MarkMatcher.from_markers(item.iter_markers())):
        return f"-m {markexpr}"
    if any(item.nodeid.startswith(p) for p in config.getoption("deselect", None) or ()):
        return "--deselect"
    return None


class ChecksFirst:
    """The checks run first, G1..G10, after pytest-randomly and any other reordering (an outer wrapper)."""

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> Generator[None, None, None]:
        yield
        checks = sorted((i for i in items if isinstance(i, SparkCheckItem)), key=lambda i: ORDER[i.spec.id])
        if checks and items[: len(checks)] != checks:
            items[:] = [*checks, *(i for i in items if not isinstance(i, SparkCheckItem))]


class SparkPreflight:
    """Hooks active only with ``--spark-preflight``."""

    def __init__(self, config: pytest.Config, settings: Settings, replay: dict[str, Any] | None = None) -> None:
        self.config, self.settings, self.replay = config, settings, replay
        workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
        self.is_worker = workerinput is not None
        sent = (workerinput or {}).get(RESULTS_KEY)
        self.run = RunResults.from_dict(sent) if sent else RunResults()
        #: check ids named as node ids (``None``: none named), and whether paths were named too
        named = (workerinput or {}).get(NAMED_WORKER_KEY) or config.stash.get(NAMED_KEY, None)
        self.named: list[str] | None = list(named[0]) if named else None
        self.paths_named = bool(named[1]) if named else True
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
    def results(self) -> dict[str, Result]:
        return self.run.results

    @property
    def host(self) -> dict[str, Any]:
        return self.run.host

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

    @property
    def runs_nothing(self) -> str:
        """The pytest option under which no test runs (``--co``; ``--setup-plan``, which runs nothing;
        ``--setup-only``, which sets fixtures up but runs no test, and a check is a test), else ""."""
        opt = self.config.option
        flags = (("collectonly", "--collect-only"), ("setupplan", "--setup-plan"), ("setuponly", "--setup-only"))
        return next((flag for dest, flag in flags if getattr(opt, dest, False)), "")

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

    def pytest_ignore_collect(self, collection_path: Path, config: pytest.Config) -> bool | None:
        """Only check ids were named: nothing else is collected (pytest fell back on its testpaths)."""
        return True if not self.paths_named else None

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self._collect_errors += report.failed

    def check_items(self, session: pytest.Session, collect: bool) -> list[SparkCheckItem]:
        """The check items (through ``genitems``, so pytest counts them, when ``collect``)."""
        path = self.config.rootpath / FILE_NAME
        node = SparkPreflightFile.from_parent(session, path=path, ids=self.named or catalog.IDS)
        found = session.genitems(node) if collect else node.collect()
        return [i for i in found if isinstance(i, SparkCheckItem)]

    def select(self, checks: list[SparkCheckItem]) -> list[SparkCheckItem]:
        """The selected check items; why the others are not, in ``self.deselected``."""
        for item in checks:
            why = why_deselected(item, self.config, self.settings)
            if why is not None:
                self.deselected[item.spec.id] = why
        return [i for i in checks if i.spec.id not in self.deselected]

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        """Add the selected check items after pytest's own ``-k``/``-m`` ran
        (it would take ``G1`` for ``G10``); report the others deselected."""
        checks = self.check_items(session, collect=True)
        keep = self.select(checks)
        dropped = [i for i in checks if i not in keep]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:0] = keep
        if keep and config.pluginmanager.hasplugin("rerunfailures") and report_plugins.reruns_requested(config):
            for item in keep:  # a FAIL is the machine's state, not flakiness: never rerun
                item.add_marker(pytest.mark.flaky(reruns=0, condition=False))

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
        flags = (("lf", "--lf"), ("stepwise", "--sw"))  # they deselect after this plugin
        later = ", ".join(flag for dest, flag in flags if self.config.getoption(dest, None))
        for cid in self.enabled():
            if cid not in self.selected and cid not in self.deselected:
                self.deselected[cid] = later or "another plugin"

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
        selected = [i.spec.id for i in self.select(self.check_items(self.session, collect=False))]
        self.run_preflight(selected, "--spark-gate" if self.settings.gate else "")

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[RESULTS_KEY] = self.run.to_dict()
        if self.named is not None:
            node.workerinput[NAMED_WORKER_KEY] = [self.named, self.paths_named]

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
        return {cid: self._why_not_run(cid) for cid in catalog.IDS if cid not in self.results}

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
        xml = self.config.stash.get(xml_key, None)
        if xml is not None and results:
            props = report.suite_properties(results, strict=strict, host=self.host, not_run=not_run)
            if launch.rank(os.environ) == 0:  # rank 0 speaks for every node
                props += report.node_properties(report.fleet_nodes(self.store_items()))
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
        if config.get_verbosity() >= 0:  # each gotcha's name, for a reader new to G1..G10 (not under -q)
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

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self._engine is not None:
            self._engine.close()  # a run stopped early (-x, Ctrl-C) leaves no probe behind
        early = sys.modules.get("pytest_dgx_spark.early")
        if early is not None:  # a torch child started while pytest loaded, never claimed
            early.drop()
        restore_signal_handlers()
