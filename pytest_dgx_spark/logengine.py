"""The regular-expression engine of the log reader (issue 23, issue 30): RE2 (google-re2) when it is
installed, else Python's ``re``. A user file's pattern (:class:`UserPattern`) runs in linear time
on RE2 when RE2 takes it, else on ``re`` with a time budget per line. The literal prefilter
(:class:`LineFinder`) finds the lines that hold a signature's literal substring in whole blocks:
RE2 over runs of lines, else ``re`` on the literals factored as a prefix trie; :func:`filter_main`
is the same filter as ``grep -F -n`` in a child, where grep is not on PATH.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pytest_dgx_spark.logread import BLOCK, MAX_LINE, whole_lines

try:  # google-re2: linear-time matching, and the fast prefilter where grep is not on PATH
    import re2
except ImportError:  # pragma: no cover - an install without it: Python's re, user patterns on a budget
    re2 = None

#: seconds one user pattern may take on one line under Python's re (no RE2): a real pattern takes
#: microseconds, a catastrophic one (``(a+)+$``) years
PATTERN_BUDGET_S = 0.25


class TableError(Exception):
    """A signature file that cannot be used, said in one line."""


class PatternTimeout(TableError):
    """A user pattern that ran past its budget on one line (catastrophic backtracking)."""


class _Expired(Exception):
    """SIGALRM's word to the search it interrupts."""


def _linear(pattern: str | bytes) -> Any:
    """``pattern`` compiled by RE2 (linear time), or ``None``: RE2 absent, or a pattern it has no
    engine for (backreferences, lookaround), which then runs on Python's re with a budget. On
    bytes, for whole blocks: RE2's automaton finds 60 literals some 4x faster than Python's ``re``
    (the prefilter where ``grep`` is not on PATH)."""
    if re2 is None:
        return None
    options = re2.Options()
    options.log_errors = False  # its refusal is ours to handle, not a line on stderr
    try:
        return re2.compile(pattern, options)
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
        self.whole = _linear(b"(?:[^\n]*(?:%s)[^\n]*\n)+" % trie) if words else None

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


def text_trie(words: Sequence[str]) -> str:
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
    """:func:`text_trie` for bytes (grep's filter): latin-1 maps each byte to one character and back."""
    return text_trie([w.decode("latin-1") for w in words]).encode("latin-1")


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

