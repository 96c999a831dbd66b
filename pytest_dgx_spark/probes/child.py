"""Run a Python probe script in a child process, with a progress watchdog.

Importing torch or flash-attn, initialising NVML and launching the first CUDA
kernel can segfault, abort or hang on a broken machine. None of that may
reach the pytest process, so each happens in a child that reports progress as
JSON lines on stdout:

* ``{"begin": "import torch", "scale": 3}`` — a step starts; the parent then
  allows ``step_timeout * scale`` seconds for the next line;
* ``{"data": {...}}`` — facts, merged into :attr:`ChildResult.data`;
* ``{"event": {...}}`` — one item of a series (G4 samples).

A child that prints nothing for its allowance is killed with its process
group, and the result says which step it was in. A child killed by a signal
says which signal, and which step it was in. Lines that are not JSON are
counted, not fatal.
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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pytest_dgx_spark.probes.commands import (
    close_pipes,
    die_with_parent,
    kill_group,
    killpg,
    limit_reason,
    pipe,
    safe_env,
    signal_name,
    track,
    untrack,
)

SCRIPTS = Path(__file__).with_name("scripts")

#: the most a child may print on stdout in all, and in one line; past either it
#: is killed (a child printing without end must not fill the pytest process's memory)
MAX_STDOUT = 16 << 20
MAX_LINE = 1 << 20
#: protocol lines read but not handled yet (bounds memory when the child outruns us)
QUEUE_LINES = 256

#: the prologue every child script starts with (see scripts/_protocol.py)
PROTOCOL = "_protocol.py"


def script_source(*names: str, main: str = "main()") -> str:
    """Concatenate the protocol prologue and the named scripts into one source."""
    parts = [(SCRIPTS / PROTOCOL).read_text(encoding="utf-8")]
    parts += [(SCRIPTS / name).read_text(encoding="utf-8") for name in names]
    parts.append(f"\n{main}\n")
    return "\n".join(parts)


@dataclass
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
    #: why the child was killed for its output ("more than 64 MiB", "a line over 1 MiB")
    overflow: str | None = None
    #: seconds each step took, from its "begin" to the next "begin" or "done"
    step_seconds: dict[str, float] = field(default_factory=dict)
    #: ``"resource limit: ..."`` when a limit of this box or user stopped the
    #: child (no process or thread could start, it ran out of memory): no verdict on the GPU
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
            tail = last_line(self.stderr_tail)
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
    """Yield ``stream``'s lines; past ``total`` bytes, or on a line longer than
    ``line_cap`` (a child printing one endless line), yield the reason (a str)
    and stop. Memory stays within ``line_cap`` plus one read."""
    buf = b""
    seen = 0
    read = stream.read1 if hasattr(stream, "read1") else stream.read
    while True:
        chunk = read(65536)
        if not chunk:
            if buf:
                yield buf
            return
        seen += len(chunk)
        if seen > total:
            yield f"more than {total >> 20} MiB"
            return
        buf += chunk
        *complete, buf = buf.split(b"\n")
        for line in complete:
            yield line + b"\n"
        if len(buf) > line_cap:
            yield f"a line over {line_cap >> 20} MiB"
            return


def last_line(text: str) -> str:
    for line in reversed(text.splitlines()):
        if line.strip():
            return line.strip()[:300]
    return ""


def child_env(
    extra: Mapping[str, str] | None = None, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    env = safe_env(os.environ if base is None else base)
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("PYTHONSTARTUP", None)
    # The child must not look like an xdist worker or pick up pytest state.
    for key in list(env):
        if key.startswith("PYTEST_XDIST") or key == "PYTEST_CURRENT_TEST":
            env.pop(key)
    if extra:
        env.update(extra)
    return env


def run_python(
    source: str,
    *,
    args: Sequence[str] = (),
    step_timeout: float,
    total_timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    python: str | None = None,
    stdin_data: str | None = None,
    max_events: int = 100_000,
    max_stdout: int | None = None,
) -> ChildResult:
    """Run ``source`` with ``python -c`` and follow its JSON-lines protocol
    (``max_stdout``: the most it may print in all; the process scan prints more)."""
    spawned = spawn_python(source, args=args, env=env, python=python, stdin=stdin_data is not None)
    if isinstance(spawned, ChildResult):
        return spawned
    return follow(
        spawned,
        step_timeout=step_timeout,
        total_timeout=total_timeout,
        stdin_data=stdin_data,
        max_events=max_events,
        max_stdout=max_stdout,
    )


@dataclass
class Spawned:
    """A child started and not followed yet (its lines wait in the pipe)."""

    proc: subprocess.Popen[bytes]
    start: float


def spawn_python(
    source: str,
    *,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    python: str | None = None,
    stdin: bool = False,
) -> Spawned | ChildResult:
    """Start ``python -c source`` in a session of its own, tracked so that an
    early end of the run kills it; a :class:`ChildResult` with ``error`` when
    it cannot start. :func:`follow` reads it later: the torch child is
    started this way before its request is known, so ``import torch``
    overlaps the rest of the run's start."""
    argv = [python or sys.executable, "-c", source, *args]
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=child_env(base=env),
            start_new_session=True,
            preexec_fn=die_with_parent(),
        )
    except (OSError, subprocess.SubprocessError, MemoryError) as exc:
        limited = limit_reason(exc)
        return ChildResult(error=limited or getattr(exc, "strerror", None) or str(exc), resource_limit=limited)
    track(proc)
    return Spawned(proc, start)


def follow(
    spawned: Spawned,
    *,
    step_timeout: float,
    total_timeout: float | None = None,
    stdin_data: str | None = None,
    max_events: int = 100_000,
    max_stdout: int | None = None,
) -> ChildResult:
    """Write ``stdin_data`` (then close stdin) and follow the child until it is
    done, dead or silent past its allowance. The total allowance counts from
    when following began, each step's from when the child says it began."""
    total = total_timeout if total_timeout is not None else step_timeout * 12
    try:
        return _follow(
            spawned.proc, ChildResult(), spawned.start, step_timeout, total, stdin_data, max_events, max_stdout
        )
    finally:
        untrack(spawned.proc)


def abandon(spawned: Spawned) -> None:
    """Kill a spawned child nobody will follow, with its process group."""
    kill_group(spawned.proc)
    close_pipes(spawned.proc)
    untrack(spawned.proc)


class _Pumps:
    """Two threads reading a child's pipes: stdout as capped protocol lines into
    a bounded queue (``None`` at the end), stderr keeping its last 64 kB."""

    def __init__(self, proc: subprocess.Popen[bytes], result: ChildResult, max_stdout: int | None = None) -> None:
        # MAX_STDOUT read now, not when this was defined (a test lowers it)
        self.proc, self.result = proc, result
        self.max_stdout = MAX_STDOUT if max_stdout is None else max_stdout
        self.lines: queue.Queue[bytes | None] = queue.Queue(maxsize=QUEUE_LINES)
        self.stderr_chunks: list[bytes] = []
        self.stop = threading.Event()  # set once nobody reads ``lines`` any more
        # polled reads (commands.Pipe): stopped by close_pipes, never blocked on a writer
        self.out, self.err = pipe(proc, "stdout"), pipe(proc, "stderr")
        self.threads = [
            threading.Thread(target=self._stdout, daemon=True),
            threading.Thread(target=self._stderr, daemon=True),
        ]
        for t in self.threads:
            t.start()  # RuntimeError under a thread limit: _follow says "resource limit"

    def _put(self, item: bytes | None) -> None:
        while not self.stop.is_set():
            try:
                self.lines.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def _stdout(self) -> None:
        try:
            for raw in capped_lines(self.out, self.max_stdout, MAX_LINE):
                if isinstance(raw, str):  # over a cap: stop reading, kill it
                    self.result.overflow = raw
                    killpg(self.proc)
                    return
                self._put(raw)
        except (OSError, ValueError):
            pass
        finally:
            self._put(None)

    def _stderr(self) -> None:
        stream = self.err
        kept = 0
        try:
            for chunk in iter(lambda: stream.read(4096), b""):
                self.stderr_chunks.append(chunk)
                kept += len(chunk)
                while kept > 65536 and len(self.stderr_chunks) > 1:
                    kept -= len(self.stderr_chunks.pop(0))
        except (OSError, ValueError):
            pass

    def finish(self) -> str:
        """Let the readers drain what is in the pipes (briefly), stop them
        (bounded: a process that holds a pipe open is not waited for); the stderr tail."""
        self.stop.set()
        for t in self.threads:
            if t.ident is not None:
                t.join(timeout=0.5)
        close_pipes(self.proc)
        for t in self.threads:
            if t.ident is not None:
                t.join(timeout=0.5)
        return b"".join(self.stderr_chunks).decode("utf-8", errors="replace")[-4000:]


def _follow(
    proc: subprocess.Popen[bytes],
    result: ChildResult,
    start: float,
    step_timeout: float,
    total: float,
    stdin_data: str | None,
    max_events: int,
    max_stdout: int | None = None,
) -> ChildResult:
    """Read the child's JSON lines until it is done, dead or silent too long.

    Bounded in every case: whatever holds the child's pipes open, and
    whatever interrupts the follow (pytest-timeout, Ctrl-C), the child's group
    is killed and the pipes are closed without waiting for a writer."""
    finished = False
    pumps: _Pumps | None = None
    try:
        try:
            pumps = _Pumps(proc, result, max_stdout)
        except (RuntimeError, MemoryError) as exc:  # can't start new thread (ulimit -u, -v)
            limited = limit_reason(exc) or f"resource limit: {exc}"
            result.error, result.resource_limit = limited, limited
            kill_group(proc)
            finished = True
            return result
        if stdin_data is not None and proc.stdin is not None:
            try:
                proc.stdin.write(stdin_data.encode())
                proc.stdin.close()
            except OSError:
                pass
        allowance = _read_protocol(
            pumps.lines, result, time.monotonic() + total, step_timeout, max_events, start
        )
        pumps.stop.set()
        if result.timed_out:
            result.data["_allowance"] = round(allowance, 3)
            kill_group(proc)
        else:
            try:
                proc.wait(timeout=max(1.0, step_timeout))
            except subprocess.TimeoutExpired:
                # stdout closed but the process lingers: treat as hung.
                result.timed_out = True
                result.data["_allowance"] = round(allowance, 3)
                kill_group(proc)
        result.stderr_tail = pumps.finish()
        result.returncode = proc.returncode
        if proc.returncode is not None and proc.returncode < 0 and not result.overflow:
            result.signal = signal_name(-proc.returncode)
        if not result.ok and not result.timed_out:
            result.resource_limit = limit_in_stderr(result.stderr_tail)
        finished = True
    finally:
        if not finished and proc.poll() is None:  # interrupted mid-follow: nothing else will kill it
            killpg(proc)
        if pumps is not None:
            pumps.stop.set()
        close_pipes(proc)
        result.duration_s = time.monotonic() - start
    return result


#: the last lines of a child's stderr when a limit of this box stopped it, not the GPU
_LIMIT_TEXTS = (
    ("can't start new thread", "can't start a new thread"),
    ("memoryerror", "out of memory (MemoryError)"),
    ("cannot allocate memory", "cannot allocate memory"),
    ("failed to map segment from shared object", "cannot map a shared library (address space limit)"),
    ("resource temporarily unavailable", "resource temporarily unavailable (EAGAIN)"),
)


def limit_in_stderr(tail: str) -> str | None:
    """``"resource limit: ..."`` when the child's last stderr lines say a
    limit of this box stopped it (``ulimit -u``/``-v``): the same run then
    gives the same verdict wherever the limit hit."""
    text = "\n".join(tail.strip().splitlines()[-3:]).lower()
    for needle, what in _LIMIT_TEXTS:
        if needle in text:
            return f"resource limit: {what}"
    return None


def _child_time(msg: Mapping[str, Any], spawned_at: float, now: float) -> float:
    """When the child says a step began (its ``"t"``, on the shared monotonic
    clock), if that is plausible: not before it was started, not after now.
    Otherwise, and for children that send no ``t``, when we read the line."""
    t = msg.get("t")
    if isinstance(t, (int, float)) and not isinstance(t, bool) and spawned_at - 0.5 <= t <= now + 0.05:
        return min(float(t), now)
    return now


def _read_protocol(
    lines: queue.Queue[bytes | None],
    result: ChildResult,
    hard_deadline: float,
    step_timeout: float,
    max_events: int,
    spawned_at: float,
) -> float:
    """Apply the child's messages to ``result`` until its stdout ends or it is
    silent past its allowance (``result.timed_out``); the last allowance.

    A step's allowance runs from when the child began it: lines a child
    wrote before we followed it (started early) are judged by their time."""
    allowance = step_timeout
    step_started: float | None = None
    deadline = time.monotonic() + allowance
    while True:
        now = time.monotonic()
        wait = min(deadline, hard_deadline) - now
        if wait <= 0:
            result.timed_out = True
            break
        try:
            raw = lines.get(timeout=wait)
        except queue.Empty:
            continue
        if raw is None:  # stdout closed: the child is done or dead
            break
        text = raw.decode("utf-8", errors="replace").strip()
        if not text:
            continue
        try:
            msg = json.loads(text)
            if not isinstance(msg, dict):
                raise ValueError("not an object")
        except ValueError:
            result.garbage += 1
            if len(result.garbage_sample) < 3:
                result.garbage_sample.append(text[:200])
            continue
        allowance = step_timeout
        said = _child_time(msg, spawned_at, time.monotonic())
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
        if isinstance(msg.get("event"), dict) and len(result.events) < max_events:
            result.events.append(msg["event"])
        if msg.get("done"):
            result.finished = True
            result.step = None
        # the allowance of a step runs from its begin (a line read late, from a
        # child started early, leaves less of it); any other line renews it
        deadline = (said if "begin" in msg else time.monotonic()) + allowance

    return allowance
