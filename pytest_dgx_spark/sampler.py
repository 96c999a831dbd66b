"""Record G4's readings (and G6's GPU processes) during a user's own long test.

The preflight samples for seconds; a GB10 throttles after minutes. A test that asks for
``spark_sampler`` (``{"interval": 0.2}`` by indirect parametrization; ``GpuSampler`` works without
pytest) records each GPU's temperature, power, SM clock, clock-event reasons and processes in a child
process (a wedged driver cannot hang the run; it stops when its stdin closes, else its group is killed)
and attaches the series, thinned at ``max_points``, and a summary to its report. Loaded on first use.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import pytest

from pytest_dgx_spark import allure_report, html_report, thermal
from pytest_dgx_spark.probes import commands
from pytest_dgx_spark.probes.child import MAX_LINE, capped_lines, child_env, script_source
from pytest_dgx_spark.sampler_summary import (
    counter_slowdown,
    gpu_summaries,
    properties,
    report_lines,
    summary_line,
)

__all__ = ["SUMMARY_KEY", "GpuSampler", "counter_slowdown", "properties", "run_fixture", "sampler_chart",
           "summary_line"]

if TYPE_CHECKING:
    from pytest_dgx_spark.chart import Drawn

#: distinct GPU processes remembered (the rest are counted)
MAX_PROCS = 256
#: where the fixture leaves the summary on the test item (for conftest hooks)
SUMMARY_KEY: pytest.StashKey[dict[str, Any]] = pytest.StashKey()
#: the stored series and GPU names, for the thermal chart
SERIES_KEY: pytest.StashKey[dict[str, Any]] = pytest.StashKey()
#: the drawn chart, once per test: (svg, None) or (None, why)
CHART_KEY: pytest.StashKey[tuple[bytes | None, str | None]] = pytest.StashKey()


class GpuSampler:
    """Background NVML sampler; a context manager, or ``start()``/``stop()``."""

    def __init__(self, interval: float = 1.0, *, procs_every: float = 5.0, max_points: int = 2000,
                 timeout: float = 10.0, env: Mapping[str, str] | None = None, python: str | None = None,
                 flat_power_w: float | None = None) -> None:
        if interval <= 0:
            raise ValueError("interval must be > 0 seconds")
        self.interval, self.procs_every, self.timeout = float(interval), float(procs_every), float(timeout)
        self.max_points = max(16, int(max_points))
        self.env = dict(os.environ if env is None else env)
        self.python = python or sys.executable
        self.flat_power_w = flat_power_w
        self._proc: subprocess.Popen[bytes] | None = None
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._series: dict[int, Any] = {}  # index -> thermal.GpuSeries (stats of every sample)
        self._points: list[dict[str, Any]] = []  # the thinned series, every _stride-th sample
        self._stride, self._seen, self._procs_dropped = 1, 0, 0
        self._procs: dict[int, dict[str, Any]] = {}
        self._data: dict[str, Any] = {}
        self._last_event = self._started = 0.0
        self._stopped: float | None = None
        self._stderr: list[bytes] = []
        self._finished = False
        self._stop_note: str | None = None
        self._watcher: Any = None  # watch.rules.Watcher, made with the first sample
        self._mine: dict[int, bool] = {}  # GPU process pid -> this process or a child of it

    def start(self) -> GpuSampler:
        """Start the child; returns at once (a missing NVML shows in the summary)."""
        if self._proc is not None:
            raise RuntimeError("this sampler was already started")
        cfg = {"mode": "stream", "interval": self.interval, "procs_every": self.procs_every}
        argv = [self.python, "-c", script_source("nvml_child.py"), json.dumps(cfg)]
        self._started = self._last_event = time.monotonic()
        try:
            self._proc = subprocess.Popen(  # dies with pytest, even one ended by os._exit
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=child_env(base=self.env), start_new_session=True, preexec_fn=commands.die_with_parent(),
            )
        except OSError as exc:
            self._stop_note = f"could not start the sampler child: {exc.strerror or exc}"
            self._stopped = time.monotonic()
            return self
        commands.track(self._proc)  # a SIGTERM to the run kills it with the probes (own session)
        self._threads = [threading.Thread(target=self._read_stdout, name="spark-sampler", daemon=True),
                         threading.Thread(target=self._read_stderr, name="spark-sampler-err", daemon=True)]
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> dict[str, Any]:
        """Stop sampling and return :meth:`summary`. Safe to call twice."""
        proc = self._proc
        if proc is not None:
            commands.untrack(proc)
        if proc is not None and self._stopped is None:
            self._stopped = time.monotonic()
            with contextlib.suppress(OSError):
                if proc.stdin is not None:
                    proc.stdin.close()  # the child's signal to finish
            wait = self.interval + min(self.timeout, 10.0)
            try:
                proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                commands.kill_group(proc)
                self._stop_note = f"the sampler child did not stop within {wait:g} s (driver not answering?); killed"
            for t in self._threads:
                t.join(timeout=2)
            commands.close_pipes(proc)
        return self.summary()

    def __enter__(self) -> GpuSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._proc is not None and self._stopped is None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def _read_stdout(self) -> None:
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        try:
            # an endless line must not fill our memory: past MAX_LINE the child is killed (the run's
            # length bounds the rest); polled reads, so stop() never waits for whoever holds the pipe
            for raw in capped_lines(commands.pipe(proc, "stdout"), 1 << 62, MAX_LINE):
                if isinstance(raw, str):
                    self._stop_note = f"the sampler child printed {raw} on stdout; killed"
                    commands.killpg(proc)
                    return
                try:
                    msg = json.loads(raw.decode("utf-8", errors="replace"))
                except ValueError:  # a blank or torn line
                    continue
                if isinstance(msg, dict):
                    self._handle(msg)
        except (OSError, ValueError):
            pass

    def _read_stderr(self) -> None:
        proc = self._proc
        assert proc is not None and proc.stderr is not None
        stream = commands.pipe(proc, "stderr")
        kept = 0
        try:
            for chunk in iter(lambda: stream.read(4096), b""):
                self._stderr.append(chunk)
                kept += len(chunk)
                while kept > 8192 and len(self._stderr) > 1:
                    kept -= len(self._stderr.pop(0))
        except (OSError, ValueError):
            pass

    def _handle(self, msg: Mapping[str, Any]) -> None:
        with self._lock:
            if isinstance(msg.get("data"), dict):
                self._data.update(msg["data"])
            if msg.get("done"):
                self._finished = True
            sample = msg.get("event")
            if not isinstance(sample, dict):
                return
            self._last_event = time.monotonic()
            self._watch(sample)
            thermal.add_sample(self._series, sample, keep_points=False)
            for p in sample.get("procs") or []:
                self._add_proc(p, sample.get("t"))
            self._seen += 1
            if (self._seen - 1) % self._stride == 0:
                self._points.append({"t": sample.get("t"), "gpus": sample.get("gpus") or []})
                if len(self._points) >= self.max_points:
                    self._points = self._points[::2]
                    self._stride *= 2

    def _watch(self, sample: Mapping[str, Any]) -> None:
        """The watcher's events over this sample (clock-event reasons, clocks stuck low, a new GPU
        process that is not this test's), as ``spark-preflight watch`` raises them."""
        from pytest_dgx_spark.watch import probes, rules  # lazy: the rules load with the first sample

        if self._watcher is None:
            self._watcher = rules.Watcher(rules.Params(interval=self.interval))
        procs = sample.get("procs")
        me = os.getpid()
        for p in procs or []:
            if isinstance(pid := p.get("pid"), int) and pid not in self._mine and len(self._mine) < MAX_PROCS:
                self._mine[pid] = probes.descendants_of(me, pid)
        ws: dict[str, Any] = {"t": sample.get("t"), "gpus": sample.get("gpus") or [], "gpu": "ok",
                              "job_running": False,
                              "job_pids": [me, *(p for p, mine in self._mine.items() if mine)]}  # fmt: skip
        if isinstance(procs, list):
            ws["procs"] = procs
        self._watcher.step(rules.WatchSample.from_dict(ws))  # it keeps its latest events only (MAX_EVENTS)

    def events(self, check: str | None = None) -> list[dict[str, Any]]:
        """The events so far (``spark-preflight watch``'s: starts, clears, instants), of one check
        (``"G4"``) or code (``"G4.clock-event"``) when given: ``assert not spark_sampler.events("G4")``.
        Empty also when nothing was sampled: ``summary()["ok"]`` says whether it was."""
        with self._lock:
            found = list(self._watcher.events) if self._watcher is not None else []
        return [e.to_dict() for e in found if check is None or check in (e.check, e.code)]

    def _add_proc(self, p: Mapping[str, Any], t: Any) -> None:
        try:
            pid = int(p.get("pid"))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return
        if pid not in self._procs and len(self._procs) >= MAX_PROCS:
            self._procs_dropped += 1
            return
        entry = self._procs.setdefault(pid, {"pid": pid, "cmd": p.get("cmd"), "type": p.get("type"),
                                             "gpu": p.get("gpu"), "max_used_bytes": None, "first_t": t})
        entry["last_t"] = t
        used = p.get("used_bytes")
        if isinstance(used, int) and (entry["max_used_bytes"] is None or used > entry["max_used_bytes"]):
            entry["max_used_bytes"] = used

    def counters(self) -> dict[str, list[Any]]:
        """``counters_before``/``counters_after`` the child read at start and stop, as in G4's facts."""
        with self._lock:
            return {k: list(self._data.get(k) or []) for k in ("counters_before", "counters_after")}

    def series(self) -> list[dict[str, Any]]:
        """The stored (thinned) samples, oldest first."""
        with self._lock:
            return [dict(p) for p in self._points]

    def _reason(self, data: Mapping[str, Any], has_series: bool) -> str | None:
        """Why nothing (or not everything) was sampled, in one line; None when sampling ran."""
        if data.get("import_error"):
            return f"nvidia-ml-py (pynvml) not importable: {data['import_error']}"
        if init := data.get("init_error"):
            return f"NVML unavailable: {init.get('message') or init.get('name')} ({init.get('name')})"
        if has_series:
            return None
        if self._stop_note:
            return self._stop_note
        if self._proc is not None and self._proc.poll() not in (None, 0):
            tail = b"".join(self._stderr).decode("utf-8", "replace").strip().splitlines()[-1:]
            return f"the sampler child exited {self._proc.returncode}" + (f": {tail[0]}" if tail else "")
        return None

    def summary(self) -> dict[str, Any]:
        """What was recorded so far (the sampler may still be running)."""
        with self._lock:
            data, series, points = dict(self._data), dict(self._series), list(self._points)
            procs = [dict(p) for p in self._procs.values()]
        end = self._stopped or time.monotonic()
        reason = self._reason(data, bool(series))
        gpus, throttle, flat_notes = gpu_summaries(data, series, thermal.summarise(points), self.flat_power_w)
        slowdown = counter_slowdown(data)
        stalled = None
        if self.running and time.monotonic() - self._last_event > self.interval + self.timeout:
            stalled = f"no sample for {time.monotonic() - self._last_event:.1f} s (driver not answering?)"
        return {
            "ok": reason is None and bool(series), "reason": reason, "interval_s": self.interval,
            "seconds": round(end - self._started, 3) if self._started else 0.0,
            "samples": self._seen, "stored_points": len(points), "stride": self._stride, "gpus": gpus,
            # None, not False, when nothing was sampled: "not throttled" is a reading
            "throttled": (bool(throttle) or bool(flat_notes) or bool(slowdown)) if series else None,
            "events": self.events(),
            "throttle_reasons": throttle, "slowdown_counters": slowdown, "flat_power": flat_notes,
            "lost": [g["index"] for g in gpus if g.get("lost_at") is not None],
            "processes": sorted(procs, key=lambda p: p["pid"]), "processes_dropped": self._procs_dropped,
            "stopped": self._stop_note or ("clean" if self._finished else None), "stalled": stalled,
        }

    def report_text(self, summary: Mapping[str, Any] | None = None) -> str:
        """The summary lines, then the stored series as CSV (for the report)."""
        return "\n".join(report_lines(dict(summary or self.summary()), self.series()))


def run_fixture(request: pytest.FixtureRequest) -> Iterator[GpuSampler]:
    """The ``spark_sampler`` fixture: sample while the test runs, then attach the results to its report."""
    params = dict(getattr(request, "param", None) or {})
    try:
        timeout = float(request.config.getoption("spark_timeout", None) or 10.0)
    except (TypeError, ValueError):
        timeout = 10.0
    sampler = GpuSampler(interval=float(params.get("interval", 1.0)), procs_every=float(params.get("procs_every", 5.0)),
                         max_points=int(params.get("max_points", 2000)), timeout=timeout)
    metadata = None
    pm = request.config.pluginmanager
    if pm.hasplugin("json-report") or pm.hasplugin("pytest_jsonreport"):
        with contextlib.suppress(pytest.FixtureLookupError):
            metadata = request.getfixturevalue("json_metadata")
    sampler.start()
    try:
        yield sampler
    finally:
        summary = sampler.stop()
        node = request.node
        node.add_report_section("teardown", "stdout", sampler.report_text(summary) + "\n")
        node.stash[SUMMARY_KEY] = summary
        _keep_series(request.config, node, sampler, summary)
        if metadata is not None:
            metadata["spark_sampler"] = {**summary, "processes": summary["processes"][:20]}
        try:
            family = str(request.config.getini("junit_family"))
        except (ValueError, KeyError):
            family = "xunit2"
        if family in ("xunit1", "legacy"):
            node.user_properties.extend(properties(summary))


def _keep_series(config: pytest.Config, node: Any, sampler: GpuSampler, summary: Mapping[str, Any]) -> None:
    """Keep the series when a report will chart it (html, Allure, ``--spark-report``); hooks once."""
    html = html_report.html_wanted(config)
    allure = allure_report.listener(config) is not None
    extras = config.pluginmanager.get_plugin("dgx_spark_extras")  # registered with --spark-preflight
    report = extras is not None and getattr(extras.preflight.settings, "report", None) is not None
    if not (html or allure or report):
        return
    names = {g["index"]: g["name"] for g in summary.get("gpus") or [] if g.get("name")}
    node.stash[SERIES_KEY] = {"samples": sampler.series(), "names": names, **sampler.counters()}
    if (html or allure) and config.pluginmanager.get_plugin("dgx_spark_sampler_charts") is None:
        config.pluginmanager.register(SamplerCharts(config), "dgx_spark_sampler_charts")


def sampler_chart(item: pytest.Item) -> Drawn | None:
    """The chart of the ``spark_sampler`` series this test kept, drawn once (None: it kept none)."""
    stored = item.stash.get(SERIES_KEY, None)
    if not stored:
        return None
    if CHART_KEY not in item.stash:
        from pytest_dgx_spark import chart  # lazy: chart code loads only when a chart is asked for

        data = chart.from_samples(
            stored["samples"], title=f"spark_sampler: {item.name}", names=stored.get("names"),
            counters_before=stored.get("counters_before"), counters_after=stored.get("counters_after"),
        )
        if data is None:
            return None
        item.stash[CHART_KEY] = chart.draw(data, "svg")
    return item.stash[CHART_KEY]


class SamplerCharts:
    """The chart on the teardown report: a pytest-html extra (it gathers every phase's) and in Allure."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        rep = yield
        found = sampler_chart(item) if call.when == "teardown" else None
        if found is not None:
            if html_report.html_wanted(self.config):
                rep.extras = [*getattr(rep, "extras", []), html_report.chart_extra(*found, "spark_sampler thermals")]
            if allure_report.listener(self.config) is not None:
                allure_report.attach_chart(found[0], "spark_sampler thermals")
        return rep
