"""The machine as the checks see it: one object, every probe cached for the run. A check never
touches ``/proc``, NVML, subprocesses or the network itself; tests build a machine over recorded
files (``root``) and doubles first on PATH/PYTHONPATH. ``SPARK_PREFLIGHT_HOST_ROOT`` moves the root
for real use too (gopsutil's ``HOST_PROC``: a container that mounts the host's ``/``)."""

from __future__ import annotations

import json
import os
import platform
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TypedDict

from pytest_dgx_spark.probes import child, procfs
from pytest_dgx_spark.probes.child import ChildResult, Spawned
from pytest_dgx_spark.probes.commands import CommandExtra, CommandResult, run_command
from pytest_dgx_spark.probes.kernel_log import KMSG, KernelLog, read_kernel_log
from pytest_dgx_spark.probes.packages import list_distributions
from pytest_dgx_spark.probes.processes import list_processes
from pytest_dgx_spark.probes.store import MemoryStore

ROOT_ENV = "SPARK_PREFLIGHT_HOST_ROOT"
#: the checked Python's import path in place of ``sys.path`` (``os.pathsep``-separated): what the
#: package and shared-object scans walk (G1, G9); a test confines them to what it built
PYTHON_PATH_ENV = "SPARK_PREFLIGHT_PYTHON_PATH"
TORCH_SCRIPTS = ("torch_child.py", "torch_flash_attn.py", "torch_bandwidth.py")  # the run's one torch child
MAX_TEXT = 1 << 20


class MemInfo(TypedDict):
    fields: dict[str, int]  # /proc/meminfo in kB
    error: str | None


class NvmlSnapshot(TypedDict):
    """NVML through a child: ``ok``; ``reason`` (why not, one line); ``hung``; versions
    (``cuda_driver_version`` an int, 13000); ``devices``; the series of :meth:`Machine.nvml_sample`.
    Plain JSON (the store shares it); :func:`pytest_dgx_spark.probes.nvml.view` types it."""

    ok: bool
    reason: str | None
    hung: bool
    duration_s: float
    driver_version: str | None
    cuda_driver_version: int | None
    nvml_version: str | None
    devices: list[dict[str, Any]]
    system_errors: dict[str, Any]
    limited: str | None  # a resource limit of this box stopped the child
    missing: bool  # no NVML here (library, driver or binding absent)
    init_error: str | None
    crashed: bool
    no_gpu: bool
    samples: list[dict[str, Any]]  # the series (nvml_sample only)
    counters_before: list[dict[str, Any]]
    counters_after: list[dict[str, Any]]


class MachineLike(Protocol):
    """What the engine and the checks use of a machine: a :class:`Machine`, or a replay's."""

    env: dict[str, str]
    timeout: float
    store: MemoryStore
    python: str
    judged: str | None

    @property
    def torch_python(self) -> str: ...
    def identity(self) -> Mapping[str, Any]: ...
    def path(self, absolute: str) -> Path: ...
    def exists(self, absolute: str) -> bool: ...
    def read_text(self, absolute: str, limit: int = MAX_TEXT) -> tuple[str | None, str | None]: ...
    def meminfo(self) -> MemInfo: ...
    def drop_caches(self) -> dict[str, Any]: ...
    def python_path(self) -> list[str]: ...
    def packages(self) -> dict[str, Any]: ...
    def processes(self) -> dict[str, Any]: ...
    def command(self, argv: Sequence[str], *, timeout: float | None = None) -> CommandResult: ...
    def python_child(
        self, key: str, scripts: Sequence[str], config: Mapping[str, Any] | None = None, *,
        step_timeout: float | None = None, total_timeout: float | None = None,
        env: Mapping[str, str] | None = None, python: str | None = None,
    ) -> ChildResult: ...
    def nvml(self) -> NvmlSnapshot: ...
    def nvml_sample(self, seconds: float, interval: float = 0.1) -> NvmlSnapshot: ...
    def torch(self, request: Mapping[str, Any]) -> ChildResult: ...
    def start_torch_early(self, ready: Callable[[], Spawned | None] | None = None) -> bool: ...
    def drop_early(self) -> int: ...
    def has_gpu_device_node(self) -> bool: ...
    def kernel_log(self) -> KernelLog: ...


def spawn_early(scripts: Sequence[str], env: Mapping[str, str] | None = None, python: str | None = None) -> Spawned | None:
    """A probe child started before its request is known (``{"early": true}``): its scripts do
    their slow part, then read the request on stdin. ``None`` when it cannot start."""
    spawned = child.spawn_python(child.script_source(*scripts), args=[json.dumps({"early": True})], env=env,
                                 python=python, stdin=True)  # fmt: skip
    return spawned if isinstance(spawned, Spawned) else None


#: programs that wait on the GPU driver: one that hung is not asked again in the same run
DRIVER_PROGRAMS = frozenset({"nvidia-smi"})


class Machine:
    def __init__(
        self, *, root: Path | str | None = None, env: Mapping[str, str] | None = None, timeout: float = 10.0,
        store: MemoryStore | None = None, python: str | None = None, euid: int | None = None,
        judged: str | None = None,
    ) -> None:
        self.env: dict[str, str] = dict(os.environ if env is None else env)
        self.root = Path(root if root is not None else self.env.get(ROOT_ENV) or "/")
        self.timeout = float(timeout)
        self.store = store if store is not None else MemoryStore()
        self.python = python or sys.executable
        #: the interpreter ``--python`` names: its packages are judged, the torch child runs in it
        self.judged = judged
        self.euid = os.geteuid() if euid is None else euid
        self._early: dict[str, Spawned] = {}  # children started before their request, by store key
        self._early_lock = threading.Lock()
        #: the driver's programs that hung this run (name -> seconds waited): a wedged driver
        #: costs the run one timeout, not one per check that asks it (issue 34 item 13)
        self._hung: dict[str, float] = {}

    def path(self, absolute: str) -> Path:
        """``/proc/meminfo`` under this machine's root."""
        return self.root / absolute.lstrip("/")

    def exists(self, absolute: str) -> bool:
        try:
            return self.path(absolute).exists()
        except OSError:
            return False

    def read_text(self, absolute: str, limit: int = MAX_TEXT) -> tuple[str | None, str | None]:
        """``(text, None)`` or ``(None, reason)``; never raises, never blocks (``procfs.read_regular``)."""
        try:
            raw = procfs.read_regular(self.path(absolute), limit)
        except OSError as exc:
            return None, f"cannot read {absolute}: {exc.strerror or exc}"
        return raw.decode("utf-8", errors="replace"), None

    def meminfo(self, *, key: str = "meminfo") -> MemInfo:
        def probe() -> MemInfo:
            text, error = self.read_text("/proc/meminfo")
            fields = procfs.parse_meminfo(text or "")
            if text is not None and not fields:
                error = "/proc/meminfo has no readable fields"
            return {"fields": fields if error is None else {}, "error": error}

        return self.store.get_or_compute(key, probe)

    def drop_caches(self) -> dict[str, Any]:
        """``sync; echo 3 > /proc/sys/vm/drop_caches``: root only, once per run, only with
        ``--spark-drop-caches`` (it flushes the page cache of every process on the box)."""

        def probe() -> dict[str, Any]:
            if self.euid != 0:
                return {"done": False, "refused": f"not root (euid {self.euid}); nothing was written"}
            before = self.meminfo(key="meminfo:before-drop")
            sync = run_command(["sync"], timeout=self.timeout, env=self.env)
            try:
                procfs.write_regular(self.path("/proc/sys/vm/drop_caches"), b"3\n")
            except OSError as exc:
                error = f"cannot write /proc/sys/vm/drop_caches: {exc.strerror or exc}"
                return {"done": False, "error": error, "before": before}
            after = self.meminfo(key="meminfo:after-drop")
            return {"done": True, "sync": sync.describe(), "before": before, "after": after}

        return self.store.get_or_compute("drop_caches", probe)

    @property
    def torch_python(self) -> str:
        """The interpreter of the torch child (and of other children that import the job's packages)."""
        return self.judged or self.python

    def interpreter(self) -> dict[str, Any]:
        """The ``--python`` interpreter's own answer (:func:`interpreter.describe`), once per run."""
        from pytest_dgx_spark.probes import interpreter  # lazy: only with --python

        judged = self.judged or self.python
        return self.store.get_or_compute("python:judged", lambda: interpreter.describe(judged, self.env, self.timeout))

    def python_path(self) -> list[str]:
        """Where the checked Python finds packages: the ``--python`` interpreter's own ``sys.path``; else
        ``PYTHONPATH`` first (a test's fake site-packages shadows the real one, as for the children), then
        ``sys.path`` (or ``SPARK_PREFLIGHT_PYTHON_PATH``)."""
        if self.judged:
            return [p for p in dict.fromkeys(map(os.path.abspath, self.interpreter()["path"])) if os.path.isdir(p)]
        entries = [p for p in self.env.get("PYTHONPATH", "").split(os.pathsep) if p]
        given = self.env.get(PYTHON_PATH_ENV)
        entries += [p for p in (sys.path if given is None else given.split(os.pathsep)) if p]
        return [p for p in dict.fromkeys(map(os.path.abspath, entries)) if os.path.isdir(p)]

    def packages(self) -> dict[str, Any]:
        """Installed distributions (metadata only); the ``--python`` interpreter's as it lists them."""
        if self.judged:
            found = self.interpreter()
            return {"dists": found["dists"], "errors": found["errors"], "python": self.judged,
                    **({"error": found["reason"]} if not found["ok"] else {})}  # fmt: skip
        return self.store.get_or_compute("packages", lambda: list_distributions(self.python_path()))

    def processes(self) -> dict[str, Any]:
        """The process table; the pids NVML lists on a GPU read first, in full (a full table
        cannot hide the server that holds the GPU)."""
        return self.store.get_or_compute(
            "processes", lambda: list_processes(self.root, timeout=self.timeout, env=self.env, first=self.gpu_pids())
        )

    def gpu_pids(self) -> list[int]:
        """The pids NVML lists on any GPU (compute and graphics), in its order."""
        nv = self.nvml()
        devices = nv.get("devices") or [] if nv.get("ok") else []
        procs = [p for d in devices for k in ("compute_procs", "graphics_procs") for p in d.get(k) or []]
        pids = [p.get("pid") for p in procs if isinstance(p, Mapping)]
        return list(dict.fromkeys(p for p in pids if type(p) is int and p > 0))

    def command(self, argv: Sequence[str], *, timeout: float | None = None) -> CommandResult:
        """``argv``'s result, once per run. ``nvidia-smi`` after one that hung is not started again:
        the driver it waits on is wedged, and each call would wait the whole timeout again."""
        name = os.path.basename(str(argv[0])) if argv else ""

        def run() -> dict[str, Any]:
            waited = self._hung.get(name)
            if waited is not None:
                hung = CommandExtra(timeout=waited, hung_before=name)
                return CommandResult(argv=[str(a) for a in argv], timed_out=True, extra=hung).to_dict()
            res = run_command(argv, timeout=timeout or self.timeout, env=self.env)
            if res.timed_out and name in DRIVER_PROGRAMS:
                ran = res.extra.timeout
                self._hung.setdefault(name, float(ran if ran is not None else timeout or self.timeout))
            return res.to_dict()

        return CommandResult.from_dict(self.store.get_or_compute("cmd:" + "\x00".join(argv), run))

    def python_child(
        self, key: str, scripts: Sequence[str], config: Mapping[str, Any] | None = None, *,
        step_timeout: float | None = None, total_timeout: float | None = None,
        env: Mapping[str, str] | None = None, python: str | None = None,
    ) -> ChildResult:
        """Run probe scripts in a child, once per key; ``env`` replaces this machine's environment
        for that child (G10 gives its job children torchrun's names for an srun task); ``python``
        runs it in another interpreter (:attr:`torch_python` for the job's packages)."""

        def probe() -> dict[str, Any]:
            request = json.dumps(dict(config or {}))
            step = step_timeout or self.timeout
            with self._early_lock:
                early = self._early.pop(key, None)
            if early is not None:  # started early: the request goes on its stdin
                return child.follow(early, step_timeout=step, total_timeout=total_timeout,
                                    stdin_data=request).to_dict()  # fmt: skip
            return child.run_python(
                child.script_source(*scripts), args=[request], step_timeout=step, total_timeout=total_timeout,
                env=self.env if env is None else dict(env), python=python or self.python,
            ).to_dict()

        return ChildResult.from_dict(self.store.get_or_compute(key, probe))

    def start_early(self, key: str, scripts: Sequence[str], ready: Callable[[], Spawned | None] | None = None,
                    python: str | None = None) -> bool:
        """Start the child of ``key`` before its request is known (:meth:`python_child` writes it to its
        stdin; ``ready`` may hand over one early.py started), unless answered or started already."""
        with self._early_lock:
            if key in self._early or self.store.peek(key) is not None:
                return False
            spawned = (ready() if ready else None) or spawn_early(scripts, self.env, python or self.python)
            if spawned is None:
                return False
            self._early[key] = spawned
            return True

    def drop_early(self) -> int:
        """Kill the children started early that nothing asked for; how many."""
        with self._early_lock:
            left, self._early = list(self._early.values()), {}
        for spawned in left:
            child.abandon(spawned)
        return len(left)

    def kernel_log(self) -> KernelLog:
        """The kernel log since boot (``<root>/dev/kmsg``, else ``journalctl -k -b``, else ``dmesg``),
        bounded, once per run (G4's Xids, G3's OOM kills). The programs' output is not stored: a capture
        would record a MiB of kernel log, the store keeps the parsed records."""

        def run(argv: Sequence[str], seconds: float) -> CommandResult:
            return run_command(argv, timeout=seconds, env=self.env)

        return self.store.get_or_compute(
            "kernel_log", lambda: read_kernel_log(str(self.path(KMSG)), run, timeout=self.timeout))

    def nvml(self) -> NvmlSnapshot:
        """A snapshot of every GPU through NVML, in a child."""
        return self.store.get_or_compute("nvml", lambda: nvml_snapshot(self.python_child("nvml:child", ["nvml_child.py"])))

    def nvml_sample(self, seconds: float, interval: float = 0.1) -> NvmlSnapshot:
        """Temperature, power, SM clock and clock-event reasons as a series, with the clock-event
        counters before and after it (G4)."""

        def probe() -> NvmlSnapshot:
            ran = self.python_child(
                f"nvml:sample-child:{seconds}:{interval}", ["nvml_child.py"],
                {"mode": "sample", "seconds": seconds, "interval": interval},
                total_timeout=seconds + self.timeout * 3,
            )
            out = nvml_snapshot(ran, sampling=True)
            out["samples"] = ran.events
            out["counters_before"] = ran.data.get("counters_before") or []
            out["counters_after"] = ran.data.get("counters_after") or []
            return out

        return self.store.get_or_compute(f"nvml:sample:{seconds}:{interval}", probe)

    def torch(self, request: Mapping[str, Any]) -> ChildResult:
        """The one torch child of the run; the first caller's request (the engine's) wins."""
        return self.python_child("torch", TORCH_SCRIPTS, request, python=self.torch_python)

    def start_torch_early(self, ready: Callable[[], Spawned | None] | None = None) -> bool:
        """Start the torch child now: its ``import torch`` overlaps NVML and the extension scan."""
        return self.start_early("torch", TORCH_SCRIPTS, ready, python=self.torch_python)

    def has_gpu_device_node(self) -> bool:
        return any(self.exists(n) for n in ("/dev/nvidiactl", "/dev/nvidia0"))

    def identity(self) -> dict[str, Any]:
        """Host facts for report headers and JUnit suite properties."""

        def probe() -> dict[str, Any]:
            nv = self.nvml()
            os_release, _ = self.read_text("/etc/os-release", 65536)
            devices = nv.get("devices") or []
            names = [d.get("name") for d in devices if d.get("name")]
            caps = [d["capability"] for d in devices if d.get("capability")]
            return {
                "hostname": platform.node(), "arch": platform.machine(), "kernel": platform.release(),
                "os": procfs.parse_key_values(os_release or "").get("PRETTY_NAME"),
                "python": platform.python_version(),
                "gpu": ", ".join(sorted(set(map(str, names)))) if names else None, "gpu_count": len(devices),
                "capability": ".".join(str(c) for c in caps[0]) if caps else None,
                "driver": nv.get("driver_version"),
                "cuda_driver": format_cuda_version(nv.get("cuda_driver_version")),
                "gb10": any(is_gb10(d) for d in devices), "nvml": "ok" if nv.get("ok") else nv.get("reason"),
            }

        return self.store.get_or_compute("identity", probe)


def is_gb10(device: Mapping[str, Any]) -> bool:
    """GB10 by name, or by capability 12.1 (only GB10 reports SM121)."""
    return "GB10" in str(device.get("name") or "").upper() or list(device.get("capability") or []) == [12, 1]


def format_cuda_version(value: Any) -> str | None:
    """NVML's 13000 -> ``"13.0"``."""
    if not isinstance(value, int) or value <= 0:
        return None
    return f"{value // 1000}.{(value % 1000) // 10}"


def nvml_snapshot(ran: ChildResult, *, sampling: bool = False) -> NvmlSnapshot:
    """The NVML child's output as a snapshot with one reason line."""
    d = ran.data
    out: NvmlSnapshot = {
        "ok": False, "reason": None, "hung": False, "duration_s": round(ran.duration_s, 4),
        "driver_version": d.get("driver_version"), "cuda_driver_version": d.get("cuda_driver_version"),
        "nvml_version": d.get("nvml_version"), "devices": d.get("devices") or [],
        "system_errors": d.get("system_errors") or {}, "limited": None, "missing": False, "init_error": None,
        "crashed": False, "no_gpu": False, "samples": [], "counters_before": [], "counters_after": [],
    }
    init = d.get("init_error")
    broken_import = ran.step == "import pynvml" and not ran.ok
    if ran.resource_limit:  # ulimit -u / -v: nothing about the GPU
        out.update({"limited": ran.resource_limit, "reason": f"NVML not read: {ran.resource_limit}"})
    elif d.get("import_error"):
        out.update({"reason": f"nvidia-ml-py (pynvml) not importable: {d['import_error']}", "missing": True})
    elif broken_import and not (ran.timed_out or ran.overflow or ran.signal or ran.error):
        # the binding exited while importing: NVML was never called (a broken install, not a driver)
        out.update({"reason": f"nvidia-ml-py (pynvml) not importable: {ran.describe('the NVML child')}",
                    "missing": True})
    elif init:
        name = init.get("name", "?")
        out["init_error"] = name
        out["missing"] = name in ("LibraryNotFound", "DriverNotLoaded", "NoPermission")
        out["reason"] = f"NVML unavailable: {init.get('message') or name} ({name})"
    elif ran.timed_out:
        out.update({"hung": True, "reason": "NVML " + ran.describe("query").removeprefix("query ")})
    elif not ran.ok:
        out["reason"] = ran.describe("NVML child")
        if ran.signal:
            out["crashed"] = True
    else:
        out["ok"] = True
        if not sampling and not d.get("device_count"):
            out.update({"reason": "NVML answered but reports no GPU", "no_gpu": True})
    return out
