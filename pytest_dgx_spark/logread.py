"""The bounded reader of untrusted logs (issue 23): read in 1 MiB blocks (a 10 GB log in flat
memory), a line matched on its first 4 KiB, a silent pipe given up after ``idle_s``, a regular file
read up to its size when opened, a .gz log decompressed up to a limit; a line cleaned of terminal
escapes and control characters, its timestamp read; what one log held (:class:`FileScan`).
"""

from __future__ import annotations

import gzip
import os
import re
import select
import stat
import sys
import zlib
from collections.abc import Callable, Generator, Iterator
from contextlib import suppress
from dataclasses import field

from pytest_dgx_spark.datadef import define
from pytest_dgx_spark.options import DEFAULT_GUNZIP_MIB
from pytest_dgx_spark.safe_text import visible

BLOCK = 1 << 20
#: a log ending in this many NUL bytes or more was cut off with its host (dgx-spark-playbooks #97, #116)
NUL_TAIL = 64
MAX_LINE = 4096  # a longer line is matched and quoted on its first MAX_LINE bytes
QUOTE_CHARS = 200  # quoted text of a hit, at most
IDLE_S = 10.0  # seconds a pipe, FIFO or stdin may stay silent before the reader gives up
MIB = 1 << 20
#: decompressed bytes read of a .gz log unless ``--gunzip-max-mib`` says otherwise
GUNZIP_LIMIT = int(DEFAULT_GUNZIP_MIB * MIB)

ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
#: 2026-12-05T11:49:04.123 / 2026-12-05 11:49:04,123 (sortable), and vLLM's ``12-05 11:49:04``
ISO_TS = re.compile(r"(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d:\d\d(?:[.,]\d+)?)")
SHORT_TS = re.compile(r"\b(\d\d-\d\d) (\d\d:\d\d:\d\d)\b")
#: journalctl/syslog's ``Aug 28 11:55:08`` (no year: compared only with its own kind)
SYSLOG_TS = re.compile(r"\b(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +(\d{1,2}) (\d\d:\d\d:\d\d)\b")
MONTHS = {m: i for i, m in enumerate(["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"], 1)}


class LogError(Exception):
    """A log that cannot be read, said in one line."""


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
    try:
        if name.endswith(".gz"):
            limited = yield from _gunzipped(src, limit, on_limit)
        else:
            limited = False
            while chunk := src.read(BLOCK):
                yield chunk
        if not limited and src.grew():  # stopped at the limit: the rest, not a file that grew, is unread
            src.notes.append("the log grew while read: read up to the size it had when opened")
    finally:
        if notes is not None:
            notes.extend(src.notes)
        src.close()


def _gunzipped(src: _Source, limit: int | None,
               on_limit: Callable[[int], None] | None) -> Generator[bytes, None, bool]:  # fmt: skip
    """A .gz log's text in blocks, up to ``limit`` bytes (the last line may be cut); true when the
    limit stopped it."""
    gz = gzip.GzipFile(fileobj=src, mode="rb")  # type: ignore[call-overload]
    done = 0
    try:
        while chunk := gz.read(BLOCK):
            if limit is not None and done + len(chunk) > limit:
                if on_limit is not None:
                    on_limit(limit)
                if done < limit:
                    yield chunk[: limit - done]
                return True
            done += len(chunk)
            yield chunk
    except (OSError, EOFError, zlib.error) as exc:
        raise LogError(f"{src.name}: not a readable gzip file ({exc})") from None
    return False


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



@define
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


@define
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

