"""G6's decision (pure): PASS with no other GPU process; WARN when all are capped at or below
``g6_cap_max`` (or small); FAIL for one uncapped or above it; SKIP with no NVIDIA GPU or nothing
surveyed. The words each finding and reading uses are here too."""

from __future__ import annotations

from collections.abc import Sequence

from pytest_dgx_spark import readings
from pytest_dgx_spark.checks.g06_contention.facts import Facts
from pytest_dgx_spark.checks.g06_contention.survey import GIB, Group, Judged, build_groups, judge
from pytest_dgx_spark.checks.kit import Findings, Params, count, first_n, plus_more
from pytest_dgx_spark.model import Reading, Result, Status
from pytest_dgx_spark.probes.processes import SCAN_STOPPED


def _gib(n: int | None) -> str:
    if n is None:
        return "[N/A]"
    return f"{n / GIB:.1f} GiB" if n >= GIB else f"{n / (1 << 20):.0f} MiB"


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
