"""The shape of the code, checked on its syntax tree (issue 9, "Done when").

- No function in ``pytest_dgx_spark/`` is longer than :data:`MAX_LINES` lines,
  probe scripts under ``pytest_dgx_spark/probes/scripts/`` included (their ``main``
  runs in a child process but is read and changed like any other function).
  A long decision is split into named stages; only a declarative table may be
  longer, and then it is listed in :data:`ALLOWED` with its reason.
- No import cycle among the modules of ``pytest_dgx_spark``. The rule:

  1. Module-level imports (run when the module is imported; ``if
     TYPE_CHECKING:`` blocks excluded, they never run) form no cycle.
  2. A function-level (lazy) import ``A -> B`` is allowed only when ``B`` does
     not reach ``A`` through module-level imports: such a lazy import is the
     back half of a cycle, just deferred (``options`` reaching ``settings``
     lazily while ``settings`` imports ``options`` was one).

  Lazy imports are otherwise fine, and wanted: they keep plain pytest runs
  light. ``from pytest_dgx_spark import x`` counts as an import of
  ``pytest_dgx_spark.x`` when ``x`` is a module; a package's ``__init__`` that a
  submodule import runs implicitly is not an edge.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import pytest_dgx_spark

PACKAGE = Path(pytest_dgx_spark.__file__).parent
MAX_LINES = 80

#: "module:function" -> why it may be longer (declarative tables only)
ALLOWED: dict[str, str] = {}


def _sources() -> Iterator[tuple[str, Path]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield ".".join(parts), path


MODULES = {name: path for name, path in _sources()}


@functools.cache
def _parse(source: str) -> ast.Module:
    """Each module parsed once per process: the checks below walk the same trees (never changed)."""
    return ast.parse(source)


@functools.cache
def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def long_functions() -> list[str]:
    """``module:function (N lines)`` for every function over the limit, decorators included."""
    out = []
    for module, path in MODULES.items():
        for fn in _functions(_parse(_text(path))):
            first = min([fn.lineno, *(d.lineno for d in fn.decorator_list)])
            length = (fn.end_lineno or fn.lineno) - first + 1
            key = f"{module}:{fn.name}"
            if length > MAX_LINES and key not in ALLOWED:
                out.append(f"{key} ({length} lines)")
    return out


def test_no_function_over_80_lines() -> None:
    assert long_functions() == []


def test_the_allow_list_names_real_functions_with_a_reason() -> None:
    """A stale entry would let the next long function in under its name."""
    for key, why in ALLOWED.items():
        module, _, name = key.partition(":")
        tree = _parse(_text(MODULES[module]))
        assert name in {fn.name for fn in _functions(tree)}, key
        assert len(why) > 10, key


def test_the_line_count_sees_a_long_function() -> None:
    """The walk itself: an 81-line function is found, an 80-line one is not."""
    body = "\n".join(f"    x{i} = {i}" for i in range(79))
    tree = ast.parse(f"def long():\n{body}\n    return 0\n\ndef short():\n    return 1\n")
    lengths = {fn.name: fn.end_lineno - fn.lineno + 1 for fn in _functions(tree)}
    assert lengths == {"long": 81, "short": 2}


# --------------------------------------------------------------------------- imports


def _resolve(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    is_package = MODULES[module].name == "__init__.py"
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> set[str]:
    if isinstance(node, ast.Import):
        names = {alias.name for alias in node.names}
    else:
        source = _resolve(module, node)
        names = {f"{source}.{alias.name}" for alias in node.names}
        names = {n if n in MODULES else source for n in names}
    found = set()
    for name in names:
        while name and name not in MODULES:  # pytest_dgx_spark.x.attr -> pytest_dgx_spark.x
            name = name.rpartition(".")[0]
        if name and name != module:
            found.add(name)
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk_imports(module: str, nodes: list[ast.stmt], lazy: bool, out: dict[str, set[str]]) -> None:
    for node in nodes:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out["lazy" if lazy else "eager"] |= _targets(module, node)
        elif isinstance(node, ast.If) and _is_type_checking(node):
            _walk_imports(module, node.orelse, lazy, out)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            _walk_imports(module, list(ast.iter_child_nodes(node)), True, out)  # type: ignore[arg-type]
        else:
            _walk_imports(module, list(ast.iter_child_nodes(node)), lazy, out)  # type: ignore[arg-type]


def import_graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(module-level edges, function-level edges) between pytest_dgx_spark modules."""
    eager: dict[str, set[str]] = {}
    lazy: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        out: dict[str, set[str]] = {"eager": set(), "lazy": set()}
        _walk_imports(module, _parse(_text(path)).body, False, out)
        eager[module] = out["eager"]
        lazy[module] = out["lazy"] - out["eager"]
    return eager, lazy


def _path(graph: dict[str, set[str]], start: str, goal: str) -> list[str] | None:
    """One path start -> ... -> goal through ``graph``, or None."""
    seen = {start}
    stack = [[start]]
    while stack:
        path = stack.pop()
        for nxt in sorted(graph.get(path[-1], ())):
            if nxt == goal:
                return [*path, nxt]
            if nxt not in seen:
                seen.add(nxt)
                stack.append([*path, nxt])
    return None


def cycles(eager: dict[str, set[str]], lazy: dict[str, set[str]]) -> list[str]:
    found = []
    for module in sorted(eager):
        for target in sorted(eager[module]):
            back = _path(eager, target, module)
            if back:
                found.append("module-level: " + " -> ".join([module, *back]))
        for target in sorted(lazy[module]):
            back = _path(eager, target, module)
            if back:
                found.append("lazy import closes a cycle: " + " -> ".join([module, *back]))
    return found


def test_no_import_cycles() -> None:
    eager, lazy = import_graph()
    assert "pytest_dgx_spark.options" in eager["pytest_dgx_spark.settings"]  # the walk sees imports at all
    assert cycles(eager, lazy) == []


def test_the_cycle_finder_sees_both_kinds() -> None:
    eager = {"a": {"b"}, "b": {"c"}, "c": set(), "d": set()}
    assert cycles(eager, {"a": set(), "b": set(), "c": {"a"}, "d": {"a"}}) == [
        "lazy import closes a cycle: c -> a -> b -> c"
    ]
    eager["c"] = {"a"}
    assert len(cycles(eager, {k: set() for k in eager})) == 3  # a->b->c->a seen from each module


# --------------------------------------------------------------------------- "and N more"

#: a count of what was left out, written by hand: ``{len(x) - 3} more``, ``(+{n - 1} more)``, or a
#: list cut with an ellipsis instead of a count: ``{'; …' if len(parts) > 2 else ''}``
HAND_WRITTEN_MORE = re.compile(r"\{[^{}]*\s-\s*[^{}]+\}\s*more\b|…['\"]\s*if\s+len\(")
#: (module, why) for a count that is not the "first N" rule
OWN_WORDING = {
    "pytest_dgx_spark.checks.g10_multinode.jobs": "'; 2 more in the details': the rest are in the details, not left out",
}


def test_lists_are_shortened_by_the_kit_only() -> None:
    """``kit.first_n`` / ``kit.shortened`` ("a; b; c; and 4 more") and
    ``kit.plus_more`` ("a (+3 more)") are the one rule for a shortened list;
    a check that writes its own count drifts from it."""
    found = []
    for module, path in MODULES.items():
        if module in ("pytest_dgx_spark.checks.kit", "pytest_dgx_spark.safe_text"):  # the rule's own home
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if HAND_WRITTEN_MORE.search(line) and module not in OWN_WORDING:
                found.append(f"{module}:{number}: {line.strip()}")
    assert found == []
    assert HAND_WRITTEN_MORE.search('f"{head} (+{len(heads) - 1} more)"')
    assert HAND_WRITTEN_MORE.search("f'and {len(hits) - SHOWN} more'")
    assert HAND_WRITTEN_MORE.search('more = f" (+{dists - 1} more)" if dists > 1 else ""')  # G1 had this one
    assert HAND_WRITTEN_MORE.search("f\"({'; '.join(parts[:2])}{'; …' if len(parts) > 2 else ''})\"")
    assert not HAND_WRITTEN_MORE.search('f"{first_n(texts, 2)}; {body}"')


def test_the_kit_rules() -> None:
    from pytest_dgx_spark.checks.kit import first_n, plus_more, shortened

    assert first_n(["a", "", "b", "c", "d", "e"]) == "a; b; c; and 2 more"
    assert first_n(["x", "y"], 1, sep=" ") == "x and 1 more"
    assert shortened(["a", "b", "c"], 2) == ["a", "b", "and 1 more"]
    assert shortened(["a", "b"], 2) == ["a", "b"]
    assert plus_more("a", 1) == "a" and plus_more("a", 4) == "a (+3 more)"


# --------------------------------------------------------------------------- the check contract

#: what reads the machine (or the clock): a name, or ``receiver.attribute``
IMPURE_NAMES = frozenset(
    {"ctx", "machine", "open", "subprocess", "socket", "urllib", "ctypes", "importlib", "shutil", "environ", "getenv"}
)
IMPURE_ATTRS = frozenset(
    {"read_text", "read_bytes", "write_text", "write_bytes", "iterdir", "glob", "rglob", "exists", "is_file", "is_dir"}
)
IMPURE_CALLS = frozenset(
    {"os.environ", "os.getenv", "os.listdir", "os.scandir", "os.stat", "os.walk", "os.path.exists", "os.path.isfile"}
    | {"os.path.isdir", "os.path.getsize", "os.path.realpath", "time.time", "time.monotonic", "time.sleep", "Path"}
)


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else ""
    return ""


class _Module:
    """One module's top-level functions and classes, and what its names import."""

    def __init__(self, name: str, source: str, known: set[str]) -> None:
        self.name = name
        self.known = known
        tree = _parse(source)
        self.functions: dict[str, ast.AST] = {}
        self.imports: dict[str, str] = {}  # local name -> "module" or "module:attr"
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.functions[node.name] = node
            elif isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    self.imports[alias.asname or alias.name] = full if full in known else f"{node.module}:{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    self.imports[alias.asname or alias.name.split(".")[0]] = alias.name


def impure_reach(sources: dict[str, str], start: str) -> tuple[list[str], set[str]]:
    """``module:function:line: what`` for each machine read reachable from
    ``start`` ("module:function"), following calls into our own modules
    (``sources``: module name -> its text); and every function it reached."""
    modules = {name: _Module(name, text, set(sources)) for name, text in sources.items()}
    seen: set[str] = set()
    todo = [start]
    found: list[str] = []
    while todo:
        key = todo.pop()
        if key in seen:
            continue
        seen.add(key)
        mod_name, _, fn_name = key.partition(":")
        mod = modules.get(mod_name)
        node = mod.functions.get(fn_name) if mod else None
        if mod is None or node is None:
            continue
        for sub in ast.walk(node):
            dotted = _dotted(sub) if isinstance(sub, (ast.Name, ast.Attribute)) else ""
            bad = (
                (isinstance(sub, ast.Name) and sub.id in IMPURE_NAMES)
                or (isinstance(sub, ast.Attribute) and (sub.attr in IMPURE_ATTRS or dotted in IMPURE_CALLS))
                or (isinstance(sub, ast.Name) and sub.id in IMPURE_CALLS)
            )
            if bad:
                found.append(f"{key}:{sub.lineno}: {dotted}")
            if isinstance(sub, ast.Import):
                names = [alias.name for alias in sub.names]
            elif isinstance(sub, ast.ImportFrom) and sub.module:
                names = [sub.module]
                for alias in sub.names:  # a lazy import: its names are followed like the module's own
                    full = f"{sub.module}.{alias.name}"
                    mod.imports[alias.asname or alias.name] = full if full in mod.known else f"{sub.module}:{alias.name}"
            else:
                names = []
            found += [f"{key}:{sub.lineno}: imports {n}" for n in names if n.split(".")[0] in IMPURE_NAMES]
            if isinstance(sub, ast.Name):
                if sub.id in mod.functions:
                    todo.append(f"{mod_name}:{sub.id}")
                    node_def = mod.functions[sub.id]
                    if isinstance(node_def, ast.ClassDef):  # a class used: all of its methods
                        todo += [f"{mod_name}:{sub.id}.{m.name}" for m in node_def.body if isinstance(m, ast.FunctionDef)]
                        mod.functions.update(
                            {f"{sub.id}.{m.name}": m for m in node_def.body if isinstance(m, ast.FunctionDef)}
                        )
                elif ":" in mod.imports.get(sub.id, ""):
                    todo.append(mod.imports[sub.id])
            elif isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name):
                target = mod.imports.get(sub.value.id, "")
                if target in modules:
                    todo.append(f"{target}:{sub.attr}")
    return sorted(set(found)), {k for k in seen if k.partition(":")[0] in modules}


def _check_modules() -> list[str]:
    from pytest_dgx_spark import catalog

    return [f"pytest_dgx_spark.checks.{spec.module}.check" for spec in catalog.CHECKS]


@pytest.mark.parametrize("module", _check_modules())
def test_every_check_has_the_one_shape(module: str) -> None:
    """``FACTS`` (a FactsBase dataclass), ``gather(ctx: CheckContext) -> Facts``
    and ``evaluate(facts: Facts, params: Params) -> Result``, and no other way
    in (the old ``run(ctx)`` is gone)."""
    import dataclasses
    import importlib
    import inspect

    from pytest_dgx_spark.checks.kit import FactsBase

    mod = importlib.import_module(module)
    assert dataclasses.is_dataclass(mod.FACTS) and issubclass(mod.FACTS, FactsBase)
    gather, evaluate = inspect.signature(mod.gather), inspect.signature(mod.evaluate)
    assert [(p.name, p.annotation) for p in gather.parameters.values()] == [("ctx", "CheckContext")]
    assert gather.return_annotation == "Facts" and mod.FACTS.__name__ == "Facts"
    assert [(p.name, p.annotation) for p in evaluate.parameters.values()] == [("facts", "Facts"), ("params", "Params")]
    assert evaluate.return_annotation == "Result"
    assert not hasattr(mod, "run")


@pytest.mark.parametrize("module", _check_modules())
def test_evaluate_reads_no_machine(module: str) -> None:
    """Nothing ``evaluate`` reaches (its module's helpers, and ours it calls)
    opens a file, runs a program, reads the environment or the clock: that is
    what lets a replay decide anywhere."""
    sources = {name: _text(path) for name, path in MODULES.items()}
    found, reached = impure_reach(sources, f"{module}:evaluate")
    assert found == []
    assert len(reached) > 3, reached  # the walk follows evaluate into its stages


def test_the_purity_walk_sees_a_machine_read_two_calls_away() -> None:
    sources = {
        "pytest_dgx_spark.checks.fake": (
            "from pytest_dgx_spark.probes import helper\n"
            "def evaluate(facts, params):\n    return _stage(facts)\n"
            "def _stage(facts):\n    from pytest_dgx_spark.probes.other import peek\n    return helper.read(facts) + peek()\n"
        ),
        "pytest_dgx_spark.probes.helper": "import os\ndef read(f):\n    return os.environ.get('X')\n",
        "pytest_dgx_spark.probes.other": "def peek():\n    return open('/proc/meminfo').read()\n",
    }
    found, reached = impure_reach(sources, "pytest_dgx_spark.checks.fake:evaluate")
    assert found == ["pytest_dgx_spark.probes.helper:read:3: os.environ", "pytest_dgx_spark.probes.other:peek:2: open"]
    assert "pytest_dgx_spark.checks.fake:_stage" in reached
