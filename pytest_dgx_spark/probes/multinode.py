"""What G10 reads about the job and the link, as plain data: the launcher's and NCCL's environment;
the configs (those named with ``--spark-config`` when any is, else those under the rootdir, never a
file this tool wrote); and under the host root ``/sys/class/infiniband`` and the MTU of NCCL's
interfaces. One QSFP port shows up as two RoCE "twins" (``rocep1s0f1``, ``roceP2p1s0f1``); NCCL reaches
20-24 GB/s only with both in ``NCCL_IB_HCA`` and MTU 9000 (issue 8; tests/data/gb10).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping
from dataclasses import field
from pathlib import Path
from typing import Any

from pytest_dgx_spark.checks.record import Record
from pytest_dgx_spark.datadef import define
from pytest_dgx_spark.probes import configs as cfgs
from pytest_dgx_spark.probes import procfs
from pytest_dgx_spark.probes.machine import MachineLike

#: how the job was launched (an srun task's rank and its step's size too: launch.py)
LAUNCHER_ENV = (
    "WORLD_SIZE", "LOCAL_WORLD_SIZE", "RANK", "LOCAL_RANK", "GROUP_WORLD_SIZE", "GROUP_RANK", "NNODES",
    "PET_NNODES", "NODE_RANK", "SLURM_NNODES", "SLURM_JOB_NUM_NODES", "SLURM_STEP_ID", "SLURM_STEPID",
    "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_LOCALID", "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
)
TP_ENV = ("VLLM_TENSOR_PARALLEL_SIZE", "PARALLELISM_CONFIG_TP_SIZE")
#: the link NCCL is told to use (read, shown, and judged across nodes)
NET_ENV = (
    "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_IB_DISABLE", "NCCL_NET",
    "UCX_NET_DEVICES", "NCCL_DEBUG",
)
#: with ``--distributed-executor-backend ray``, these say the Ray cluster spans machines
RAY_HINT_ENV = ("VLLM_HOST_IP", "RAY_ADDRESS")
#: all-reduce buffer per backend: NCCL 512 MiB (EVIDENCE: 512M-4G; 16 GB freezes UMA), gloo 8 MiB (CPU)
PROBE_BYTES = {"nccl": 512 << 20, "gloo": 8 << 20}
PROBE_ITERS = {"nccl": 20, "gloo": 8}
MAX_DEVICES = 64  # RDMA devices read under /sys/class/infiniband (a Spark has four)
#: the note that says the config search did not see every config (G10 reads it back from captures)
INCOMPLETE_NOTE = "config search incomplete: "


@define
class JobFinding(Record):
    """One fact a config or a command line says (``configs.Finding`` as G10 records it)."""

    what: str = ""  # tp | pp | nodes | strategy | backend | headless | tp_plan
    value: int | str | bool | None = None  # a count, or None when the text is no number (``raw``)
    key: str = ""  # the key path or flag that said it
    raw: str = ""  # the value as written, when it is not a plain number


@define
class JobSource(Record):
    """One config or command line and what it says (``configs.Source``), with ``owner`` ("uid N")
    when it is another user's running job (issue 24)."""

    name: str = ""
    kind: str = ""  # given | found | process | launcher
    findings: list[JobFinding] = field(default_factory=list)
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    role: str | None = None  # "serving" when it starts a server or an inference engine
    owner: str | None = None

    @classmethod
    def of(cls, src: cfgs.Source, owner: str | None = None) -> JobSource:
        return cls.from_dict({**src.to_dict(), "owner": owner})


@define
class Discovered(Record):
    """The configs G10 reads; a named config replaces the search (issue 11)."""

    sources: list[JobSource] = field(default_factory=list)
    given: bool = False  # --spark-config named configs
    found: int = 0  # config files the search found (this tool's own outputs left out)
    own_outputs: list[str] = field(default_factory=list)  # files this tool wrote: never read as configs
    notes: list[str] = field(default_factory=list)
    incomplete: str | None = None  # why the search did not see every config


@define
class RdmaDevice(Record):
    """One ``/sys/class/infiniband/<name>``: each port's state and negotiated ``rate``, the net devices behind it."""

    states: dict[str, str | None] = field(default_factory=dict)
    netdevs: list[str] = field(default_factory=list)
    rates: dict[str, str | None] = field(default_factory=dict)

    @property
    def down(self) -> bool:
        """Every port reads DOWN or INIT (no port read: not down)."""
        states = [str(s or "").upper() for s in self.states.values()]
        return bool(states) and all("DOWN" in s or "INIT" in s for s in states)


@define
class Link(Record):
    """The two-Spark link as sysfs shows it: RoCE devices, and MTU and speed (Mb/s) per interface;
    ``sysfs`` False where ``/sys/class/net`` cannot be listed (then nothing about the link is judged)."""

    rdma: dict[str, RdmaDevice] = field(default_factory=dict)
    mtu: dict[str, int | None] = field(default_factory=dict)
    speed: dict[str, int | None] = field(default_factory=dict)
    sysfs: bool = False


@define
class Memlock(Record):
    """``RLIMIT_MEMLOCK``: bytes, ``"unlimited"``, or None (not read: ``error`` says why)."""

    soft: int | str | None = None
    hard: int | str | None = None
    error: str | None = None


def job_env(env: Mapping[str, str]) -> dict[str, str]:
    """The launcher, TP, NCCL and Ray variables that are set."""
    return {k: str(env[k]) for k in (*LAUNCHER_ENV, *TP_ENV, *NET_ENV, *RAY_HINT_ENV) if env.get(k)}


def probe_config(timeout: float) -> dict[str, Any]:
    """The all-reduce child's request (``scripts/allreduce_child.py``)."""
    return {
        "backend": "auto", "size_bytes": PROBE_BYTES, "iters": PROBE_ITERS, "warmup": 3, "import_scale": 6,
        "rendezvous_scale": 3, "rendezvous_timeout_s": timeout * 3 * 0.9, "collective_timeout_s": timeout,
    }


def own_output(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` is a file this tool wrote: ``env-report.json`` (and ``.rankN``), anything
    with our ``schema`` or ``tool`` (``--json``, a capture), a pytest-json-report file; else None."""
    name = os.path.basename(path)
    if re.fullmatch(r"env-report(\.rank\d+)?\.json", name):
        return "an env-report this tool wrote"
    if not name.lower().endswith(".json"):
        return None
    try:  # never blocks: a FIFO or device is refused, and the read is capped
        head = procfs.read_regular(path, cfgs.MAX_BYTES + 1)
        doc = json.loads(head) if len(head) <= cfgs.MAX_BYTES else None
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(doc, dict):
        return None
    schema, tool = doc.get("schema"), doc.get("tool")
    ours = isinstance(tool, dict) and tool.get("name") == "pytest-dgx-spark"
    if ours or (isinstance(schema, str) and schema.startswith(("pytest_spark", "pytest-dgx-spark"))):
        return "a report or capture this tool wrote"
    if "spark_preflight" in doc or set(doc) >= {"created", "exitcode", "root", "summary"}:  # its keys
        return "a pytest JSON report"
    return None


def _display(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except (ValueError, OSError):
        return str(path)


def given_sources(paths: tuple[Path, ...], root: Path, deadline: float) -> list[cfgs.Source]:
    """The configs named with ``--spark-config`` (a folder: every config in it)."""
    out: list[cfgs.Source] = []
    for path in paths:
        if not path.is_dir():
            out.append(cfgs.read_config(path, _display(path, root), "given"))
            continue
        found, _ = cfgs.read_found(path, cfgs.find_configs(path, deadline=deadline), deadline=deadline)
        for src in found:
            src.kind, src.name = "given", _display(path / src.name, root)
        out += found or [cfgs.Source(_display(path, root), "given", error="no YAML/JSON/TOML config in it")]
    return out


def discover(root: Path, given: tuple[Path, ...], timeout: float) -> Discovered:
    """The configs G10 reads, the files this tool wrote left out; a named config replaces the search
    (issue 11); an incomplete search says so in a note that starts with :data:`INCOMPLETE_NOTE`."""
    deadline = time.monotonic() + min(timeout, 5.0)
    if given:
        return Discovered([JobSource.of(s) for s in given_sources(tuple(given), root, deadline)], given=True)
    scan = cfgs.find_configs(root, deadline=deadline)
    whys = [(path, own_output(path)) for path in scan.files]
    out = Discovered(own_outputs=[f"{_display(Path(p), root)} ({why})" for p, why in whys if why])
    scan.files = [p for p, why in whys if not why]
    found, notes = cfgs.read_found(root, scan, deadline=deadline)
    out.found = len(scan.files)
    out.notes += notes
    out.incomplete = scan.incomplete() or None
    if out.incomplete:  # G10 says "nothing multi-node" of an incomplete search at most as INFO
        out.notes.append(f"{INCOMPLETE_NOTE}{out.incomplete}")
    if scan.unreadable:
        out.notes.append(f"{scan.unreadable} folder(s) under {root} unreadable")
    out.sources = [JobSource.of(s) for s in found]
    return out


def _listdir(machine: MachineLike, absolute: str, most: int) -> list[str]:
    try:
        return sorted(os.listdir(machine.path(absolute)))[:most]
    except OSError:
        return []


def _read(machine: MachineLike, absolute: str) -> str | None:
    text, _ = machine.read_text(absolute, limit=4096)
    return text.strip() if text is not None else None


def _rdma_device(machine: MachineLike, name: str) -> RdmaDevice:
    """One ``/sys/class/infiniband/<name>``: each port's state and ``rate`` ("200 Gb/sec (4X HDR)":
    what it negotiated), and the net devices behind it."""
    ports = f"/sys/class/infiniband/{name}/ports"
    states: dict[str, str | None] = {}
    rates: dict[str, str | None] = {}
    netdevs: list[str] = []
    for port in _listdir(machine, ports, 8):
        states[port] = _read(machine, f"{ports}/{port}/state")
        rates[port] = _read(machine, f"{ports}/{port}/rate")
        ndevs = f"{ports}/{port}/gid_attrs/ndevs"
        netdevs += [_read(machine, f"{ndevs}/{index}") or "" for index in _listdir(machine, ndevs, 4)]
    netdevs += _listdir(machine, f"/sys/class/infiniband/{name}/device/net", 8)
    return RdmaDevice(states, list(dict.fromkeys(n for n in netdevs if n)), rates)


def _net_number(machine: MachineLike, ifname: str, leaf: str) -> int | None:
    """``/sys/class/net/<ifname>/<leaf>`` as a number (None: unreadable, not a number, or not a name)."""
    if not re.fullmatch(r"[\w.:@-]{1,64}", ifname):
        return None
    text = _read(machine, f"/sys/class/net/{ifname}/{leaf}")
    return int(text) if text and text.isdigit() else None


def interface_mtu(machine: MachineLike, ifname: str) -> int | None:
    """``/sys/class/net/<ifname>/mtu`` under the machine root (None: no such interface, or not a name)."""
    return _net_number(machine, ifname, "mtu")


def interface_speed(machine: MachineLike, ifname: str) -> int | None:
    """``/sys/class/net/<ifname>/speed`` in Mb/s (200000 on a ConnectX-7 port at 200 G); None when
    unreadable, not a name, or -1 (link down: the kernel's "unknown")."""
    return _net_number(machine, ifname, "speed") or None


def infiniband_devices(machine: MachineLike) -> list[str] | None:
    """The entries of ``/dev/infiniband`` under the machine root (``uverbs0``, ``rdma_cm`` …), None when
    it is absent: a container started without ``--device /dev/infiniband`` has none, and NCCL falls
    back to TCP sockets (``NET/IB : No device found``)."""
    return _listdir(machine, "/dev/infiniband", MAX_DEVICES) if machine.exists("/dev/infiniband") else None


def read_memlock(machine: MachineLike) -> Memlock:
    """``RLIMIT_MEMLOCK`` of this process from ``/proc/self/limits`` (through the root). NCCL pins
    its buffers with ``ibv_reg_mr``; a small limit fails it with ``Cannot allocate memory``."""
    text, error = machine.read_text("/proc/self/limits", 65536)
    out = Memlock(error=error)
    if text is None:
        return out
    line = next((x for x in text.splitlines() if x.startswith("Max locked memory")), "")
    parts = line.removeprefix("Max locked memory").split()[:2]
    values = [p if p == "unlimited" else int(p) if p.isdigit() else None for p in parts]
    if len(values) == 2:
        out.soft, out.hard = values
    if out.soft is None:
        out.error = "/proc/self/limits has no readable 'Max locked memory' line"
    return out


def socket_ifnames(value: str | None) -> list[str]:
    """Interface names ``NCCL_SOCKET_IFNAME`` names exactly (``=a,b`` or ``a,b``; ``^…`` names none)."""
    text = (value or "").strip()
    if not text or text.startswith("^"):
        return []
    return [p.strip() for p in text.lstrip("=").split(",") if p.strip()]


def read_link(machine: MachineLike, env: Mapping[str, str]) -> Link:
    """The RoCE devices under ``/sys/class/infiniband``, and the MTU and speed of NCCL's socket
    interface and of the net devices behind them."""
    names = _listdir(machine, "/sys/class/infiniband", MAX_DEVICES)
    rdma = {name: _rdma_device(machine, name) for name in names}
    wanted = list(socket_ifnames(env.get("NCCL_SOCKET_IFNAME")))
    for dev in rdma.values():
        wanted += [n for n in dev.netdevs if n not in wanted]
    return Link(
        rdma, mtu={name: interface_mtu(machine, name) for name in wanted[:MAX_DEVICES]},
        speed={name: interface_speed(machine, name) for name in wanted[:MAX_DEVICES]},
        sysfs=bool(_listdir(machine, "/sys/class/net", 1)),
    )
