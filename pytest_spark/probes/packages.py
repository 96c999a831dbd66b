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
