"""Parsers for ``/proc`` text: pure functions, tested on recorded files."""

from __future__ import annotations

import errno
import os
import re
import stat

from pytest_dgx_spark.outfile import kind_of

#: a minus sign is kept, not dropped with the line: a negative field is an
#: impossible reading its check must see (G3 would estimate a dropped MemAvailable)
_MEMINFO_LINE = re.compile(r"^([A-Za-z0-9_()]+):\s+(-?\d+)(?:\s+kB)?\s*$")


def parse_meminfo(text: str) -> dict[str, int]:
    """``/proc/meminfo`` -> ``{field: kB}`` (``HugePages_*`` counts are plain numbers).

    Lines that do not parse are ignored; a caller checks for the fields it needs.
    """
    out: dict[str, int] = {}
    for line in text.splitlines():
        m = _MEMINFO_LINE.match(line.strip())
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


CONTAINER_CGROUP = re.compile(r"docker|containerd|kubepods|libpod|podman|lxc|crio|garden|buildkit")


def cgroup_runtime(text: str) -> str | None:
    """The container runtime named in ``/proc/1/cgroup``, or ``None``.

    On cgroup v2 the file is just ``0::/`` inside most containers, so ``None``
    does not prove a bare host (kardianos/service#363).
    """
    m = CONTAINER_CGROUP.search(text)
    return m.group(0) if m else None


def parse_key_values(text: str) -> dict[str, str]:
    """``key="value"`` lines, as in ``/run/.containerenv`` and ``/etc/os-release``."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key and not key.startswith("#"):
            out[key.strip()] = value.strip().strip('"').strip("'")
    return out


def read_regular(path: str | os.PathLike[str], limit: int = 1 << 20) -> bytes:
    """Read at most ``limit`` bytes of a regular file, never blocking.

    A FIFO, socket or device planted where ``/proc/meminfo`` or a pid's
    ``cmdline`` should be would block a plain ``open()`` forever (a FIFO with
    no writer) or never end (``/dev/zero``). The file is opened with
    ``O_NONBLOCK`` (which makes opening a FIFO return at once) and refused
    unless ``fstat`` says it is a regular file; ``/proc`` files are.
    Raises :class:`OSError` with a reason a line can quote.
    """
    flags = (
        os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    )
    fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = kind_of(mode)
            raise OSError(errno.EINVAL, f"not a regular file ({kind})")
        chunks: list[bytes] = []
        left = limit
        while left > 0:
            chunk = os.read(fd, min(left, 65536))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
