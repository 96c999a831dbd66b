"""G6 — unified-memory contention: who else holds (or will grab) the pool?

On GB10 the GPU and the CPU share one ~121 GiB pool, so an inference server
started with vLLM's default ``--gpu-memory-utilization`` (0.9) leaves a
training run almost nothing, and the failure is an OOM, a crash or a whole-host
wedge mid-run (vLLM #46307, NVIDIA/open-gpu-kernel-modules#1358), not a clean
error at start. This check lists the other GPU work on the box:

* NVML compute and graphics processes (per-process memory works on GB10), or
  ``nvidia-smi --query-compute-apps`` when NVML cannot be used from Python;
* the process table (``/proc/*/cmdline`` through psutil) for inference servers
  and trainers NVML may not show inside a container: vLLM, SGLang, Ollama,
  llama.cpp ``llama-server``, TRT-LLM, TGI, and trainers;

and reads each one's memory cap from its own flags. The pytest process and its
ancestors, our own probe children, and the workers of the launcher that started
this pytest (``torchrun``...) are not "other".

PASS: no other GPU process. WARN: every other process capped at or below
``g6_cap_max`` (the seed's 0.5). FAIL: one uncapped or above the cap.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from pytest_spark.checks.kit import CheckContext
from pytest_spark.model import Reading, Result, Status

GIB = 1 << 30
#: text that only our own probe children carry in their ``python -c`` source
PROBE_MARK = "Prologue of every probe child"
PYTHON = re.compile(r"^(python|pypy)(\d+(\.\d+)*)?$")
#: interpreter options that take a value (``python -W ignore train.py``)
PY_OPTS_WITH_VALUE = {"-W", "-X", "-Q", "--check-hash-based-pycs"}
#: a Python training script: train.py, train_lora.py, run_train.py, finetune.py,
#: my-sft.py, pretrain2.py — the file name, not a directory name or "trainer_utils.py"
TRAIN_SCRIPT = re.compile(r"(^|[_-])(train|finetune|fine_tune|fine-tune|sft|pretrain)\d*([_-][\w.-]*)?\.py$")
#: launchers whose workers are one job (ours, when the launcher is our ancestor)
LAUNCHER_PROGRAMS = {"torchrun", "deepspeed", "mpirun", "mpiexec", "srun"}
#: the ones that only ever start training (mpirun/srun start anything)
TRAINING_LAUNCHERS = {"torchrun", "deepspeed"}
LAUNCHER_MODULES = {
    "torch.distributed.run",
    "torch.distributed.launch",
    "accelerate.commands.launch",
    "deepspeed.launcher.runner",
}
#: a process of another pid namespace or one that vanished
UNSEEN = "not visible from here"


@dataclass(frozen=True)
class Program:
    """What a command line runs: a program name (binary or console script), or
    a Python module, and the arguments that program gets."""

    name: str
    module: str | None
    script: str | None
    args: tuple[str, ...]
    code: bool = False  # python -c


def program_of(cmdline: Sequence[str]) -> Program:
    """``[python3, /usr/bin/vllm, serve, m]`` -> Program("vllm", args=("serve", "m")).

    Console scripts run through their shebang, so ``/proc`` shows the
    interpreter first; the script's file name is the program.
    """
    if not cmdline:
        return Program("", None, None, ())
    exe = os.path.basename(cmdline[0])
    if not PYTHON.match(exe):
        return Program(exe, None, None, tuple(cmdline[1:]))
    i = 1
    while i < len(cmdline):
        arg = cmdline[i]
        if arg == "-m" and i + 1 < len(cmdline):
            return Program("", cmdline[i + 1], None, tuple(cmdline[i + 2 :]))
        if arg.startswith("-m") and len(arg) > 2:
            return Program("", arg[2:], None, tuple(cmdline[i + 1 :]))
        if arg == "-c":
            return Program(exe, None, None, tuple(cmdline[i + 2 :]), code=True)
        if arg in PY_OPTS_WITH_VALUE:
            i += 2
            continue
        if arg.startswith("-"):
            i += 1
            continue
        return Program(os.path.basename(arg), None, arg, tuple(cmdline[i + 1 :]))
    return Program(exe, None, None, ())


def flag_value(args: Sequence[str], *names: str) -> str | None:
    """The last value given for a flag, as ``--flag X`` or ``--flag=X``."""
    found = None
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                found = args[i + 1]
            elif arg.startswith(name + "="):
                found = arg[len(name) + 1 :]
    return found


@dataclass(frozen=True)
class Kind:
    """A recognised GPU workload and the memory cap its flags declare."""

    kind: str  # "vLLM", "SGLang", "Ollama", "llama.cpp", "TRT-LLM", "TGI", "trainer"
    cap: float | None
    cap_source: str


def _cap(
    args: Sequence[str], names: Sequence[str], default: float | None, default_note: str
) -> tuple[float | None, str]:
    raw = flag_value(args, *names)
    if raw is None:
        return default, default_note
    try:
        value = float(raw)
    except ValueError:
        return None, f"unreadable {names[0]} {raw!r}"
    return value, f"{names[0]} {raw}"


def classify(cmdline: Sequence[str], *, vllm_default: float = 0.9) -> Kind | None:
    """Recognise an inference server or trainer by its command line.

    The rule is deliberately bounded: program and module names the projects
    document, plus Python scripts whose file name says train/finetune/sft.
    """
    if not cmdline:
        return None
    p = program_of(cmdline)
    name, module, script, args = p.name, p.module or "", p.script or "", p.args
    first = args[0] if args else ""
    argv0 = os.path.basename(cmdline[0])
    if (
        (name == "vllm" and first in ("serve", "run-batch"))
        or module.startswith("vllm.entrypoints")
        or "vllm/entrypoints/" in script
        or argv0.startswith("VLLM::")
    ):
        cap, note = _cap(
            args,
            ("--gpu-memory-utilization", "--gpu_memory_utilization"),
            vllm_default,
            f"vLLM default {vllm_default:g} (flag absent; newer vLLM docs say 0.92)",
        )
        return Kind("vLLM", cap, note)
    if (
        module.startswith("sglang.launch_server")
        or script.endswith("sglang/launch_server.py")
        or (name == "sglang" and first == "serve")
    ):
        cap, note = _cap(
            args,
            ("--mem-fraction-static", "--mem_fraction_static"),
            None,
            "no --mem-fraction-static (SGLang sizes its static pool itself)",
        )
        return Kind("SGLang", cap, note)
    if (name == "ollama" and first in ("serve", "runner")) or name.startswith("ollama_llama_server"):
        return Kind("Ollama", None, "Ollama has no memory-fraction cap (loads models on demand)")
    if name == "llama-server":
        return Kind("llama.cpp", None, "llama-server has no memory-fraction cap")
    if name == "trtllm-serve" or module.startswith("tensorrt_llm.commands.serve"):
        cap, note = _cap(
            args,
            ("--kv_cache_free_gpu_memory_fraction", "--kv-cache-free-gpu-memory-fraction"),
            0.9,
            "TRT-LLM default --kv_cache_free_gpu_memory_fraction 0.9 (flag absent)",
        )
        return Kind("TRT-LLM", cap, note)
    if name in ("text-generation-launcher", "text-generation-server"):
        cap, note = _cap(
            args, ("--cuda-memory-fraction",), 1.0, "TGI default --cuda-memory-fraction 1.0 (flag absent)"
        )
        return Kind("TGI", cap, note)
    if (
        name in TRAINING_LAUNCHERS
        or (name == "accelerate" and first == "launch")
        or module in LAUNCHER_MODULES
    ):
        return Kind("trainer", None, "a training launcher: no memory cap")
    if script and TRAIN_SCRIPT.search(os.path.basename(script)):
        return Kind("trainer", None, "a training script: no memory cap")
    return None


def is_launcher(cmdline: Sequence[str]) -> bool:
    """Launchers (torchrun, accelerate launch, deepspeed, mpirun, srun): when one
    is an ancestor of this pytest, its other workers are this same job."""
    p = program_of(cmdline)
    return (
        p.name in LAUNCHER_PROGRAMS
        or (p.name == "accelerate" and p.args[:1] == ("launch",))
        or (p.module or "") in LAUNCHER_MODULES
    )


def is_probe_child(cmdline: Sequence[str]) -> bool:
    return any(PROBE_MARK in arg for arg in cmdline[1:4])


# ---------------------------------------------------------------------- facts


@dataclass
class Group:
    """Other GPU work: one server or trainer with its worker processes, or one
    unrecognised process NVML lists."""

    pid: int
    kind: str  # a Kind.kind, or "GPU process" when only NVML says so
    name: str
    cmd: str
    cap: float | None = None
    cap_source: str = ""
    pids: list[int] = field(default_factory=list)
    used_by_gpu: dict[str, int] = field(default_factory=dict)  # NVML bytes per GPU index
    used_unknown: bool = False  # NVML listed it but gave no memory figure
    rss_bytes: int | None = None
    types: list[str] = field(default_factory=list)  # "compute", "graphics", "cmdline"

    @property
    def used_bytes(self) -> int | None:
        return sum(self.used_by_gpu.values()) if self.used_by_gpu else None


@dataclass
class Facts:
    groups: list[dict[str, Any]] = field(default_factory=list)  # asdict(Group)
    gpu_totals: dict[str, int] = field(default_factory=dict)  # NVML memory total per GPU index
    mem_total_bytes: int | None = None  # /proc/meminfo MemTotal (the pool on GB10)
    nvml: str = "ok"  # "ok" or why not
    gpu_source: str = "NVML"  # where the GPU process list came from: NVML | nvidia-smi | none
    #: with no GPU process list: True when there is no usable NVIDIA GPU at all
    #: (no driver library, nvidia-smi absent or saying the driver is not there)
    no_gpu: bool = False
    process_error: str | None = None
    scanned: int = 0
    excluded: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _nvml_entries(ctx: CheckContext, facts: Facts) -> list[dict[str, Any]]:
    """(pid, used, type, gpu) from NVML, or from nvidia-smi when NVML is unusable."""
    nv = ctx.machine.nvml()
    entries: list[dict[str, Any]] = []
    if nv.get("ok"):
        for dev in nv.get("devices") or []:
            idx = str(dev.get("index", 0))
            mem = dev.get("memory")
            if isinstance(mem, Mapping) and mem.get("total"):
                facts.gpu_totals[idx] = int(mem["total"])
            errors = dev.get("errors") or {}
            for kind in ("compute", "graphics"):
                procs = dev.get(f"{kind}_procs")
                if procs is None and f"{kind}_procs" in errors:
                    facts.notes.append(
                        f"NVML {kind} processes of GPU {idx}: {errors[f'{kind}_procs'].get('name')}"
                    )
                for p in procs or []:
                    entries.append(
                        {"pid": p.get("pid"), "used": p.get("used_bytes"), "type": kind, "gpu": idx}
                    )
        return entries
    facts.nvml = str(nv.get("reason") or "unavailable")
    facts.gpu_source = "none"
    missing = bool(nv.get("missing"))
    if nv.get("hung"):
        facts.notes.append(f"NVML did not answer ({facts.nvml}); see G4. Process table only")
        return entries
    res = ctx.machine.command(
        ["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader,nounits"]
    )
    if not res.ok:
        facts.notes.append(f"{facts.nvml}; nvidia-smi --query-compute-apps: {res.describe()}")
        # nvidia-smi exits 9 when it "couldn't communicate with the NVIDIA driver"
        # and 12 when NVML is missing: no usable GPU, as G4 reads it too.
        facts.no_gpu = missing and (res.error is not None or res.returncode in (9, 12))
        return entries
    facts.notes.append(f"{facts.nvml}; used nvidia-smi --query-compute-apps instead")
    facts.gpu_source = "nvidia-smi"
    entries.extend(parse_compute_apps(res.stdout))
    return entries


def parse_compute_apps(text: str) -> list[dict[str, Any]]:
    """``pid, process_name, used_memory`` CSV (MiB) -> entries; header lines,
    empty lines, ``[N/A]`` memory and short lines are tolerated."""
    out: list[dict[str, Any]] = []
    for line in text.splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) < 3 or not cols[0].isdigit():
            continue  # header, "No running processes found", blank
        used = cols[-1].split()[0] if cols[-1].split() else ""
        try:
            used_bytes: int | None = int(float(used) * (1 << 20))
        except ValueError:
            used_bytes = None
        out.append(
            {
                "pid": int(cols[0]),
                "used": used_bytes,
                "type": "compute",
                "gpu": "0",
                "name": ",".join(cols[1:-1]),
            }
        )
    return out


def survey(ctx: CheckContext) -> Facts:
    """Everything G6 decides on (G5 asks it too, before its copy probe)."""
    facts = Facts()
    vllm_default = ctx.thresholds.get("g6_vllm_default_util", 0.9)
    mem = ctx.machine.meminfo()
    total_kib = (mem.get("fields") or {}).get("MemTotal")
    facts.mem_total_bytes = int(total_kib) * 1024 if total_kib else None
    entries = _nvml_entries(ctx, facts)
    try:
        table = ctx.machine.processes()
    except Exception as exc:  # the process table is best effort; NVML may still answer
        table = {"error": f"cannot list processes: {type(exc).__name__}: {exc}", "processes": []}
    facts.process_error = table.get("error")
    procs = {int(p["pid"]): p for p in table.get("processes") or [] if p.get("pid") is not None}
    facts.scanned = len(procs)
    if table.get("denied"):
        facts.notes.append(f"{table['denied']} processes' command lines were not readable")
    return build_groups(facts, entries, procs, vllm_default=vllm_default)


def build_groups(
    facts: Facts,
    entries: Sequence[Mapping[str, Any]],
    procs: Mapping[int, Mapping[str, Any]],
    *,
    vllm_default: float = 0.9,
) -> Facts:
    """Pure: NVML entries + the process table -> groups of other GPU work."""
    kinds: dict[int, Kind] = {}
    for pid, p in procs.items():
        k = classify(p.get("cmdline") or [], vllm_default=vllm_default)
        if k is not None:
            kinds[pid] = k

    def chain(pid: int) -> list[int]:
        out, seen = [], set()
        cur: int | None = pid
        while cur is not None and cur in procs and cur not in seen and len(out) < 64:
            seen.add(cur)
            out.append(cur)
            parent = procs[cur].get("ppid")
            cur = int(parent) if isinstance(parent, int) and parent > 0 else None
        return out

    own_launchers = {pid for pid, p in procs.items() if p.get("self") and is_launcher(p.get("cmdline") or [])}

    def excluded(pid: int) -> str | None:
        p = procs.get(pid)
        if p is None:
            return None
        if p.get("self"):
            return "this pytest or its ancestor"
        if is_probe_child(p.get("cmdline") or []):
            return "a pytest-dgx-spark probe child"
        if own_launchers & set(chain(pid)[1:]):
            return "a worker of the launcher that started this pytest"
        return None

    def root_of(pid: int) -> int:
        """The outermost recognised, not-excluded ancestor (a server's workers
        and a launcher's ranks fold into it)."""
        top = pid
        for anc in chain(pid)[1:]:
            if anc in kinds and excluded(anc) is None:
                top = anc
        return top

    groups: dict[int, Group] = {}
    skipped: dict[int, str] = {}

    def group_for(pid: int) -> Group | None:
        why = excluded(pid)
        if why:
            skipped[pid] = why
            return None
        root = root_of(pid)
        if root in groups:
            g = groups[root]
        else:
            p = procs.get(root) or {}
            cmdline = list(p.get("cmdline") or [])
            k = kinds.get(root)
            prog = program_of(cmdline)
            name = prog.name or prog.module or str(p.get("name") or "") or UNSEEN
            g = Group(
                pid=root,
                kind=k.kind if k else "GPU process",
                name=name,
                cmd=" ".join(cmdline)[:200] if cmdline else f"pid {root} ({UNSEEN})",
                cap=k.cap if k else None,
                cap_source=k.cap_source if k else "no cap known",
                rss_bytes=p.get("rss_bytes"),
            )
            groups[root] = g
        if pid not in g.pids:
            g.pids.append(pid)
        return g

    for pid in sorted(kinds):
        g = group_for(pid)
        if g is not None and "cmdline" not in g.types:
            g.types.append("cmdline")
    for e in entries:
        try:
            pid = int(e.get("pid"))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            continue
        g = group_for(pid)
        if g is None:
            continue
        if pid not in procs and e.get("name") and g.name == UNSEEN:
            g.name = str(e["name"])
        if e.get("type") not in g.types:
            g.types.append(str(e.get("type")))
        used = e.get("used")
        if isinstance(used, int):
            gpu = str(e.get("gpu", "0"))
            g.used_by_gpu[gpu] = g.used_by_gpu.get(gpu, 0) + used
        else:
            g.used_unknown = True
    facts.groups = [asdict(g) for g in sorted(groups.values(), key=lambda g: g.pid)]
    facts.excluded = [f"pid {pid}: {why}" for pid, why in sorted(skipped.items())]
    return facts


# ---------------------------------------------------------------------- evaluate


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


def judge(facts: Facts, thresholds: Mapping[str, float]) -> list[Judged]:
    """Each group's level: fail (uncapped, or above the cap), warn (capped at
    or below it, or small and unrecognised), display (the desktop)."""
    cap_max = thresholds.get("g6_cap_max", 0.5)
    small = thresholds.get("g6_small_process_gb", 1.0) * GIB
    out: list[Judged] = []
    for raw in facts.groups:
        g = Group(**raw)
        fraction = None
        if g.used_by_gpu:
            fracs = []
            for gpu, used in g.used_by_gpu.items():
                total = facts.gpu_totals.get(gpu) or facts.mem_total_bytes
                if total:
                    fracs.append(used / total)
            fraction = max(fracs) if fracs else None
        over = fraction is not None and fraction > cap_max
        used_txt = f"uses {fraction:.0%} of the pool" if fraction is not None else ""
        if g.kind == "GPU process":
            graphics_only = "compute" not in g.types
            if graphics_only and (g.used_bytes is None or g.used_bytes < small):
                out.append(Judged(g, "display", "graphics only, small (the desktop)", fraction))
            elif over:
                out.append(Judged(g, "fail", f"no cap known and {used_txt} (> {cap_max:g})", fraction))
            else:
                note = used_txt or "memory [N/A]"
                out.append(Judged(g, "warn", f"no cap known; {note}", fraction))
            continue
        if g.cap is None:
            out.append(Judged(g, "fail", f"uncapped: {g.cap_source}", fraction))
        elif g.cap > cap_max:
            out.append(Judged(g, "fail", f"cap {g.cap:g} > {cap_max:g} ({g.cap_source})", fraction))
        elif over:
            out.append(Judged(g, "fail", f"capped at {g.cap:g} but {used_txt} (> {cap_max:g})", fraction))
        else:
            out.append(Judged(g, "warn", f"capped at {g.cap:g} <= {cap_max:g} ({g.cap_source})", fraction))
    return out


def describe(j: Judged) -> str:
    """``pid 4242 vLLM (vllm, cap 0.9, 40.1 GiB NVML)`` — pid, name, memory, cap."""
    g = j.group
    cap = "no cap" if g.cap is None else f"cap {g.cap:g}"
    if g.used_bytes is not None:
        mem = f"{_gib(g.used_bytes)} NVML"
    elif g.rss_bytes is not None:
        mem = f"rss {_gib(g.rss_bytes)}"
    else:
        mem = "memory [N/A]"
    name = g.name if g.name and g.name.lower() != g.kind.lower() else ""
    inner = ", ".join(x for x in (name, cap, mem) if x)
    return f"pid {g.pid} {g.kind} ({inner})"


def evaluate(facts: Facts, thresholds: Mapping[str, float]) -> Result:
    """Decide G6 from the survey (pure)."""
    cap_max = thresholds.get("g6_cap_max", 0.5)
    judged = judge(facts, thresholds)
    fails = [j for j in judged if j.level == "fail"]
    warns = [j for j in judged if j.level == "warn"]
    display = [j for j in judged if j.level == "display"]
    details = list(facts.notes)
    for j in judged:
        g = j.group
        where = ", ".join(f"GPU {k}: {_gib(v)}" for k, v in sorted(g.used_by_gpu.items())) or "no NVML memory"
        extra = f" (+{len(g.pids) - 1} worker processes)" if len(g.pids) > 1 else ""
        details.append(
            f"{j.level.upper()} pid {g.pid}{extra} {g.kind}: {j.why}; {where}; seen by {'+'.join(g.types)}; {g.cmd}"
        )
    details += [f"not counted: {e}" for e in facts.excluded]
    sources = {"NVML": "NVML", "nvidia-smi": "nvidia-smi --query-compute-apps"}.get(
        facts.gpu_source, "process table only: no GPU process list"
    )
    # The number of processes scanned stays in the readings: it changes from
    # run to run, and the same machine state must give the same line.
    context = sources if not facts.process_error else f"{sources}; process table: {facts.process_error}"
    if display:
        context += f"; {len(display)} desktop graphics process{'es' if len(display) > 1 else ''} not counted"
    readings = [
        Reading("other_gpu_processes", len(fails) + len(warns)),
        Reading("uncapped_or_over_cap", len(fails)),
        Reading("capped_or_small", len(warns)),
        Reading("desktop_processes", len(display)),
        Reading("cap_max", cap_max),
        Reading("processes_scanned", facts.scanned),
        Reading("nvml", facts.nvml),
    ]
    for j in (fails + warns)[:8]:
        g = j.group
        readings.append(
            Reading(
                f"pid_{g.pid}",
                f"{g.kind} {'no cap' if g.cap is None else f'cap {g.cap:g}'} {_gib(g.used_bytes or g.rss_bytes)}",
            )
        )
    if facts.nvml != "ok" and facts.process_error and not judged:
        return Result(
            "G6",
            Status.SKIP,
            f"could not survey GPU processes: NVML {facts.nvml}; {facts.process_error}",
            readings=readings,
            details=details,
        )
    if facts.gpu_source == "none" and not judged:
        # No GPU process list: the process table alone cannot show an unknown
        # program holding GPU memory, so this is never a PASS.
        if facts.no_gpu:
            return Result(
                "G6",
                Status.SKIP,
                f"no NVIDIA GPU to contend for ({facts.nvml}); the process table shows no inference "
                "server or trainer",
                readings=readings,
                details=details,
            )
        return Result(
            "G6",
            Status.WARN,
            "GPU process list unreadable (NVML and nvidia-smi did not answer, see G4); the process table "
            "shows no inference server or trainer, but another program holding GPU memory would not show",
            "see G4: a driver that does not answer is the first problem; rerun once nvidia-smi answers",
            readings,
            details=details,
        )
    if fails:
        listed = "; ".join(describe(j) for j in fails[:3]) + (
            f"; +{len(fails) - 3} more" if len(fails) > 3 else ""
        )
        others = f" (+{len(warns)} capped or small)" if warns else ""
        pids = " ".join(str(j.group.pid) for j in fails[:3])
        return Result(
            "G6",
            Status.FAIL,
            f"{len(fails)} other GPU process{'es' if len(fails) > 1 else ''} uncapped or above {cap_max:g}: "
            f"{listed}{others} [{context}]",
            f"stop it before a run that needs the unified pool (kill {pids}), or restart it capped at "
            f"<= {cap_max:g} (vLLM --gpu-memory-utilization, SGLang --mem-fraction-static, TGI "
            "--cuda-memory-fraction); on GB10 vLLM may overshoot its cap at startup (vLLM #46307)",
            readings,
            details=details,
        )
    if warns:
        listed = "; ".join(describe(j) for j in warns[:3]) + (
            f"; +{len(warns) - 3} more" if len(warns) > 3 else ""
        )
        return Result(
            "G6",
            Status.WARN,
            f"{len(warns)} other GPU process{'es' if len(warns) > 1 else ''}, capped at <= {cap_max:g} or "
            f"small: {listed} [{context}]",
            "a small job can share the pool with capped servers (the seed ran a <4 GB LoRA next to vLLM "
            "at 0.5); check G3's headroom, and stop them before a run that needs the whole pool",
            readings,
            details=details,
        )
    return Result("G6", Status.PASS, f"no other GPU process [{context}]", readings=readings, details=details)


def run(ctx: CheckContext) -> Result:
    return evaluate(survey(ctx), ctx.thresholds)


def other_work(ctx: CheckContext) -> list[str]:
    """Short descriptions of other GPU work (fail or warn level), for G5's
    refusal: a copy probe next to someone else's job measures neither."""
    return [describe(j) for j in judge(survey(ctx), ctx.thresholds) if j.level != "display"]
