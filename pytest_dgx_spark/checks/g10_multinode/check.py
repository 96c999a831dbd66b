"""G10 — two Sparks: data parallel (DDP/FSDP) across nodes, not tensor parallel.

Two Sparks share one ConnectX-7 link (20-24 GB/s all-reduce bus bandwidth when healthy). TP
all-reduces inside every layer, so across it TP is slow and fragile (NCCL wedging, vLLM #42354):
a *training* job with TP > 1 across nodes > 1 FAILs (``--spark-tp-across-nodes warn`` downgrades),
a *serving* job (NVIDIA's vLLM playbook) WARNs. G10 reads the launcher's environment, the configs
(``--spark-config``, else found under the rootdir), your own job's processes (another user's are a
note: issue 24) and, for a multi-node job, the link NCCL uses. Under torchrun ranks compare
fingerprints and, with ``--spark-intrusive``, measure an all-reduce. A link can report 200 G and
still move a few GB/s (issue 22): a re-cabled ConnectX-7 stays near 2.8 GB/s until reboot
(``nccl_two_spark_7.txt``). G10 reads no NCCL log, so GB10's expected ``GPU Direct RDMA Disabled``
lines are never findings.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pytest_dgx_spark import attachments, launch
from pytest_dgx_spark.checks.g09_container import check as g09_container
from pytest_dgx_spark.checks.g10_multinode import nodes
from pytest_dgx_spark.checks.kit import CheckContext, FactsBase, Findings, Params, count, first_n, shortened
from pytest_dgx_spark.model import Result, Status
from pytest_dgx_spark.probes import configs as cfgs
from pytest_dgx_spark.probes import fleet
from pytest_dgx_spark.probes import multinode as mn
from pytest_dgx_spark.probes.child import ChildResult
from pytest_dgx_spark.probes.gpu_programs import job_name, unwrap
from pytest_dgx_spark.probes.multinode import LAUNCHER_ENV, NET_ENV, PROBE_BYTES, PROBE_ITERS, TP_ENV
from pytest_dgx_spark.probes.processes import SCAN_STOPPED
from pytest_dgx_spark.redact import split_title

__all__ = ["LAUNCHER_ENV", "PROBE_BYTES", "PROBE_ITERS", "TP_ENV"]  # read by the tests and the benchmark

#: details kept per result (every finding of every config can be a lot)
MAX_DETAILS = 60
#: the two-Spark link reaches 20-24 GB/s only with jumbo frames (two_spark_config_2.txt: mtu: 9000)
MIN_MTU = 9000
#: TP keys only training frameworks use (Megatron/NeMo, DeepSpeed AutoTP, accelerate, torchtitan)
TRAINING_TP_KEYS = {
    "tensor_model_parallel_size", "autotp_size", "megatron_lm_tp_degree", "parallelism_config_tp_size",
    "tensor_parallel_degree",
}
#: configs: each is judged on its own, and pairs only with the launcher's (the job's) own counts
CONFIG_KINDS = ("given", "found")

FIX_TP = (
    "train across the Sparks with DDP or FSDP (accelerate distributed_type: FSDP with "
    "parallelism_config_tp_size: 1, as NVIDIA's pytorch-fine-tune playbook) and keep TP inside one node"
)
FIX_TP_UNKNOWN = FIX_TP + "; for a TP=2 server as in NVIDIA's vLLM playbook, --spark-tp-across-nodes warn"
_SYSTEM_NCCL = "DGX OS's system NCCL, not a pip-bundled one (the fix in vLLM #42354)"
FIX_TP_WARN = f"prefer DDP/FSDP across Sparks; for TP=2 inference use {_SYSTEM_NCCL}"
FIX_SERVE = f"serve with {_SYSTEM_NCCL}, and keep TP inside one Spark when the model fits"
FIX_LINK = (
    "put NCCL on the ConnectX-7 port: NCCL_SOCKET_IFNAME=enp1s0f1np1 (and GLOO_SOCKET_IFNAME, "
    "UCX_NET_DEVICES), NCCL_IB_HCA naming both halves, MTU 9000; ~3 GB/s means the wrong interface"
)

#: ``configs.Finding`` and ``configs.Source`` as data (``what``, ``value``, ``key``, ``raw``; ``name``,
#: ``kind``, ``findings``, ``error``, ``notes``, ``role``, ``owner``: "uid N" for another user's job)
Finding = dict[str, Any]
Source = dict[str, Any]
#: the all-reduce probe: ``ran`` (else ``reason``), ``data``, ``error``, ``hung``
Probe = dict[str, Any]


@dataclass
class Facts(FactsBase):
    env: dict[str, str] = field(default_factory=dict)  # the launcher, TP, NCCL and Ray variables set
    sources: list[Source] = field(default_factory=list)  # given, found, process, launcher
    root: str = ""
    configs_given: bool = False  # --spark-config named configs: they replaced the search
    configs_found: int = 0
    own_outputs: list[str] = field(default_factory=list)  # files this tool wrote, not read as configs
    notes: list[str] = field(default_factory=list)
    gpu_count: int | None = None
    intrusive: bool = False
    probe: Probe | None = None  # None when not attempted
    link: dict[str, Any] | None = None  # mn.read_link()
    fleet: dict[str, Any] | None = None  # fleet.exchange(): every rank's fingerprint, or what went wrong
    container: str | None = None  # the container this runs in (G9's markers); None on the host
    dev_infiniband: list[str] | None = None  # /dev/infiniband's entries; None when it is absent
    memlock: dict[str, Any] | None = None  # mn.read_memlock()

    #: issue 22 (G10+): a capture of an earlier version has none of them; their defaults judge nothing
    ADDED: ClassVar[Mapping[str, str]] = dict.fromkeys(
        ("container", "dev_infiniband", "memlock"), "issue 22: RDMA access in a container"
    )


FACTS = Facts


def summarize_probe(child: ChildResult) -> Probe:
    """The probe child's result as plain data, with one reason when it failed."""
    d = {k: v for k, v in child.data.items() if k != "_allowance"}
    if d.get("torch_import_error"):
        reason = f"torch not importable ({d['torch_import_error']})"
        return {"ran": False, "data": d, "error": None, "hung": False, "reason": reason}
    error: str | None = None
    if child.timed_out:
        error = child.describe("all-reduce probe")
    else:
        error = d.get("error") or (None if child.ok else child.describe("all-reduce probe"))
    return {"ran": True, "data": d, "error": error, "hung": bool(child.timed_out)}


def _runs(wrapper: dict[str, Any], child: dict[str, Any]) -> bool:
    """``child`` is the command ``wrapper`` (timeout, uv run, nohup...) runs: one job."""
    cmd = split_title(wrapper.get("cmdline") or [])
    inner, argv = unwrap(cmd), split_title(child.get("cmdline") or [])
    if inner == cmd or not argv:
        return False
    tail = inner[1:]
    if tail:
        return argv[len(argv) - len(tail) :] == tail
    return os.path.basename(argv[-1]) == os.path.basename(inner[0])


def process_sources(procs: list[dict[str, Any]]) -> list[Source]:
    """Running processes with G10's flags as sources: a wrapper and its command are one job, with the
    command's pid; another user's job carries its ``owner`` (issue 24)."""
    by_pid = {p.get("pid"): p for p in procs}
    inner = {w["pid"]: p for p in procs if (w := by_pid.get(p.get("ppid"))) is not None and _runs(w, p)}
    wrapped = {c.get("pid") for c in inner.values()}
    out: list[Source] = []
    for p in (p for p in procs if p.get("pid") not in wrapped):  # a wrapped one is said by its wrapper
        last, seen = p, set()
        while last.get("pid") in inner and last.get("pid") not in seen:
            seen.add(last.get("pid"))
            last = inner[last["pid"]]
        name = job_name(p.get("cmdline") or [])
        job = {**p, "pid": last.get("pid"), "name": name, "self": p.get("self") or last.get("self")}
        owner = {"owner": f"uid {job.get('uid')}"} if job.get("mine") is False else {}
        out += [{**src.to_dict(), **owner} for src in cfgs.process_sources([job], own_pid=os.getpid())]
    return out


def _wants_gpus(facts: Facts) -> bool:
    """A TP degree > 1 anywhere: then this machine's GPU count says whether it spans nodes."""
    tps = [f["value"] for src in facts.sources for f in src["findings"] if f["what"] == "tp"]
    env_tp = cfgs.as_count(facts.env.get("VLLM_TENSOR_PARALLEL_SIZE")) or 0
    return any(isinstance(v, int) and v > 1 for v in tps) or env_tp > 1


def gather(ctx: CheckContext) -> Facts:
    m, s = ctx.machine, ctx.settings
    found = mn.discover(Path(s.rootdir), tuple(s.config), s.timeout)
    procs = m.processes()
    name, evidence = g09_container.container_of(m)
    facts = Facts(
        intrusive=s.intrusive, env=mn.job_env(m.env), root=str(s.rootdir), configs_given=found["given"],
        configs_found=found["found"], own_outputs=found["own_outputs"],
        notes=[*found["notes"], *([procs["error"]] if procs.get("error") else [])],
        sources=[*found["sources"], *process_sources(procs.get("processes") or [])],
        link=mn.read_link(m, m.env), container=f"{name} ({evidence})" if name else None,
        dev_infiniband=mn.infiniband_devices(m), memlock=mn.read_memlock(m),
    )
    if _wants_gpus(facts) and (nv := m.nvml()).get("ok"):
        facts.gpu_count = len(nv.get("devices") or [])
    world = launch.job_rank(m.env)[1] or 0
    facts.fleet = _fleet(ctx, facts)
    if not s.intrusive:
        return facts
    if world <= 1:
        facts.probe = {"ran": False, "reason": "not launched by torchrun (WORLD_SIZE unset or 1)"}
    elif _fleet_blocks(facts.fleet):
        facts.probe = {"ran": False, "reason": "the nodes did not agree (see the node comparison)"}
    else:
        child = m.python_child(
            "g10:allreduce", ["_job_store.py", "allreduce_child.py"], mn.probe_config(s.timeout),
            step_timeout=s.timeout, total_timeout=s.timeout * 40, env=launch.torchrun_env(m.env),
        )
        facts.probe = summarize_probe(child)
    return facts


def _fleet(ctx: CheckContext, facts: Facts) -> dict[str, Any] | None:
    """The node comparison's exchange for a rank of a job with a rendezvous point; an srun task
    without one is told how to give it, a hand-set RANK/WORLD_SIZE without one is a note."""
    env = ctx.machine.env
    if fleet.in_job(env):
        return _exchange(ctx, facts)
    unset = " and ".join(fleet.missing_rendezvous(env))
    if unset and launch.from_srun(env):
        rank, world = launch.job_rank(env)
        error = f"srun task {rank} of {world} has no rendezvous point ({unset} unset)"
        return {"error": error, "cause": "rendezvous"}
    if unset:
        facts.notes.append(f"nodes not compared: {unset} unset (torchrun sets both)")
    return None


def _exchange(ctx: CheckContext, facts: Facts) -> dict[str, Any]:
    """Run the other selected checks, then hand this node's fingerprint (with their G-lines) to every rank."""
    run = getattr(ctx.engine, "run", None)  # an engine without run(): no other check's status
    results = {cid: run(cid) for cid in ctx.selected if cid != "G10"} if callable(run) else {}
    local = evaluate(facts, ctx.params())
    lines = {cid: {"status": r.status.value, "line": r.line()} for cid, r in results.items()}
    scope = "this node, before the node comparison"
    lines["G10"] = {"status": local.status.value, "line": local.line(), "scope": scope}
    g9 = results["G9"].reading("container") if "G9" in results else None
    mine = fleet.fingerprint(
        ctx.machine, {cid: r["status"] for cid, r in lines.items()}, results=lines,
        interfaces=fleet_interfaces(ctx.machine.env, facts.link),
        image=str(g9.value) if g9 is not None and g9.value is not None else None,
    )
    return fleet.exchange(ctx.machine, mine, max(3.0, ctx.settings.timeout * 3))


def _chosen(env: dict[str, str], rdma: dict[str, Any]) -> tuple[list[str], bool]:
    """The RoCE devices ``NCCL_IB_HCA`` selects (all when unset), and whether RoCE is on at all."""
    if not rdma or env.get("NCCL_IB_DISABLE", "").strip() == "1":
        return [], False
    value = env.get("NCCL_IB_HCA", "")
    return (hca_selection(value, sorted(rdma)) if value.strip() else sorted(rdma)), True


def fleet_interfaces(env: dict[str, str], link: dict[str, Any] | None) -> dict[str, int | None]:
    """The interfaces NCCL's data goes over (:func:`_data_ifnames`), and their MTUs."""
    if not link:
        return {}
    chosen, roce = _chosen(env, link.get("rdma") or {})
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
    role: str = ""  # "training", "serving" or "" (not said)


def _describe(name: str, f: Finding) -> str:
    if name == "environment":
        return str(f["key"])
    return f"{name}: {f['key']} = {f['value'] if f['value'] is not None else repr(f.get('raw', ''))}"


def launcher_nodes(env: dict[str, str]) -> list[Finding]:
    """Node counts the launcher's environment implies, each with its evidence."""
    out: list[Finding] = []
    sizes = (("WORLD_SIZE", "LOCAL_WORLD_SIZE"), ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"))
    for size, local in sizes:
        ws, lws = cfgs.as_count(env.get(size)), cfgs.as_count(env.get(local))
        if ws and lws:
            out.append({"what": "nodes", "value": math.ceil(ws / lws), "key": f"{size}={ws}, {local}={lws}"})
    for name in ("GROUP_WORLD_SIZE", "NNODES", "PET_NNODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"):
        if n := cfgs.as_count(env.get(name)):
            out.append({"what": "nodes", "value": n, "key": f"{name}={env[name]}"})
    return out


def _role_of(f: Finding) -> str:
    """What one finding says about the job: training, serving, or nothing."""
    key = cfgs.norm(str(f["key"]).rsplit(".", 1)[-1].split(": ")[-1]) if f["what"] == "tp" else ""
    if f["what"] == "strategy" or key in TRAINING_TP_KEYS:
        return "training"
    return "serving" if f["what"] in ("backend", "headless") else ""


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
    elif what == "pp":
        v.pp = max(v.pp, value)
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
    local = host in ("", "auto", "local", "localhost", "127.0.0.1", "[::1]")
    return None if local else f"RAY_ADDRESS={address}"


def _infer_nodes(v: View, gpus: int | None, env: dict[str, str]) -> None:
    """TP x PP larger than this machine's GPU count spans nodes, and so does a Ray backend with a
    multi-machine hint (only where nothing says how many nodes: a launcher's one node is believed)."""
    if v.nodes or v.tp <= 1:
        return
    hint = _ray_hint(env) if v.backend == "ray" else None
    if hint:
        v.nodes = 2
        v.nodes_by = f"{v.tp_by} on a Ray backend with {hint} (a Ray cluster across machines)"
    elif gpus and v.tp * v.pp > gpus:
        v.nodes = math.ceil(v.tp * v.pp / gpus)
        v.nodes_by = f"{v.tp_by} needs {v.tp * v.pp} GPUs and this machine has {gpus}"


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


def _evidence(b: View) -> str:
    """A violation's two pieces of evidence, each said once (the GPU-count inference repeats its TP)."""
    if b.nodes_by.startswith(b.tp_by + " "):
        return f"{b.tp_by}; {b.nodes_by[len(b.tp_by) + 1 :]}"
    return f"{b.tp_by}; {b.nodes_by}"


def violations(job: View, others: list[View]) -> list[View]:
    """Every TP > 1 that spans nodes > 1 (a config pairs with the job's own count), as a view of the pair."""
    out: list[View] = []
    for v in [job, *others]:  # the job's kind is never a config's
        role = _pick_role(v.role, job.role)
        if v.tp > 1 and v.nodes > 1:
            out.append(v)
        elif v.kind in CONFIG_KINDS and v.tp > 1 and job.nodes > 1:
            out.append(View(v.name, v.kind, v.tp, v.tp_by, job.nodes, job.nodes_by, role=role))
        elif v.kind in CONFIG_KINDS and v.nodes > 1 and job.tp > 1:
            out.append(View(v.name, v.kind, job.tp, job.tp_by, v.nodes, v.nodes_by, role=role))
    return out


def _rank_prefix(env: dict[str, str]) -> str:
    rank, world = launch.job_rank(env)
    if rank is None or not world or world < 2:
        return ""
    if rank == 0:  # rank 0 reports for the job
        return f"rank 0 of {world}: "
    return f"rank {rank} of {world}, this rank only: "


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
    """Add the all-reduce probe's findings; returns the text a PASS line carries."""
    if probe is None:
        return ""
    if not probe.get("ran"):
        return f"all-reduce not measured: {probe.get('reason')}"
    d = probe.get("data") or {}
    _probe_readings(d, out)
    if probe.get("error"):
        where = "hung" if probe.get("hung") else "failed"
        fix = "check that every rank runs G10 with --spark-intrusive, that all reach MASTER_ADDR, and "
        out.flag(Status.WARN, f"all-reduce probe {where}: {probe['error']}", fix + FIX_LINK,
                 f"all-reduce probe {where}", "run G10 on every rank; check the link",
                 code="G10.probe-failed")
        return ""
    if d.get("wrong"):
        check = d.get("check") or {}
        out.flag(
            Status.WARN,
            f"all-reduce returned wrong values (expected {check.get('expected')}, got {check.get('got')})",
            "a corrupted collective: check the NCCL build (DGX OS's system NCCL) and the link",
            "all-reduce returned wrong values", "check the NCCL build and the link",
            code="G10.allreduce-wrong",
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
    what = f"{d.get('backend')}, {d.get('world_size')} ranks, {size_mib} MiB"
    text = f"all-reduce busbw {group:.1f} GB/s ({what})"
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
            "reboot both Sparks (a re-cabled or hot-plugged ConnectX-7 link stays slow until then; re-seat "
            "the QSFP cable first), then re-run; check NCCL_DEBUG=INFO says NET/IB, not NET/Socket (NVIDIA "
            "dgx-spark-playbooks PR #108)",
            f"all-reduce {group:.1f} GB/s, below {fail:g} GB/s" + (f" ({speed})" if speed else ""),
            "reboot both Sparks; re-seat the cable", code="G10.busbw-degraded",
        )
        return ""
    if group < floor:
        cpu = " (measured with gloo on CPU; NCCL on the GPUs would differ)" if gloo else ""
        out.flag(
            Status.WARN,
            f"{text}{reports} is below the {floor:g} GB/s floor for a two-Spark link "
            f"(20-24 GB/s is healthy){cpu}",
            FIX_LINK, f"all-reduce {group:.1f} GB/s, below the {floor:g} GB/s floor",
            "both RoCE twins in NCCL_IB_HCA, MTU 9000", code="G10.busbw-low",
        )
        return ""
    return text


def link_speed(env: dict[str, str], link: dict[str, Any] | None) -> str:
    """What NCCL's interfaces negotiated (``enp1s0f1np1 200 Gb/s``), else the RoCE ports' ``rate``."""
    if not link:
        return ""
    speeds = link.get("speed") or {}
    named = fleet_interfaces(env, link)
    parts = [f"{n} {speeds[n] / 1000:g} Gb/s" for n in named if isinstance(speeds.get(n), int)]
    rdma = link.get("rdma") or {}
    rates = [
        f"{name} {rate}" for name, dev in sorted(rdma.items()) if not _down(dev)
        for rate in (dev.get("rates") or {}).values() if rate
    ]
    return ", ".join(parts) if parts else ", ".join(rates[:2])


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
            + f" while the host has RoCE devices ({first_n(sorted(rdma), 2, sep=', ')}): NCCL cannot open "
            "them ('NET/IB : No device found') and falls back to TCP sockets (a few GB/s)",
            "start the container with --device /dev/infiniband --cap-add IPC_LOCK --ulimit memlock=-1:-1 on "
            "every node (compose: devices, cap_add and ulimits), so NCCL reaches the ConnectX-7 over RoCE",
            "no /dev/infiniband in this container",
            "--device /dev/infiniband --cap-add IPC_LOCK --ulimit memlock=-1:-1",
            code="G10.container-no-rdma",
        )
    elif f.container and not rdma and not verbs:
        out.note(
            "no RoCE device under /sys/class/infiniband and no /dev/infiniband here: RDMA access not judged"
        )
    if rdma or verbs:
        _judge_memlock(f.memlock, params, out)


def _judge_memlock(memlock: dict[str, Any] | None, params: Params, out: Findings) -> None:
    """WARN when RLIMIT_MEMLOCK is neither unlimited nor at least ``g10_memlock_min_mib``."""
    if not memlock:
        return
    soft = memlock.get("soft")
    if soft is None:
        out.note(f"memlock limit not read: {memlock.get('error') or 'no value'}")
    elif soft == "unlimited":
        out.read("memlock", soft, "")
    else:
        mib, least = int(soft) / (1 << 20), params.threshold("g10_memlock_min_mib")
        out.read("memlock", round(mib, 1), "MiB")
        if mib < least:
            out.flag(
                Status.WARN,
                f"memlock limit {mib:g} MiB (RLIMIT_MEMLOCK of this process), below {least:g} MiB: NCCL's "
                "RDMA registration (ibv_reg_mr) can fail with 'Cannot allocate memory'",
                "raise the memlock limit: --ulimit memlock=-1:-1 for a container, or `* - memlock unlimited` "
                "in /etc/security/limits.conf (LimitMEMLOCK=infinity for a systemd service) on the host",
                f"memlock limit {mib:g} MiB, below {least:g} MiB",
                "--ulimit memlock=-1:-1 (or limits.conf memlock unlimited)", code="G10.memlock-low",
            )


_TWIN = re.compile(r"^(?P<kind>[a-z]+?)(?:P(?P<domain>\d+))?p(?P<bus>\d+)s(?P<slot>\d+)f(?P<fn>\d+)$")


def twin_key(device: str) -> tuple[tuple[str, str, str, str], str] | None:
    """``rocep1s0f1`` -> ``(("roce", "1", "0", "1"), "0")``: the port, its PCIe domain (``roceP2…``: 2)."""
    m = _TWIN.match(device)
    return ((m["kind"], m["bus"], m["slot"], m["fn"]), m["domain"] or "0") if m else None


def hca_selection(value: str, devices: list[str]) -> list[str]:
    """What ``NCCL_IB_HCA`` selects: ``dev[:port]`` list, prefixes unless ``=``, ``^`` excludes."""
    text = value.strip()
    exclude, text = text.startswith("^"), text.lstrip("^")
    exact = text.startswith("=")
    entries = [e.split(":")[0].strip() for e in text.lstrip("=").split(",") if e.strip()]
    return [d for d in devices if any(d == e if exact else d.startswith(e) for e in entries) != exclude]


def _down(dev: dict[str, Any]) -> bool:
    states = [str(s or "").upper() for s in (dev.get("states") or {}).values()]
    return bool(states) and all("DOWN" in s or "INIT" in s for s in states)


def _judge_hca(env: dict[str, str], rdma: dict[str, Any], chosen: list[str], out: Findings) -> None:
    """WARN when NCCL_IB_HCA selects no usable RoCE device, or one RoCE twin of a port and not the other."""
    devices, value = sorted(rdma), env.get("NCCL_IB_HCA", "")
    if not value.strip():
        return
    up = [d for d in devices if not _down(rdma[d])]
    if (devices and not chosen) or (up and not [d for d in chosen if d in up]):
        what = "none of this node's RoCE devices" if not chosen else "only RoCE devices whose port is down"
        use = ",".join(up or devices)
        out.flag(
            Status.WARN,
            f"NCCL_IB_HCA={value} selects {what} ({', '.join(chosen or devices)}): NCCL finds no usable IB "
            "device and sends over TCP sockets (a few GB/s where the two-Spark link gives 20-24)",
            f"NCCL_IB_HCA={use} on every node (the devices `ibdev2netdev` shows Up), or unset it",
            f"NCCL_IB_HCA={value} {'matches no RoCE device here' if not chosen else 'names only down ports'}",
            f"NCCL_IB_HCA={use}", code="G10.nccl-ib-hca",
        )
        return
    _judge_twins(value, chosen, rdma, out)


def _judge_twins(value: str, chosen: list[str], rdma: dict[str, Any], out: Findings) -> None:
    """WARN (once) for a chosen device whose up twin, on the other PCIe root, is not chosen."""
    for dev in chosen:
        key = twin_key(dev)
        keys = {d: twin_key(d) for d in sorted(rdma) if d != dev}
        twins = [d for d, k in keys.items() if key and k and k[0] == key[0] and k[1] != key[1]]
        missing = [t for t in twins if t not in chosen and not _down(rdma[t]) and not _down(rdma[dev])]
        if missing:
            both = ",".join([*(d for d in chosen if d != dev), dev, *missing])
            out.flag(
                Status.WARN,
                f"NCCL_IB_HCA={value} names {dev} but not its twin {missing[0]} (the same QSFP port on the "
                "other PCIe root): one twin caps near 12 GB/s, both reach 20-24 GB/s",
                f"NCCL_IB_HCA={both} on every node (NCCL_IB_MERGE_NICS=1 merges them)",
                f"NCCL_IB_HCA has one RoCE twin of 2 ({dev})", f"NCCL_IB_HCA={both}",
                code="G10.nccl-ib-hca-twin",
            )
            return


def _data_ifnames(env: dict[str, str], link: dict[str, Any], chosen: list[str], roce: bool) -> list[str]:
    """Interfaces that carry NCCL's data: the net devices behind the RoCE devices in use, and
    NCCL_SOCKET_IFNAME when it is one of them or when sockets carry the data (RoCE off or absent).
    A socket interface beside working RoCE only bootstraps (nccl_two_spark_1.txt: wlP9s9, 23 GB/s)."""
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
            "unset NCCL_IB_DISABLE (or set it to 0) so NCCL uses RoCE on the ConnectX-7 port; over TCP "
            "sockets the link gives a few GB/s",
            "NCCL_IB_DISABLE=1 across nodes: TCP, not RoCE", "unset NCCL_IB_DISABLE",
            code="G10.nccl-ib-disabled",
        )
    if not link or not link.get("sysfs"):
        return
    rdma = link.get("rdma") or {}
    if env.get("NCCL_IB_HCA") and not rdma:
        out.note("NCCL_IB_HCA is set but no RoCE device is under /sys/class/infiniband: twins not checked")
    chosen, roce = _chosen(env, rdma)
    if roce:
        _judge_hca(env, rdma, chosen, out)
    mtus = link.get("mtu") or {}
    low = [(n, mtus[n]) for n in _data_ifnames(env, link, chosen, roce) if isinstance(mtus.get(n), int)]
    low = [(n, m) for n, m in low if m < MIN_MTU]
    if low:
        shown = first_n([f"{n} ({m})" for n, m in low], 3, sep=", ")
        names = ", ".join(n for n, _ in low)
        out.flag(
            Status.WARN,
            f"MTU below {MIN_MTU} on NCCL's interface: {shown}; the two-Spark link reaches 20-24 GB/s at "
            "MTU 9000",
            f"set mtu: 9000 on {names} on both Sparks (netplan), then re-run",
            f"MTU {low[0][1]} on {low[0][0]}, below {MIN_MTU}", f"set MTU 9000 on {names}",
            code="G10.mtu-low",
        )


_FRAGILE = "TP over the two-Spark link is fragile and slow for training (NCCL hangs, vLLM #42354)"
ROLE_TEXT = {
    "training": f"a training job: {_FRAGILE}",
    "serving": (
        "a serving job: NVIDIA's vLLM playbook runs TP=2 over two Sparks, but NCCL all-reduce over the link "
        "can hang (vLLM #42354)"
    ),
    "": f"a job not marked as training or serving: {_FRAGILE}; NVIDIA's playbooks run it only to serve",
}


#: a running process of the user's own, neither the launcher of this run nor marked training or serving
FIX_OTHER_JOB = (
    "if it is the job you are about to train, launch it with DDP/FSDP across Sparks and TP inside one node; "
    "if it is another job, this run is not affected"
)


def _judge_other_jobs(bad: list[View], out: Findings) -> list[View]:
    """Running processes G10 cannot classify are other jobs than the one being launched: a WARN naming
    them, never this run's FAIL (issue 34 item 6: an unrelated ``--tensor-parallel-size 2 --nnodes 2``
    failed G10 and ``--spark-gate`` skipped the user's training). The rest are returned to be judged."""
    loose = [b for b in bad if b.kind == "process" and not b.role]
    if loose:
        b = loose[0]
        more = f"; {len(loose) - 1} more in the details" if len(loose) > 1 else ""
        out.flag(
            Status.WARN,
            f"tensor parallel {b.tp} across {b.nodes} nodes in a running process not marked as training or "
            f"serving ({_evidence(b)}){more}: another job than the one this run launches; {_FRAGILE}",
            FIX_OTHER_JOB, f"running {b.name}: TP {b.tp} across {b.nodes} nodes, another job",
            f"check {b.name.split(' (')[0]}", code="G10.other-job",
        )  # fmt: skip
    return [b for b in bad if b.kind != "process" or b.role]


def _judge_tp(bad: list[View], option: str, out: Findings) -> None:
    """One finding per kind of job: training by ``--spark-tp-across-nodes`` (FAIL), serving WARN;
    a running process of no known kind, another job than this run's, WARN."""
    bad = _judge_other_jobs(bad, out)
    for role in ("training", "", "serving"):
        mine = [b for b in bad if b.role == role]
        if not mine:
            continue
        b = mine[0]
        more = f"; {len(mine) - 1} more in the details" if len(mine) > 1 else ""
        text = f"tensor parallel {b.tp} across {b.nodes} nodes ({_evidence(b)}){more}, {ROLE_TEXT[role]}"
        head = f"{role or 'job'}: TP {b.tp} across {b.nodes} nodes ({b.tp_by.split(': ', 1)[0]})"
        if role == "serving":
            out.flag(Status.WARN, text, FIX_SERVE, head, "serve with DGX OS's system NCCL (vLLM #42354)",
                     code="G10.tp-serving")
        elif option == "fail":
            fix = FIX_TP if role else FIX_TP_UNKNOWN
            out.flag(Status.FAIL, text, fix, head, "DDP/FSDP across Sparks, TP within one node",
                     code="G10.tp-across-nodes")
        else:
            out.flag(Status.WARN, text, FIX_TP_WARN, head, "prefer DDP/FSDP across Sparks",
                     code="G10.tp-across-nodes")


def _env_view(env: dict[str, str], world: int | None) -> tuple[View, list[Finding]]:
    findings = launcher_nodes(env)
    for name in TP_ENV:
        if env.get(name):
            findings.append(cfgs.make_finding("tp", env[name], f"{name}={env[name]}").to_dict())
    role = _pick_role(
        "serving" if env.get("VLLM_TENSOR_PARALLEL_SIZE") else "",
        "training" if env.get("PARALLELISM_CONFIG_TP_SIZE") else "",
    )
    return _view("environment", "env", findings, world, role), findings


def _source_views(f: Facts, world: int | None, out: Findings) -> tuple[list[View], int]:
    """A view of each source, its findings and notes said; and how many could not be read."""
    for src in f.sources:
        out.note(*(_describe(src["name"], finding) for finding in src["findings"]))
        if src.get("error"):
            out.note(f"{src['name']}: {src['error']}")
        out.note(*(f"{src['name']}: {n}" for n in src.get("notes") or []))
    views = [_view(src["name"], src["kind"], src["findings"], world, src.get("role")) for src in f.sources]
    return views, sum(1 for src in f.sources if src.get("error"))


def _readings(f: Facts, job: View, others: list[View], errors: int, out: Findings) -> None:
    """What the job is; then the configs read, the GPUs here, NCCL's network settings, the rank."""
    all_views = [job, *others]
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
    configs = _configs_read(f)
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


def _configs_read(f: Facts) -> list[str]:
    return [s["name"] for s in f.sources if s["kind"] in CONFIG_KINDS and not s.get("error")]


def search_incomplete(f: Facts) -> str:
    """Why the config search missed configs, from its note: then "nothing multi-node" is INFO (issue 19)."""
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
    """No launcher, TP or node count: a single node (PASS); SKIP when the named configs are unreadable."""
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
        head = f"named config unreadable: {broken[0]['name']}"
        return out.result(Status.SKIP, f"cannot judge the named config: {text}", headline=head,
                          ok_code="G10.config-unreadable")
    if not given:
        out.note("name your job's config with --spark-config if it is elsewhere")
    if partial:
        head = f"config search incomplete: nothing multi-node ({said})"
        return out.result(Status.INFO, f"config search incomplete ({incomplete}): {text}", headline=head,
                          ok_code="G10.config-search-incomplete")
    head = f"single node: nothing multi-node ({said})"
    return out.result(Status.PASS, f"single node: {text}", headline=head)


def _ok_parts(job: View, others: list[View], out: Findings, files: list[str]) -> tuple[str, str]:
    """``(summary, headline)`` of a job with nothing wrong. The headline names the config files
    read, and a TP that belongs to another job says so (it read "2 nodes, TP 2: data parallel")."""
    multi = [v for v in others if v.nodes > 1]
    if job.nodes:
        parts = [f"{job.nodes} nodes ({job.nodes_by})" if job.nodes > 1 else f"single node ({job.nodes_by})"]
    elif multi:
        parts = [f"{multi[0].nodes} nodes ({multi[0].nodes_by})"]
    else:
        parts = ["no sign of more than one node"]
    strategies = list(dict.fromkeys(s for v in [job, *others] for s in v.strategies))
    if strategies:
        parts.append(", ".join(strategies))
    nodes = job.nodes or (multi[0].nodes if multi else 0)
    part, tp_head = _tp_part(job, others, nodes, out)
    summary = ", ".join([*parts, part])
    head = ", ".join([f"{nodes} nodes" if nodes > 1 else "single node", *strategies, tp_head])
    if nodes > 1:
        summary += ": data parallel across nodes, as recommended"
        head += ": data parallel across nodes"
    return summary, head + _files_read(head, files)


def _tp_part(job: View, others: list[View], nodes: int, out: Findings) -> tuple[str, str]:
    """``(summary part, headline part)`` of a PASS's tensor parallelism."""
    all_views = [job, *others]
    tp_views = [v for v in all_views if v.tp_by]
    tp_max = max(v.tp for v in all_views)
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


def _finish(f: Facts, out: Findings, ok: tuple[str, str], p_text: str, *, job_ok: bool, alike: int) -> Result:
    """One Result: the problem, then what the job is (``alike``: ranks found alike); the rank in front."""
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
        r.codes = ["G10.config-search-incomplete"]
    return r


def _judge_fleet(exchanged: dict[str, Any] | None, out: Findings) -> int:
    """The node comparison (``checks/nodes.py``); how many ranks it found alike (0: none, or they differ)."""
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
    torch = exchanged.get("cause") == "torch"
    if missing:
        who = ", ".join(str(r) for r in missing)
        first = f"start rank {who}"
        if 0 in missing:
            first += " (it, or torchrun on its node, hosts the rendezvous store)"
        out.fail(
            f"rank {who} never joined the node comparison ({error})",
            f"{first} with the same MASTER_ADDR/MASTER_PORT on every node, and check that {store} is "
            "reachable from every node (firewall, the address MASTER_ADDR resolves to)",
            f"rank {who} never joined the node comparison", f"start rank {who}; check {store} is reachable",
            code="G10.rank-missing",
        )
    elif exchanged.get("cause") == "rendezvous":
        out.warn(
            f"nodes not compared: {error}",
            'export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1) and '
            "MASTER_PORT=<a free port, the same on every node> before srun (README: Two Sparks)",
            "nodes not compared: srun gives no MASTER_ADDR/MASTER_PORT",
            "export MASTER_ADDR, MASTER_PORT before srun", code="G10.nodes-not-compared",
        )
    else:
        out.warn(
            f"nodes not compared: {error}",
            "install torch with torch.distributed (gloo) on every node" if torch
            else f"use a MASTER_PORT that is free on rank 0's node and the same on every node (now {store})",
            "nodes not compared", "install torch with gloo" if torch else "check MASTER_ADDR/MASTER_PORT",
            code="G10.nodes-not-compared",
        )
    return 0


def evaluate(facts: Facts, params: Params) -> Result:
    """Decide G10 (pure); an unfinished process scan is never a PASS: what it missed may be the job's."""
    result = _evaluate(facts, params)
    stopped = next((n for n in facts.notes if n.startswith(SCAN_STOPPED)), None)
    if stopped and result.status is Status.PASS:
        result.status = Status.WARN
        unread = "a job's launcher or TP flags may be unread"
        result.summary = f"process table incomplete ({stopped}): {unread}; {result.summary}"
        result.fix = "rerun; if it persists, name the job's config with --spark-config"
        result.headline = "process table incomplete: a job's flags may be unread"
        result.short_fix = "rerun; or --spark-config the job's config"
        result.codes = ["G10.process-table-incomplete"]
    result.attachments += attachments.node_table(facts.fleet)  # every rank's fingerprint, for the reports
    return result


def _mine_only(facts: Facts, out: Findings) -> Facts:
    """The facts without other users' jobs: theirs to judge, a note here, never a FAIL or WARN (issue 24)."""
    for s in facts.sources:
        if s.get("owner"):
            found = ", ".join(f"{x['key']} = {x['value']}" for x in s["findings"])
            out.note(f"not judged, another user's job ({s['owner']}): {s['name']}: {found}")
    return dataclasses.replace(facts, sources=[s for s in facts.sources if not s.get("owner")])


def _has_evidence(f: Facts, env_findings: list[Finding], views: list[View]) -> bool:
    return bool(
        env_findings or any(v.tp or v.nodes or v.strategies or v.backend for v in views)
        or launch.job_rank(f.env)[1] or (f.probe and f.probe.get("ran"))
    )


def _judge_links(f: Facts, params: Params, out: Findings) -> str:
    """A job over several nodes: its link and RDMA access judged; the link's speed, read ("" when unknown)."""
    _judge_link(f.env, f.link, out)
    _judge_rdma_access(f, params, out)
    speed = link_speed(f.env, f.link)
    if speed:
        out.read("link_speed", speed)
    return speed


def _evaluate(facts: Facts, params: Params) -> Result:
    out = Findings("G10")
    f = _mine_only(facts, out)
    world = launch.job_rank(f.env)[1]
    env_view, env_findings = _env_view(f.env, world)
    views, errors = _source_views(f, world, out)
    # the job is what launched this run; every config, named or found, is judged on its own (issue 11)
    job = _merge([env_view] + [v for v in views if v.kind == "launcher"], "job")
    others = [v for v in views if v.kind != "launcher"]
    for v in [job, *others]:
        if v.kind not in CONFIG_KINDS or not job.nodes:  # a config's own count stands beside the launcher's
            _infer_nodes(v, f.gpu_count, f.env)
    out.note(*f.notes)
    _readings(f, job, others, errors, out)
    bad = violations(job, others)
    _judge_tp(bad, str(params.option("tp_across_nodes")), out)
    out.details[:0] = [f"TP {b.tp} across {b.nodes} nodes: {_evidence(b)}" for b in bad]
    speed = _judge_links(f, params, out) if job.nodes > 1 or any(v.nodes > 1 for v in others) else ""
    alike = _judge_fleet(f.fleet, out)
    p_text = _judge_probe(f.probe, job.nodes > 1, params, speed, out)
    if f.intrusive is False and world and world > 1:
        out.note("add --spark-intrusive to measure all-reduce bus bandwidth between the ranks")
    if not out.status and not _has_evidence(f, env_findings, views):
        r = _nothing_to_go_on(f, out, p_text)
    else:
        ok = _ok_parts(job, others, out, _configs_read(f))
        r = _finish(f, out, ok, p_text, job_ok=not bad, alike=alike)
    r.details = shortened(r.details, MAX_DETAILS)
    return r
