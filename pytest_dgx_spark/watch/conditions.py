"""The watcher's machinery: a condition is a key that is active or not, and each change is an event.

:class:`Conditions` keeps which conditions are active and turns each change into an :class:`Event`:
a condition that starts (``start``), one that ends (``clear``, with how long it lasted) and an
instant (``once``: an Xid, an OOM kill). A condition that stays true is one event, not one per
sample. The rules that decide a condition live in :mod:`.gpu_rules` and :mod:`.rules`; what counts
as bad is :class:`Params`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Any

from pytest_dgx_spark.datadef import define
from pytest_dgx_spark.watch.events import CODES, Event, duration

#: events a watcher keeps (the latest; a reason that flaps for a week stays bounded), counted all
MAX_EVENTS = 5000


@define
class Active:
    """A condition active now: since when, its text, its kind and status, what its rule keeps."""

    since: float
    text: str
    data: dict[str, Any] = field(default_factory=dict)
    code: str = ""
    status: str = ""


@define
class Params:
    """What counts as bad; the watcher's options and the checks' thresholds."""

    interval: float = 5.0
    workload_gb: float | None = None
    margin_gb: float = 0.0
    blocks_min: float = 0.0  # g3_contig_blocks_min (0: off)
    block_mib: float = 32.0
    page_kib: int = 4
    stall_s: float = 600.0
    low_util_pct: float = 80.0  # g4_low_power_util_pct
    low_clock_mhz: float = 1400.0
    low_power_w: float = 30.0
    flat_power_w: float = 0.0  # g4_flat_power_w, or the enforced limit x g4_flat_power_fraction (0: off)
    flat_band: float = 0.15
    flat_rise_c: float = 5.0
    idle_w: float = 0.0
    xid_classes: Mapping[str, str] = field(default_factory=dict)


class Conditions:
    """The conditions active now, the events they brought, and how many of each kind."""

    def __init__(self, params: Params) -> None:
        self.p = params
        self.active: dict[str, Active] = {}
        self.events: list[Event] = []
        self.counts: dict[str, int] = {}  # code -> conditions started (or instants), over the whole watch

    def _set(self, out: list[Event], t: float, key: str, code: str, on: bool, text: str = "",
             clear_text: str = "", status: str | None = None, **data: Any) -> None:
        """Condition ``key`` (of kind ``code``) is ``on`` now: an event where that changes it."""
        was = self.active.get(key)
        c = CODES[code]
        if on and was is None:
            self.active[key] = Active(t, text, data, code, status or c.status)
            out.append(Event(t, code, "start", status or c.status, text, c.fix, key))
        elif not on and was is not None:
            del self.active[key]
            lasted = f" after {duration(t - was.since)}"
            out.append(
                Event(t, code, "clear", "OK", (clear_text or was.text) + lasted, "", key, since=was.since)
            )

    def _once(self, out: list[Event], t: float, code: str, text: str, key: str, status: str | None = None,
              fix: str | None = None) -> None:
        """An instant: one event, nothing kept active."""
        c = CODES[code]
        out.append(Event(t, code, "once", status or c.status, text, fix if fix is not None else c.fix, key))

    def _keep(self, out: list[Event]) -> None:
        for e in out:
            if e.state != "clear":
                self.counts[e.code] = self.counts.get(e.code, 0) + 1
        self.events += out
        del self.events[:-MAX_EVENTS]

    def summary(self, seconds: float) -> str:
        """``no event in 6 h 12 m`` or ``3 events in 2 m 5 s: G4.clock-event x2, G6.new-process``."""
        if not self.counts:
            return f"no event in {duration(seconds)}"
        n = sum(self.counts.values())
        named = ", ".join(f"{c} x{k}" if k > 1 else c for c, k in self.counts.items())
        return f"{n} event{'s' if n != 1 else ''} in {duration(seconds)}: {named}"

    def finish(self, t: float) -> list[Event]:
        """Clear what is still active when the watch ends (the job is gone)."""
        out: list[Event] = []
        for key, a in list(self.active.items()):
            code = key.split("@", 1)[0]
            self._set(out, t, key, code, False, clear_text=f"still active when the watch ended: {a.text}")
        self._keep(out)
        return out
