"""G4 — thermals and power: is the GPU being slowed down by heat or power?

A GB10 that runs hot cuts its clocks (``SwThermalSlowdown`` fires on GB10:
NVIDIA/open-gpu-kernel-modules#1358), and one on a degraded USB-C PD supply
runs capped without any error. A long run on such a box takes longer than
planned, or the box powers off mid-run. This check samples temperature,
power draw, the enforced power limit (``N/A`` on GB10: a reading, not an
error), the SM clock, the T.Limit margin and the clock-event reasons for
``--spark-thermal-seconds`` through NVML (in a child process), or through
``nvidia-smi`` when NVML cannot be used from Python.

On GB10 the instantaneous reasons read "Not Active" while the cumulative
clock-event counters show hours of SW power capping and seconds of thermal
slowdown (fixtures nvidia-smi-q_1.txt, nvidia-smi_clocks_power_1.txt), so the
counters are read before and after the sample (NVML field values; ``nvidia-smi
-q`` when NVML has none): the difference is what happened during the run, the
totals what happened since the driver loaded.

WARN on active thermal, HW-slowdown or power-brake reasons (GpuIdle and
SwPowerCap are ignored, as cluster health checks do: both are normal), on
thermal or power-brake counters that grew during the sample or are large
since boot, on a temperature at the throttle trip, and on the seed's
pattern: power flat well under the limit while the temperature climbs. FAIL
when the driver does not answer within ``--spark-timeout`` or the GPU is lost
mid-sample; SKIP when there is no NVIDIA GPU.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_dgx_spark.checks.kit import CheckContext, FactsBase, Findings, Params
from pytest_dgx_spark.model import SHORT_WIDTH, Reading, Result, Status
from pytest_dgx_spark.thermal import (
    COUNTERS,
    SLOWDOWN_COUNTERS,
    GpuSeries,
    counter_deltas,
    flat_power_climb,
    parse_mask,
    parse_smi_q,
    seconds_text,
    summarise,
)

DRIVER_FIX = (
    "check `dmesg | grep -i -e NVRM -e Xid` (Xid 79: fallen off the bus); a wedged driver needs a "
    "reboot (on GB10 a full AC power cycle if it persists)"
)
#: its short form on the default line
DRIVER_SHORT = "dmesg | grep -i Xid; reboot"

#: nvidia-smi fields, in order. The reasons field was renamed in driver 535;
#: older drivers know only the ``clocks_throttle_reasons`` spelling.
SMI_BASE = (
    "index",
    "name",
    "temperature.gpu",
    "power.draw",
    "enforced.power.limit",
    "clocks.sm",
    "clocks.max.sm",
)
SMI_REASON_FIELDS: tuple[str | None, ...] = (
    "clocks_event_reasons.active",
    "clocks_throttle_reasons.active",
    None,  # a driver that knows neither: sample without reasons
)
#: nvidia-smi exit codes (nvidia-smi(1)): 9 driver not loaded, 12 NVML library
#: not found, 6 "No devices were found" — no usable GPU, not a broken one.
SMI_NO_GPU_CODES = {9, 12}
#: the long and short spellings nvidia-smi accepts and prints in headers
SMI_ALIASES = {
    "clocks.current.sm": "clocks.sm",
    "gpu_name": "name",
    "gpu.power.current_limit": "enforced.power.limit",
    "gpu.power.requested_limit": "power.limit",
}
SMI_LOST_CODE = 15
#: what nvidia-smi prints instead of a value, and the NVML error it stands for
SMI_NOT_A_VALUE = {
    "[n/a]": "NotSupported",
    "n/a": "NotSupported",
    "[not supported]": "NotSupported",
    "not supported": "NotSupported",
    "": "NotSupported",
    "[unknown error]": "Unknown",
    "[gpu is lost]": "GpuIsLost",
    "[insufficient permissions]": "NoPermission",
    "[requires root]": "NoPermission",
}


@dataclass
class Facts(FactsBase):
    source: str = "nvml"  # "nvml" | "nvidia-smi" | "none"
    seconds: float = 1.0  # requested sample length (0 = one snapshot)
    #: static facts per GPU: index, name, power_limit_mw, max_clock_sm_mhz, errors
    devices: list[dict[str, Any]] = field(default_factory=list)
    #: ``{"t", "gpus": [...]}`` in time order (see pytest_dgx_spark/thermal.py)
    samples: list[dict[str, Any]] = field(default_factory=list)
    duration_s: float | None = None
    hung: str | None = None  # the driver did not answer in time
    broken: str | None = None  # it answered, wrongly (crash, exit code, errors)
    #: no NVIDIA GPU / driver here; or, starting with LIMITED, a limit of this
    #: box or user (``ulimit -u``/``-v``) stopped the probe: no verdict on the GPU
    missing: str | None = None
    notes: list[str] = field(default_factory=list)
    #: clock-event counters per GPU before and after the sample:
    #: ``[{"index", "us": {counter: microseconds}, "errors": {counter: error}}]``
    counters_before: list[dict[str, Any]] = field(default_factory=list)
    counters_after: list[dict[str, Any]] = field(default_factory=list)
    #: where the counters came from: "nvml" (field values), "nvidia-smi -q", or None
    counters_source: str | None = None
    #: ``nvidia-smi -q`` Temperature section per GPU (fallback path): ``{"index", key: C}``
    temps_q: list[dict[str, Any]] = field(default_factory=list)


FACTS = Facts
#: ``nvidia-smi -q`` for the counters and the T.Limit margins, before and after
#: the series (two spellings: the run's store caches a command by its argv)
SMI_Q_BEFORE = ["nvidia-smi", "-q", "-d", "PERFORMANCE,TEMPERATURE"]
SMI_Q_AFTER = ["nvidia-smi", "-q", "-d", "TEMPERATURE,PERFORMANCE"]


# ---------------------------------------------------------------------- gather


def sample_interval(seconds: float, timeout: float) -> float:
    """At most ~300 samples per run (bounded output), at least 10 per second
    for short runs, and always well inside the progress watchdog (a sample is
    the child's sign of life)."""
    return round(min(max(0.1, seconds / 300.0), max(timeout / 2.0, 0.05)), 3)


#: how ``Facts.missing`` starts when a resource limit, not the GPU, stopped the probe
LIMITED = "resource limit: "


def gather(ctx: CheckContext) -> Facts:
    """The facts; a driver is said not to answer (hung, or broken with no
    sample) only with an NVIDIA device node there (``/dev/nvidiactl``,
    ``/dev/nvidia0``): without one there is no GPU to judge, whatever hung."""
    facts = _gather(ctx)
    if facts.missing or ctx.machine.has_gpu_device_node():
        return facts
    if facts.hung:
        facts.missing, facts.hung = f"no NVIDIA device node, and the driver did not answer: {facts.hung}", None
    elif not any(s.samples for s in summarise(facts.samples).values()):
        facts.missing = f"no NVIDIA device node; {facts.broken or 'no GPU answered a sample'}"
        facts.broken = None
    return facts


def _gather(ctx: CheckContext) -> Facts:
    machine = ctx.machine
    seconds = float(ctx.settings.thermal_seconds)
    nv = machine.nvml()
    if nv.get("limited"):
        return Facts(seconds=seconds, source="none", missing=str(nv["limited"]))
    if nv.get("hung"):
        return Facts(seconds=seconds, hung=str(nv.get("reason")))
    if nv.get("ok"):
        if nv.get("no_gpu"):
            return Facts(seconds=seconds, source="none", missing="NVML answered but reports no GPU")
        devices = [_static_from_snapshot(d) for d in nv.get("devices") or []]
        interval = sample_interval(seconds, machine.timeout)
        sample = machine.nvml_sample(seconds, interval)
        facts = Facts(
            seconds=seconds,
            devices=devices,
            samples=list(sample.get("samples") or []),
            duration_s=sample.get("duration_s"),
            counters_before=list(sample.get("counters_before") or []),
            counters_after=list(sample.get("counters_after") or []),
            counters_source="nvml" if sample.get("counters_before") else None,
        )
        if sample.get("limited"):
            facts.missing = str(sample["limited"])
        elif sample.get("hung"):
            facts.hung = str(sample.get("reason"))
        elif not sample.get("ok"):
            facts.broken = str(sample.get("reason"))
        else:
            _counters_from_smi(ctx, facts)
        return facts
    return gather_smi(ctx, nvml_reason=str(nv.get("reason")), nvml_missing=bool(nv.get("missing")))


def _counters_from_smi(ctx: CheckContext, facts: Facts) -> None:
    """NVML answered but its clock-event field values did not (an older driver or
    binding): ``nvidia-smi -q`` prints the same counters (nvidia-smi-q_1.txt), read
    once after the sample, so the since-boot totals are still known (not the growth)."""
    if any(c.get("us") for c in (*facts.counters_before, *facts.counters_after)):
        return
    after = _smi_q(ctx, facts, SMI_Q_AFTER)
    if not after:
        return
    facts.counters_source = "nvidia-smi -q"
    facts.counters_after = [{k: g[k] for k in ("index", "us", "errors")} for g in after]
    facts.temps_q = [{"index": g["index"], **g["temps"]} for g in after]
    facts.notes.append(
        "NVML gave no clock-event counters: read from nvidia-smi -q after the sample (since boot only)"
    )


def _static_from_snapshot(dev: Mapping[str, Any]) -> dict[str, Any]:
    errors = dev.get("errors") or {}
    return {
        "index": dev.get("index", 0),
        "name": dev.get("name"),
        "power_limit_mw": dev.get("power_limit_mw"),
        "max_clock_sm_mhz": dev.get("max_clock_sm_mhz"),
        "errors": {k: v for k, v in errors.items() if k in ("power_limit_mw", "max_clock_sm_mhz", "name")},
    }


def smi_argv(reason_field: str | None) -> list[str]:
    fields = [*SMI_BASE, *([reason_field] if reason_field else [])]
    return ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]


def smi_fields(argv: Sequence[str]) -> list[str]:
    query = next((a for a in argv if a.startswith("--query-gpu=")), "")
    return query.split("=", 1)[1].split(",") if query else []


def _invalid_field(text: str) -> bool:
    return "not a valid field" in text.lower()


def gather_smi(ctx: CheckContext, *, nvml_reason: str, nvml_missing: bool) -> Facts:
    """The fallback: ``nvidia-smi --query-gpu`` (with a timeout, in its own
    process group), then, for a series, the same query repeated in a child."""
    machine = ctx.machine
    seconds = float(ctx.settings.thermal_seconds)
    facts = Facts(source="nvidia-smi", seconds=seconds, notes=[f"NVML: {nvml_reason}"])
    argv: list[str] = []
    res = None
    for reason_field in SMI_REASON_FIELDS:
        argv = smi_argv(reason_field)
        res = machine.command(argv)
        if res.ok or res.timed_out or res.error or not _invalid_field(res.stdout + res.stderr):
            break
        facts.notes.append(f"nvidia-smi does not know {reason_field or 'the reasons field'}")
    assert res is not None
    if res.extra.get("resource_limit"):  # nvidia-smi could not even start (ulimit -u)
        facts.source, facts.missing = "none", f"{res.extra['resource_limit']} (NVML: {nvml_reason})"
        return facts
    if res.error:  # not on PATH, not executable
        why = f"{nvml_reason}; {res.describe()}"
        if nvml_missing:
            facts.source, facts.missing = "none", why
        else:
            facts.source, facts.broken = "none", why
        return facts
    if res.timed_out:
        facts.hung = res.describe()
        return facts
    text = res.stdout + "\n" + res.stderr
    if res.returncode in SMI_NO_GPU_CODES or (res.returncode == 6 and "no devices" in text.lower()):
        facts.source, facts.missing = "none", f"{res.describe()} (NVML: {nvml_reason})"
        return facts
    if not res.ok:
        facts.broken = res.describe() + (
            " (GPU fallen off the bus)" if res.returncode == SMI_LOST_CODE else ""
        )
        return facts
    fields = smi_fields(argv)
    statics, sample, problems = parse_smi(res.stdout, fields, t=0.0)
    facts.notes.extend(problems)
    if not statics:
        facts.source, facts.missing = "none", f"nvidia-smi answered but listed no GPU (NVML: {nvml_reason})"
        return facts
    facts.devices = statics
    facts.samples = [sample]
    facts.duration_s = res.duration_s
    before = _smi_q(ctx, facts, SMI_Q_BEFORE)
    if seconds > 0:
        _smi_series(ctx, facts, argv, fields, seconds)
    after = _smi_q(ctx, facts, SMI_Q_AFTER) if before else []
    if before and after:
        facts.counters_source = "nvidia-smi -q"
        facts.counters_before = [{k: g[k] for k in ("index", "us", "errors")} for g in before]
        facts.counters_after = [{k: g[k] for k in ("index", "us", "errors")} for g in after]
        facts.temps_q = [{"index": g["index"], **g["temps"]} for g in after]
    return facts


def _smi_q(ctx: CheckContext, facts: Facts, argv: list[str]) -> list[dict[str, Any]]:
    """``nvidia-smi -q -d PERFORMANCE,TEMPERATURE`` parsed, or ``[]`` with a note."""
    res = ctx.machine.command(argv)
    if not res.ok:
        facts.notes.append(f"clock-event counters not read: {res.describe()}")
        return []
    gpus = [g for g in parse_smi_q(res.stdout) if g["us"] or g["errors"] or g["temps"]]
    if not gpus:
        facts.notes.append("clock-event counters not read: nvidia-smi -q printed no counters section")
    return gpus


def _smi_series(ctx: CheckContext, facts: Facts, argv: list[str], fields: list[str], seconds: float) -> None:
    interval = max(0.25, sample_interval(seconds, ctx.machine.timeout))
    child = ctx.machine.python_child(
        f"smi:sample:{seconds}:{interval}",
        ["smi_child.py"],
        {"argv": argv, "seconds": seconds, "interval": interval},
        total_timeout=seconds + ctx.machine.timeout * 3,
    )
    series = []
    for ev in child.events:
        if ev.get("rc") != 0:
            facts.broken = (
                f"nvidia-smi exited {ev.get('rc')} mid-sample: {str(ev.get('err') or '').strip()[:200]}"
            )
            break
        _, sample, _ = parse_smi(str(ev.get("out") or ""), fields, t=float(ev.get("t") or 0.0))
        if sample["gpus"]:
            series.append(sample)
    if series:
        facts.samples = series
        facts.duration_s = child.duration_s
    if child.timed_out:
        facts.hung = "nvidia-smi " + child.describe("sample").removeprefix("sample ")
    elif child.error or child.resource_limit:
        # our own Python child never started (an interpreter this user cannot run):
        # nvidia-smi did answer the snapshot, so this says nothing about the driver
        facts.seconds = 0.0
        facts.notes.append(f"{child.describe('nvidia-smi sample child')}: one snapshot instead of a series")
    elif not child.ok and facts.broken is None:
        facts.broken = child.describe("nvidia-smi sample child")


#: no quantity nvidia-smi reports (C, W, MHz, an index) comes near this
SMI_MAX = 1e12


def _smi_value(raw: str) -> tuple[float | None, str | None]:
    """``"107.19 W"`` -> (107.19, None); ``"[N/A]"`` -> (None, "NotSupported").

    A tool's output is data: NaN, an infinity (``1e400`` parses as one) or a
    number no GPU reports is ``(None, "OutOfRange")``, never a value that
    crashes the check later (``int(inf)``: OverflowError)."""
    text = raw.strip()
    err = SMI_NOT_A_VALUE.get(text.lower())
    if err is not None:
        return None, err
    if text.startswith("[") and text.endswith("]"):
        return None, text.strip("[]").title().replace(" ", "")
    number = text.split()[0] if text.split() else text
    try:
        value = float(number)
    except ValueError:
        return None, "Unparseable"
    if not math.isfinite(value) or abs(value) > SMI_MAX:
        return None, "OutOfRange"
    return value, None


def parse_smi(
    text: str, fields: Sequence[str], *, t: float
) -> tuple[list[dict[str, Any]], dict[str, Any], list[str]]:
    """Parse ``--query-gpu`` CSV into (static per GPU, one sample, problems).

    Defensive about what nvidia-smi really prints: a header line (with or
    without ``noheader``), units (without ``nounits``), ``[N/A]``,
    ``[Not Supported]``, ``[GPU is lost]``, empty lines, short lines.
    """
    statics: list[dict[str, Any]] = []
    gpus: list[dict[str, Any]] = []
    problems: list[str] = []
    fields = list(fields)
    for line in text.splitlines():
        if not line.strip():
            continue
        cols = [c.strip() for c in line.split(",")]
        if cols and (cols[0].lower().startswith("index") or "temperature.gpu" in line.lower()):
            # A header (nvidia-smi without noheader): trust its names and order.
            fields = [SMI_ALIASES.get(n, n) for n in (re.sub(r"\s*\[[^\]]*\]$", "", c) for c in cols)]
            continue
        if len(cols) != len(fields):
            problems.append(
                f"nvidia-smi line with {len(cols)} of {len(fields)} columns ignored: {line[:80]!r}"
            )
            continue
        row = dict(zip(fields, cols, strict=True))
        index_value, _ = _smi_value(row.get("index", "0"))
        index = int(index_value) if index_value is not None else len(statics)
        errors: dict[str, dict[str, str]] = {}

        def number(name: str, key: str, scale: float = 1.0, row: dict[str, str] = row, errors=errors) -> Any:
            value, err = _smi_value(row.get(name, ""))
            if err:
                errors[key] = {"name": err, "message": f"nvidia-smi {name}: {row.get(name, '')}"}
                return None
            return None if value is None else round(value * scale)

        limit_field = "enforced.power.limit" if "enforced.power.limit" in row else "power.limit"
        limit = number(limit_field, "power_limit_mw", 1000)
        max_sm = number("clocks.max.sm", "max_clock_sm_mhz")
        static_errors = {k: errors.pop(k) for k in list(errors)}
        statics.append(
            {
                "index": index,
                "name": row.get("name"),
                "power_limit_mw": limit,
                "max_clock_sm_mhz": max_sm,
                "errors": static_errors,
            }
        )
        gpu: dict[str, Any] = {
            "index": index,
            "temperature_c": number("temperature.gpu", "temperature_c"),
            "power_usage_mw": number("power.draw", "power_usage_mw", 1000),
            "clock_sm_mhz": number("clocks.sm", "clock_sm_mhz"),
            "clock_event_reasons": None,
        }
        reason_field = next((f for f in fields if f.endswith("reasons.active")), None)
        if reason_field:
            raw = row.get(reason_field, "")
            mask = parse_mask(raw)
            if mask is None:
                _, err = _smi_value(raw)
                errors["clock_event_reasons"] = {"name": err or "Unparseable", "message": raw}
            gpu["clock_event_reasons"] = mask
        if errors:
            gpu["errors"] = errors
        gpus.append(gpu)
    return statics, {"t": t, "gpus": gpus}, problems


# ---------------------------------------------------------------------- evaluate


def _fmt(value: float | None, unit: str = "") -> str:
    if value is None:
        return "[N/A]"
    text = f"{value:.0f}" if abs(value) >= 100 or float(value).is_integer() else f"{value:.1f}"
    return f"{text} {unit}".rstrip() if unit else text


def _span(lo: float | None, hi: float | None, unit: str) -> str:
    if lo is None or hi is None:
        return "[N/A]"
    if _fmt(lo) == _fmt(hi):
        return _fmt(lo, unit)
    return f"{_fmt(lo)}-{_fmt(hi, unit)}"


def _rnd(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def flat_ceiling(params: Params, limit_w: float | None) -> float | None:
    """'Well under the limit': the configured watts (GB10: the seed's 100 W,
    since GB10's limit reads N/A), else a fraction of the enforced limit."""
    watts = params.threshold("g4_flat_power_w")
    if watts > 0:
        return watts
    if limit_w:
        return limit_w * params.threshold("g4_flat_power_fraction")
    return None


def _reasons_text(s: GpuSeries) -> str:
    if not s.reason_samples:
        return "clock-event reasons [N/A]"
    if not s.reasons:
        return "no clock-event reason"
    parts = []
    for name, count in s.reasons.items():
        if name == "GpuIdle":
            parts.append("GpuIdle (idle)")
        elif name == "SwPowerCap":
            parts.append(f"SwPowerCap in {count}/{s.reason_samples} (at its power limit)")
        else:
            parts.append(f"{name} in {count}/{s.reason_samples}")
    return "reasons: " + ", ".join(parts)


COOL_FIX = (
    "cool it (clear vents, lower ambient); on GB10 `sudo nvidia-smi -lgc 0,2100` caps the clock "
    "(reported to take 91-92 C down to 65-80 C)"
)
COOL_SHORT = "cool it; cap clocks: sudo nvidia-smi -lgc 0,2100"
BRAKE_FIX = (
    "the power supply asserted the brake: check the adapter and cable (GB10: the 240 W USB-C PD "
    "supply; a full AC power cycle clears a degraded PD state)"
)
BRAKE_SHORT = "check the power adapter; full AC power cycle"


@dataclass
class _Out:
    """G4's findings (the one ``kit.Findings``, each with its short form) and
    what its stages add beside them: per-GPU readings and flat-power ceilings."""

    f: Findings
    per_gpu: list[Reading] = field(default_factory=list)
    ceilings: list[float] = field(default_factory=list)


def evaluate(facts: Facts, params: Params) -> Result:
    """Decide G4 from a sample series and the clock-event counters (pure)."""
    early = _unreachable(facts)
    if early is not None:
        return early
    series = summarise(facts.samples)
    static = {int(d.get("index", 0)): d for d in facts.devices}
    out = _Out(Findings("G4"))
    out.f.note(*facts.notes)
    for index, s in series.items():
        _gpu_stage(s, static.get(index, {}), len(series) > 1, params, out)
    counters = _counters_stage(facts, params, out)
    readings = _readings(facts, series, static, out.ceilings) + counters + out.per_gpu
    out.f.readings.extend(readings)
    # Count and duration stay out of the line (they jitter run to run; the
    # readings carry them), so the same machine state gives the same line.
    how = "one snapshot" if facts.seconds <= 0 else f"sampled {facts.seconds:g} s"
    if out.f.problems or facts.broken:
        return _failed(facts, out)
    overview, headline = _overview(series, static, facts, how)
    result = out.f.result(Status.INFO, overview, headline=headline)
    if out.f.warnings:
        result.headline, result.short_fix = out.f.first_short()
        result.summary += f" ({how}, {facts.source})"
    return result


def _unreachable(facts: Facts) -> Result | None:
    """FAIL for a driver that does not answer, SKIP for no GPU or a resource
    limit, else None (``gather`` already turned a hang without a device node into ``missing``)."""
    if facts.missing and facts.missing.startswith(LIMITED):
        return Result(
            "G4",
            Status.SKIP,
            f"not checked: {facts.missing}; raise the limit (ulimit -u / -v) and run again",
            details=facts.notes,
            headline="not checked (resource limit)",
        )
    if facts.hung:
        return Result(
            "G4",
            Status.FAIL,
            f"driver not answering: {facts.hung}",
            DRIVER_FIX,
            details=facts.notes,
            headline="GPU driver not answering",
            short_fix=DRIVER_SHORT,
        )
    missing = facts.missing
    if missing:
        return Result(
            "G4",
            Status.SKIP,
            f"no NVIDIA GPU: {missing}",
            details=facts.notes,
            headline=f"no NVIDIA GPU ({_why(missing)})",
        )
    if not any(s.samples for s in summarise(facts.samples).values()):
        why = facts.broken or "no GPU answered a sample"
        return Result(
            "G4",
            Status.FAIL,
            f"GPU/driver not answering: {why}",
            DRIVER_FIX,
            details=facts.notes,
            headline="GPU/driver not answering",
            short_fix=DRIVER_SHORT,
        )
    return None


def _why(text: str) -> str:
    """The error name in a reason (``... (DriverNotLoaded)``), else its start."""
    names = re.findall(r"\(([A-Za-z]+)\)", text)
    return names[0] if names else text[:40]


def _failed(facts: Facts, out: _Out) -> Result:
    if facts.broken:
        out.f.fail(facts.broken, DRIVER_FIX, "GPU/driver stopped answering", DRIVER_SHORT)
    result = out.f.result(Status.INFO)
    result.summary = "GPU/driver stopped answering: " + result.summary
    result.headline, result.short_fix = out.f.first_short()
    return result


def _gpu_stage(s: GpuSeries, dev: Mapping[str, Any], many: bool, params: Params, out: _Out) -> None:
    """One GPU's series: lost or errors only (FAIL), active reasons, heat and
    flat power (WARN), and its readings when there are several GPUs."""
    label = f"GPU {s.index}" + (f" ({dev['name']})" if dev.get("name") else "")
    if s.lost:
        out.f.fail(
            f"{label} was lost mid-sample (GpuIsLost at t={s.lost_at:.1f} s, after {s.samples} readings)",
            DRIVER_FIX,
            f"GPU {s.index} lost mid-sample (t={s.lost_at:.1f} s)",
            DRIVER_SHORT,
        )
        return
    if s.temperature.n == 0 and s.power_w.n == 0:
        real = {k: v for k, v in s.errors.items() if v != "NotSupported"}
        if real:
            errs = ", ".join(f"{k}: {v}" for k, v in sorted(real.items()))
            headline = f"GPU {s.index} answered errors only"
            out.f.fail(f"{label} answered errors only ({errs})", DRIVER_FIX, headline, DRIVER_SHORT)
            return
    for key, name in sorted(s.errors.items()):
        if name != "NotSupported":
            out.f.note(f"{label}: {key} answered {name}")
    _reasons_stage(s, label, out)
    _heat_stage(s, label, params, out)
    _flat_stage(s, label, _watts(dev.get("power_limit_mw")), params, out)
    if s.busy is False and s.temperature.n > 1:
        out.f.note(f"{label}: idle in most samples; the flat-power rule needs load")
    if many:
        i = s.index
        out.per_gpu += [
            Reading(f"gpu{i}_temperature_max", _rnd(s.temperature.max), "C"),
            Reading(f"gpu{i}_power_max", _rnd(s.power_w.max), "W"),
            Reading(f"gpu{i}_sm_clock_min", _rnd(s.clock_sm.min, 0), "MHz"),
            Reading(f"gpu{i}_reasons", ",".join(s.reasons) or "none"),
        ]


def _reasons_stage(s: GpuSeries, label: str, out: _Out) -> None:
    throttle = s.warn_reasons
    if not throttle:
        return
    names = ", ".join(f"{n} in {c}/{s.reason_samples} samples" for n, c in throttle.items())
    text = f"{label}: {names} (max {_fmt(s.temperature.max, 'C')})"
    first = next(iter(throttle))
    headline = f"{first} in {throttle[first]}/{s.reason_samples} samples, max {_fmt(s.temperature.max, 'C')}"
    fixes: list[tuple[str, str]] = []
    if {"SwThermalSlowdown", "HwThermalSlowdown"} & set(throttle):
        fixes.append((COOL_FIX, COOL_SHORT))
    if "HwPowerBrakeSlowdown" in throttle:
        fixes.append((BRAKE_FIX, BRAKE_SHORT))
    if set(throttle) == {"HwSlowdown"}:
        fixes.append(
            (
                "HW slowdown is heat or the power supply: check cooling, the supply and dmesg",
                "check cooling, the power supply and dmesg",
            )
        )
    out.f.warn(text, "; ".join(f for f, _ in fixes), headline, fixes[0][1] if fixes else "")


def _heat_stage(s: GpuSeries, label: str, params: Params, out: _Out) -> None:
    """At the throttle trip (GB10: 86-87 C, fixture thermal_2.txt), or with
    almost no T.Limit margin left."""
    hot = params.threshold("g4_hot_c")
    margin = params.threshold("g4_tlimit_margin_c")
    tmax, tlim = s.temperature.max, s.tlimit.min
    if hot > 0 and tmax is not None and tmax >= hot:
        # g4_hot_c is a margin below the trip (GB10's default 85 C: the trip is 86-87 C), not the trip
        trip = "; GB10 trips at 86-87 C" if params.gb10 else ""
        out.f.warn(
            f"{label} reached {_fmt(tmax, 'C')}, at or above g4_hot_c = {hot:g} C"
            + (" (GB10's throttle trip is 86-87 C)" if trip else ""),
            COOL_FIX,
            f"GPU {s.index} at {_fmt(tmax, 'C')} (warns from {hot:g} C{trip})",
            COOL_SHORT,
        )
    elif margin > 0 and tlim is not None and tlim <= margin:
        out.f.warn(
            f"{label}: T.Limit margin {_fmt(tlim, 'C')} (<= g4_tlimit_margin_c = {margin:g} C) at "
            f"{_fmt(tmax, 'C')}: about to slow down for heat",
            COOL_FIX,
            f"GPU {s.index} {_fmt(tlim, 'C')} from its slowdown limit",
            COOL_SHORT,
        )


def _flat_stage(s: GpuSeries, label: str, limit_w: float | None, params: Params, out: _Out) -> None:
    """The seed's pattern: power flat well under the limit while the chip heats."""
    ceiling = flat_ceiling(params, limit_w)
    if ceiling:
        out.ceilings.append(ceiling)
    rise_c = params.threshold("g4_temp_rise_c")
    band = params.threshold("g4_flat_power_band_fraction")
    idle_w = params.threshold("g4_idle_power_w")
    flat = flat_power_climb(s, ceiling_w=ceiling, band_fraction=band, rise_c=rise_c)
    if flat is not None and idle_w > 0 and flat.power_max <= idle_w:
        out.f.note(
            f"{label}: the temperature rose {flat.rise:.1f} C with the power at idle (<= g4_idle_power_w = "
            f"{idle_w:g} W): the box warmed, not this GPU's load (the flat-power rule needs load)"
        )
        flat = None
    if flat is not None:
        out.f.warn(
            f"{label}: power flat at {_span(flat.power_min, flat.power_max, 'W')} (under the "
            f"{_fmt(ceiling, 'W')} ceiling; limit {_fmt(limit_w, 'W')}) while the temperature rose "
            f"{flat.rise:.1f} C ({_fmt(flat.temp_start)}->{_fmt(flat.temp_end, 'C')}) in {flat.seconds:.1f} s",
            "power held down while the chip heats is the seed's throttling pattern: check cooling and "
            "the power adapter, then re-sample under the real load (--spark-thermal-seconds 900, or the "
            "spark_sampler fixture in a training smoke test)",
            f"power flat at {_span(flat.power_min, flat.power_max, 'W')} while temperature rose {flat.rise:.1f} C",
            "check cooling and power adapter; re-sample under load",
        )
    elif ceiling is None and s.power_w.n:
        out.f.note(
            f"{label}: no enforced power limit and g4_flat_power_w = 0, so the flat-power rule was not applied"
        )


def _counters_stage(facts: Facts, params: Params, out: _Out) -> list[Reading]:
    """The clock-event counters: WARN when thermal or power-brake slowdown grew
    during the sample, or its total since the driver loaded is above
    ``g4_slowdown_since_boot_s``; SW power capping is reported, not judged."""
    before = {int(c.get("index", 0)): c for c in facts.counters_before}
    after = {int(c.get("index", 0)): c for c in facts.counters_after if c.get("us")}
    if not after:
        errs = sorted(
            {
                str(e.get("name") if isinstance(e, Mapping) else e)
                for c in facts.counters_before
                for e in (c.get("errors") or {}).values()
            }
        )
        if facts.counters_source or errs:
            out.f.note(f"clock-event counters [N/A] ({', '.join(errs) or 'not read after the sample'})")
        return []
    growth_s = params.threshold("g4_slowdown_growth_s")
    boot_s = params.threshold("g4_slowdown_since_boot_s")
    readings: list[Reading] = []
    for index, a in sorted(after.items()):
        us = a.get("us") or {}
        delta = counter_deltas((before.get(index) or {}).get("us"), us)
        grew = {n: d for n, d in delta.items() if n in SLOWDOWN_COUNTERS and d and d / 1e6 > growth_s}
        total = sum(us.get(n) or 0 for n in SLOWDOWN_COUNTERS)
        where = f"GPU {index}" if len(after) > 1 else "GPU"
        if grew:
            words = ", ".join(f"{_word(n)} +{seconds_text(d)}" for n, d in grew.items())
            brake = set(grew) == {"hw_power_brake_slowdown"}
            out.f.warn(
                f"{where} clocks cut during the sample: {words} (clock-event counters)",
                BRAKE_FIX if brake else COOL_FIX,
                f"{words} during the sample",
                BRAKE_SHORT if brake else COOL_SHORT,
            )
        elif total / 1e6 > boot_s:
            words = ", ".join(f"{_word(n)} {seconds_text(us.get(n))}" for n in SLOWDOWN_COUNTERS if us.get(n))
            out.f.warn(
                f"{where} clocks were cut since the driver loaded: {words} (> g4_slowdown_since_boot_s = "
                f"{boot_s:g} s; none during the sample)",
                COOL_FIX + "; then re-run the 15-minute check (--spark-thermal-seconds 900)",
                f"{words} since boot (> {boot_s:g} s)",
                "check cooling; re-run with --spark-thermal-seconds 900",
            )
        prefix = f"gpu{index}_" if len(after) > 1 else ""
        for name, _, _ in COUNTERS:
            readings.append(Reading(f"{prefix}{name}_since_boot", _secs(us.get(name)), "s"))
            readings.append(Reading(f"{prefix}{name}_in_sample", _secs(delta.get(name)), "s"))
    return readings


def _word(name: str) -> str:
    return next(w for n, _, w in COUNTERS if n == name)


def _secs(us: int | None) -> float | None:
    return None if us is None else round(us / 1e6, 3)


#: the counters G4's lines name (both thermal ones are summed as "thermal")
COUNTED = ("sw_power_cap", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")


def _counter_figures(facts: Facts) -> tuple[dict[str, Any], list[tuple[str, str]], str | None] | None:
    """The first GPU's counters after the sample, its ``[(name, "3.0 h"), …]``
    since boot, and the slowdown that grew during the sample (``None``: no
    reading before it); ``None`` when no counters were read."""
    known = [c for c in facts.counters_after if c.get("us")]
    if not known:
        return None
    a = known[0]
    us = a.get("us") or {}
    b = next((c for c in facts.counters_before if c.get("index") == a.get("index")), {})
    delta = counter_deltas(b.get("us"), us)
    thermal = [us.get(n) for n in ("sw_thermal_slowdown", "hw_thermal_slowdown") if us.get(n) is not None]
    parts = [
        ("power cap", seconds_text(us.get("sw_power_cap"))),
        ("thermal", seconds_text(sum(thermal)) if thermal else "[N/A]"),
        ("power brake", seconds_text(us.get("hw_power_brake_slowdown"))),
    ]
    grown = [d for n, d in delta.items() if n in SLOWDOWN_COUNTERS and d is not None]
    return us, parts, seconds_text(sum(grown)) if grown else None


def counters_text(facts: Facts) -> str:
    """``clock-event counters since boot: power cap 14.0 h, thermal 0 s, power
    brake 0 s; slowdown +0 s in the sample`` for the line (first GPU; empty
    when no counters were read)."""
    figures = _counter_figures(facts)
    if figures is None:
        return ""
    _, parts, during = figures
    grown = f"; slowdown +{during} in the sample" if during is not None else ""
    return "clock-event counters since boot: " + ", ".join(f"{n} {v}" for n, v in parts) + grown


def counters_short(facts: Facts, room: int) -> str:
    """The counters for the default line, in at most ``room`` characters where
    it can: "no clock events since boot" when every counter read 0; else
    ``since boot: power cap 3.0 h, thermal 1.2 s, brake 0 s (+0 s in sample)``,
    and when that does not fit, only the figures that are not 0 (an H200 at
    its power limit: ``since boot: power cap 2.7 h``). Empty without counters."""
    figures = _counter_figures(facts)
    if figures is None:
        return ""
    us, parts, during = figures
    if all(us.get(n) == 0 for n in COUNTED):
        return "no clock events since boot"

    def text(shown: Sequence[tuple[str, str]], grown: str | None) -> str:
        named = ", ".join(f"{n.replace('power brake', 'brake')} {v}" for n, v in shown)
        return f"since boot: {named}" + (f" (+{grown} in sample)" if grown is not None else "")

    whole = text(parts, during)
    counted = [(n, v) for n, v in parts if v != "0 s"]
    if len(whole) <= room or not counted:
        return whole
    return text(counted, during if during != "0 s" else None)


def _watts(mw: Any) -> float | None:
    if isinstance(mw, bool) or not isinstance(mw, (int, float)):
        return None
    return mw / 1000.0


def _overview(
    series: Mapping[int, GpuSeries], static: Mapping[int, dict[str, Any]], facts: Facts, how: str
) -> tuple[str, str]:
    """(the line, its headline): the ranges measured, the limit, the clock,
    the T.Limit margin, the reasons seen and the counters."""
    all_s = list(series.values())
    temps = _span(*_range(all_s, "temperature"), "C")
    watts = _span(*_range(all_s, "power_w"), "W")
    clock = _span(*_range(all_s, "clock_sm"), "MHz")
    limits = {_watts(static.get(i, {}).get("power_limit_mw")) for i in series}
    limit = _fmt(next(iter(limits)), "W") if len(limits) == 1 else "varies"
    names = sorted({str(d.get("name")) for d in static.values() if d.get("name")})
    if len(all_s) == 1:
        s = all_s[0]
        who = f"GPU {s.index}" + (f" {names[0]}" if names else "")
        mean = f" (mean {_fmt(s.temperature.mean)})" if s.temperature.min != s.temperature.max else ""
        reasons = _reasons_text(s)
    else:
        who = f"{len(all_s)} GPUs" + (f" ({', '.join(names)})" if names else "")
        mean = ""
        seen = sorted({name for s in all_s for name in s.reasons})
        reasons = ("reasons seen: " + ", ".join(seen)) if seen else "no clock-event reason"
    margin = tlimit_margin(facts, all_s)
    margin_text = f", T.Limit margin {_fmt(margin, 'C')}" if margin is not None else ""
    counters = counters_text(facts)
    line = (
        f"{who}: {temps}{mean}{margin_text}, {watts} (limit {limit}), SM {clock}; {reasons}; "
        + (f"{counters}; " if counters else "")
        + f"{how} ({facts.source})"
    )
    short_who = names[0].removeprefix("NVIDIA ") if len(names) == 1 else who
    head = f"{short_who} {temps}{margin_text}, {watts}, SM {clock}; "
    tail = counters_short(facts, SHORT_WIDTH - len(f"G4 INFO: {head}")) or reasons
    return line, head + tail


def _range(all_s: Sequence[GpuSeries], stat: str) -> tuple[float | None, float | None]:
    lows = [getattr(s, stat).min for s in all_s if getattr(s, stat).min is not None]
    highs = [getattr(s, stat).max for s in all_s if getattr(s, stat).max is not None]
    return (min(lows) if lows else None, max(highs) if highs else None)


def tlimit_margin(facts: Facts, all_s: Sequence[GpuSeries]) -> float | None:
    """The smallest "GPU T.Limit Temp" seen: NVML's margin in the samples, or
    the ``nvidia-smi -q`` Temperature section (fallback path)."""
    values = [s.tlimit.min for s in all_s if s.tlimit.min is not None]
    values += [t["tlimit_c"] for t in facts.temps_q if isinstance(t.get("tlimit_c"), (int, float))]
    return min(values) if values else None


def _readings(
    facts: Facts, series: Mapping[int, GpuSeries], static: Mapping[int, dict[str, Any]], ceilings: list[float]
) -> list[Reading]:
    all_s = list(series.values())

    def pick(fn: Any, values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return _rnd(fn(known)) if known else None

    def mean(stat_name: str) -> float | None:
        stats = [getattr(s, stat_name) for s in all_s]
        n = sum(st.n for st in stats)
        return _rnd(sum(st.total for st in stats) / n) if n else None

    rises = []
    for s in all_s:
        values = [p[1] for p in s.points if p[1] is not None]
        if len(values) >= 2:
            k = max(1, len(values) // 5)
            rises.append(sum(values[-k:]) / k - sum(values[:k]) / k)
    limits = [_watts(static.get(i, {}).get("power_limit_mw")) for i in series]
    rated = [static.get(i, {}).get("max_clock_sm_mhz") for i in series]
    reasons = sorted({name for s in all_s for name in s.reasons})
    return [
        Reading("temperature_min", pick(min, [s.temperature.min for s in all_s]), "C"),
        Reading("temperature_max", pick(max, [s.temperature.max for s in all_s]), "C"),
        Reading("temperature_mean", mean("temperature"), "C"),
        Reading("temperature_rise", pick(max, rises) if rises else None, "C"),
        Reading("power_min", pick(min, [s.power_w.min for s in all_s]), "W"),
        Reading("power_max", pick(max, [s.power_w.max for s in all_s]), "W"),
        Reading("power_mean", mean("power_w"), "W"),
        Reading("power_limit", pick(max, limits), "W"),
        Reading("flat_power_ceiling", pick(max, list(ceilings)) if ceilings else None, "W"),
        Reading("sm_clock_min", pick(min, [s.clock_sm.min for s in all_s]), "MHz"),
        Reading("sm_clock_max", pick(max, [s.clock_sm.max for s in all_s]), "MHz"),
        Reading("sm_clock_mean", mean("clock_sm"), "MHz"),
        Reading("tlimit_margin_min", _rnd(tlimit_margin(facts, all_s)), "C"),
        Reading("sm_clock_rated", pick(max, [r for r in rated if isinstance(r, (int, float))]), "MHz"),
        Reading("clock_event_reasons", ",".join(reasons) or "none"),
        Reading("samples", max((s.samples for s in all_s), default=0)),
        Reading("sample_seconds", _rnd(facts.duration_s, 2), "s"),
        Reading("gpus", len(all_s)),
        Reading("source", facts.source),
    ]
