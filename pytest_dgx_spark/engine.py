"""The one engine behind the pytest plugin and the ``spark-preflight`` CLI: it resolves the profile,
builds the one torch-child request from every selected check, runs each check once (into the run's
store) and turns anything a check raises into that check's FAIL, never an exception."""

from __future__ import annotations

import contextlib
import gc
import importlib
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import ModuleType
from typing import Any

from pytest_dgx_spark import catalog, early, redact
from pytest_dgx_spark.capture import facts_mismatch
from pytest_dgx_spark.checks.kit import PARAM_OPTIONS, CheckContext, Params
from pytest_dgx_spark.model import Result, Status
from pytest_dgx_spark.probes.child import ChildResult, limit_in_stderr
from pytest_dgx_spark.probes.commands import kill_running, limit_reason
from pytest_dgx_spark.probes.machine import MachineLike
from pytest_dgx_spark.settings import Settings
from pytest_dgx_spark.thresholds import defaults


def check_module(check_id: str) -> ModuleType:
    return importlib.import_module(f"pytest_dgx_spark.checks.{catalog.BY_ID[check_id].module}.check")


#: our modules the prefetch threads would otherwise import (see :meth:`Engine.prefetch`)
BACKGROUND_IMPORTS = ("pytest_dgx_spark.probes.packages", "pytest_dgx_spark.probes.processes",
                      "pytest_dgx_spark.thresholds")


@contextlib.contextmanager
def collector_skips_what_exists() -> Iterator[None]:
    """While the checks run, the cyclic garbage collector scans only what they allocate.

    By then the process holds pytest, every plugin and our modules (some 50,000 tracked objects in a
    preflight run), and each full collection walks them all: the collections during the checks took
    15-25 ms of a run on a 2-CPU box, where a run is CPU-bound. ``gc.freeze()`` sets those objects
    aside and ``gc.unfreeze()`` puts them back when the checks are done. Garbage they hold is collected
    after the run, as it would have been. A process that froze objects itself is left as it is."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


class Engine:
    """One run's checks on one machine (or a replayed capture)."""

    def __init__(self, settings: Settings, machine: MachineLike, selected: Iterable[str] | None = None, *,
                 background: bool = True, replay: Mapping[str, Any] | None = None) -> None:
        self.settings = settings
        self.machine = machine
        #: a loaded capture: checks are decided from its facts, the machine is not read
        self.replay = replay
        ids = list(selected) if selected is not None else list(settings.selected)
        self.selected: tuple[str, ...] = tuple(c for c in catalog.IDS if c in ids)
        self.background = background
        self._prefetched = False
        #: set by close(): the background threads start nothing more
        self._closed = threading.Event()
        self._threads: list[threading.Thread] = []

    def profile(self) -> str:
        """``gb10`` or ``generic``: forced by ``--spark-profile`` or found by NVML."""
        if self.settings.profile in ("gb10", "generic"):
            return self.settings.profile
        if self.replay is not None:
            return "gb10" if self.replay.get("profile") == "gb10" else "generic"
        return "gb10" if self.machine.identity().get("gb10") else "generic"

    def torch_request(self) -> dict[str, Any]:
        """Merge what every selected check wants the torch child to do: each asks under keys
        of its own ("load", "flash_attn", "bandwidth"), so a plain update merges them."""
        request: dict[str, Any] = {"kernel": True}
        for cid in self.selected:
            if cid not in catalog.TORCH_CHECKS:  # asking the child anything is reading it: needs_torch
                continue
            contribute = getattr(check_module(cid), "torch_request", None)
            if contribute is not None:
                with contextlib.suppress(Exception):  # a broken contribution must not break the others
                    request.update(contribute(CheckContext(cid, self.settings, self.machine, self)) or {})
        return request

    def torch(self) -> ChildResult:
        request = self.torch_request()
        if self._without_gpu(request):  # no CUDA kernel can run: read torch's version, do not import it
            request["import_torch"] = False
        if self._closed.is_set():  # a prefetch thread that outlived the run starts no child
            raise RuntimeError("the run ended before the torch child started")
        return self.machine.torch(request)

    def _without_gpu(self, request: Mapping[str, Any]) -> bool:
        if request.get("flash_attn") or request.get("bandwidth") or request.get("load"):
            return False
        nv = self.machine.nvml()
        if nv.get("no_gpu"):  # NVML answered: zero GPUs
            return True
        # NVML may be missing while CUDA works (a container without the "utility"
        # capability): only with no NVIDIA device node either is there no GPU
        no_nvml = nv.get("init_error") in ("LibraryNotFound", "DriverNotLoaded")
        return no_nvml and not self.machine.has_gpu_device_node()

    def prefetch(self) -> None:
        """Start the slow work of the run in the background, once: one thread starts the torch child
        (seconds of import torch and CUDA), one runs each check's own slow probe that needs no torch
        (its ``prefetch(ctx)``: G7's Triton compile), one every check that does not read the child, so
        they overlap; with an NVIDIA device node the child starts before its request is built and reads
        it on stdin. The threads start as soon as the modules they use are imported, the torch child's
        and the torch checks' probes first. Whoever wants a result waits for it in the store."""
        if self._prefetched or not self.background or self.replay is not None:
            return
        self._prefetched = True
        # Import here what each thread would import, before it starts: pytest rewrites our modules with
        # ast.parse, and two threads parsing at once break CPython 3.11 ("AST constructor recursion depth
        # mismatch") under PYTHONDONTWRITEBYTECODE. The torch child's thread needs only the checks that
        # read it (their torch_request), so it starts before the other checks load: ~130 modules cost
        # 50-150 ms under pytest's import hook, and without an early child that delayed the child.
        torch_ids = [cid for cid in self.selected if cid in catalog.TORCH_CHECKS]
        modules = {cid: check_module(cid) for cid in torch_ids}
        for name in BACKGROUND_IMPORTS:
            importlib.import_module(name)
        if not torch_ids:  # with nothing slow to hide, no thread
            return
        m = self.machine

        def start_torch() -> None:
            with contextlib.suppress(Exception):  # the check that needs it computes it again and says why
                if m.has_gpu_device_node() and not self._closed.is_set():
                    # the child pytest started while it loaded, if it is this run's
                    m.start_torch_early(lambda: early.claim("torch", m.env, m.torch_python))
                self.torch()

        def each(work: Callable[[str], object], ids: list[str]) -> None:
            for cid in ids:
                if self._closed.is_set():
                    return
                with contextlib.suppress(Exception):  # run() and a gather say why themselves
                    work(cid)

        def probe(cid: str) -> None:
            modules[cid].prefetch(CheckContext(cid, self.settings, m, self))

        def start(name: str, target: Callable[..., None], *args: object) -> None:
            thread = threading.Thread(target=target, args=args, name=f"spark-prefetch-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)

        def probes_of(ids: Iterable[str]) -> list[str]:
            return [cid for cid in ids if hasattr(modules[cid], "prefetch")]

        self._threads = []
        start("torch", start_torch)
        if first := probes_of(torch_ids):  # G7's compile, beside the torch import
            start("probes", each, probe, first)
        others = [cid for cid in self.selected if cid not in catalog.TORCH_CHECKS]
        modules.update({cid: check_module(cid) for cid in others})
        if later := probes_of(others):
            start("later-probes", each, probe, later)
        if others:
            start("checks", each, self.run, others)

    def close(self, wait: float = 5.0) -> int:
        """End the run's background work, saying how many probe processes it killed: a run stopped
        early (``-x``, Ctrl-C) leaves no probe and no prefetch thread behind."""
        self._closed.set()
        killed = self._drop_early() + kill_running()
        deadline = time.monotonic() + wait
        # a thread between two probes may start one more before it sees the flag: kill it while waiting
        while any(t.is_alive() for t in self._threads) and time.monotonic() < deadline:
            for t in self._threads:
                t.join(min(0.05, max(0.0, deadline - time.monotonic())))
            killed += kill_running()
        return killed + self._drop_early() + kill_running()  # what a thread started meanwhile

    def _drop_early(self) -> int:
        return self.machine.drop_early() if self.replay is None else 0  # a replay has no machine

    def run(self, check_id: str) -> Result:
        """Run one check, once per run; every output reads its redacted result from the store."""
        def compute() -> dict[str, Any]:
            return redact.outgoing(self.machine.env)(self._run_uncached(check_id).to_dict())

        return Result.from_dict(self.machine.store.get_or_compute(f"result:{check_id}", compute))

    def run_many(self, ids: Iterable[str] | None = None) -> list[Result]:
        wanted = list(ids) if ids is not None else list(self.selected)
        with collector_skips_what_exists():
            self.prefetch()
            return [self.run(cid) for cid in catalog.IDS if cid in wanted]

    def params(self) -> Params:
        """The thresholds and options every ``evaluate`` of this run decides with."""
        if self.replay is not None:
            return replay_params(self.replay, self.settings, self.profile())
        return Params.from_settings(self.settings, self.profile())

    def facts(self, check_id: str) -> dict[str, Any]:
        """What ``gather`` recorded: ``{"facts": …}``, ``{"error": …}`` or ``{}`` (not run)."""
        return self.machine.store.peek(f"facts:{check_id}") or {}

    def _run_uncached(self, check_id: str) -> Result:
        start = time.monotonic()
        module = check_module(check_id)
        ctx = CheckContext(check_id, self.settings, self.machine, self)
        try:
            if self.replay is not None:
                result = self._replayed(module, check_id)
            else:
                result = self._gather_then_evaluate(module, ctx)
            if not isinstance(result, Result) or result.check_id != check_id:
                raise TypeError(f"check returned {result!r}")
        except Exception as exc:
            result = crashed(check_id, exc)
        judged = self.judged_python()
        if judged and check_id in JUDGED_CHECKS:
            result = judged_line(result, judged, self._interpreter_error())
        result.duration_s = time.monotonic() - start
        return result

    def judged_python(self) -> str | None:
        """The interpreter ``--python`` named (a replay's: the one the captured run judged)."""
        if self.replay is not None:
            options = self.replay.get("options")
            found = options.get("python") if isinstance(options, Mapping) else None
            return str(found) if found else None
        return self.settings.python

    def _interpreter_error(self) -> str | None:
        if self.replay is not None:
            return None
        found = self.machine.store.peek("python:judged")
        return None if not isinstance(found, Mapping) or found.get("ok") else str(found.get("reason") or "?")

    def _gather_then_evaluate(self, module: ModuleType, ctx: CheckContext) -> Result:
        key = f"facts:{ctx.check_id}"
        try:
            facts = module.gather(ctx)
        except Exception as exc:
            error = {"error": describe_crash(exc)}
            self.machine.store.get_or_compute(key, lambda: error)
            raise
        data = self.machine.store.get_or_compute(key, lambda: {"facts": facts.to_dict()})
        # evaluate() sees what a replay will see: the facts after their JSON round trip
        return module.evaluate(module.FACTS.from_dict(data.get("facts") or {}), self.params())

    def _undecidable(self, check_id: str, entry: Mapping[str, Any], exc: Exception) -> Result:
        """``evaluate`` raised on the captured facts: the captured run's FAIL again if it crashed the same
        way, else a SKIP asking for a new capture (edited facts, or another version's types)."""
        recorded = entry.get("result")
        if isinstance(recorded, Mapping) and "the check itself crashed" in str(recorded.get("summary", "")):
            return crashed(check_id, exc)
        made_by = ((self.replay or {}).get("tool") or {}).get("version", "?")
        why = f"{describe_crash(exc)}; written by {made_by}"
        return Result(
            check_id, Status.SKIP, f"capture's {check_id} facts cannot be decided by this version ({why}); "
            "capture again with this version",
            headline=f"capture's {check_id} facts cannot be decided ({type(exc).__name__}); capture again",
        )  # fmt: skip

    def _replayed(self, module: ModuleType, check_id: str) -> Result:
        """Decide a check from the capture's facts (see :mod:`pytest_dgx_spark.capture`)."""
        assert self.replay is not None
        entry = (self.replay.get("checks") or {}).get(check_id)
        if entry is None:
            why = "not in the capture: the captured run did not run this check"
            return Result(check_id, Status.SKIP, why)
        if not isinstance(entry, Mapping):
            why = f"the capture's {check_id} entry is not a table: nothing to decide"
            return Result(check_id, Status.SKIP, why)
        if entry.get("error"):
            return crashed(check_id, str(entry["error"]))
        if isinstance(entry.get("facts"), Mapping):
            mismatch = facts_mismatch(check_id, module.FACTS, entry["facts"], self.replay)
            if mismatch is not None:  # another version's facts: say so, decide nothing from them
                return mismatch
            try:
                return module.evaluate(module.FACTS.from_dict(entry["facts"]), self.params())
            except Exception as exc:
                return self._undecidable(check_id, entry, exc)
        if isinstance(entry.get("result"), Mapping):  # recorded without facts: the recorded result
            try:
                return Result.from_dict(entry["result"])
            except (KeyError, TypeError, ValueError) as exc:
                why = f"the capture's {check_id} result cannot be read ({type(exc).__name__}: {exc})"
                return Result(check_id, Status.SKIP, why)
        return Result(check_id, Status.SKIP, "the capture holds neither facts nor a result for this check")


def replay_params(doc: Mapping[str, Any], settings: Settings, profile: str) -> Params:
    """The captured options and threshold overrides, the replay's own command line on top."""
    captured: Mapping[str, Any] = doc["params"] if isinstance(doc.get("params"), Mapping) else {}
    baseline = Settings()
    options = dict(captured.get("options") or {}) | {
        name: getattr(settings, name, None) for name in PARAM_OPTIONS
        if getattr(settings, name, None) != getattr(baseline, name, None)}
    overrides = (doc.get("options") or {}).get("threshold") or {}
    thresholds = defaults(profile)
    thresholds.update({k: float(v) for k, v in dict(overrides).items() if k in thresholds})
    thresholds.update(settings.threshold)
    return Params(profile=profile, thresholds=thresholds, options=options)


#: the checks that judge the ``--python`` interpreter's packages and torch (issue 33 item 1)
JUDGED_CHECKS = ("G1", "G2", "G7", "G9")


def judged_line(result: Result, python: str, error: str | None = None) -> Result:
    """The result's line names the interpreter it judged (``python /job/venv/bin/python: …``). When that
    interpreter could not list its packages, what the check said of them is not true: a SKIP saying why,
    the check's own line kept as a detail."""
    if error:
        return Result(result.check_id, Status.SKIP, f"python {python}: not checked: its packages could not be "
                      f"listed ({error})", "run that interpreter by hand: it must start and import", codes=[],
                      readings=result.readings, details=[f"the check said: {result.line()}", *result.details],
                      headline="not checked: the --python interpreter did not list its packages")  # fmt: skip
    data = result.to_dict()
    data["summary"] = f"python {python}: {result.summary}"
    # the default line keeps its room for the finding: the interpreter's last three path parts
    short = "/".join(python.rstrip("/").split("/")[-3:])
    data["headline"] = f"{short}: {result.headline or result.summary}"
    return Result.from_dict(data)


def describe_crash(exc: BaseException) -> str:
    where = traceback.extract_tb(exc.__traceback__)[-1:] or None
    at = f" at {where[0].filename.rsplit('/', 1)[-1]}:{where[0].lineno}" if where else ""
    return f"{type(exc).__name__}: {exc}{at}"


def crashed(check_id: str, exc: BaseException | str) -> Result:
    """A check that raised: its FAIL, never an exception into pytest; a SKIP when it hit a limit of
    this box or user (``ulimit -u``/``-v``), which says nothing about what the check verifies."""
    if isinstance(exc, str):  # a crash recorded in a capture: the same verdict on replay
        what, kind = exc, exc.split(":", 1)[0]
        limited = exc[exc.index("resource limit: ") :] if "resource limit: " in exc else limit_in_stderr(exc)
    else:
        what, kind, limited = describe_crash(exc), type(exc).__name__, limit_reason(exc)
    if limited:
        why = f"not checked: {limited.split(' at ', 1)[0]}; raise the limit (ulimit -u / -v) and run again"
        return Result(check_id, Status.SKIP, why, headline="not checked (resource limit)")
    named = f" ({kind})" if kind.isidentifier() and len(kind) <= 40 else ""
    # the registry reads every check's findings module: a run where no check crashed never needs it
    from pytest_dgx_spark import codes

    # the short line names the exception; -v, JUnit and the reports carry where it was raised
    return Result(
        check_id, Status.FAIL, f"the check itself crashed ({what}), so nothing was verified",
        "report this to pytest-dgx-spark; --spark-only can leave this check out meanwhile",
        headline=f"the check itself crashed{named}, so nothing was verified",
        short_fix="report it to pytest-dgx-spark", codes=[codes.crashed(check_id)],
    )  # fmt: skip
