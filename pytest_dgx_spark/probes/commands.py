"""Who starts, reads, times out and kills a probe process: the one owner of that policy.

Every probe runs in a session of its own (killed as a group; a process in D state is never
waited for again) and every pipe read polls, so a daemon that holds a pipe open after its
command exited cannot make a read wait past a deadline. How long a probe lives (its group killed,
the registry of running probes, the end signals' handlers) is :mod:`.lifecycle`'s, re-exported here.
"""

from __future__ import annotations

import os
import select
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import asdict, field
from typing import IO, Any

from pytest_dgx_spark.datadef import define
from pytest_dgx_spark.probes.lifecycle import (
    END_SIGNALS,
    LIMIT_ERRNOS,
    Interrupted,
    ResourceLimit,
    die_with_parent,
    install_signal_handlers,
    kill_group,
    kill_running,
    killpg,
    limit_in_stderr,
    limit_reason,
    restore_signal_handlers,
    signal_name,
    track,
    untrack,
)

__all__ = [
    "END_SIGNALS", "HELD_GRACE_S", "LIMIT_ERRNOS", "MAX_OUTPUT", "POLL_S", "CommandExtra", "CommandResult",
    "Interrupted", "Pipe", "ResourceLimit", "absolute_path_entries", "close_pipes", "die_with_parent",
    "exit_signal", "find_program", "finish", "install_signal_handlers", "kill_group", "kill_running",
    "killpg", "limit_in_stderr", "limit_reason", "pipe", "restore_signal_handlers", "run_command",
    "safe_env", "signal_name", "start", "track", "untrack",
]  # fmt: skip

MAX_OUTPUT = 1 << 20  # output kept per stream; nvidia-smi -q is ~15 kB
POLL_S = 0.05  # the longest one poll of a pipe waits before checking whether to stop
#: how long a pipe may stay quiet after its process exited before reading stops
#: (a process it started that still holds the pipe open is not waited for)
HELD_GRACE_S = 0.25
#: the result's ``extra.pipes_held`` when that happened
HELD = "its output stayed open after it exited (a process it started holds it)"


@define
class CommandExtra:
    """What a run adds beyond its exit; each ``None`` unless it happened (and then absent from the
    result's dict, as in every capture written before it was a dataclass)."""

    timeout: float | None = None
    resource_limit: str | None = None  # the command could not start for a limit of this box
    pipes_held: str | None = None  # it exited, and a process it started held its output open
    hung_before: str | None = None  # not started: this program hung earlier in the run (its driver is wedged)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CommandExtra:
        return cls(**{k: data[k] for k in _EXTRA_FIELDS if k in data})


_EXTRA_FIELDS = tuple(CommandExtra.__dataclass_fields__)


@define
class CommandResult:
    argv: list[str]
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""
    duration_s: float = 0.0
    timed_out: bool = False
    signal: str | None = None
    error: str | None = None  # could not start: "not found", permission, ...
    #: the stream that went past MAX_OUTPUT ("stdout"/"stderr"); the command was killed there
    overflow: str | None = None
    extra: CommandExtra = field(default_factory=CommandExtra)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and self.error is None and self.overflow is None

    @property
    def name(self) -> str:
        return os.path.basename(self.argv[0]) if self.argv else "?"

    def describe(self) -> str:
        """One line saying what went wrong (or ``"ok"``)."""
        if self.error:
            return f"{self.name}: {self.error}"
        if self.overflow:
            return f"{self.name} printed more than {MAX_OUTPUT >> 20} MiB on {self.overflow} (killed)"
        if self.timed_out:
            return self._timed_out()
        if self.signal:
            return f"{self.name} was killed by {self.signal}"
        if self.returncode != 0:
            first = next((ln.strip() for ln in (self.stderr or self.stdout).splitlines() if ln.strip()), "")
            return f"{self.name} exited {self.returncode}" + (f": {first[:200]}" if first else "")
        return "ok"

    def _timed_out(self) -> str:
        timeout = "?" if self.extra.timeout is None else self.extra.timeout
        if self.extra.hung_before:
            return (f"{self.name} not asked again: an earlier {self.extra.hung_before} call in this run "
                    f"did not answer within {timeout} s")
        return f"{self.name} did not answer within {timeout} s (killed)"

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["extra"] = self.extra.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CommandResult:
        fields = dict(data)
        fields["extra"] = CommandExtra.from_dict(fields.get("extra") or {})
        return cls(**fields)


def find_program(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """The absolute path of program ``name`` on ``env["PATH"]``, or None. Only absolute PATH
    entries count (an empty, ``.`` or relative one is the working folder: a checkout's own
    ``./nvidia-smi`` must never run); a name with a slash is not looked up."""
    if os.sep in name:
        return name if os.path.isabs(name) else None
    for entry in absolute_path_entries((env if env is not None else os.environ).get("PATH", os.defpath)):
        full = os.path.join(entry, name)
        with suppress(OSError, ValueError):
            if os.path.isfile(full) and os.access(full, os.X_OK):
                return full
    return None


def absolute_path_entries(path: str) -> list[str]:
    return [e for e in path.split(os.pathsep) if e and os.path.isabs(e)]


def safe_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without relative and empty PATH entries (nor does ``ctypes.util.find_library``
    then run anything from the working folder)."""
    out = dict(env)
    if "PATH" in out:
        out["PATH"] = os.pathsep.join(absolute_path_entries(out["PATH"]))
    return out


def start(
    argv: Sequence[str], env: Mapping[str, str], *, stdin: bool = False, cwd: str | None = None
) -> subprocess.Popen[bytes] | tuple[str, str | None]:
    """Start a probe process in a session of its own, tracked so an early end of the run kills
    it; ``(error, resource limit or None)`` when it cannot start."""
    try:
        proc = subprocess.Popen(
            list(argv), stdin=subprocess.PIPE if stdin else subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, env=dict(env), cwd=cwd, start_new_session=True,
            preexec_fn=die_with_parent(),
        )
    except (OSError, subprocess.SubprocessError, MemoryError) as exc:
        limited = limit_reason(exc)
        return limited or getattr(exc, "strerror", None) or str(exc), limited
    track(proc)
    return proc


def finish(proc: subprocess.Popen[Any]) -> None:
    """The end of every follow, however it ends (pytest-timeout, Ctrl-C included): the group is
    killed, and the pipes are closed without waiting for a writer. Killed even when the leader
    exited: a worker it forked (``import torch`` may start one) stays in the group it started in,
    and would outlive the run (issue 34 item 15). The group's id is the leader's pid, which the
    kernel does not hand out again while a member of the group lives."""
    untrack(proc)
    killpg(proc)
    close_pipes(proc)


def exit_signal(proc: subprocess.Popen[Any], overflow: str | None) -> str | None:
    """The signal that ended ``proc`` (not ours for an overflow), by name."""
    code = proc.returncode
    return signal_name(-code) if code is not None and code < 0 and not overflow else None


class Pipe:
    """One pipe of a child, read without ever blocking past a poll: :meth:`read` returns ``b""``
    at the end, once :meth:`close` was called (from any thread), or once ``proc`` exited and the
    pipe stayed quiet for :data:`HELD_GRACE_S`. :meth:`close` never waits for a writer; a reader
    still in its poll closes the pipe on its way out."""

    def __init__(self, stream: IO[bytes], proc: subprocess.Popen[Any]) -> None:
        self.stream, self.proc, self.fd = stream, proc, stream.fileno()
        self.stopped = threading.Event()
        self._lock = threading.Lock()
        self._close_when_done = False
        self._poller = select.poll()
        self._poller.register(self.fd, select.POLLIN | select.POLLPRI)

    def read(self, n: int = 65536) -> bytes:
        with self._lock:
            try:
                return self._read(n)
            finally:
                if self._close_when_done:
                    self._close()

    read1 = read

    def _read(self, n: int) -> bytes:
        quiet_since: float | None = None
        while not self.stopped.is_set():
            try:
                if self._poller.poll(POLL_S * 1000):
                    return os.read(self.fd, n)
            except BlockingIOError:
                continue
            except (OSError, ValueError):
                return b""
            if self.proc.poll() is not None:
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since >= HELD_GRACE_S:
                    return b""
        return b""

    def close(self, wait: float = 1.0) -> None:
        """Stop the reader and close the pipe, waiting at most ``wait`` for the reader to leave its poll."""
        self._close_when_done = True
        self.stopped.set()
        if self._lock.acquire(timeout=wait):
            try:
                self._close()
            finally:
                self._lock.release()

    def _close(self) -> None:
        with suppress(OSError, ValueError):
            self.stream.close()


def pipe(proc: subprocess.Popen[Any], name: str) -> Pipe:
    """The :class:`Pipe` of ``proc.stdout``/``proc.stderr``, kept on ``proc`` for :func:`close_pipes`."""
    pipes: dict[str, Pipe] = proc.__dict__.setdefault("_spark_pipes", {})
    if name not in pipes:
        pipes[name] = Pipe(getattr(proc, name), proc)
    return pipes[name]


def close_pipes(proc: subprocess.Popen[Any]) -> None:
    """Close a child's stdout/stderr without waiting for a writer (a killed child's pipes would
    otherwise warn under ``-W error::ResourceWarning``); a :func:`pipe` is stopped first."""
    pipes: dict[str, Pipe] = proc.__dict__.get("_spark_pipes", {})
    for name in ("stdout", "stderr"):
        stream = getattr(proc, name, None)
        if name in pipes:
            pipes[name].close()
        elif stream is not None:
            with suppress(OSError, ValueError):
                stream.close()


def run_command(
    argv: Sequence[str], *, timeout: float, env: Mapping[str, str] | None = None, cwd: str | None = None
) -> CommandResult:
    """Run ``argv`` and capture its output; never raises, returns within ``timeout`` plus the 2 s
    :func:`kill_group` allows for reaping. The program is found by :func:`find_program`."""
    argv = [str(a) for a in argv]
    result = CommandResult(argv=argv, extra=CommandExtra(timeout=timeout))
    environ = safe_env(os.environ if env is None else env)
    exe = find_program(argv[0], environ)
    if exe is None:
        result.error = "not found on PATH" if os.sep not in argv[0] else "not an absolute path"
        return result
    begun = time.monotonic()
    proc = start([exe, *argv[1:]], environ, cwd=cwd)
    if isinstance(proc, tuple):
        result.error, limited = proc
        if limited:
            result.extra.resource_limit = limited
        return result
    try:
        _collect(proc, result, begun + timeout)
    finally:
        finish(proc)
    result.duration_s = time.monotonic() - begun
    return result


def _collect(proc: subprocess.Popen[bytes], result: CommandResult, deadline: float) -> None:
    """Read both pipes (capped) in this thread until they close, the command overflows or runs out
    of time, or it exited and a process it started holds them open."""
    assert proc.stdout is not None and proc.stderr is not None
    streams = _Streams(proc, result)
    out_of_time = streams.read_until(deadline)
    if result.overflow:
        kill_group(proc)
    else:
        try:
            if out_of_time:  # pipes still open at the deadline
                raise subprocess.TimeoutExpired(result.argv, 0)
            proc.wait(timeout=max(deadline - time.monotonic(), 0.001))
        except subprocess.TimeoutExpired:
            kill_group(proc)
            result.timed_out = True
            return
    result.stdout, result.stderr = (streams.kept[n].decode("utf-8", "replace") for n in streams.kept)
    result.returncode = proc.returncode
    result.signal = exit_signal(proc, result.overflow)


class _Streams:
    """A child's stdout and stderr, polled together in one thread, each kept up to :data:`MAX_OUTPUT`."""

    def __init__(self, proc: subprocess.Popen[bytes], result: CommandResult) -> None:
        assert proc.stdout is not None and proc.stderr is not None
        self.proc, self.result = proc, result
        self.names = {proc.stdout.fileno(): "stdout", proc.stderr.fileno(): "stderr"}
        self.kept = {"stdout": bytearray(), "stderr": bytearray()}
        self.poller = select.poll()
        for fd in self.names:
            self.poller.register(fd, select.POLLIN | select.POLLPRI)
        self.open_fds = set(self.names)

    def read_until(self, deadline: float) -> bool:
        """Read until both pipes close, one overflows, or the child exited and they stayed quiet for
        :data:`HELD_GRACE_S`; true when the deadline came first."""
        quiet_since: float | None = None
        while self.open_fds and self.result.overflow is None:
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            events = self.poller.poll(max(min(left, POLL_S), 0.001) * 1000)
            for fd, _ in events:
                if not self._take(fd):
                    break
            if events:
                quiet_since = None
            elif self.proc.poll() is not None:
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since >= HELD_GRACE_S:
                    self.result.extra.pipes_held = HELD
                    break
        return False

    def _take(self, fd: int) -> bool:
        """One read of ``fd`` (its end closes it); false when it went past :data:`MAX_OUTPUT` (the
        group is killed)."""
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return True
        except OSError:
            chunk = b""
        if not chunk:
            self.poller.unregister(fd)
            self.open_fds.discard(fd)
            return True
        kept = self.kept[self.names[fd]]
        room = MAX_OUTPUT - len(kept)
        kept += chunk[:room]
        if len(chunk) > room:
            self.result.overflow = self.names[fd]
            killpg(self.proc)
            return False
        return True
