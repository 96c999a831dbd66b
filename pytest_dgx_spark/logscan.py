"""Failure-log signatures (data: ``data/signatures.json``, a user file adds to them) and the
bounded reader that finds them (issue 23). Logs are untrusted: read in 1 MiB blocks (a 10 GB log
in flat memory), a line matched on its first 4 KiB, a silent pipe given up after ``idle_s``, a
regular file read up to its size when opened; quotes are stripped of escapes and redacted.
Speed: one alternation of the signatures' literal substrings finds candidate lines in whole
blocks (``grep -F``, else RE2, else Python's ``re``); only those are decoded and matched against
the full patterns. A user file's patterns (issue 30) run in linear time on RE2 (google-re2) when
it is installed and takes the pattern, else on Python's ``re`` with a time budget per line; each
is matched alone on each line, so its anchors, flags and groups mean what they say.
"""

from __future__ import annotations

import fcntl
import gzip
import json
import os
import re
import select
import signal
import stat
import sys
import threading
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from pytest_dgx_spark.options import BY_NAME, DEFAULT_GUNZIP_MIB
from pytest_dgx_spark.probes import commands
from pytest_dgx_spark.redact import Redactor, outgoing
from pytest_dgx_spark.safe_text import visible

try:  # google-re2: linear-time matching, and the fast prefilter where grep is not on PATH
    import re2
except ImportError:  # pragma: no cover - an install without it: Python's re, user patterns on a budget
    re2 = None

BLOCK = 1 << 20
#: a log ending in this many NUL bytes or more was cut off with its host (dgx-spark-playbooks #97, #116)
NUL_TAIL = 64
MAX_LINE = 4096  # a longer line is matched and quoted on its first MAX_LINE bytes
QUOTE_CHARS = 200  # quoted text of a hit, at most
IDLE_S = 10.0  # seconds a pipe, FIFO or stdin may stay silent before the reader gives up
KEEP_HITS = 20  # kept per signature per file (the rest are counted)
MAX_TABLE_BYTES = 1 << 20  # a signature file bigger than this is no signature file
#: seconds one user pattern may take on one line under Python's re (no RE2): a real pattern takes
#: microseconds, a catastrophic one (``(a+)+$``) years
PATTERN_BUDGET_S = 0.25
MIB = 1 << 20
#: decompressed bytes read of a .gz log unless ``--gunzip-max-mib`` says otherwise
GUNZIP_LIMIT = int(DEFAULT_GUNZIP_MIB * MIB)
#: the folder holding this package: the line filter's child imports it from there
PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)
WEIGHTS = ("strong", "medium", "weak")
GOTCHAS = tuple(f"G{n}" for n in range(1, 11))
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

ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
#: what no line holds once :func:`clean` has read it (a literal with one would never match)
NOT_IN_A_LINE = re.compile("[\x00-\x1f\x7f-\x9f]")
#: 2026-12-05T11:49:04.123 / 2026-12-05 11:49:04,123 (sortable), and vLLM's ``12-05 11:49:04``
ISO_TS = re.compile(r"(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d:\d\d(?:[.,]\d+)?)")
SHORT_TS = re.compile(r"\b(\d\d-\d\d) (\d\d:\d\d:\d\d)\b")
#: journalctl/syslog's ``Aug 28 11:55:08`` (no year: compared only with its own kind)
SYSLOG_TS = re.compile(r"\b(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +(\d{1,2}) (\d\d:\d\d:\d\d)\b")
MONTHS = {m: i for i, m in enumerate(["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"], 1)}


class TableError(Exception):
    """A signature file that cannot be used, said in one line."""


class LogError(Exception):
    """A log that cannot be read, said in one line."""


class PatternTimeout(TableError):
    """A user pattern that ran past its budget on one line (catastrophic backtracking)."""


class _Expired(Exception):
    """SIGALRM's word to the search it interrupts."""


def _linear(text: str) -> Any:
    """``text`` compiled by RE2 (linear time), or ``None``: RE2 absent, or a pattern it has no
    engine for (backreferences, lookaround), which then runs on Python's re with a budget."""
    if re2 is None:
        return None
    options = re2.Options()
    options.log_errors = False  # its refusal is ours to handle, not a line on stderr
    try:
        return re2.compile(text, options)
    except Exception:  # re2.error, or anything its wrapper raises for syntax it does not know
        return None


def _bounded(pattern: re.Pattern[str], text: str, budget: float) -> Any:
    """``pattern.search(text)`` stopped by SIGALRM after ``budget`` seconds (``_sre`` checks for
    signals as it backtracks). Off the main thread, or under another owner's interval timer, no
    alarm can be set: the search then runs as it is."""
    if threading.current_thread() is not threading.main_thread() or signal.getitimer(signal.ITIMER_REAL)[0]:
        return pattern.search(text)

    def expired(signum: int, frame: Any) -> None:
        raise _Expired

    old = signal.signal(signal.SIGALRM, expired)
    try:
        try:
            signal.setitimer(signal.ITIMER_REAL, budget)
            return pattern.search(text)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _Expired:
        raise PatternTimeout(f"pattern ran past {budget:g} s on one line") from None
    finally:
        signal.signal(signal.SIGALRM, old)


class UserPattern:
    """A user file's pattern: Python's syntax, checked by ``re``, matched by RE2 in linear time when
    RE2 takes it, else by ``re`` with :data:`PATTERN_BUDGET_S` per line. ``where`` names it in errors."""

    def __init__(self, compiled: re.Pattern[str], where: str) -> None:
        self.pattern, self.where, self._re = compiled.pattern, where, compiled
        self._linear = _linear(compiled.pattern)

    @property
    def groupindex(self) -> Mapping[str, int]:
        """The pattern's named groups (a context entry's facts), as ``re.Pattern.groupindex``."""
        return self._re.groupindex

    def search(self, text: str) -> Any:
        if self._linear is not None:
            return self._linear.search(text)
        try:
            return _bounded(self._re, text, PATTERN_BUDGET_S)
        except PatternTimeout as exc:
            raise PatternTimeout(f"{self.where}: {exc}") from None


@dataclass(frozen=True)
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


@dataclass
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
        names = "one of G1..G10" if among == GOTCHAS else ", ".join(among[:-1]) + " or " + among[-1]
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
        raise TableError(f"{where}: 'gotcha' must be one of G1..G10, got {gotcha!r}")
    if weight not in WEIGHTS:
        raise TableError(f"{where}: 'weight' must be strong, medium or weak, got {weight!r}")
    _text(entry, "fix", where)
    return gotcha, weight


def _signature(entry: Any, kind: str, where: str, user: bool = False) -> Signature:
    """One entry of the table, checked field by field: a user file's mistakes are named, never a
    traceback. A ``user`` entry's pattern is a :class:`UserPattern` (bounded time)."""
    if not isinstance(entry, dict):
        raise TableError(f"{where}: expected an object, got {type(entry).__name__}")
    sid = _text(entry, "id", where)
    where = f"{where} ({sid})"
    try:
        compiled = re.compile(_text(entry, "pattern", where))
    except (re.error, RecursionError, OverflowError) as exc:
        raise TableError(f"{where}: pattern is not a regular expression ({exc})") from None
    pattern: re.Pattern[str] | UserPattern = UserPattern(compiled, where) if user else compiled
    for key in ("means", "why", "fix", "source", "row", "same_second"):
        _optional(entry, key, where)
    _optional(entry, "gated_weight", where, WEIGHTS)
    _optional(entry, "ungated_gotcha", where, GOTCHAS)
    literals = entry.get("literal") or []  # one string or a list of them, each non-empty
    literals = [literals] if isinstance(literals, str) else literals
    if not isinstance(literals, list) or not all(isinstance(x, str) and x and not NOT_IN_A_LINE.search(x)
                                                 for x in literals):  # fmt: skip
        raise TableError(f"{where}: 'literal' must be a string or a list of non-empty strings, "
                         "without control characters (a line never holds them)")  # fmt: skip
    gotcha, weight = _gotcha_weight(entry, kind, where)
    gate = entry.get("gate") or []
    if not isinstance(gate, list) or any(g not in CONTEXTS for g in gate):
        raise TableError(f"{where}: 'gate' must list facts among {', '.join(CONTEXTS)}")
    context = {key: entry.get(key) or [] for key in ("requires", "cancelled_by")}
    for key, names in context.items():
        if not isinstance(names, list) or any(n not in CONTEXTS for n in names):
            raise TableError(f"{where}: '{key}' must list context among {', '.join(CONTEXTS)}")
    if kind == "context" and not set(pattern.groupindex) <= set(LOG_FACTS):
        raise TableError(f"{where}: a context pattern's named groups must be among {', '.join(LOG_FACTS)}")
    if entry.get("ungated_fix") is not None and not isinstance(entry["ungated_fix"], str):
        raise TableError(f"{where}: 'ungated_fix' must be a string")
    return Signature(
        id=sid, pattern=pattern, gotcha=gotcha, weight=weight, means=str(entry.get("means") or entry.get("why") or ""),
        fix=str(entry.get("fix") or ""), source=str(entry.get("source") or ""), row=entry.get("row"),
        literals=tuple(literals), gate=tuple(gate), gated_weight=entry.get("gated_weight"),
        ungated_gotcha=entry.get("ungated_gotcha"), same_second=entry.get("same_second"), kind=kind,
        requires=tuple(context["requires"]), cancelled_by=tuple(context["cancelled_by"]),
        ungated_fix=entry.get("ungated_fix"),
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


class _Source:
    """Raw bytes of a log with every read bounded: by the size a regular file had when opened, and
    by ``idle_s`` of silence on a pipe, FIFO or terminal. :class:`gzip.GzipFile` reads through it."""

    def __init__(self, name: str, idle_s: float, shown: str | None = None) -> None:
        self.idle_s, self.total = idle_s, 0
        self.name = visible(name) if shown is None else shown  # how errors name it: escaped
        self.notes: list[str] = []
        self.stdin = name == "-"
        if self.stdin:
            self.fd = sys.stdin.fileno() if sys.stdin is not None else -1
            if self.fd < 0:
                raise LogError("-: stdin is closed")
        else:
            try:
                self.fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
            except OSError as exc:
                raise LogError(f"{self.name}: cannot open ({exc.strerror or exc})") from None
        st = os.fstat(self.fd)
        if stat.S_ISDIR(st.st_mode):
            self.close()
            raise LogError(f"{self.name}: is a folder, not a log")
        self.regular = stat.S_ISREG(st.st_mode)
        self.left = st.st_size if self.regular else -1
        if self.regular:
            os.set_blocking(self.fd, True)

    def read(self, n: int = BLOCK) -> bytes:
        if self.regular:
            if self.left <= 0:
                return b""
            data = os.read(self.fd, min(n, self.left))
            self.left -= len(data)
            if not data and self.left > 0:
                self.notes.append("the file shrank while read")
                self.left = 0
            return data
        ready, _, _ = select.select([self.fd], [], [], self.idle_s)
        if not ready:
            if not self.total:
                raise LogError(f"{self.name}: no data in {self.idle_s:g} s (a pipe or FIFO nobody writes?)")
            self.notes.append(f"no data for {self.idle_s:g} s: stopped reading after {self.total:,} bytes")
            return b""
        try:
            data = os.read(self.fd, n)
        except BlockingIOError:  # a FIFO's writer not there yet: select said readable, nothing came
            data = b""
        self.total += len(data)
        return data

    def grew(self) -> bool:
        try:
            return self.regular and os.fstat(self.fd).st_size > os.lseek(self.fd, 0, os.SEEK_CUR)
        except OSError:
            return False

    def close(self) -> None:
        if not self.stdin:
            with suppress(OSError):
                os.close(self.fd)


def blocks(name: str, idle_s: float = IDLE_S, notes: list[str] | None = None, *, shown: str | None = None,
           limit: int | None = GUNZIP_LIMIT,
           on_limit: Callable[[int], None] | None = None) -> Iterator[bytes]:  # fmt: skip
    """The log's bytes in blocks of about 1 MiB (decompressed when the name ends in ``.gz``, up to
    ``limit`` bytes: a 2 MB gzip bomb expands to GiBs; ``on_limit(bytes)`` is told)."""
    src = _Source(name, idle_s, shown)
    limited = False  # stopped at the limit: the rest, not a file that grew, is unread
    try:
        if name.endswith(".gz"):
            gz = gzip.GzipFile(fileobj=src, mode="rb")  # type: ignore[call-overload]
            done = 0
            try:
                while chunk := gz.read(BLOCK):
                    if limit is not None and done + len(chunk) > limit:  # the last line may be cut
                        if on_limit is not None:
                            on_limit(limit)
                        if done < limit:
                            yield chunk[: limit - done]
                        limited = True
                        break
                    done += len(chunk)
                    yield chunk
            except (OSError, EOFError, zlib.error) as exc:
                raise LogError(f"{src.name}: not a readable gzip file ({exc})") from None
        else:
            while chunk := src.read(BLOCK):
                yield chunk
        if not limited and src.grew():
            src.notes.append("the log grew while read: read up to the size it had when opened")
    finally:
        if notes is not None:
            notes.extend(src.notes)
        src.close()


def binary_reason(head: bytes) -> str | None:
    """Why the first bytes of a log are no text (NULs, or mostly undecodable), else ``None``."""
    sample = head[:65536]
    # a text log whose tail is NULs is a file cut off with its host (a host lost mid-run), not a binary
    body = sample.rstrip(b"\0")
    if not body and sample:
        return f"not a text log (only NUL bytes in the first {len(sample)} bytes)"
    nul = body.count(0)
    if nul > len(body) // 100:
        return f"not a text log ({nul} NUL bytes in the first {len(sample)} bytes: binary?)"
    text = body.decode("utf-8", "replace")
    bad = text.count("\ufffd")
    if bad > len(text) // 10:
        return f"not a text log ({bad} undecodable bytes in the first {len(sample)}: binary or another encoding?)"
    return None


def clean(raw: bytes) -> str:
    """A log line as it is matched: UTF-8 (undecodable bytes replaced), terminal escapes and control
    characters stripped (it is redacted only when kept)."""
    text = raw[:MAX_LINE].decode("utf-8", "replace").rstrip("\r\n")
    if "\x1b" in text:
        text = ANSI.sub("", text)
    return CONTROL.sub("", text.replace("\t", " "))


def timestamp(text: str) -> tuple[str, str] | None:
    """``(kind, sortable)`` of the first timestamp in a line; only the same kinds compare."""
    if m := ISO_TS.search(text):
        return "iso", f"{m.group(1)} {m.group(2).replace(',', '.')}"
    if m := SHORT_TS.search(text):
        return "short", f"{m.group(1)} {m.group(2)}"
    if m := SYSLOG_TS.search(text):
        return "syslog", f"{MONTHS[m.group(1)]:02d}-{int(m.group(2)):02d} {m.group(3)}"
    return None


@dataclass
class Hit:
    """One line that matched a signature (or a healthy/secondary line)."""

    file: str
    line: int
    sig: str
    text: str
    ts: tuple[str, str] | None = None

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    def quoted(self) -> str:
        text = self.text if len(self.text) <= QUOTE_CHARS else self.text[: QUOTE_CHARS - 1] + "…"
        return f'{self.where}: "{text}"'


@dataclass
class FileScan:
    """What one log held: its line count, hits in order, what was ignored, and why reading stopped."""

    name: str
    path: str = ""
    kernel: bool = False
    lines: int = 0
    hits: list[Hit] = field(default_factory=list)
    healthy: list[Hit] = field(default_factory=list)
    secondary: list[Hit] = field(default_factory=list)
    context: list[Hit] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    #: decompressed bytes read when the .gz limit stopped the reading (0: read to the end)
    stopped_at: int = 0
    cut_lines: int = 0
    notes: list[str] = field(default_factory=list)
    error: str | None = None


class Matcher:
    """The table compiled once: the literal prefilter over whole blocks, then each entry's pattern."""

    def __init__(self, table: Table, gunzip_limit: int | None = GUNZIP_LIMIT,
                 limit_flag: str = BY_NAME["gunzip-max-mib"].cli_flag) -> None:  # fmt: skip
        self.table, self.gunzip_limit, self.limit_flag = table, gunzip_limit, limit_flag
        #: a pattern without a literal reads every line: joined into the filter, its anchors, flags and
        #: groups would mean something else (``^`` at a block's start, ``\1`` another pattern's group)
        self.every_line = any(not s.literals for s in table.signatures)
        self.finder = LineFinder([lit for s in table.signatures for lit in s.literals])
        self._healthy_literals: list[tuple[str | None, Signature]] = [
            (lit, s) for s in table.signatures if s.kind == "healthy" for lit in (s.literals or (None,))]
        #: literal -> the entries (by index) that name it; the entries without one are tried on every line
        self._by_literal: dict[str, list[int]] = {}
        for i, sig in enumerate(table.signatures):
            for lit in sig.literals:
                self._by_literal.setdefault(lit, []).append(i)
        self._no_literal = [i for i, sig in enumerate(table.signatures) if not sig.literals and sig.kind != "healthy"]
        #: at each position of a line the longest literal starting there (a lookahead over the trie, so
        #: matches may overlap); a shorter literal starting at the same position is a prefix of it (below)
        words = sorted(self._by_literal)
        self._at_each = re.compile(f"(?=({_text_trie(words)}))") if words else None
        self._prefixes = {w: [v for v in words if w.startswith(v)] for w in words}
        #: every literal, when every entry names its own (``grep -F`` can then find the candidates)
        self.literals = sorted({x for s in table.signatures for x in s.literals}) if all(
            s.literals for s in table.signatures) else []

    def classify(self, text: str) -> list[Signature]:
        """The entries a line matches: a healthy line matches nothing else; one signature per gotcha.
        Only entries whose literal the line holds run their pattern (healthy ones first: floods of
        healthy NCCL lines cost one look each)."""
        for lit, sig in self._healthy_literals:  # a few entries, a literal or two each: cheaper than the scan below
            if (lit is None or lit in text) and sig.pattern.search(text):
                return [sig]
        present = {v for m in self._at_each.finditer(text) for v in self._prefixes[m.group(1)]} if (
            self._at_each) else set()  # fmt: skip
        held = sorted({i for lit in present for i in self._by_literal[lit]}.union(self._no_literal))
        found: list[Signature] = []
        gotchas: set[str | None] = set()
        for i in held:  # the table's order: a user's entry before the built-in one of its gotcha
            sig = self.table.signatures[i]
            if sig.kind == "healthy":
                continue
            if not (sig.kind == "signature" and sig.gotcha in gotchas) and sig.pattern.search(text):
                found.append(sig)
                gotchas.add(sig.gotcha)
        return found

    def _line(self, scan: FileScan, raw: bytes, number: int, redactor: Redactor) -> None:
        text = clean(raw)
        quoted = None  # redacted once, and only for a line that is kept
        try:
            found = self.classify(text)
        except PatternTimeout as exc:  # the pattern and the line, in one line for the user
            raise PatternTimeout(f"{exc} ({scan.name}:{number}): catastrophic backtracking? Rewrite it, or "
                                 "install google-re2 to match it in linear time") from None
        for sig in found:
            scan.counts[sig.id] = scan.counts.get(sig.id, 0) + 1
            if scan.counts[sig.id] > KEEP_HITS:
                continue
            quoted = redactor.text(text) if quoted is None else quoted
            hit = Hit(scan.name, number, sig.id, quoted, timestamp(quoted))
            {"healthy": scan.healthy, "secondary": scan.secondary, "context": scan.context}.get(
                sig.kind, scan.hits).append(hit)

    def _block(self, scan: FileScan, block: bytes, redactor: Redactor) -> None:
        """Every complete line of ``block`` (which ends in a newline) that holds a literal (every line
        when a pattern has none)."""
        if self.every_line:
            for number, raw in enumerate(block.split(b"\n")[:-1], scan.lines + 1):
                self._line(scan, raw, number, redactor)
            scan.lines += block.count(b"\n")
            return
        for number, start, end in self.finder.lines(block, scan.lines + 1):
            self._line(scan, block[start:end], number, redactor)
        scan.lines += block.count(b"\n")

    def scan(self, name: str, redactor: Redactor, *, kernel: bool = False, idle_s: float = IDLE_S,
             label: str | None = None, grep: bool = True) -> FileScan:  # fmt: skip
        """Read one log to its end (bounded as :func:`blocks` says); a read error is ``scan.error``.
        ``label`` is how its lines are cited (``train.log:1834``; default: ``name``). With
        ``grep`` (and every signature naming its literals, and a ``grep`` on PATH), ``grep -F``
        finds the candidate lines in what this reader feeds it: the same lines, some 10x faster."""
        scan = FileScan(visible(label or name), path=name, kernel=kernel)
        program = commands.find_program("grep") if grep and self.literals else None
        ours = [sys.executable, "-m", "pytest_dgx_spark.logscan", "--filter" if re2 else "--filter-re"]
        patterns = [x for lit in self.literals for x in ("-e", lit)]
        argv = [program, "-F", "-n", "-a", *patterns] if program else [*ours, *self.literals]
        try:
            if grep and self.literals:
                self._scan_grep(scan, argv, idle_s, redactor)
            else:
                self._scan_python(scan, idle_s, redactor)
        except (LogError, TableError) as exc:  # TableError: a user pattern past its time budget
            scan.error = str(exc)
        except OSError as exc:
            scan.error = f"{scan.name}: read failed ({exc.strerror or exc})"
        if scan.stopped_at and scan.error is None:
            scan.notes.append(f"stopped at {scan.stopped_at / MIB:,.3g} MiB of decompressed text "
                              f"({self.limit_flag}), after line {scan.lines:,}: "
                              "the rest was not read")  # fmt: skip
        return scan

    def _blocks(self, scan: FileScan, idle_s: float) -> Iterator[bytes]:
        """:func:`blocks` of ``scan``'s log, its first block checked for text, the .gz limit applied."""
        def stopped(at: int) -> None:
            scan.stopped_at = at

        found = blocks(scan.path, idle_s, scan.notes, shown=scan.name, limit=self.gunzip_limit,
                       on_limit=stopped)  # fmt: skip
        return checked(found, scan)

    def _scan_python(self, scan: FileScan, idle_s: float, redactor: Redactor) -> None:
        """The prefilter in this process, block by block."""
        for blk in whole_lines(self._blocks(scan, idle_s), scan):
            self._block(scan, blk, redactor)

    def _scan_grep(self, scan: FileScan, argv: list[str], idle_s: float, redactor: Redactor) -> None:
        """``grep -F -n`` (or, where grep is not on PATH, :func:`filter_main` in a child: the same
        lines, found on another core while this one classifies them) fed by this reader (so every
        bound of :func:`blocks` holds), its candidate lines read back through the same 4 KiB cut;
        the lines counted here."""
        ours = argv[0] == sys.executable
        env = {"LC_ALL": "C", "PATH": os.defpath, **({"PYTHONPATH": PACKAGE_ROOT} if ours else {})}
        proc = commands.start(argv, env, stdin=True)
        if isinstance(proc, tuple):  # grep would not start: read in this process
            self._scan_python(scan, idle_s, redactor)
            return
        for pipe in (proc.stdin, proc.stdout):  # 1 MiB pipes: a block per hand-over, not 64 KiB
            with suppress(OSError, AttributeError, ValueError):
                fcntl.fcntl(pipe.fileno(), fcntl.F_SETPIPE_SZ, BLOCK)  # type: ignore[union-attr]
        failed: list[BaseException] = []
        feeder = threading.Thread(target=self._feed, args=(scan, proc, idle_s, failed), daemon=True)
        feeder.start()
        try:
            fd = proc.stdout.fileno() if proc.stdout is not None else -1
            out = iter(lambda: os.read(fd, BLOCK), b"")
            for blk in whole_lines(out, None):
                for line in blk.split(b"\n")[:-1]:
                    number, _, raw = line.partition(b":")
                    if number.isdigit():
                        self._line(scan, raw, int(number), redactor)
            feeder.join()
            code = proc.wait(timeout=10) if ours else 0
        finally:
            commands.finish(proc)
            feeder.join(timeout=5)
        if code:  # our filter died (an import, memory): its lines are not all there
            raise LogError(f"{scan.name}: the line filter ({argv[0]} -m pytest_dgx_spark.logscan) "
                           f"exited {code}")  # fmt: skip
        if failed:
            raise failed[0]

    def _feed(self, scan: FileScan, proc: Any, idle_s: float, failed: list[BaseException]) -> None:
        """grep's stdin: the log's bytes as :func:`blocks` reads them, its lines counted on the way."""
        lines, last = 0, b"\n"
        try:
            for chunk in self._blocks(scan, idle_s):
                lines += chunk.count(b"\n")
                last = chunk[-1:]
                proc.stdin.write(chunk)
        except (LogError, OSError) as exc:
            failed.append(exc)
        finally:
            scan.lines = lines + (last != b"\n")
            with suppress(OSError):
                proc.stdin.close()


class LineFinder:
    """The lines of a block that hold one of ``literals``: RE2 finds runs of such lines whole in
    one pass when installed (a flood of healthy NCCL lines is one match, not hundreds); else
    Python's ``re`` on the literals as a trie (``(?:NCCL (?:INFO|WARN))``: some 2x a flat
    alternation), each hit widened to its line."""

    def __init__(self, literals: Sequence[str]) -> None:
        words = sorted({lit.encode() for lit in literals})
        trie = _trie(words) if words else b"(?!)"
        self.search = re.compile(trie).search
        #: Python's re would backtrack on the ``[^\n]*``; RE2's automaton does not
        self.whole = _linear_bytes(b"(?:[^\n]*(?:%s)[^\n]*\n)+" % trie) if words else None

    def lines(self, block: bytes, first: int) -> Iterator[tuple[int, int, int]]:
        """``(number, start, end)`` of each candidate line of ``block`` (whole lines, the last one
        ending in a newline), numbered from ``first``; a literal past a line's first
        :data:`MAX_LINE` bytes reads nothing (RE2 finds the line; :meth:`Matcher.classify` then
        sees no literal in its first 4 KiB)."""
        number, counted = first, 0
        if self.whole is not None:
            for m in self.whole.finditer(block):
                start, end = m.span()
                number += block.count(b"\n", counted, start)
                counted = end
                while start < end:  # the run's lines, each ending in a newline
                    nl = block.find(b"\n", start, end)
                    yield number, start, nl
                    number, start = number + 1, nl + 1
            return
        pos = 0
        while m := self.search(block, pos):
            start = block.rfind(b"\n", 0, m.start()) + 1
            end = block.find(b"\n", m.end())
            end = len(block) if end < 0 else end
            number += block.count(b"\n", counted, start)
            counted = start
            if m.start() - start < MAX_LINE:  # beyond a line's first 4 KiB nothing is read
                yield number, start, end
            pos = end + 1


def _text_trie(words: Sequence[str]) -> str:
    """An alternation of ``words`` factored by prefix, so ``re`` tries each first character once; at a
    position the longest word matches first (a shorter one is then a prefix of it)."""
    node: dict[Any, Any] = {}
    for word in words:
        at = node
        for ch in word:
            at = at.setdefault(ch, {})
        at[None] = {}

    def pattern(at: dict[Any, Any]) -> str:
        ends = None in at
        alts = [re.escape(ch) + pattern(rest) for ch, rest in sorted((k, v) for k, v in at.items() if k is not None)]
        if not alts:
            return ""
        body = alts[0] if len(alts) == 1 and not ends else "(?:" + "|".join(alts) + ")"
        return "(?:" + body + ")?" if ends else body

    return pattern(node)


def _trie(words: Sequence[bytes]) -> bytes:
    """:func:`_text_trie` for bytes (grep's filter): latin-1 maps each byte to one character and back."""
    return _text_trie([w.decode("latin-1") for w in words]).encode("latin-1")


def filter_main(literals: Sequence[str], engine: str = "re2") -> int:
    """``python -m pytest_dgx_spark.logscan --filter LIT…``: what ``grep -F -n -a -e LIT…`` prints
    (``N:line`` for each line of stdin that holds a literal), for a machine without grep on PATH;
    ``--filter-re`` (``engine="re"``): on Python's re, as the parent that started it has no RE2."""
    global re2
    if engine == "re":
        re2 = None
    finder = LineFinder(literals)
    out, number = sys.stdout.buffer, 1
    for blk in whole_lines(iter(lambda: os.read(0, BLOCK), b""), None):
        out.write(b"".join(b"%d:%s\n" % (n, blk[start:end]) for n, start, end in finder.lines(blk, number)))
        number += blk.count(b"\n")
    out.flush()
    return 0


def _linear_bytes(pattern: bytes) -> Any:
    """``pattern`` on RE2 for whole blocks (its automaton finds 60 literals some 4x faster than
    Python's ``re``: the prefilter where ``grep`` is not on PATH), or ``None`` without RE2."""
    if re2 is None:
        return None
    options = re2.Options()
    options.log_errors = False
    try:
        return re2.compile(pattern, options)
    except Exception:  # a wrapper that refuses it: Python's re does the work
        return None


def checked(chunks: Iterator[bytes], scan: FileScan) -> Iterator[bytes]:
    """``chunks``, after its first has passed :func:`binary_reason`; a tail of NUL bytes is said in a note:
    an output file whose end was never written, as when the host is lost mid-run (power, a hard hang)."""
    tail = 0
    for n, chunk in enumerate(chunks):
        if n == 0 and (why := binary_reason(chunk)):
            raise LogError(f"{scan.name}: {why}")
        kept = chunk.rstrip(b"\0")
        tail = len(chunk) - len(kept) if kept else tail + len(chunk)
        yield chunk
    if tail >= NUL_TAIL:
        scan.notes.append(f"the log ends in {tail:,} NUL bytes: it was cut off with its host (lost mid-run: a "
                          "hard hang or power loss); read the previous boot's kernel log (journalctl -k -b -1): "
                          "NV_ERR_NO_MEMORY there points to G3")  # fmt: skip


def whole_lines(chunks: Iterator[bytes], scan: FileScan | None) -> Iterator[bytes]:
    """Blocks of whole lines (each ends in a newline); a line longer than :data:`MAX_LINE`
    across blocks is cut to its first MAX_LINE bytes, so memory stays one block and a line."""
    carry, skipping = b"", False
    for chunk in chunks:
        if skipping:  # the rest of an over-long line
            nl = chunk.find(b"\n")
            if nl < 0:
                continue
            chunk, skipping = chunk[nl + 1 :], False
            yield carry + b"\n"  # its first 4 KiB, as one line
            carry = b""
        buf = carry + chunk
        last = buf.rfind(b"\n")
        carry = buf[last + 1 :]
        if last >= 0:
            yield buf[: last + 1]
        if len(carry) > MAX_LINE:
            carry, skipping = carry[:MAX_LINE], True
            if scan is not None:
                scan.cut_lines += 1
    if carry:
        yield carry + b"\n"


def scan_logs(logs: Sequence[str], kernel_logs: Sequence[str], table: Table, idle_s: float = IDLE_S, *,
              gunzip_limit: int | None = GUNZIP_LIMIT,
              limit_flag: str = BY_NAME["gunzip-max-mib"].cli_flag) -> list[FileScan]:  # fmt: skip
    """Each log read once, its lines cited by base name (``train.log:1834``) unless two share one;
    a name is escaped (:func:`~pytest_dgx_spark.safe_text.visible`) before any output quotes it."""
    if list(logs).count("-") > 1:
        raise LogError("- (stdin) may be given once")
    matcher = Matcher(table, gunzip_limit, limit_flag)
    redactor = outgoing(os.environ)
    names = [*logs, *kernel_logs]
    bases = [os.path.basename(n) or n for n in names]
    labels = bases if len(set(bases)) == len(bases) else names
    return [matcher.scan(name, redactor, kernel=i >= len(logs), idle_s=idle_s, label=label)
            for i, (name, label) in enumerate(zip(names, labels, strict=True))]  # fmt: skip


if __name__ == "__main__" and sys.argv[1:2] in (["--filter"], ["--filter-re"]):
    sys.exit(filter_main(sys.argv[2:], "re" if sys.argv[1] == "--filter-re" else "re2"))
