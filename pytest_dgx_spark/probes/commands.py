"""Who starts, reads, times out and kills a probe process: the one owner of that policy.

Every probe runs in a session of its own (killed as a group; a process in D state is never
waited for again) and every pipe read polls, so a daemon that holds a pipe open after its
command exited cannot make a read wait past a deadline.
"""

from __future__ import annotations

import errno
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import asdict, dataclass, field
from typing import IO, Any, TypedDict

MAX_OUTPUT = 1 << 20  # output kept per stream; nvidia-smi -q is ~15 kB
POLL_S = 0.05  # the longest one poll of a pipe waits before checking whether to stop
#: how long a pipe may stay quiet after its process exited before reading stops
#: (a process it started that still holds the pipe open is not waited for)
HELD_GRACE_S = 0.25
#: errno values that mean "a limit of this box or user" (``ulimit -u``/``-v``), not a fault
LIMIT_ERRNOS = frozenset({errno.EAGAIN, errno.ENOMEM, errno.EMFILE, errno.ENFILE})


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class CommandExtra(TypedDict, total=False):
    timeout: float
    resource_limit: str  # the command could not start for a limit of this box
    pipes_held: str  # it exited, and a process it started held its output open
    hung_before: str  # not started: this program hung earlier in the run (its driver is wedged)


@dataclass
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
    extra: CommandExtra = field(default_factory=lambda: CommandExtra())

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
        if self.timed_out and self.extra.get("hung_before"):
            return (f"{self.name} not asked again: an earlier {self.extra['hung_before']} call in this run "
                    f"did not answer within {self.extra.get('timeout', '?')} s")
        if self.timed_out:
            return f"{self.name} did not answer within {self.extra.get('timeout', '?')} s (killed)"
        if self.signal:
            return f"{self.name} was killed by {self.signal}"
        if self.returncode != 0:
            first = next((ln.strip() for ln in (self.stderr or self.stdout).splitlines() if ln.strip()), "")
            return f"{self.name} exited {self.returncode}" + (f": {first[:200]}" if first else "")
        return "ok"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CommandResult:
        return cls(**dict(data))


class ResourceLimit(RuntimeError):
    """A probe was stopped by a limit of this box or user; the message is the ``"resource limit: ..."`` line."""


def limit_reason(exc: BaseException) -> str | None:
    """``"resource limit: ..."`` when ``exc`` is a limit of this box or user (EAGAIN under
    ``ulimit -u``, no new thread, memory refused): it says nothing about the GPU, so a check skips."""
    if isinstance(exc, ResourceLimit):
        return str(exc)
    if isinstance(exc, MemoryError):
        return "resource limit: out of memory (MemoryError)"
    if isinstance(exc, OSError) and exc.errno in LIMIT_ERRNOS:
        return f"resource limit: {exc.strerror or exc} ({errno.errorcode.get(exc.errno or 0, '?')})"
    if isinstance(exc, RuntimeError) and "can't start new thread" in str(exc):
        return "resource limit: can't start a new thread"
    return None


#: a child's last stderr lines when a limit of this box stopped it, not the GPU
_LIMIT_TEXTS = (
    ("can't start new thread", "can't start a new thread"), ("memoryerror", "out of memory (MemoryError)"),
    ("cannot allocate memory", "cannot allocate memory"),
    ("resource temporarily unavailable", "resource temporarily unavailable (EAGAIN)"),
)


def limit_in_stderr(tail: str) -> str | None:
    """``"resource limit: ..."`` when a child's last stderr lines say a limit of this box stopped it."""
    text = "\n".join(tail.strip().splitlines()[-3:]).lower()
    return next((f"resource limit: {what}" for needle, what in _LIMIT_TEXTS if needle in text), None)


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


_PR_SET_PDEATHSIG = 1
_PRCTL: Any = None


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` setting ``PR_SET_PDEATHSIG`` to SIGKILL (Linux; else None): when pytest
    dies without its ``finally`` blocks (``os._exit``, a SIGKILL from CI) each probe dies with it.
    The kernel signals when the *thread* that started the child ends: every caller waits for
    (or kills) its child before its thread ends."""
    global _PRCTL
    if _PRCTL is None:  # looked up once in the parent: between fork and exec the child only calls it
        import ctypes  # lazy: importing ctypes dlopens libc, which a replay must not do

        try:
            _PRCTL = ctypes.CDLL(None, use_errno=True).prctl if os.uname().sysname == "Linux" else False
        except (OSError, AttributeError):
            _PRCTL = False
    if not _PRCTL:
        return None
    prctl, parent = _PRCTL, os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the line above
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


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


def killpg(proc: subprocess.Popen[Any]) -> None:
    """SIGKILL the child's process group without waiting for it."""
    with suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)


def kill_group(proc: subprocess.Popen[Any]) -> None:
    """SIGKILL the child's process group; reap it if that is quick (never block on a D-state child)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        with suppress(OSError):
            proc.kill()
    with suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=2)


#: probe processes running now, so a run that ends early (``-x``, Ctrl-C) kills them
_RUNNING: set[subprocess.Popen[Any]] = set()
_RUNNING_LOCK = threading.Lock()
#: set when an end signal arrived: a probe another thread was starting at that moment (its
#: Popen had not returned, so it was not tracked yet) is killed as soon as it is tracked
_ENDING = threading.Event()


def track(proc: subprocess.Popen[Any]) -> None:
    with _RUNNING_LOCK:
        if not _ENDING.is_set():
            _RUNNING.add(proc)
            return
    killpg(proc)


def untrack(proc: subprocess.Popen[Any]) -> None:
    with _RUNNING_LOCK:
        _RUNNING.discard(proc)


def kill_running() -> int:
    """SIGKILL the process group of every probe still running; how many there were."""
    with _RUNNING_LOCK:
        procs = [p for p in _RUNNING if p.poll() is None]
        _RUNNING.clear()
    for proc in procs:
        killpg(proc)
    return len(procs)


class Interrupted(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP arrived and every probe group was killed: pytest ends the run
    as interrupted, the CLI with ``128 + signum``."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"{signal_name(signum)}: every probe was killed")
        self.signum = signum


#: signals that end a run; probes live in sessions of their own, so a CI runner's kill of
#: pytest's process group never reaches them: we kill them on the way out
END_SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))
_PREVIOUS: dict[int, Any] = {}
_HOOKS: list[Callable[[int], None]] = []


def _on_signal(signum: int, frame: Any) -> None:
    _ENDING.set()
    kill_running()
    for hook in list(_HOOKS):
        with suppress(Exception):  # nothing may stop the way out
            hook(signum)
    previous = _PREVIOUS.get(signum)
    if callable(previous) and previous is not signal.default_int_handler:
        previous(signum, frame)  # someone else's handler (a CI harness): let it decide
        return
    raise Interrupted(signum)


def install_signal_handlers(hook: Callable[[int], None] | None = None) -> bool:
    """Kill every probe group on SIGINT/SIGTERM/SIGHUP, run ``hook(signum)``, raise
    :class:`Interrupted`. An ignored signal stays ignored (``nohup``); off the main thread: False."""
    if threading.current_thread() is not threading.main_thread():
        return False
    _ENDING.clear()
    if hook is not None and hook not in _HOOKS:
        _HOOKS.append(hook)
    for signum in END_SIGNALS:
        if signum in _PREVIOUS:
            continue
        with suppress(ValueError, OSError):
            previous = signal.getsignal(signum)
            if previous is not signal.SIG_IGN:
                signal.signal(signum, _on_signal)
                _PREVIOUS[signum] = previous
    return True


def restore_signal_handlers() -> None:
    """Put back the handlers :func:`install_signal_handlers` replaced."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum, previous in list(_PREVIOUS.items()):
        with suppress(ValueError, OSError, TypeError):
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
    _PREVIOUS.clear()
    _HOOKS.clear()
    _ENDING.clear()


def run_command(
    argv: Sequence[str], *, timeout: float, env: Mapping[str, str] | None = None, cwd: str | None = None
) -> CommandResult:
    """Run ``argv`` and capture its output; never raises, returns within ``timeout`` plus the 2 s
    :func:`kill_group` allows for reaping. The program is found by :func:`find_program`."""
    argv = [str(a) for a in argv]
    result = CommandResult(argv=argv, extra={"timeout": timeout})
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
            result.extra["resource_limit"] = limited
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
    names = {proc.stdout.fileno(): "stdout", proc.stderr.fileno(): "stderr"}
    kept = {"stdout": bytearray(), "stderr": bytearray()}
    poller = select.poll()
    for fd in names:
        poller.register(fd, select.POLLIN | select.POLLPRI)
    open_fds = set(names)
    quiet_since: float | None = None
    out_of_time = False
    while open_fds and result.overflow is None:
        left = deadline - time.monotonic()
        if left <= 0:
            out_of_time = True
            break
        events = poller.poll(max(min(left, POLL_S), 0.001) * 1000)
        for fd, _ in events:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                continue
            except OSError:
                chunk = b""
            if not chunk:
                poller.unregister(fd)
                open_fds.discard(fd)
                continue
            room = MAX_OUTPUT - len(kept[names[fd]])
            kept[names[fd]] += chunk[:room]
            if len(chunk) > room:
                result.overflow = names[fd]
                killpg(proc)
                break
        if events:
            quiet_since = None
        elif proc.poll() is not None:
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since >= HELD_GRACE_S:
                result.extra["pipes_held"] = "its output stayed open after it exited (a process it started holds it)"
                break
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
    result.stdout, result.stderr = (kept[n].decode("utf-8", "replace") for n in kept)
    result.returncode = proc.returncode
    result.signal = exit_signal(proc, result.overflow)
