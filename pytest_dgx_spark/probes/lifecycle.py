"""How long a probe process lives: it dies with the run (``PR_SET_PDEATHSIG``), its group is
killed without waiting for a D-state child, and every probe running when the run ends early (``-x``,
Ctrl-C, a CI runner's SIGTERM) is killed on the way out, from a registry and the end signals'
handlers; and what says a limit of this box or user (``ulimit -u``/``-v``), not the GPU, stopped
one. :mod:`~pytest_dgx_spark.probes.commands` starts and reads them.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from contextlib import suppress
from typing import Any

#: errno values that mean "a limit of this box or user" (``ulimit -u``/``-v``), not a fault
LIMIT_ERRNOS = frozenset({errno.EAGAIN, errno.ENOMEM, errno.EMFILE, errno.ENFILE})


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


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
