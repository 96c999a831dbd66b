"""Run an external command with a timeout, in its own process group.

A wedged driver leaves ``nvidia-smi`` hanging in the kernel; the only safe
way to stop waiting is to kill the whole process group and not wait again
for a child that may sit in D state (a process in D state cannot be killed until its kernel call returns).

Nothing here blocks on a pipe without a deadline. A pipe can stay open long
after its command was killed or exited: the wedged child itself (SIGKILL does
not reach it yet), a daemon it started (``import torch`` can start one), a
helper that left for a session of its own. A blocking ``read`` on such a pipe
waits for the last writer, and closing a buffered reader that another thread
is blocked in waits for that read. So every read polls (:class:`Pipe`, or the
one-thread loop of :func:`run_command`) and checks, between polls, whether it
was told to stop or whether its process exited and the pipe went quiet; only
the reading side closes a pipe it is reading.
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
from dataclasses import asdict, dataclass, field
from typing import Any

#: output kept per stream; nvidia-smi -q is ~15 kB
MAX_OUTPUT = 1 << 20
#: the longest one poll of a pipe waits before checking whether to stop
POLL_S = 0.05
#: how long a pipe may stay quiet after its process exited before reading stops:
#: what the process wrote is in the pipe by then; a process it started that
#: still holds the pipe open (a daemon, a helper in another session) is not waited for
HELD_GRACE_S = 0.25
#: errno values that mean "a limit of this box or user" (``ulimit -u``/``-v``), not a fault
LIMIT_ERRNOS = frozenset({errno.EAGAIN, errno.ENOMEM, errno.EMFILE, errno.ENFILE})


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


class ResourceLimit(RuntimeError):
    """A probe was stopped by a limit of this box or user; its message is
    the ``"resource limit: ..."`` line."""


def limit_reason(exc: BaseException) -> str | None:
    """``"resource limit: ..."`` when ``exc`` is a limit of this box or user
    (a fork refused with EAGAIN under ``ulimit -u``, ``can't start new thread``,
    memory refused under ``ulimit -v``), else None. Such a failure says nothing
    about the GPU, so a check skips on it instead of calling the driver wedged."""
    if isinstance(exc, ResourceLimit):
        return str(exc)
    if isinstance(exc, MemoryError):
        return "resource limit: out of memory (MemoryError)"
    if isinstance(exc, OSError) and exc.errno in LIMIT_ERRNOS:
        return f"resource limit: {exc.strerror or exc} ({errno.errorcode.get(exc.errno or 0, '?')})"
    if isinstance(exc, RuntimeError) and "can't start new thread" in str(exc):
        return "resource limit: can't start a new thread"
    return None


def find_program(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """The absolute path of program ``name`` on ``env["PATH"]``, or None.

    Only absolute PATH entries count. An empty entry (``PATH="$PATH:"``), ``.``
    or a relative one (``bin``) means the working folder, so a checkout's own
    ``./nvidia-smi`` or ``./ldconfig`` would run, as root when the run is
    root's. Every program the tool runs is found here, never by ``shutil.which``.
    A name with a slash is not looked up (the caller chose that file).
    """
    if os.sep in name:
        return name if os.path.isabs(name) else None
    path = (env if env is not None else os.environ).get("PATH", os.defpath)
    for entry in absolute_path_entries(path):
        full = os.path.join(entry, name)
        try:
            if os.path.isfile(full) and os.access(full, os.X_OK):
                return full
        except (OSError, ValueError):
            continue
    return None


def absolute_path_entries(path: str) -> list[str]:
    """The absolute entries of a PATH string, in order (see :func:`find_program`)."""
    return [e for e in path.split(os.pathsep) if e and os.path.isabs(e)]


def safe_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with relative and empty PATH entries dropped: what the tool runs
    (and what a probe child runs in turn, ``ctypes.util.find_library`` runs
    ``gcc`` and ``ld`` from PATH) never comes from the working folder."""
    out = dict(env)
    if "PATH" in out:
        out["PATH"] = os.pathsep.join(absolute_path_entries(out["PATH"]))
    return out


_PR_SET_PDEATHSIG = 1
_PRCTL: Any = None


def _load_prctl() -> Any:
    """libc's ``prctl``, looked up once in the parent: the child between fork
    and exec only calls it (no import, no lookup there)."""
    global _PRCTL
    if _PRCTL is None:
        _PRCTL = False
        if os.uname().sysname == "Linux":
            try:
                import ctypes

                _PRCTL = ctypes.CDLL(None, use_errno=True).prctl
            except (OSError, AttributeError):
                _PRCTL = False
    return _PRCTL


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that sets ``PR_SET_PDEATHSIG`` to SIGKILL (Linux).

    Probes run in sessions of their own, so nothing of the parent's reaches
    them; when pytest dies without running its ``finally`` blocks
    (``--timeout-method=thread`` ends it with ``os._exit``, a SIGKILL from CI)
    the kernel kills each probe with it. None where prctl is not there.

    Note the kernel sends the signal when the *thread* that started the child
    ends: every caller here waits for (or kills) its child before its thread
    ends, and the early torch child is started by the thread that follows it.
    """
    prctl = _load_prctl()
    if not prctl:
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the line above
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


class Pipe:
    """One pipe of a child, read without ever blocking past a poll.

    :meth:`read` returns ``b""`` at the end of the pipe, once :meth:`close`
    was called (from any thread), or once ``proc`` has exited and the pipe
    stayed quiet for ``grace`` seconds (``held`` then says so: a process it
    started still holds the pipe). :meth:`close` never waits for a writer: the
    reader leaves its poll within :data:`POLL_S`, and if it has not yet, it
    closes the pipe itself on its way out.
    """

    def __init__(self, stream: Any, proc: subprocess.Popen[Any] | None = None, grace: float = HELD_GRACE_S) -> None:
        self.stream, self.proc, self.grace = stream, proc, grace
        self.fd = stream.fileno()
        self.stopped = threading.Event()
        self.held = False
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
                ready = self._poller.poll(POLL_S * 1000)
            except (OSError, ValueError):
                return b""
            if ready:
                try:
                    return os.read(self.fd, n)
                except BlockingIOError:
                    continue
                except (OSError, ValueError):
                    return b""
            if self.proc is not None and self.proc.poll() is not None:
                now = time.monotonic()
                quiet_since = quiet_since if quiet_since is not None else now
                if now - quiet_since >= self.grace:
                    self.held = True
                    return b""
        return b""

    def close(self, wait: float = 1.0) -> None:
        """Stop the reader and close the pipe, waiting at most ``wait`` for
        the reader to leave its poll (it closes the pipe itself if later)."""
        self._close_when_done = True
        self.stopped.set()
        if self._lock.acquire(timeout=wait):
            try:
                self._close()
            finally:
                self._lock.release()

    def _close(self) -> None:
        try:
            self.stream.close()
        except (OSError, ValueError):
            pass


def pipe(proc: subprocess.Popen[Any], name: str, grace: float = HELD_GRACE_S) -> Pipe:
    """The :class:`Pipe` reading ``proc.stdout``/``proc.stderr`` (``name``),
    made once and kept on ``proc`` so that :func:`close_pipes` can stop it."""
    pipes: dict[str, Pipe] = proc.__dict__.setdefault("_spark_pipes", {})
    if name not in pipes:
        pipes[name] = Pipe(getattr(proc, name), proc, grace)
    return pipes[name]


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
    """Close a child's stdout/stderr without ever waiting for a writer: a
    killed child's pipes are otherwise left to the garbage collector (and warn
    under ``-W error::ResourceWarning``). A pipe a thread reads through
    :func:`pipe` is stopped first; that thread closes it if it is mid-read."""
    pipes: dict[str, Pipe] = proc.__dict__.get("_spark_pipes", {})
    for name in ("stdout", "stderr"):
        stream = getattr(proc, name, None)
        if stream is None:
            continue
        if name in pipes:
            pipes[name].close()
            continue
        try:
            stream.close()
        except (OSError, ValueError):
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

    The executable is looked up on the absolute entries of ``env["PATH"]``
    (:func:`find_program`: a test puts a fake ``nvidia-smi`` first on PATH; the
    working folder never counts). The call returns within ``timeout`` plus the
    2 s :func:`kill_group` allows for reaping, whoever holds the pipes open.
    """
    argv = [str(a) for a in argv]
    result = CommandResult(argv=argv, extra={"timeout": timeout})
    environ = safe_env(os.environ if env is None else env)
    exe = find_program(argv[0], environ)
    if exe is None:
        result.error = "not found on PATH" if os.sep not in argv[0] else "not an absolute path"
        return result
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
            preexec_fn=die_with_parent(),
        )
    except (OSError, subprocess.SubprocessError) as exc:
        limited = limit_reason(exc)
        if limited:
            result.extra["resource_limit"] = limited
        result.error = limited or getattr(exc, "strerror", None) or str(exc)
        return result
    track(proc)
    try:
        _collect(proc, result, start + timeout)
    finally:
        untrack(proc)
        if proc.poll() is None:  # interrupted (pytest-timeout, Ctrl-C) before it ended
            killpg(proc)
        close_pipes(proc)
    result.duration_s = time.monotonic() - start
    return result


def _collect(proc: subprocess.Popen[bytes], result: CommandResult, deadline: float) -> None:
    """Read both pipes (capped) in this thread until they close, the command
    overflows or runs out of time, or it has exited and a process it started
    holds them open (then what it wrote is already read)."""
    assert proc.stdout is not None and proc.stderr is not None
    names = {proc.stdout.fileno(): "stdout", proc.stderr.fileno(): "stderr"}
    chunks: dict[str, list[bytes]] = {"stdout": [], "stderr": []}
    size = dict.fromkeys(chunks, 0)
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
            name = names[fd]
            keep = chunk[: max(MAX_OUTPUT - size[name], 0)]
            chunks[name].append(keep)
            size[name] += len(keep)
            if len(keep) < len(chunk):
                result.overflow = name
                killpg(proc)
                break
        if events:
            quiet_since = None
        elif proc.poll() is not None:
            now = time.monotonic()
            quiet_since = quiet_since if quiet_since is not None else now
            if now - quiet_since >= HELD_GRACE_S:
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
    result.stdout = _decode(b"".join(chunks["stdout"]))
    result.stderr = _decode(b"".join(chunks["stderr"]))
    result.returncode = proc.returncode
    if proc.returncode is not None and proc.returncode < 0 and not result.overflow:
        result.signal = signal_name(-proc.returncode)
