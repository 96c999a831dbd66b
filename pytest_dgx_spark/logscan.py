"""Failure-log signatures found in logs (issue 23): the table (:mod:`~pytest_dgx_spark.logtable`)
compiled once, each log read by the bounded reader (:mod:`~pytest_dgx_spark.logread`), its lines
classified. Speed: one alternation of the signatures' literal substrings finds candidate lines in
whole blocks (``grep -F``, else RE2, else Python's ``re``: :mod:`~pytest_dgx_spark.logengine`); only
those are decoded and matched against the full patterns. A user file's patterns (issue 30) run in
linear time on RE2 (google-re2) when it is installed and takes the pattern, else on Python's ``re``
with a time budget per line; each is matched alone on each line, so its anchors, flags and groups
mean what they say. ``python -m pytest_dgx_spark.logscan --filter LIT…`` is the line filter's child.
"""

from __future__ import annotations

import fcntl
import os
import re
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any

from pytest_dgx_spark import logengine
from pytest_dgx_spark.logengine import LineFinder, PatternTimeout, TableError, filter_main, text_trie
from pytest_dgx_spark.logread import (
    BLOCK,
    GUNZIP_LIMIT,
    IDLE_S,
    MIB,
    FileScan,
    Hit,
    LogError,
    blocks,
    checked,
    clean,
    timestamp,
    whole_lines,
)
from pytest_dgx_spark.logtable import (
    CONTEXTS,
    GATES,
    Signature,
    Table,
    builtin_table,
    load_table,
    parse_table,
)
from pytest_dgx_spark.options import BY_NAME
from pytest_dgx_spark.probes import commands
from pytest_dgx_spark.redact import Redactor, outgoing
from pytest_dgx_spark.safe_text import visible

__all__ = [
    "BLOCK", "CONTEXTS", "GATES", "GUNZIP_LIMIT", "IDLE_S", "KEEP_HITS", "MIB", "FileScan", "Hit",
    "LogError", "Matcher", "PatternTimeout", "Signature", "Table", "TableError", "builtin_table",
    "load_table", "outgoing", "parse_table", "scan_logs",
]  # fmt: skip

KEEP_HITS = 20  # kept per signature per file (the rest are counted)
#: the folder holding this package: the line filter's child imports it from there
PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)


class Matcher:
    """The table compiled once: the literal prefilter over whole blocks, then each entry's pattern."""

    def __init__(self, table: Table, gunzip_limit: int | None = GUNZIP_LIMIT,
                 limit_flag: str = BY_NAME["gunzip-max-mib"].cli_flag) -> None:  # fmt: skip
        self.table, self.gunzip_limit, self.limit_flag = table, gunzip_limit, limit_flag
        sigs = table.signatures
        #: a pattern without a literal reads every line: joined into the filter, its anchors, flags and
        #: groups would mean something else (``^`` at a block's start, ``\1`` another pattern's group)
        self.every_line = any(not s.literals for s in sigs)
        self.finder = LineFinder([lit for s in sigs for lit in s.literals])
        self._healthy_literals: list[tuple[str | None, Signature]] = [
            (lit, s) for s in sigs if s.kind == "healthy" for lit in (s.literals or (None,))]
        self._by_literal, self._no_literal, self._at_each, self._prefixes = _literal_index(sigs)
        #: every literal, when every entry names its own (``grep -F`` can then find the candidates)
        self.literals = [] if self.every_line else sorted({x for s in sigs for x in s.literals})

    def classify(self, text: str) -> list[Signature]:
        """The entries a line matches: a healthy line matches nothing else; one signature per gotcha.
        Only entries whose literal the line holds run their pattern (healthy ones first: floods of
        healthy NCCL lines cost one look each)."""
        for lit, sig in self._healthy_literals:  # a few entries, a literal or two each: cheaper than the scan below
            if (lit is None or lit in text) and sig.pattern.search(text):
                return [sig]
        found: list[Signature] = []
        gotchas: set[str | None] = set()
        for i in self._held(text):  # the table's order: a user's entry before the built-in one of its gotcha
            sig = self.table.signatures[i]
            if sig.kind == "healthy":
                continue
            if not (sig.kind == "signature" and sig.gotcha in gotchas) and sig.pattern.search(text):
                found.append(sig)
                gotchas.add(sig.gotcha)
        return found

    def _held(self, text: str) -> list[int]:
        """The entries (by index, in order) whose literal ``text`` holds, and those without one."""
        present = {v for m in self._at_each.finditer(text) for v in self._prefixes[m.group(1)]} if (
            self._at_each) else set()  # fmt: skip
        return sorted({i for lit in present for i in self._by_literal[lit]}.union(self._no_literal))

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
        argv = self._filter_argv() if grep and self.literals else None
        try:
            if argv:
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

    def _filter_argv(self) -> list[str]:
        """``grep -F -n -a -e LIT…`` when grep is on PATH, else this module's filter in a child (on
        RE2 when this process has it)."""
        program = commands.find_program("grep")
        if program:
            return [program, "-F", "-n", "-a", *[x for lit in self.literals for x in ("-e", lit)]]
        engine = "--filter" if logengine.re2 else "--filter-re"
        return [sys.executable, "-m", "pytest_dgx_spark.logscan", engine, *self.literals]

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
        _widen_pipes(proc)
        failed: list[BaseException] = []
        feeder = threading.Thread(target=self._feed, args=(scan, proc, idle_s, failed), daemon=True)
        feeder.start()
        try:
            self._read_numbered(scan, proc.stdout.fileno() if proc.stdout is not None else -1, redactor)
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

    def _read_numbered(self, scan: FileScan, fd: int, redactor: Redactor) -> None:
        """The filter's ``N:line`` output, each line classified under its number."""
        for blk in whole_lines(iter(lambda: os.read(fd, BLOCK), b""), None):
            for line in blk.split(b"\n")[:-1]:
                number, _, raw = line.partition(b":")
                if number.isdigit():
                    self._line(scan, raw, int(number), redactor)

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



def _literal_index(sigs: Sequence[Signature]) -> tuple[
        dict[str, list[int]], list[int], re.Pattern[str] | None, dict[str, list[str]]]:  # fmt: skip
    """How :meth:`Matcher.classify` finds the entries a line may match: each literal with the entries
    (by index) that name it; the entries without one (tried on every line); at each position of a
    line the longest literal starting there (a lookahead over the trie, so matches may overlap); and
    each literal's prefixes among the literals (a shorter one starting at the same position)."""
    by_literal: dict[str, list[int]] = {}
    for i, sig in enumerate(sigs):
        for lit in sig.literals:
            by_literal.setdefault(lit, []).append(i)
    no_literal = [i for i, sig in enumerate(sigs) if not sig.literals and sig.kind != "healthy"]
    words = sorted(by_literal)
    at_each = re.compile(f"(?=({text_trie(words)}))") if words else None
    return by_literal, no_literal, at_each, {w: [v for v in words if w.startswith(v)] for w in words}


def _widen_pipes(proc: Any) -> None:
    """1 MiB pipes to and from the filter: a block per hand-over, not 64 KiB."""
    for pipe in (proc.stdin, proc.stdout):
        with suppress(OSError, AttributeError, ValueError):
            fcntl.fcntl(pipe.fileno(), fcntl.F_SETPIPE_SZ, BLOCK)


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
