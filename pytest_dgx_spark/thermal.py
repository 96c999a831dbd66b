"""Thermal and power series: clock-event reason bits, sample statistics, clock-event counters.

Shared by G4 and the background sampler so both decode the same bits the same way; pure,
standard library only, on the JSON samples of the NVML child or the nvidia-smi fallback.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import field
from typing import Any

from pytest_dgx_spark.checks.record import Record
from pytest_dgx_spark.datadef import define


@define
class NvmlError(Record):
    """Why a reading is absent: NVML's error name (``NotSupported``, ``GpuIsLost``) and its message."""

    name: str = ""
    message: str = ""


@define
class GpuReading(Record):
    """One GPU in one sample (the NVML child's, or a ``--query-gpu`` row); None: not read, and
    ``errors`` says why by field."""

    index: int = 0
    temperature_c: int | float | None = None
    power_usage_mw: int | float | None = None
    clock_sm_mhz: int | float | None = None
    tlimit_c: int | float | None = None
    utilization_gpu: int | float | None = None  # %, NVML's nvmlDeviceGetUtilizationRates().gpu
    clock_event_reasons: int | str | None = None  # NVML's mask, or nvidia-smi's ``0x…`` text
    lost: bool = False
    errors: dict[str, NvmlError] = field(default_factory=dict)

    @classmethod
    def loose(cls, raw: Mapping[str, Any]) -> GpuReading:
        """A raw JSON reading (the sampler's, the watch's stream): what is not a number is not read."""
        errors = raw.get("errors")
        index = raw.get("index", 0)
        reasons = raw.get("clock_event_reasons")
        return cls(
            index=index if isinstance(index, int) else 0, temperature_c=_given(raw.get("temperature_c")),
            power_usage_mw=_given(raw.get("power_usage_mw")), clock_sm_mhz=_given(raw.get("clock_sm_mhz")),
            tlimit_c=_given(raw.get("tlimit_c")), utilization_gpu=_given(raw.get("utilization_gpu")),
            clock_event_reasons=reasons if isinstance(reasons, (int, str)) else None, lost=bool(raw.get("lost")),
            errors={str(k): NvmlError(str(e.get("name") or ""), str(e.get("message") or ""))
                    for k, e in (errors.items() if isinstance(errors, Mapping) else ()) if isinstance(e, Mapping)},
        )


#: one GPU of one sample as the NVML child's stream carries it, untyped (the watch reads it as it comes;
#: :meth:`GpuReading.loose` types it)
RawGpuReading = dict[str, Any]


@define
class Sample(Record):
    """One reading of every GPU, ``t`` seconds into the series."""

    t: float = 0.0
    gpus: list[GpuReading] = field(default_factory=list)

    @classmethod
    def loose(cls, raw: Mapping[str, Any]) -> Sample:
        gpus = raw.get("gpus")
        return cls(number(raw.get("t")) or 0.0,
                   [GpuReading.loose(g) for g in (gpus if isinstance(gpus, list) else []) if isinstance(g, Mapping)])


@define
class CounterSet(Record):
    """The clock-event counters of one GPU: microseconds (None: not read), and the error of those not
    read (NVML's ``{"name", "message"}``, or ``nvidia-smi -q``'s ``"NotSupported"``)."""

    index: int = 0
    us: dict[str, int | None] = field(default_factory=dict)
    errors: dict[str, NvmlError | str] = field(default_factory=dict)

    def read(self) -> dict[str, int | None]:
        """Every counter of :data:`COUNTERS` by name, None for one not read."""
        return {name: self.us.get(name) for name, _, _ in COUNTERS}

    def error_names(self) -> set[str]:
        return {e.name if isinstance(e, NvmlError) else e for e in self.errors.values()}


@define
class SmiQGpu(CounterSet):
    """One GPU of ``nvidia-smi -q``: its counters and its Temperature section (``tlimit_c``, …)."""

    temps: dict[str, int | None] = field(default_factory=dict)


#: ``nvmlClocksEventReason*`` bits 0x1 to 0x400 (nvml.h; BoardLimit and Reliability in newer headers only)
REASON_BITS: tuple[tuple[int, str], ...] = tuple((1 << i, name) for i, name in enumerate((
    "GpuIdle", "ApplicationsClocksSetting", "SwPowerCap", "HwSlowdown", "SyncBoost", "SwThermalSlowdown",
    "HwThermalSlowdown", "HwPowerBrakeSlowdown", "DisplayClockSetting", "BoardLimit", "Reliability",
)))
KNOWN_MASK = sum(bit for bit, _ in REASON_BITS)
BIT_OF = {name: bit for bit, name in REASON_BITS}
#: heat or the power supply cutting the clocks; GpuIdle and SwPowerCap are normal
#: (cluster health checks, DCGM, ignore both)
WARN_MASK = 0x8 | 0x20 | 0x40 | 0x80


def decode_reasons(mask: int | None) -> list[str]:
    """``0x21`` -> ``["GpuIdle", "SwThermalSlowdown"]``; unknown bits as hex."""
    if mask is None:
        return []
    unknown = mask & ~KNOWN_MASK
    return [name for bit, name in REASON_BITS if mask & bit] + ([f"0x{unknown:x}"] if unknown else [])


def parse_mask(raw: object) -> int | None:
    """An NVML int, or nvidia-smi's ``0x0000000000000001``; ``None`` if neither."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw if raw >= 0 else None
    if isinstance(raw, str):
        text = raw.strip()
        try:
            return int(text, 16) if text.lower().startswith("0x") else int(text)
        except ValueError:
            return None
    return None


@define
class Stat:
    """Running min/max/mean of one reading."""

    n: int = 0
    total: float = 0.0
    min: float | None = None
    max: float | None = None

    def add(self, value: float | None) -> None:
        if value is not None:
            v = float(value)
            self.n += 1
            self.total += v
            self.min = v if self.min is None else min(self.min, v)
            self.max = v if self.max is None else max(self.max, v)

    @property
    def mean(self) -> float | None:
        return self.total / self.n if self.n else None

    def to_dict(self) -> dict[str, Any]:
        mean = None if self.mean is None else round(self.mean, 3)
        return {"n": self.n, "min": self.min, "max": self.max, "mean": mean}


@define
class GpuSeries:
    """What one GPU did over a sample: statistics, reasons, errors, loss."""

    index: int
    samples: int = 0
    temperature: Stat = field(default_factory=Stat)
    power_w: Stat = field(default_factory=Stat)
    clock_sm: Stat = field(default_factory=Stat)
    reasons: dict[str, int] = field(default_factory=dict)  # name -> samples it was active in
    reason_samples: int = 0  # samples with a readable reason mask
    idle_samples: int = 0
    errors: dict[str, str] = field(default_factory=dict)  # field -> the last error name seen
    tlimit: Stat = field(default_factory=Stat)  # "GPU T.Limit Temp": degrees left before slowdown
    lost_at: float | None = None  # "t" of the first sample that said GpuIsLost
    #: (t, temperature, power W) per sample
    points: list[tuple[float, float | None, float | None]] = field(default_factory=list)

    @property
    def warn_reasons(self) -> dict[str, int]:
        return {n: c for n, c in self.reasons.items() if BIT_OF.get(n, 0) & WARN_MASK}

    @property
    def busy(self) -> bool | None:
        """``False`` when GpuIdle was set in most samples, ``None`` when unknown."""
        return self.idle_samples * 2 < self.reason_samples if self.reason_samples else None

    @property
    def lost(self) -> bool:
        return self.lost_at is not None

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "samples": self.samples, "temperature_c": self.temperature.to_dict(),
                "power_w": self.power_w.to_dict(), "clock_sm_mhz": self.clock_sm.to_dict(),
                "reasons": dict(self.reasons), "throttle_reasons": self.warn_reasons,
                "idle_samples": self.idle_samples, "errors": dict(self.errors), "lost_at": self.lost_at}


def number(value: object) -> float | None:
    """``value`` as a float when it is an int or a float (a JSON bool is neither); else None."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _given(value: object) -> int | float | None:
    """``value`` as given when it is a number (an int stays an int in what is recorded), else None."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def add_sample(series: dict[int, GpuSeries], sample: Sample | Mapping[str, Any], *, keep_points: bool = True) -> None:
    """Fold one sample (a :class:`Sample`, or the raw ``{"t", "gpus": [...]}`` of a stream) into per-GPU series."""
    if not isinstance(sample, Sample):
        sample = Sample.loose(sample)
    t = sample.t
    for gpu in sample.gpus:
        s = series.setdefault(gpu.index, GpuSeries(gpu.index))
        lost = _errors(s, gpu, t)
        temp, mw = gpu.temperature_c, gpu.power_usage_mw
        watts = None if mw is None else mw / 1000.0
        if lost and temp is None and watts is None:
            continue  # the GPU is gone: a time of loss, not a reading
        s.samples += 1
        s.temperature.add(temp)
        s.power_w.add(watts)
        s.clock_sm.add(gpu.clock_sm_mhz)
        s.tlimit.add(gpu.tlimit_c)
        if (mask := parse_mask(gpu.clock_event_reasons)) is not None:
            s.reason_samples += 1
            s.idle_samples += bool(mask & BIT_OF["GpuIdle"])
            for name in decode_reasons(mask):
                s.reasons[name] = s.reasons.get(name, 0) + 1
        if keep_points:
            s.points.append((t, temp, watts))


def _errors(s: GpuSeries, gpu: GpuReading, t: float) -> bool:
    """Keep the sample's error names; whether it said the GPU is lost (its time kept)."""
    lost = gpu.lost or any(e.name == "GpuIsLost" for e in gpu.errors.values())
    if lost and s.lost_at is None:
        s.lost_at = t
    s.errors.update({k: e.name for k, e in gpu.errors.items() if e.name})
    return lost


def summarise(samples: Iterable[Sample | Mapping[str, Any]]) -> dict[int, GpuSeries]:
    """Per-GPU series from a list of samples (in time order)."""
    series: dict[int, GpuSeries] = {}
    for sample in samples:
        if isinstance(sample, (Sample, Mapping)):
            add_sample(series, sample)
    return dict(sorted(series.items()))


def window_means(points: Sequence[tuple[float, float | None, float | None]], which: int) -> tuple[float, float] | None:
    """Mean of the first and of the last fifth of a series, so one noisy end reading makes no "climb"."""
    values = [v for p in points if (v := p[which]) is not None]
    if len(values) < 2:
        return None
    k = max(1, len(values) // 5)
    return sum(values[:k]) / k, sum(values[-k:]) / k


@define
class FlatPower:
    """The seed's throttling pattern: power flat well under the limit while the temperature climbs."""

    ceiling_w: float
    power_min: float
    power_max: float
    temp_start: float
    temp_end: float
    seconds: float

    @property
    def rise(self) -> float:
        return self.temp_end - self.temp_start


def flat_power_climb(
    s: GpuSeries, *, ceiling_w: float | None, band_fraction: float, rise_c: float, idle_w: float = 0.0
) -> FlatPower | None:
    """Power within ``band_fraction`` of a ceiling "well below the limit" while the temperature
    rose ``rise_c``. An idle GPU never matches: GpuIdle in most samples, or (GB10 reads 0x0
    while idle) a power never above the idle band ``idle_w``."""
    if ceiling_w is None or ceiling_w <= 0 or s.busy is False:
        return None
    temps = window_means(s.points, 1)
    watts = [w for p in s.points if (w := p[2]) is not None]
    if temps is None or len(watts) < 2 or (idle_w > 0 and max(watts) <= idle_w):
        return None
    (start, end), pmin, pmax = temps, min(watts), max(watts)
    if end - start < rise_c or pmax > ceiling_w or pmax - pmin > ceiling_w * band_fraction:
        return None
    times = [p[0] for p in s.points]
    return FlatPower(ceiling_w, pmin, pmax, start, end, max(times) - min(times))


#: the cumulative clock-event counters (microseconds since the driver loaded): name,
#: the label ``nvidia-smi -q -d PERFORMANCE`` prints, the word a line uses. On GB10 the
#: instant reasons read "Not Active" while these count hours of SW power capping.
COUNTERS: tuple[tuple[str, str, str], ...] = (
    ("sw_power_cap", "SW Power Capping", "power cap"),
    ("sync_boost", "Sync Boost", "sync boost"),
    ("sw_thermal_slowdown", "SW Thermal Slowdown", "SW thermal"),
    ("hw_thermal_slowdown", "HW Thermal Slowdown", "HW thermal"),
    ("hw_power_brake_slowdown", "HW Power Braking", "power brake"),
)
WORDS = {name: word for name, _, word in COUNTERS}
#: heat or the power supply cut the clocks (WARN); SW power capping is normal
SLOWDOWN_COUNTERS = ("sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
_Q_COUNTERS = {label.lower(): name for name, label, _ in COUNTERS}
#: ``-q -d TEMPERATURE`` labels -> keys (T.Limit lines are margins; older drivers print absolutes)
_Q_TEMPS = {
    "gpu current temp": "current_c", "gpu t.limit temp": "tlimit_c", "gpu shutdown temp": "shutdown_c",
    "gpu shutdown t.limit temp": "shutdown_tlimit_c", "gpu slowdown t.limit temp": "slowdown_tlimit_c",
    "gpu max operating t.limit temp": "max_operating_tlimit_c", "gpu slowdown temp": "slowdown_c",
}
_Q_MAX = 1 << 64  # NVML's counters and temperatures are C integers of 64 bits at most


def _leading_int(text: str) -> int | None:
    """``"50284264713 us   ### note"`` -> 50284264713; ``N/A`` or a number no 64-bit counter holds -> None."""
    word = (text.split() or [""])[0]
    if len(word) > 24:  # past any 64-bit value, and Python's int() digit limit
        return None
    try:
        value = int(word)
    except ValueError:
        return None
    return value if -_Q_MAX < value < _Q_MAX else None


def parse_smi_q(text: str) -> list[SmiQGpu]:
    """Per GPU: its ``Clocks Event Reasons Counters`` and ``Temperature`` sections; ``N/A`` tolerated."""
    gpus: list[SmiQGpu] = []
    section = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", "=")):
            continue
        if line.startswith("GPU ") and ":" in line and " : " not in line:
            gpus.append(SmiQGpu(index=len(gpus)))
            section = ""
        elif gpus and " : " not in line and not stripped.endswith(":"):
            section = stripped.lower()
        elif gpus:
            key, _, value = stripped.partition(":")
            key, gpu = key.strip().lower(), gpus[-1]
            if section == "clocks event reasons counters" and key in _Q_COUNTERS:
                if (counted := _leading_int(value)) is None:
                    gpu.errors[_Q_COUNTERS[key]] = "NotSupported"
                else:
                    gpu.us[_Q_COUNTERS[key]] = counted
            elif section == "temperature" and key in _Q_TEMPS:
                gpu.temps[_Q_TEMPS[key]] = _leading_int(value)
    return gpus


def counter_deltas(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> dict[str, int | None]:
    """``after - before`` per counter (us); None if unknown or it went back (the driver reloaded)."""
    b, a = before or {}, after or {}
    return {name: y - x if isinstance(x := b.get(name), int) and isinstance(y := a.get(name), int) and y >= x
            else None for name, _, _ in COUNTERS}


def seconds_text(us: float | None) -> str:
    """Microseconds as a person reads them: ``0 s``, ``1.2 s``, ``14.0 h``."""
    if us is None:
        return "[N/A]"
    s = us / 1e6
    if s >= 3600:
        return f"{s / 3600:.1f} h"
    if s >= 60:
        return f"{s / 60:.1f} min"
    if s == 0:
        return "0 s"
    return f"{s:.2g} s" if s < 10 else f"{s:.0f} s"
