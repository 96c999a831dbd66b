"""Where a run keeps its probe answers, facts and check results: each computed once (threads of
the run wait for the one computing it), through a JSON round trip (a check sees what a replay sees)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from typing import Any


class MemoryStore:
    def __init__(self, values: Mapping[str, Any] | None = None) -> None:
        self._values: dict[str, Any] = dict(values or {})
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def get_or_compute(self, key: str, compute: Callable[[], Any]) -> Any:
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self._values:
                self._values[key] = json.loads(json.dumps(compute(), default=str))
            return self._values[key]

    def peek(self, key: str) -> Any:
        return self._values.get(key)

    def items(self) -> dict[str, Any]:
        """Every answer kept so far, by key (what ``--spark-capture`` records)."""
        with self._guard:
            return dict(self._values)
