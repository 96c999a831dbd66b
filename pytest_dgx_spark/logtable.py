"""The failure-log signature table (data: ``data/signatures.json``; a user file, ``--signatures``,
adds to it and is tried first): its entries read and checked field by field, so a user file's
mistakes are named in one line, never a traceback; and the names a gate or context may use.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from pytest_dgx_spark import catalog
from pytest_dgx_spark.datadef import define
from pytest_dgx_spark.logengine import TableError, UserPattern
from pytest_dgx_spark.safe_text import visible

MAX_TABLE_BYTES = 1 << 20  # a signature file bigger than this is no signature file
WEIGHTS = ("strong", "medium", "weak")
GOTCHAS = catalog.IDS
#: how an error names the gotchas
GOTCHA_RANGE = f"{GOTCHAS[0]}..{GOTCHAS[-1]}"
#: facts a gate may name (:class:`pytest_dgx_spark.diagnose.MachineFacts` keys, true when they hold)
GATES = ("kernel_7_0_0_1019", "cma_free_over_total", "high_order_blocks_empty", "image_cuda_newer_than_driver",
         "other_gpu_process")  # fmt: skip
#: what a context entry's named groups may read from a log (:func:`pytest_dgx_spark.diagnose.log_facts`)
LOG_FACTS = ("kernel_release", "driver", "cuda", "gpu", "free_32mib_blocks", "cma_total", "cma_free", "nranks",
             "nodes", "host", "watchdog_timeout", "rdma_completion_error", "lowprec_kernel", "error_line")  # fmt: skip
#: the context a signature may require or be cancelled by (``requires``, ``cancelled_by``), or be gated on:
#: a job of more than one node, of one node, a watchdog timeout, an RDMA completion error or an NVFP4/FP8
#: kernel path named in the job
CONTEXTS = (*GATES, "multi_node", "single_node", "watchdog_timeout", "rdma_completion_error", "lowprec_kernel")
#: what no line holds once :func:`clean` has read it (a literal with one would never match)
NOT_IN_A_LINE = re.compile("[\x00-\x1f\x7f-\x9f]")


@define(frozen=True)
class Signature:
    """One known failure line: what it means for which check, how much it says alone, the fix."""

    id: str
    pattern: re.Pattern[str] | UserPattern
    gotcha: str | None  # None: a healthy (whitelisted) or secondary line
    weight: str = "weak"
    means: str = ""
    fix: str = ""
    source: str = ""
    row: str | None = None
    literals: tuple[str, ...] = ()
    gate: tuple[str, ...] = ()
    gated_weight: str | None = None
    ungated_gotcha: str | None = None
    #: a context entry's id: a line of it at the same second makes this one strong (an Xid and a "clean" stop)
    same_second: str | None = None
    kind: str = "signature"  # signature | healthy | secondary | context
    #: context the hit needs from its own log (else the job's, else the machine's) to count at all,
    #: and context that cancels it (``NET/IB : No device found`` counts only in a multi-node job)
    requires: tuple[str, ...] = ()
    cancelled_by: tuple[str, ...] = ()
    #: the fix when no gate holds (S31: the memlock limit, not the kernel)
    ungated_fix: str | None = None


@define
class Table:
    """The signatures, the healthy lines and the secondary (follow-on) lines, in order."""

    signatures: list[Signature]

    def by_id(self, sid: str) -> Signature:
        return next(s for s in self.signatures if s.id == sid)


def _text(entry: dict[str, Any], key: str, where: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value.strip():
        raise TableError(f"{where}: '{key}' must be a non-empty string")
    return value


def _optional(entry: dict[str, Any], key: str, where: str, among: Sequence[str] = ()) -> str | None:
    """An optional field: absent (or null), else a string (one of ``among`` when given); a wrong
    type here was a KeyError or TypeError at the first hit that read it."""
    value = entry.get(key)
    if value is None:
        return None
    if among and value not in among:
        names = f"one of {GOTCHA_RANGE}" if among == GOTCHAS else ", ".join(among[:-1]) + " or " + among[-1]
        raise TableError(f"{where}: '{key}' must be {names}, got {value!r}")
    if not isinstance(value, str):
        raise TableError(f"{where}: '{key}' must be a string, got {type(value).__name__}")
    return value


def _gotcha_weight(entry: dict[str, Any], kind: str, where: str) -> tuple[str | None, str]:
    """A signature's gotcha and weight, checked (with its fix); other kinds have none and weigh weak."""
    if kind != "signature":
        return None, "weak"
    gotcha = entry.get("gotcha")
    weight = str(entry.get("weight", "weak"))
    if gotcha not in GOTCHAS:
        raise TableError(f"{where}: 'gotcha' must be one of {GOTCHA_RANGE}, got {gotcha!r}")
    if weight not in WEIGHTS:
        raise TableError(f"{where}: 'weight' must be strong, medium or weak, got {weight!r}")
    _text(entry, "fix", where)
    return gotcha, weight


def _pattern(entry: dict[str, Any], where: str, user: bool) -> re.Pattern[str] | UserPattern:
    """The entry's pattern, compiled by ``re`` (its syntax checked); a ``user`` entry's is a
    :class:`UserPattern` (bounded time)."""
    try:
        compiled = re.compile(_text(entry, "pattern", where))
    except (re.error, RecursionError, OverflowError) as exc:
        raise TableError(f"{where}: pattern is not a regular expression ({exc})") from None
    return UserPattern(compiled, where) if user else compiled


def _literals(entry: dict[str, Any], where: str) -> tuple[str, ...]:
    """``literal``: one string or a list of them, each non-empty and free of what no line holds."""
    literals = entry.get("literal") or []
    literals = [literals] if isinstance(literals, str) else literals
    if not isinstance(literals, list) or not all(isinstance(x, str) and x and not NOT_IN_A_LINE.search(x)
                                                 for x in literals):  # fmt: skip
        raise TableError(f"{where}: 'literal' must be a string or a list of non-empty strings, "
                         "without control characters (a line never holds them)")  # fmt: skip
    return tuple(literals)


def _names(entry: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    """``gate``, ``requires`` or ``cancelled_by``: a list of names among :data:`CONTEXTS`."""
    names = entry.get(key) or []
    if not isinstance(names, list) or any(n not in CONTEXTS for n in names):
        what = "facts" if key == "gate" else "context"
        raise TableError(f"{where}: '{key}' must list {what} among {', '.join(CONTEXTS)}")
    return tuple(names)


def _signature(entry: Any, kind: str, where: str, user: bool = False) -> Signature:
    """One entry of the table, checked field by field: a user file's mistakes are named, never a
    traceback. A ``user`` entry's pattern is a :class:`UserPattern` (bounded time)."""
    if not isinstance(entry, dict):
        raise TableError(f"{where}: expected an object, got {type(entry).__name__}")
    sid = _text(entry, "id", where)
    where = f"{where} ({sid})"
    pattern = _pattern(entry, where, user)
    for key in ("means", "why", "fix", "source", "row", "same_second"):
        _optional(entry, key, where)
    _optional(entry, "gated_weight", where, WEIGHTS)
    _optional(entry, "ungated_gotcha", where, GOTCHAS)
    literals = _literals(entry, where)
    gotcha, weight = _gotcha_weight(entry, kind, where)
    gate, requires, cancelled_by = (_names(entry, key, where) for key in ("gate", "requires", "cancelled_by"))
    if kind == "context" and not set(pattern.groupindex) <= set(LOG_FACTS):
        raise TableError(f"{where}: a context pattern's named groups must be among {', '.join(LOG_FACTS)}")
    if entry.get("ungated_fix") is not None and not isinstance(entry["ungated_fix"], str):
        raise TableError(f"{where}: 'ungated_fix' must be a string")
    return Signature(
        id=sid, pattern=pattern, gotcha=gotcha, weight=weight, means=str(entry.get("means") or entry.get("why") or ""),
        fix=str(entry.get("fix") or ""), source=str(entry.get("source") or ""), row=entry.get("row"),
        literals=literals, gate=gate, gated_weight=entry.get("gated_weight"),
        ungated_gotcha=entry.get("ungated_gotcha"), same_second=entry.get("same_second"), kind=kind,
        requires=requires, cancelled_by=cancelled_by, ungated_fix=entry.get("ungated_fix"),
    )  # fmt: skip


def parse_table(doc: Any, where: str, user: bool = False) -> list[Signature]:
    """The entries of one signature document (``signatures``, ``healthy``, ``secondary`` lists)."""
    if not isinstance(doc, dict):
        raise TableError(f"{where}: expected a JSON object with a 'signatures' list")
    out: list[Signature] = []
    for key, kind in (("signatures", "signature"), ("healthy", "healthy"), ("secondary", "secondary"),
                      ("context", "context")):  # fmt: skip
        entries = doc.get(key, [])
        if not isinstance(entries, list):
            raise TableError(f"{where}: '{key}' must be a list")
        out += [_signature(e, kind, f"{where}: {key}[{i}]", user) for i, e in enumerate(entries)]
    if not out:
        raise TableError(f"{where}: no signatures (expected 'signatures', 'healthy' or 'secondary' lists)")
    return out


def builtin_table() -> list[Signature]:
    """The package's own table."""
    text = resources.files("pytest_dgx_spark").joinpath("data").joinpath("signatures.json").read_text(encoding="utf-8")
    return parse_table(json.loads(text), "signatures.json")


def load_table(extra: Path | None = None) -> Table:
    """The built-in signatures, then a user file's (``--signatures PATH``), which are tried first."""
    table = builtin_table()
    if extra is None:
        return Table(table)
    try:
        with open(extra, "rb") as fh:
            data = fh.read(MAX_TABLE_BYTES + 1)
    except OSError as exc:
        raise TableError(f"cannot read signature file {visible(str(extra))}: {exc.strerror or exc}") from None
    if len(data) > MAX_TABLE_BYTES:
        raise TableError(f"signature file {visible(str(extra))}: larger than {MAX_TABLE_BYTES >> 20} MiB")
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise TableError(f"signature file {visible(str(extra))}: not JSON ({exc})") from None
    except RecursionError:  # 200,000 nested brackets: json's recursion, not ours to crash on
        raise TableError(f"signature file {visible(str(extra))}: not JSON (nested too deeply)") from None
    return Table(parse_table(doc, f"signature file {visible(extra.name)}", user=True) + table)
