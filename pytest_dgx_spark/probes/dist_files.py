"""Which installed distribution put a shared object on disk ("flash-attn 2.7.4 links CUDA 12" is
a fix the user can act on), from each distribution's file list; nothing is imported. Only
shared-object entries are kept, so the map stays small."""

from __future__ import annotations

import csv
import itertools
import os
from collections.abc import Iterable, Iterator
from importlib import metadata
from typing import Any

from pytest_dgx_spark.probes.elf import is_shared_object_name
from pytest_dgx_spark.probes.machine import MachineLike
from pytest_dgx_spark.probes.packages import not_regular, unsafe


def _texts(dist: Any, names: tuple[str, ...]) -> Iterator[tuple[str, str]]:
    """``(name, text)`` of each of ``names`` the metadata folder holds as a readable, non-empty regular file."""
    for name in names:
        try:
            text = None if not_regular(dist, name) else dist.read_text(name)
        except Exception:
            text = None
        if text:
            yield name, text


def _entries(dist: Any) -> tuple[str, list[str]]:
    """``(base folder, relative paths of shared objects)`` from a distribution's file list."""
    base = str(dist.locate_file(""))
    for name, text in _texts(dist, ("RECORD", "installed-files.txt")):
        lines = [ln for ln in text.splitlines() if ".so" in ln]
        if name == "RECORD":
            return base, [row[0] for row in csv.reader(lines) if row and is_shared_object_name(os.path.basename(row[0]))]
        egg = str(getattr(dist, "_path", base))  # installed-files.txt is relative to the .egg-info folder
        return base, [os.path.join(egg, ln.strip()) for ln in lines if is_shared_object_name(os.path.basename(ln))]
    if unsafe(dist, ("RECORD", "installed-files.txt", "SOURCES.txt")):
        return base, []  # dist.files would open the FIFO or read the huge file _texts refused
    return base, [str(f) for f in getattr(dist, "files", None) or [] if is_shared_object_name(os.path.basename(str(f)))]


def name_version(dist: Any) -> tuple[str | None, str | None]:
    """``Name`` and ``Version`` from the head of METADATA (parsing it all as e-mail costs more than the scan)."""
    for _fname, text in _texts(dist, ("METADATA", "PKG-INFO")):
        head: dict[str, str] = {}
        for line in itertools.takewhile(str.strip, text.splitlines()):  # the header ends at a blank line
            key, sep, value = line.partition(":")
            if sep:
                head.setdefault(key, value.strip())
        return head.get("Name"), head.get("Version")
    return None, None


def import_hint(rel: str) -> str | None:
    """The top-level import name of a file: ``vllm/_C.abi3.so`` -> ``vllm``,
    ``flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so`` -> ``flash_attn_2_cuda``."""
    rel = rel.replace("\\", "/")
    first = rel.split("/", 1)[0]
    name = first if "/" in rel else first.split(".", 1)[0]
    return name if name.isidentifier() else None


def shared_object_owners(roots: Iterable[str]) -> dict[str, Any]:
    """``{"owners": {realpath: {"name", "version", "hint"}}, "dists": n, "errors": n}``; the first
    distribution on the path that lists a file owns it (as for imports)."""
    owners: dict[str, dict[str, Any]] = {}
    count = errors = 0
    for dist in metadata.distributions(path=list(roots)):
        try:
            name, version = name_version(dist)
            if not name:
                continue
            count += 1
            base, rels = _entries(dist)
            real_base = os.path.realpath(base)
            for rel in rels:
                path = os.path.normpath(os.path.join(real_base, rel))
                owners.setdefault(path, {"name": name, "version": version, "hint": import_hint(rel)})
        except Exception:  # one corrupt dist-info must not hide the others
            errors += 1
    return {"owners": owners, "dists": count, "errors": errors}


def owners_for(machine: MachineLike, roots: Iterable[str]) -> dict[str, Any]:
    """:func:`shared_object_owners` once per run, through the machine's store."""
    roots = list(roots)
    return machine.store.get_or_compute("elf:owners", lambda: shared_object_owners(roots))
