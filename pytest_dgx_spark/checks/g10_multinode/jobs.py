"""G10's TP rule: what each source says about the job (a :class:`View`), and every tensor parallel
degree > 1 that spans nodes > 1, judged by the kind of job.

Two Sparks share one ConnectX-7 link. TP all-reduces inside every layer, so across it TP is slow and
fragile (NCCL wedging, vLLM #42354): a *training* job with TP > 1 across nodes > 1 FAILs
(``--spark-tp-across-nodes warn`` downgrades), a *serving* job (NVIDIA's vLLM playbook) WARNs, a
running process of no known kind is another job than this run's (a WARN naming it).
"""

from __future__ import annotations

import math
from dataclasses import field, replace

from pytest_dgx_spark.checks.g10_multinode.facts import count_of
from pytest_dgx_spark.checks.kit import Findings, said
from pytest_dgx_spark.datadef import define
from pytest_dgx_spark.model import Status
from pytest_dgx_spark.probes import configs as cfgs
from pytest_dgx_spark.probes.multinode import TP_ENV, JobFinding, JobSource

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


@define
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


def describe(name: str, f: JobFinding) -> str:
    if name == "environment":
        return f.key
    return f"{name}: {f.key} = {f.value if f.value is not None else repr(f.raw)}"


def launcher_nodes(env: dict[str, str]) -> list[JobFinding]:
    """Node counts the launcher's environment implies, each with its evidence."""
    out: list[JobFinding] = []
    sizes = (("WORLD_SIZE", "LOCAL_WORLD_SIZE"), ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"))
    for size, local in sizes:
        ws, lws = count_of(env, size), count_of(env, local)
        if ws and lws:
            out.append(JobFinding("nodes", math.ceil(ws / lws), f"{size}={ws}, {local}={lws}"))
    for name in ("GROUP_WORLD_SIZE", "NNODES", "PET_NNODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"):
        if n := count_of(env, name):
            out.append(JobFinding("nodes", n, f"{name}={env[name]}"))
    return out


def _role_of(f: JobFinding) -> str:
    """What one finding says about the job: training, serving, or nothing."""
    key = cfgs.norm(f.key.rsplit(".", 1)[-1].split(": ")[-1]) if f.what == "tp" else ""
    if f.what == "strategy" or key in TRAINING_TP_KEYS:
        return "training"
    return "serving" if f.what in ("backend", "headless") else ""


def pick_role(a: str, b: str) -> str:
    """Training wins: the stricter rule applies when a source says both."""
    return "training" if "training" in (a, b) else (a or b)


def view(name: str, kind: str, findings: list[JobFinding], world: int | None, role: str | None = None) -> View:
    v = View(name=name, kind=kind, role=role or "")
    for f in findings:
        v.role = pick_role(v.role, _role_of(f))
        _take(v, f, world)
    return v


def _take_count(v: View, f: JobFinding) -> None:
    what, value = f.what, f.value
    if not isinstance(value, int):
        return
    if what == "tp" and (value > v.tp or not v.tp_by):
        v.tp, v.tp_by = value, describe(v.name, f)
    elif what == "pp":
        v.pp = max(v.pp, value)
    elif what == "nodes" and value > v.nodes:
        v.nodes, v.nodes_by = value, describe(v.name, f)


def _take(v: View, f: JobFinding, world: int | None) -> None:
    """What one finding adds to a view: the largest degree or count, each with its evidence."""
    what, value, name = f.what, f.value, v.name
    if what in ("tp", "pp", "nodes"):
        _take_count(v, f)
    elif what == "tp_plan" and value is not None and (world or 2) > v.tp:  # "auto": over every process
        v.tp = world or 2
        v.tp_by = describe(name, replace(f, value=f"{value} (TP over all {world or 'the'} processes)"))
    elif what == "headless" and v.nodes < 2:
        v.nodes, v.nodes_by = 2, f"{name}: {f.key} (a headless vLLM is a worker of a multi-node engine)"
    elif what == "strategy" and isinstance(value, str) and value.upper() not in v.strategies:
        v.strategies.append(value.upper())
    elif what == "backend" and isinstance(value, str):
        v.backend = value


def _ray_hint(env: dict[str, str]) -> str | None:
    """``VLLM_HOST_IP=…`` or a non-local ``RAY_ADDRESS``: a Ray cluster over machines."""
    if said(env, "VLLM_HOST_IP"):
        return f"VLLM_HOST_IP={env['VLLM_HOST_IP']}"
    address = said(env, "RAY_ADDRESS")
    host = address.split("://")[-1].rsplit(":", 1)[0]
    local = host in ("", "auto", "local", "localhost", "127.0.0.1", "[::1]")
    return None if local else f"RAY_ADDRESS={address}"


def infer_nodes(v: View, gpus: int | None, env: dict[str, str]) -> None:
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


def merge(views: list[View], name: str) -> View:
    job = View(name=name, kind="job")
    for v in views:
        if v.tp > job.tp:
            job.tp, job.tp_by = v.tp, v.tp_by
        if v.nodes > job.nodes:
            job.nodes, job.nodes_by = v.nodes, v.nodes_by
        job.pp = max(job.pp, v.pp)
        job.strategies += [s for s in v.strategies if s not in job.strategies]
        job.backend = job.backend or v.backend
        job.role = pick_role(job.role, v.role)
    return job


def evidence(b: View) -> str:
    """A violation's two pieces of evidence, each said once (the GPU-count inference repeats its TP)."""
    if b.nodes_by.startswith(b.tp_by + " "):
        return f"{b.tp_by}; {b.nodes_by[len(b.tp_by) + 1 :]}"
    return f"{b.tp_by}; {b.nodes_by}"


def violations(job: View, others: list[View]) -> list[View]:
    """Every TP > 1 that spans nodes > 1 (a config pairs with the job's own count), as a view of the pair."""
    out: list[View] = []
    for v in [job, *others]:  # the job's kind is never a config's
        role = pick_role(v.role, job.role)
        if v.tp > 1 and v.nodes > 1:
            out.append(v)
        elif v.kind in CONFIG_KINDS and v.tp > 1 and job.nodes > 1:
            out.append(View(v.name, v.kind, v.tp, v.tp_by, job.nodes, job.nodes_by, role=role))
        elif v.kind in CONFIG_KINDS and v.nodes > 1 and job.tp > 1:
            out.append(View(v.name, v.kind, job.tp, job.tp_by, v.nodes, v.nodes_by, role=role))
    return out


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
            f"serving ({evidence(b)}){more}: another job than the one this run launches; {_FRAGILE}",
            FIX_OTHER_JOB, f"running {b.name}: TP {b.tp} across {b.nodes} nodes, another job",
            f"check {b.name.split(' (')[0]}", code="G10.other-job",
        )  # fmt: skip
    return [b for b in bad if b.kind != "process" or b.role]


def judge_tp(bad: list[View], option: str, out: Findings) -> None:
    """One finding per kind of job: training by ``--spark-tp-across-nodes`` (FAIL), serving WARN;
    a running process of no known kind, another job than this run's, WARN."""
    bad = _judge_other_jobs(bad, out)
    for role in ("training", "", "serving"):
        mine = [b for b in bad if b.role == role]
        if not mine:
            continue
        b = mine[0]
        more = f"; {len(mine) - 1} more in the details" if len(mine) > 1 else ""
        text = f"tensor parallel {b.tp} across {b.nodes} nodes ({evidence(b)}){more}, {ROLE_TEXT[role]}"
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


def env_view(env: dict[str, str], world: int | None) -> tuple[View, list[JobFinding]]:
    """What the launcher's environment says: node counts, and the TP variables (vLLM's: serving)."""
    findings = launcher_nodes(env)
    findings += [JobFinding.from_dict(cfgs.make_finding("tp", env[n], f"{n}={env[n]}").to_dict())
                 for n in TP_ENV if said(env, n)]  # fmt: skip
    role = pick_role(
        "serving" if said(env, "VLLM_TENSOR_PARALLEL_SIZE") else "",
        "training" if said(env, "PARALLELISM_CONFIG_TP_SIZE") else "",
    )
    return view("environment", "env", findings, world, role), findings


def source_views(sources: list[JobSource], world: int | None, out: Findings) -> tuple[list[View], int]:
    """A view of each source, its findings and notes said; and how many could not be read."""
    for src in sources:
        out.note(*(describe(src.name, finding) for finding in src.findings))
        if src.error:
            out.note(f"{src.name}: {src.error}")
        out.note(*(f"{src.name}: {n}" for n in src.notes))
    views = [view(src.name, src.kind, src.findings, world, src.role) for src in sources]
    return views, sum(1 for src in sources if src.error)


@define
class JobViews:
    """The job this run launches (the launcher's environment and processes, merged), every other source
    on its own, how many sources could not be read, and whether anything says there is a job at all."""

    job: View
    others: list[View]
    errors: int
    evidence: bool


def job_views(sources: list[JobSource], env: dict[str, str], world: int | None, gpus: int | None,
              out: Findings) -> JobViews:  # fmt: skip
    """Every source as a view; the job is what launched this run, and every config, named or found, is
    judged on its own (issue 11); a node count inferred from this machine's GPUs where none is said."""
    launcher, env_findings = env_view(env, world)
    views, errors = source_views(sources, world, out)
    job = merge([launcher] + [v for v in views if v.kind == "launcher"], "job")
    others = [v for v in views if v.kind != "launcher"]
    for v in [job, *others]:
        if v.kind not in CONFIG_KINDS or not job.nodes:  # a config's own count stands beside the launcher's
            infer_nodes(v, gpus, env)
    evidence = bool(env_findings) or any(v.tp or v.nodes or v.strategies or v.backend for v in views)
    return JobViews(job, others, errors, evidence)
