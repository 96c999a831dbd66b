"""Installed distributions of the checked Python, from their metadata only: nothing is imported,
so a broken CUDA wheel cannot crash the pytest process while we look at it."""

from __future__ import annotations

import os
import re
import stat
from importlib import metadata
from typing import Any

_NORMALIZE = re.compile(r"[-_.]+")
#: a metadata file larger than this is refused unread: importlib reads a file whole (a 3 GiB
#: sparse RECORD made 24 GB of RSS, then the OOM killer); real ones are KBs to a few MB
META_LIMIT = 32 << 20
#: every metadata file importlib.metadata may open for what we ask (metadata, version, requires, files)
META_FILES = ("METADATA", "PKG-INFO", "requires.txt", "RECORD", "installed-files.txt", "SOURCES.txt")


def canonical(name: str) -> str:
    """PEP 503 name normalisation (``Flash_Attn`` -> ``flash-attn``)."""
    return _NORMALIZE.sub("-", name).lower()


def not_regular(dist: Any, name: str) -> bool:
    """``name`` in the metadata folder exists and is not a regular file (a FIFO named METADATA
    blocks importlib's ``open()`` forever), or is one over :data:`META_LIMIT`."""
    folder = getattr(dist, "_path", None)
    if folder is None:
        return False
    try:
        st = os.stat(os.path.join(str(folder), name))
    except (OSError, TypeError, ValueError):  # missing: importlib says so its own way
        return False
    return not stat.S_ISREG(st.st_mode) or st.st_size > META_LIMIT


def unsafe(dist: Any, names: tuple[str, ...] = META_FILES) -> bool:
    return any(not_regular(dist, name) for name in names)


def list_distributions(path: list[str] | None = None) -> dict[str, Any]:
    """``{"dists": {canonical: {name, version, requires, location}}, "errors": n}``; of two
    copies on the path the first wins, as for imports."""
    dists: dict[str, dict[str, Any]] = {}
    errors = 0
    for dist in metadata.distributions(path=path) if path is not None else metadata.distributions():
        if unsafe(dist, ("METADATA", "PKG-INFO", "requires.txt")):
            errors += 1  # never opened: see not_regular
            continue
        try:
            headers = _headers(dist)
            name = headers["Name"]
            if name and canonical(name) not in dists:
                requires = headers.get_all("Requires-Dist") or []
                if not requires and dist.read_text("requires.txt") is not None:  # an egg-info's
                    requires = list(dist.requires or [])
                dists[canonical(name)] = {
                    "name": name, "version": headers["Version"], "requires": list(requires),
                    "location": str(getattr(dist, "_path", "") or ""),
                }
        except Exception:  # a corrupt METADATA file must not stop the scan
            errors += 1
    return {"dists": dists, "errors": errors}


def _headers(dist: Any) -> Any:
    """The metadata's header fields, read once. ``dist.metadata`` parses the whole file, the long
    description too, and ``dist.version`` and ``dist.requires`` parse it again each: three full
    parses a distribution, some 1 ms, where an ML image has hundreds. The headers hold all we read
    (the same files, in the same order, as ``Distribution.metadata``)."""
    from email.parser import HeaderParser  # lazy: the torch child starts early, before a run reads this

    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or dist.read_text("") or ""
    return HeaderParser().parsestr(text)
