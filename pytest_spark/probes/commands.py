"""Run an external command with a timeout, in its own process group.

A wedged driver leaves ``nvidia-smi`` hanging in the kernel; the only safe
way to stop waiting is to kill the whole process group and not wait again
for a child that may sit in D state (EVIDENCE.md, "Timeouts and robustness").
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
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
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and self.error is None

    @property
    def name(self) -> str:
        return os.path.basename(self.argv[0]) if self.argv else "?"

    def describe(self) -> str:
        """One line saying what went wrong (or ``"ok"``)."""
        if self.error:
            return f"{self.name}: {self.error}"
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
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        result.timed_out = True
        result.duration_s = time.monotonic() - start
        close_pipes(proc)
        return result
    finally:
        untrack(proc)
    result.duration_s = time.monotonic() - start
    result.stdout, result.stderr = _decode(out), _decode(err)
    result.returncode = proc.returncode
    if proc.returncode is not None and proc.returncode < 0:
        result.signal = signal_name(-proc.returncode)
    return result
