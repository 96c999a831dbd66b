"""G10's lines: the readings of what the job is, and the summary and headline of a job with nothing
wrong, or of nothing to go on (a single node; INFO when the config search did not finish)."""

from __future__ import annotations

from pytest_dgx_spark import launch
from pytest_dgx_spark.checks.g10_multinode.facts import Facts
from pytest_dgx_spark.checks.g10_multinode.jobs import CONFIG_KINDS, View
from pytest_dgx_spark.checks.kit import Findings, count, first_n, said
from pytest_dgx_spark.model import Result, Status
from pytest_dgx_spark.probes import multinode as mn
from pytest_dgx_spark.probes.multinode import NET_ENV, JobSource

#: room the headline leaves for the files read (the short line is 120 wide, less "G10 PASS: ")
_HEAD_ROOM = 108


def readings(f: Facts, job: View, others: list[View], errors: int, out: Findings) -> None:
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
    configs = configs_read(f)
    out.read("configs_read", len(configs))
    if configs:
        out.read("config_files", first_n(configs, 5, sep=", "))
    if errors:
        out.read("configs_unreadable", errors)
    if f.gpu_count is not None:
        out.read("gpus_here", f.gpu_count)
    for name in NET_ENV:
        if said(f.env, name):
            out.read(name.lower(), f.env[name])
    rank, world = launch.job_rank(f.env)
    if rank is not None and world and world > 1:
        out.read("rank", rank)
    if f.own_outputs:
        out.note(f"not read as configs (this tool wrote them): {first_n(f.own_outputs, 5, sep=', ')}")


def configs_read(f: Facts) -> list[str]:
    return [s.name for s in f.sources if s.kind in CONFIG_KINDS and not s.error]


def search_incomplete(f: Facts) -> str:
    """Why the config search missed configs, from its note: then "nothing multi-node" is INFO (issue 19)."""
    if f.configs_given:
        return ""
    notes = (n for n in f.notes if n.startswith(mn.INCOMPLETE_NOTE))
    return next((n[len(mn.INCOMPLETE_NOTE) :] for n in notes), "")


def _configs_said(root: str, read: list[JobSource], broken: list[JobSource], partial: bool) -> tuple[str, str]:
    """``(headline words, summary words)`` of the configs read, unreadable, or not found."""
    names = first_n([src.name for src in read], 2, sep=", ")
    said = f"read {names}" if read else ("no config read" if broken or partial else "no config found")
    if read:
        where = f"{len(read)} config file(s) read under {root}: {names}"
    elif partial:
        where = f"no config read in the part of {root} searched"
    else:
        where = f"no config {'file read' if broken else 'found'} under {root}"
    if broken:
        where += f" ({len(broken)} unreadable; {broken[0].name}: {broken[0].error})"
    return said, where


def nothing_to_go_on(f: Facts, out: Findings, p_text: str) -> Result:
    """No launcher, TP or node count: a single node (PASS); SKIP when the named configs are unreadable."""
    tried = [src for src in f.sources if src.kind in CONFIG_KINDS]
    read = [src for src in tried if not src.error]  # a FIFO or a broken file is not "read"
    broken = [src for src in tried if src.error]
    given = [src for src in tried if src.kind == "given"]
    incomplete = search_incomplete(f)
    partial = bool(incomplete) and not given
    said, where = _configs_said(f.root, read, broken, partial)
    text = (
        "no launcher environment (WORLD_SIZE, NNODES, SLURM_NNODES), no tensor parallelism or node count "
        f"({where}), no training/serving process with those flags" + (f"; {p_text}" if p_text else "")
    )
    if given and all(src.error for src in given):
        head = f"named config unreadable: {broken[0].name}"
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


def ok_parts(job: View, others: list[View], out: Findings, files: list[str]) -> tuple[str, str]:
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


def _files_read(head: str, files: list[str]) -> str:
    """`` (read a.yaml, b.json)``, or `` (2 configs read)`` where the names do not fit."""
    if not files:
        return ""
    named = f" (read {first_n(files, 2, sep=', ')})"
    return named if len(head) + len(named) <= _HEAD_ROOM else f" ({count(len(files), 'config')} read)"
