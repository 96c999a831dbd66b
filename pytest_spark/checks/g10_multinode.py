"""G10 — two Sparks: data parallel (DDP/FSDP) across nodes, not tensor parallel.

Two DGX Sparks talk over one ConnectX-7 link (200 Gb/s; a healthy NCCL
all-reduce gets 20-24 GB/s bus bandwidth). Tensor parallelism all-reduces
activations inside every layer, so across that link it is slow and, by
the reports in EVIDENCE.md, fragile (NCCL all-reduce wedging after ~20 min,
vLLM #42354; SGLang TP=2 freezing at init). The seed's rule is "TP > 1 across
nodes > 1 is a configuration error"; NVIDIA's own inference playbooks do run
TP=2 over two Sparks, so the message says so and ``--spark-tp-across-nodes
warn`` downgrades the FAIL.

What it reads, by value (``probes/configs.py``): the launcher's environment
(``WORLD_SIZE`` vs ``LOCAL_WORLD_SIZE``, ``NNODES``, ``SLURM_NNODES`` ...),
configs given with ``--spark-config`` or found under the rootdir, and the
command lines of running processes. A TP degree and a node count are paired
only when they describe the same job: within one file or command line, or
with the job itself (the launcher environment, the given configs, the
launcher process above this one). A TP degree larger than this machine's
GPU count also spans nodes (TP=2 on a one-GPU Spark must reach the other).

With ``--spark-intrusive`` under torchrun (``WORLD_SIZE`` > 1), every rank
runs an all-reduce bus-bandwidth probe (``scripts/allreduce_child.py``).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_spark.checks.kit import CheckContext
from pytest_spark.model import Reading, Result, Status
from pytest_spark.probes import configs as cfgs

#: the environment variables that say how the job was launched
LAUNCHER_ENV = (
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "GROUP_WORLD_SIZE",
    "GROUP_RANK",
    "NNODES",
    "PET_NNODES",
    "NODE_RANK",
    "SLURM_NNODES",
    "SLURM_JOB_NUM_NODES",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
)
#: TP degree in the environment
TP_ENV = ("VLLM_TENSOR_PARALLEL_SIZE", "PARALLELISM_CONFIG_TP_SIZE")
#: shown with the bandwidth probe
NET_ENV = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_IB_HCA", "UCX_NET_DEVICES", "NCCL_DEBUG")
#: with ``--distributed-executor-backend ray``, these say the Ray cluster spans machines
#: (NVIDIA's two-Spark vLLM playbook sets VLLM_HOST_IP on each node)
RAY_HINT_ENV = ("VLLM_HOST_IP", "RAY_ADDRESS")

#: all-reduce buffer per backend: NCCL 512 MiB (EVIDENCE: 512M-4G; 16 GB freezes UMA), gloo 8 MiB (CPU)
PROBE_BYTES = {"nccl": 512 << 20, "gloo": 8 << 20}
PROBE_ITERS = {"nccl": 20, "gloo": 8}

#: details kept per result (every finding of every config can be a lot)
MAX_DETAILS = 60

FIX_TP = (
    "train across the Sparks with DDP or FSDP (accelerate distributed_type: FSDP with "
    "parallelism_config_tp_size: 1, as NVIDIA's pytorch-fine-tune playbook) and keep TP inside one node; "
    "serving TP=2 over two Sparks as NVIDIA's vLLM playbook does? --spark-tp-across-nodes warn"
)
FIX_TP_WARN = (
    "prefer DDP/FSDP across Sparks; for TP=2 inference use DGX OS's system NCCL, not a pip-bundled one "
    "(the fix in vLLM #42354)"
)
FIX_LINK = (
    "put NCCL on the ConnectX-7 port: NCCL_SOCKET_IFNAME=enp1s0f1np1 (and GLOO_SOCKET_IFNAME, "
    "UCX_NET_DEVICES), NCCL_IB_HCA naming both halves, MTU 9000; ~3 GB/s means the wrong interface"
)


@dataclass
class Facts:
    env: dict[str, str] = field(default_factory=dict)
    #: configs.Source dicts: given, found, process, launcher
    sources: list[dict[str, Any]] = field(default_factory=list)
    root: str = ""
    configs_found: int = 0
    notes: list[str] = field(default_factory=list)
    gpu_count: int | None = None
    intrusive: bool = False
    #: the all-reduce probe: None when not attempted
    probe: dict[str, Any] | None = None


# --------------------------------------------------------------------------- gather


def _display(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except (ValueError, OSError):
        return str(path)


def _given(paths: tuple[Path, ...], root: Path, deadline: float) -> list[cfgs.Source]:
    out: list[cfgs.Source] = []
    for path in paths:
        if path.is_dir():  # --spark-config configs/: every config in it is the job's
            scan = cfgs.find_configs(path, deadline=deadline)
            found, _ = cfgs.read_found(path, scan, deadline=deadline)
            for src in found:
                src.kind = "given"
                src.name = _display(path / src.name, root)
            out.extend(found)
            if not found:
                out.append(cfgs.Source(_display(path, root), "given", error="no YAML/JSON/TOML config in it"))
            continue
        out.append(cfgs.read_config(path, _display(path, root), "given"))
    return out


def probe_config(timeout: float) -> dict[str, Any]:
    return {
        "backend": "auto",
        "size_bytes": PROBE_BYTES,
        "iters": PROBE_ITERS,
        "warmup": 3,
        "import_scale": 6,
        "rendezvous_scale": 3,
        "rendezvous_timeout_s": timeout * 3 * 0.9,
        "collective_timeout_s": timeout,
    }


def summarize_probe(child: Any) -> dict[str, Any]:
    """The probe child's result as plain data, with one reason when it failed."""
    d = dict(child.data)
    d.pop("_allowance", None)
    out: dict[str, Any] = {"ran": True, "data": d, "error": None, "hung": False}
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


def gather(ctx: CheckContext) -> Facts:
    m, s = ctx.machine, ctx.settings
    facts = Facts(intrusive=s.intrusive)
    facts.env = {k: m.env[k] for k in (*LAUNCHER_ENV, *TP_ENV, *NET_ENV, *RAY_HINT_ENV) if m.env.get(k)}
    root = Path(s.rootdir)
    facts.root = str(root)
    deadline = time.monotonic() + min(s.timeout, 5.0)
    sources = _given(tuple(s.config), root, deadline)

    scan = cfgs.find_configs(root, deadline=deadline)
    given = set()
    for p in s.config:
        try:
            given.add(os.path.realpath(p))
        except OSError:
            pass
    scan.files = [f for f in scan.files if os.path.realpath(f) not in given]
    found, notes = cfgs.read_found(root, scan, deadline=deadline)
    facts.configs_found = len(scan.files)
    facts.notes += notes
    if scan.limit:
        facts.notes.append(f"config search under {root}: {scan.limit}")
    if scan.unreadable:
        facts.notes.append(f"{scan.unreadable} folder(s) under {root} unreadable")
    sources += found

    procs = m.processes()
    if procs.get("error"):
        facts.notes.append(procs["error"])
    sources += cfgs.process_sources(procs.get("processes") or [], own_pid=os.getpid())
    facts.sources = [src.to_dict() for src in sources]

    wants_gpus = (
        any(
            f["what"] == "tp" and isinstance(f["value"], int) and f["value"] > 1
            for src in facts.sources
            for f in src["findings"]
        )
        or (cfgs.as_count(facts.env.get("VLLM_TENSOR_PARALLEL_SIZE")) or 0) > 1
    )
    if wants_gpus:
        nv = m.nvml()
        if nv.get("ok"):
            facts.gpu_count = len(nv.get("devices") or [])

    world = cfgs.as_count(facts.env.get("WORLD_SIZE")) or 0
    if s.intrusive and world > 1:
        child = m.python_child(
            "g10:allreduce",
            ["allreduce_child.py"],
            probe_config(s.timeout),
            step_timeout=s.timeout,
            total_timeout=s.timeout * 40,
        )
        facts.probe = summarize_probe(child)
    elif s.intrusive:
        facts.probe = {"ran": False, "reason": "not launched by torchrun (WORLD_SIZE unset or 1)"}
    return facts


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


def _describe(name: str, f: dict[str, Any]) -> str:
    value = f["value"] if f["value"] is not None else repr(f.get("raw", ""))
    if name == "environment":
        return f"{f['key']}"
    return f"{name}: {f['key']} = {value}"


def launcher_nodes(env: dict[str, str]) -> list[dict[str, Any]]:
    """Node counts the launcher's environment implies, each with its evidence."""
    out: list[dict[str, Any]] = []
    ws, lws = cfgs.as_count(env.get("WORLD_SIZE")), cfgs.as_count(env.get("LOCAL_WORLD_SIZE"))
    if ws and lws:
        out.append(
            {"what": "nodes", "value": math.ceil(ws / lws), "key": f"WORLD_SIZE={ws}, LOCAL_WORLD_SIZE={lws}"}
        )
    ows, olws = (
        cfgs.as_count(env.get("OMPI_COMM_WORLD_SIZE")),
        cfgs.as_count(env.get("OMPI_COMM_WORLD_LOCAL_SIZE")),
    )
    if ows and olws:
        out.append(
            {
                "what": "nodes",
                "value": math.ceil(ows / olws),
                "key": f"OMPI_COMM_WORLD_SIZE={ows}, OMPI_COMM_WORLD_LOCAL_SIZE={olws}",
            }
        )
    for name in ("GROUP_WORLD_SIZE", "NNODES", "PET_NNODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"):
        count = cfgs.as_count(env.get(name))
        if count:
            out.append({"what": "nodes", "value": count, "key": f"{name}={env[name]}"})
    return out


def _view(name: str, kind: str, findings: list[dict[str, Any]], world: int | None) -> View:
    v = View(name=name, kind=kind)
    for f in findings:
        what, value = f["what"], f["value"]
        if what == "tp" and isinstance(value, int) and (value > v.tp or not v.tp_by):
            v.tp, v.tp_by = value, _describe(name, f)
        elif what == "tp_plan" and value is not None:
            degree = world or 2  # "auto" shards over every process of the job
            if degree > v.tp:
                v.tp = degree
                v.tp_by = _describe(name, {**f, "value": f"{value} (TP over all {world or 'the'} processes)"})
        elif what == "pp" and isinstance(value, int) and value > v.pp:
            v.pp = value
        elif what == "nodes" and isinstance(value, int) and value > v.nodes:
            v.nodes, v.nodes_by = value, _describe(name, f)
        elif what == "headless" and v.nodes < 2:
            v.nodes, v.nodes_by = (
                2,
                f"{name}: {f['key']} (a headless vLLM is a worker of a multi-node engine)",
            )
        elif what == "strategy" and isinstance(value, str) and value.upper() not in v.strategies:
            v.strategies.append(value.upper())
        elif what == "backend" and isinstance(value, str):
            v.backend = value
    return v


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
    return job


def violations(job: View, others: list[View]) -> list[tuple[int, str, int, str]]:
    """``(tp, tp_by, nodes, nodes_by)`` for every TP > 1 that spans nodes > 1."""
    out: list[tuple[int, str, int, str]] = []
    if job.tp > 1 and job.nodes > 1:
        out.append((job.tp, job.tp_by, job.nodes, job.nodes_by))
    for v in others:
        if v.tp > 1 and v.nodes > 1:
            out.append((v.tp, v.tp_by, v.nodes, v.nodes_by))
        elif v.kind == "found" and v.tp > 1 and job.nodes > 1:
            out.append((v.tp, v.tp_by, job.nodes, job.nodes_by))
        elif v.kind == "found" and v.nodes > 1 and job.tp > 1:
            out.append((job.tp, job.tp_by, v.nodes, v.nodes_by))
    return out


def _bounded(details: list[str]) -> list[str]:
    if len(details) <= MAX_DETAILS:
        return details
    return [*details[:MAX_DETAILS], f"and {len(details) - MAX_DETAILS} more"]


def _rank_prefix(env: dict[str, str]) -> str:
    rank, world = cfgs.as_count(env.get("RANK")), cfgs.as_count(env.get("WORLD_SIZE"))
    if rank is None or not world or world < 2:
        return ""
    if rank == 0:
        return f"rank 0 of {world}: "
    return f"rank {rank} of {world} (per-rank detail; rank 0 reports for the job): "


def _probe_part(
    probe: dict[str, Any] | None, multi_node: bool, floor: float
) -> tuple[Status | None, str, str, list[Reading], list[str]]:
    """``(status or None, text, fix, readings, details)`` of the all-reduce probe."""
    if probe is None:
        return None, "", "", [], []
    if not probe.get("ran"):
        return None, f"all-reduce not measured: {probe.get('reason')}", "", [], []
    d = probe.get("data") or {}
    readings: list[Reading] = []
    details: list[str] = []
    if d.get("backend"):
        readings.append(Reading("allreduce_backend", d["backend"]))
    if d.get("world_size"):
        readings.append(Reading("allreduce_ranks", d["world_size"]))
    if d.get("size_bytes"):
        readings.append(Reading("allreduce_size", round(d["size_bytes"] / (1 << 20)), "MiB"))
    if d.get("nccl_version"):
        readings.append(Reading("nccl_version", d["nccl_version"]))
    if probe.get("error"):
        where = "hung" if probe.get("hung") else "failed"
        return (
            Status.WARN,
            f"all-reduce probe {where}: {probe['error']}",
            "check that every rank runs G10 with --spark-intrusive, that all reach MASTER_ADDR, and "
            + FIX_LINK,
            readings,
            details,
        )
    if d.get("wrong"):
        check = d.get("check") or {}
        return (
            Status.WARN,
            f"all-reduce returned wrong values (expected {check.get('expected')}, got {check.get('got')})",
            "a corrupted collective: check the NCCL build (DGX OS's system NCCL) and the link",
            readings,
            details,
        )
    group = d.get("group_busbw_gbps")
    own = d.get("busbw_gbps")
    if not isinstance(group, (int, float)):
        return None, "all-reduce gave no timing", "", readings, details
    readings += [
        Reading("allreduce_busbw", round(float(group), 2), "GB/s"),
        Reading("allreduce_algbw", round(float(d.get("group_algbw_gbps") or 0.0), 2), "GB/s"),
        Reading("allreduce_busbw_this_rank", round(float(own or 0.0), 2), "GB/s"),
        Reading("busbw_floor", floor, "GB/s"),
    ]
    ranks = d.get("world_size")
    size_mib = round((d.get("size_bytes") or 0) / (1 << 20))
    text = f"all-reduce busbw {group:.1f} GB/s ({d.get('backend')}, {ranks} ranks, {size_mib} MiB)"
    if multi_node and group < floor:
        cpu = (
            " (measured with gloo on CPU; NCCL on the GPUs would differ)"
            if d.get("backend") == "gloo"
            else ""
        )
        return (
            Status.WARN,
            f"{text} is below the {floor:g} GB/s floor for a two-Spark link (20-24 GB/s is healthy){cpu}",
            FIX_LINK,
            readings,
            details,
        )
    if not multi_node:
        text += " within one node (the two-Spark floor does not apply)"
    return Status.PASS, text, "", readings, details


def evaluate(f: Facts, tp_across_nodes: str = "fail", floor_gbps: float = 20.0) -> Result:
    """Decide G10 from what gather() read (pure)."""
    world = cfgs.as_count(f.env.get("WORLD_SIZE"))
    details: list[str] = []
    env_findings = launcher_nodes(f.env)
    for name in TP_ENV:
        if f.env.get(name):
            env_findings.append(cfgs.make_finding("tp", f.env[name], f"{name}={f.env[name]}").to_dict())
    env_view = _view("environment", "env", env_findings, world)

    views: list[View] = []
    errors = 0
    for src in f.sources:
        for finding in src["findings"]:
            details.append(_describe(src["name"], finding))
        if src.get("error"):
            errors += 1
            details.append(f"{src['name']}: {src['error']}")
        details += [f"{src['name']}: {n}" for n in src.get("notes") or []]
        views.append(_view(src["name"], src["kind"], src["findings"], world))
    job_sources = [env_view] + [v for v in views if v.kind in ("given", "launcher")]
    job = _merge(job_sources, "job")
    others = [v for v in views if v.kind in ("found", "process")]
    for v in [job, *others]:
        _infer_nodes(v, f.gpu_count, f.env)
    bad = violations(job, others)
    details += f.notes

    readings: list[Reading] = []
    all_views = [job, *others]
    nodes = job.nodes or max((v.nodes for v in others), default=0)
    tp_max = max((v.tp for v in all_views), default=0)
    strategies: list[str] = []
    for v in all_views:
        strategies += [s for s in v.strategies if s not in strategies]
    readings.append(Reading("nodes", nodes or None))
    readings.append(Reading("tensor_parallel", tp_max or None))
    if strategies:
        readings.append(Reading("strategy", ", ".join(strategies)))
    readings.append(Reading("configs_read", sum(1 for s in f.sources if s["kind"] in ("given", "found"))))
    if errors:
        readings.append(Reading("configs_unreadable", errors))
    if f.gpu_count is not None:
        readings.append(Reading("gpus_here", f.gpu_count))
    for name in NET_ENV:
        if f.env.get(name):
            readings.append(Reading(name.lower(), f.env[name]))
    rank = cfgs.as_count(f.env.get("RANK"))
    if rank is not None and world and world > 1:
        readings.append(Reading("rank", rank))

    prefix = _rank_prefix(f.env)
    p_status, p_text, p_fix, p_readings, p_details = _probe_part(f.probe, job.nodes > 1, floor_gbps)
    readings += p_readings
    details += p_details
    if f.intrusive is False and world and world > 1:
        details.append("add --spark-intrusive to measure all-reduce bus bandwidth between the ranks")

    if bad:
        tp, tp_by, n, n_by = bad[0]
        more = f"; {len(bad) - 1} more in the details" if len(bad) > 1 else ""
        details = [f"TP {t} across {k} nodes: {a}; {b}" for t, a, k, b in bad] + details
        status = Status.FAIL if tp_across_nodes == "fail" else Status.WARN
        summary = (
            f"tensor parallel {tp} across {n} nodes ({tp_by}; {n_by}){more}: TP over the two-Spark link is "
            "fragile and slow for training (NCCL hangs, vLLM #42354), though NVIDIA's own playbooks run "
            "TP=2 for inference across two Sparks"
        )
        if p_text:
            summary += f"; {p_text}"
        fix = FIX_TP if status is Status.FAIL else FIX_TP_WARN
        if p_status is Status.WARN and p_fix:
            fix += f"; {p_fix}"
        return Result("G10", status, prefix + summary, fix, readings, details=_bounded(details))

    has_evidence = (
        bool(env_findings)
        or any(v.tp or v.nodes or v.strategies or v.backend for v in views)
        or bool(f.env.get("WORLD_SIZE"))
    )
    if not has_evidence and not (f.probe and f.probe.get("ran")):
        read = [src for src in f.sources if src["kind"] in ("given", "found")]
        where = (
            f"{len(read)} config file(s) read under {f.root}" if read else f"no config found under {f.root}"
        )
        broken = [src for src in read if src.get("error")]
        if broken:
            first = broken[0]
            where += f" ({len(broken)} unreadable; {first['name']}: {first['error']})"
        return Result(
            "G10",
            Status.SKIP,
            "nothing to go on: no launcher environment (WORLD_SIZE, NNODES, SLURM_NNODES), no tensor "
            f"parallelism or node count ({where}), no training/serving process with those flags; "
            "name your config with --spark-config" + (f"; {p_text}" if p_text else ""),
            readings=readings,
            details=_bounded(details),
        )

    parts: list[str] = []
    if job.nodes > 1:
        parts.append(f"{job.nodes} nodes ({job.nodes_by})")
    elif job.nodes == 1:
        parts.append(f"single node ({job.nodes_by})")
    else:
        multi = [v for v in others if v.nodes > 1]
        parts.append(
            f"{multi[0].nodes} nodes ({multi[0].nodes_by})" if multi else "no sign of more than one node"
        )
    if strategies:
        parts.append(", ".join(strategies))
    tp_views = [v for v in all_views if v.tp_by]
    if tp_max > 1:
        v = max(tp_views, key=lambda x: x.tp)
        if v.nodes == 1 or (v.nodes == 0 and job.nodes == 1):
            parts.append(f"tensor parallel {v.tp} within one node ({v.tp_by})")
        else:
            parts.append(f"tensor parallel {v.tp} with no node count of its own ({v.tp_by})")
            elsewhere = [o.nodes_by for o in others if o.nodes > 1 and o is not v]
            if elsewhere:
                details.append(
                    f"{v.tp_by} and {elsewhere[0]} are in different files: not judged as one job "
                    "(give both with --spark-config if they are)"
                )
    elif tp_views:
        parts.append(f"tensor parallel 1 ({tp_views[0].tp_by})")
    else:
        parts.append("no tensor parallelism set")
    summary = ", ".join(parts)
    if job.nodes > 1 or any(v.nodes > 1 for v in others):
        summary += ": data parallel across nodes, as recommended"
    status = Status.WARN if p_status is Status.WARN else Status.PASS
    if status is Status.WARN:
        summary = f"{p_text}; {summary}"  # the problem first
    elif p_text:
        summary += f"; {p_text}"
    return Result(
        "G10",
        status,
        prefix + summary,
        p_fix if status is Status.WARN else "",
        readings,
        details=_bounded(details),
    )


def run(ctx: CheckContext) -> Result:
    floor = ctx.thresholds.get("g10_busbw_floor_gbps", 20.0)
    return evaluate(gather(ctx), ctx.settings.tp_across_nodes, floor)
