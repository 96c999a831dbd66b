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

This module is the façade (``FACTS``, ``gather``, ``evaluate``) and the node comparison's result;
the rules live beside it: :mod:`.jobs` (TP across nodes), :mod:`.link` (the link and RDMA access),
:mod:`.allreduce` (the bandwidth probe), :mod:`.nodes` (the fingerprints compared), :mod:`.summary`
(the lines), :mod:`.facts` (the records).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from pytest_dgx_spark import attachments, launch
from pytest_dgx_spark.checks.g09_container import check as g09_container
from pytest_dgx_spark.checks.g10_multinode import allreduce, jobs, link, nodes, summary
from pytest_dgx_spark.checks.g10_multinode.facts import Facts, Probe, count_of
from pytest_dgx_spark.checks.g10_multinode.probing import fleet_blocks, process_sources
from pytest_dgx_spark.checks.kit import CheckContext, Findings, Params, shortened
from pytest_dgx_spark.checks.record import plain
from pytest_dgx_spark.model import Result, Status
from pytest_dgx_spark.probes import fleet
from pytest_dgx_spark.probes import multinode as mn
from pytest_dgx_spark.probes.fleet import Exchange, NodeLine
from pytest_dgx_spark.probes.multinode import LAUNCHER_ENV, PROBE_BYTES, PROBE_ITERS, TP_ENV
from pytest_dgx_spark.probes.processes import SCAN_STOPPED

__all__ = ["FACTS", "LAUNCHER_ENV", "PROBE_BYTES", "PROBE_ITERS", "TP_ENV", "Facts", "evaluate", "gather"]

#: details kept per result (every finding of every config can be a lot)
MAX_DETAILS = 60

FACTS = Facts


def _wants_gpus(facts: Facts) -> bool:
    """A TP degree > 1 anywhere: then this machine's GPU count says whether it spans nodes."""
    tps = [f.value for src in facts.sources for f in src.findings if f.what == "tp"]
    env_tp = count_of(facts.env, "VLLM_TENSOR_PARALLEL_SIZE") or 0
    return any(isinstance(v, int) and v > 1 for v in tps) or env_tp > 1


def gather(ctx: CheckContext) -> Facts:
    m, s = ctx.machine, ctx.settings
    found = mn.discover(Path(s.rootdir), tuple(s.config), s.timeout)
    procs = m.processes()
    rows, scan_error = procs.get("processes") or [], procs.get("error")
    name, evidence = g09_container.container_of(m)
    facts = Facts(
        intrusive=s.intrusive, env=mn.job_env(m.env), root=str(s.rootdir), configs_given=found.given,
        configs_found=found.found, own_outputs=found.own_outputs,
        notes=[*found.notes, *([scan_error] if scan_error else [])],
        sources=[*found.sources, *process_sources(rows)],
        link=mn.read_link(m, m.env), container=f"{name} ({evidence})" if name else None,
        dev_infiniband=mn.infiniband_devices(m), memlock=mn.read_memlock(m),
    )
    if _wants_gpus(facts):
        nv = m.nvml()
        facts.gpu_count = len(nv.get("devices") or []) if nv.get("ok") else None
    world = launch.job_rank(m.env)[1] or 0
    facts.fleet = _fleet(ctx, facts)
    if not s.intrusive:
        return facts
    if world <= 1:
        facts.probe = Probe(reason="not launched by torchrun (WORLD_SIZE unset or 1)")
    elif fleet_blocks(facts.fleet):
        facts.probe = Probe(reason="the nodes did not agree (see the node comparison)")
    else:
        child = m.python_child(
            "g10:allreduce", ["_job_store.py", "allreduce_child.py"], mn.probe_config(s.timeout),
            step_timeout=s.timeout, total_timeout=s.timeout * 40, env=launch.torchrun_env(m.env),
        )
        facts.probe = allreduce.summarize_probe(child)
    return facts


def _fleet(ctx: CheckContext, facts: Facts) -> Exchange | None:
    """The node comparison's exchange for a rank of a job with a rendezvous point; an srun task
    without one is told how to give it, a hand-set RANK/WORLD_SIZE without one is a note."""
    env = ctx.machine.env
    if fleet.in_job(env):
        return _exchange(ctx, facts)
    unset = " and ".join(fleet.missing_rendezvous(env))
    if unset and launch.from_srun(env):
        rank, world = launch.job_rank(env)
        return Exchange(error=f"srun task {rank} of {world} has no rendezvous point ({unset} unset)",
                        cause="rendezvous")
    if unset:
        facts.notes.append(f"nodes not compared: {unset} unset (torchrun sets both)")
    return None


def _exchange(ctx: CheckContext, facts: Facts) -> Exchange:
    """Run the other selected checks, then hand this node's fingerprint (with their G-lines) to every rank."""
    run = getattr(ctx.engine, "run", None)  # an engine without run(): no other check's status
    results = {cid: run(cid) for cid in ctx.selected if cid != "G10"} if callable(run) else {}
    local = evaluate(facts, ctx.params())
    lines = {cid: NodeLine(r.status.value, r.line()) for cid, r in results.items()}
    lines["G10"] = NodeLine(local.status.value, local.line(), "this node, before the node comparison")
    g9 = results["G9"].reading("container") if "G9" in results else None
    mine = fleet.fingerprint(
        ctx.machine, {cid: r.status for cid, r in lines.items()}, results=lines,
        interfaces=link.fleet_interfaces(ctx.machine.env, facts.link),
        image=str(g9.value) if g9 is not None and g9.value is not None else None,
    )
    return fleet.exchange(ctx.machine, mine, max(3.0, ctx.settings.timeout * 3))


# --------------------------------------------------------------------------- the node comparison


def judge_fleet(exchanged: Exchange | None, out: Findings) -> int:
    """The node comparison (:mod:`.nodes`); how many ranks it found alike (0: none, or they differ)."""
    if exchanged is None:
        return 0
    fps = exchanged.fingerprints or []
    if fps:
        out.read("nodes_compared", len(fps))
        before = len(out.problems) + len(out.warnings)
        nodes.compare(fps, out, exchanged.rank)
        return len(fps) if len(out.problems) + len(out.warnings) == before else 0
    nodes.not_compared(exchanged, out)
    return 0


# --------------------------------------------------------------------------- the decision


def _rank_prefix(env: dict[str, str]) -> str:
    rank, world = launch.job_rank(env)
    if rank is None or not world or world < 2:
        return ""
    if rank == 0:  # rank 0 reports for the job
        return f"rank 0 of {world}: "
    return f"rank {rank} of {world}, this rank only: "


def _finish(f: Facts, out: Findings, ok: tuple[str, str], p_text: str, *, job_ok: bool, alike: int) -> Result:
    """One Result: the problem, then what the job is (``alike``: ranks found alike); the rank in front."""
    pairs = out.problems or out.warnings
    if out.problems and out.warnings:  # said in the details, with their fixes
        out.note(*(f"also: {t} (fix: {x})" for t, x in out.warnings))
    if alike:  # said on the line: a comparison that ran is not a silent one
        same = "same GPU, driver, CUDA, torch, NCCL and settings"
        ok = (f"{ok[0]}; {alike} ranks compared: {same}", f"{ok[1]}; {alike} ranks alike")
    head, short = out.short.get(pairs[0][0], ("", "")) if pairs else (ok[1], "")
    said = ok[0] + (f"; {p_text}" if p_text else "")
    r = out.result(Status.PASS, said, headline=head, short_fix=short)
    if r.status is Status.WARN and job_ok:  # a link or probe warning: then what the job is
        r.summary = f"{r.summary}; {said}"
    elif r.status in (Status.WARN, Status.FAIL) and p_text:
        r.summary = f"{r.summary}; {p_text}"
    return _for_this_rank(r, f)


def _for_this_rank(r: Result, f: Facts) -> Result:
    """The rank in front (rank 0 reports for the job); a config search that did not finish is never a PASS."""
    prefix = _rank_prefix(f.env)
    r.summary = prefix + r.summary
    if prefix and not prefix.startswith("rank 0 "):
        r.headline = prefix + r.headline
    incomplete = summary.search_incomplete(f)
    if r.status is Status.PASS and incomplete:
        r.status = Status.INFO
        r.summary = f"{r.summary}; config search incomplete ({incomplete})"
        r.headline = f"{r.headline}; config search incomplete"
        r.codes = ["G10.config-search-incomplete"]
    return r


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
    # every rank's fingerprint, for the reports (the attachment holds JSON: it travels with the result)
    result.attachments += attachments.node_table(plain(facts.fleet) if facts.fleet is not None else None)
    return result


def _mine_only(facts: Facts, out: Findings) -> Facts:
    """The facts without other users' jobs: theirs to judge, a note here, never a FAIL or WARN (issue 24)."""
    for s in facts.sources:
        if s.owner:
            found = ", ".join(f"{x.key} = {x.value}" for x in s.findings)
            out.note(f"not judged, another user's job ({s.owner}): {s.name}: {found}")
    return dataclasses.replace(facts, sources=[s for s in facts.sources if not s.owner])


def _has_evidence(f: Facts, job: jobs.JobViews) -> bool:
    """Anything that says there is a job to judge: else "nothing to go on" (a single node)."""
    return bool(job.evidence or launch.job_rank(f.env)[1] or (f.probe and f.probe.ran))


def _judge_links(f: Facts, params: Params, out: Findings) -> str:
    """A job over several nodes: its link and RDMA access judged; the link's speed, read ("" when unknown)."""
    net = link.NcclNet.of(f.env)
    link.judge_link(net, f.link, out)
    link.judge_rdma_access(net, f.link, f.container, f.dev_infiniband, f.memlock, params, out)
    speed = link.link_speed(net, f.link)
    if speed:
        out.read("link_speed", speed)
    return speed


def _evaluate(facts: Facts, params: Params) -> Result:
    out = Findings("G10")
    f = _mine_only(facts, out)
    world = launch.job_rank(f.env)[1]
    seen = jobs.job_views(f.sources, f.env, world, f.gpu_count, out)
    job, others = seen.job, seen.others
    out.note(*f.notes)
    summary.readings(f, job, others, seen.errors, out)
    bad = jobs.violations(job, others)
    jobs.judge_tp(bad, str(params.option("tp_across_nodes")), out)
    out.details[:0] = [f"TP {b.tp} across {b.nodes} nodes: {jobs.evidence(b)}" for b in bad]
    speed = _judge_links(f, params, out) if job.nodes > 1 or any(v.nodes > 1 for v in others) else ""
    alike = judge_fleet(f.fleet, out)  # the node comparison: every rank's fingerprint against the others
    p_text = allreduce.judge_probe(f.probe, job.nodes > 1, params, speed, out)
    if f.intrusive is False and world and world > 1:
        out.note("add --spark-intrusive to measure all-reduce bus bandwidth between the ranks")
    if not out.status and not _has_evidence(f, seen):
        r = summary.nothing_to_go_on(f, out, p_text)
    else:
        ok = summary.ok_parts(job, others, out, summary.configs_read(f))
        r = _finish(f, out, ok, p_text, job_ok=not bad, alike=alike)
    r.details = shortened(r.details, MAX_DETAILS)
    return r
