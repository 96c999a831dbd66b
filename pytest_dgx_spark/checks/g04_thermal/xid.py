"""G4's Xid findings (issue 22, N7): the kernel log's Xid events since boot, counted per class;
GSP/hardware faults FAIL, application and other Xids WARN. ``--spark-xid-class`` moves a code."""

from __future__ import annotations

from collections.abc import Mapping

from pytest_dgx_spark.checks.g04_thermal.facts import Facts, XidLine
from pytest_dgx_spark.checks.g04_thermal.findings import XID_APP_FIX, XID_FIXES, XID_OTHER_FIX
from pytest_dgx_spark.checks.kit import Findings, Params
from pytest_dgx_spark.model import Reading

#: Xid classes (awdemos/spark-doctor's ``gpu.xid_error`` rule: {48,61,62,63,64,74,79,92,94,95,
#: 119,120} critical "hardware", the rest "application"; 154 and 169 from NVIDIA's Xid catalogue
#: and tests/data/gb10/dmesg_xid_1.txt, dmesg_xid_5.txt: "GPU reset required", proprietary modules on GB10)
XID_APPLICATION = frozenset({13, 31, 43, 45})
XID_HARDWARE = frozenset({48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 154, 169})
XID_SHOWN = 10  # the Xid lines ``-v`` lists
CLASSES = ("hardware", "application", "other", "ignore")


def xid_class(code: int, chosen: Mapping[str, str] | None = None) -> str:
    """hardware (FAIL), application, other (WARN) or ignore; ``--spark-xid-class`` (``chosen``) first."""
    given = (chosen or {}).get(str(code))
    if given:
        return given
    return "hardware" if code in XID_HARDWARE else "application" if code in XID_APPLICATION else "other"


def _counts(facts: Facts, chosen: Mapping[str, str]) -> dict[str, dict[int, int]]:
    """Each class's Xid codes and how often each was logged."""
    counts: dict[str, dict[int, int]] = {k: {} for k in CLASSES}
    for code_text, n in facts.xid_counts.items():
        code = int(code_text) if str(code_text).isdigit() else -1
        counts[xid_class(code, chosen)][code] = n
    return counts


def _listed(facts: Facts, counts: Mapping[str, Mapping[int, int]], total: int, out: Findings) -> None:
    """-v: where the log came from, the count per class, the latest lines."""
    cut = f"; {facts.kernel_log_cut}" if facts.kernel_log_cut else ""
    where = f"kernel log ({facts.kernel_log_source}, {facts.kernel_log_records} records since boot{cut})"
    if not total:
        out.note(f"{where}: no Xid")
        return
    per = ", ".join(f"{k} {sum(c.values())}" for k, c in counts.items() if c)
    out.note(f"{where}: {total} Xid events ({per}); latest first:")
    out.note(*(x.line() for x in facts.xids[:XID_SHOWN]))
    if total > XID_SHOWN:
        out.note(f"and {total - XID_SHOWN} earlier Xid events")


def xid_stage(facts: Facts, params: Params, out: Findings) -> list[Reading]:
    """N7: Xid events since boot, latest first, counted per class; GSP/hardware FAIL, the rest WARN."""
    if facts.kernel_log_source is None:
        if facts.kernel_log_problem:
            out.note(f"Xid events since boot not read: {facts.kernel_log_problem}")
        return [Reading("kernel_log_source", "none")]
    chosen = params.option("xid_class")
    counts = _counts(facts, chosen)
    total = sum(sum(c.values()) for c in counts.values())
    _listed(facts, counts, total, out)
    for klass in ("hardware", "application", "other"):
        if counts[klass]:
            _xid_finding(klass, counts[klass], facts, chosen, out)
    return [Reading("kernel_log_source", facts.kernel_log_source), Reading("xid_events", total),
            *(Reading(f"xid_{k}", sum(c.values())) for k, c in counts.items()),
            Reading("xid_latest", facts.xids[0].line() if facts.xids else None)]


def _xid_finding(klass: str, codes: Mapping[int, int], facts: Facts, chosen: Mapping[str, str],
                 out: Findings) -> None:
    latest = next((x for x in facts.xids if xid_class(x.code or -1, chosen) == klass), None)
    named = ", ".join(f"Xid {c} x{n}" for c, n in sorted(codes.items(), key=lambda p: -p[1]))
    tail = f"; latest: {latest.line()}" if latest else ""
    first = latest.code if latest and latest.code is not None else next(iter(codes))
    if klass == "hardware":
        _hardware(codes, f"{named}{tail}", first, out)
    elif klass == "application":
        _application(latest, f"{named}{tail}", first, out)
    else:
        out.warn(f"Xid events in the kernel log since boot: {named}{tail}", XID_OTHER_FIX,
                 f"Xid {first} since boot", "look up the Xid in NVIDIA's catalogue", code="G4.xid-other")


def _hardware(codes: Mapping[int, int], seen: str, first: int, out: Findings) -> None:
    """GSP/hardware faults: FAIL, with the fix of the first :data:`XID_FIXES` row that matches."""
    _, fix, short = next(f for f in XID_FIXES if f[0] is None or f[0] & set(codes))
    kind = "GSP" if set(codes) & {119, 120} else "hardware/GSP"
    out.fail(f"GPU faults in the kernel log since boot ({kind}): {seen}", fix,
             f"Xid {first} since boot ({kind} fault)", short, code="G4.xid-hardware")


def _application(latest: XidLine | None, seen: str, first: int, out: Findings) -> None:
    """A GPU kernel faulted: WARN, naming the process when the line does."""
    who = "the process not named in the line"
    if latest and (latest.pid is not None or latest.name):
        who = f"pid {latest.pid} {latest.name or ''}".strip()
    out.warn(f"a GPU kernel faulted since boot ({who}): {seen}", XID_APP_FIX,
             f"Xid {first} since boot ({who})", "update/patch the faulting kernel path",
             code="G4.xid-application")
