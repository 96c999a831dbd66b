"""Parsers for ``/proc`` text: pure functions, tested on recorded files."""

from __future__ import annotations

import re

_MEMINFO_LINE = re.compile(r"^([A-Za-z0-9_()]+):\s+(\d+)(?:\s+kB)?\s*$")


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
