"""G10's reading of the machine that needs G10's own rules: running processes as job sources (a
wrapper and its command are one job; another user's job is marked, issue 24), and whether the
exchanged fingerprints let the bandwidth probe run."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pytest_dgx_spark.checks.g10_multinode import nodes
from pytest_dgx_spark.checks.kit import Findings
from pytest_dgx_spark.datadef import define
from pytest_dgx_spark.probes import configs as cfgs
from pytest_dgx_spark.probes.fleet import Exchange
from pytest_dgx_spark.probes.gpu_programs import job_name, unwrap
from pytest_dgx_spark.probes.multinode import JobSource
from pytest_dgx_spark.redact import split_title


@define(frozen=True)
class Proc:
    """One row of the process table (``probes.processes``), read once."""

    pid: int | None
    ppid: int | None
    cmdline: list[str]
    launcher: bool  # the row's ``self``: an ancestor of this run (torchrun, srun)
    owner: str | None  # "uid N" when it is another user's process (issue 24)
    row: Mapping[str, Any]  # the row itself, for ``configs.process_sources``

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> Proc:
        r = {"pid": None, "ppid": None, "cmdline": None, "self": False, "uid": None, "mine": None, **row}
        owner = f"uid {r['uid']}" if r["mine"] is False else None
        return cls(r["pid"], r["ppid"], list(r["cmdline"] or []), bool(r["self"]), owner, row)


def _runs(wrapper: Proc, child: Proc) -> bool:
    """``child`` is the command ``wrapper`` (timeout, uv run, nohup...) runs: one job."""
    cmd = split_title(wrapper.cmdline)
    inner, argv = unwrap(cmd), split_title(child.cmdline)
    if inner == cmd or not argv:
        return False
    tail = inner[1:]
    if tail:
        return argv[len(argv) - len(tail) :] == tail
    return os.path.basename(argv[-1]) == os.path.basename(inner[0])


def process_sources(rows: list[dict[str, Any]]) -> list[JobSource]:
    """Running processes with G10's flags as sources: a wrapper and its command are one job, with the
    command's pid; another user's job carries its ``owner`` (issue 24)."""
    procs = [Proc.of(r) for r in rows]
    by_pid = {p.pid: p for p in procs}
    inner = {w.pid: p for p in procs if (w := by_pid.get(p.ppid)) is not None and _runs(w, p)}
    wrapped = {c.pid for c in inner.values()}
    out: list[JobSource] = []
    for p in (p for p in procs if p.pid not in wrapped):  # a wrapped one is said by its wrapper
        last, seen = p, set()
        while last.pid in inner and last.pid not in seen:
            seen.add(last.pid)
            last = inner[last.pid]
        job = {**p.row, "pid": last.pid, "name": job_name(p.cmdline), "self": p.launcher or last.launcher}
        out += [JobSource.of(src, p.owner) for src in cfgs.process_sources([job], own_pid=os.getpid())]
    return out


def fleet_blocks(exchanged: Exchange | None) -> bool:
    """The bandwidth probe runs only once the fingerprints agree on what breaks collectives."""
    if exchanged is None:
        return False
    if exchanged.error or not exchanged.fingerprints:
        return True
    out = Findings("G10")
    nodes.compare(exchanged.fingerprints, out, exchanged.rank)
    return bool(out.problems)
