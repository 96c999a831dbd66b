"""G4 — thermals and power: is the GPU being slowed down by heat or power?

A hot GB10 cuts its clocks (open-gpu-kernel-modules#1358); one on a degraded USB-C PD supply runs
capped without an error. G4 samples temperature, power and its limit, the SM clock, the T.Limit margin
and the clock-event reasons for ``--spark-thermal-seconds`` through NVML (in a child), else nvidia-smi,
and the cumulative clock-event counters around the sample (on GB10 the instant reasons read "Not
Active" while the counters show hours of capping: nvidia-smi-q_1.txt). Issue 22 adds two faults these
do not show: Xid lines in the kernel log since boot (N7: a vLLM service killed by Xid 13 exits
``status=0/SUCCESS``; GSP crashes, Xid 119/120, need a reboot), and a stuck low-power state under load
(N5: 96 % utilisation at 799 MHz and 19.5 W with no throttle reason, cured only by pulling AC power).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypedDict

from pytest_dgx_spark import thermal
from pytest_dgx_spark.checks.kit import CheckContext, FactsBase, Findings, Params
from pytest_dgx_spark.model import SHORT_WIDTH, Reading, Result, Status
from pytest_dgx_spark.probes import kernel_log
from pytest_dgx_spark.thermal import CounterSet, GpuReading, GpuSeries, Sample, SmiQGpu

DRIVER_FIX = ("check `dmesg | grep -i -e NVRM -e Xid` (Xid 79: fallen off the bus); a wedged driver needs a "
              "reboot (on GB10 a full AC power cycle if it persists)")
DRIVER_SHORT = "dmesg | grep -i Xid; reboot"
COOL_FIX = ("cool it (clear vents, lower ambient); on GB10 `sudo nvidia-smi -lgc 0,2100` caps the clock "
            "(reported to take 91-92 C down to 65-80 C)")
COOL_SHORT = "cool it; cap clocks: sudo nvidia-smi -lgc 0,2100"
BRAKE_FIX = ("the power supply asserted the brake: check the adapter and cable (GB10: the 240 W USB-C PD "
             "supply; a full AC power cycle clears a degraded PD state)")
BRAKE_SHORT = "check the power adapter; full AC power cycle"

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
#: how ``Facts.missing`` starts when a resource limit, not the GPU, stopped the probe
LIMITED = "resource limit: "

#: Xid classes (awdemos/spark-doctor's ``gpu.xid_error`` rule: {48,61,62,63,64,74,79,92,94,95,
#: 119,120} critical "hardware", the rest "application"; 154 and 169 from NVIDIA's Xid catalogue
#: and tests/data/gb10/dmesg_xid_1.txt, dmesg_xid_5.txt: "GPU reset required", proprietary modules on GB10)
XID_APPLICATION = frozenset({13, 31, 43, 45})
XID_HARDWARE = frozenset({48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 154, 169})
XID_KEEP = 200  # the Xid lines a capture keeps (latest first); the counts cover them all
XID_SHOWN = 10  # the Xid lines ``-v`` lists
#: the fix of a hardware-class Xid, by the codes it applies to (the first that matches), and its short form
XID_FIXES: tuple[tuple[frozenset[int] | None, str, str], ...] = (
    (frozenset({119, 120}), "GSP firmware hang (display hotplug polling, suspend): add `options nvidia "
     "NVreg_EnableHotplugDetection=0` to /etc/modprobe.d/, disable nvidia-suspend, nvidia-hibernate and "
     "nvidia-resume (`sudo systemctl disable nvidia-suspend nvidia-hibernate nvidia-resume`; driver updates "
     "re-enable them), `sudo update-initramfs -u`, reboot",
     "NVreg_EnableHotplugDetection=0; disable nvidia-suspend; reboot"),
    (frozenset({169}), "the proprietary kernel modules cannot drive GB10 (Blackwell is supported by the open "
     "kernel modules only): install the open flavour of the same driver (nvidia-driver-<ver>-open / "
     "nvidia-open) and reboot", "install the open kernel modules; reboot"),
    (frozenset({79, 154}), "the GPU needs a reset: reboot; if it comes back, a full power cycle (unplug the "
     "power brick, wait 60 s)", "reboot; if it persists, full AC power cycle"),
    (None, "reboot; if the Xid comes back, collect `sudo nvidia-bug-report.sh` and contact NVIDIA support "
     "(possible RMA)", "reboot; nvidia-bug-report.sh if it recurs"),
)
XID_APP_FIX = ("a GPU kernel of that process faulted and the process most likely died (a service may "
               "still exit 0): update or patch the kernel path it ran (nightly NVFP4/FP8 kernels, attention "
               "backends), then re-run it")
XID_OTHER_FIX = "look the Xid up in NVIDIA's Xid catalogue (docs.nvidia.com/deploy/xid-errors)"
LOW_POWER_FIX = ("a stuck low-power (USB-C PD) state: unplug the power brick from the wall and from the "
                 "Spark, wait 60 s, plug it back in (`nvidia-smi -lgc` does not lift it); if it persists, "
                 "try another 240 W supply, then RMA")
LOW_POWER_SHORT = "unplug the power brick (wall + Spark), wait 60 s"


class Device(TypedDict, total=False):
    index: int
    name: str | None
    power_limit_mw: float | None
    max_clock_sm_mhz: float | None
    errors: dict[str, dict[str, str]]


@dataclass
class Facts(FactsBase):
    source: str = "nvml"  # "nvml" | "nvidia-smi" | "none"
    seconds: float = 1.0  # requested sample length (0 = one snapshot)
    devices: list[Device] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)  # in time order
    duration_s: float | None = None
    hung: str | None = None  # the driver did not answer in time
    broken: str | None = None  # it answered, wrongly (crash, exit code, errors)
    missing: str | None = None  # no NVIDIA GPU / driver; or, starting with LIMITED, a limit of this box
    notes: list[str] = field(default_factory=list)
    counters_before: list[CounterSet] = field(default_factory=list)
    counters_after: list[CounterSet] = field(default_factory=list)
    counters_source: str | None = None  # "nvml" (field values), "nvidia-smi -q", or None
    temps_q: list[dict[str, int | None]] = field(default_factory=list)  # -q Temperature per GPU
    kernel_log_source: str | None = None  # "/dev/kmsg", "journalctl", "dmesg"; None: not readable / not read
    kernel_log_records: int = 0
    kernel_log_problem: str | None = None  # why it was not read (how to allow it if a permission)
    kernel_log_cut: str | None = None  # which bound ended the read
    xids: list[dict[str, Any]] = field(default_factory=list)  # since boot, latest first (at most XID_KEEP)
    xid_counts: dict[str, int] = field(default_factory=dict)  # every Xid's count by code

    #: captures written before the kernel log was read replay as they did, saying so in -v
    NOT_CAPTURED: ClassVar[Mapping[str, Any]] = {
        "kernel_log_source": None, "kernel_log_records": 0,
        "kernel_log_problem": "not in this capture (written before G4 read the kernel log)",
        "kernel_log_cut": None, "xids": [], "xid_counts": {},
    }


FACTS = Facts


def sample_interval(seconds: float, timeout: float) -> float:
    """At most ~300 samples, at least 10 a second for short runs, well inside the progress watchdog."""
    return round(min(max(0.1, seconds / 300.0), max(timeout / 2.0, 0.05)), 3)


def gather(ctx: CheckContext) -> Facts:
    """The facts; a driver is said not to answer only with an NVIDIA device node there."""
    facts = _gather(ctx)
    node = ctx.machine.has_gpu_device_node()
    # no GPU and no NVIDIA device node: no driver to log an Xid, and journalctl costs a
    # machine without a GPU up to a second; a node with a silent driver (Xid 169) is read
    if not (facts.missing and (facts.missing.startswith(LIMITED) or not node)):
        gather_kernel_log(ctx, facts)
    if facts.missing or node:
        return facts
    if facts.hung:
        facts.missing, facts.hung = f"no NVIDIA device node, and the driver did not answer: {facts.hung}", None
    elif not _answered(facts):
        facts.missing, facts.broken = f"no NVIDIA device node; {facts.broken or 'no GPU answered a sample'}", None
    return facts


def gather_kernel_log(ctx: CheckContext, facts: Facts) -> None:
    """The Xid lines of the kernel log since boot (the machine reads it once, bounded)."""
    log = ctx.machine.kernel_log()
    facts.kernel_log_source = log.get("source")
    if not facts.kernel_log_source:
        tried = "; ".join(log.get("problems") or []) or "no source answered"
        facts.kernel_log_problem = log.get("denied") or f"kernel log not read ({tried})"
        return
    recs = kernel_log.records(log)
    facts.kernel_log_records, facts.kernel_log_cut = len(recs), log.get("cut")
    found = kernel_log.xids(recs)
    for x in found:
        facts.xid_counts[str(x.code)] = facts.xid_counts.get(str(x.code), 0) + 1
    facts.xids = [x.to_dict() for x in list(kernel_log.latest_first(found))[:XID_KEEP]]


def _answered(facts: Facts) -> bool:
    return any(s.samples for s in thermal.summarise(facts.samples).values())


def _gather(ctx: CheckContext) -> Facts:
    machine = ctx.machine
    seconds = float(ctx.settings.thermal_seconds)
    nv = machine.nvml()
    if nv.get("limited"):
        return Facts(seconds=seconds, source="none", missing=str(nv["limited"]))
    if nv.get("hung"):
        return Facts(seconds=seconds, hung=str(nv.get("reason")))
    if not nv.get("ok"):
        return gather_smi(ctx, nvml_reason=str(nv.get("reason")), nvml_missing=bool(nv.get("missing")))
    if nv.get("no_gpu"):
        return Facts(seconds=seconds, source="none", missing="NVML answered but reports no GPU")
    sample = machine.nvml_sample(seconds, sample_interval(seconds, machine.timeout))
    facts = Facts(
        seconds=seconds, devices=[_static_from_snapshot(d) for d in nv.get("devices") or []],
        samples=list(sample.get("samples") or []),  # type: ignore[arg-type]  # the NVML child's JSON
        duration_s=sample.get("duration_s"), counters_before=list(sample.get("counters_before") or []),
        counters_after=list(sample.get("counters_after") or []),
        counters_source="nvml" if sample.get("counters_before") else None,
    )
    if sample.get("limited"):
        facts.missing = str(sample["limited"])
    elif sample.get("hung"):
        facts.hung = str(sample.get("reason"))
    elif not sample.get("ok"):
        facts.broken = str(sample.get("reason"))
    elif not any(c.get("us") for c in (*facts.counters_before, *facts.counters_after)):
        # NVML gave no counters (an older driver or binding): -q after the sample, since boot only
        after = _smi_q(ctx, facts, SMI_Q_AFTER)
        if after:
            _keep_q(facts, None, after)
            facts.notes.append("NVML gave no clock-event counters: read from nvidia-smi -q after the sample "
                               "(since boot only)")
    return facts


def _keep_q(facts: Facts, before: list[SmiQGpu] | None, after: list[SmiQGpu]) -> None:
    facts.counters_source = "nvidia-smi -q"
    if before is not None:
        facts.counters_before = [{"index": g["index"], "us": g["us"], "errors": g["errors"]} for g in before]
    facts.counters_after = [{"index": g["index"], "us": g["us"], "errors": g["errors"]} for g in after]
    facts.temps_q = [{"index": g["index"], **g["temps"]} for g in after]


def _static_from_snapshot(dev: Mapping[str, Any]) -> Device:
    keep = ("power_limit_mw", "max_clock_sm_mhz", "name")
    return {"index": dev.get("index", 0), "name": dev.get("name"),
            "power_limit_mw": dev.get("power_limit_mw"), "max_clock_sm_mhz": dev.get("max_clock_sm_mhz"),
            "errors": {k: v for k, v in (dev.get("errors") or {}).items() if k in keep}}


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
    if res.extra.resource_limit:  # nvidia-smi could not even start (ulimit -u)
        facts.source, facts.missing = "none", f"{res.extra.resource_limit} (NVML: {nvml_reason})"
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


def _smi_answered(ctx: CheckContext, facts: Facts, argv: list[str], stdout: str, duration: float | None, nvml_reason: str) -> None:
    fields = smi_fields(argv)
    statics, sample, problems = parse_smi(stdout, fields, t=0.0)
    facts.notes.extend(problems)
    if not statics:
        facts.source, facts.missing = "none", f"nvidia-smi answered but listed no GPU (NVML: {nvml_reason})"
        return
    facts.devices, facts.samples, facts.duration_s = statics, [sample], duration
    before = _smi_q(ctx, facts, SMI_Q_BEFORE)
    if facts.seconds > 0:
        _smi_series(ctx, facts, argv, fields, facts.seconds)
    after = _smi_q(ctx, facts, SMI_Q_AFTER) if before else []
    if before and after:
        _keep_q(facts, before, after)


def _smi_q(ctx: CheckContext, facts: Facts, argv: list[str]) -> list[SmiQGpu]:
    """``nvidia-smi -q -d PERFORMANCE,TEMPERATURE`` parsed, or ``[]`` with a note."""
    res = ctx.machine.command(argv)
    if not res.ok:
        facts.notes.append(f"clock-event counters not read: {res.describe()}")
        return []
    gpus = [g for g in thermal.parse_smi_q(res.stdout) if g["us"] or g["errors"] or g["temps"]]
    if not gpus:
        facts.notes.append("clock-event counters not read: nvidia-smi -q printed no counters section")
    return gpus


def _smi_series(ctx: CheckContext, facts: Facts, argv: list[str], fields: list[str], seconds: float) -> None:
    interval = max(0.25, sample_interval(seconds, ctx.machine.timeout))
    child = ctx.machine.python_child(f"smi:sample:{seconds}:{interval}", ["smi_child.py"],
                                     {"argv": argv, "seconds": seconds, "interval": interval},
                                     total_timeout=seconds + ctx.machine.timeout * 3)
    series = []
    for ev in child.events:
        if ev.get("rc") != 0:
            facts.broken = f"nvidia-smi exited {ev.get('rc')} mid-sample: {str(ev.get('err') or '').strip()[:200]}"
            break
        _, sample, _ = parse_smi(str(ev.get("out") or ""), fields, t=float(ev.get("t") or 0.0))
        if sample["gpus"]:
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
    return statics, {"t": t, "gpus": gpus}, problems


def _smi_row(row: dict[str, str], fields: list[str], position: int) -> tuple[Device, GpuReading]:
    errors: dict[str, dict[str, str]] = {}

    def number(name: str, key: str, scale: float = 1.0) -> float | None:
        value, err = _smi_value(row.get(name, ""))
        if err:
            errors[key] = {"name": err, "message": f"nvidia-smi {name}: {row.get(name, '')}"}
        return None if err or value is None else round(value * scale)

    index_value, _ = _smi_value(row.get("index", "0"))
    index = int(index_value) if index_value is not None else position
    limit = number("enforced.power.limit" if "enforced.power.limit" in row else "power.limit", "power_limit_mw", 1000)
    static: Device = {"index": index, "name": row.get("name"), "power_limit_mw": limit,
                      "max_clock_sm_mhz": number("clocks.max.sm", "max_clock_sm_mhz"), "errors": dict(errors)}
    errors.clear()
    gpu: GpuReading = {"index": index, "temperature_c": number("temperature.gpu", "temperature_c"),
                       "power_usage_mw": number("power.draw", "power_usage_mw", 1000),
                       "clock_sm_mhz": number("clocks.sm", "clock_sm_mhz"), "clock_event_reasons": None}
    if reason_field := next((f for f in fields if f.endswith("reasons.active")), None):
        raw = row.get(reason_field, "")
        if (mask := thermal.parse_mask(raw)) is None:
            errors["clock_event_reasons"] = {"name": _smi_value(raw)[1] or "Unparseable", "message": raw}
        gpu["clock_event_reasons"] = mask
    if errors:
        gpu["errors"] = errors
    return static, gpu


def _fmt(value: float | None, unit: str = "") -> str:
    if value is None:
        return "[N/A]"
    text = f"{value:.0f}" if abs(value) >= 100 or float(value).is_integer() else f"{value:.1f}"
    return f"{text} {unit}".rstrip() if unit else text


def _span(lo: float | None, hi: float | None, unit: str) -> str:
    if lo is None or hi is None:
        return "[N/A]"
    return _fmt(lo, unit) if _fmt(lo) == _fmt(hi) else f"{_fmt(lo)}-{_fmt(hi, unit)}"


def _rnd(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def _watts(mw: object) -> float | None:
    return None if (value := thermal.number(mw)) is None else value / 1000.0


def _range(all_s: Sequence[GpuSeries], stat: str) -> tuple[float | None, float | None]:
    lows = [v for s in all_s if (v := getattr(s, stat).min) is not None]
    highs = [v for s in all_s if (v := getattr(s, stat).max) is not None]
    return (min(lows) if lows else None, max(highs) if highs else None)


def evaluate(facts: Facts, params: Params) -> Result:
    """Decide G4 from a sample series and the clock-event counters (pure)."""
    early = _unreachable(facts)
    if early is not None:
        return _with_xids(early, facts, params)
    series = thermal.summarise(facts.samples)
    static = {int(d.get("index", 0)): d for d in facts.devices}
    out = Findings("G4")
    out.note(*facts.notes)
    per_gpu: list[Reading] = []
    ceilings: list[float] = []
    for index, s in series.items():
        per_gpu += _gpu_stage(s, static.get(index, {}), len(series) > 1, params, out, ceilings)
    counters = _counters_stage(facts, params, out)
    driver_lost = bool(out.problems or facts.broken)
    xid = _xid_stage(facts, params, out)  # first: a GSP/hardware fault may be what holds the clocks down
    low_power = _low_power_stage(facts, params, out)
    out.readings.extend(_readings(facts, series, static, ceilings) + counters + per_gpu + low_power + xid)
    # count and duration stay out of the line (they jitter; the readings carry them)
    how = "one snapshot" if facts.seconds <= 0 else f"sampled {facts.seconds:g} s"
    if driver_lost:
        if facts.broken:
            out.fail(facts.broken, DRIVER_FIX, "GPU/driver stopped answering", DRIVER_SHORT,
                     code="G4.driver-not-answering")
        result = out.result(Status.INFO)
        result.summary = "GPU/driver stopped answering: " + result.summary
    else:
        overview, headline = _overview(series, static, facts, how)
        result = out.result(Status.INFO, overview, headline=headline)
        if not out.warnings and not out.problems:
            return result
        result.summary += f" ({how}, {facts.source})"
    result.headline, result.short_fix = out.first_short()
    return result


def _unreachable(facts: Facts) -> Result | None:
    """FAIL for a driver that does not answer, SKIP for no GPU or a resource limit, else None."""

    def stop(status: Status, summary: str, headline: str, fix: str = "", short_fix: str = "", *, code: str) -> Result:
        return Result("G4", status, summary, fix, details=facts.notes, headline=headline, short_fix=short_fix,
                      codes=[code])

    if facts.missing and facts.missing.startswith(LIMITED):
        return stop(Status.SKIP, f"not checked: {facts.missing}; raise the limit (ulimit -u / -v) and run "
                    "again", "not checked (resource limit)", code="G4.resource-limit")
    if facts.hung:
        return stop(Status.FAIL, f"driver not answering: {facts.hung}", "GPU driver not answering",
                    DRIVER_FIX, DRIVER_SHORT, code="G4.driver-not-answering")
    if facts.missing:
        names = re.findall(r"\(([A-Za-z]+)\)", facts.missing)  # the error name, else the start
        return stop(Status.SKIP, f"no NVIDIA GPU: {facts.missing}",
                    f"no NVIDIA GPU ({names[0] if names else facts.missing[:40]})", code="G4.no-gpu")
    if not _answered(facts):
        why = facts.broken or "no GPU answered a sample"
        return stop(Status.FAIL, f"GPU/driver not answering: {why}", "GPU/driver not answering", DRIVER_FIX,
                    DRIVER_SHORT, code="G4.driver-not-answering")
    return None


def _with_xids(early: Result, facts: Facts, params: Params) -> Result:
    """The kernel log's Xids; with no GPU to sample, a GSP/hardware one (169 on GB10) is why: FAIL."""
    out = Findings("G4")
    _xid_stage(facts, params, out)
    early.details = [*early.details, *out.details]
    if early.status is Status.SKIP and out.problems and not (facts.missing or "").startswith(LIMITED):
        text, fix = out.problems[0]
        head, short = out.short.get(text, (text, fix))
        early.status, early.summary = Status.FAIL, f"{early.summary}; {text}"
        early.fix, early.headline, early.short_fix = fix, head, short
        early.codes = out.codes_of()
    return early


def xid_class(code: int, chosen: Mapping[str, str] | None = None) -> str:
    """hardware (FAIL), application, other (WARN) or ignore; ``--spark-xid-class`` (``chosen``) first."""
    given = (chosen or {}).get(str(code))
    if given:
        return given
    return "hardware" if code in XID_HARDWARE else "application" if code in XID_APPLICATION else "other"


def _xid_line(x: Mapping[str, Any]) -> str:
    """``Xid 120 at 1234.5 s (PCI:000f:01:00), pid 9111 python: GSP task exception: load access fault``."""
    when = f" at {x['t']:.1f} s" if isinstance(x.get("t"), (int, float)) else ""
    who = (f", pid {x['pid']}" if x.get("pid") is not None else "") + (f" {x['name']}" if x.get("name") else "")
    return f"Xid {x.get('code')}{when} ({x.get('pci')}){who}: {x.get('message') or '(no message)'}"


def _xid_stage(facts: Facts, params: Params, out: Findings) -> list[Reading]:
    """N7: Xid events since boot, latest first, counted per class; GSP/hardware FAIL, the rest WARN."""
    if facts.kernel_log_source is None:
        if facts.kernel_log_problem:
            out.note(f"Xid events since boot not read: {facts.kernel_log_problem}")
        return [Reading("kernel_log_source", "none")]
    chosen = params.option("xid_class")
    counts: dict[str, dict[int, int]] = {"hardware": {}, "application": {}, "other": {}, "ignore": {}}
    for code_text, n in facts.xid_counts.items():
        code = int(code_text) if str(code_text).isdigit() else -1
        counts[xid_class(code, chosen)][code] = n
    total = sum(sum(c.values()) for c in counts.values())
    cut = f"; {facts.kernel_log_cut}" if facts.kernel_log_cut else ""
    where = f"kernel log ({facts.kernel_log_source}, {facts.kernel_log_records} records since boot{cut})"
    if not total:
        out.note(f"{where}: no Xid")
    else:
        per = ", ".join(f"{k} {sum(c.values())}" for k, c in counts.items() if c)
        out.note(f"{where}: {total} Xid events ({per}); latest first:")
        out.note(*(_xid_line(x) for x in facts.xids[:XID_SHOWN]))
        if total > XID_SHOWN:
            out.note(f"and {total - XID_SHOWN} earlier Xid events")
    for klass in ("hardware", "application", "other"):
        if counts[klass]:
            _xid_finding(klass, counts[klass], facts, chosen, out)
    return [Reading("kernel_log_source", facts.kernel_log_source), Reading("xid_events", total),
            *(Reading(f"xid_{k}", sum(c.values())) for k, c in counts.items()),
            Reading("xid_latest", _xid_line(facts.xids[0]) if facts.xids else None)]


def _xid_finding(klass: str, codes: Mapping[int, int], facts: Facts, chosen: Mapping[str, str], out: Findings) -> None:
    latest = next((x for x in facts.xids if xid_class(int(x.get("code") or -1), chosen) == klass), None)
    named = ", ".join(f"Xid {c} x{n}" for c, n in sorted(codes.items(), key=lambda p: -p[1]))
    tail = f"; latest: {_xid_line(latest)}" if latest else ""
    first = int(latest["code"]) if latest else next(iter(codes))
    if klass == "hardware":
        _, fix, short = next(f for f in XID_FIXES if f[0] is None or f[0] & set(codes))
        kind = "GSP" if set(codes) & {119, 120} else "hardware/GSP"
        out.fail(f"GPU faults in the kernel log since boot ({kind}): {named}{tail}", fix,
                 f"Xid {first} since boot ({kind} fault)", short, code="G4.xid-hardware")
    elif klass == "application":
        who = "the process not named in the line"
        if latest and (latest.get("pid") is not None or latest.get("name")):
            who = f"pid {latest.get('pid')} {latest.get('name') or ''}".strip()
        out.warn(f"a GPU kernel faulted since boot ({who}): {named}{tail}", XID_APP_FIX,
                 f"Xid {first} since boot ({who})", "update/patch the faulting kernel path",
                 code="G4.xid-application")
    else:
        out.warn(f"Xid events in the kernel log since boot: {named}{tail}", XID_OTHER_FIX,
                 f"Xid {first} since boot", "look up the Xid in NVIDIA's catalogue", code="G4.xid-other")


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _low_power_stage(facts: Facts, params: Params, out: Findings) -> list[Reading]:
    """N5: under load, SM clock and power both low with no heat or brake reason: a stuck low-power
    state. Each GPU is judged on its own load; readings only for the first GPU (the run's row)."""
    names = ("g4_low_power_util_pct", "g4_low_power_clock_mhz", "g4_low_power_w")
    gate, clock_max, watts_max = (params.threshold(n) for n in names)
    if clock_max <= 0 or watts_max <= 0:
        return []
    by_gpu: dict[int, list[GpuReading]] = {}
    for sample in facts.samples:
        for gpu in sample.get("gpus") or []:
            if isinstance(gpu, Mapping):
                by_gpu.setdefault(int(gpu.get("index", 0)), []).append(gpu)
    readings: list[Reading] = []
    for index, gpus in sorted(by_gpu.items()):
        label = f"GPU {index}" if len(by_gpu) > 1 else "GPU"
        readings += _low_power_gpu(label, gpus, index == min(by_gpu), (gate, clock_max, watts_max), facts.source, out)
    return readings


def _loaded_medians(loaded: Sequence[GpuReading]) -> tuple[float, float, bool] | None:
    """``(SM clock median MHz, power median W, a throttle reason seen)``; None: clock or power not read."""
    clocks = [float(c) for g in loaded if isinstance(c := g.get("clock_sm_mhz"), (int, float))]
    watts = [float(w) / 1000.0 for g in loaded if isinstance(w := g.get("power_usage_mw"), (int, float))]
    masks = [m for g in loaded if (m := thermal.parse_mask(g.get("clock_event_reasons"))) is not None]
    if not clocks or not watts:
        return None
    return _median(clocks), _median(watts), any(m & thermal.WARN_MASK for m in masks)


def _low_power_gpu(
    label: str, gpus: Sequence[GpuReading], first: bool, gates: tuple[float, float, float], source: str, out: Findings
) -> list[Reading]:
    gate, clock_max, watts_max = gates
    utils = [u for g in gpus if (u := thermal.number(g.get("utilization_gpu"))) is not None]
    loaded = [g for g in gpus if isinstance(u := g.get("utilization_gpu"), (int, float)) and u >= gate]
    readings: list[Reading] = []
    if first:
        readings += [Reading("utilization_max", max(utils) if utils else None, "%"), Reading("loaded_samples", len(loaded))]
    if not utils:
        out.note(f"{label}: utilisation not read ({source}): a stuck low-power state was not judged")
        return readings
    if not loaded:
        out.note(f"{label}: not under load (utilisation max {max(utils):g} % < g4_low_power_util_pct = {gate:g} %): "
                 "cannot tell a stuck low-power state from an idle GPU")
        return readings
    medians = _loaded_medians(loaded)
    if medians is None:
        out.note(f"{label}: under load but the SM clock or power was not read: a stuck low-power state was not judged")
        return readings
    clock, power, throttled = medians
    seen = (f"{label} under load ({len(loaded)} samples at >= {gate:g} % utilisation): SM clock median "
            f"{_fmt(clock, 'MHz')}, power median {_fmt(power, 'W')}")
    if first:
        readings += [Reading("loaded_sm_clock_median", _rnd(clock, 0), "MHz"), Reading("loaded_power_median", _rnd(power), "W")]
    if clock < clock_max and power < watts_max and not throttled:
        out.fail(f"{seen}, both under the low-power gate ({clock_max:g} MHz, {watts_max:g} W) with no "
                 "throttle reason: a stuck low-power state", LOW_POWER_FIX,
                 f"stuck low-power state: {_fmt(clock, 'MHz')}, {_fmt(power, 'W')} at {max(utils):g} % load",
                 LOW_POWER_SHORT, code="G4.low-power-stuck")
    else:
        out.note(f"{seen}: no stuck low-power state" + (" (a throttle reason explains the clock)" if throttled else ""))
    return readings


def _gpu_stage(s: GpuSeries, dev: Device, many: bool, params: Params, out: Findings, ceilings: list[float]) -> list[Reading]:
    """One GPU: lost or errors only (FAIL), reasons, heat, flat power (WARN); readings if several GPUs."""
    label = f"GPU {s.index}" + (f" ({dev['name']})" if dev.get("name") else "")
    if s.lost:
        out.fail(f"{label} was lost mid-sample (GpuIsLost at t={s.lost_at:.1f} s, after {s.samples} "
                 "readings)", DRIVER_FIX, f"GPU {s.index} lost mid-sample (t={s.lost_at:.1f} s)",
                 DRIVER_SHORT, code="G4.gpu-lost")
        return []
    real = {k: v for k, v in sorted(s.errors.items()) if v != "NotSupported"}
    if s.temperature.n == 0 and s.power_w.n == 0 and real:
        errs = ", ".join(f"{k}: {v}" for k, v in real.items())
        out.fail(f"{label} answered errors only ({errs})", DRIVER_FIX, f"GPU {s.index} answered errors only", DRIVER_SHORT,
                 code="G4.gpu-errors")
        return []
    out.note(*(f"{label}: {key} answered {name}" for key, name in real.items()))
    _reasons_stage(s, label, out)
    _heat_stage(s, label, params, out)
    # 'well under the limit': g4_flat_power_w (GB10: the seed's 100 W; its limit reads N/A), else a share
    limit_w, watts = _watts(dev.get("power_limit_mw")), params.threshold("g4_flat_power_w")
    share = limit_w * params.threshold("g4_flat_power_fraction") if limit_w else None
    ceiling = watts if watts > 0 else share
    if ceiling:
        ceilings.append(ceiling)
    _flat_stage(s, label, limit_w, ceiling, params, out)
    if s.busy is False and s.temperature.n > 1:
        out.note(f"{label}: idle in most samples; the flat-power rule needs load")
    if not many:
        return []
    i = s.index
    return [Reading(f"gpu{i}_temperature_max", _rnd(s.temperature.max), "C"),
            Reading(f"gpu{i}_power_max", _rnd(s.power_w.max), "W"),
            Reading(f"gpu{i}_sm_clock_min", _rnd(s.clock_sm.min, 0), "MHz"),
            Reading(f"gpu{i}_reasons", ",".join(s.reasons) or "none")]


def _reasons_stage(s: GpuSeries, label: str, out: Findings) -> None:
    throttle = s.warn_reasons
    if not throttle:
        return
    names = ", ".join(f"{n} in {c}/{s.reason_samples} samples" for n, c in throttle.items())
    first = next(iter(throttle))
    fixes: list[tuple[str, str]] = []
    if {"SwThermalSlowdown", "HwThermalSlowdown"} & set(throttle):
        fixes.append((COOL_FIX, COOL_SHORT))
    if "HwPowerBrakeSlowdown" in throttle:
        fixes.append((BRAKE_FIX, BRAKE_SHORT))
    if set(throttle) == {"HwSlowdown"}:
        fixes.append(("HW slowdown is heat or the power supply: check cooling, the supply and dmesg",
                      "check cooling, the power supply and dmesg"))
    tmax = _fmt(s.temperature.max, "C")
    out.warn(f"{label}: {names} (max {tmax})", "; ".join(f for f, _ in fixes),
             f"{first} in {throttle[first]}/{s.reason_samples} samples, max {tmax}",
             fixes[0][1] if fixes else "", code="G4.throttle-reasons")


def _heat_stage(s: GpuSeries, label: str, params: Params, out: Findings) -> None:
    """At the throttle trip (GB10: 86-87 C, thermal_2.txt), or almost no T.Limit margin left."""
    hot, margin = params.threshold("g4_hot_c"), params.threshold("g4_tlimit_margin_c")
    tmax, tlim = s.temperature.max, s.tlimit.min
    if hot > 0 and tmax is not None and tmax >= hot:
        # g4_hot_c is a margin below the trip (GB10's default 85 C), not the trip
        gb10 = " (GB10's throttle trip is 86-87 C)" if params.gb10 else ""
        trip = "; GB10 trips at 86-87 C" if params.gb10 else ""
        text = f"{label} reached {_fmt(tmax, 'C')}, at or above g4_hot_c = {hot:g} C{gb10}"
        out.warn(text, COOL_FIX, f"GPU {s.index} at {_fmt(tmax, 'C')} (warns from {hot:g} C{trip})", COOL_SHORT,
                 code="G4.temperature-high")
    elif margin > 0 and tlim is not None and tlim <= margin:
        out.warn(f"{label}: T.Limit margin {_fmt(tlim, 'C')} (<= g4_tlimit_margin_c = {margin:g} C) at "
                 f"{_fmt(tmax, 'C')}: about to slow down for heat", COOL_FIX,
                 f"GPU {s.index} {_fmt(tlim, 'C')} from its slowdown limit", COOL_SHORT,
                 code="G4.tlimit-margin")


def _flat_stage(s: GpuSeries, label: str, limit_w: float | None, ceiling: float | None, params: Params, out: Findings) -> None:
    """The seed's pattern: power flat well under the limit while the chip heats."""
    idle_w = params.threshold("g4_idle_power_w")
    flat = thermal.flat_power_climb(s, ceiling_w=ceiling, rise_c=params.threshold("g4_temp_rise_c"),
                                    band_fraction=params.threshold("g4_flat_power_band_fraction"))
    if flat is not None and idle_w > 0 and flat.power_max <= idle_w:
        out.note(f"{label}: the temperature rose {flat.rise:.1f} C with the power at idle (<= "
                 f"g4_idle_power_w = {idle_w:g} W): the box warmed, not this GPU's load (the flat-power rule "
                 "needs load)")
    elif flat is not None:
        watts = _span(flat.power_min, flat.power_max, "W")
        out.warn(
            f"{label}: power flat at {watts} (under the {_fmt(ceiling, 'W')} ceiling; limit {_fmt(limit_w, 'W')}) "
            f"while the temperature rose {flat.rise:.1f} C ({_fmt(flat.temp_start)}->{_fmt(flat.temp_end, 'C')}) "
            f"in {flat.seconds:.1f} s",
            "power held down while the chip heats is the seed's throttling pattern: check cooling and "
            "the power adapter, then re-sample under the real load (--spark-thermal-seconds 900, or the "
            "spark_sampler fixture in a training smoke test)",
            f"power flat at {watts} while temperature rose {flat.rise:.1f} C",
            "check cooling and power adapter; re-sample under load", code="G4.flat-power",
        )
    elif ceiling is None and s.power_w.n:
        out.note(f"{label}: no enforced power limit and g4_flat_power_w = 0, so the flat-power rule was not applied")


def _counters_stage(facts: Facts, params: Params, out: Findings) -> list[Reading]:
    """Each GPU's counters judged and read out; SW power capping is not judged."""
    before = {int(c.get("index", 0)): c for c in facts.counters_before}
    after = {int(c.get("index", 0)): c for c in facts.counters_after if c.get("us")}
    if not after:
        errs = sorted({str(e.get("name") if isinstance(e, Mapping) else e)
                       for c in facts.counters_before for e in (c.get("errors") or {}).values()})
        if facts.counters_source or errs:
            out.note(f"clock-event counters [N/A] ({', '.join(errs) or 'not read after the sample'})")
        return []
    readings: list[Reading] = []
    for index, a in sorted(after.items()):
        us = a.get("us") or {}
        delta = thermal.counter_deltas((before.get(index) or CounterSet()).get("us"), us)
        _counter_findings(f"GPU {index}" if len(after) > 1 else "GPU", us, delta, params, out)
        prefix = f"gpu{index}_" if len(after) > 1 else ""
        for name, _, _ in thermal.COUNTERS:
            for when, value in (("since_boot", us.get(name)), ("in_sample", delta.get(name))):
                seconds = None if value is None else round(value / 1e6, 3)
                readings.append(Reading(f"{prefix}{name}_{when}", seconds, "s"))
    return readings


def _counter_findings(where: str, us: Mapping[str, int], delta: Mapping[str, int | None], params: Params, out: Findings) -> None:
    """WARN when thermal or brake slowdown grew in the sample, or since boot beyond the threshold."""
    growth_s, boot_s = params.threshold("g4_slowdown_growth_s"), params.threshold("g4_slowdown_since_boot_s")
    grew = {n: d for n, d in delta.items() if n in thermal.SLOWDOWN_COUNTERS and d and d / 1e6 > growth_s}
    if grew:
        words = ", ".join(f"{thermal.WORDS[n]} +{thermal.seconds_text(d)}" for n, d in grew.items())
        brake = set(grew) == {"hw_power_brake_slowdown"}
        out.warn(f"{where} clocks cut during the sample: {words} (clock-event counters)",
                 BRAKE_FIX if brake else COOL_FIX, f"{words} during the sample",
                 BRAKE_SHORT if brake else COOL_SHORT, code="G4.clocks-cut")
    elif sum(us.get(n) or 0 for n in thermal.SLOWDOWN_COUNTERS) / 1e6 > boot_s:
        words = ", ".join(f"{thermal.WORDS[n]} {thermal.seconds_text(us.get(n))}"
                          for n in thermal.SLOWDOWN_COUNTERS if us.get(n))
        out.warn(f"{where} clocks were cut since the driver loaded: {words} (> g4_slowdown_since_boot_s = "
                 f"{boot_s:g} s; none during the sample)", COOL_FIX + "; then re-run the 15-minute check "
                 "(--spark-thermal-seconds 900)", f"{words} since boot (> {boot_s:g} s)",
                 "check cooling; re-run with --spark-thermal-seconds 900", code="G4.clocks-cut-since-boot")


def _counter_figures(facts: Facts) -> tuple[dict[str, int], list[tuple[str, str]], str | None] | None:
    """First GPU: counters, ``[(name, "3.0 h")]`` since boot (thermal summed), slowdown in the sample."""
    a = next((c for c in facts.counters_after if c.get("us")), None)
    if a is None:
        return None
    us = a.get("us") or {}
    b = next((c for c in facts.counters_before if c.get("index") == a.get("index")), CounterSet())
    thermal_us = [v for n in ("sw_thermal_slowdown", "hw_thermal_slowdown") if (v := us.get(n)) is not None]
    parts = [("power cap", thermal.seconds_text(us.get("sw_power_cap"))),
             ("thermal", thermal.seconds_text(sum(thermal_us)) if thermal_us else "[N/A]"),
             ("power brake", thermal.seconds_text(us.get("hw_power_brake_slowdown")))]
    grown = [d for n, d in thermal.counter_deltas(b.get("us"), us).items()
             if n in thermal.SLOWDOWN_COUNTERS and d is not None]
    return us, parts, thermal.seconds_text(sum(grown)) if grown else None


def _counters_text(facts: Facts) -> str:
    """``clock-event counters since boot: power cap 14.0 h, …; slowdown +0 s in the sample``."""
    if (figures := _counter_figures(facts)) is None:
        return ""
    _, parts, during = figures
    grown = f"; slowdown +{during} in the sample" if during is not None else ""
    return "clock-event counters since boot: " + ", ".join(f"{n} {v}" for n, v in parts) + grown


def _counters_short(facts: Facts, room: int) -> str:
    """The counters in ``room`` characters where it can: none, else every figure, else those not 0."""
    if (figures := _counter_figures(facts)) is None:
        return ""
    us, parts, during = figures
    if all(us.get(n) == 0 for n in ("sw_power_cap", *thermal.SLOWDOWN_COUNTERS)):
        return "no clock events since boot"

    def text(shown: Sequence[tuple[str, str]], grown: str | None) -> str:
        named = ", ".join(f"{n.replace('power brake', 'brake')} {v}" for n, v in shown)
        return f"since boot: {named}" + (f" (+{grown} in sample)" if grown is not None else "")

    whole = text(parts, during)
    counted = [(n, v) for n, v in parts if v != "0 s"]
    if len(whole) <= room or not counted:
        return whole
    return text(counted, during if during != "0 s" else None)


def _reasons_text(s: GpuSeries) -> str:
    if not s.reason_samples:
        return "clock-event reasons [N/A]"
    if not s.reasons:
        return "no clock-event reason"
    named = {"GpuIdle": "GpuIdle (idle)", "SwPowerCap": "SwPowerCap in {c}/{n} (at its power limit)"}
    return "reasons: " + ", ".join(named.get(k, k + " in {c}/{n}").format(c=c, n=s.reason_samples)
                                   for k, c in s.reasons.items())


def _tlimit_margin(facts: Facts, all_s: Sequence[GpuSeries]) -> float | None:
    """The smallest "GPU T.Limit Temp" seen: NVML's margin in the samples, or ``nvidia-smi -q``'s."""
    values = [v for s in all_s if (v := s.tlimit.min) is not None]
    values += [v for t in facts.temps_q if isinstance(v := t.get("tlimit_c"), (int, float))]
    return min(values) if values else None


def _overview(series: Mapping[int, GpuSeries], static: Mapping[int, Device], facts: Facts, how: str) -> tuple[str, str]:
    """(the line, its headline): ranges, limit, clock, T.Limit margin, reasons seen, counters."""
    all_s = list(series.values())
    temps, watts = _span(*_range(all_s, "temperature"), "C"), _span(*_range(all_s, "power_w"), "W")
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
        who, mean = f"{len(all_s)} GPUs" + (f" ({', '.join(names)})" if names else ""), ""
        seen = sorted({name for s in all_s for name in s.reasons})
        reasons = ("reasons seen: " + ", ".join(seen)) if seen else "no clock-event reason"
    margin = _tlimit_margin(facts, all_s)
    margin_text = f", T.Limit margin {_fmt(margin, 'C')}" if margin is not None else ""
    counters = _counters_text(facts)
    line = f"{who}: {temps}{mean}{margin_text}, {watts} (limit {limit}), SM {clock}; {reasons}; " + (
        f"{counters}; " if counters else ""
    ) + f"{how} ({facts.source})"
    short_who = names[0].removeprefix("NVIDIA ") if len(names) == 1 else who
    head = f"{short_who} {temps}{margin_text}, {watts}, SM {clock}; "
    return line, head + (_counters_short(facts, SHORT_WIDTH - len(f"G4 INFO: {head}")) or reasons)


def _readings(facts: Facts, series: Mapping[int, GpuSeries], static: Mapping[int, Device], ceilings: list[float]) -> list[Reading]:
    all_s = list(series.values())

    def pick(fn: Callable[[list[float]], float], values: Sequence[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return _rnd(fn(known)) if known else None

    def spread(name: str, stat: str, unit: str) -> list[Reading]:  # min, max, mean over every GPU
        (lo, hi), n = _range(all_s, stat), sum(getattr(s, stat).n for s in all_s)
        mean = _rnd(sum(getattr(s, stat).total for s in all_s) / n) if n else None
        return [Reading(f"{name}_min", _rnd(lo), unit), Reading(f"{name}_max", _rnd(hi), unit),
                Reading(f"{name}_mean", mean, unit)]

    rises = [w[1] - w[0] for s in all_s if (w := thermal.window_means(s.points, 1))]
    rated = [r for i in series if isinstance(r := static.get(i, {}).get("max_clock_sm_mhz"), (int, float))]
    reasons = sorted({name for s in all_s for name in s.reasons})
    return [
        *spread("temperature", "temperature", "C"), Reading("temperature_rise", pick(max, rises), "C"),
        *spread("power", "power_w", "W"),
        Reading("power_limit", pick(max, [_watts(static.get(i, {}).get("power_limit_mw")) for i in series]), "W"),
        Reading("flat_power_ceiling", pick(max, ceilings), "W"),
        *spread("sm_clock", "clock_sm", "MHz"),
        Reading("tlimit_margin_min", _rnd(_tlimit_margin(facts, all_s)), "C"),
        Reading("sm_clock_rated", pick(max, rated), "MHz"),
        Reading("clock_event_reasons", ",".join(reasons) or "none"),
        Reading("samples", max((s.samples for s in all_s), default=0)),
        Reading("sample_seconds", _rnd(facts.duration_s, 2), "s"),
        Reading("gpus", len(all_s)),
        Reading("source", facts.source),
    ]
