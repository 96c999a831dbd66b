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


def not_regular(dist: Any, name: str) -> bool:
    """True when ``name`` in the distribution's metadata folder exists and is
    not a regular file: importlib.metadata would ``open()`` it, and a FIFO
    named ``METADATA`` blocks that open forever (a device never ends)."""
    import os
    import stat

    folder = getattr(dist, "_path", None)
    if folder is None:
        return False
    try:
        return not stat.S_ISREG(os.stat(os.path.join(str(folder), name)).st_mode)
    except (OSError, TypeError, ValueError):  # missing: importlib says so its own way
        return False


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
        if not_regular(dist, "METADATA") or not_regular(dist, "PKG-INFO"):
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
