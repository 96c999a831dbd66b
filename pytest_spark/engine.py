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
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from pytest_spark import catalog
from pytest_spark.model import Result, Status
from pytest_spark.options import Settings
from pytest_spark.probes.child import ChildResult
from pytest_spark.probes.machine import Machine

#: the checks that read the torch child (G1 ABI, G2 flash-attn, G5 copy, G7 arch list)
TORCH_CHECKS = ("G1", "G2", "G5", "G7")


def check_module(check_id: str) -> ModuleType:
    spec = catalog.BY_ID[check_id]
    return importlib.import_module(f"pytest_spark.checks.{spec.module}")


@dataclass
class CheckContext:
    """What a check's ``run(ctx)`` gets: the options, the machine, the engine."""

    check_id: str
    settings: Settings
    machine: Machine
    engine: Engine

    @property
    def profile(self) -> str:
        return self.engine.profile()

    @property
    def thresholds(self) -> dict[str, float]:
        return self.settings.thresholds(self.profile)

    @property
    def selected(self) -> tuple[str, ...]:
        return self.engine.selected

    def torch(self) -> ChildResult:
        return self.engine.torch()

    def result(
        self,
        status: Status | str,
        summary: str,
        fix: str = "",
        readings: Iterable[Any] = (),
        details: Iterable[str] = (),
    ) -> Result:
        return Result(self.check_id, Status(status), summary, fix, list(readings), details=list(details))


class Engine:
    def __init__(
        self,
        settings: Settings,
        machine: Machine,
        selected: Iterable[str] | None = None,
        *,
        background: bool = True,
    ) -> None:
        self.settings = settings
        self.machine = machine
        ids = list(selected) if selected is not None else list(settings.selected)
        self.selected: tuple[str, ...] = tuple(c for c in catalog.IDS if c in ids)
        self.background = background
        self._prefetched = False

    # ------------------------------------------------------------------ shared facts

    def profile(self) -> str:
        """``gb10`` or ``generic``: forced by ``--spark-profile`` or found by NVML."""
        if self.settings.profile in ("gb10", "generic"):
            return self.settings.profile
        return "gb10" if self.machine.identity().get("gb10") else "generic"

    def torch_request(self) -> dict[str, Any]:
        """Merge what every selected check wants the torch child to do."""
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
            for key, value in extra.items():
                if key == "extensions":
                    merged = request.setdefault("extensions", [])
                    merged.extend(v for v in value if v not in merged)
                else:
                    request[key] = value
        return request

    def torch(self) -> ChildResult:
        return self.machine.torch(self.torch_request())

    def prefetch(self) -> None:
        """Start the slow work of the run in the background, once.

        The torch child (import torch, initialise CUDA, import the CUDA
        extensions) takes seconds; G4's thermal sample, G8's request and the
        rest need none of it. One thread starts the torch child, another runs
        every selected check that does not read it, so they overlap. A check
        (or test item) that wants a result waits for it through the store,
        which computes each thing once. Off under xdist: workers already run
        checks side by side, and a worker that ends first must not leave a
        half-done probe behind for another to read.
        """
        if self._prefetched or not self.background:
            return
        self._prefetched = True
        torch_work = set(TORCH_CHECKS) & set(self.selected)
        others = [cid for cid in self.selected if cid not in TORCH_CHECKS]

        def start_torch() -> None:
            try:
                self.torch()
            except Exception:  # the check that needs it computes it again and says why
                pass

        def run_others() -> None:
            for cid in others:
                self.run(cid)  # run() turns any failure into that check's result

        if torch_work:
            threading.Thread(target=start_torch, name="spark-prefetch-torch", daemon=True).start()
        if others and torch_work:  # with nothing slow to hide, no need for a thread
            threading.Thread(target=run_others, name="spark-prefetch-checks", daemon=True).start()

    def close(self) -> int:
        """Kill probes still running (a run that stopped early); how many."""
        from pytest_spark.probes.commands import kill_running

        return kill_running()

    # ------------------------------------------------------------------ running

    def run(self, check_id: str) -> Result:
        """Run one check (once per run; later calls read the stored result)."""
        data = self.machine.store.get_or_compute(
            f"result:{check_id}", lambda: self._run_uncached(check_id).to_dict()
        )
        return Result.from_dict(data)

    def run_many(self, ids: Iterable[str] | None = None) -> list[Result]:
        wanted = list(ids) if ids is not None else list(self.selected)
        self.prefetch()
        return [self.run(cid) for cid in catalog.IDS if cid in wanted]

    def _run_uncached(self, check_id: str) -> Result:
        start = time.monotonic()
        ctx = CheckContext(check_id, self.settings, self.machine, self)
        try:
            result = check_module(check_id).run(ctx)
            if not isinstance(result, Result) or result.check_id != check_id:
                raise TypeError(f"check returned {result!r}")
        except Exception as exc:
            where = traceback.extract_tb(exc.__traceback__)[-1:] or None
            at = f" at {where[0].filename.rsplit('/', 1)[-1]}:{where[0].lineno}" if where else ""
            result = Result(
                check_id,
                Status.FAIL,
                f"the check itself crashed ({type(exc).__name__}: {exc}{at}), so nothing was verified",
                "report this to pytest-dgx-spark; --spark-only can leave this check out meanwhile",
            )
        result.duration_s = time.monotonic() - start
        return result
