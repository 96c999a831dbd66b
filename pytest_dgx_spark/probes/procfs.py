"""``/proc`` parsers (pure functions) and reads/writes of regular files that never block."""

from __future__ import annotations

import errno
import os
import re
import stat

from pytest_dgx_spark.outfile import kind_of

#: a minus sign is kept: a negative field is an impossible reading its check must see
_MEMINFO_LINE = re.compile(r"^([A-Za-z0-9_()]+):\s+(-?\d+)(?:\s+kB)?\s*$")
CONTAINER_CGROUP = re.compile(r"docker|containerd|kubepods|libpod|podman|lxc|crio|garden|buildkit")
_NONBLOCK = getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)


def parse_meminfo(text: str) -> dict[str, int]:
    """``/proc/meminfo`` -> ``{field: kB}``; lines that do not parse are ignored."""
    return {m.group(1): int(m.group(2)) for line in text.splitlines() if (m := _MEMINFO_LINE.match(line.strip()))}


def cgroup_runtime(text: str) -> str | None:
    """The container runtime named in ``/proc/1/cgroup``, or ``None`` (on cgroup v2 the file is
    just ``0::/`` inside most containers: ``None`` does not prove a bare host)."""
    m = CONTAINER_CGROUP.search(text)
    return m.group(0) if m else None


#: ``NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.95.05  Release Build …`` (open) or
#: ``NVRM version: NVIDIA UNIX aarch64 Kernel Module  550.120  Fri Sep 13 …`` (proprietary)
NVRM_LINE = re.compile(
    r"NVIDIA UNIX\s+(?:(?P<open>Open)\s+Kernel Module for\s+\S+|\S+\s+Kernel Module)\s+(?P<version>\d+(?:\.\d+)+)"
)


def module_of(text: str | None) -> tuple[str | None, str | None]:
    """``(version, "open"|"proprietary")`` of the loaded NVIDIA module, from ``/proc/driver/nvidia/version``
    (or its NVRM line); ``(None, None)`` when unrecognised. G1 (the stack) and G9 (the driver floor) read it."""
    m = NVRM_LINE.search(text or "")
    return (m["version"], "open" if m["open"] else "proprietary") if m else (None, None)


def parse_key_values(text: str) -> dict[str, str]:
    """``key="value"`` lines, as in ``/run/.containerenv`` and ``/etc/os-release``."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key and not key.startswith("#"):
            out[key.strip()] = value.strip().strip('"').strip("'")
    return out


def _open_regular(path: str | os.PathLike[str], flags: int) -> int:
    """An fd of the regular file at ``path``, opened with ``O_NONBLOCK`` (a FIFO opens at once,
    or fails with ENXIO for writing) and refused unless ``fstat`` says it is a regular file:
    a FIFO or device planted where ``/proc`` files should be would block or never end."""
    try:
        fd = os.open(path, flags | _NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # what O_NONBLOCK gives for a FIFO nobody reads
            raise OSError(errno.ENXIO, "not a regular file (a FIFO)") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, f"not a regular file ({kind_of(mode)})")
    except OSError:
        os.close(fd)
        raise
    return fd


def read_regular(path: str | os.PathLike[str], limit: int = 1 << 20) -> bytes:
    """At most ``limit`` bytes of a regular file, never blocking; :class:`OSError` with a quotable reason."""
    fd = _open_regular(path, os.O_RDONLY)
    try:
        chunks: list[bytes] = []
        left = limit
        while left > 0 and (chunk := os.read(fd, min(left, 65536))):
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def write_regular(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` into an existing regular file (``/proc/sys`` files are), never blocking."""
    fd = _open_regular(path, os.O_WRONLY)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
