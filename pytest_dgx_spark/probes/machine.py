"""The machine as the checks see it: one object, every probe cached for the run.

A check never touches ``/proc``, NVML, subprocesses or the network directly;
it asks a :class:`Machine`. Tests build a Machine over a folder of recorded
files (``root``), an environment whose ``PATH``/``PYTHONPATH`` put test
doubles first (a fake ``nvidia-smi`` script, a fake ``pynvml`` or ``torch``
module for the child processes), and the checks' own code runs unchanged.

``SPARK_PREFLIGHT_HOST_ROOT`` moves the root for real use too, like
gopsutil's ``HOST_PROC``: a container that mounts the host's ``/`` can
inspect the host.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_dgx_spark.probes import procfs
from pytest_dgx_spark.probes.child import (
    ChildResult,
    Spawned,
    abandon,
    follow,
    run_python,
    script_source,
    spawn_python,
)
from pytest_dgx_spark.probes.commands import CommandResult, run_command
from pytest_dgx_spark.probes.store import MemoryStore

ROOT_ENV = "SPARK_PREFLIGHT_HOST_ROOT"
#: the checked Python's import path in place of this interpreter's ``sys.path``
#: (``os.pathsep``-separated; empty: none). What the package and shared-object
#: scans walk (G1, G9): as ``ROOT_ENV`` does for ``/proc``, it lets a test confine
#: them to the site-packages it built, not the real ones beside it
PYTHON_PATH_ENV = "SPARK_PREFLIGHT_PYTHON_PATH"
#: the scripts of the one torch child of a run
TORCH_SCRIPTS = ("torch_child.py", "torch_flash_attn.py", "torch_bandwidth.py")
MAX_TEXT = 1 << 20


def spawn_early(
    scripts: Sequence[str], env: Mapping[str, str] | None = None, python: str | None = None
) -> Spawned | None:
    """A probe child started before its request is known (``{"early": true}``):
    its scripts do their slow part, then read the request on stdin. ``None``
    when it cannot start (the ordinary path, later, says why)."""
    spawned = spawn_python(
        script_source(*scripts), args=[json.dumps({"early": True})], env=env, python=python, stdin=True
    )
    return spawned if isinstance(spawned, Spawned) else None


class Machine:
    def __init__(
        self,
        *,
        root: Path | str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float = 10.0,
        store: MemoryStore | None = None,
        python: str | None = None,
        euid: int | None = None,
    ) -> None:
        self.env: dict[str, str] = dict(os.environ if env is None else env)
        if root is None:
            root = self.env.get(ROOT_ENV) or "/"
        self.root = Path(root)
        self.timeout = float(timeout)
        self.store = store if store is not None else MemoryStore()
        self.python = python or sys.executable
        self._euid = euid
        #: children started before their request was known, by store key
        self._early: dict[str, Spawned] = {}
        self._early_lock = threading.Lock()

    # ------------------------------------------------------------------ files

    def path(self, absolute: str) -> Path:
        """``/proc/meminfo`` under this machine's root."""
        return self.root / absolute.lstrip("/")

    def exists(self, absolute: str) -> bool:
        try:
            return self.path(absolute).exists()
        except OSError:
            return False

    def read_text(self, absolute: str, limit: int = MAX_TEXT) -> tuple[str | None, str | None]:
        """``(text, None)`` or ``(None, reason)``; never raises, never blocks
        (a FIFO or device at the path is refused: see ``procfs.read_regular``)."""
        try:
            raw = procfs.read_regular(self.path(absolute), limit)
        except OSError as exc:
            return None, f"cannot read {absolute}: {exc.strerror or exc}"
        return raw.decode("utf-8", errors="replace"), None

    @property
    def euid(self) -> int:
        return os.geteuid() if self._euid is None else self._euid

    @property
    def is_root(self) -> bool:
        return self.euid == 0

    # ------------------------------------------------------------------ /proc

    def meminfo(self, *, key: str = "meminfo") -> dict[str, Any]:
        """``{"fields": {name: kB}, "error": reason|None}``."""

        def probe() -> dict[str, Any]:
            text, error = self.read_text("/proc/meminfo")
            if text is None:
                return {"fields": {}, "error": error}
            fields = procfs.parse_meminfo(text)
            if not fields:
                return {"fields": {}, "error": "/proc/meminfo has no readable fields"}
            return {"fields": fields, "error": None}

        return self.store.get_or_compute(key, probe)

    def drop_caches(self) -> dict[str, Any]:
        """``sync; echo 3 > /proc/sys/vm/drop_caches`` — root only, once per run.

        Called only when the user passed ``--spark-drop-caches``; it flushes
        the page cache of every process on the box.
        """

        def probe() -> dict[str, Any]:
            if not self.is_root:
                return {
                    "done": False,
                    "refused": f"not root (euid {self.euid}); nothing was written",
                }
            before = self.meminfo(key="meminfo:before-drop")
            sync = run_command(["sync"], timeout=self.timeout, env=self.env)
            try:
                write_regular(self.path("/proc/sys/vm/drop_caches"), b"3\n")
            except OSError as exc:
                return {
                    "done": False,
                    "error": f"cannot write /proc/sys/vm/drop_caches: {exc.strerror or exc}",
                    "before": before,
                }
            after = self.meminfo(key="meminfo:after-drop")
            return {"done": True, "sync": sync.describe(), "before": before, "after": after}

        return self.store.get_or_compute("drop_caches", probe)

    def python_path(self) -> list[str]:
        """Where the checked Python finds packages: this machine's ``PYTHONPATH``
        first (so a test's fake site-packages shadows the real one, as it does
        for the probe children), then this interpreter's ``sys.path`` (or
        ``SPARK_PREFLIGHT_PYTHON_PATH`` when set)."""
        entries = [p for p in self.env.get("PYTHONPATH", "").split(os.pathsep) if p]
        given = self.env.get(PYTHON_PATH_ENV)
        entries += [p for p in (sys.path if given is None else given.split(os.pathsep)) if p]
        seen: list[str] = []
        for entry in entries:
            full = os.path.abspath(entry)
            if full not in seen and os.path.isdir(full):
                seen.append(full)
        return seen

    def packages(self) -> dict[str, Any]:
        """Installed distributions (metadata only; see ``probes/packages.py``)."""
        from pytest_dgx_spark.probes.packages import list_distributions

        return self.store.get_or_compute("packages", lambda: list_distributions(self.python_path()))

    def processes(self) -> dict[str, Any]:
        """The process table; the pids NVML lists on a GPU are read first, in
        full (a full table cannot hide the server that holds the GPU)."""
        from pytest_dgx_spark.probes.processes import list_processes

        def probe() -> dict[str, Any]:
            return list_processes(self.root, timeout=self.timeout, env=self.env, first=self.gpu_pids())

        return self.store.get_or_compute("processes", probe)

    def gpu_pids(self) -> list[int]:
        """The pids NVML lists on any GPU (compute and graphics), in its order."""
        nv = self.nvml()
        pids: list[int] = []
        for dev in nv.get("devices") or [] if nv.get("ok") else []:
            for kind in ("compute_procs", "graphics_procs"):
                for p in dev.get(kind) or []:
                    pid = p.get("pid") if isinstance(p, Mapping) else None
                    if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 and pid not in pids:
                        pids.append(pid)
        return pids

    # ------------------------------------------------------------------ commands

    def command(self, argv: Sequence[str], *, timeout: float | None = None) -> CommandResult:
        key = "cmd:" + "\x00".join(argv)
        data = self.store.get_or_compute(
            key,
            lambda: run_command(argv, timeout=timeout or self.timeout, env=self.env).to_dict(),
        )
        return CommandResult.from_dict(data)

    def python_child(
        self,
        key: str,
        scripts: Sequence[str],
        config: Mapping[str, Any] | None = None,
        *,
        step_timeout: float | None = None,
        total_timeout: float | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ChildResult:
        """Run probe scripts (from ``probes/scripts``) in a child, once per key;
        ``env`` replaces this machine's environment for that child (G10 gives
        its job children torchrun's names for an srun task)."""
        import json

        def probe() -> dict[str, Any]:
            request = json.dumps(dict(config or {}))
            early = self._take_early(key)
            if early is not None:  # started early: the request goes on its stdin
                return follow(
                    early,
                    step_timeout=step_timeout or self.timeout,
                    total_timeout=total_timeout,
                    stdin_data=request,
                ).to_dict()
            return run_python(
                script_source(*scripts),
                args=[request],
                step_timeout=step_timeout or self.timeout,
                total_timeout=total_timeout,
                env=self.env if env is None else dict(env),
                python=self.python,
            ).to_dict()

        return ChildResult.from_dict(self.store.get_or_compute(key, probe))

    def start_early(
        self, key: str, scripts: Sequence[str], ready: Callable[[], Spawned | None] | None = None
    ) -> bool:
        """Start the child of ``key`` now, before its request is known.

        Its scripts do their slow part first (the torch child imports torch)
        and then read the request on stdin, which :meth:`python_child` writes
        when it is asked for ``key``. ``ready`` may hand over such a child
        started elsewhere (by pytest_dgx_spark/early.py); else one starts here.
        Nothing is started when ``key`` is already answered or started. A
        child never asked for is killed by :meth:`drop_early` (the engine's
        ``close``). True when one is waiting.
        """
        with self._early_lock:
            if key in self._early or self.store.peek(key) is not None:
                return False
            spawned = (ready() if ready else None) or spawn_early(scripts, self.env, self.python)
            if spawned is None:
                return False
            self._early[key] = spawned
            return True

    def _take_early(self, key: str) -> Spawned | None:
        with self._early_lock:
            return self._early.pop(key, None)

    def drop_early(self) -> int:
        """Kill the children started early that nothing asked for; how many."""
        with self._early_lock:
            left, self._early = list(self._early.values()), {}
        for spawned in left:
            abandon(spawned)
        return len(left)

    # ------------------------------------------------------------------ NVML

    def nvml(self) -> dict[str, Any]:
        """A snapshot of every GPU through NVML (in a child), as a dict:

        ``ok``; ``reason`` (why not, one line); ``hung`` (the driver did not
        answer); ``driver_version``, ``cuda_driver_version`` (int, 13000);
        ``devices`` (name, capability, memory or ``None`` with ``errors``...).
        """

        def probe() -> dict[str, Any]:
            child = self.python_child("nvml:child", ["nvml_child.py"])
            return nvml_snapshot(child)

        return self.store.get_or_compute("nvml", probe)

    def nvml_sample(self, seconds: float, interval: float = 0.1) -> dict[str, Any]:
        """Sample temperature, power, SM clock and clock-event reasons."""

        def probe() -> dict[str, Any]:
            child = self.python_child(
                f"nvml:sample-child:{seconds}:{interval}",
                ["nvml_child.py"],
                {"mode": "sample", "seconds": seconds, "interval": interval},
                total_timeout=seconds + self.timeout * 3,
            )
            out = nvml_snapshot(child, sampling=True)
            out["samples"] = child.events
            # clock-event counters read before and after the series (G4)
            out["counters_before"] = child.data.get("counters_before")
            out["counters_after"] = child.data.get("counters_after")
            return out

        return self.store.get_or_compute(f"nvml:sample:{seconds}:{interval}", probe)

    # ------------------------------------------------------------------ torch

    def torch(self, request: Mapping[str, Any]) -> ChildResult:
        """The one torch child of the run (see ``scripts/torch_child.py``).

        ``request`` says what to do beyond import + tiny kernel: extension
        imports, the flash-attn kernel, the bandwidth copy. The first caller's
        request wins: the engine builds it from every selected check at once.
        """
        return self.python_child("torch", TORCH_SCRIPTS, request)

    def start_torch_early(self, ready: Callable[[], Spawned | None] | None = None) -> bool:
        """Start the torch child before the run knows what to ask it (see
        :meth:`start_early`): its ``import torch``, seconds on a GPU machine,
        then overlaps reading NVML and scanning the installed extensions.
        ``ready``: the engine hands over the one pytest_dgx_spark/early.py started."""
        return self.start_early("torch", TORCH_SCRIPTS, ready)

    def has_gpu_device_node(self) -> bool:
        """An NVIDIA device node under the root (``/dev/nvidiactl``, ``/dev/nvidia0``)."""
        return any(self.exists(n) for n in ("/dev/nvidiactl", "/dev/nvidia0"))

    # ------------------------------------------------------------------ identity

    def identity(self) -> dict[str, Any]:
        """Host facts for report headers and JUnit suite properties."""

        def probe() -> dict[str, Any]:
            nv = self.nvml()
            os_release, _ = self.read_text("/etc/os-release", 65536)
            devices = nv.get("devices") or []
            names = [d.get("name") for d in devices if d.get("name")]
            caps = [d.get("capability") for d in devices if d.get("capability")]
            return {
                "hostname": platform.node(),
                "arch": platform.machine(),
                "kernel": platform.release(),
                "os": procfs.parse_key_values(os_release or "").get("PRETTY_NAME"),
                "python": platform.python_version(),
                "gpu": ", ".join(sorted(set(names))) if names else None,
                "gpu_count": len(devices),
                "capability": ".".join(str(c) for c in caps[0]) if caps else None,
                "driver": nv.get("driver_version"),
                "cuda_driver": format_cuda_version(nv.get("cuda_driver_version")),
                "gb10": any(is_gb10(d) for d in devices),
                "nvml": "ok" if nv.get("ok") else nv.get("reason"),
            }

        return self.store.get_or_compute("identity", probe)


# ---------------------------------------------------------------------- helpers


def write_regular(path: Path, data: bytes) -> None:
    """Write ``data`` into an existing regular file, never blocking.

    ``open(path, "w")`` on a FIFO with no reader blocks forever; opened with
    ``O_NONBLOCK`` it fails at once (ENXIO), and anything but a regular file
    (``/proc/sys`` files are) is refused before a byte is written.
    """
    import errno
    import stat

    try:
        fd = os.open(path, os.O_WRONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # what O_NONBLOCK gives for a FIFO nobody reads
            raise OSError(errno.ENXIO, "not a regular file (a FIFO)") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) else "not a file"
            raise OSError(errno.EINVAL, f"not a regular file ({kind})")
        os.write(fd, data)
    finally:
        os.close(fd)


def is_gb10(device: Mapping[str, Any]) -> bool:
    """GB10 by name, or by capability 12.1 (only GB10 reports SM121)."""
    name = str(device.get("name") or "").upper()
    cap = device.get("capability") or []
    return "GB10" in name or list(cap) == [12, 1]


def format_cuda_version(value: Any) -> str | None:
    """NVML's 13000 -> ``"13.0"`` (major = v/1000, minor = (v%1000)/10)."""
    if not isinstance(value, int) or value <= 0:
        return None
    return f"{value // 1000}.{(value % 1000) // 10}"


def nvml_snapshot(child: ChildResult, *, sampling: bool = False) -> dict[str, Any]:
    """Turn the NVML child's output into a snapshot dict with one reason line."""
    d = child.data
    out: dict[str, Any] = {
        "ok": False,
        "reason": None,
        "hung": False,
        "duration_s": round(child.duration_s, 4),
        "driver_version": d.get("driver_version"),
        "cuda_driver_version": d.get("cuda_driver_version"),
        "nvml_version": d.get("nvml_version"),
        "devices": d.get("devices") or [],
        "system_errors": d.get("system_errors") or {},
    }
    if child.resource_limit:
        # no process or thread could start, or the child ran out of memory:
        # a limit of this box or user (ulimit -u / -v), nothing about the GPU
        out["limited"] = child.resource_limit
        out["reason"] = f"NVML not read: {child.resource_limit}"
        return out
    if d.get("import_error"):
        out["reason"] = f"nvidia-ml-py (pynvml) not importable: {d['import_error']}"
        out["missing"] = True
        return out
    if (
        child.step == "import pynvml"
        and not child.ok
        and not (child.timed_out or child.overflow or child.signal or child.error)
    ):
        # the binding itself exited or crashed while importing: NVML was never
        # called, so this is a broken install, not a driver that does not answer
        out["reason"] = f"nvidia-ml-py (pynvml) not importable: {child.describe('the NVML child')}"
        out["missing"] = True
        return out
    init = d.get("init_error")
    if init:
        name = init.get("name", "?")
        out["init_error"] = name
        out["missing"] = name in ("LibraryNotFound", "DriverNotLoaded", "NoPermission")
        out["reason"] = f"NVML unavailable: {init.get('message') or name} ({name})"
        return out
    if child.timed_out:
        out["hung"] = True
        out["reason"] = "NVML " + child.describe("query").removeprefix("query ")
        return out
    if not child.ok:
        out["reason"] = child.describe("NVML child")
        if child.signal:
            out["crashed"] = True
        return out
    if not sampling and not d.get("device_count"):
        out["reason"] = "NVML answered but reports no GPU"
        out["ok"] = True
        out["no_gpu"] = True
        return out
    out["ok"] = True
    return out
