"""Diagnose: a failed run's logs name the gotcha that killed it (issue 23), decided purely from
:mod:`pytest_dgx_spark.logscan`'s hits and a few facts of the machine (:class:`MachineFacts`).

Primacy over frequency: the cause is the first strong line of the file (rank, node) that failed
first (earliest timestamp when all have one of one kind, else the first given); the others'
strong lines and NCCL floods are secondary. A strong line is a FAIL, a medium or weak one a WARN;
healthy lines never count. Ambiguous lines are gated on facts (FIELD-2026-12 §4.3):
``NV_ERR_NO_MEMORY`` is weak alone, strong with kernel 7.0.0-1019 or empty high-order buddyinfo.
The facts come from the log itself first (what it says of its kernel, free 32 MiB blocks, ranks and
hosts: :func:`log_facts`), then from the job's other logs, then from the machine: a log from another
box is judged by its own facts. Context can also decide whether a line counts at all
(``requires``/``cancelled_by``): NCCL's ``NET/IB : No device found`` is normal on one node.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

from pytest_dgx_spark import catalog, codes
from pytest_dgx_spark.logread import FileScan, Hit
from pytest_dgx_spark.logtable import CONTEXTS, GATES, Signature, Table
from pytest_dgx_spark.model import Reading, Result, Status
from pytest_dgx_spark.safe_text import shortened, visible

RANK = {"strong": 0, "medium": 1, "weak": 2}


class MachineFacts(TypedDict, total=False):
    """What the gates read of the machine whose run failed; ``None``/absent is "not read"."""

    kernel_release: str | None
    cma_free_over_total: bool | None  # CmaFree > CmaTotal in /proc/meminfo (the kernel 7.0 KHO/CMA bug)
    high_order_blocks_empty: bool | None  # /proc/buddyinfo zone Normal: no free block of order >= 9
    image_cuda_newer_than_driver: bool | None
    other_gpu_process: bool | None  # another process holds GPU memory (G6's reading)


GATE_WORDS = {
    "kernel_7_0_0_1019": "kernel 7.0.0-1019",
    "cma_free_over_total": "CmaFree > CmaTotal",
    "high_order_blocks_empty": "no free high-order blocks in /proc/buddyinfo",
    "image_cuda_newer_than_driver": "an image CUDA newer than the driver's",
    "other_gpu_process": "another process holding GPU memory",
    "same_second:EXIT0": "a service's 'clean' stop (status=0/SUCCESS) at the same second",
    "multi_node": "a job of more than one node",
    "single_node": "a job of one node",
    "watchdog_timeout": "a NCCL watchdog timeout in the job",
    "rdma_completion_error": "an RDMA completion error in the job",
    "lowprec_kernel": "an NVFP4/MXFP4/FP8 kernel path named in the job",
}

#: how many of a gotcha's weak signs the "unknown" line names
WEAK_NAMED = 3


def _count(text: str) -> int | None:
    """``0``, ``1,417``, ``zero`` or ``no`` as a number of blocks."""
    word = text.strip().lower()
    if word in ("zero", "no", "none"):
        return 0
    digits = word.replace(",", "")
    return int(digits) if digits.isdigit() else None


#: the host in NCCL's line prefix (``spark-fb97:23491:23520 [0] NCCL INFO …``), read from the kept
#: ``nranks`` lines only (matching it in the table would run on every candidate line)
NCCL_HOST = re.compile(r"^\s*(?:\S+\s+)?([A-Za-z][\w.-]*):\d+:\d+ \[\d+\] NCCL ")


def log_facts(scan: FileScan, table: Table) -> dict[str, list[str]]:
    """What one log states about its machine and job: the named groups of its context lines
    (``kernel_release``, ``free_32mib_blocks``, ``nranks``, ``host`` …), each value as read, in order."""
    facts: dict[str, list[str]] = {}
    for hit in scan.context:
        m = table.by_id(hit.sig).pattern.search(hit.text)
        found = dict(m.groupdict()) if m else {}
        if found.get("nranks") and (host := NCCL_HOST.match(hit.text)):
            found["host"] = host.group(1)
        for key, value in found.items():
            if value is not None and value not in facts.setdefault(key, []):
                facts[key].append(value)
    return facts


def fact_gates(facts: Mapping[str, list[str]]) -> dict[str, bool | None]:
    """The gates and context a log's facts decide; ``None`` where it says nothing. Any stated zero
    free 32 MiB blocks, any kernel 7.0.0-1019: a post that compares two states names the failing one."""
    gates: dict[str, bool | None] = {}
    if kernels := facts.get("kernel_release"):
        gates["kernel_7_0_0_1019"] = any(k.startswith("7.0.0-1019") for k in kernels)
    blocks = [n for n in map(_count, facts.get("free_32mib_blocks", [])) if n is not None]
    if blocks:
        gates["high_order_blocks_empty"] = any(n == 0 for n in blocks)
    total, free = [_count(v) for v in facts.get("cma_total", [])[:1]], [_count(v) for v in facts.get("cma_free", [])[:1]]
    if total and free and total[0] is not None and free[0] is not None:
        gates["cma_free_over_total"] = free[0] > total[0]
    ranks = [int(n) for n in facts.get("nranks", []) if n.isdigit()]
    nodes = [int(n) for n in facts.get("nodes", []) if n.isdigit()]
    if any(n > 1 for n in ranks + nodes) or len(set(facts.get("host", []))) > 1:
        gates["multi_node"], gates["single_node"] = True, False
    elif ranks or nodes:
        gates["multi_node"], gates["single_node"] = False, True
    for name in ("watchdog_timeout", "rdma_completion_error", "lowprec_kernel"):
        if facts.get(name):
            gates[name] = True
    return gates


@dataclass
class Evidence:
    """One hit as weighed: its signature, the check it points at, its weight and why."""

    hit: Hit
    sig: Signature
    gotcha: str
    weight: str
    gated_by: list[str] = field(default_factory=list)
    fix: str = ""


def weigh(hit: Hit, sig: Signature, gates: Mapping[str, bool | None]) -> Evidence | None:
    """A hit's check and weight once its context is read: ``None`` when context it requires is not
    known to hold or context that cancels it does; a gate that holds raises it to ``gated_weight``."""
    if any(gates.get(c) for c in sig.cancelled_by) or not all(gates.get(c) for c in sig.requires):
        return None
    context = list(sig.requires)
    held = [g for g in sig.gate if gates.get(g)]
    # no gate held: the check and fix the line has alone (an Xid 13 is G4 unless the job names NVFP4)
    gotcha = sig.ungated_gotcha if sig.gate and not held and sig.ungated_gotcha else sig.gotcha
    fix = sig.ungated_fix if sig.gate and not held and sig.ungated_fix else sig.fix
    if sig.same_second and hit.ts is not None and (sig.same_second, hit.ts[0], hit.ts[1].split('.')[0]) in gates:
        return Evidence(hit, sig, gotcha or "", "strong", [*context, *held, f"same_second:{sig.same_second}"], fix)
    if held and sig.gated_weight:
        return Evidence(hit, sig, gotcha or "", sig.gated_weight, [*context, *held], fix)
    return Evidence(hit, sig, gotcha or "", sig.weight, [*context, *held], fix)


@dataclass
class Diagnosis:
    """The decision over all logs: per check its best evidence, the cause, and what was read."""

    files: list[FileScan]
    per_check: dict[str, list[Evidence]]
    cause: Evidence | None
    secondary: list[str]
    errors: list[str]
    #: the first medium or weak sign of each check, in the order the logs give them
    weak: list[Evidence] = field(default_factory=list)
    #: the first line that looks like an error (traceback, Error, FATAL, Xid, Killed), known or not
    first_error: Hit | None = None
    #: what each log stated about its machine and job (:func:`log_facts`)
    facts: list[dict[str, list[str]]] = field(default_factory=list)

    def line(self) -> str:
        """``diagnosis: G1 (first failure at train.log:1834)`` or ``diagnosis: unknown; weak signs: G3 at
        train.log:8 — …``."""
        if self.cause is not None:
            return f"diagnosis: {self.cause.gotcha} (first failure at {self.cause.hit.where})"
        n, lines = len(self.files), sum(f.lines for f in self.files)
        signs = ", ".join(f"{e.gotcha} at {e.hit.where}" for e in self.weak[:WEAK_NAMED])
        weak = f"; weak signs: {signs}" if signs else ""
        return f"diagnosis: unknown{weak} — no known failure in {lines:,} lines ({n} file{'s' if n != 1 else ''})"

    def hints(self) -> list[str]:
        """Where to look next when nothing is named: the first error-looking line and a capture."""
        if self.cause is not None:
            return []
        capture = "for an issue report attach spark-preflight --capture spark.json.gz (what each check saw, redacted)"
        if self.first_error is None:
            return [f"next: {capture}"]
        return [f"first error-looking line: {self.first_error.quoted()}",
                f"next: read the lines before {self.first_error.where}; {capture}"]

    def to_dict(self) -> dict[str, Any]:
        c = self.cause
        return {
            "gotcha": c and c.gotcha, "line": self.line(), "at": c and c.hit.where, "quote": c and c.hit.text,
            "signature": c and c.sig.id, "code": c and codes.log_code(c.gotcha, True),
            "fix": c and c.fix, "secondary": list(self.secondary),
            "weak_signs": [{"gotcha": e.gotcha, "at": e.hit.where, "signature": e.sig.id} for e in self.weak],
            "first_error": self.first_error and self.first_error.where, "hints": self.hints(),
            "files": [{"name": f.name, "path": visible(f.path), "lines": f.lines, "kernel_log": f.kernel,
                       "error": f.error, "notes": list(f.notes),
                       "facts": self.facts[i] if i < len(self.facts) else {}}
                      for i, f in enumerate(self.files)],
            "errors": list(self.errors),
        }  # fmt: skip


def _first_failing(strong: dict[int, Evidence]) -> int:
    """The file whose first strong line came first: by timestamp when all have one of one kind, else by order."""
    stamps = {i: e.hit.ts for i, e in strong.items() if e.hit.ts is not None}
    if len(stamps) == len(strong) and len({ts[0] for ts in stamps.values()}) == 1:
        return min(stamps, key=lambda i: (stamps[i][1], i))
    return min(strong)


def _gates(files: Sequence[FileScan], facts: MachineFacts | None,
           stated: Sequence[Mapping[str, list[str]]]) -> list[dict[Any, bool | None]]:  # fmt: skip
    """Per log, the gates and context a sign needs: the log's own facts, else the job's other logs',
    else the machine's; and the logs' context lines keyed by second."""
    known: Mapping[str, Any] = facts or {}
    machine: dict[Any, bool | None] = {g: known.get(g) for g in GATES}
    machine.update({c: None for c in CONTEXTS if c not in machine})
    kernel = known.get("kernel_release")
    machine["kernel_7_0_0_1019"] = kernel.startswith("7.0.0-1019") if kernel else None
    for scan in files:  # context lines by second: an Xid at the second a service stopped "cleanly"
        machine.update({(h.sig, h.ts[0], h.ts[1].split(".")[0]): True for h in scan.context if h.ts is not None})
    own = [fact_gates(f) for f in stated]
    job: dict[str, bool | None] = {}
    for gates in own:  # the job's: any log that says more than one node, a 7.0.0-1019 kernel, … holds for all
        job.update({k: v for k, v in gates.items() if v or k not in job})
    return [{**machine, **{k: v for k, v in job.items() if v is not None}, **gates} for gates in own]


def _weigh_files(files: Sequence[FileScan], table: Table, gates: Sequence[Mapping[Any, bool | None]]
                 ) -> tuple[dict[str, list[Evidence]], dict[int, Evidence]]:  # fmt: skip
    """Every hit that counts weighed, by check (strongest first), and each file's first strong one."""
    per_check: dict[str, list[Evidence]] = {cid: [] for cid in catalog.IDS}
    first_strong: dict[int, Evidence] = {}
    for i, scan in enumerate(files):
        for hit in scan.hits:
            ev = weigh(hit, table.by_id(hit.sig), gates[i])
            if ev is None:
                continue
            per_check[ev.gotcha].append(ev)
            if ev.weight == "strong" and i not in first_strong:
                first_strong[i] = ev
    for evs in per_check.values():
        evs.sort(key=lambda e: RANK[e.weight])  # stable: within a weight, file then line order
    return per_check, first_strong


def _first_error(files: Sequence[FileScan], table: Table) -> Hit | None:
    """The first line of the first log that looks like an error (an ``error_line`` context entry)."""
    for scan in files:
        for hit in scan.context:
            if "error_line" in table.by_id(hit.sig).pattern.groupindex:
                return hit
    return None


def _secondary(files: Sequence[FileScan], table: Table, first_strong: dict[int, Evidence],
               cause: Evidence) -> list[str]:  # fmt: skip
    """What came after the cause: the other files' strong lines and the follow-on NCCL errors."""
    secondary: list[str] = []
    for _, ev in sorted(first_strong.items()):
        if ev is not cause:
            secondary.append(f"{ev.hit.where} ({ev.gotcha}, {ev.sig.id}) came after the first failure: secondary")
    for scan in files:
        n = sum(v for k, v in scan.counts.items() if table.by_id(k).kind == "secondary")
        if n:
            secondary.append(f"{n:,} NCCL error line(s) in {scan.name} (first at {scan.secondary[0].where}): "
                             "follow-on errors of the failure, secondary")  # fmt: skip
    return secondary


def decide(files: Sequence[FileScan], table: Table, facts: MachineFacts | None = None) -> Diagnosis:
    """The diagnosis of one job's logs (pure: reads only its arguments)."""
    stated = [log_facts(scan, table) for scan in files]
    per_check, first_strong = _weigh_files(files, table, _gates(files, facts, stated))
    cause = first_strong[_first_failing(first_strong)] if first_strong else None
    secondary = _secondary(files, table, first_strong, cause) if cause is not None else []
    errors = [f.error for f in files if f.error]
    order = {scan.name: i for i, scan in enumerate(files)}

    def where(e: Evidence) -> tuple[int, int]:
        return order.get(e.hit.file, 0), e.hit.line

    weak = sorted((min(evs, key=where) for evs in per_check.values() if evs and evs[0].weight != "strong"), key=where)
    return Diagnosis(list(files), per_check, cause, secondary, errors, weak, _first_error(files, table), stated)


def ignored(files: Sequence[FileScan], table: Table) -> list[str]:
    """The healthy lines that were read and set aside (``-v``): a whitelist that says what it hid."""
    out = []
    for scan in files:
        for sid, n in scan.counts.items():
            sig = table.by_id(sid)
            if sig.kind == "healthy":
                first = next(h for h in scan.healthy if h.sig == sid)
                out.append(f"ignored {n:,} healthy line(s) {sid} in {scan.name} (first at {first.line}): {sig.means}")
    return out


def _first_clause(fix: str) -> str:
    """The fix in a few words for the default line (up to its first parenthesis, semicolon or "or")."""
    for sep in (" (", "; ", ", or ", " or "):
        at = fix.find(sep)
        if at > 20:
            fix = fix[:at]
    return fix


def _log_result(cid: str, evs: list[Evidence], diag: Diagnosis) -> Result:
    """One check's outcome from its best log evidence."""
    best = evs[0]
    sig, hit = best.sig, best.hit
    row = f" ({sig.row})" if sig.row else ""
    quoted = [f"{e.weight}: {e.hit.quoted()} [{e.sig.id}{', gated by ' + ', '.join(e.gated_by) if e.gated_by else ''}]"
              for e in evs]  # fmt: skip
    details = [*shortened(quoted, 5), f"source: {sig.source}"]
    if best.weight == "strong":
        why = " — the first failure" if diag.cause is best else (" — after the first failure" if diag.cause else "")
        gated = f" (with {', '.join(GATE_WORDS.get(g, g) for g in best.gated_by)})" if best.gated_by else ""
        summary = f"{hit.quoted()} — {sig.means}{gated}{row}{why}"
        return Result(cid, Status.FAIL, summary, fix=best.fix, details=details, short_fix=_first_clause(best.fix),
                      headline=hit.quoted(), codes=[codes.log_code(cid, True)])
    confirm = " or ".join(GATE_WORDS.get(g, g) for g in sig.gate)
    # the table's "means" may already say what would confirm it: the clause is said once
    tail = f"; {confirm} would confirm it" if confirm and "would confirm" not in sig.means else ""
    summary = f"{hit.quoted()} — {best.weight} sign: {sig.means}{row}{tail}"
    return Result(cid, Status.WARN, summary, fix=best.fix, details=details, short_fix=_first_clause(best.fix),
                  headline=f"{hit.quoted()} — {best.weight} sign", codes=[codes.log_code(cid, False)])


def results(diag: Diagnosis, table: Table, live: Mapping[str, Result] | None = None) -> list[Result]:
    """The ten lines: each check's log evidence, with this machine's live result beside it when given."""
    out = []
    for cid in catalog.IDS:
        evs = diag.per_check[cid]
        now = (live or {}).get(cid)
        if evs:
            r = _log_result(cid, evs, diag)
            if now is not None and now.status in (Status.FAIL, Status.WARN):
                r.summary += f"; this machine confirms it now ({now.status.value}: {now.headline or now.summary})"
                r.codes = list(dict.fromkeys([*r.codes, *now.codes]))
            elif now is not None:
                r.details.append(f"this machine now: {now.status.value}: {now.summary}")
        elif now is not None:
            r = Result(cid, now.status, f"the logs show no sign of {cid}; this machine now: {now.summary}",
                       fix=now.fix, readings=list(now.readings), details=list(now.details),
                       headline=now.headline or now.summary, short_fix=now.short_fix,
                       by_choice=now.by_choice, codes=list(now.codes))  # fmt: skip
        else:
            r = Result(cid, Status.INFO, f"the logs show no sign of {cid} ({catalog.BY_ID[cid].title})")
        r.readings.append(Reading("log_evidence", len(evs)))
        out.append(r)
    return out


def _value(live: Mapping[str, Result], check: str, name: str) -> Any:
    """A reading's value from today's results; None when the check or the reading is absent."""
    result = live.get(check)
    found = result.reading(name) if result is not None else None
    return None if found is None else found.value


def _cuda(text: Any) -> tuple[int, ...] | None:
    try:
        return tuple(int(p) for p in str(text).split(".")[:2])
    except ValueError:
        return None


def machine_facts(host: Mapping[str, Any], live: Mapping[str, Result]) -> MachineFacts:
    """The facts the gates read, from the run's identity and today's check readings (G1's
    kernel and CMA, G3's free 32 MiB blocks, G9's image and driver CUDA, G6's other processes)."""
    other = _value(live, "G6", "other_gpu_processes")
    kernel = _value(live, "G1", "kernel_release") or host.get("kernel")
    cma_total, cma_free = _value(live, "G1", "cma_total"), _value(live, "G1", "cma_free")
    blocks = _value(live, "G3", "normal_free_blocks")
    image, driver = _cuda(_value(live, "G9", "image_cuda")), _cuda(_value(live, "G9", "host_driver_cuda"))
    return MachineFacts(
        kernel_release=str(kernel) if kernel else None,
        cma_free_over_total=cma_free > cma_total if isinstance(cma_total, int) and isinstance(cma_free, int) else None,
        high_order_blocks_empty=blocks == 0 if isinstance(blocks, (int, float)) else None,
        image_cuda_newer_than_driver=image > driver if image and driver else None,
        other_gpu_process=None if other is None else bool(other),
    )


def diagnose_run(scans: list[FileScan], table: Table, live: Mapping[str, Result],
                 host: Mapping[str, Any]) -> tuple[list[Result], Diagnosis]:  # fmt: skip
    """The ten results and the diagnosis, from the logs and (when given) the machine's live results."""
    diag = decide(scans, table, machine_facts(host, live))
    return results(diag, table, live or None), diag
