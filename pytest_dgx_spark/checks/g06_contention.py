"""G6 — unified-memory contention: who else holds (or will grab) the pool?

On GB10 GPU and CPU share one ~121 GiB pool: a server started with vLLM's default
``--gpu-memory-utilization`` 0.9 leaves training almost nothing, and the failure is an OOM or
a host wedge mid-run (vLLM #46307). G6 lists the other GPU work: NVML's per-process memory
(``nvidia-smi --query-compute-apps`` when NVML is unusable) and the process table for servers
and trainers NVML may not show, each with the cap its flags declare (``probes/gpu_programs.py``).
This pytest, its ancestors, our probe children and its launcher's workers are not "other";
another user's server is (the pool is one). PASS: no other GPU process. WARN: all capped at or
below ``g6_cap_max``. FAIL: one uncapped or above it. SKIP: no NVIDIA GPU, or nothing surveyed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

from pytest_dgx_spark import readings
from pytest_dgx_spark.checks.kit import CheckContext, FactsBase, Findings, Params, count, first_n, plus_more
from pytest_dgx_spark.model import Reading, Result, Status
from pytest_dgx_spark.probes.gpu_programs import (
    GpuEntry,
    Kind,
    classify,
    compute_apps,
    is_launcher,
    is_probe_child,
    program_of,
    reduce_cmdline,
)
from pytest_dgx_spark.probes.processes import SCAN_STOPPED
from pytest_dgx_spark.redact import scrub

GIB = 1 << 30
#: a process of another pid namespace or one that vanished
UNSEEN = "not visible from here"


class Proc(TypedDict, total=False):
    """One process of the table, its command line reduced (``reduce_cmdline``)."""

    pid: int
    ppid: int | None
    name: str
    cmd: list[str]
    rss_bytes: int | None
    self: bool  # this pytest or its ancestor
    probe: bool  # one of our probe children
    owner: str  # "uid N" when another user's: said, still counted (the pool is shared)


@dataclass
class Facts(FactsBase):
    """``processes`` hold each *reduced* command line (see ``reduce_cmdline``), never the full
    one; ``entries`` are the GPU process list (pid, used bytes, type, GPU)."""

    processes: list[Proc] = field(default_factory=list)
    entries: list[GpuEntry] = field(default_factory=list)
    gpu_totals: dict[str, int] = field(default_factory=dict)  # NVML memory total per GPU index
    mem_total_bytes: int | None = None  # /proc/meminfo MemTotal (the pool on GB10)
    nvml: str = "ok"  # "ok" or why not
    gpu_source: str = "NVML"  # where the GPU process list came from: NVML | nvidia-smi | none
    #: no usable NVIDIA GPU: NVML reports none, or no driver library and no working nvidia-smi
    no_gpu: bool = False
    process_error: str | None = None
    scanned: int = 0
    unreadable: int = 0
    unreadable_examples: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


FACTS = Facts


def _nvml_entries(ctx: CheckContext, facts: Facts) -> None:
    """(pid, used, type, gpu) from NVML, or from nvidia-smi when NVML is unusable."""
    nv = ctx.machine.nvml()
    if nv.get("ok"):
        facts.no_gpu = bool(nv.get("no_gpu"))
        if facts.no_gpu:
            facts.nvml = str(nv.get("reason") or "NVML reports no GPU")
        for dev in nv.get("devices") or []:
            _device_entries(dev, facts)
        return
    facts.nvml, facts.gpu_source = str(nv.get("reason") or "unavailable"), "none"
    if nv.get("hung"):
        facts.notes.append(f"NVML did not answer ({facts.nvml}); see G4. Process table only")
        return
    res, entries = compute_apps(ctx.machine.command)
    if not res.ok:
        facts.notes.append(f"{facts.nvml}; nvidia-smi --query-compute-apps: {res.describe()}")
        # nvidia-smi exits 9 when it "couldn't communicate with the NVIDIA driver" and 12 when
        # NVML is missing: no usable GPU, as G4 reads it too
        facts.no_gpu = bool(nv.get("missing")) and (res.error is not None or res.returncode in (9, 12))
        return
    facts.notes.append(f"{facts.nvml}; used nvidia-smi --query-compute-apps instead")
    facts.gpu_source = "nvidia-smi"
    facts.entries.extend(entries)


def _device_entries(dev: Mapping[str, Any], facts: Facts) -> None:
    idx, mem, errors = str(dev.get("index", 0)), dev.get("memory"), dev.get("errors") or {}
    if isinstance(mem, Mapping) and mem.get("total"):
        facts.gpu_totals[idx] = int(mem["total"])
    for kind in ("compute", "graphics"):
        procs = dev.get(f"{kind}_procs")
        if procs is None and f"{kind}_procs" in errors:
            facts.notes.append(f"NVML {kind} processes of GPU {idx}: {errors[f'{kind}_procs'].get('name')}")
        for p in procs or []:
            used = p.get("used_bytes")
            used = used if isinstance(used, int) else None
            facts.entries.append(GpuEntry(pid=p.get("pid"), used=used, type=kind, gpu=idx))


def _process_table(ctx: CheckContext, facts: Facts) -> None:
    """The process table, reduced: no argument a check does not read is kept."""
    try:
        table = ctx.machine.processes()
    except Exception as exc:  # the process table is best effort; NVML may still answer
        table = {"error": f"cannot list processes: {type(exc).__name__}: {exc}", "processes": []}
    facts.process_error = table.get("error")
    for p in table.get("processes") or []:
        if p.get("pid") is None:
            continue
        cmdline = [str(a) for a in p.get("cmdline") or []]
        facts.processes.append(Proc(
            pid=int(p["pid"]), ppid=p.get("ppid"), name=scrub(str(p.get("name") or "")),  # comm: 15 chars
            cmd=reduce_cmdline(cmdline), rss_bytes=p.get("rss_bytes"), self=bool(p.get("self")),
            probe=is_probe_child(cmdline), owner="" if p.get("mine", True) else f"uid {p.get('uid')}",
        ))
    facts.scanned = len(facts.processes)
    facts.unreadable = int(table.get("unreadable") or 0)
    facts.unreadable_examples = [str(x) for x in table.get("unreadable_examples") or []]


def gather(ctx: CheckContext) -> Facts:
    """Everything G6 decides on (G5 asks it too, before its copy probe)."""
    total_kib = (ctx.machine.meminfo().get("fields") or {}).get("MemTotal")
    facts = Facts(mem_total_bytes=int(total_kib) * 1024 if total_kib else None)
    _nvml_entries(ctx, facts)
    _process_table(ctx, facts)
    return facts


@dataclass
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


@dataclass
class Survey:
    groups: list[Group]
    excluded: list[str]


class _Tree:
    """The process table as a tree: who is ours, and which recognised ancestor a process folds
    into (a server's workers, a launcher's ranks); the groups of other GPU work it holds."""

    def __init__(self, procs: Sequence[Proc], vllm: float) -> None:
        self.procs = {int(p["pid"]): p for p in procs}
        kinds = {pid: classify(p.get("cmd") or [], vllm_default=vllm) for pid, p in self.procs.items()}
        self.kinds: dict[int, Kind] = {pid: k for pid, k in kinds.items() if k is not None}
        ours = [p for p in self.procs.values() if p.get("self")]
        self.own_launchers = {int(p["pid"]) for p in ours if is_launcher(p.get("cmd") or [])}
        self.groups: dict[int, Group] = {}
        self.skipped: dict[int, str] = {}

    def chain(self, pid: int) -> list[int]:
        out: list[int] = []
        cur: int | None = pid
        while cur is not None and cur in self.procs and cur not in out and len(out) < 64:
            out.append(cur)
            parent = self.procs[cur].get("ppid")
            cur = int(parent) if isinstance(parent, int) and parent > 0 else None
        return out

    def excluded(self, pid: int) -> str | None:
        p = self.procs.get(pid) or {}
        if p.get("self"):
            return "this pytest or its ancestor"
        if p.get("probe"):
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
        p, k = self.procs.get(root) or {}, self.kinds.get(root)
        cmd = list(p.get("cmd") or [])
        prog = program_of(cmd)
        return Group(
            pid=root, kind=k.kind if k else "GPU process",
            name=prog.name or prog.module or str(p.get("name") or "") or UNSEEN,
            cmd=" ".join(cmd) if cmd else f"pid {root} ({UNSEEN})", cap=k.cap if k else None,
            cap_source=k.cap_source if k else "no cap known", rss_bytes=p.get("rss_bytes"),
            owner=str(p.get("owner") or ""),
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
        try:
            pid = int(e.get("pid"))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return
        g = self.group_for(pid)
        if g is None:
            return
        if pid not in self.procs and e.get("name") and g.name == UNSEEN:
            g.name = str(e["name"])
        if e.get("type") not in g.types:
            g.types.append(str(e.get("type")))
        used = e.get("used")
        if isinstance(used, int) and used >= 0:  # no figure (NVML's [N/A]): _memory falls back to rss
            gpu = str(e.get("gpu", "0"))
            g.used_by_gpu[gpu] = g.used_by_gpu.get(gpu, 0) + used


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


@dataclass
class Judged:
    group: Group
    level: str  # "fail" | "warn" | "display"
    why: str
    fraction: float | None


def _gib(n: int | None) -> str:
    if n is None:
        return "[N/A]"
    return f"{n / GIB:.1f} GiB" if n >= GIB else f"{n / (1 << 20):.0f} MiB"


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


def _memory(g: Group) -> str:
    if g.used_bytes is not None:
        return f"{_gib(g.used_bytes)} NVML"
    return "memory [N/A]" if g.rss_bytes is None else f"rss {_gib(g.rss_bytes)}"


def describe(j: Judged) -> str:
    """``pid 4242 vLLM (vllm, cap 0.9, 40.1 GiB NVML)`` — pid, name, memory, cap."""
    g = j.group
    name = g.name if g.name and g.name.lower() != g.kind.lower() else ""
    return f"pid {g.pid} {g.kind} ({', '.join(x for x in (name, g.cap_word, _memory(g)) if x)})"


def headline(j: Judged, cap_max: float) -> str:
    """``pid 4242 vLLM 40.0 GiB NVML: cap 0.9 > 0.5`` — who, the memory it holds, and the one reason."""
    g = j.group
    name = f" ({g.name})" if g.name and g.name.lower() != g.kind.lower() and g.kind == "GPU process" else ""
    share = f"{j.fraction:.0%} of the pool" if j.fraction is not None else ""
    if j.level == "fail" and j.fraction is not None and j.fraction > cap_max:
        why = f"uses {share} > {cap_max:g}"
    elif g.kind == "GPU process":
        why = f"no cap known{', ' + share if share else ''}"
    elif g.cap is None:
        why = "no memory cap"
    else:
        why = f"cap {g.cap:g} {'>' if g.cap > cap_max else '<='} {cap_max:g}"
    return f"pid {g.pid} {g.kind}{name} {_memory(g)}: {why}"


def _detail(j: Judged) -> str:
    g = j.group
    used = sorted(g.used_by_gpu.items())
    where = ", ".join(f"GPU {k}: {_gib(v)}" for k, v in used) or "no GPU memory figure"
    extra = f" (+{len(g.pids) - 1} worker processes)" if len(g.pids) > 1 else ""
    whose = f"; another user's ({g.owner}): its memory is the pool's all the same" if g.owner else ""
    seen = "+".join(g.types)
    return f"{j.level.upper()} pid {g.pid}{extra} {g.kind}: {j.why}; {where}; seen by {seen}; {g.cmd}{whose}"


def _readings(facts: Facts, judged: Sequence[Judged], cap_max: float) -> list[Reading]:
    levels = [j.level for j in judged]
    fails, warns, display = levels.count("fail"), levels.count("warn"), levels.count("display")
    shown = [j.group for j in judged if j.level == "fail"] + [j.group for j in judged if j.level == "warn"]
    return [
        Reading(readings.OTHER_GPU_PROCESSES.name, fails + warns), Reading("uncapped_or_over_cap", fails),
        Reading("capped_or_small", warns), Reading("desktop_processes", display), Reading("cap_max", cap_max),
        Reading("processes_scanned", facts.scanned), Reading("processes_unreadable", facts.unreadable),
        Reading("nvml", facts.nvml),
        *(Reading(f"pid_{g.pid}", f"{g.kind} {g.cap_word} {_gib(g.used_bytes or g.rss_bytes)}")
          for g in shown[:8]),
    ]


def _context(facts: Facts, judged: Sequence[Judged]) -> str:
    """Where the survey looked (the number scanned stays in the readings: it
    changes from run to run, and the same machine state must give the same line)."""
    context = {"NVML": "NVML", "nvidia-smi": "nvidia-smi --query-compute-apps"}.get(
        facts.gpu_source, "process table only: no GPU process list"
    )
    if facts.process_error:
        context += f"; process table: {facts.process_error}"
    display = sum(1 for j in judged if j.level == "display")
    if display:
        context += f"; {count(display, 'desktop graphics process', 'desktop graphics processes')} not counted"
    return context


def _notes(facts: Facts, judged: Sequence[Judged], survey_excluded: Sequence[str]) -> list[str]:
    unreadable = [
        f"{count(facts.unreadable, 'process', 'processes')} unreadable, skipped or listed without a "
        f"command line: {first_n(facts.unreadable_examples, 3)}"
    ] if facts.unreadable else []
    return [*facts.notes, *unreadable, *map(_detail, judged), *(f"not counted: {e}" for e in survey_excluded)]


def _cannot_survey(facts: Facts, judged: Sequence[Judged]) -> tuple[str, str] | None:
    """(summary, headline) of a SKIP: no GPU, or neither list readable."""
    if facts.no_gpu:
        seen = [describe(j) for j in judged if j.level != "display"]
        also = (f"the process table names {first_n(seen, 2)}" if seen
                else "the process table shows no inference server or trainer")
        return f"no NVIDIA GPU to contend for ({facts.nvml}); {also}", "no NVIDIA GPU to contend for"
    if facts.nvml != "ok" and facts.process_error and not judged:
        return (f"could not survey GPU processes: NVML {facts.nvml}; {facts.process_error}",
                "could not survey GPU processes (no NVML, no process table)")
    return None


def evaluate(facts: Facts, params: Params) -> Result:
    """Decide G6 from the survey (pure)."""
    cap_max = params.threshold("g6_cap_max")
    survey = build_groups(facts, vllm_default=params.threshold("g6_vllm_default_util"))
    judged = judge(facts, params, survey)
    readings = _readings(facts, judged, cap_max)
    details = _notes(facts, judged, survey.excluded)
    skip = _cannot_survey(facts, judged)
    if skip is not None:
        return Result("G6", Status.SKIP, skip[0], readings=readings, details=details, headline=skip[1],
                      codes=["G6.no-gpu" if facts.no_gpu else "G6.not-surveyed"])
    if facts.gpu_source == "none" and not judged:
        # the process table alone cannot show an unknown program holding GPU memory: never a PASS
        return Result(
            "G6", Status.WARN,
            "GPU process list unreadable (NVML and nvidia-smi did not answer, see G4); the process table "
            "shows no inference server or trainer, but another program holding GPU memory would not show",
            "see G4: a driver that does not answer is the first problem; rerun once nvidia-smi answers",
            readings, details=details, short_fix="see G4; rerun once nvidia-smi answers",
            headline="GPU process list unreadable (NVML and nvidia-smi did not answer)",
            codes=["G6.process-list-unreadable"],
        )
    out = Findings("G6", details=details, readings=readings)
    context = _context(facts, judged)
    head, short_fix = _contenders(out, judged, cap_max, context)
    if not head and (facts.process_error or "").startswith(SCAN_STOPPED):
        # never a PASS on a table not read whole: a server whose command line (its cap flags) was not read
        out.warn(
            f"process table incomplete ({facts.process_error}): a server or trainer whose command line "
            f"was not read would not show [{context}]",
            "rerun; if it persists, look for processes with very long command lines (ps -eo pid,args)",
            code="G6.process-table-incomplete",
        )
        head, short_fix = "process table incomplete: a server's flags may be unread", "rerun"
    head = head or "no other GPU process"
    return out.result(Status.PASS, f"no other GPU process [{context}]", headline=head, short_fix=short_fix)


def _contenders(out: Findings, judged: Sequence[Judged], cap_max: float, context: str) -> tuple[str, str]:
    """FAIL for uncapped or over-cap work, else WARN for capped or small work; returns
    (headline, short fix), the headline the first one's (pid, kind, memory it holds, cap)."""
    fails = [j for j in judged if j.level == "fail"]
    warns = [j for j in judged if j.level == "warn"]
    if fails:
        others = f" (+{len(warns)} capped or small)" if warns else ""
        pids = first_n([str(j.group.pid) for j in fails], sep=" ")  # "1 2 3 and 2 more"
        out.fail(
            f"{count(len(fails), 'other GPU process', 'other GPU processes')} uncapped or above {cap_max:g}: "
            f"{first_n([describe(j) for j in fails])}{others} [{context}]",
            f"stop it before a run that needs the unified pool (kill {pids}), or restart it capped at "
            f"<= {cap_max:g} (vLLM --gpu-memory-utilization, SGLang --mem-fraction-static, TGI "
            "--cuda-memory-fraction); on GB10 vLLM may overshoot its cap at startup (vLLM #46307)",
            code="G6.uncapped-process",
        )
        fix = f"kill {pids}, or restart capped at <= {cap_max:g}"
        return plus_more(headline(fails[0], cap_max), len(fails)), fix
    if warns:
        out.warn(
            f"{count(len(warns), 'other GPU process', 'other GPU processes')}, capped at <= {cap_max:g} or "
            f"small: {first_n([describe(j) for j in warns])} [{context}]",
            "a small job can share the pool with capped servers (the seed ran a <4 GB LoRA next to vLLM "
            "at 0.5); check G3's headroom, and stop them before a run that needs the whole pool",
            code="G6.capped-process",
        )
        fix = "check G3's headroom; stop it for a whole-pool run"
        return plus_more(headline(warns[0], cap_max), len(warns)), fix
    return "", ""


def other_work(ctx: CheckContext) -> list[str]:
    """Short descriptions of other GPU work (fail or warn level), for G5's
    refusal: a copy probe next to someone else's job measures neither."""
    return [describe(j) for j in judge(gather(ctx), ctx.params()) if j.level != "display"]
