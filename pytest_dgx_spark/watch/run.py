"""``spark-preflight watch [options] -- COMMAND [ARGS…]`` (or ``--pid PID``): run the job, watch the box.

The job's stdout and stderr pass through byte for byte (a closed reader downstream closes the job's
pipe, so it meets SIGPIPE as it would have); a bounded head and tail are kept for the post-mortem
(:mod:`.output`). stdin is the job's own. SIGINT, SIGTERM and SIGHUP sent to the watcher are
forwarded (one a terminal sent to the whole process group reached the job already and is not sent
twice); the watcher exits with the job's code, 128+N for a signal. Every ``--interval`` seconds one
tick reads the box (:mod:`.probes`), :class:`.rules.Watcher` turns the readings into events (one line
each on stderr) and both go to the ``--timeline``. The command line is :mod:`.args`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_dgx_spark.probes.machine import ROOT_ENV
from pytest_dgx_spark.redact import reduce_argv
from pytest_dgx_spark.thresholds import defaults
from pytest_dgx_spark.watch import probes, rules
from pytest_dgx_spark.watch.args import EXIT_USAGE, Usage, parse
from pytest_dgx_spark.watch.output import Output, Timeline, pump, say
from pytest_dgx_spark.watch.probes import process_state

#: the output lines the timeline's end record keeps of a failed job (what diagnose reads there)
TIMELINE_TAIL_LINES = 200
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
SI_KERNEL = 0x80  # si_code of a signal the kernel sent (a terminal's ^C to the foreground group)


class Watch:
    """One watch: the job (a child or ``--pid``), the readers, the rules, the timeline."""

    def __init__(self, ns: argparse.Namespace, command: list[str]) -> None:
        self.ns, self.command = ns, command
        self.interval = float(ns.spark_interval or 5.0)
        self.root = Path(os.environ.get(ROOT_ENV) or "/")
        self.params = rules.Params(interval=self.interval, workload_gb=ns.spark_workload_gb,
                                   stall_s=float(ns.spark_stall_seconds or 600.0),
                                   xid_classes=ns.spark_xid_class or {})  # fmt: skip
        self.nvml = probes.NvmlStream(silent_after=max(3 * self.interval, 1.0))
        self._profile("generic")
        self.watcher = rules.Watcher(self.params)
        self.output = Output()
        self.proc: subprocess.Popen[bytes] | None = None
        self.pid: int = ns.spark_pid or 0
        self.t0 = time.monotonic()
        self.started_wall = time.time()
        self.kmsg = probes.KmsgTail(str(self.root / "dev/kmsg"))
        self.host: probes.HostReader | None = None
        self.timeline = Timeline(ns.spark_timeline)
        self._job_pids: dict[int, bool] = {}
        self._profiled = False
        self.samples = 0
        self.instants: dict[str, tuple[str, str]] = {}  # code -> (status, text) of the first instant event
        self._prometheus_failed = False

    def _profile(self, profile: str) -> None:
        t = defaults(profile)
        for pair in self.ns.spark_threshold or []:
            name, _, value = str(pair).partition("=")
            t[name.strip()] = float(value)  # checked by parse()
        p = self.params
        p.margin_gb, p.blocks_min, p.block_mib = (
            t["g3_margin_gb"],
            t["g3_contig_blocks_min"],
            t["g3_contig_block_mib"],
        )
        p.low_util_pct, p.low_clock_mhz, p.low_power_w = (
            t["g4_low_power_util_pct"],
            t["g4_low_power_clock_mhz"],
            t["g4_low_power_w"],
        )
        p.flat_band, p.flat_rise_c, p.idle_w = (
            t["g4_flat_power_band_fraction"],
            t["g4_temp_rise_c"],
            t["g4_idle_power_w"],
        )
        limits = [
            mw
            for d in self.nvml.data.get("sample_devices") or []
            if isinstance(mw := d.get("power_limit_mw"), (int, float))
        ]
        p.flat_power_w = t["g4_flat_power_w"] or (
            min(limits) / 1000 * t["g4_flat_power_fraction"] if limits else 0.0
        )

    # -- the job
    def start(self) -> None:
        """Start the job (or check the pid), then the readers; raises :class:`Usage` when it cannot start."""
        self.kmsg.open()  # first: an Xid logged as the job starts is the job's
        if self.command:
            try:
                self.proc = subprocess.Popen(self.command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                             preexec_fn=_unblock)  # fmt: skip
            except OSError as exc:
                raise Usage(f"cannot start {self.command[0]}: {exc.strerror or exc}") from None
            self.pid = self.proc.pid
            assert self.proc.stdout is not None and self.proc.stderr is not None
            self.pumps = [
                threading.Thread(
                    target=pump,
                    args=(os.dup(s.fileno()), fd, self.output),
                    daemon=True,
                    name=f"spark-watch-{fd}",
                )
                for s, fd in ((self.proc.stdout, 1), (self.proc.stderr, 2))
            ]
            for s in (self.proc.stdout, self.proc.stderr):
                s.close()
            for t in self.pumps:
                t.start()
        self.host = probes.HostReader(self.root, self.kmsg)
        self.nvml.start()
        # no host name: a capture keeps none
        self.timeline.write({"type": "watch", "version": 1, "started": self.started_wall,
                             "argv": list(self.command), "pid": self.pid,
                             "interval": self.interval})  # fmt: skip
        if self.kmsg.problem:
            say(self.kmsg.problem)

    def running(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        return process_state(self.pid) not in (None, "Z", "X")

    def _job(self, pids: Sequence[int]) -> list[int]:
        for pid in pids:
            if pid not in self._job_pids:
                self._job_pids[pid] = probes.descendants_of(self.pid, pid)
        return [self.pid, *(p for p, mine in self._job_pids.items() if mine and p != self.pid)]

    # -- one tick
    def tick(self) -> list[rules.Event]:
        """Read the box once, say the events it brings, write the sample (and its events) down."""
        s = self._read()
        events = self.watcher.step(s)
        self.samples += 1
        for e in events:
            self._event(e)
        record: dict[str, Any] = {"type": "sample", **s.to_record(), "wall": round(time.time(), 3)}
        if s.procs:  # command lines as a capture keeps them: the program and its flags
            record["procs"] = [{**p, "cmd": " ".join(reduce_argv(str(p["cmd"]).split()))} if p.get("cmd")
                               else p for p in s.procs]  # fmt: skip
        self.timeline.write(record)
        self._prometheus(s)
        return events

    def _read(self) -> rules.WatchSample:
        """This tick's readings: the NVML child's and the host's, each waited for a bounded time."""
        assert self.host is not None
        wait = min(2.0, max(0.05, self.interval / 2))
        self.nvml.ask()
        got, answer = self.nvml.take(wait)
        host, host_answer = self.host.read(wait)
        if not self._profiled and self.nvml.data.get("sample_devices"):
            self._profiled = True
            names = " ".join(str(d.get("name") or "") for d in self.nvml.data["sample_devices"])
            self._profile("gb10" if "GB10" in names.upper() else "generic")
        procs = got.get("procs") if got and "procs" in got else None
        raw: dict[str, Any] = {"t": round(time.monotonic() - self.t0, 3), "gpu": answer,
                               "gpus": got.get("gpus") if got else None, "procs": procs,
                               "job_running": self.running(), "job_pids": [self.pid]}  # fmt: skip
        if procs is not None:
            pids = [p["pid"] for p in procs if isinstance(p, dict) and isinstance(p.get("pid"), int)]
            raw["job_pids"] = self._job(pids)
            raw["unseen_pids"] = [p for p in pids if process_state(p) is None]
        raw.update(self._host(host) if host is not None else {"problems": [host_answer]})
        return rules.WatchSample.from_dict(raw)

    def _host(self, host: dict[str, Any]) -> dict[str, Any]:
        """The host reader's answer as a sample's keys: MemAvailable, free blocks, new kernel-log lines."""
        assert self.host is not None
        buddy = host.get("buddy")
        blocks = rules.free_blocks(buddy, self.host.page_kib, self.params.block_mib) if buddy else None
        return {"mem_available_kb": host.get("mem_available_kb"), "mem_total_kb": host.get("mem_total_kb"),
                "xids": host.get("xids") or [], "ooms": host.get("ooms") or [], "free_blocks": blocks,
                "problems": [host["problem"]] if host.get("problem") else []}

    def _event(self, e: rules.Event) -> None:
        say(rules.line(e))
        self.timeline.write(e.to_dict())
        if e.state == "once":  # an instant (a new Xid, an OOM kill) stays in the textfile for the watch
            self.instants.setdefault(e.code, (e.status, e.text))

    def _prometheus(self, s: rules.WatchSample) -> None:
        """``--prometheus-textfile``, refreshed every sample; a file that cannot be written is said once."""
        path = self.ns.spark_prometheus_textfile
        if not path or self._prometheus_failed:
            return
        from pytest_dgx_spark.watch import textfile  # lazy: only with --prometheus-textfile

        try:
            textfile.write(path, self.watcher.active.values(), self.instants, s, self.started_wall,
                           time.monotonic() - self.t0)  # fmt: skip
        except OSError as exc:
            self._prometheus_failed = True
            say(f"--prometheus-textfile {path}: not written further: {exc.strerror or exc}")

    # -- the loop
    def loop(self) -> list[tuple[int, bool]]:
        """Tick until the job ends; the signals received (number, forwarded)."""
        received: list[tuple[int, bool]] = []
        waited = (*SIGNALS, signal.SIGCHLD)
        next_tick = time.monotonic()
        while self.running():
            now = time.monotonic()
            if now >= next_tick:
                self.tick()
                next_tick = max(next_tick + self.interval, time.monotonic() + self.interval / 4)
                continue
            poll = min(next_tick - now, 1.0) if self.proc is None else next_tick - now
            info = signal.sigtimedwait(waited, poll)
            if info is not None and info.si_signo != signal.SIGCHLD:
                if self.proc is None:  # --pid: the job is not ours to signal; the watch ends
                    received.append((info.si_signo, False))
                    break
                forward = info.si_code != SI_KERNEL
                received.append((info.si_signo, forward))
                if forward and self.proc is not None:
                    with contextlib.suppress(OSError):
                        os.kill(self.proc.pid, info.si_signo)
        return received

    def finish(self) -> int | None:
        """Wait for the job's output, read the box once more; the job's exit code (None: --pid)."""
        code: int | None = None
        if self.proc is not None:
            code = self.proc.wait()
            for pump_thread in self.pumps:
                pump_thread.join(timeout=5)
        self.tick()  # the kernel's last words (an Xid logged as the job died)
        for e in self.watcher.finish(time.monotonic() - self.t0):
            self.timeline.write(
                e.to_dict()
            )  # the interval closed in the timeline; on stderr the summary says it
        self.nvml.stop()
        self.kmsg.close()
        return code

    def close(self, code: int | None, exit_code: int, summary: str) -> None:
        record: dict[str, Any] = {
            "type": "end",
            "t": round(time.monotonic() - self.t0, 3),
            "wall": time.time(),
            "exit": exit_code,
            "returncode": code,
            "summary": summary,
        }
        if code not in (None, 0):  # one record a line, so diagnose cites the line it matched
            lines = self.output.text().decode("utf-8", "replace").splitlines()
            for text in lines[-TIMELINE_TAIL_LINES:]:
                self.timeline.write({"type": "output", "line": text})
            for r in self.kmsg.kept[-TIMELINE_TAIL_LINES:]:
                self.timeline.write({"type": "kernel", "t": r.seconds, "line": r.text})
        self.timeline.write(record)
        self.timeline.close()


def _unblock() -> None:
    """The job starts with the signal mask the watcher had before it blocked its own."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, (*SIGNALS, signal.SIGCHLD))


def exit_code(code: int) -> int:
    return 128 - code if code < 0 else code


def main(argv: Sequence[str]) -> int:
    try:
        ns, command = parse(argv)
    except Usage as exc:
        say(f"error: {exc}")
        return EXIT_USAGE
    signal.pthread_sigmask(signal.SIG_BLOCK, (*SIGNALS, signal.SIGCHLD))  # before any thread starts
    try:
        return _run(ns, command)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, (*SIGNALS, signal.SIGCHLD))


def _run(ns: argparse.Namespace, command: list[str]) -> int:
    try:
        watch = Watch(ns, command)
    except OSError as exc:
        say(f"error: --timeline {ns.spark_timeline}: {exc.strerror or exc}")
        return EXIT_USAGE
    try:
        watch.start()
    except Usage as exc:
        watch.timeline.close()
        say(f"error: {exc}")
        return EXIT_USAGE
    received = watch.loop()
    code = watch.finish()
    seconds = time.monotonic() - watch.t0
    summary = watch.watcher.summary(seconds)
    if code is None and received:
        result = 128 + received[-1][0]
        say(
            f"watch of pid {watch.pid} stopped by {signal.Signals(received[-1][0]).name} after "
            f"{rules.duration(seconds)} (the process was not signalled); {summary}"
        )
    elif code is None:
        result = 0
        say(
            f"pid {watch.pid} ended after {rules.duration(seconds)} "
            "(its exit status is its parent's to read); "
            f"{summary}"
        )
    else:
        result = exit_code(code)
        how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited {code}"
        if received and code < 0:
            sent = ", ".join(signal.Signals(s).name for s, f in received if f) or "nothing"
            how += f" (the watcher forwarded {sent})"
        say(f"the job {how} after {rules.duration(seconds)}; {summary}")
    failed = code not in (None, 0) or any(e.status == "FAIL" for e in watch.watcher.events)
    if failed and not ns.spark_no_diagnose:
        from pytest_dgx_spark.watch.postmortem import post_mortem  # lazy: the log scanner, only on a failure

        for text in post_mortem(watch, seconds):
            say(text)
    watch.close(code, result, summary)
    if ns.spark_timeline:
        say(
            f"timeline: {ns.spark_timeline} ({watch.timeline.bytes:,} bytes, {watch.samples} samples, "
            f"{len(watch.watcher.events)} events)"
        )
    return result


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
