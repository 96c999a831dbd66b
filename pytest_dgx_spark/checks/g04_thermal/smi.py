"""G4's fallback when NVML cannot be used from Python: ``nvidia-smi --query-gpu``, repeated in a child
for a series, and ``nvidia-smi -q`` around it for the clock-event counters; parsed into the same records
as NVML's samples (nvidia-smi's placeholders become the NVML error each stands for)."""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_dgx_spark import thermal
from pytest_dgx_spark.checks.g04_thermal.facts import Device, Facts, sample_interval
from pytest_dgx_spark.checks.kit import CheckContext
from pytest_dgx_spark.checks.record import Record
from pytest_dgx_spark.datadef import define
from pytest_dgx_spark.thermal import CounterSet, GpuReading, NvmlError, Sample, SmiQGpu

#: nvidia-smi fields in order; the reasons field was renamed in driver 535 (None: sample without)
SMI_BASE = ("index", "name", "temperature.gpu", "power.draw", "enforced.power.limit", "clocks.sm", "clocks.max.sm")
SMI_REASON_FIELDS: tuple[str | None, ...] = ("clocks_event_reasons.active", "clocks_throttle_reasons.active", None)
#: nvidia-smi exit codes: 9 driver not loaded, 12 NVML not found (no usable GPU); 15 GPU lost
SMI_NO_GPU_CODES = {9, 12}
SMI_LOST_CODE = 15
#: the long and short spellings nvidia-smi accepts and prints in headers
SMI_ALIASES = {"clocks.current.sm": "clocks.sm", "gpu_name": "name",
               "gpu.power.current_limit": "enforced.power.limit", "gpu.power.requested_limit": "power.limit"}
#: what nvidia-smi prints instead of a value, and the NVML error it stands for
SMI_NOT_A_VALUE = {
    **dict.fromkeys(("[n/a]", "n/a", "[not supported]", "not supported", ""), "NotSupported"),
    "[unknown error]": "Unknown", "[gpu is lost]": "GpuIsLost",
    "[insufficient permissions]": "NoPermission", "[requires root]": "NoPermission",
}
SMI_MAX = 1e12  # no quantity nvidia-smi reports (C, W, MHz, an index) comes near this
#: ``nvidia-smi -q`` before and after the series (two spellings: the store caches a command by argv)
SMI_Q_BEFORE = ["nvidia-smi", "-q", "-d", "PERFORMANCE,TEMPERATURE"]
SMI_Q_AFTER = ["nvidia-smi", "-q", "-d", "TEMPERATURE,PERFORMANCE"]


@define
class SmiAnswer(Record):
    """One answer of the sample child (``smi_child.py``): when, nvidia-smi's exit code (None: it did
    not start), what it printed."""

    t: float = 0.0
    rc: int | None = None
    out: str = ""
    err: str = ""

    @classmethod
    def of(cls, event: Mapping[str, Any]) -> SmiAnswer:
        return cls.from_dict_or_saying(event, "err", "unreadable sample event")  # an answer that says so


def smi_argv(reason_field: str | None) -> list[str]:
    fields = [*SMI_BASE, *([reason_field] if reason_field else [])]
    return ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]


def smi_fields(argv: Sequence[str]) -> list[str]:
    query = next((a for a in argv if a.startswith("--query-gpu=")), "")
    return query.split("=", 1)[1].split(",") if query else []


def gather_smi(ctx: CheckContext, *, nvml_reason: str, nvml_missing: bool) -> Facts:
    """The fallback: ``nvidia-smi --query-gpu``, repeated in a child for a series, ``-q`` around it."""
    seconds = float(ctx.settings.thermal_seconds)
    facts = Facts(source="nvidia-smi", seconds=seconds, notes=[f"NVML: {nvml_reason}"])
    for reason_field in SMI_REASON_FIELDS:
        argv = smi_argv(reason_field)
        res = ctx.machine.command(argv)
        if res.ok or res.timed_out or res.error or "not a valid field" not in (res.stdout + res.stderr).lower():
            break
        facts.notes.append(f"nvidia-smi does not know {reason_field or 'the reasons field'}")
    text = (res.stdout + "\n" + res.stderr).lower()
    if limit := res.extra.resource_limit:  # nvidia-smi could not even start (ulimit -u)
        facts.source, facts.missing = "none", f"{limit} (NVML: {nvml_reason})"
    elif res.error:  # not on PATH, not executable
        facts.source = "none"
        if nvml_missing:
            facts.missing = f"{nvml_reason}; {res.describe()}"
        else:
            facts.broken = f"{nvml_reason}; {res.describe()}"
    elif res.timed_out:
        facts.hung = res.describe()
    elif res.returncode in SMI_NO_GPU_CODES or (res.returncode == 6 and "no devices" in text):
        facts.source, facts.missing = "none", f"{res.describe()} (NVML: {nvml_reason})"
    elif not res.ok:
        facts.broken = res.describe() + (" (GPU fallen off the bus)" if res.returncode == SMI_LOST_CODE else "")
    else:
        _smi_answered(ctx, facts, argv, res.stdout, res.duration_s, nvml_reason)
    return facts


def _smi_answered(ctx: CheckContext, facts: Facts, argv: list[str], stdout: str, duration: float | None,
                  nvml_reason: str) -> None:
    fields = smi_fields(argv)
    statics, sample, problems = parse_smi(stdout, fields, t=0.0)
    facts.notes.extend(problems)
    if not statics:
        facts.source, facts.missing = "none", f"nvidia-smi answered but listed no GPU (NVML: {nvml_reason})"
        return
    facts.devices, facts.samples, facts.duration_s = statics, [sample], duration
    before = smi_q(ctx, facts, SMI_Q_BEFORE)
    if facts.seconds > 0:
        _smi_series(ctx, facts, argv, fields, facts.seconds)
    after = smi_q(ctx, facts, SMI_Q_AFTER) if before else []
    if before and after:
        keep_q(facts, before, after)


def keep_q(facts: Facts, before: list[SmiQGpu] | None, after: list[SmiQGpu]) -> None:
    """``nvidia-smi -q``'s counters (and, after the sample, its temperatures) as the facts'."""
    facts.counters_source = "nvidia-smi -q"
    if before is not None:
        facts.counters_before = [CounterSet(g.index, g.us, g.errors) for g in before]
    facts.counters_after = [CounterSet(g.index, g.us, g.errors) for g in after]
    facts.temps_q = [{"index": g.index, **g.temps} for g in after]


def smi_q(ctx: CheckContext, facts: Facts, argv: list[str]) -> list[SmiQGpu]:
    """``nvidia-smi -q -d PERFORMANCE,TEMPERATURE`` parsed, or ``[]`` with a note."""
    res = ctx.machine.command(argv)
    if not res.ok:
        facts.notes.append(f"clock-event counters not read: {res.describe()}")
        return []
    gpus = [g for g in thermal.parse_smi_q(res.stdout) if g.us or g.errors or g.temps]
    if not gpus:
        facts.notes.append("clock-event counters not read: nvidia-smi -q printed no counters section")
    return gpus


def _smi_series(ctx: CheckContext, facts: Facts, argv: list[str], fields: list[str], seconds: float) -> None:
    interval = max(0.25, sample_interval(seconds, ctx.machine.timeout))
    child = ctx.machine.python_child(f"smi:sample:{seconds}:{interval}", ["smi_child.py"],
                                     {"argv": argv, "seconds": seconds, "interval": interval},
                                     total_timeout=seconds + ctx.machine.timeout * 3)
    series = []
    for ev in map(SmiAnswer.of, child.events):
        if ev.rc != 0:
            facts.broken = f"nvidia-smi exited {ev.rc} mid-sample: {ev.err.strip()[:200]}"
            break
        _, sample, _ = parse_smi(ev.out, fields, t=ev.t)
        if sample.gpus:
            series.append(sample)
    if series:
        facts.samples, facts.duration_s = series, child.duration_s
    if child.timed_out:
        facts.hung = "nvidia-smi " + child.describe("sample").removeprefix("sample ")
    elif child.error or child.resource_limit:
        # our own Python child never started: nvidia-smi did answer, so nothing is said of the driver
        facts.seconds = 0.0
        facts.notes.append(f"{child.describe('nvidia-smi sample child')}: one snapshot instead of a series")
    elif not child.ok and facts.broken is None:
        facts.broken = child.describe("nvidia-smi sample child")


def _smi_value(raw: str) -> tuple[float | None, str | None]:
    """``"107.19 W"`` -> (107.19, None); ``"[N/A]"`` -> (None, "NotSupported"); NaN, inf -> OutOfRange."""
    text = raw.strip()
    if (err := SMI_NOT_A_VALUE.get(text.lower())) is not None:
        return None, err
    if text.startswith("[") and text.endswith("]"):
        return None, text.strip("[]").title().replace(" ", "")
    try:
        value = float((text.split() or [text])[0])
    except ValueError:
        return None, "Unparseable"
    return (value, None) if math.isfinite(value) and abs(value) <= SMI_MAX else (None, "OutOfRange")


def parse_smi(text: str, fields: Sequence[str], *, t: float) -> tuple[list[Device], Sample, list[str]]:
    """``--query-gpu`` CSV -> (static per GPU, one sample, problems); a header line names the columns."""
    statics: list[Device] = []
    gpus: list[GpuReading] = []
    problems: list[str] = []
    fields = list(fields)
    for line in (line for line in text.splitlines() if line.strip()):
        cols = [c.strip() for c in line.split(",")]
        if cols[0].lower().startswith("index") or "temperature.gpu" in line.lower():
            fields = [SMI_ALIASES.get(n, n) for n in (re.sub(r"\s*\[[^\]]*\]$", "", c) for c in cols)]
        elif len(cols) != len(fields):
            problems.append(f"nvidia-smi line with {len(cols)} of {len(fields)} columns ignored: {line[:80]!r}")
        else:
            static, gpu = _smi_row(dict(zip(fields, cols, strict=True)), fields, len(statics))
            statics.append(static)
            gpus.append(gpu)
    return statics, Sample(t, gpus), problems


def _smi_row(given: dict[str, str], fields: list[str], position: int) -> tuple[Device, GpuReading]:
    errors: dict[str, NvmlError] = {}
    row = defaultdict(str, given)  # a column the query did not ask for reads as empty: NotSupported

    def number(name: str, key: str, scale: float = 1.0) -> float | None:
        value, err = _smi_value(row[name])
        if err:
            errors[key] = NvmlError(err, f"nvidia-smi {name}: {row[name]}")
        return None if err or value is None else round(value * scale)

    index_value, _ = _smi_value(row["index"] if "index" in given else "0")
    index = int(index_value) if index_value is not None else position
    limit = number("enforced.power.limit" if "enforced.power.limit" in given else "power.limit", "power_limit_mw", 1000)
    static = Device(index=index, name=given.get("name"), power_limit_mw=limit,
                    max_clock_sm_mhz=number("clocks.max.sm", "max_clock_sm_mhz"), errors=dict(errors))
    errors.clear()
    gpu = GpuReading(index=index, temperature_c=number("temperature.gpu", "temperature_c"),
                     power_usage_mw=number("power.draw", "power_usage_mw", 1000),
                     clock_sm_mhz=number("clocks.sm", "clock_sm_mhz"))
    if reason_field := next((f for f in fields if f.endswith("reasons.active")), None):
        raw = row[reason_field]
        if (mask := thermal.parse_mask(raw)) is None:
            errors["clock_event_reasons"] = NvmlError(_smi_value(raw)[1] or "Unparseable", raw)
        gpu.clock_event_reasons = mask
    gpu.errors = errors
    return static, gpu
