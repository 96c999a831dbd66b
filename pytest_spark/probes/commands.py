"""Run an external command with a timeout, in its own process group.

A wedged driver leaves ``nvidia-smi`` hanging in the kernel; the only safe
way to stop waiting is to kill the whole process group and not wait again
for a child that may sit in D state (a process in D state cannot be killed until its kernel call returns).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

#: output kept per stream; nvidia-smi -q is ~15 kB
MAX_OUTPUT = 1 << 20


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


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
    extra: dict[str, Any] = field(default_factory=dict)

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


def _decode(data: bytes | None) -> str:
    if not data:
        return ""
    return data[:MAX_OUTPUT].decode("utf-8", errors="replace")


class _CappedReader(threading.Thread):
    """Read one pipe into memory, at most ``cap`` bytes.

    The cap holds while reading: a tool that prints without end (``yes``, a
    driver stuck in a loop) is killed with its group as soon as it passes the
    cap, instead of filling memory until the timeout (``communicate`` keeps
    everything, and a fast printer writes gigabytes in a few seconds).
    """

    def __init__(self, proc: subprocess.Popen[bytes], stream: Any, name: str, cap: int) -> None:
        super().__init__(name=f"spark-read-{name}", daemon=True)
        self.proc, self.stream, self.stream_name, self.cap = proc, stream, name, cap
        self.chunks: list[bytes] = []
        self.size = 0
        self.overflow = False

    def run(self) -> None:
        try:
            while True:
                chunk = self.stream.read1(65536) if hasattr(self.stream, "read1") else self.stream.read(65536)
                if not chunk:
                    return
                keep = chunk[: max(self.cap - self.size, 0)]
                self.chunks.append(keep)
                self.size += len(keep)
                if len(keep) < len(chunk):
                    self.overflow = True
                    killpg(self.proc)
                    return
        except (OSError, ValueError):  # the pipe was closed under us: the run is over
            return

    def data(self) -> bytes:
        return b"".join(self.chunks)


def killpg(proc: subprocess.Popen[Any]) -> None:
    """SIGKILL the child's process group without waiting for it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass


#: probe processes running now, so a run that ends early (``-x``, Ctrl-C, a
#: background probe nobody waited for) can kill them instead of orphaning them
_RUNNING: set[subprocess.Popen[Any]] = set()
_RUNNING_LOCK = threading.Lock()


def track(proc: subprocess.Popen[Any]) -> None:
    with _RUNNING_LOCK:
        _RUNNING.add(proc)


def untrack(proc: subprocess.Popen[Any]) -> None:
    with _RUNNING_LOCK:
        _RUNNING.discard(proc)


def kill_running() -> int:
    """SIGKILL the process group of every probe still running; how many there were."""
    with _RUNNING_LOCK:
        procs = [p for p in _RUNNING if p.poll() is None]
        _RUNNING.clear()
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
    return len(procs)


class Interrupted(KeyboardInterrupt):
    """A SIGINT, SIGTERM or SIGHUP arrived; every probe group was killed first.

    A KeyboardInterrupt, so pytest ends the run as interrupted (running its
    teardown) and the CLI ends with ``128 + signum``.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(f"{signal_name(signum)}: every probe was killed")
        self.signum = signum


#: signals that end a run; probes start in their own session (so a wedged one
#: can be killed as a group), which also means a CI runner's kill of the
#: pytest process group never reaches them: we kill them on the way out
END_SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))
_PREVIOUS: dict[int, Any] = {}
_HOOKS: list[Callable[[int], None]] = []


def _on_signal(signum: int, frame: Any) -> None:
    kill_running()
    for hook in list(_HOOKS):
        try:
            hook(signum)
        except Exception:  # nothing may stop the way out
            pass
    previous = _PREVIOUS.get(signum)
    if callable(previous) and previous is not signal.default_int_handler:
        previous(signum, frame)  # someone else's handler (a CI harness): let it decide
        return
    raise Interrupted(signum)


def install_signal_handlers(hook: Callable[[int], None] | None = None) -> bool:
    """Kill every probe group on SIGINT, SIGTERM and SIGHUP, then raise
    :class:`Interrupted`. ``hook(signum)`` runs too (the xdist controller
    passes the signal on to its workers). An ignored signal stays ignored
    (``nohup``). Only the main thread may set handlers: elsewhere, False."""
    if threading.current_thread() is not threading.main_thread():
        return False
    if hook is not None and hook not in _HOOKS:
        _HOOKS.append(hook)
    for signum in END_SIGNALS:
        if signum in _PREVIOUS:
            continue
        try:
            previous = signal.getsignal(signum)
            if previous is signal.SIG_IGN:
                continue
            signal.signal(signum, _on_signal)
            _PREVIOUS[signum] = previous
        except (ValueError, OSError):
            continue
    return True


def restore_signal_handlers() -> None:
    """Put back the handlers :func:`install_signal_handlers` replaced."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum, previous in list(_PREVIOUS.items()):
        try:
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        except (ValueError, OSError, TypeError):
            pass
    _PREVIOUS.clear()
    _HOOKS.clear()


def close_pipes(proc: subprocess.Popen[Any]) -> None:
    """Close a child's stdout/stderr: a killed child's pipes are otherwise left
    to the garbage collector (and warn under ``-W error::ResourceWarning``)."""
    for stream in (proc.stdout, proc.stderr):
        try:
            if stream is not None:
                stream.close()
        except OSError:
            pass


def kill_group(proc: subprocess.Popen[Any]) -> None:
    """SIGKILL the child's process group; reap it if that is quick."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        try:
            proc.kill()
        except OSError:
            pass
    try:
        proc.wait(timeout=2)
    except subprocess.TimeoutExpired:
        # A process in uninterruptible sleep (wedged driver) cannot be reaped;
        # never block on it again.
        pass


def run_command(
    argv: Sequence[str],
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
) -> CommandResult:
    """Run ``argv`` and capture its output; never raises, never hangs.

    The executable is looked up on ``env["PATH"]`` (so a test can put a fake
    ``nvidia-smi`` first on PATH).
    """
    argv = [str(a) for a in argv]
    result = CommandResult(argv=argv, extra={"timeout": timeout})
    environ = dict(os.environ if env is None else env)
    exe = argv[0]
    if os.sep not in exe:
        found = shutil.which(exe, path=environ.get("PATH", os.defpath))
        if found is None:
            result.error = "not found on PATH"
            return result
        exe = found
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            [exe, *argv[1:]],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=environ,
            cwd=cwd,
            start_new_session=True,
        )
    except OSError as exc:
        result.error = exc.strerror or str(exc)
        return result
    track(proc)
    try:
        _collect(proc, result, start + timeout)
    finally:
        untrack(proc)
        close_pipes(proc)
    result.duration_s = time.monotonic() - start
    return result


def _collect(proc: subprocess.Popen[bytes], result: CommandResult, deadline: float) -> None:
    """Read both pipes (capped) until the command ends, overflows or runs out of time."""
    readers = [
        _CappedReader(proc, proc.stdout, "stdout", MAX_OUTPUT),
        _CappedReader(proc, proc.stderr, "stderr", MAX_OUTPUT),
    ]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join(timeout=max(deadline - time.monotonic(), 0))
    over = [r.stream_name for r in readers if r.overflow]
    if over:
        result.overflow = over[0]
        kill_group(proc)
    else:
        try:
            if any(r.is_alive() for r in readers):  # pipes still open at the deadline
                raise subprocess.TimeoutExpired(result.argv, 0)
            proc.wait(timeout=max(deadline - time.monotonic(), 0.001))
        except subprocess.TimeoutExpired:
            kill_group(proc)
            result.timed_out = True
            return
    result.stdout, result.stderr = _decode(readers[0].data()), _decode(readers[1].data())
    result.returncode = proc.returncode
    if proc.returncode is not None and proc.returncode < 0 and not result.overflow:
        result.signal = signal_name(-proc.returncode)
