"""What the watcher decides from its samples: pure, standard library plus the checks' own rules.

A sample (:class:`WatchSample`) is what one tick read: the GPUs (NVML child), their processes,
MemAvailable, the free 32 MiB blocks, and the kernel-log lines new since the last tick. A
:class:`Watcher` keeps which conditions are active and turns each change into an :class:`Event`:
a condition that starts (``start``), one that ends (``clear``, with how long it lasted) and an
instant (``once``: an Xid, an OOM kill). A condition that stays true is one event, not one per
sample. Each event kind owns its code, check and fix here (:data:`CODES`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

from pytest_dgx_spark import thermal
from pytest_dgx_spark.checks.g03_uma_headroom.pressure import contiguous, normal_counts
from pytest_dgx_spark.checks.g04_thermal.check import XID_APP_FIX, XID_FIXES, XID_OTHER_FIX, xid_class
from pytest_dgx_spark.probes.gpu_programs import classify
from pytest_dgx_spark.redact import reduce_argv

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
#: MemAvailable below this fraction of --workload-gb (or g3_margin_gb when larger) warns
MEM_MARGIN_FRACTION = 0.1
GIB_KB = 1 << 20
#: events a watcher keeps (the latest; a reason that flaps for a week stays bounded), counted all
MAX_EVENTS = 5000


@dataclass(frozen=True)
class Code:
    """One event kind: its check, default status, and fix."""

    check: str
    status: str
    fix: str


LOW_POWER_FIX = (
    "a stuck low-power (USB-C PD) state: unplug the power brick from the wall and from the Spark, "
    "wait 60 s, plug it back in; if it persists, try another 240 W supply, then RMA"
)
CODES: dict[str, Code] = {
    "G4.clock-event": Code(
        "G4",
        "WARN",
        "heat or the power supply is cutting the clocks: check airflow and the "
        "power brick (240 W USB-C PD); SwPowerCap alone is the GPU at its power limit",
    ),
    "G4.clocks-low": Code("G4", "WARN", LOW_POWER_FIX),
    "G4.flat-power": Code(
        "G4",
        "WARN",
        "the seed's throttling pattern: power held well under the limit while the "
        "temperature climbs; check airflow and the power brick, and the clock-event counters "
        "(nvidia-smi -q -d PERFORMANCE)",
    ),
    "G4.no-answer": Code(
        "G4",
        "WARN",
        "the driver stopped answering NVML: if it stays so, the GPU may be lost (look for an Xid; reboot)",
    ),
    "G4.xid-hardware": Code("G4", "FAIL", XID_FIXES[-1][1]),
    "G4.xid-application": Code("G4", "WARN", XID_APP_FIX),
    "G4.xid-other": Code("G4", "WARN", XID_OTHER_FIX),
    "G6.new-process": Code(
        "G6",
        "WARN",
        "another process shares the GPU and its memory: stop it, or cap both "
        "(vLLM --gpu-memory-utilization, PYTORCH_CUDA_ALLOC_CONF)",
    ),
    "G6.over-cap": Code(
        "G6",
        "WARN",
        "the process uses more GPU memory than its flag caps it at: lower its "
        "batch/KV cache or raise the cap knowingly",
    ),
    "G6.job-stalled": Code(
        "G6",
        "WARN",
        "the job's GPU went idle while it runs: a hung collective or dataloader "
        "(py-spy dump --pid PID; NCCL_DEBUG=INFO)",
    ),
    "G3.memavailable-low": Code(
        "G3",
        "WARN",
        "free memory is running out: stop other jobs or lower the workload before the OOM killer picks one",
    ),
    "G3.fragmented": Code(
        "G3",
        "WARN",
        "too few free 32 MiB blocks for large allocations: "
        "sudo sh -c 'sync; echo 3 > /proc/sys/vm/drop_caches; echo 1 > /proc/sys/vm/compact_memory'",
    ),
    "G3.oom-kill": Code(
        "G3",
        "WARN",
        "the kernel killed a process for memory: lower the workload or stop "
        "other jobs; --workload-gb makes the watcher warn before it",
    ),
}


class WatchSample(TypedDict, total=False):
    """One tick's readings (also the timeline's ``sample`` record)."""

    t: float  # seconds since the watch began
    gpus: list[thermal.RawGpuReading] | None  # None: NVML gave no new sample (``gpu`` says why)
    gpu: str  # "ok", or why there is no reading ("no answer for 12 s", "NVML unavailable: …")
    devices: list[dict[str, Any]]  # names and limits, from the first sample
    procs: list[dict[str, Any]] | None  # GPU processes: pid, gpu, type, used_bytes, cmd
    job_pids: list[int]  # the job and its descendants
    unseen_pids: list[int]  # GPU processes with no /proc entry here (another PID namespace: a container)
    job_running: bool
    mem_available_kb: int | None
    mem_total_kb: int | None
    free_blocks: int | None  # free g3_contig_block_mib blocks in zone Normal
    xids: list[dict[str, Any]]  # new since the last tick (kernel_log.Xid.to_dict())
    ooms: list[dict[str, Any]]  # new OOM kills: pid, name, anon_rss_kb
    problems: list[str]


@dataclass
class Event:
    """A condition's start or end, or an instant, as one stderr line and one timeline record."""

    t: float
    code: str
    state: str  # "start" | "clear" | "once"
    status: str
    text: str
    fix: str
    key: str
    wall: float = field(default_factory=time.time)
    since: float | None = None  # a clear: when its condition started

    @property
    def check(self) -> str:
        return self.code.split(".", 1)[0]

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "event",
            "t": round(self.t, 3),
            "wall": round(self.wall, 3),
            "code": self.code,
            "check": self.check,
            "state": self.state,
            "status": self.status,
            "text": self.text,
            "fix": self.fix,
            "key": self.key,
            "since": self.since,
        }


def elapsed(seconds: float) -> str:
    """``+01:02:03``."""
    s = max(0, int(seconds))
    return f"+{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}"


def duration(seconds: float) -> str:
    """``6 h 12 m``, ``3 m 5 s``, ``0.4 s``."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    s = int(seconds)
    if s >= 3600:
        return f"{s // 3600} h {s // 60 % 60} m"
    return f"{s // 60} m {s % 60} s" if s >= 60 else f"{s} s"


def line(e: Event) -> str:
    """The stderr line: ``+00:12:04 G4 WARN [G4.clock-event] … — fix: …``."""
    fix = f" — fix: {e.fix}" if e.fix and e.state != "clear" else ""
    what = {"start": "", "clear": "cleared: ", "once": ""}[e.state]
    status = "OK" if e.state == "clear" else e.status
    return f"{elapsed(e.t)} {e.check} {status} [{e.code}] {what}{e.text}{fix}"


@dataclass
class _Active:
    since: float
    text: str
    data: dict[str, Any] = field(default_factory=dict)
    code: str = ""
    status: str = ""


@dataclass
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


class Watcher:
    """The conditions active now, and the events each new sample brings."""

    def __init__(self, params: Params) -> None:
        self.p = params
        self.active: dict[str, _Active] = {}
        self.events: list[Event] = []
        self.counts: dict[str, int] = {}  # code -> conditions started (or instants), over the whole watch
        self._last_gpu: dict[int, thermal.RawGpuReading] = {}  # the last reading without a given reason
        self._low_runs: dict[int, int] = {}
        self._window: dict[int, list[tuple[float, thermal.RawGpuReading]]] = {}
        self._busy_seen = False
        self._idle_since: float | None = None
        self._cmd: dict[int, str] = {}
        self._job: set[int] = set()

    # -- the machinery: a condition is a key that is active or not
    def _set(
        self,
        out: list[Event],
        t: float,
        key: str,
        code: str,
        on: bool,
        text: str = "",
        clear_text: str = "",
        status: str | None = None,
        **data: Any,
    ) -> None:
        was = self.active.get(key)
        c = CODES[code]
        if on and was is None:
            self.active[key] = _Active(t, text, data, code, status or c.status)
            out.append(Event(t, code, "start", status or c.status, text, c.fix, key))
        elif not on and was is not None:
            del self.active[key]
            lasted = f" after {duration(t - was.since)}"
            out.append(
                Event(t, code, "clear", "OK", (clear_text or was.text) + lasted, "", key, since=was.since)
            )

    def _once(
        self,
        out: list[Event],
        t: float,
        code: str,
        text: str,
        key: str,
        status: str | None = None,
        fix: str | None = None,
    ) -> None:
        c = CODES[code]
        out.append(Event(t, code, "once", status or c.status, text, fix if fix is not None else c.fix, key))

    def step(self, s: WatchSample) -> list[Event]:
        """The events ``s`` brings (also kept in :attr:`events`)."""
        t = float(s.get("t") or 0.0)
        out: list[Event] = []
        self._job = set(s.get("job_pids") or [])
        self._gpu_answer(out, t, s)
        for g in s.get("gpus") or []:
            self._clock_events(out, t, g)
            self._clocks_low(out, t, g)
            self._flat_power(out, t, g)
        if s.get("gpus") is not None:
            self._stall(out, t, s)
        if s.get("procs") is not None:
            self._procs(out, t, s)
        self._memory(out, t, s)
        for x in s.get("xids") or []:
            self._xid(out, t, x)
        for o in s.get("ooms") or []:
            job = o.get("pid") in self._job
            self._once(
                out,
                t,
                "G3.oom-kill",
                f"the kernel OOM-killed pid {o.get('pid')} ({o.get('name')})"
                + (", the job's own" if job else "")
                + (f", {o['anon_rss_kb'] / GIB_KB:.1f} GiB resident" if o.get("anon_rss_kb") else ""),
                f"oom:{o.get('pid')}",
                "FAIL" if job else None,
            )
        self._keep(out)
        return out

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

    # -- the rules
    def _gpu_answer(self, out: list[Event], t: float, s: WatchSample) -> None:
        answer = str(s.get("gpu") or "ok")
        silent = answer.startswith("no answer")
        self._set(out, t, "G4.no-answer", "G4.no-answer", silent, f"NVML: {answer}", "NVML answers again")

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
            u for g in s.get("gpus") or [] if (u := thermal.number(g.get("utilization_gpu"))) is not None
        ]
        if not utils or not s.get("job_running", True):
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

    def _procs(self, out: list[Event], t: float, s: WatchSample) -> None:
        seen: set[int] = set()
        total_kb = s.get("mem_total_kb")
        for p in s.get("procs") or []:
            pid = p.get("pid")
            if not isinstance(pid, int):
                continue
            seen.add(pid)
            if p.get("cmd"):
                self._cmd[pid] = str(p["cmd"])
            cmd = self._cmd.get(pid, "?")
            shown = (
                " ".join(reduce_argv(cmd.split()))[:120] or "?"
            )  # program and flags, as a capture keeps them
            used = p.get("used_bytes")
            mem = f"{used / (1 << 30):.1f} GiB" if isinstance(used, int) else "memory [N/A]"
            kind = classify(cmd.split()) if cmd != "?" else None
            cap = f", cap {kind.cap:g}" if kind is not None and kind.cap is not None else ", no cap"
            if pid not in self._job:
                if pid in (s.get("unseen_pids") or []):
                    shown += " (no such pid in this PID namespace: NVML may name host pids in a container)"
                self._set(
                    out,
                    t,
                    f"G6.new-process@{pid}",
                    "G6.new-process",
                    True,
                    f"new GPU process pid {pid} on GPU {p.get('gpu')} ({mem}{cap}): {shown}",
                )
            over = (
                kind is not None
                and kind.cap is not None
                and isinstance(used, int)
                and bool(total_kb)
                and used > kind.cap * float(total_kb or 0) * 1024
            )
            self._set(
                out,
                t,
                f"G6.over-cap@{pid}",
                "G6.over-cap",
                over,
                f"pid {pid} uses {mem}, over its cap {kind.cap if kind else ''} of "
                f"{float(total_kb or 0) / GIB_KB:.0f} GiB: {shown}"
                if over
                else "",
            )
        for key in [k for k in self.active if k.startswith(("G6.new-process@", "G6.over-cap@"))]:
            pid = int(key.rsplit("@", 1)[1])
            if pid not in seen:
                code = key.split("@", 1)[0]
                self._set(out, t, key, code, False, clear_text=f"GPU process pid {pid} gone")

    def _memory(self, out: list[Event], t: float, s: WatchSample) -> None:
        p = self.p
        avail = s.get("mem_available_kb")
        if p.workload_gb is not None and avail is not None:
            floor = max(p.margin_gb, p.workload_gb * MEM_MARGIN_FRACTION)
            low = avail / GIB_KB < floor
            self._set(
                out,
                t,
                "G3.memavailable-low",
                "G3.memavailable-low",
                low,
                f"MemAvailable {avail / GIB_KB:.1f} GiB, under the margin {floor:.1f} GiB "
                f"(10 % of --workload-gb {p.workload_gb:g})"
                if low
                else "",
                f"MemAvailable {avail / GIB_KB:.1f} GiB, above the margin again",
            )
        blocks = s.get("free_blocks")
        if p.blocks_min > 0 and blocks is not None:
            low = blocks < p.blocks_min
            self._set(
                out,
                t,
                "G3.fragmented",
                "G3.fragmented",
                low,
                f"{blocks} free {p.block_mib:g} MiB blocks in zone Normal (want >= {p.blocks_min:g})",
                f"{blocks} free {p.block_mib:g} MiB blocks again",
                status="FAIL" if blocks == 0 else None,
            )

    def _xid(self, out: list[Event], t: float, x: Mapping[str, Any]) -> None:
        code = x.get("code")
        klass = xid_class(int(code) if isinstance(code, int) else -1, self.p.xid_classes)
        if klass == "ignore":
            return
        who = f", pid {x['pid']}" if x.get("pid") is not None else ""
        who += f" {x['name']}" if x.get("name") else ""
        text = f"Xid {code} ({x.get('pci')}){who}: {x.get('message') or '(no message)'}"
        fix = None
        if klass == "hardware":
            fix = next(f[1] for f in XID_FIXES if f[0] is None or int(code or -1) in f[0])
        self._once(out, t, f"G4.xid-{klass}", f"new {klass} {text}", f"xid:{x.get('seq')}:{code}", fix=fix)


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


def free_blocks(buddyinfo: Sequence[Mapping[str, Any]], page_kib: int, block_mib: float) -> int | None:
    """Free ``block_mib`` blocks in zone Normal (as G3 counts them); None without a zone Normal."""
    counts = normal_counts(list(buddyinfo))
    return contiguous(counts, page_kib, block_mib)[0] if counts else None
