"""The GPU's rules: clock-event reasons, clocks stuck low, flat power while heating, the job's GPU idle.

Each reads one GPU's reading (a raw ``thermal.RawGpuReading`` from the NVML child) per sample and sets
its condition through :class:`.conditions.Conditions`; the thresholds are G4's and G6's
(:class:`.conditions.Params`). ``thermal.flat_power_climb`` is G4's and the sampler's rule too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_dgx_spark import thermal
from pytest_dgx_spark.watch.conditions import Conditions, Params
from pytest_dgx_spark.watch.events import Event, duration
from pytest_dgx_spark.watch.sample import WatchSample

#: the clock-event reasons an event is raised for: SwPowerCap as INFO (normal under load, but the
#: seed's "throughput drops" often is one), heat and the power supply as WARN
REASONS = ("SwPowerCap", "HwSlowdown", "SwThermalSlowdown", "HwThermalSlowdown", "HwPowerBrakeSlowdown")
#: samples in a row without a clock-event reason before it counts as cleared (a reason that flickers
#: off for one sample, as SwPowerCap does at a power limit, stays one event)
CLEAR_AFTER = 2
#: samples in a row under load with low clock and power before "clocks stuck low" (N5) is raised
LOW_CLOCK_SAMPLES = 3
#: GPU utilisation (%) under which the job's GPU counts as idle (a hung collective reads 0)
STALL_UTIL_PCT = 5.0
#: samples in the window the flat-power-while-heating rule judges (5 minutes at the default interval)
FLAT_WINDOW = 60


class GpuRules(Conditions):
    """The rules over the GPUs' readings, and what they remember between samples."""

    def __init__(self, params: Params) -> None:
        super().__init__(params)
        self._last_gpu: dict[int, thermal.RawGpuReading] = {}  # the last reading without a given reason
        self._low_runs: dict[int, int] = {}
        self._window: dict[int, list[tuple[float, thermal.RawGpuReading]]] = {}
        self._busy_seen = False
        self._idle_since: float | None = None

    def _gpus(self, out: list[Event], t: float, s: WatchSample) -> None:
        """Every GPU rule over this sample's readings."""
        answer = s.gpu
        silent = answer.startswith("no answer")
        self._set(out, t, "G4.no-answer", "G4.no-answer", silent, f"NVML: {answer}", "NVML answers again")
        for g in s.gpus or []:
            self._clock_events(out, t, g)
            self._clocks_low(out, t, g)
            self._flat_power(out, t, g)
        if s.gpus is not None:
            self._stall(out, t, s)

    def _clock_events(self, out: list[Event], t: float, g: thermal.RawGpuReading) -> None:
        i = int(g.get("index", 0))
        mask = thermal.parse_mask(g.get("clock_event_reasons"))
        if mask is None:
            return
        names = set(thermal.decode_reasons(mask))
        before = self._last_gpu.get(i)
        for reason in REASONS:
            key = f"G4.clock-event@{i}:{reason}"
            on = reason in names
            status = "WARN" if thermal.BIT_OF[reason] & thermal.WARN_MASK else "INFO"
            if on and key not in self.active:
                text = f"clock-event reason {reason} active on GPU {i}: {_readings(before, g)}"
                self._set(out, t, key, "G4.clock-event", True, text, status=status, reason=reason)
                self.active[key].data["before"] = dict(before or {})
            elif on:
                a = self.active[key]
                a.data["off"] = 0
                clock = thermal.number(g.get("clock_sm_mhz"))
                low = a.data.get("min_clock")
                if clock is not None and (low is None or clock < low):
                    a.data["min_clock"] = clock
            elif key in self.active:
                a = self.active[key]
                a.data["off"] = a.data.get("off", 0) + 1
                if a.data["off"] < CLEAR_AFTER:
                    continue
                low = a.data.get("min_clock")
                during = f"; SM down to {low:.0f} MHz" if low is not None else ""
                self._set(
                    out,
                    t,
                    key,
                    "G4.clock-event",
                    False,
                    clear_text=f"clock-event reason {reason} on GPU {i}{during}",
                )
        if not names & set(REASONS):
            self._last_gpu[i] = g

    def _clocks_low(self, out: list[Event], t: float, g: thermal.RawGpuReading) -> None:
        """N5: under load, clock and power both low with no heat or brake reason, several samples in a row."""
        i = int(g.get("index", 0))
        util, clock = thermal.number(g.get("utilization_gpu")), thermal.number(g.get("clock_sm_mhz"))
        mw = thermal.number(g.get("power_usage_mw"))
        mask = thermal.parse_mask(g.get("clock_event_reasons")) or 0
        p = self.p
        low = (
            util is not None
            and clock is not None
            and mw is not None
            and p.low_clock_mhz > 0
            and util >= p.low_util_pct
            and clock < p.low_clock_mhz
            and mw / 1000 < p.low_power_w
            and not mask & thermal.WARN_MASK
        )
        self._low_runs[i] = self._low_runs.get(i, 0) + 1 if low else 0
        key = f"G4.clocks-low@{i}"
        if low and self._low_runs[i] < LOW_CLOCK_SAMPLES:
            return
        text = ""
        if low and util is not None and clock is not None and mw is not None:
            text = (
                f"GPU {i} at {util:.0f} % load runs at SM {clock:.0f} MHz and {mw / 1000:.0f} W "
                "with no throttle "
                "reason: a stuck low-power state"
            )
        self._set(out, t, key, "G4.clocks-low", low, text, f"GPU {i} clocks back up")

    def _flat_power(self, out: list[Event], t: float, g: thermal.RawGpuReading) -> None:
        """Power flat well under the limit while the temperature climbs, over the last :data:`FLAT_WINDOW`
        samples (``thermal.flat_power_climb``, G4's and the sampler's rule)."""
        i = int(g.get("index", 0))
        window = self._window.setdefault(i, [])
        window.append((t, g))
        del window[:-FLAT_WINDOW]
        p = self.p
        if p.flat_power_w <= 0 or len(window) < 5:
            return
        series: dict[int, thermal.GpuSeries] = {}
        for when, reading in window:
            thermal.add_sample(series, {"t": when, "gpus": [reading]})
        flat = thermal.flat_power_climb(
            series[i],
            ceiling_w=p.flat_power_w,
            band_fraction=p.flat_band,
            rise_c=p.flat_rise_c,
            idle_w=p.idle_w,
        )
        text = ""
        if flat is not None:
            text = (
                f"GPU {i}: power flat at {flat.power_min:.0f}-{flat.power_max:.0f} W "
                f"(<= {flat.ceiling_w:g} W) "
                f"while the temperature rose {flat.temp_start:.0f} → {flat.temp_end:.0f} C "
                f"in {duration(flat.seconds)}"
            )
        self._set(
            out,
            t,
            f"G4.flat-power@{i}",
            "G4.flat-power",
            flat is not None,
            text,
            f"GPU {i}: power and temperature no longer the throttling pattern",
        )

    def _stall(self, out: list[Event], t: float, s: WatchSample) -> None:
        """The job's GPU idle (utilisation under :data:`STALL_UTIL_PCT`) for ``stall_s`` after it was busy."""
        utils = [
            u for g in s.gpus or [] if (u := thermal.number(g.get("utilization_gpu"))) is not None
        ]
        if not utils or not s.job_running:
            return
        busy = max(utils) >= STALL_UTIL_PCT
        self._busy_seen |= busy
        if busy or not self._busy_seen:
            self._idle_since = None
        elif self._idle_since is None:
            self._idle_since = t
        stalled = self._idle_since is not None and t - self._idle_since >= self.p.stall_s
        if stalled and "G6.job-stalled" not in self.active:
            text = (
                f"the job's GPU has been idle (utilisation under {STALL_UTIL_PCT:g} %) for "
                f"{duration(t - (self._idle_since if self._idle_since is not None else t))}, "
                "after it was busy"
            )
            self._set(out, t, "G6.job-stalled", "G6.job-stalled", True, text)
        elif busy:
            self._set(
                out, t, "G6.job-stalled", "G6.job-stalled", False, clear_text="the job's GPU is busy again"
            )


def _readings(before: Mapping[str, Any] | None, now: Mapping[str, Any]) -> str:
    """``SM 2522 → 1100 MHz, power 95 → 60 W`` (before the reason, and now)."""

    def pair(key: str, scale: float, unit: str) -> str:
        b = thermal.number((before or {}).get(key))
        n = thermal.number(now.get(key))
        if n is None:
            return ""
        return f"{b / scale:.0f} → {n / scale:.0f} {unit}" if b is not None else f"{n / scale:.0f} {unit}"

    parts = [
        f"SM {x}" if (x := pair("clock_sm_mhz", 1, "MHz")) else "",
        f"power {x}" if (x := pair("power_usage_mw", 1000, "W")) else "",
        f"{x}" if (x := pair("temperature_c", 1, "C")) else "",
    ]
    return ", ".join(p for p in parts if p) or "no reading"
