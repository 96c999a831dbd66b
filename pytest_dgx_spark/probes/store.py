"""Where probe answers and check results are kept for one run.

Without xdist a dict is enough. Under xdist every worker runs its own plugin,
so answers go to files in a folder the controller made for this run, each
guarded by an ``flock``: the first worker to need a probe runs it, the
others wait and read its answer (the pattern of xdist's docs, "Making
session-scoped fixtures execute only once", without a filelock dependency).

Values always take a JSON round trip, so a check sees the same types with
and without xdist.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _roundtrip(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


class MemoryStore:
    def __init__(self) -> None:
        self._values: dict[str, Any] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def _lock(self, key: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())

    def get_or_compute(self, key: str, compute: Callable[[], Any]) -> Any:
        with self._lock(key):
            if key not in self._values:
                self._values[key] = _roundtrip(compute())
            return self._values[key]

    def peek(self, key: str) -> Any:
        return self._values.get(key)

    def items(self) -> dict[str, Any]:
        """Every answer kept so far, by key (what ``--spark-capture`` records)."""
        with self._guard:
            return dict(self._values)


class SharedStore(MemoryStore):
    """A :class:`MemoryStore` backed by a folder shared between processes."""

    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    def _file(self, key: str) -> Path:
        digest = hashlib.sha1(key.encode()).hexdigest()[:16]
        safe = "".join(c if c.isalnum() else "_" for c in key)[:40]
        return self.folder / f"{safe}-{digest}"

    def get_or_compute(self, key: str, compute: Callable[[], Any]) -> Any:
        with self._lock(key):
            if key in self._values:
                return self._values[key]
            base = self._file(key)
            value_file = base.with_suffix(".json")
            with open(base.with_suffix(".lock"), "a+") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                try:
                    if value_file.exists():
                        value = json.loads(value_file.read_text(encoding="utf-8"))["v"]
                    else:
                        value = _roundtrip(compute())
                        tmp = value_file.with_suffix(".tmp")
                        tmp.write_text(json.dumps({"k": key, "v": value}, default=str), encoding="utf-8")
                        tmp.replace(value_file)
                finally:
                    fcntl.flock(lock, fcntl.LOCK_UN)
            self._values[key] = value
            return value

    def peek(self, key: str) -> Any:
        if key in self._values:
            return self._values[key]
        value_file = self._file(key).with_suffix(".json")
        try:
            return json.loads(value_file.read_text(encoding="utf-8"))["v"]
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def items(self) -> dict[str, Any]:
        """Every answer any process of the run has written to the folder."""
        out = super().items()
        for value_file in sorted(self.folder.glob("*.json")):
            try:
                entry = json.loads(value_file.read_text(encoding="utf-8"))
                out.setdefault(str(entry["k"]), entry["v"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
        return out
