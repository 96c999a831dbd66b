"""G6's survey (pure): the GPU process list and the process table folded into groups of other GPU
work — a server or trainer with its workers, or one process only NVML lists — and each group's level:
fail (uncapped, or above the cap), warn (capped at or below it, or small and unrecognised), display (the
desktop). This pytest, its ancestors, our probe children and its launcher's workers are not "other"."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import field

from pytest_dgx_spark.checks.g06_contention.facts import Facts, Proc
from pytest_dgx_spark.checks.kit import Params
from pytest_dgx_spark.datadef import define
from pytest_dgx_spark.probes.gpu_programs import GpuEntry, Kind, classify, is_launcher, program_of

GIB = 1 << 30
#: a process of another pid namespace or one that vanished
UNSEEN = "not visible from here"


@define
class Group:
    """Other GPU work: a server or trainer with its worker processes, or one process NVML lists."""

    pid: int
    kind: str  # a Kind.kind, or "GPU process" when only NVML says so
    name: str
    cmd: str  # the reduced command line (program, subcommand, cap flags)
    cap: float | None = None
    cap_source: str = ""
    pids: list[int] = field(default_factory=list)
    used_by_gpu: dict[str, int] = field(default_factory=dict)  # bytes per GPU index
    rss_bytes: int | None = None
    types: list[str] = field(default_factory=list)  # "compute", "graphics", "cmdline"
    owner: str = ""  # "uid N": another user's work

    @property
    def used_bytes(self) -> int | None:
        return sum(self.used_by_gpu.values()) if self.used_by_gpu else None

    @property
    def cap_word(self) -> str:
        return "no cap" if self.cap is None else f"cap {self.cap:g}"


@define
class Survey:
    groups: list[Group]
    excluded: list[str]


class _Tree:
    """The process table as a tree: who is ours, and which recognised ancestor a process folds
    into (a server's workers, a launcher's ranks); the groups of other GPU work it holds."""

    def __init__(self, procs: Sequence[Proc], vllm: float) -> None:
        self.procs = {p.pid: p for p in procs}
        kinds = {pid: classify(p.cmd, vllm_default=vllm) for pid, p in self.procs.items()}
        self.kinds: dict[int, Kind] = {pid: k for pid, k in kinds.items() if k is not None}
        self.own_launchers = {p.pid for p in self.procs.values() if p.self and is_launcher(p.cmd)}
        self.groups: dict[int, Group] = {}
        self.skipped: dict[int, str] = {}

    def chain(self, pid: int) -> list[int]:
        out: list[int] = []
        cur: int | None = pid
        while cur is not None and cur in self.procs and cur not in out and len(out) < 64:
            out.append(cur)
            parent = self.procs[cur].ppid
            cur = parent if parent is not None and parent > 0 else None
        return out

    def excluded(self, pid: int) -> str | None:
        p = self.procs[pid] if pid in self.procs else Proc()
        if p.self:
            return "this pytest or its ancestor"
        if p.probe:
            return "a pytest-dgx-spark probe child"
        if self.own_launchers & set(self.chain(pid)[1:]):
            return "a worker of the launcher that started this pytest"
        return None

    def root_of(self, pid: int) -> int:
        """The outermost recognised, not-excluded ancestor."""
        top = pid
        for anc in self.chain(pid)[1:]:
            if anc in self.kinds and self.excluded(anc) is None:
                top = anc
        return top

    def new_group(self, root: int) -> Group:
        p, k = self.procs[root] if root in self.procs else Proc(), self.kinds.get(root)
        prog = program_of(p.cmd)
        return Group(
            pid=root, kind=k.kind if k else "GPU process", name=prog.name or prog.module or p.name or UNSEEN,
            cmd=" ".join(p.cmd) if p.cmd else f"pid {root} ({UNSEEN})", cap=k.cap if k else None,
            cap_source=k.cap_source if k else "no cap known", rss_bytes=p.rss_bytes, owner=p.owner,
        )

    def group_for(self, pid: int) -> Group | None:
        """The group ``pid`` joins (its outermost recognised ancestor's), None when it is ours."""
        why = self.excluded(pid)
        if why:
            self.skipped[pid] = why
            return None
        root = self.root_of(pid)
        g = self.groups[root] = self.groups.get(root) or self.new_group(root)
        if pid not in g.pids:
            g.pids.append(pid)
        return g

    def add_entry(self, e: GpuEntry) -> None:
        """One GPU process list entry: its memory joins the group it belongs to."""
        if e.pid is None:
            return
        g = self.group_for(e.pid)
        if g is None:
            return
        if e.pid not in self.procs and e.name and g.name == UNSEEN:
            g.name = e.name
        if e.type not in g.types:
            g.types.append(e.type)
        if e.used is not None and e.used >= 0:  # no figure (NVML's [N/A]): _memory falls back to rss
            g.used_by_gpu[e.gpu] = g.used_by_gpu.get(e.gpu, 0) + e.used


def build_groups(facts: Facts, *, vllm_default: float = 0.9) -> Survey:
    """Pure: the GPU process list + the process table -> groups of other GPU work."""
    tree = _Tree(facts.processes, vllm_default)
    for pid in sorted(tree.kinds):
        g = tree.group_for(pid)
        if g is not None and "cmdline" not in g.types:
            g.types.append("cmdline")
    for e in facts.entries:
        tree.add_entry(e)
    skips = [f"pid {pid}: {why}" for pid, why in sorted(tree.skipped.items())]
    return Survey(sorted(tree.groups.values(), key=lambda g: g.pid), skips)


@define
class Judged:
    group: Group
    level: str  # "fail" | "warn" | "display"
    why: str
    fraction: float | None


def _fraction(g: Group, facts: Facts) -> float | None:
    """The largest share of a GPU's memory (the pool on GB10) the group holds."""
    totals = {gpu: facts.gpu_totals.get(gpu) or facts.mem_total_bytes for gpu in g.used_by_gpu}
    return max((used / total for gpu, used in g.used_by_gpu.items() if (total := totals[gpu])), default=None)


def judge(facts: Facts, params: Params, survey: Survey | None = None) -> list[Judged]:
    """Each group's level: fail (uncapped, or above the cap), warn (capped at
    or below it, or small and unrecognised), display (the desktop)."""
    cap_max = params.threshold("g6_cap_max")
    small = params.threshold("g6_small_process_gb") * GIB
    if survey is None:
        survey = build_groups(facts, vllm_default=params.threshold("g6_vllm_default_util"))
    return [_judge_one(g, _fraction(g, facts), cap_max, small) for g in survey.groups]


def _judge_one(g: Group, fraction: float | None, cap_max: float, small: float) -> Judged:
    over = fraction is not None and fraction > cap_max
    used_txt = f"uses {fraction:.0%} of the pool" if fraction is not None else ""
    if g.kind == "GPU process":
        if "compute" not in g.types and (g.used_bytes is None or g.used_bytes < small):
            return Judged(g, "display", "graphics only, small (the desktop)", fraction)
        if over:
            return Judged(g, "fail", f"no cap known and {used_txt} (> {cap_max:g})", fraction)
        return Judged(g, "warn", f"no cap known; {used_txt or 'memory [N/A]'}", fraction)
    if g.cap is None:
        return Judged(g, "fail", f"uncapped: {g.cap_source}", fraction)
    if g.cap > cap_max:
        return Judged(g, "fail", f"cap {g.cap:g} > {cap_max:g} ({g.cap_source})", fraction)
    if over:
        return Judged(g, "fail", f"capped at {g.cap:g} but {used_txt} (> {cap_max:g})", fraction)
    return Judged(g, "warn", f"capped at {g.cap:g} <= {cap_max:g} ({g.cap_source})", fraction)


