"""``spark-preflight watch [options] -- COMMAND [ARGS…]`` (or ``--pid PID``): run the job, watch the box.

The job's stdout and stderr pass through byte for byte (a closed reader downstream closes the job's
pipe, so it meets SIGPIPE as it would have); a bounded head and tail are kept for the post-mortem.
stdin is the job's own. SIGINT, SIGTERM and SIGHUP sent to the watcher are forwarded (one a terminal
sent to the whole process group reached the job already and is not sent twice); the watcher exits
with the job's code, 128+N for a signal. Every ``--interval`` seconds one tick reads the box
(:mod:`.probes`), :class:`.rules.Watcher` turns the readings into events (one line each on stderr)
and both go to the ``--timeline``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from pytest_dgx_spark import catalog, options, outfile
from pytest_dgx_spark.probes.machine import ROOT_ENV
from pytest_dgx_spark.redact import Redactor, reduce_argv, scrub
from pytest_dgx_spark.safe_text import visible
from pytest_dgx_spark.thresholds import THRESHOLDS, defaults
from pytest_dgx_spark.watch import probes, rules

EXIT_USAGE = 2
PREFIX = "spark-preflight watch: "
#: bytes of the job's output kept for the post-mortem: the first (an import error) and the last
HEAD_BYTES, TAIL_BYTES = 64 << 10, 1 << 20
#: the output lines the timeline's end record keeps of a failed job (what diagnose reads there)
TIMELINE_TAIL_LINES = 200
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
SI_KERNEL = 0x80  # si_code of a signal the kernel sent (a terminal's ^C to the foreground group)


#: the checks a watch samples (the rest are ``not_run`` in its Prometheus textfile)
WATCHED = ("G3", "G4", "G6")


class Usage(Exception):
    """Bad input: one line, exit 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise Usage(scrub(message))


#: the last byte the job wrote to our stderr: a line of ours after a job's unfinished line starts a new one
_LAST = {"stderr": b"\n"}


def say(text: str) -> None:
    """One line of ours on stderr, in one write (the job's stderr shares it)."""
    lead = "" if _LAST["stderr"] == b"\n" else "\n"
    with contextlib.suppress(OSError, ValueError):
        os.write(2, (lead + PREFIX + visible(text) + "\n").encode("utf-8", "replace"))
    _LAST["stderr"] = b"\n"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="spark-preflight watch", allow_abbrev=False,
                     usage="spark-preflight watch [options] -- COMMAND [ARGS...]  |  --pid PID",
                     description="Run COMMAND (or watch --pid) and say, as it happens, when the GPU "
                     "throttles, another process takes the GPU, memory runs out or fragments, an Xid or OOM "
                     "kill appears, or "
                     "the job's GPU goes idle; a diagnosis when it fails. Exit code: the job's (128+N for a "
                     "signal); 2 for bad input.")  # fmt: skip
    options.add_watch_options(parser)
    return parser


def _number(ns: argparse.Namespace, name: str) -> float | None:
    opt = next(o for o in (*options.WATCH_OPTIONS, options.BY_NAME["workload-gb"]) if o.name == name)
    raw = getattr(ns, opt.dest)
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise Usage(f"{opt.cli_flag}: expected a number, got {raw!r}") from None
    low = opt.minimum if opt.minimum is not None else float("-inf")
    if not (value > low if opt.exclusive_min else value >= low) or value != value:
        raise Usage(f"{opt.cli_flag}: expected a number above {low:g}, got {raw!r}")
    if opt.maximum is not None and value > opt.maximum:
        raise Usage(f"{opt.cli_flag}: at most {opt.maximum:g}, got {raw!r}")
    return value


def _pid(raw: str) -> int:
    if not raw.isdigit() or not 0 < int(raw) < 1 << 22:
        raise Usage(f"--pid: expected a process id, got {raw!r}")
    pid = int(raw)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        raise Usage(f"--pid {pid}: no such process") from None
    except PermissionError:
        raise Usage(
            f"--pid {pid}: another user's process, not readable as this user (run as its owner or root)"
        ) from None
    if _state(pid) in (None, "Z", "X"):
        raise Usage(f"--pid {pid}: the process has ended")
    return pid


def _state(pid: int) -> str | None:
    """``R``, ``S``, ``Z``…: the process's state, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read(4096).decode("ascii", "replace")
        return raw[raw.rindex(")") + 2 :].split()[0]
    except (OSError, ValueError, IndexError):
        return None


def parse(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    args = list(argv)
    command: list[str] = []
    if "--" in args:
        at = args.index("--")
        args, command = args[:at], args[at + 1 :]
    ns = build_parser().parse_args(args)
    for name in ("interval", "stall-seconds", "workload-gb"):
        setattr(ns, "spark_" + name.replace("-", "_"), _number(ns, name))
    for pair in ns.spark_threshold or []:
        key, _, number = str(pair).partition("=")
        if key.strip() not in THRESHOLDS:
            raise Usage(
                f"--threshold {pair}: no threshold named {key.strip()!r} (spark-preflight --help-thresholds)"
            )
        try:
            float(number)
        except ValueError:
            raise Usage(f"--threshold {pair}: expected NAME=NUMBER") from None
    from pytest_dgx_spark.settings import PARSERS, OptionError  # lazy: the option parsers G4 reads them by

    opt = options.BY_NAME["xid-class"]
    try:
        ns.spark_xid_class = PARSERS[opt.kind](opt, ns.spark_xid_class or [], opt.cli_flag, Path.cwd())
    except OptionError as exc:
        raise Usage(str(exc)) from None
    if ns.spark_pid is not None and command:
        raise Usage("give either --pid PID or -- COMMAND, not both")
    if ns.spark_pid is None and not command:
        raise Usage("no COMMAND: spark-preflight watch [options] -- COMMAND [ARGS...] (or --pid PID)")
    if ns.spark_pid is not None:
        ns.spark_pid = _pid(str(ns.spark_pid))
    if ns.spark_timeline is not None:
        if not str(ns.spark_timeline).strip():
            raise Usage("--timeline: an empty path")
        try:
            outfile.check(ns.spark_timeline)
        except OSError as exc:
            raise Usage(f"--timeline {ns.spark_timeline}: {exc.strerror or exc}") from None
    if ns.spark_prometheus_textfile is not None:
        try:
            outfile.check(ns.spark_prometheus_textfile)
        except OSError as exc:
            raise Usage(f"--prometheus-textfile {ns.spark_prometheus_textfile}: {exc.strerror or exc}") from None
    return ns, command


class Output:
    """The job's output kept for the post-mortem: its first :data:`HEAD_BYTES` and last :data:`TAIL_BYTES`."""

    def __init__(self) -> None:
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_bytes = self.total = 0
        self.lock = threading.Lock()

    def add(self, chunk: bytes) -> None:
        with self.lock:
            self.total += len(chunk)
            if len(self.head) < HEAD_BYTES:
                self.head += chunk[: HEAD_BYTES - len(self.head)]
            self.tail.append(chunk)
            self.tail_bytes += len(chunk)
            while self.tail_bytes - len(self.tail[0]) >= TAIL_BYTES:
                self.tail_bytes -= len(self.tail.popleft())

    def text(self) -> bytes:
        with self.lock:
            tail = b"".join(self.tail)
            if self.total <= len(self.head):
                return bytes(self.head)
            overlap = len(self.head) + len(tail) - self.total
            if overlap >= 0:
                return bytes(self.head) + tail[overlap:]
            return bytes(self.head) + b"\n[... output cut ...]\n" + tail


def pump(src: int, dst: int, kept: Output) -> None:
    """Copy ``src`` to ``dst`` byte for byte; when ``dst`` is closed downstream, close ``src`` so the
    job's next write fails as it would have without us."""
    open_dst = True
    try:
        while chunk := os.read(src, 1 << 16):
            kept.add(chunk)
            if dst == 2:
                _LAST["stderr"] = chunk[-1:]
            view = memoryview(chunk)
            while open_dst and view:
                try:
                    view = view[os.write(dst, view) :]
                except BrokenPipeError:
                    open_dst = False
                except OSError:
                    open_dst = False
            if not open_dst:
                break
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            os.close(src)


class Timeline:
    """JSON Lines, one record per write, each on disk when written (:func:`outfile.open_stream`)."""

    def __init__(self, path: str | None) -> None:
        self.fd = outfile.open_stream(path) if path else -1
        self.redact = Redactor(os.environ)
        self.bytes = 0

    def write(self, record: dict[str, Any]) -> None:
        if self.fd < 0:
            return
        data = (json.dumps(self.redact(record), default=str, separators=(",", ":")) + "\n").encode()
        try:
            os.write(self.fd, data)
            self.bytes += len(data)
        except OSError as exc:
            say(f"timeline not written further: {exc.strerror or exc}")
            self.close()

    def close(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1


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
                             "argv": list(self.command), "pid": self.pid, "interval": self.interval})  # fmt: skip
        if self.kmsg.problem:
            say(self.kmsg.problem)

    def running(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        return _state(self.pid) not in (None, "Z", "X")

    def _job(self, pids: Sequence[int]) -> list[int]:
        for pid in pids:
            if pid not in self._job_pids:
                self._job_pids[pid] = probes.descendants_of(self.pid, pid)
        return [self.pid, *(p for p, mine in self._job_pids.items() if mine and p != self.pid)]

    # -- one tick
    def tick(self) -> list[rules.Event]:
        assert self.host is not None
        wait = min(2.0, max(0.05, self.interval / 2))
        self.nvml.ask()
        got, answer = self.nvml.take(wait)
        host, host_answer = self.host.read(wait)
        if not self._profiled and self.nvml.data.get("sample_devices"):
            self._profiled = True
            names = " ".join(str(d.get("name") or "") for d in self.nvml.data["sample_devices"])
            self._profile("gb10" if "GB10" in names.upper() else "generic")
        raw: dict[str, Any] = {"t": round(time.monotonic() - self.t0, 3), "gpu": answer,
                               "gpus": got.get("gpus") if got else None,
                               "procs": got.get("procs") if got and "procs" in got else None,
                               "job_running": self.running(), "problems": []}  # fmt: skip
        if raw["procs"] is not None:
            pids = [p["pid"] for p in raw["procs"] if isinstance(p, dict) and isinstance(p.get("pid"), int)]
            raw["job_pids"] = self._job(pids)
            raw["unseen_pids"] = [p for p in pids if _state(p) is None]
        else:
            raw["job_pids"] = [self.pid]
        if host is None:
            raw["problems"].append(host_answer)
        else:
            buddy = host.get("buddy")
            raw["mem_available_kb"], raw["mem_total_kb"] = host.get("mem_available_kb"), host.get("mem_total_kb")
            raw["xids"], raw["ooms"] = host.get("xids") or [], host.get("ooms") or []
            raw["free_blocks"] = (
                rules.free_blocks(buddy, self.host.page_kib, self.params.block_mib) if buddy else None
            )
            if host.get("problem"):
                raw["problems"].append(host["problem"])
        s = rules.WatchSample.from_dict(raw)
        events = self.watcher.step(s)
        self.samples += 1
        for e in events:
            self._event(e)
        record: dict[str, Any] = {"type": "sample", **s.to_record(), "wall": round(time.time(), 3)}
        if s.procs:  # command lines as a capture keeps them: the program and its flags
            record["procs"] = [
                {**p, "cmd": " ".join(reduce_argv(str(p["cmd"]).split()))} if p.get("cmd") else p for p in s.procs
            ]
        self.timeline.write(record)
        self._prometheus(s)
        return events

    def _event(self, e: rules.Event) -> None:
        say(rules.line(e))
        self.timeline.write(e.to_dict())
        if e.state == "once":  # an instant (a new Xid, an OOM kill) stays in the textfile for the watch
            self.instants.setdefault(e.code, (e.status, e.text))

    def _prometheus(self, s: rules.WatchSample) -> None:
        """``--prometheus-textfile``, refreshed every sample (issue 33): G3, G4 and G6 by the worst
        condition active now (or instant seen), with its codes; the other checks ``not_run`` and why;
        the sample's readings in base units. A file that cannot be written is said once."""
        path = self.ns.spark_prometheus_textfile
        if not path or self._prometheus_failed:
            return
        from pytest_dgx_spark import prometheus
        from pytest_dgx_spark.model import Reading, Result, Status

        found: dict[str, list[tuple[str, str, str]]] = {}
        for a in self.watcher.active.values():
            found.setdefault(a.code.split(".", 1)[0], []).append((a.status, a.code, a.text))
        for code, (status, text) in self.instants.items():
            found.setdefault(code.split(".", 1)[0], []).append((status, code, text))
        rank = {"FAIL": 0, "WARN": 1, "INFO": 2}
        results = []
        for cid in WATCHED:
            mine = sorted(found.get(cid, []), key=lambda f: rank.get(f[0], 3))
            if mine:
                codes = list(dict.fromkeys(c for _, c, _ in mine))
                results.append(Result(cid, Status(mine[0][0]), mine[0][2], codes=codes))
            else:
                results.append(Result(cid, Status.PASS, "no condition active"))
        statuses = {r.status for r in results}
        verdict = ("blocked" if Status.FAIL in statuses else
                   "ready-with-warnings" if Status.WARN in statuses else "ready")  # fmt: skip
        readings = []
        for g in s.gpus or []:
            i = g.get("index", 0)
            readings += [Reading(f"gpu{i}_temperature_c", g.get("temperature_c"), "C"),
                         Reading(f"gpu{i}_power_w", (g.get("power_usage_mw") or 0) / 1000 if
                                 g.get("power_usage_mw") is not None else None, "W"),
                         Reading(f"gpu{i}_clock_sm_mhz", g.get("clock_sm_mhz"), "MHz")]  # fmt: skip
        if s.mem_available_kb is not None:
            readings.append(Reading("mem_available_kib", s.mem_available_kb, "KiB"))
        not_run = {cid: "not watched: watch samples G3, G4 and G6" for cid in catalog.IDS if cid not in WATCHED}
        try:
            prometheus.write_textfile(path, results, verdict, self.started_wall, time.monotonic() - self.t0,
                                      not_run=not_run, readings=readings, mode="watch")  # fmt: skip
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
