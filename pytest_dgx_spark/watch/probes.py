"""What the watcher reads, each read bounded so a wedged driver or filesystem never stops the watch.

NVML runs in the probe child ``nvml_child.py`` (stream mode), asked for one sample per tick by a
byte on its stdin: a hung driver hangs the child, never us, and the tick says "no answer". The
host files (``/proc/meminfo``, ``/proc/buddyinfo``, the kernel log's new records) are read by one
worker thread whose answer the tick waits for only so long. Nothing here imports torch or starts a
GPU kernel.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import queue
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pytest_dgx_spark.probes import commands, kernel_log, procfs
from pytest_dgx_spark.probes.child import MAX_LINE, capped_lines, child_env, script_source
from pytest_dgx_spark.probes.memory_pressure import PAGE_SIZES_KIB, PMD_SIZE_FILE, parse_buddyinfo

#: an NVML child asked for a sample never samples on its own before this (seconds)
_NO_OWN_SAMPLES = 10 * 365 * 86400.0
#: new kernel-log records read per tick at most (a storm of lines is cut, the rest next tick)
MAX_NEW_RECORDS = 5000
#: GPU processes' command lines remembered
MAX_CMDS = 1024
#: bytes of /proc files read at most
PROC_LIMIT = 1 << 20


class NvmlStream:
    """The NVML child in stream mode; :meth:`ask` requests a sample, :meth:`take` waits for it."""

    def __init__(
        self, env: Mapping[str, str] | None = None, python: str | None = None, silent_after: float = 10.0
    ) -> None:
        self.silent_after = silent_after  # an unanswered request older than this is "no answer"
        self.env = dict(os.environ if env is None else env)
        self.python = python or sys.executable
        self.proc: subprocess.Popen[bytes] | None = None
        self.data: dict[str, Any] = {}
        self.problem: str | None = None
        self._cond = threading.Condition()
        self._samples = 0
        self._latest: dict[str, Any] | None = None
        self._asked_at: float | None = None  # an unanswered request since
        self._thread: threading.Thread | None = None
        self._cmds: dict[int, str] = {}

    def start(self) -> None:
        cfg = {
            "mode": "stream",
            "interval": _NO_OWN_SAMPLES,
            "procs_every": 0,
            "max_seconds": _NO_OWN_SAMPLES,
        }
        argv = [self.python, "-c", script_source("nvml_child.py"), json.dumps(cfg)]
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=child_env(base=self.env),
                start_new_session=True,
                preexec_fn=commands.die_with_parent(),
            )
        except OSError as exc:
            self.problem = f"could not start the NVML child: {exc.strerror or exc}"
            return
        self._asked_at = time.monotonic()  # the child's first sample comes unasked
        self._thread = threading.Thread(target=self._read, name="spark-watch-nvml", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        proc = self.proc
        assert proc is not None and proc.stdout is not None
        with contextlib.suppress(OSError, ValueError):
            for raw in capped_lines(proc.stdout, 1 << 62, MAX_LINE):
                if isinstance(raw, str):
                    self.problem = f"the NVML child printed {raw}; stopped"
                    commands.killpg(proc)
                    break
                try:
                    msg = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(msg, dict):
                    self._handle(msg)
        with self._cond:
            if self.problem is None:
                self.problem = f"the NVML child exited ({proc.poll()})"
            self._cond.notify_all()

    def _handle(self, msg: Mapping[str, Any]) -> None:
        with self._cond:
            if isinstance(msg.get("data"), dict):
                self.data.update(msg["data"])
                if self.data.get("import_error"):
                    self.problem = f"nvidia-ml-py (pynvml) not importable: {self.data['import_error']}"
                elif init := self.data.get("init_error"):
                    self.problem = f"NVML unavailable: {init.get('message') or init.get('name')}"
            if isinstance(msg.get("event"), dict):
                self._latest, self._asked_at = dict(msg["event"]), None
                for p in self._latest.get("procs") or []:  # the child names a process once: every sample does
                    if isinstance(p, dict) and isinstance(pid := p.get("pid"), int):
                        if p.get("cmd"):
                            self._cmds[pid] = str(p["cmd"])
                            while len(self._cmds) > MAX_CMDS:
                                del self._cmds[next(iter(self._cmds))]
                        elif pid in self._cmds:
                            p["cmd"] = self._cmds[pid]
                self._samples += 1
            self._cond.notify_all()

    def ask(self) -> None:
        """Request one sample (never blocks: a wedged child's pipe fills, the request is dropped)."""
        proc = self.proc
        if proc is None or proc.stdin is None or self.problem is not None:
            return
        if self._asked_at is None:
            self._asked_at = time.monotonic()
        with contextlib.suppress(OSError, ValueError):
            os.set_blocking(proc.stdin.fileno(), False)
            os.write(proc.stdin.fileno(), b"\n")

    def take(self, wait: float) -> tuple[dict[str, Any] | None, str]:
        """The sample answered since the last take (waiting up to ``wait`` s), and ``"ok"``, ``"pending"``
        (asked, not answered yet) or why none."""
        deadline = time.monotonic() + wait
        with self._cond:
            while self._latest is None and self.problem is None and time.monotonic() < deadline:
                self._cond.wait(max(0.0, deadline - time.monotonic()))
            got, self._latest = self._latest, None
            if got is not None:
                return got, "ok"
            if self.problem is not None:
                return None, self.problem
            asked = self._asked_at
        if asked is None or time.monotonic() - asked < self.silent_after:
            return None, "pending"
        return None, f"no answer for {time.monotonic() - asked:.0f} s"

    def stop(self) -> None:
        proc = self.proc
        if proc is None:
            return
        with contextlib.suppress(OSError, ValueError):
            if proc.stdin is not None:
                proc.stdin.close()
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            commands.kill_group(proc)
        if self._thread is not None:
            self._thread.join(timeout=1)
        with contextlib.suppress(OSError, ValueError):
            if proc.stdout is not None:
                proc.stdout.close()


class KmsgTail:
    """The kernel log's records since the watch began: ``<root>/dev/kmsg`` kept open (the device
    gives each reader its own position; a regular file planted there is followed by its offset)."""

    def __init__(self, path: str) -> None:
        self.path, self.fd = path, -1
        self.problem: str | None = None
        self.device = False
        self._rest = b""
        self.kept: list[
            kernel_log.KernelRecord
        ] = []  # every record since start, for the post-mortem (bounded)

    def open(self) -> None:
        try:
            self.fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
            mode = os.fstat(self.fd).st_mode
        except OSError as exc:
            self.problem = (
                f"kernel log not read ({self.path}: {exc.strerror or exc}): no Xid or OOM-kill events"
            )
            return
        if not (stat.S_ISCHR(mode) or stat.S_ISREG(mode)):
            self.problem = f"kernel log not read ({self.path} is not the kernel's device)"
            os.close(self.fd)
            self.fd = -1
            return
        self.device = stat.S_ISCHR(mode)
        if self.device:
            with contextlib.suppress(OSError):
                os.lseek(self.fd, 0, os.SEEK_END)  # SEEK_END on /dev/kmsg: past the records logged so far
        else:
            os.lseek(self.fd, 0, os.SEEK_END)

    def new(self) -> list[kernel_log.KernelRecord]:
        """The records logged since the last call (at most :data:`MAX_NEW_RECORDS`)."""
        if self.fd < 0:
            return []
        found: list[dict[str, Any]] = []
        while len(found) < MAX_NEW_RECORDS:
            try:
                raw = os.read(self.fd, 16384)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    continue
                self.problem = f"kernel log read failed: {exc.strerror or exc}"
                break
            if not raw:
                break
            if self.device:
                if (rec := kernel_log.parse_kmsg_record(raw)) is not None:
                    found.append(rec)
                continue
            *lines, self._rest = (self._rest + raw).split(b"\n")
            found += [
                r for ln in lines if not ln.startswith(b" ") and (r := kernel_log.parse_kmsg_record(ln))
            ]
            self._rest = self._rest[-kernel_log.MAX_TEXT * 4 :]
        recs = kernel_log.records({"records": found})
        self.kept = (self.kept + recs)[-kernel_log.MAX_RECORDS // 10 :]
        return recs

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class HostReader:
    """The host's files for one tick, read by a worker thread: :meth:`read` waits ``wait`` s at most."""

    def __init__(self, root: Path, kmsg: KmsgTail) -> None:
        self.root, self.kmsg = root, kmsg
        self.page_kib = self._page_kib()
        self._jobs: queue.Queue[Callable[[], None]] = queue.Queue()
        self._answers: queue.Queue[dict[str, Any]] = queue.Queue()
        self._busy_since: float | None = None
        threading.Thread(target=self._work, name="spark-watch-host", daemon=True).start()

    def _text(self, absolute: str) -> str | None:
        try:
            return procfs.read_regular(self.root / absolute.lstrip("/"), PROC_LIMIT).decode(
                "utf-8", "replace"
            )
        except OSError:
            return None

    def _page_kib(self) -> int:
        text = (self._text(PMD_SIZE_FILE) or "").strip()
        pmd = int(text) if text.isdigit() and len(text) < 20 else 0
        return next((p for p in PAGE_SIZES_KIB if (p * 1024) * (p * 1024 // 8) == pmd), 4)

    def _once(self) -> dict[str, Any]:
        mem = procfs.parse_meminfo(self._text("/proc/meminfo") or "")
        buddy = self._text("/proc/buddyinfo")
        recs = self.kmsg.new()
        return {"mem_available_kb": mem.get("MemAvailable"), "mem_total_kb": mem.get("MemTotal"),
                "buddy": parse_buddyinfo(buddy) if buddy else None,
                "xids": [x.to_dict() for x in kernel_log.xids(recs)],
                "ooms": [{"pid": o.pid, "name": o.name, "anon_rss_kb": o.anon_rss_kb}
                         for o in kernel_log.oom_kills(recs)]}  # fmt: skip

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            job()

    def read(self, wait: float) -> tuple[dict[str, Any] | None, str]:
        """This tick's host readings, or ``None`` and why (the last read is still stuck)."""
        if self._busy_since is None:
            self._busy_since = time.monotonic()
            self._jobs.put(lambda: self._answers.put(self._guarded()))
        try:
            got = self._answers.get(timeout=wait)
        except queue.Empty:
            return None, f"host files: no answer for {time.monotonic() - self._busy_since:.0f} s"
        self._busy_since = None
        return got, "ok"

    def _guarded(self) -> dict[str, Any]:
        try:
            return self._once()
        except Exception as exc:  # a read we did not foresee must not end the watch
            return {"problem": f"host files: {type(exc).__name__}: {exc}"}


def descendants_of(root_pid: int, pid: int, limit: int = 64) -> bool:
    """Whether ``pid`` is ``root_pid`` or runs under it (``/proc/<pid>/stat`` parents, ``limit`` steps)."""
    for _ in range(limit):
        if pid == root_pid:
            return True
        if pid <= 1:
            return False
        try:
            raw = procfs.read_regular(f"/proc/{pid}/stat", 4096).decode("ascii", "replace")
            pid = int(raw[raw.rindex(")") + 2 :].split()[1])
        except (OSError, ValueError, IndexError):
            return False
    return False


def process_state(pid: int) -> str | None:
    """``R``, ``S``, ``Z``…: the process's state, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read(4096).decode("ascii", "replace")
        return raw[raw.rindex(")") + 2 :].split()[0]
    except (OSError, ValueError, IndexError):
        return None
