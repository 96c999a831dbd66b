"""Installed distributions of the running Python, read from their metadata.

Metadata only: nothing is imported, so a broken CUDA wheel cannot crash the
pytest process while we look at it.
"""

from __future__ import annotations

import re
from typing import Any

_NORMALIZE = re.compile(r"[-_.]+")


def canonical(name: str) -> str:
    """PEP 503 name normalisation (``Flash_Attn`` -> ``flash-attn``)."""
    return _NORMALIZE.sub("-", name).lower()


#: a metadata file larger than this is refused unread: real ones are KBs to a
#: few MB (torch's RECORD), and importlib reads a file whole (a 3 GiB sparse
#: RECORD or METADATA made 24 GB of RSS, then the OOM killer)
META_LIMIT = 32 << 20

#: every metadata file importlib.metadata may open for what we ask of a
#: distribution: ``metadata``/``version`` (METADATA, PKG-INFO), ``requires``
#: (requires.txt when METADATA lists no requirement), ``files`` (RECORD,
#: installed-files.txt, SOURCES.txt)
META_FILES = ("METADATA", "PKG-INFO", "requires.txt", "RECORD", "installed-files.txt", "SOURCES.txt")


def not_regular(dist: Any, name: str) -> bool:
    """True when ``name`` in the distribution's metadata folder exists and is
    not a regular file, or is one over :data:`META_LIMIT`: importlib.metadata
    would ``open()`` it, and a FIFO named ``METADATA`` blocks that open forever
    (a device never ends), and it reads a file whole."""
    import os
    import stat

    folder = getattr(dist, "_path", None)
    if folder is None:
        return False
    try:
        st = os.stat(os.path.join(str(folder), name))
    except (OSError, TypeError, ValueError):  # missing: importlib says so its own way
        return False
    return not stat.S_ISREG(st.st_mode) or st.st_size > META_LIMIT


def unsafe(dist: Any, names: tuple[str, ...] = META_FILES) -> bool:
    """True when any of ``names`` is one importlib must not open (:func:`not_regular`)."""
    return any(not_regular(dist, name) for name in names)


def list_distributions(path: list[str] | None = None) -> dict[str, Any]:
    """``{"dists": {canonical: {name, version, requires, location}}, "errors": n}``.

    When two copies of a distribution are on ``sys.path`` the first wins, as
    for imports.
    """
    from importlib import metadata

    dists: dict[str, dict[str, Any]] = {}
    errors = 0
    found = metadata.distributions(path=path) if path is not None else metadata.distributions()
    for dist in found:
        if unsafe(dist, ("METADATA", "PKG-INFO", "requires.txt")):
            errors += 1  # never opened: see not_regular
            continue
        try:
            name = dist.metadata["Name"]
            if not name:
                continue
            key = canonical(name)
            if key in dists:
                continue
            dists[key] = {
                "name": name,
                "version": dist.version,
                "requires": list(dist.requires or []),
                "location": str(getattr(dist, "_path", "") or ""),
            }
        except Exception:  # a corrupt METADATA file must not stop the scan
            errors += 1
    return {"dists": dists, "errors": errors}
