"""The one engine behind the pytest plugin and the ``spark-preflight`` CLI.

It resolves the profile, builds the single torch-child request from every
selected check, runs each check once (results are cached in the run's store,
so xdist workers and the ``--spark-gate`` share them) and turns anything a
check raises into that check's FAIL — never an exception into pytest.
"""

from __future__ import annotations

import importlib
import threading
import time
import traceback
from collections.abc import Iterable, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

from pytest_dgx_spark import catalog, early, redact
from pytest_dgx_spark.checks.kit import CheckContext, Params
from pytest_dgx_spark.model import Result, Status
from pytest_dgx_spark.probes.child import ChildResult
from pytest_dgx_spark.probes.machine import Machine

if TYPE_CHECKING:  # pragma: no cover
    from pytest_dgx_spark.settings import Settings

TORCH_CHECKS = catalog.TORCH_CHECKS


def check_module(check_id: str) -> ModuleType:
    spec = catalog.BY_ID[check_id]
    return importlib.import_module(f"pytest_dgx_spark.checks.{spec.module}")


#: our modules that the prefetch threads would otherwise import lazily (see
#: :meth:`Engine.prefetch`); the check modules are imported there as well
BACKGROUND_IMPORTS = (
    "pytest_dgx_spark.probes.packages",
    "pytest_dgx_spark.probes.processes",
    "pytest_dgx_spark.thresholds",
)


class Engine:
    def __init__(
        self,
        settings: Settings,
        machine: Machine,
        selected: Iterable[str] | None = None,
        *,
        background: bool = True,
        replay: Mapping[str, Any] | None = None,
    ) -> None:
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

    # ------------------------------------------------------------------ shared facts

    def profile(self) -> str:
        """``gb10`` or ``generic``: forced by ``--spark-profile`` or found by NVML."""
        if self.settings.profile in ("gb10", "generic"):
            return self.settings.profile
        if self.replay is not None:
            return "gb10" if self.replay.get("profile") == "gb10" else "generic"
        return "gb10" if self.machine.identity().get("gb10") else "generic"

    def torch_request(self) -> dict[str, Any]:
        """Merge what every selected check wants the torch child to do; no two
        checks share a key, so a plain update merges them."""
        request: dict[str, Any] = {"kernel": True}
        for cid in self.selected:
            module = check_module(cid)
            contribute = getattr(module, "torch_request", None)
            if contribute is None:
                continue
            ctx = CheckContext(cid, self.settings, self.machine, self)
            try:
                extra: Mapping[str, Any] = contribute(ctx) or {}
            except Exception:  # a broken contribution must not break the others
                continue
            request.update(extra)  # each check asks under keys of its own ("load", "flash_attn", "bandwidth")
        return request

    def torch(self) -> ChildResult:
        request = self.torch_request()
        if self._without_gpu(request):
            # Nothing here can run a CUDA kernel and nothing asked for torch's
            # behaviour: read torch's version instead of importing it (seconds
            # on a CPU box; the issue: a run without a GPU costs < 1 s).
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
        # NVML's library may be missing while CUDA works (a container given the
        # "compute" driver capability but not "utility"): only with no NVIDIA
        # device node either is there no GPU to run on.
        return (
            nv.get("init_error") in ("LibraryNotFound", "DriverNotLoaded")
            and not self.machine.has_gpu_device_node()
        )

    def prefetch(self) -> None:
        """Start the slow work of the run in the background, once.

        The torch child (import torch, initialise CUDA, import the CUDA
        extensions) takes seconds; G4's thermal sample, G8's request and the
        rest need none of it. One thread starts the torch child, another runs
        every selected check that does not read it, so they overlap. On a
        machine with an NVIDIA device node the child is started before its
        request is built (NVML, the extension scan): it imports torch
        meanwhile and reads the request on stdin. Without one, torch may not
        be imported at all (see :meth:`torch`), so nothing starts early. A check
        (or test item) that wants a result waits for it through the store,
        which computes each thing once. Off under xdist: workers already run
        checks side by side, and a worker that ends first must not leave a
        half-done probe behind for another to read.
        """
        if self._prefetched or not self.background or self.replay is not None:
            return
        self._prefetched = True
        # Import here, in one thread, what the threads would import. pytest
        # rewrites this package's modules as they are imported, with ast.parse,
        # and two threads parsing at once break CPython 3.11 ("SystemError: AST
        # constructor recursion depth mismatch", seen as G1 failing) whenever
        # pytest has no cached rewrite (PYTHONDONTWRITEBYTECODE=1).
        for cid in self.selected:
            check_module(cid)
        for name in BACKGROUND_IMPORTS:
            importlib.import_module(name)
        torch_work = set(TORCH_CHECKS) & set(self.selected)
        others = [cid for cid in self.selected if cid not in TORCH_CHECKS]

        def start_torch() -> None:
            try:
                if self.machine.has_gpu_device_node() and not self._closed.is_set():
                    # the child pytest started while it loaded, if it is this run's
                    m = self.machine
                    m.start_torch_early(lambda: early.claim("torch", m.env, m.python))
                self.torch()
            except Exception:  # the check that needs it computes it again and says why
                pass

        def run_others() -> None:
            for cid in others:
                if self._closed.is_set():
                    return
                self.run(cid)  # run() turns any failure into that check's result

        threads = []
        if torch_work:
            threads.append(threading.Thread(target=start_torch, name="spark-prefetch-torch", daemon=True))
        if others and torch_work:  # with nothing slow to hide, no need for a thread
            threads.append(threading.Thread(target=run_others, name="spark-prefetch-checks", daemon=True))
        self._threads = threads
        for t in threads:
            t.start()

    def close(self, wait: float = 5.0) -> int:
        """End the run's background work; how many probe processes it killed.

        A run that stopped early (``-x``, Ctrl-C) leaves no probe behind and no
        prefetch thread either: each starts nothing more once this is called,
        and is waited for (up to ``wait`` seconds) once its probes are killed.
        A thread left running would go on importing check modules after the
        session ended; in a pytester run in-process that races the next run.
        """
        from pytest_dgx_spark.probes.commands import kill_running

        self._closed.set()
        killed = self._drop_early() + kill_running()
        deadline = time.monotonic() + wait
        # A thread between two probes when this was called may start one more
        # before it sees the flag: kill again while waiting, so that probe dies
        # at once instead of after the whole wait (a SIGKILL meanwhile would
        # orphan it: probes run in their own session).
        while any(t.is_alive() for t in self._threads) and time.monotonic() < deadline:
            for t in self._threads:
                t.join(min(0.05, max(0.0, deadline - time.monotonic())))
            killed += kill_running()
        return killed + self._drop_early() + kill_running()  # what a thread started meanwhile

    def _drop_early(self) -> int:
        return self.machine.drop_early() if self.replay is None else 0  # a replay has no machine

    # ------------------------------------------------------------------ running

    def run(self, check_id: str) -> Result:
        """Run one check (once per run; later calls read the stored result).

        The stored result has been through :func:`redact.outgoing`: every
        output (terminal, JUnit, reports, ``--json``) reads it from here."""
        data = self.machine.store.get_or_compute(
            f"result:{check_id}",
            lambda: redact.outgoing(self.machine.env)(self._run_uncached(check_id).to_dict()),
        )
        return Result.from_dict(data)

    def run_many(self, ids: Iterable[str] | None = None) -> list[Result]:
        wanted = list(ids) if ids is not None else list(self.selected)
        self.prefetch()
        return [self.run(cid) for cid in catalog.IDS if cid in wanted]

    def params(self) -> Params:
        """The thresholds and options every ``evaluate`` of this run decides with."""
        if self.replay is not None:
            return replay_params(self.replay, self.settings, self.profile())
        return Params.from_settings(self.settings, self.profile())

    def facts(self, check_id: str) -> dict[str, Any]:
        """What ``gather`` recorded for a check that ran: ``{"facts": …}`` or
        ``{"error": …}`` (``{}`` for a check that has not run)."""
        return self.machine.store.peek(f"facts:{check_id}") or {}

    def _run_uncached(self, check_id: str) -> Result:
        start = time.monotonic()
        ctx = CheckContext(check_id, self.settings, self.machine, self)
        module = check_module(check_id)
        try:
            if self.replay is not None:
                result = self._replayed(module, check_id)
            else:
                result = self._gather_then_evaluate(module, ctx)
            if not isinstance(result, Result) or result.check_id != check_id:
                raise TypeError(f"check returned {result!r}")
        except Exception as exc:
            result = crashed(check_id, exc)
        result.duration_s = time.monotonic() - start
        return result

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
        """``evaluate`` raised on the captured facts. The captured run crashed
        the same way: its FAIL again (a replay says what the run said). It did
        not: the facts are not what this version's gather writes (a capture
        edited by hand, or another version's field types), so that check is
        a SKIP asking for a new capture, not a bug report."""
        if _recorded_crash(entry):
            return crashed(check_id, exc)
        assert self.replay is not None
        made_by = (self.replay.get("tool") or {}).get("version", "?")
        return Result(
            check_id,
            Status.SKIP,
            f"capture's {check_id} facts cannot be decided by this version ({describe_crash(exc)}; "
            f"written by {made_by}); capture again with this version",
            headline=f"capture's {check_id} facts cannot be decided ({type(exc).__name__}); capture again",
        )

    def _replayed(self, module: ModuleType, check_id: str) -> Result:
        """Decide a check from the capture's facts (see :mod:`pytest_dgx_spark.capture`)."""
        assert self.replay is not None
        entry = (self.replay.get("checks") or {}).get(check_id)
        if entry is None:
            return Result(
                check_id, Status.SKIP, "not in the capture: the captured run did not run this check"
            )
        if not isinstance(entry, Mapping):
            return Result(check_id, Status.SKIP, f"the capture's {check_id} entry is not a table: nothing to decide")
        if entry.get("error"):
            return crashed(check_id, str(entry["error"]))
        if isinstance(entry.get("facts"), Mapping):
            from pytest_dgx_spark.capture import facts_mismatch

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
                why = f"{type(exc).__name__}: {exc}"
                return Result(check_id, Status.SKIP, f"the capture's {check_id} result cannot be read ({why})")
        return Result(check_id, Status.SKIP, "the capture holds neither facts nor a result for this check")


def _recorded_crash(entry: Mapping[str, Any]) -> bool:
    recorded = entry.get("result")
    return isinstance(recorded, Mapping) and "the check itself crashed" in str(recorded.get("summary", ""))


def replay_params(doc: Mapping[str, Any], settings: Settings, profile: str) -> Params:
    """The parameters of a replay: the captured run's options and threshold
    overrides, with what the replay's own command line sets on top, over the
    defaults of ``profile`` (which ``--spark-profile`` may change)."""
    from pytest_dgx_spark.settings import Settings as Defaults
    from pytest_dgx_spark.thresholds import defaults

    captured: Mapping[str, Any] = doc["params"] if isinstance(doc.get("params"), Mapping) else {}
    options = dict(captured.get("options") or {})
    baseline = Defaults()
    for name in list(Params.from_settings(settings, profile).options):
        value = getattr(settings, name, None)
        if value != getattr(baseline, name, None):
            options[name] = value
    overrides = (doc.get("options") or {}).get("threshold") or {}
    thresholds = defaults(profile)
    thresholds.update({k: float(v) for k, v in dict(overrides).items() if k in thresholds})
    thresholds.update(settings.threshold)
    return Params(profile=profile, thresholds=thresholds, options=options)


def describe_crash(exc: BaseException) -> str:
    where = traceback.extract_tb(exc.__traceback__)[-1:] or None
    at = f" at {where[0].filename.rsplit('/', 1)[-1]}:{where[0].lineno}" if where else ""
    return f"{type(exc).__name__}: {exc}{at}"


def crashed(check_id: str, exc: BaseException | str) -> Result:
    """A check that raised: its FAIL, never an exception into pytest; a SKIP
    when what it hit is a limit of this box or user (``ulimit -u``: "can't
    start new thread", a fork's EAGAIN; ``ulimit -v``: MemoryError), which
    says nothing about what the check verifies."""
    from pytest_dgx_spark.probes.child import limit_in_stderr
    from pytest_dgx_spark.probes.commands import limit_reason

    what = exc if isinstance(exc, str) else describe_crash(exc)
    if isinstance(exc, str):  # a crash recorded in a capture: the same verdict on replay
        limited = exc[exc.index("resource limit: ") :] if "resource limit: " in exc else limit_in_stderr(exc)
    else:
        limited = limit_reason(exc)
    if limited:
        return Result(
            check_id,
            Status.SKIP,
            f"not checked: {limited.split(' at ', 1)[0]}; raise the limit (ulimit -u / -v) and run again",
            headline="not checked (resource limit)",
        )
    kind = what.split(":", 1)[0] if isinstance(exc, str) else type(exc).__name__
    named = f" ({kind})" if kind.isidentifier() and len(kind) <= 40 else ""
    return Result(
        check_id,
        Status.FAIL,
        f"the check itself crashed ({what}), so nothing was verified",
        "report this to pytest-dgx-spark; --spark-only can leave this check out meanwhile",
        # the short line names the exception; -v, JUnit and the reports carry where it was raised
        headline=f"the check itself crashed{named}, so nothing was verified",
        short_fix="report it to pytest-dgx-spark",
    )
