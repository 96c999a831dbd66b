"""G10 — two Sparks: data parallel (DDP/FSDP) across nodes, not tensor parallel.

Two Sparks share one ConnectX-7 link (20-24 GB/s all-reduce bus bandwidth when
healthy). TP all-reduces inside every layer, so across it TP is slow and fragile
(NCCL wedging, vLLM #42354). A *training* job with TP > 1 across nodes > 1 FAILs
(``--spark-tp-across-nodes warn`` downgrades); a *serving* job, as NVIDIA's vLLM
playbook runs, WARNs with the NCCL fix. G10 reads the launcher's environment, the
configs named with ``--spark-config`` (else found under the rootdir), the running
processes of your own job (another user's are a note: issue 24), and for a
multi-node job the link NCCL is told to use (both RoCE twins, MTU 9000, RoCE on).
Nothing multi-node is a PASS ("single node"); SKIP is "could not check". Under
torchrun, ranks compare fingerprints, and with ``--spark-intrusive`` measure an
all-reduce (``scripts/allreduce_child.py``).

A link can report 200 G and still move a few GB/s (issue 22, G10+): a re-cabled
ConnectX-7 stays near 2.8 GB/s until reboot (``nccl_two_spark_7.txt``), so a
bus bandwidth below ``g10_busbw_fail_gbps`` FAILs, beside the speed the link
reports. A container without ``/dev/infiniband`` makes NCCL fall back to sockets,
and a small memlock limit fails its RDMA registration: both judged for a
multi-node job only. G10 reads no NCCL log, so GB10's expected
``GPU Direct RDMA Disabled`` lines are never findings.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypedDict, cast, runtime_checkable

from pytest_dgx_spark import launch
from pytest_dgx_spark.checks import g09_container, nodes
from pytest_dgx_spark.checks.kit import CheckContext, FactsBase, Findings, Params, count, first_n, shortened
from pytest_dgx_spark.model import Result, Status
from pytest_dgx_spark.probes import configs as cfgs
from pytest_dgx_spark.probes import fleet
from pytest_dgx_spark.probes import multinode as mn
from pytest_dgx_spark.probes.child import ChildResult
from pytest_dgx_spark.probes.gpu_programs import job_name, unwrap
from pytest_dgx_spark.probes.processes import SCAN_STOPPED
from pytest_dgx_spark.redact import split_title

LAUNCHER_ENV = mn.LAUNCHER_ENV
TP_ENV = mn.TP_ENV
NET_ENV = mn.NET_ENV
RAY_HINT_ENV = mn.RAY_HINT_ENV
PROBE_BYTES = mn.PROBE_BYTES
PROBE_ITERS = mn.PROBE_ITERS

#: details kept per result (every finding of every config can be a lot)
MAX_DETAILS = 60
#: the two-Spark link reaches 20-24 GB/s only with jumbo frames (two_spark_config_2.txt: mtu: 9000)
MIN_MTU = 9000
#: TP keys only training frameworks use (Megatron/NeMo, DeepSpeed AutoTP, accelerate, torchtitan)
TRAINING_TP_KEYS = {
    "tensor_model_parallel_size",
    "autotp_size",
    "megatron_lm_tp_degree",
    "parallelism_config_tp_size",
    "tensor_parallel_degree",
}

FIX_TP = (
    "train across the Sparks with DDP or FSDP (accelerate distributed_type: FSDP with "
    "parallelism_config_tp_size: 1, as NVIDIA's pytorch-fine-tune playbook) and keep TP inside one node"
)
FIX_TP_UNKNOWN = FIX_TP + "; for a TP=2 server as in NVIDIA's vLLM playbook, --spark-tp-across-nodes warn"
FIX_TP_WARN = (
    "prefer DDP/FSDP across Sparks; for TP=2 inference use DGX OS's system NCCL, not a pip-bundled one "
    "(the fix in vLLM #42354)"
)
FIX_SERVE = (
    "serve with DGX OS's system NCCL, not a pip-bundled one (the fix in vLLM #42354), and keep TP "
    "inside one Spark when the model fits"
)
FIX_LINK = (
    "put NCCL on the ConnectX-7 port: NCCL_SOCKET_IFNAME=enp1s0f1np1 (and GLOO_SOCKET_IFNAME, "
    "UCX_NET_DEVICES), NCCL_IB_HCA naming both halves, MTU 9000; ~3 GB/s means the wrong interface"
)
FIX_DEGRADED = (
    "reboot both Sparks (a re-cabled or hot-plugged ConnectX-7 link stays slow until then; re-seat the QSFP "
    "cable first), then re-run; check NCCL_DEBUG=INFO says NET/IB, not NET/Socket (NVIDIA dgx-spark-playbooks "
    "PR #108)"
)
FIX_DEVICES = (
    "start the container with --device /dev/infiniband --cap-add IPC_LOCK --ulimit memlock=-1:-1 on every node "
    "(compose: devices, cap_add and ulimits), so NCCL reaches the ConnectX-7 over RoCE"
)
FIX_MEMLOCK = (
    "raise the memlock limit: --ulimit memlock=-1:-1 for a container, or `* - memlock unlimited` in "
    "/etc/security/limits.conf (LimitMEMLOCK=infinity for a systemd service) on the host"
)
FIX_IB_DISABLE = (
    "unset NCCL_IB_DISABLE (or set it to 0) so NCCL uses RoCE on the ConnectX-7 port; over TCP sockets "
    "the link gives a few GB/s"
)


class Finding(TypedDict, total=False):
    """``configs.Finding`` as data: what one key or flag says."""

    what: str  # tp | pp | nodes | strategy | backend | headless | tp_plan
    value: Any  # a count, a word, True; None where the text is not one (``raw``)
    key: str
    raw: str


class Source(TypedDict, total=False):
    """``configs.Source`` as data: one config, command line or process, and what it says."""

    name: str
    kind: str  # given | found | process | launcher
    findings: list[Finding]
    error: str | None
    notes: list[str]
    role: str | None
    owner: str  # "uid N": another user's job (issue 24)


class Probe(TypedDict, total=False):
    """The all-reduce probe: whether it ran (else why not), its data, its error."""

    ran: bool
    reason: str
    data: dict[str, Any]
    error: str | None
    hung: bool


@dataclass
class Facts(FactsBase):
    #: the launcher, TP, NCCL and Ray variables that are set
    env: dict[str, str] = field(default_factory=dict)
    #: configs.Source dicts: given, found, process, launcher
    sources: list[Source] = field(default_factory=list)
    root: str = ""
    #: --spark-config named configs: they replaced the search under the rootdir
    configs_given: bool = False
    configs_found: int = 0
    #: files under the rootdir this tool wrote, not read as configs
    own_outputs: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    gpu_count: int | None = None
    intrusive: bool = False
    #: the all-reduce probe: None when not attempted
    probe: Probe | None = None
    #: probes.multinode.read_link(): RoCE devices and MTUs under the host root
    link: dict[str, Any] | None = None
    #: probes.fleet.exchange(): every rank's fingerprint, or the error and the missing ranks
    fleet: dict[str, Any] | None = None
    #: the container this runs in (G9's markers) and its evidence; None on the host
    container: str | None = None
    #: the entries of /dev/infiniband under the host root; None when it is absent
    dev_infiniband: list[str] | None = None
    #: probes.multinode.read_memlock(): RLIMIT_MEMLOCK of this process
    memlock: dict[str, Any] | None = None

    #: issue 22 (G10+): a capture of an earlier version has none of them; their defaults judge nothing
    ADDED: ClassVar[Mapping[str, str]] = dict.fromkeys(
        ("container", "dev_infiniband", "memlock"), "issue 22: RDMA access in a container"
    )


FACTS = Facts


# --------------------------------------------------------------------------- gather


def summarize_probe(child: ChildResult) -> Probe:
    """The probe child's result as plain data, with one reason when it failed."""
    d = dict(child.data)
    d.pop("_allowance", None)
    out = Probe(ran=True, data=d, error=None, hung=False)
    if d.get("torch_import_error"):
        out["ran"] = False
        out["reason"] = f"torch not importable ({d['torch_import_error']})"
    elif child.timed_out:
        out["hung"] = True
        out["error"] = child.describe("all-reduce probe")
    elif d.get("error"):
        out["error"] = d["error"]
    elif not child.ok:
        out["error"] = child.describe("all-reduce probe")
    return out


def _runs(wrapper: dict[str, Any], child: dict[str, Any]) -> bool:
    """``child`` is the command ``wrapper`` (timeout, uv run, nohup...) runs: one job."""
    cmd = split_title(wrapper.get("cmdline") or [])
    inner, argv = unwrap(cmd), split_title(child.get("cmdline") or [])
    if inner == cmd or not argv:
        return False
    tail = inner[1:]
    return (
        argv[len(argv) - len(tail) :] == tail
        if tail
        else os.path.basename(argv[-1]) == os.path.basename(inner[0])
    )


def process_sources(procs: list[dict[str, Any]]) -> list[Source]:
    """Running processes with G10's flags, each a source: a wrapper and the
    command it runs are one job, named by the program behind the wrapper (the
    child's pid); another user's job carries its ``owner`` (issue 24)."""
    by_pid = {p.get("pid"): p for p in procs}
    inner = {w["pid"]: p for p in procs if (w := by_pid.get(p.get("ppid"))) is not None and _runs(w, p)}
    wrapped = {c.get("pid") for c in inner.values()}
    out: list[Source] = []
    for p in procs:
        if p.get("pid") in wrapped:
            continue  # said by its wrapper
        last, seen = p, set()
        while last.get("pid") in inner and last.get("pid") not in seen:
            seen.add(last.get("pid"))
            last = inner[last["pid"]]
        job = {
            **p,
            "pid": last.get("pid"),
            "name": job_name(p.get("cmdline") or []),
            "self": p.get("self") or last.get("self"),
        }
        for src in cfgs.process_sources([job], own_pid=os.getpid()):
            d = cast(Source, src.to_dict())
            if job.get("mine") is False:
                d["owner"] = f"uid {job.get('uid')}"
            out.append(d)
    return out


def _wants_gpus(facts: Facts) -> bool:
    """A TP degree > 1 anywhere: then this machine's GPU count says whether it spans nodes."""
    return (
        any(
            f["what"] == "tp" and isinstance(f["value"], int) and f["value"] > 1
            for src in facts.sources
            for f in src["findings"]
        )
        or (cfgs.as_count(facts.env.get("VLLM_TENSOR_PARALLEL_SIZE")) or 0) > 1
    )


def gather(ctx: CheckContext) -> Facts:
    m, s = ctx.machine, ctx.settings
    facts = Facts(intrusive=s.intrusive, env=mn.job_env(m.env), root=str(s.rootdir))
    found = mn.discover(Path(s.rootdir), tuple(s.config), s.timeout)
    facts.configs_given = found["given"]
    facts.configs_found = found["found"]
    facts.own_outputs = found["own_outputs"]
    facts.notes += found["notes"]
    sources = list(found["sources"])
    procs = m.processes()
    if procs.get("error"):
        facts.notes.append(procs["error"])
    facts.sources = sources + process_sources(procs.get("processes") or [])
    if _wants_gpus(facts):
        nv = m.nvml()
        if nv.get("ok"):
            facts.gpu_count = len(nv.get("devices") or [])
    facts.link = mn.read_link(m, m.env)
    name, evidence = g09_container.container_of(m)
    facts.container = f"{name} ({evidence})" if name else None
    facts.dev_infiniband = mn.infiniband_devices(m)
    facts.memlock = mn.read_memlock(m)

    world = launch.job_rank(m.env)[1] or 0
    facts.fleet = _fleet(ctx, facts)
    if s.intrusive and world > 1 and _fleet_blocks(facts.fleet):
        facts.probe = {"ran": False, "reason": "the nodes did not agree (see the node comparison)"}
    elif s.intrusive and world > 1:
        child = m.python_child(
            "g10:allreduce",
            ["_job_store.py", "allreduce_child.py"],
            mn.probe_config(s.timeout),
            step_timeout=s.timeout,
            total_timeout=s.timeout * 40,
            env=launch.torchrun_env(m.env),
        )
        facts.probe = summarize_probe(child)
    elif s.intrusive:
        facts.probe = {"ran": False, "reason": "not launched by torchrun (WORLD_SIZE unset or 1)"}
    return facts


def _fleet(ctx: CheckContext, facts: Facts) -> dict[str, Any] | None:
    """The node comparison's exchange, when this process is one rank of a job
    with a rendezvous point. An srun task without one is told how to give it
    (srun sets a task's rank, never MASTER_ADDR/MASTER_PORT); a hand-set
    RANK/WORLD_SIZE without one is only a note."""
    env = ctx.machine.env
    if fleet.in_job(env):
        return _exchange(ctx, facts)
    unset = fleet.missing_rendezvous(env)
    if not unset:
        return None
    rank, world = launch.job_rank(env)
    if launch.from_srun(env):
        return {
            "error": f"srun task {rank} of {world} has no rendezvous point ({' and '.join(unset)} unset)",
            "cause": "rendezvous",
        }
    facts.notes.append(f"nodes not compared: {' and '.join(unset)} unset (torchrun sets both)")
    return None


@runtime_checkable
class _RunsChecks(Protocol):
    """The engine's run(), which the node comparison needs (every check's status in the fingerprint)."""

    def run(self, check_id: str) -> Result: ...


def _exchange(ctx: CheckContext, facts: Facts) -> dict[str, Any]:
    """Run the other selected checks first, then hand this node's fingerprint (with each check's status and
    G-line) to every rank."""
    engine = ctx.engine  # kit's _Engine does not offer run(): until it does, asked for here
    others = [cid for cid in ctx.selected if cid != "G10"]
    results = {cid: engine.run(cid) for cid in others} if isinstance(engine, _RunsChecks) else {}
    local = evaluate(facts, ctx.params())
    lines = {cid: {"status": r.status.value, "line": r.line()} for cid, r in results.items()}
    scope = "this node, before the node comparison"
    lines["G10"] = {"status": local.status.value, "line": local.line(), "scope": scope}
    g9 = results["G9"].reading("container") if "G9" in results else None
    mine = fleet.fingerprint(
        ctx.machine,
        {cid: r["status"] for cid, r in lines.items()},
        results=lines,
        interfaces=fleet_interfaces(ctx.machine.env, facts.link),
        image=str(g9.value) if g9 is not None and g9.value is not None else None,
    )
    return fleet.exchange(ctx.machine, mine, max(3.0, ctx.settings.timeout * 3))


def fleet_interfaces(env: dict[str, str], link: dict[str, Any] | None) -> dict[str, int | None]:
    """The interfaces NCCL's data goes over, and their MTUs, by G10's own link
    rules (:func:`_data_ifnames`): the net devices behind the RoCE devices
    ``NCCL_IB_HCA`` selects (all of them when it is unset), the socket
    interface only when sockets carry the data."""
    if not link:
        return {}
    rdma = link.get("rdma") or {}
    roce = bool(rdma) and env.get("NCCL_IB_DISABLE", "").strip() != "1"
    value = env.get("NCCL_IB_HCA", "")
    chosen = (hca_selection(value, sorted(rdma)) if value.strip() else sorted(rdma)) if roce else []
    mtus = link.get("mtu") or {}
    return {name: mtus.get(name) for name in _data_ifnames(env, link, chosen, roce)}


def _fleet_blocks(exchanged: dict[str, Any] | None) -> bool:
    """The bandwidth probe runs only once the fingerprints agree on what breaks collectives."""
    if exchanged is None:
        return False
    if exchanged.get("error") or not exchanged.get("fingerprints"):
        return True
    out = Findings("G10")
    nodes.compare(exchanged["fingerprints"], out, exchanged.get("rank"))
    return bool(out.problems)


# --------------------------------------------------------------------------- evaluate


@dataclass
class View:
    """What one source (or the job as a whole) says, with the finding behind each number."""

    name: str
    kind: str
    tp: int = 0
    tp_by: str = ""
    nodes: int = 0
    nodes_by: str = ""
    pp: int = 1
    strategies: list[str] = field(default_factory=list)
    backend: str = ""
    #: "training", "serving" or "" (not said)
    role: str = ""


def _describe(name: str, f: Finding) -> str:
    value = f["value"] if f["value"] is not None else repr(f.get("raw", ""))
    if name == "environment":
        return f"{f['key']}"
    return f"{name}: {f['key']} = {value}"


def launcher_nodes(env: dict[str, str]) -> list[Finding]:
    """Node counts the launcher's environment implies, each with its evidence."""
    out: list[Finding] = []
    for size, local in (
        ("WORLD_SIZE", "LOCAL_WORLD_SIZE"),
        ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ):
        ws, lws = cfgs.as_count(env.get(size)), cfgs.as_count(env.get(local))
        if ws and lws:
            out.append(Finding(what="nodes", value=math.ceil(ws / lws), key=f"{size}={ws}, {local}={lws}"))
    for name in ("GROUP_WORLD_SIZE", "NNODES", "PET_NNODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"):
        n = cfgs.as_count(env.get(name))
        if n:
            out.append(Finding(what="nodes", value=n, key=f"{name}={env[name]}"))
    return out


def _role_of(f: Finding) -> str:
    """What one finding says about the job: training, serving, or nothing."""
    if f["what"] == "strategy":
        return "training"
    if f["what"] == "tp" and cfgs.norm(str(f["key"]).rsplit(".", 1)[-1].split(": ")[-1]) in TRAINING_TP_KEYS:
        return "training"
    if f["what"] in ("backend", "headless"):
        return "serving"
    return ""


def _pick_role(a: str, b: str) -> str:
    """Training wins: the stricter rule applies when a source says both."""
    return "training" if "training" in (a, b) else (a or b)


def _view(name: str, kind: str, findings: list[Finding], world: int | None, role: str | None = None) -> View:
    v = View(name=name, kind=kind, role=role or "")
    for f in findings:
        v.role = _pick_role(v.role, _role_of(f))
        _take(v, f, world)
    return v


def _take_count(v: View, f: Finding) -> None:
    what, value = f["what"], f["value"]
    if not isinstance(value, int):
        return
    if what == "tp" and (value > v.tp or not v.tp_by):
        v.tp, v.tp_by = value, _describe(v.name, f)
    elif what == "pp" and value > v.pp:
        v.pp = value
    elif what == "nodes" and value > v.nodes:
        v.nodes, v.nodes_by = value, _describe(v.name, f)


def _take(v: View, f: Finding, world: int | None) -> None:
    """What one finding adds to a view: the largest degree or count, each with its evidence."""
    what, value, name = f["what"], f["value"], v.name
    if what in ("tp", "pp", "nodes"):
        _take_count(v, f)
    elif what == "tp_plan" and value is not None and (world or 2) > v.tp:  # "auto": over every process
        v.tp = world or 2
        v.tp_by = _describe(name, {**f, "value": f"{value} (TP over all {world or 'the'} processes)"})
    elif what == "headless" and v.nodes < 2:
        v.nodes, v.nodes_by = 2, f"{name}: {f['key']} (a headless vLLM is a worker of a multi-node engine)"
    elif what == "strategy" and isinstance(value, str) and value.upper() not in v.strategies:
        v.strategies.append(value.upper())
    elif what == "backend" and isinstance(value, str):
        v.backend = value


def _ray_hint(env: dict[str, str]) -> str | None:
    """``VLLM_HOST_IP=…`` or a non-local ``RAY_ADDRESS``: a Ray cluster over machines."""
    if env.get("VLLM_HOST_IP"):
        return f"VLLM_HOST_IP={env['VLLM_HOST_IP']}"
    address = env.get("RAY_ADDRESS", "")
    host = address.split("://")[-1].rsplit(":", 1)[0]
    if host and host not in ("auto", "local", "localhost", "127.0.0.1", "[::1]"):
        return f"RAY_ADDRESS={address}"
    return None


def _infer_nodes(v: View, gpus: int | None, env: dict[str, str] | None = None) -> None:
    """TP x PP larger than this machine's GPU count spans nodes, and so does a
    Ray backend with a multi-machine hint (only where nothing says how many
    nodes: a launcher that says one node is believed)."""
    if v.nodes or v.tp <= 1:
        return
    hint = _ray_hint(env or {}) if v.backend == "ray" else None
    if hint:
        v.nodes = 2
        v.nodes_by = f"{v.tp_by} on a Ray backend with {hint} (a Ray cluster across machines)"
        return
    if not gpus:
        return
    need = v.tp * v.pp
    if need > gpus:
        v.nodes = math.ceil(need / gpus)
        v.nodes_by = f"{v.tp_by} needs {need} GPUs and this machine has {gpus}"


def _merge(views: list[View], name: str) -> View:
    job = View(name=name, kind="job")
    for v in views:
        if v.tp > job.tp:
            job.tp, job.tp_by = v.tp, v.tp_by
        if v.nodes > job.nodes:
            job.nodes, job.nodes_by = v.nodes, v.nodes_by
        job.pp = max(job.pp, v.pp)
        job.strategies += [s for s in v.strategies if s not in job.strategies]
        job.backend = job.backend or v.backend
        job.role = _pick_role(job.role, v.role)
    return job


@dataclass
class Violation:
    """One TP degree > 1 that spans nodes > 1, with its evidence and the job's role."""

    tp: int
    tp_by: str
    nodes: int
    nodes_by: str
    role: str

    def evidence(self) -> str:
        """Both pieces of evidence, each said once (the GPU-count inference
        repeats the TP finding it starts from)."""
        if self.nodes_by.startswith(self.tp_by + " "):
            return f"{self.tp_by}; {self.nodes_by[len(self.tp_by) + 1 :]}"
        return f"{self.tp_by}; {self.nodes_by}"


#: configs: each is judged on its own, and pairs only with the launcher's (the job's) own counts
CONFIG_KINDS = ("given", "found")


def violations(job: View, others: list[View]) -> list[Violation]:
    """Every TP > 1 that spans nodes > 1 (a config pairs with the job's own count)."""
    out: list[Violation] = []
    if job.tp > 1 and job.nodes > 1:
        out.append(Violation(job.tp, job.tp_by, job.nodes, job.nodes_by, job.role))
    for v in others:
        if v.tp > 1 and v.nodes > 1:
            out.append(Violation(v.tp, v.tp_by, v.nodes, v.nodes_by, v.role))
        elif v.kind in CONFIG_KINDS and v.tp > 1 and job.nodes > 1:
            out.append(Violation(v.tp, v.tp_by, job.nodes, job.nodes_by, _pick_role(v.role, job.role)))
        elif v.kind in CONFIG_KINDS and v.nodes > 1 and job.tp > 1:
            out.append(Violation(job.tp, job.tp_by, v.nodes, v.nodes_by, _pick_role(v.role, job.role)))
    return out


def _bounded(details: list[str]) -> list[str]:
    return shortened(details, MAX_DETAILS)


def _rank_prefix(env: dict[str, str]) -> str:
    rank, world = launch.job_rank(env)
    if rank is None or not world or world < 2:
        return ""
    if rank == 0:
        return f"rank 0 of {world}: "
    return f"rank {rank} of {world}, this rank only: "  # rank 0 reports for the job


# --------------------------------------------------------------------------- evaluate: the probe


def _probe_readings(d: dict[str, Any], out: Findings) -> None:
    if d.get("backend"):
        out.read("allreduce_backend", d["backend"])
    if d.get("world_size"):
        out.read("allreduce_ranks", d["world_size"])
    if d.get("size_bytes"):
        out.read("allreduce_size", round(d["size_bytes"] / (1 << 20)), "MiB")
    if d.get("nccl_version"):
        out.read("nccl_version", d["nccl_version"])


def _judge_probe(probe: Probe | None, multi_node: bool, params: Params, speed: str, out: Findings) -> str:
    """Add the all-reduce probe's findings; returns the text a PASS line carries.
    ``speed``: what the link reports it negotiated (said beside a low figure)."""
    if probe is None:
        return ""
    if not probe.get("ran"):
        return f"all-reduce not measured: {probe.get('reason')}"
    d = probe.get("data") or {}
    _probe_readings(d, out)
    if probe.get("error"):
        where = "hung" if probe.get("hung") else "failed"
        fix = (
            "check that every rank runs G10 with --spark-intrusive, that all reach MASTER_ADDR, and "
            + FIX_LINK
        )
        out.flag(
            Status.WARN,
            f"all-reduce probe {where}: {probe['error']}",
            fix,
            f"all-reduce probe {where}",
            "run G10 on every rank; check the link",
        )
        return ""
    if d.get("wrong"):
        check = d.get("check") or {}
        text = f"all-reduce returned wrong values (expected {check.get('expected')}, got {check.get('got')})"
        out.flag(
            Status.WARN,
            text,
            "a corrupted collective: check the NCCL build (DGX OS's system NCCL) and the link",
            "all-reduce returned wrong values",
            "check the NCCL build and the link",
        )
        return ""
    group = d.get("group_busbw_gbps")
    if not isinstance(group, (int, float)):
        return "all-reduce gave no timing"
    return _judge_busbw(d, float(group), multi_node, params, speed, out)


def _judge_busbw(
    d: dict[str, Any], group: float, multi_node: bool, params: Params, speed: str, out: Findings
) -> str:
    """The bus bandwidth against the two floors (issue 22, G10+): below ``g10_busbw_fail_gbps``
    over NCCL FAILs (a degraded link: nccl_two_spark_7.txt's 2.82 GB/s after a re-cable, 21.4
    after a reboot), below ``g10_busbw_floor_gbps`` WARNs; a single node is not judged."""
    floor, fail = params.threshold("g10_busbw_floor_gbps"), params.threshold("g10_busbw_fail_gbps")
    out.read("allreduce_busbw", round(group, 2), "GB/s")
    out.read("allreduce_algbw", round(float(d.get("group_algbw_gbps") or 0.0), 2), "GB/s")
    out.read("allreduce_busbw_this_rank", round(float(d.get("busbw_gbps") or 0.0), 2), "GB/s")
    out.read("busbw_floor", floor, "GB/s")
    out.read("busbw_fail_below", fail, "GB/s")
    size_mib = round((d.get("size_bytes") or 0) / (1 << 20))
    text = f"all-reduce busbw {group:.1f} GB/s ({d.get('backend')}, {d.get('world_size')} ranks, {size_mib} MiB)"
    if not multi_node:
        return text + " within one node (the two-Spark floor does not apply)"
    reports = f" while the link reports {speed}" if speed else ""
    gloo = d.get("backend") == "gloo"
    if group < fail and not gloo:
        out.flag(
            Status.FAIL,
            f"{text}{reports}, below the {fail:g} GB/s a working two-Spark link never falls to (20-24 GB/s "
            "is healthy): a degraded ConnectX-7 link (after a re-cable or hot-plug it stays near 2.8 GB/s "
            "until reboot) or NCCL on TCP sockets",
            FIX_DEGRADED,
            f"all-reduce {group:.1f} GB/s, below {fail:g} GB/s" + (f" ({speed})" if speed else ""),
            "reboot both Sparks; re-seat the cable",
        )
        return ""
    if group < floor:
        cpu = " (measured with gloo on CPU; NCCL on the GPUs would differ)" if gloo else ""
        out.flag(
            Status.WARN,
            f"{text}{reports} is below the {floor:g} GB/s floor for a two-Spark link (20-24 GB/s is healthy){cpu}",
            FIX_LINK,
            f"all-reduce {group:.1f} GB/s, below the {floor:g} GB/s floor",
            "both RoCE twins in NCCL_IB_HCA, MTU 9000",
        )
        return ""
    return text


def link_speed(env: dict[str, str], link: dict[str, Any] | None) -> str:
    """What the interfaces NCCL's data goes over report they negotiated: ``enp1s0f1np1 200 Gb/s``
    from ``/sys/class/net/<if>/speed``, else the RoCE ports' ``rate``; "" when unreadable."""
    if not link:
        return ""
    speeds = link.get("speed") or {}
    parts = [f"{n} {speeds[n] / 1000:g} Gb/s" for n in fleet_interfaces(env, link) if isinstance(speeds.get(n), int)]
    if parts:
        return ", ".join(parts)
    rdma = link.get("rdma") or {}
    rates = [
        f"{name} {rate}"
        for name, dev in sorted(rdma.items())
        if not _down(dev)
        for rate in (dev.get("rates") or {}).values()
        if rate
    ]
    return ", ".join(rates[:2])


def _judge_rdma_access(f: Facts, params: Params, out: Findings) -> None:
    """A multi-node job in a container needs the RDMA devices passed in, and NCCL needs to pin
    memory (issue 22, G10+): no ``/dev/infiniband`` while the host's RoCE devices show in sysfs
    FAILs (NCCL: ``NET/IB : No device found``, then TCP sockets); a small ``RLIMIT_MEMLOCK`` WARNs."""
    if f.env.get("NCCL_IB_DISABLE", "").strip() == "1":
        return
    rdma = (f.link or {}).get("rdma") or {}
    verbs = [e for e in f.dev_infiniband or [] if e.startswith("uverbs")]
    out.read("dev_infiniband", ", ".join(f.dev_infiniband) if f.dev_infiniband else "absent")
    if f.container:
        out.read("container", f.container)
    if f.container and rdma and not verbs:
        out.flag(
            Status.FAIL,
            f"a multi-node job in a container ({f.container}) without /dev/infiniband"
            + ("" if f.dev_infiniband is None else " uverbs devices")
            + f" while the host has RoCE devices ({first_n(sorted(rdma), 2, sep=', ')}): NCCL cannot open them "
            "('NET/IB : No device found') and falls back to TCP sockets (a few GB/s)",
            FIX_DEVICES,
            "no /dev/infiniband in this container",
            "--device /dev/infiniband --cap-add IPC_LOCK --ulimit memlock=-1:-1",
        )
    elif f.container and not rdma and not verbs:
        out.note("no RoCE device under /sys/class/infiniband and no /dev/infiniband here: RDMA access not judged")
    if rdma or verbs:
        _judge_memlock(f.memlock, params, out)


def _judge_memlock(memlock: dict[str, Any] | None, params: Params, out: Findings) -> None:
    """WARN when RLIMIT_MEMLOCK is neither unlimited nor at least ``g10_memlock_min_mib``."""
    if not memlock:
        return
    soft = memlock.get("soft")
    if soft is None:
        out.note(f"memlock limit not read: {memlock.get('error') or 'no value'}")
        return
    out.read("memlock", soft if soft == "unlimited" else round(int(soft) / (1 << 20), 1), "" if soft == "unlimited" else "MiB")
    least = params.threshold("g10_memlock_min_mib")
    if soft == "unlimited" or int(soft) >= least * (1 << 20):
        return
    mib = int(soft) / (1 << 20)
    out.flag(
        Status.WARN,
        f"memlock limit {mib:g} MiB (RLIMIT_MEMLOCK of this process), below {least:g} MiB: NCCL's RDMA "
        "registration (ibv_reg_mr) can fail with 'Cannot allocate memory'",
        FIX_MEMLOCK,
        f"memlock limit {mib:g} MiB, below {least:g} MiB",
        "--ulimit memlock=-1:-1 (or limits.conf memlock unlimited)",
    )


# --------------------------------------------------------------------------- evaluate: the link

_TWIN = re.compile(r"^(?P<kind>[a-z]+?)(?:P(?P<domain>\d+))?p(?P<bus>\d+)s(?P<slot>\d+)f(?P<fn>\d+)$")


def twin_key(device: str) -> tuple[tuple[str, str, str, str], str] | None:
    """``rocep1s0f1`` -> ``(("roce", "1", "0", "1"), "0")``: the port, and the
    PCIe domain it hangs off. ``roceP2p1s0f1`` is the same port on domain 2."""
    m = _TWIN.match(device)
    if not m:
        return None
    return (m["kind"], m["bus"], m["slot"], m["fn"]), m["domain"] or "0"


def hca_selection(value: str, devices: list[str]) -> list[str]:
    """The devices ``NCCL_IB_HCA`` selects, as NCCL reads it: comma list of
    ``dev[:port]``, prefix match unless it starts with ``=``, ``^`` excludes."""
    text = value.strip()
    exclude = text.startswith("^")
    text = text.lstrip("^")
    exact = text.startswith("=")
    entries = [e.split(":")[0].strip() for e in text.lstrip("=").split(",") if e.strip()]

    def hit(dev: str) -> bool:
        return any(dev == e if exact else dev.startswith(e) for e in entries)

    return [d for d in devices if hit(d) != exclude]


def _down(dev: dict[str, Any]) -> bool:
    states = [str(s or "") for s in (dev.get("states") or {}).values()]
    return bool(states) and all("DOWN" in s.upper() or "INIT" in s.upper() for s in states)


def _judge_hca(env: dict[str, str], rdma: dict[str, Any], out: Findings) -> list[str]:
    """WARN when NCCL_IB_HCA names one RoCE twin of a port and not the other;
    returns the devices NCCL will use (for the MTU check)."""
    devices = sorted(rdma)
    value = env.get("NCCL_IB_HCA", "")
    chosen = hca_selection(value, devices) if value.strip() else devices
    if not value.strip():
        return chosen
    up = [d for d in devices if not _down(rdma[d])]
    if (devices and not chosen) or (up and not [d for d in chosen if d in up]):
        what = "none of this node's RoCE devices" if not chosen else "only RoCE devices whose port is down"
        use = up or devices
        out.flag(
            Status.WARN,
            f"NCCL_IB_HCA={value} selects {what} ({', '.join(chosen or devices)}): NCCL finds no usable IB "
            "device and sends over TCP sockets (a few GB/s where the two-Spark link gives 20-24)",
            f"NCCL_IB_HCA={','.join(use)} on every node (the devices `ibdev2netdev` shows Up), or unset it",
            f"NCCL_IB_HCA={value} {'matches no RoCE device here' if not chosen else 'names only down ports'}",
            f"NCCL_IB_HCA={','.join(use)}",
        )
        return chosen
    _judge_twins(value, chosen, rdma, out)
    return chosen


def _judge_twins(value: str, chosen: list[str], rdma: dict[str, Any], out: Findings) -> None:
    """WARN (once) for a chosen device whose up twin, on the other PCIe root, is not chosen."""
    for dev in chosen:
        key = twin_key(dev)
        twins = [
            d
            for d in sorted(rdma)
            if key and d != dev and (k := twin_key(d)) and k[0] == key[0] and k[1] != key[1]
        ]
        missing = [t for t in twins if t not in chosen and not _down(rdma[t]) and not _down(rdma[dev])]
        if missing:
            both = ",".join([*(d for d in chosen if d != dev), dev, *missing])
            out.flag(
                Status.WARN,
                f"NCCL_IB_HCA={value} names {dev} but not its twin {missing[0]} (the same QSFP port on the "
                "other PCIe root): one twin caps near 12 GB/s, both reach 20-24 GB/s",
                f"NCCL_IB_HCA={both} on every node (NCCL_IB_MERGE_NICS=1 merges them)",
                f"NCCL_IB_HCA has one RoCE twin of 2 ({dev})",
                f"NCCL_IB_HCA={both}",
            )
            return


def _data_ifnames(env: dict[str, str], link: dict[str, Any], chosen: list[str], roce: bool) -> list[str]:
    """Interfaces that carry NCCL's data: the net devices behind the RoCE
    devices in use, and NCCL_SOCKET_IFNAME when it is one of them or when
    sockets carry the data (RoCE off or absent). A socket interface beside
    working RoCE only bootstraps (nccl_two_spark_1.txt: wlP9s9, 23 GB/s)."""
    rdma = link.get("rdma") or {}
    behind = [n for d in chosen if not _down(rdma.get(d, {})) for n in rdma.get(d, {}).get("netdevs", [])]
    all_roce = {n for d in rdma.values() for n in d.get("netdevs", [])}
    sockets = [n for n in mn.socket_ifnames(env.get("NCCL_SOCKET_IFNAME")) if n in all_roce or not roce]
    return list(dict.fromkeys([*sockets, *behind]))  # the interface the user named first


def _judge_link(env: dict[str, str], link: dict[str, Any] | None, out: Findings) -> None:
    """The two-Spark link as NCCL is told to use it (only for a multi-node job)."""
    if env.get("NCCL_IB_DISABLE", "").strip() == "1":
        out.flag(
            Status.WARN,
            "NCCL_IB_DISABLE=1 on a multi-node job: NCCL sends over TCP sockets, not RoCE "
            "(a few GB/s where the two-Spark link gives 20-24)",
            FIX_IB_DISABLE,
            "NCCL_IB_DISABLE=1 across nodes: TCP, not RoCE",
            "unset NCCL_IB_DISABLE",
        )
    if not link or not link.get("sysfs"):
        return
    rdma = link.get("rdma") or {}
    if env.get("NCCL_IB_HCA") and not rdma:
        out.note("NCCL_IB_HCA is set but no RoCE device is under /sys/class/infiniband: twins not checked")
    roce = bool(rdma) and env.get("NCCL_IB_DISABLE", "").strip() != "1"
    chosen = _judge_hca(env, rdma, out) if roce else []
    mtus = link.get("mtu") or {}
    low = [(n, mtus[n]) for n in _data_ifnames(env, link, chosen, roce) if isinstance(mtus.get(n), int)]
    low = [(n, m) for n, m in low if m < MIN_MTU]
    if low:
        shown = first_n([f"{n} ({m})" for n, m in low], 3, sep=", ")
        names = ", ".join(n for n, _ in low)
        out.flag(
            Status.WARN,
            f"MTU below {MIN_MTU} on NCCL's interface: {shown}; the two-Spark link reaches 20-24 GB/s at MTU 9000",
            f"set mtu: 9000 on {names} on both Sparks (netplan), then re-run",
            f"MTU {low[0][1]} on {low[0][0]}, below {MIN_MTU}",
            f"set MTU 9000 on {names}",
        )


# --------------------------------------------------------------------------- evaluate: the job

ROLE_TEXT = {
    "training": (
        "a training job: TP over the two-Spark link is fragile and slow for training (NCCL hangs, vLLM #42354)"
    ),
    "serving": (
        "a serving job: NVIDIA's vLLM playbook runs TP=2 over two Sparks, but NCCL all-reduce over the link "
        "can hang (vLLM #42354)"
    ),
    "": (
        "a job not marked as training or serving: TP over the two-Spark link is fragile and slow for "
        "training (NCCL hangs, vLLM #42354); NVIDIA's playbooks run it only to serve"
    ),
}


def _judge_tp(bad: list[Violation], option: str, out: Findings) -> None:
    """One finding per kind of job (training, serving, not said), each judged on its own:
    training by ``--spark-tp-across-nodes`` (default FAIL), serving WARN."""
    for role in ("training", "", "serving"):
        mine = [b for b in bad if b.role == role]
        if not mine:
            continue
        b = mine[0]
        more = f"; {len(mine) - 1} more in the details" if len(mine) > 1 else ""
        text = f"tensor parallel {b.tp} across {b.nodes} nodes ({b.evidence()}){more}, {ROLE_TEXT[role]}"
        where = b.tp_by.split(": ", 1)[0]
        head = f"{role or 'job'}: TP {b.tp} across {b.nodes} nodes ({where})"
        if role == "serving":
            out.flag(Status.WARN, text, FIX_SERVE, head, "serve with DGX OS's system NCCL (vLLM #42354)")
        elif option == "fail":
            fix = FIX_TP if role else FIX_TP_UNKNOWN
            out.flag(Status.FAIL, text, fix, head, "DDP/FSDP across Sparks, TP within one node")
        else:
            out.flag(Status.WARN, text, FIX_TP_WARN, head, "prefer DDP/FSDP across Sparks")


def _env_view(env: dict[str, str], world: int | None) -> tuple[View, list[Finding]]:
    findings = launcher_nodes(env)
    for name in TP_ENV:
        if env.get(name):
            findings.append(
                cast(Finding, cfgs.make_finding("tp", env[name], f"{name}={env[name]}").to_dict())
            )
    role = "serving" if env.get("VLLM_TENSOR_PARALLEL_SIZE") else ""
    role = _pick_role(role, "training" if env.get("PARALLELISM_CONFIG_TP_SIZE") else "")
    return _view("environment", "env", findings, world, role), findings


def _source_views(f: Facts, world: int | None, out: Findings) -> tuple[list[View], int]:
    views: list[View] = []
    errors = 0
    for src in f.sources:
        out.note(*(_describe(src["name"], finding) for finding in src["findings"]))
        if src.get("error"):
            errors += 1
            out.note(f"{src['name']}: {src['error']}")
        out.note(*(f"{src['name']}: {n}" for n in src.get("notes") or []))
        views.append(_view(src["name"], src["kind"], src["findings"], world, src.get("role")))
    return views, errors


def _readings(
    f: Facts, job: View, views: list[View], all_views: list[View], errors: int, out: Findings
) -> None:
    others = [v for v in all_views if v is not job]
    out.read("nodes", (job.nodes or max((v.nodes for v in others), default=0)) or None)
    out.read("tensor_parallel", max((v.tp for v in all_views), default=0) or None)
    strategies = list(dict.fromkeys(s for v in all_views for s in v.strategies))
    if strategies:
        out.read("strategy", ", ".join(strategies))
    roles = sorted({v.role for v in all_views if v.role and (v.tp or v.nodes or v.strategies)})
    if roles:
        out.read("job_kind", ", ".join(roles))
    _setting_readings(f, errors, out)


def _setting_readings(f: Facts, errors: int, out: Findings) -> None:
    """The configs read, the GPUs here, NCCL's network settings, the rank."""
    configs = [s["name"] for s in f.sources if s["kind"] in CONFIG_KINDS and not s.get("error")]
    out.read("configs_read", len(configs))
    if configs:
        out.read("config_files", first_n(configs, 5, sep=", "))
    if errors:
        out.read("configs_unreadable", errors)
    if f.gpu_count is not None:
        out.read("gpus_here", f.gpu_count)
    for name in NET_ENV:
        if f.env.get(name):
            out.read(name.lower(), f.env[name])
    rank, world = launch.job_rank(f.env)
    if rank is not None and world and world > 1:
        out.read("rank", rank)
    if f.own_outputs:
        out.note(f"not read as configs (this tool wrote them): {first_n(f.own_outputs, 5, sep=', ')}")


def search_incomplete(f: Facts) -> str:
    """Why the config search did not see every config under the rootdir (a
    folder over its budget, the search's own limits), from its note; then
    "nothing multi-node" is at most INFO, never "no config found" (issue 19, item 5)."""
    if f.configs_given:
        return ""
    notes = (n for n in f.notes if isinstance(n, str) and n.startswith(mn.INCOMPLETE_NOTE))
    return next((n[len(mn.INCOMPLETE_NOTE) :] for n in notes), "")


def _configs_said(root: str, read: list[Source], broken: list[Source], partial: bool) -> tuple[str, str]:
    """``(headline words, summary words)`` of the configs read, unreadable, or not found."""
    names = first_n([src["name"] for src in read], 2, sep=", ")
    said = f"read {names}" if read else ("no config read" if broken or partial else "no config found")
    if read:
        where = f"{len(read)} config file(s) read under {root}: {names}"
    elif partial:
        where = f"no config read in the part of {root} searched"
    else:
        where = f"no config {'file read' if broken else 'found'} under {root}"
    if broken:
        where += f" ({len(broken)} unreadable; {broken[0]['name']}: {broken[0]['error']})"
    return said, where


def _nothing_to_go_on(f: Facts, out: Findings, p_text: str) -> Result:
    """No launcher, no TP, no node count: a single node (PASS), unless the
    configs the user named could not be read (SKIP: could not check)."""
    tried = [src for src in f.sources if src["kind"] in CONFIG_KINDS]
    read = [src for src in tried if not src.get("error")]  # a FIFO or a broken file is not "read"
    broken = [src for src in tried if src.get("error")]
    given = [src for src in tried if src["kind"] == "given"]
    incomplete = search_incomplete(f)
    partial = bool(incomplete) and not given
    said, where = _configs_said(f.root, read, broken, partial)
    text = (
        "no launcher environment (WORLD_SIZE, NNODES, SLURM_NNODES), no tensor parallelism or node count "
        f"({where}), no training/serving process with those flags" + (f"; {p_text}" if p_text else "")
    )
    if given and all(src.get("error") for src in given):
        return out.result(
            Status.SKIP,
            f"cannot judge the named config: {text}",
            headline=f"named config unreadable: {broken[0]['name']}",
        )
    if not given:
        out.note("name your job's config with --spark-config if it is elsewhere")
    if partial:
        return out.result(
            Status.INFO,
            f"config search incomplete ({incomplete}): {text}",
            headline=f"config search incomplete: nothing multi-node ({said})",
        )
    return out.result(
        Status.PASS, f"single node: {text}", headline=f"single node: nothing multi-node ({said})"
    )


def _ok_parts(
    job: View, others: list[View], all_views: list[View], out: Findings, files: list[str]
) -> tuple[str, str]:
    """``(summary, headline)`` of a job with nothing wrong. The headline names
    the config files read, and a TP that belongs to another job says so (it
    read "2 nodes, TP 2: data parallel across nodes")."""
    parts: list[str] = []
    multi = [v for v in others if v.nodes > 1]
    if job.nodes > 1:
        parts.append(f"{job.nodes} nodes ({job.nodes_by})")
    elif job.nodes == 1:
        parts.append(f"single node ({job.nodes_by})")
    else:
        parts.append(
            f"{multi[0].nodes} nodes ({multi[0].nodes_by})" if multi else "no sign of more than one node"
        )
    strategies = list(dict.fromkeys(s for v in all_views for s in v.strategies))
    if strategies:
        parts.append(", ".join(strategies))
    nodes = job.nodes or (multi[0].nodes if multi else 0)
    part, tp_head = _tp_part(job, others, all_views, nodes, out)
    parts.append(part)
    summary = ", ".join(parts)
    head = ", ".join([f"{nodes} nodes" if nodes > 1 else "single node", *strategies, tp_head])
    if nodes > 1:
        summary += ": data parallel across nodes, as recommended"
        head += ": data parallel across nodes"
    return summary, head + _files_read(head, files)


def _tp_part(
    job: View, others: list[View], all_views: list[View], nodes: int, out: Findings
) -> tuple[str, str]:
    """``(summary part, headline part)`` of a PASS's tensor parallelism."""
    tp_views = [v for v in all_views if v.tp_by]
    tp_max = max((v.tp for v in all_views), default=0)
    if tp_max <= 1:
        part = f"tensor parallel 1 ({tp_views[0].tp_by})" if tp_views else "no tensor parallelism set"
        return part, f"TP {max(tp_max, 1)}"
    v = max(tp_views, key=lambda x: x.tp)
    if v.nodes == 1 or (v.nodes == 0 and job.nodes == 1):
        return f"tensor parallel {v.tp} within one node ({v.tp_by})", f"TP {tp_max} within one node"
    o = next((o for o in others if o.nodes > 1 and o is not v), None)
    if o is not None:
        kinds = {v.kind, o.kind}
        where = "files" if kinds <= set(CONFIG_KINDS) else "processes" if kinds == {"process"} else "sources"
        out.note(
            f"{v.tp_by} and {o.nodes_by} are in different {where}: not judged as one job "
            "(each config is judged on its own; a launcher's WORLD_SIZE or NNODES applies to all)"
        )
    head = f"TP {tp_max} in another job ({v.tp_by.split(': ', 1)[0]})" if nodes > 1 else f"TP {tp_max}"
    return f"tensor parallel {v.tp} with no node count of its own ({v.tp_by})", head


#: room the headline leaves for the files read (the short line is 120 wide, less "G10 PASS: ")
_HEAD_ROOM = 108


def _files_read(head: str, files: list[str]) -> str:
    """`` (read a.yaml, b.json)``, or `` (2 configs read)`` where the names do not fit."""
    if not files:
        return ""
    named = f" (read {first_n(files, 2, sep=', ')})"
    return named if len(head) + len(named) <= _HEAD_ROOM else f" ({count(len(files), 'config')} read)"


def _has_evidence(f: Facts, env_findings: list[Finding], views: list[View]) -> bool:
    return (
        bool(env_findings)
        or any(v.tp or v.nodes or v.strategies or v.backend for v in views)
        or bool(launch.job_rank(f.env)[1])
        or bool(f.probe and f.probe.get("ran"))
    )


def _finish(f: Facts, out: Findings, ok: tuple[str, str], p_text: str, *, job_ok: bool, alike: int) -> Result:
    """One Result: the problem first, then what the job is; the rank in front.
    ``alike``: ranks the node comparison found alike (0: none compared, or they differ)."""
    pairs = out.problems or out.warnings
    if out.problems and out.warnings:  # said in the details, with their fixes
        out.note(*(f"also: {t} (fix: {x})" for t, x in out.warnings))
    if alike:  # said on the line: a comparison that ran is not a silent one
        same = "same GPU, driver, CUDA, torch, NCCL and settings"
        ok = (f"{ok[0]}; {alike} ranks compared: {same}", f"{ok[1]}; {alike} ranks alike")
    head, short = out.short.get(pairs[0][0], ("", "")) if pairs else (ok[1], "")
    summary = ok[0] + (f"; {p_text}" if p_text else "")
    r = out.result(Status.PASS, summary, headline=head, short_fix=short)
    if r.status is Status.WARN and job_ok:  # a link or probe warning: then what the job is
        r.summary = f"{r.summary}; {summary}"
    elif r.status in (Status.WARN, Status.FAIL) and p_text:
        r.summary = f"{r.summary}; {p_text}"
    prefix = _rank_prefix(f.env)
    r.summary = prefix + r.summary
    if prefix and not prefix.startswith("rank 0 "):
        r.headline = prefix + r.headline
    incomplete = search_incomplete(f)
    if r.status is Status.PASS and incomplete:
        r.status = Status.INFO  # a search that did not finish is never a PASS
        r.summary = f"{r.summary}; config search incomplete ({incomplete})"
        r.headline = f"{r.headline}; config search incomplete"
    r.details = _bounded(r.details)
    return r


def _judge_fleet(exchanged: dict[str, Any] | None, out: Findings) -> int:
    """The node comparison (``checks/nodes.py``): a missing rank, a difference.
    Returns how many ranks it found alike (0: none compared, or they differ)."""
    if exchanged is None:
        return 0
    fps = exchanged.get("fingerprints") or []
    if fps:
        out.read("nodes_compared", len(fps))
        before = len(out.problems) + len(out.warnings)
        nodes.compare(fps, out, exchanged.get("rank"))
        return len(fps) if len(out.problems) + len(out.warnings) == before else 0
    missing = exchanged.get("missing") or []
    error = str(exchanged.get("error") or "no fingerprints came back")
    store = exchanged.get("store") or "MASTER_ADDR:MASTER_PORT"
    if missing:
        who = ", ".join(str(r) for r in missing)
        first = f"start rank {who}"
        if 0 in missing:
            first += " (it, or torchrun on its node, hosts the rendezvous store)"
        out.flag(
            Status.FAIL,
            f"rank {who} never joined the node comparison ({error})",
            f"{first} with the same MASTER_ADDR/MASTER_PORT on every node, and check that {store} is "
            "reachable from every node (firewall, the address MASTER_ADDR resolves to)",
            f"rank {who} never joined the node comparison",
            f"start rank {who}; check {store} is reachable",
        )
        return 0
    if exchanged.get("cause") == "rendezvous":
        out.flag(
            Status.WARN,
            f"nodes not compared: {error}",
            'export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1) and '
            "MASTER_PORT=<a free port, the same on every node> before srun (README: Two Sparks)",
            "nodes not compared: srun gives no MASTER_ADDR/MASTER_PORT",
            "export MASTER_ADDR, MASTER_PORT before srun",
        )
        return 0
    torch = exchanged.get("cause") == "torch"
    out.flag(
        Status.WARN,
        f"nodes not compared: {error}",
        "install torch with torch.distributed (gloo) on every node"
        if torch
        else f"use a MASTER_PORT that is free on rank 0's node and the same on every node (now {store})",
        "nodes not compared",
        "install torch with gloo" if torch else "check MASTER_ADDR/MASTER_PORT",
    )
    return 0


def evaluate(facts: Facts, params: Params) -> Result:
    """Decide G10 from what gather() read (pure). A process scan that did not
    finish (or read command lines only in part) is never a PASS: the launcher
    or the TP flags it did not read may be the job's."""
    result = _evaluate(facts, params)
    stopped = next((n for n in facts.notes if n.startswith(SCAN_STOPPED)), None)
    if stopped and result.status is Status.PASS:
        result.status = Status.WARN
        result.summary = f"process table incomplete ({stopped}): a job's launcher or TP flags may be unread; {result.summary}"
        result.fix = "rerun; if it persists, name the job's config with --spark-config"
        result.headline = "process table incomplete: a job's flags may be unread"
        result.short_fix = "rerun; or --spark-config the job's config"
    return result


def _mine_only(facts: Facts, out: Findings) -> Facts:
    """The facts without other users' jobs: theirs to judge, a note here, never a FAIL or WARN (issue 24)."""
    for s in facts.sources:
        if s.get("owner"):
            found = ", ".join(f"{x['key']} = {x['value']}" for x in s["findings"])
            out.note(f"not judged, another user's job ({s['owner']}): {s['name']}: {found}")
    return dataclasses.replace(facts, sources=[s for s in facts.sources if not s.get("owner")])


def _infer_all_nodes(job: View, others: list[View], f: Facts) -> None:
    """Each view's node count where it does not say one; a config's own count stands beside the launcher's."""
    for v in [job, *others]:
        if v.kind in CONFIG_KINDS and job.nodes:  # the launcher's count is this run's: believed
            continue
        _infer_nodes(v, f.gpu_count, f.env)


def _judge_links(f: Facts, params: Params, out: Findings) -> str:
    """A job over several nodes: its link and RDMA access judged; the link's speed, read (empty when unknown)."""
    _judge_link(f.env, f.link, out)
    _judge_rdma_access(f, params, out)
    speed = link_speed(f.env, f.link)
    if speed:
        out.read("link_speed", speed)
    return speed


def _intrusive_hint(f: Facts, world: int | None, out: Findings) -> None:
    """A job of several ranks run without --spark-intrusive: the flag that would measure them, said."""
    if f.intrusive is False and world and world > 1:
        out.note("add --spark-intrusive to measure all-reduce bus bandwidth between the ranks")


def _evaluate(facts: Facts, params: Params) -> Result:
    out = Findings("G10")
    f = _mine_only(facts, out)
    world = launch.job_rank(f.env)[1]
    env_view, env_findings = _env_view(f.env, world)
    views, errors = _source_views(f, world, out)
    # the job is what launched this run; every config, named or found, is judged on its own (issue 11)
    job = _merge([env_view] + [v for v in views if v.kind == "launcher"], "job")
    others = [v for v in views if v.kind != "launcher"]
    _infer_all_nodes(job, others, f)
    out.note(*f.notes)
    _readings(f, job, views, [job, *others], errors, out)

    bad = violations(job, others)
    _judge_tp(bad, str(params.option("tp_across_nodes")), out)
    out.details[:0] = [f"TP {b.tp} across {b.nodes} nodes: {b.evidence()}" for b in bad]
    speed = _judge_links(f, params, out) if job.nodes > 1 or any(v.nodes > 1 for v in others) else ""
    alike = _judge_fleet(f.fleet, out)
    p_text = _judge_probe(f.probe, job.nodes > 1, params, speed, out)
    _intrusive_hint(f, world, out)
    if not out.status and not _has_evidence(f, env_findings, views):
        r = _nothing_to_go_on(f, out, p_text)
        r.details = _bounded(r.details)
        return r
    files = [s["name"] for s in f.sources if s["kind"] in CONFIG_KINDS and not s.get("error")]
    return _finish(
        f, out, _ok_parts(job, others, [job, *others], out, files), p_text, job_ok=not bad, alike=alike
    )
