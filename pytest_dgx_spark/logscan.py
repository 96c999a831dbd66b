"""Failure-log signatures (data: ``data/signatures.json``, a user file adds to them) and the
bounded reader that finds them (issue 23). Logs are untrusted: read in 1 MiB blocks (a 10 GB log
in flat memory), a line matched on its first 4 KiB, a silent pipe given up after ``idle_s``, a
regular file read up to its size when opened; quotes are stripped of escapes and redacted.
Speed: one alternation of the signatures' literal substrings finds candidate lines in whole
blocks; only those are decoded and matched against the full patterns.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import select
import stat
import sys
import threading
import zlib
from collections.abc import Iterator, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from pytest_dgx_spark.probes import commands
from pytest_dgx_spark.redact import Redactor, outgoing

BLOCK = 1 << 20
MAX_LINE = 4096  # a longer line is matched and quoted on its first MAX_LINE bytes
QUOTE_CHARS = 200  # quoted text of a hit, at most
IDLE_S = 10.0  # seconds a pipe, FIFO or stdin may stay silent before the reader gives up
KEEP_HITS = 20  # kept per signature per file (the rest are counted)
MAX_TABLE_BYTES = 1 << 20  # a signature file bigger than this is no signature file
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


@dataclass(frozen=True)
class Signature:
    """One known failure line: what it means for which check, how much it says alone, the fix."""

    id: str
    pattern: re.Pattern[str]
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


def _signature(entry: Any, kind: str, where: str) -> Signature:
    """One entry of the table, checked: a user file's mistakes are named, never a traceback."""
    if not isinstance(entry, dict):
        raise TableError(f"{where}: expected an object, got {type(entry).__name__}")
    sid = _text(entry, "id", where)
    where = f"{where} ({sid})"
    try:
        pattern = re.compile(_text(entry, "pattern", where))
    except re.error as exc:
        raise TableError(f"{where}: pattern is not a regular expression ({exc})") from None
    literals = entry.get("literal") or []  # one string or a list of them, each non-empty
    literals = [literals] if isinstance(literals, str) else literals
    if not isinstance(literals, list) or not all(isinstance(x, str) and x for x in literals):
        raise TableError(f"{where}: 'literal' must be a string or a list of non-empty strings")
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


def parse_table(doc: Any, where: str) -> list[Signature]:
    """The entries of one signature document (``signatures``, ``healthy``, ``secondary`` lists)."""
    if not isinstance(doc, dict):
        raise TableError(f"{where}: expected a JSON object with a 'signatures' list")
    out: list[Signature] = []
    for key, kind in (("signatures", "signature"), ("healthy", "healthy"), ("secondary", "secondary"),
                      ("context", "context")):  # fmt: skip
        entries = doc.get(key, [])
        if not isinstance(entries, list):
            raise TableError(f"{where}: '{key}' must be a list")
        out += [_signature(e, kind, f"{where}: {key}[{i}]") for i, e in enumerate(entries)]
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
        raise TableError(f"cannot read signature file {extra}: {exc.strerror or exc}") from None
    if len(data) > MAX_TABLE_BYTES:
        raise TableError(f"signature file {extra}: larger than {MAX_TABLE_BYTES >> 20} MiB")
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise TableError(f"signature file {extra}: not JSON ({exc})") from None
    return Table(parse_table(doc, f"signature file {extra.name}") + table)


class _Source:
    """Raw bytes of a log with every read bounded: by the size a regular file had when opened, and
    by ``idle_s`` of silence on a pipe, FIFO or terminal. :class:`gzip.GzipFile` reads through it."""

    def __init__(self, name: str, idle_s: float) -> None:
        self.name, self.idle_s, self.total = name, idle_s, 0
        self.notes: list[str] = []
        if name == "-":
            self.fd = sys.stdin.fileno() if sys.stdin is not None else -1
            if self.fd < 0:
                raise LogError("-: stdin is closed")
        else:
            try:
                self.fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
            except OSError as exc:
                raise LogError(f"{name}: cannot open ({exc.strerror or exc})") from None
        st = os.fstat(self.fd)
        if stat.S_ISDIR(st.st_mode):
            self.close()
            raise LogError(f"{name}: is a folder, not a log")
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
        if self.name != "-":
            with suppress(OSError):
                os.close(self.fd)


def blocks(name: str, idle_s: float = IDLE_S, notes: list[str] | None = None) -> Iterator[bytes]:
    """The log's bytes in blocks of about 1 MiB (decompressed when the name ends in ``.gz``)."""
    src = _Source(name, idle_s)
    try:
        if name.endswith(".gz"):
            gz = gzip.GzipFile(fileobj=src, mode="rb")  # type: ignore[call-overload]
            try:
                while chunk := gz.read(BLOCK):
                    yield chunk
            except (OSError, EOFError, zlib.error) as exc:
                raise LogError(f"{name}: not a readable gzip file ({exc})") from None
        else:
            while chunk := src.read(BLOCK):
                yield chunk
        if src.grew():
            src.notes.append("the log grew while read: read up to the size it had when opened")
    finally:
        if notes is not None:
            notes.extend(src.notes)
        src.close()


def binary_reason(head: bytes) -> str | None:
    """Why the first bytes of a log are no text (NULs, or mostly undecodable), else ``None``."""
    sample = head[:65536]
    nul = sample.count(0)
    if nul > len(sample) // 100:
        return f"not a text log ({nul} NUL bytes in the first {len(sample)} bytes: binary?)"
    text = sample.decode("utf-8", "replace")
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
    cut_lines: int = 0
    notes: list[str] = field(default_factory=list)
    error: str | None = None


def _trie(words: set[bytes]) -> bytes:
    """A regular expression matching any of ``words``, factored by common prefixes (``NCCL (?:WARN|INFO)``):
    the prefilter tries one branch per distinct next byte instead of one per literal."""
    if not words:
        return b""
    groups: dict[bytes, set[bytes]] = {}
    for word in words:
        groups.setdefault(word[:1], set()).add(word[1:])
    parts = []
    for head, tails in sorted(groups.items()):
        rest = _trie(tails - {b""})
        if rest and b"" in tails:
            rest = b"(?:%s)?" % rest
        parts.append(re.escape(head) + rest)
    return parts[0] if len(parts) == 1 else b"(?:%s)" % b"|".join(parts)


class Matcher:
    """The table compiled once: the literal prefilter over whole blocks, then each entry's pattern."""

    def __init__(self, table: Table) -> None:
        self.table = table
        # the literals as one trie (a flat alternation costs a try per literal at every position)
        alternatives: set[bytes] = {_trie({lit.encode() for s in table.signatures for lit in s.literals})}
        # a user pattern without a literal: the pattern itself prefilters
        alternatives |= {b"(?:%s)" % s.pattern.pattern.encode() for s in table.signatures if not s.literals}
        unique = sorted(alternatives - {b""}, key=lambda a: (-len(a), a))
        self.prefilter = re.compile(b"|".join(unique))
        self._healthy = [s for s in table.signatures if s.kind == "healthy"]
        self._by_literal = [(lit, i) for i, s in enumerate(table.signatures) for lit in s.literals]
        #: every literal, when every entry names its own (``grep -F`` can then find the candidates)
        self.literals = sorted({x for s in table.signatures for x in s.literals}) if all(
            s.literals for s in table.signatures) else []

    def classify(self, text: str) -> list[Signature]:
        """The entries a line matches: a healthy line matches nothing else; one signature per gotcha.
        Only entries whose literal the line holds run their pattern (healthy ones first: floods of
        healthy NCCL lines cost one look each)."""
        for sig in self._healthy:
            if (not sig.literals or any(lit in text for lit in sig.literals)) and sig.pattern.search(text):
                return [sig]
        held = {i for lit, i in self._by_literal if lit in text}
        found: list[Signature] = []
        gotchas: set[str | None] = set()
        for i, sig in enumerate(self.table.signatures):
            if sig.kind == "healthy" or (sig.literals and i not in held):
                continue
            if not (sig.kind == "signature" and sig.gotcha in gotchas) and sig.pattern.search(text):
                found.append(sig)
                gotchas.add(sig.gotcha)
        return found

    def _line(self, scan: FileScan, raw: bytes, number: int, redactor: Redactor) -> None:
        text = clean(raw)
        quoted = None  # redacted once, and only for a line that is kept
        for sig in self.classify(text):
            scan.counts[sig.id] = scan.counts.get(sig.id, 0) + 1
            if scan.counts[sig.id] > KEEP_HITS:
                continue
            quoted = redactor.text(text) if quoted is None else quoted
            hit = Hit(scan.name, number, sig.id, quoted, timestamp(quoted))
            {"healthy": scan.healthy, "secondary": scan.secondary, "context": scan.context}.get(
                sig.kind, scan.hits).append(hit)

    def _block(self, scan: FileScan, block: bytes, redactor: Redactor) -> None:
        """Every complete line of ``block`` (which ends in a newline) that holds a literal."""
        base, pos, counted = scan.lines, 0, 0
        search = self.prefilter.search
        while m := search(block, pos):
            start = block.rfind(b"\n", 0, m.start()) + 1
            end = block.find(b"\n", m.end())
            end = len(block) if end < 0 else end
            base += block.count(b"\n", counted, start)
            counted = start
            if m.start() - start < MAX_LINE:  # beyond a line's first 4 KiB nothing is read
                self._line(scan, block[start:end], base + 1, redactor)
            pos = end + 1
        scan.lines += block.count(b"\n")

    def scan(self, name: str, redactor: Redactor, *, kernel: bool = False, idle_s: float = IDLE_S,
             label: str | None = None, grep: bool = True) -> FileScan:  # fmt: skip
        """Read one log to its end (bounded as :func:`blocks` says); a read error is ``scan.error``.
        ``label`` is how its lines are cited (``train.log:1834``; default: ``name``). With
        ``grep`` (and every signature naming its literals, and a ``grep`` on PATH), ``grep -F``
        finds the candidate lines in what this reader feeds it: the same lines, some 10x faster."""
        scan = FileScan(label or name, path=name, kernel=kernel)
        program = commands.find_program("grep") if grep and self.literals else None
        try:
            if program:
                self._scan_grep(scan, program, idle_s, redactor)
            else:
                self._scan_python(scan, idle_s, redactor)
        except LogError as exc:
            scan.error = str(exc)
        except OSError as exc:
            scan.error = f"{scan.name}: read failed ({exc.strerror or exc})"
        return scan

    def _scan_python(self, scan: FileScan, idle_s: float, redactor: Redactor) -> None:
        """The prefilter in this process, block by block."""
        for blk in whole_lines(checked(blocks(scan.path, idle_s, scan.notes), scan), scan):
            self._block(scan, blk, redactor)

    def _scan_grep(self, scan: FileScan, program: str, idle_s: float, redactor: Redactor) -> None:
        """``grep -F -n`` fed by this reader (so every bound of :func:`blocks` holds), its
        candidate lines read back through the same 4 KiB cut; the lines counted here."""
        argv = [program, "-F", "-n", "-a", *(x for lit in sorted(self.literals) for x in ("-e", lit))]
        proc = commands.start(argv, {"LC_ALL": "C", "PATH": os.defpath}, stdin=True)
        if isinstance(proc, tuple):  # grep would not start: read in this process
            self._scan_python(scan, idle_s, redactor)
            return
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
        finally:
            commands.finish(proc)
            feeder.join(timeout=5)
        if failed:
            raise failed[0]

    def _feed(self, scan: FileScan, proc: Any, idle_s: float, failed: list[BaseException]) -> None:
        """grep's stdin: the log's bytes as :func:`blocks` reads them, its lines counted on the way."""
        lines, last = 0, b"\n"
        try:
            for chunk in checked(blocks(scan.path, idle_s, scan.notes), scan):
                lines += chunk.count(b"\n")
                last = chunk[-1:]
                proc.stdin.write(chunk)
        except (LogError, OSError) as exc:
            failed.append(exc)
        finally:
            scan.lines = lines + (last != b"\n")
            with suppress(OSError):
                proc.stdin.close()


def checked(chunks: Iterator[bytes], scan: FileScan) -> Iterator[bytes]:
    """``chunks``, after its first has passed :func:`binary_reason`."""
    for n, chunk in enumerate(chunks):
        if n == 0 and (why := binary_reason(chunk)):
            raise LogError(f"{scan.name}: {why}")
        yield chunk


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


def scan_logs(logs: Sequence[str], kernel_logs: Sequence[str], table: Table,
              idle_s: float = IDLE_S) -> list[FileScan]:  # fmt: skip
    """Each log read once, its lines cited by base name (``train.log:1834``) unless two share one."""
    if list(logs).count("-") > 1:
        raise LogError("- (stdin) may be given once")
    matcher = Matcher(table)
    redactor = outgoing(os.environ)
    names = [*logs, *kernel_logs]
    bases = [os.path.basename(n) or n for n in names]
    labels = bases if len(set(bases)) == len(bases) else names
    return [matcher.scan(name, redactor, kernel=i >= len(logs), idle_s=idle_s, label=label)
            for i, (name, label) in enumerate(zip(names, labels, strict=True))]  # fmt: skip
