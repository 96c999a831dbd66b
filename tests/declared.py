"""What a check's own test module declares for the shared parts of the suite, so that adding a check
adds its package, its test file and its docs row, and edits no shared test or double.

A check's test module (``tests/test_g<NN>_<name>.py``) may hold, at its top level, literals (read
here with :func:`ast.literal_eval`, never by importing the module):

- ``FINDING_EXAMPLES = {code: {"facts": {...}, "params": {...}, "line": "..."}}``: an example of each
  of its finding codes (tests/test_finding_codes.py);
- ``GB10_FILES = {"proc/swaps": "..."}``: the files its check reads on a healthy DGX Spark, planted
  in every GB10 double's machine root (tests/doubles/gb10.py).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parent


def literal_in(path: Path, name: str) -> Iterator[tuple[str, Any]]:
    """The items of the top-level ``name = {...}`` literal of a module (none when it has none)."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else (
            node.target if isinstance(node, ast.AnnAssign) else None)  # fmt: skip
        if isinstance(target, ast.Name) and target.id == name and node.value is not None:
            try:
                value = ast.literal_eval(node.value)
            except ValueError as exc:
                raise AssertionError(f"{path.name}: {name} must be a literal ({exc})") from exc
            assert isinstance(value, dict), f"{path.name}: {name} must be a dict"
            yield from value.items()


@cache
def by_checks(name: str) -> dict[str, Any]:
    """Every check test module's ``name`` literal, merged; a key declared twice is an error."""
    out: dict[str, Any] = {}
    for path in sorted(TESTS.glob("test_g[0-9]*.py")):
        for key, value in literal_in(path, name):
            assert key not in out, f"{path.name}: {name}[{key!r}] is declared twice"
            out[key] = value
    return out
