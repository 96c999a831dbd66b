"""What the watcher decides from its samples: pure, standard library plus the checks' own rules.

A sample (:class:`.sample.WatchSample`) is what one tick read: the GPUs (NVML child), their
processes, MemAvailable, the free 32 MiB blocks, and the kernel-log lines new since the last tick.
A :class:`Watcher` turns each change of a condition into an :class:`.events.Event`
(:mod:`.conditions`); the GPU's rules are :mod:`.gpu_rules`, the processes', memory's and the
kernel log's are here. Each event kind owns its code, check and fix in :data:`.events.CODES`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pytest_dgx_spark.checks.g03_uma_headroom.pressure import contiguous, normal_counts
from pytest_dgx_spark.checks.g04_thermal.check import XID_FIXES, xid_class
from pytest_dgx_spark.probes.gpu_programs import classify
from pytest_dgx_spark.redact import reduce_argv
from pytest_dgx_spark.watch.conditions import MAX_EVENTS, Params
from pytest_dgx_spark.watch.events import CODES, Code, Event, duration, elapsed, line
from pytest_dgx_spark.watch.gpu_rules import CLEAR_AFTER, FLAT_WINDOW, LOW_CLOCK_SAMPLES, REASONS, GpuRules
from pytest_dgx_spark.watch.sample import WatchSample

__all__ = ["CLEAR_AFTER", "CODES", "FLAT_WINDOW", "LOW_CLOCK_SAMPLES", "MAX_EVENTS", "REASONS", "Code",
           "Event", "Params", "WatchSample", "Watcher", "duration", "elapsed", "free_blocks", "line"]

#: MemAvailable below this fraction of --workload-gb (or g3_margin_gb when larger) warns
MEM_MARGIN_FRACTION = 0.1
GIB_KB = 1 << 20


class Watcher(GpuRules):
    """The conditions active now, and the events each new sample brings."""

    def __init__(self, params: Params) -> None:
        super().__init__(params)
        self._cmd: dict[int, str] = {}
        self._job: set[int] = set()

    def step(self, s: WatchSample) -> list[Event]:
        """The events ``s`` brings (also kept in :attr:`events`)."""
        t = s.t
        out: list[Event] = []
        self._job = set(s.job_pids)
        self._gpus(out, t, s)
        if s.procs is not None:
            self._procs(out, t, s)
        self._memory(out, t, s)
        for x in s.xids:
            self._xid(out, t, x)
        for o in s.ooms:
            self._oom(out, t, o)
        self._keep(out)
        return out

    def _oom(self, out: list[Event], t: float, o: Mapping[str, Any]) -> None:
        job = o.get("pid") in self._job
        rss = f", {o['anon_rss_kb'] / GIB_KB:.1f} GiB resident" if o.get("anon_rss_kb") else ""
        whose = ", the job's own" if job else ""
        text = f"the kernel OOM-killed pid {o.get('pid')} ({o.get('name')}){whose}{rss}"
        self._once(out, t, "G3.oom-kill", text, f"oom:{o.get('pid')}", "FAIL" if job else None)

    def _procs(self, out: list[Event], t: float, s: WatchSample) -> None:
        """G6: each GPU process that is not the job's, and each over the cap its own flags set; both
        clear when the process is gone."""
        seen: set[int] = set()
        for p in s.procs or []:
            pid = p.get("pid")
            if isinstance(pid, int):
                seen.add(pid)
                self._proc(out, t, s, pid, p)
        for key in [k for k in self.active if k.startswith(("G6.new-process@", "G6.over-cap@"))]:
            pid = int(key.rsplit("@", 1)[1])
            if pid not in seen:
                code = key.split("@", 1)[0]
                self._set(out, t, key, code, False, clear_text=f"GPU process pid {pid} gone")

    def _proc(self, out: list[Event], t: float, s: WatchSample, pid: int, p: Mapping[str, Any]) -> None:
        if p.get("cmd"):
            self._cmd[pid] = str(p["cmd"])
        cmd = self._cmd.get(pid, "?")
        shown = " ".join(reduce_argv(cmd.split()))[:120] or "?"  # program and flags, as a capture keeps them
        used = p.get("used_bytes")
        mem = f"{used / (1 << 30):.1f} GiB" if isinstance(used, int) else "memory [N/A]"
        kind = classify(cmd.split()) if cmd != "?" else None
        cap = kind.cap if kind is not None else None
        if pid not in self._job:
            if pid in (s.unseen_pids or []):
                shown += " (no such pid in this PID namespace: NVML may name host pids in a container)"
            capped = f", cap {cap:g}" if cap is not None else ", no cap"
            text = f"new GPU process pid {pid} on GPU {p.get('gpu')} ({mem}{capped}): {shown}"
            self._set(out, t, f"G6.new-process@{pid}", "G6.new-process", True, text)
        total_kb = float(s.mem_total_kb or 0)
        over = cap is not None and isinstance(used, int) and total_kb > 0 and used > cap * total_kb * 1024
        text = f"pid {pid} uses {mem}, over its cap {cap} of {total_kb / GIB_KB:.0f} GiB: {shown}"
        self._set(out, t, f"G6.over-cap@{pid}", "G6.over-cap", over, text if over else "")

    def _memory(self, out: list[Event], t: float, s: WatchSample) -> None:
        p = self.p
        avail = s.mem_available_kb
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
        blocks = s.free_blocks
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


def free_blocks(buddyinfo: Sequence[Mapping[str, Any]], page_kib: int, block_mib: float) -> int | None:
    """Free ``block_mib`` blocks in zone Normal (as G3 counts them); None without a zone Normal."""
    counts = normal_counts(list(buddyinfo))
    return contiguous(counts, page_kib, block_mib)[0] if counts else None
