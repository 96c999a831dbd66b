"""The job's output and ours: the job's bytes passed through as they come (a bounded head and tail kept
for the post-mortem), our lines on the shared stderr (:func:`say`), and the ``--timeline``.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections import deque
from typing import Any

from pytest_dgx_spark import outfile
from pytest_dgx_spark.redact import Redactor
from pytest_dgx_spark.safe_text import visible

PREFIX = "spark-preflight watch: "
#: bytes of the job's output kept for the post-mortem: the first (an import error) and the last
HEAD_BYTES, TAIL_BYTES = 64 << 10, 1 << 20

#: the last byte the job wrote to our stderr: a line of ours after a job's unfinished line starts a new one
_LAST = {"stderr": b"\n"}


def say(text: str) -> None:
    """One line of ours on stderr, in one write (the job's stderr shares it)."""
    lead = "" if _LAST["stderr"] == b"\n" else "\n"
    with contextlib.suppress(OSError, ValueError):
        os.write(2, (lead + PREFIX + visible(text) + "\n").encode("utf-8", "replace"))
    _LAST["stderr"] = b"\n"


class Output:
    """The job's output kept for the post-mortem: its first :data:`HEAD_BYTES` and last :data:`TAIL_BYTES`."""

    def __init__(self) -> None:
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_bytes = self.total = 0
        self.lock = threading.Lock()

    def add(self, chunk: bytes) -> None:
        with self.lock:
            self.total += len(chunk)
            if len(self.head) < HEAD_BYTES:
                self.head += chunk[: HEAD_BYTES - len(self.head)]
            self.tail.append(chunk)
            self.tail_bytes += len(chunk)
            while self.tail_bytes - len(self.tail[0]) >= TAIL_BYTES:
                self.tail_bytes -= len(self.tail.popleft())

    def text(self) -> bytes:
        with self.lock:
            tail = b"".join(self.tail)
            if self.total <= len(self.head):
                return bytes(self.head)
            overlap = len(self.head) + len(tail) - self.total
            if overlap >= 0:
                return bytes(self.head) + tail[overlap:]
            return bytes(self.head) + b"\n[... output cut ...]\n" + tail


def pump(src: int, dst: int, kept: Output) -> None:
    """Copy ``src`` to ``dst`` byte for byte; when ``dst`` is closed downstream, close ``src`` so the
    job's next write fails as it would have without us."""
    open_dst = True
    try:
        while chunk := os.read(src, 1 << 16):
            kept.add(chunk)
            if dst == 2:
                _LAST["stderr"] = chunk[-1:]
            view = memoryview(chunk)
            while open_dst and view:
                try:
                    view = view[os.write(dst, view) :]
                except BrokenPipeError:
                    open_dst = False
                except OSError:
                    open_dst = False
            if not open_dst:
                break
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            os.close(src)


class Timeline:
    """JSON Lines, one record per write, each on disk when written (:func:`outfile.open_stream`)."""

    def __init__(self, path: str | None) -> None:
        self.fd = outfile.open_stream(path) if path else -1
        self.redact = Redactor(os.environ)
        self.bytes = 0

    def write(self, record: dict[str, Any]) -> None:
        if self.fd < 0:
            return
        data = (json.dumps(self.redact(record), default=str, separators=(",", ":")) + "\n").encode()
        try:
            os.write(self.fd, data)
            self.bytes += len(data)
        except OSError as exc:
            say(f"timeline not written further: {exc.strerror or exc}")
            self.close()

    def close(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1
