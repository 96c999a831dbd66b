"""Diagnose: a failed run's logs name the gotcha that killed it (issue 23), decided purely from
:mod:`pytest_dgx_spark.logscan`'s hits and a few facts of the machine (:class:`MachineFacts`,
:mod:`.diagnose_facts`).

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

from collections.abc import Mapping, Sequence
from dataclasses import field
from typing import Any

from pytest_dgx_spark import catalog, codes
from pytest_dgx_spark.datadef import define
from pytest_dgx_spark.diagnose_facts import (
    MachineFacts,
    fact_gates,
    gates_per_log,
    log_facts,
    machine_facts,
    second,
)
from pytest_dgx_spark.logread import FileScan, Hit
from pytest_dgx_spark.logtable import Signature, Table
from pytest_dgx_spark.model import Reading, Result, Status
from pytest_dgx_spark.safe_text import shortened, visible

__all__ = [
    "Diagnosis", "Evidence", "MachineFacts", "decide", "diagnose_run", "fact_gates", "ignored", "log_facts",
    "machine_facts", "results", "weigh",
]  # fmt: skip

RANK = {"strong": 0, "medium": 1, "weak": 2}


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


@define
class Evidence:
    """One hit as weighed: its signature, the check it points at, its weight and why."""

    hit: Hit
    sig: Signature
    gotcha: str
    weight: str
    gated_by: list[str] = field(default_factory=list)
    fix: str = ""


def weigh(hit: Hit, sig: Signature, gates: Mapping[Any, bool | None]) -> Evidence | None:
    """A hit's check and weight once its context is read: ``None`` when context it requires is not
    known to hold or context that cancels it does; a gate that holds raises it to ``gated_weight``."""
    if any(gates.get(c) for c in sig.cancelled_by) or not all(gates.get(c) for c in sig.requires):
        return None
    held = [g for g in sig.gate if gates.get(g)]
    gotcha, fix = _check_and_fix(sig, held)
    by = [*sig.requires, *held]
    if sig.same_second and hit.ts is not None and second(sig.same_second, hit.ts) in gates:
        return Evidence(hit, sig, gotcha, "strong", [*by, f"same_second:{sig.same_second}"], fix)
    return Evidence(hit, sig, gotcha, sig.gated_weight if held and sig.gated_weight else sig.weight, by, fix)


def _check_and_fix(sig: Signature, held: Sequence[str]) -> tuple[str, str]:
    """The check and fix a line points at; with gates and none held, those it has alone (an Xid 13 is
    G4 unless the job names NVFP4)."""
    if sig.gate and not held:
        return sig.ungated_gotcha or sig.gotcha or "", sig.ungated_fix or sig.fix
    return sig.gotcha or "", sig.fix


@define
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
    per_check, first_strong = _weigh_files(files, table, gates_per_log(files, facts, stated))
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
    """A line per check: each check's log evidence, with this machine's live result beside it when given."""
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


def diagnose_run(scans: list[FileScan], table: Table, live: Mapping[str, Result],
                 host: Mapping[str, Any]) -> tuple[list[Result], Diagnosis]:  # fmt: skip
    """A result per check and the diagnosis, from the logs and (when given) the machine's live results."""
    diag = decide(scans, table, machine_facts(host, live))
    return results(diag, table, live or None), diag
