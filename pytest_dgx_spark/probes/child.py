"""Run a Python probe script in a child process, with a progress watchdog: importing torch,
initialising NVML or a first kernel can segfault, abort or hang, and none of that may reach pytest.

The child prints JSON lines: ``{"begin": step, "scale": n}`` (the next is due within ``step_timeout
* n`` s), ``{"data": {...}}``, ``{"event": {...}}`` (a series item), ``{"done": true}``. A silent
child is killed with its group and the result names its step; a line that is not JSON is counted.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import suppress
from dataclasses import asdict, field
from pathlib import Path
from typing import Any

from pytest_dgx_spark.datadef import define
from pytest_dgx_spark.probes import commands
from pytest_dgx_spark.probes.commands import limit_in_stderr  # engine.py imports it from here

SCRIPTS = Path(__file__).with_name("scripts")
#: the most a child may print on stdout in all, and in one line; past either it is killed
MAX_STDOUT = 16 << 20
MAX_LINE = 1 << 20
QUEUE_LINES = 256  # protocol lines read but not handled yet (bounds memory when the child outruns us)
MAX_EVENTS = 100_000
PROTOCOL = "_protocol.py"  # the prologue every child script starts with


def script_source(*names: str, main: str = "main()") -> str:
    """The protocol prologue and the named scripts, as one source."""
    parts = [(SCRIPTS / name).read_text(encoding="utf-8") for name in (PROTOCOL, *names)]
    return "\n".join([*parts, f"\n{main}\n"])


@define
class ChildResult:
    data: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)
    step: str | None = None  # the step running when the child stopped
    returncode: int | None = None
    signal: str | None = None
    timed_out: bool = False
    error: str | None = None  # could not start
    garbage: int = 0
    garbage_sample: list[str] = field(default_factory=list)
    stderr_tail: str = ""
    duration_s: float = 0.0
    finished: bool = False  # the script printed {"done": true}
    overflow: str | None = None  # why it was killed for its output ("more than 16 MiB", "a line over 1 MiB")
    step_seconds: dict[str, float] = field(default_factory=dict)  # each step's "begin" to the next or "done"
    #: ``"resource limit: ..."``: a limit of this box or user stopped the child, no verdict on the GPU
    resource_limit: str | None = None

    @property
    def ok(self) -> bool:
        return self.finished and self.returncode == 0 and not self.timed_out and self.overflow is None

    def describe(self, what: str = "probe child") -> str:
        """One line: why the child did not finish (or ``"ok"``)."""
        where = f" during {self.step!r}" if self.step else ""
        if self.error:
            return f"{what} could not start: {self.error}"
        if self.overflow:
            return f"{what} printed {self.overflow} on stdout{where} (killed)"
        if self.timed_out:
            return f"{what} made no progress for {self.data.get('_allowance', '?')} s{where} (hung; killed)"
        if self.signal:
            return f"{what} was killed by {self.signal}{where}"
        if self.returncode not in (0, None):
            tail = next((ln.strip()[:300] for ln in self.stderr_tail.splitlines()[::-1] if ln.strip()), "")
            return f"{what} exited {self.returncode}{where}" + (f": {tail}" if tail else "")
        if not self.finished:
            return f"{what} stopped before finishing{where} (output incomplete)"
        return "ok"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ChildResult:
        return cls(**dict(data))


def capped_lines(stream: Any, total: int, line_cap: int) -> Iterator[bytes | str]:
    """``stream``'s lines; past ``total`` bytes or on a line over ``line_cap``, the reason (a str)
    and stop. Memory stays within ``line_cap`` plus one read."""
    buf, seen = b"", 0
    read = stream.read1 if hasattr(stream, "read1") else stream.read
    while chunk := read(65536):
        seen += len(chunk)
        if seen > total:
            yield f"more than {total >> 20} MiB"
            return
        *complete, buf = (buf + chunk).split(b"\n")
        yield from (line + b"\n" for line in complete)
        if len(buf) > line_cap:
            yield f"a line over {line_cap >> 20} MiB"
            return
    if buf:
        yield buf


def child_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a probe child: unbuffered, no startup file, not an xdist worker."""
    env = commands.safe_env(os.environ if base is None else base)
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("PYTHONSTARTUP", None)
    return {k: v for k, v in env.items() if not (k.startswith("PYTEST_XDIST") or k == "PYTEST_CURRENT_TEST")}


@define
class Spawned:
    """A child started and not followed yet (its lines wait in the pipe)."""

    proc: subprocess.Popen[bytes]
    start: float


def spawn_python(
    source: str, *, args: Sequence[str] = (), env: Mapping[str, str] | None = None, python: str | None = None,
    stdin: bool = False,
) -> Spawned | ChildResult:
    """Start ``python -c source`` (:func:`commands.start`); a :class:`ChildResult` with ``error``
    when it cannot. The torch child is started so before its request is known."""
    begun = time.monotonic()
    proc = commands.start([python or sys.executable, "-c", source, *args], child_env(base=env), stdin=stdin)
    if isinstance(proc, tuple):
        return ChildResult(error=proc[0], resource_limit=proc[1])
    return Spawned(proc, begun)


def run_python(
    source: str, *, args: Sequence[str] = (), env: Mapping[str, str] | None = None, python: str | None = None,
    stdin_data: str | None = None, step_timeout: float, total_timeout: float | None = None,
    max_stdout: int | None = None,
) -> ChildResult:
    """Run ``source`` with ``python -c`` and follow its protocol (see :func:`follow`)."""
    spawned = spawn_python(source, args=args, env=env, python=python, stdin=stdin_data is not None)
    if isinstance(spawned, ChildResult):
        return spawned
    return follow(spawned, step_timeout=step_timeout, total_timeout=total_timeout, stdin_data=stdin_data,
                  max_stdout=max_stdout)  # fmt: skip


def abandon(spawned: Spawned) -> None:
    """Kill a spawned child nobody will follow, with its process group."""
    commands.kill_group(spawned.proc)
    commands.close_pipes(spawned.proc)
    commands.untrack(spawned.proc)


class _Pumps:
    """Two threads on a child's pipes: stdout as capped lines into a bounded queue (``None`` at
    the end), stderr keeping its last 64 kB. Reads poll (commands.Pipe): never blocked on a writer."""

    def __init__(self, proc: subprocess.Popen[bytes], result: ChildResult, max_stdout: int | None) -> None:
        self.proc, self.result = proc, result
        self.max_stdout = MAX_STDOUT if max_stdout is None else max_stdout  # read now: a test lowers it
        self.lines: queue.Queue[bytes | None] = queue.Queue(maxsize=QUEUE_LINES)
        self.stderr_chunks: list[bytes] = []
        self.stop = threading.Event()  # set once nobody reads ``lines`` any more
        self.out, self.err = commands.pipe(proc, "stdout"), commands.pipe(proc, "stderr")
        self.threads = [threading.Thread(target=t, daemon=True) for t in (self._stdout, self._stderr)]
        for t in self.threads:
            t.start()  # RuntimeError under a thread limit: follow says "resource limit"

    def _put(self, item: bytes | None) -> None:
        while not self.stop.is_set():
            with suppress(queue.Full):
                self.lines.put(item, timeout=0.1)
                return

    def _stdout(self) -> None:
        try:
            for raw in capped_lines(self.out, self.max_stdout, MAX_LINE):
                if isinstance(raw, str):  # over a cap: stop reading, kill it
                    self.result.overflow = raw
                    commands.killpg(self.proc)
                    return
                self._put(raw)
        except (OSError, ValueError):
            pass
        finally:
            self._put(None)

    def _stderr(self) -> None:
        kept = 0
        with suppress(OSError, ValueError):
            while chunk := self.err.read(4096):
                self.stderr_chunks.append(chunk)
                kept += len(chunk)
                while kept > 65536 and len(self.stderr_chunks) > 1:
                    kept -= len(self.stderr_chunks.pop(0))

    def finish(self) -> str:
        """Let the readers drain briefly, stop them (a pipe held open is not waited for); the stderr tail."""
        self.stop.set()
        for closing in (False, True):
            if closing:
                commands.close_pipes(self.proc)
            for t in self.threads:
                if t.ident is not None:
                    t.join(timeout=0.5)
        return b"".join(self.stderr_chunks).decode("utf-8", errors="replace")[-4000:]


def follow(
    spawned: Spawned, *, step_timeout: float, total_timeout: float | None = None,
    stdin_data: str | None = None, max_stdout: int | None = None,
) -> ChildResult:
    """Write ``stdin_data`` (then close stdin) and read the child's lines until it is done, dead
    or silent past its allowance (``max_stdout``: the most it may print). The total allowance
    counts from now, each step's from when the child says it began. Bounded however it ends."""
    proc, result = spawned.proc, ChildResult()
    total = total_timeout if total_timeout is not None else step_timeout * 12
    pumps: _Pumps | None = None
    try:
        try:
            pumps = _Pumps(proc, result, max_stdout)
        except (RuntimeError, MemoryError) as exc:  # can't start new thread (ulimit -u, -v)
            result.error = result.resource_limit = commands.limit_reason(exc) or f"resource limit: {exc}"
            commands.kill_group(proc)
            return result
        if stdin_data is not None and proc.stdin is not None:
            with suppress(OSError):
                proc.stdin.write(stdin_data.encode())
                proc.stdin.close()
        allowance = _read_protocol(pumps.lines, result, time.monotonic() + total, step_timeout, spawned.start)
        pumps.stop.set()
        if not result.timed_out:
            try:
                proc.wait(timeout=max(1.0, step_timeout))
            except subprocess.TimeoutExpired:  # stdout closed but the process lingers: hung
                result.timed_out = True
        if result.timed_out:
            result.data["_allowance"] = round(allowance, 3)
            commands.kill_group(proc)
        result.stderr_tail = pumps.finish()
        result.returncode = proc.returncode
        result.signal = commands.exit_signal(proc, result.overflow)
        if not result.ok and not result.timed_out:
            result.resource_limit = limit_in_stderr(result.stderr_tail)
    finally:
        if pumps is not None:
            pumps.stop.set()
        commands.finish(proc)
        result.duration_s = time.monotonic() - spawned.start
    return result


def _message(raw: bytes, result: ChildResult) -> dict[str, Any] | None:
    """One protocol line as its JSON object; a line that is none is counted (and sampled) as garbage."""
    text = raw.decode("utf-8", errors="replace").strip()
    try:
        msg = json.loads(text) if text else None
    except ValueError:
        msg = []
    if text and not isinstance(msg, dict):
        result.garbage += 1
        if len(result.garbage_sample) < 3:
            result.garbage_sample.append(text[:200])
    return msg if isinstance(msg, dict) else None


def _read_protocol(
    lines: queue.Queue[bytes | None], result: ChildResult, hard_deadline: float, step_timeout: float,
    spawned_at: float,
) -> float:
    """Apply the child's messages to ``result`` until its stdout ends or it is silent past its
    allowance (``result.timed_out``); the last allowance. A step's allowance runs from when the
    child began it (lines of a child started early are judged by their time)."""
    allowance = step_timeout
    step_started: float | None = None
    deadline = time.monotonic() + allowance
    while True:
        wait = min(deadline, hard_deadline) - time.monotonic()
        if wait <= 0:
            result.timed_out = True
            return allowance
        try:
            raw = lines.get(timeout=wait)
        except queue.Empty:
            continue
        if raw is None:  # stdout closed: the child is done or dead
            return allowance
        if (msg := _message(raw, result)) is None:
            continue
        allowance, now = step_timeout, time.monotonic()
        # when the child says it began (its "t", the same monotonic clock) if plausible, else now
        said, t = now, msg.get("t")
        if isinstance(t, (int, float)) and not isinstance(t, bool) and spawned_at - 0.5 <= t <= now + 0.05:
            said = min(float(t), now)
        if ("begin" in msg or msg.get("done")) and result.step is not None and step_started is not None:
            result.step_seconds[result.step] = round(max(said - step_started, 0.0), 4)
        if "begin" in msg:
            step_started = said
            result.step = str(msg["begin"])
            result.steps.append(result.step)
            try:
                allowance = step_timeout * max(float(msg.get("scale", 1)), 0.1)
            except (TypeError, ValueError):
                allowance = step_timeout
        if isinstance(msg.get("data"), dict):
            result.data.update(msg["data"])
        if isinstance(msg.get("event"), dict) and len(result.events) < MAX_EVENTS:
            result.events.append(msg["event"])
        if msg.get("done"):
            result.finished, result.step = True, None
        # a step's allowance runs from its begin; any other line renews it
        deadline = (said if "begin" in msg else time.monotonic()) + allowance
