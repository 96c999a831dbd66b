"""Which environment variables the code reads, found in its source (``ast``).

The suite's scrub list (:mod:`hermetic`) must cover every variable a check
or probe reads, or a test's result depends on the machine that runs it (an
ML image exports ``TORCH_CUDA_ARCH_LIST=9.0a`` and G7 warns in every GB10
test). Written by hand, that list drifts from the code; this module derives
the reads from the code, and ``tests/test_hermetic.py`` fails when the list
does not cover one.

What counts as a read, on an environment mapping (``os.environ``, any name
or attribute called ``env``/``environ``, as the code passes ``machine.env``
around):

* ``env.get(K)``, ``env[K]``, ``K in env``, ``os.getenv(K)``: ``K`` a
  literal, a module constant (also imported: ``mn.LAUNCHER_ENV``), a loop
  variable over a tuple of them, a local assigned from literals, or a
  parameter whose callers pass literals;
* a scan of the whole mapping (``for k in env``, ``env.items()`` in a loop
  or comprehension): the ``startswith``/``endswith`` literals and the module
  regexes (``ENV_PATTERN.match(k)``) tested on its keys become prefixes,
  suffixes and patterns. Every scan is listed, so a new one gets reviewed.

A read this module cannot resolve is reported as ``unresolved`` (the test
fails on it): a read nobody can see is one no test controls.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

#: names and attributes that hold an environment mapping in this code base
ENV_HOLDERS = frozenset({"env", "environ", "its_env"})
#: functions that read one variable of the mapping they are given (``kit.said(env, "NAME")``, G10's
#: ``count_of``): a call is a read of its second argument, resolved where it is called; their own
#: bodies are not reads
ACCESSORS = frozenset({"said", "count_of"})
ACCESSOR_BODIES = frozenset(
    {"pytest_dgx_spark/checks/kit.py:said", "pytest_dgx_spark/checks/g10_multinode/facts.py:count_of"}
)
#: the shape of a variable name in a string constant of a local assignment
VAR_SHAPE = re.compile(r"^[A-Z][A-Z0-9_]*$")


@dataclass
class Scan:
    """A loop or comprehension over a whole environment mapping."""

    where: str  # "pytest_dgx_spark/probes/fleet.py:fingerprint"
    line: int
    prefixes: set[str] = field(default_factory=set)
    suffixes: set[str] = field(default_factory=set)
    patterns: set[str] = field(default_factory=set)  # regex sources tested on the keys
    calls: set[str] = field(default_factory=set)  # functions the keys are handed to
    names: set[str] = field(default_factory=set)  # keys compared with ``==``


@dataclass
class Reads:
    names: dict[str, set[str]] = field(default_factory=dict)  # name -> where read
    scans: list[Scan] = field(default_factory=list)
    unresolved: list[str] = field(default_factory=list)

    def all_names(self) -> set[str]:
        """The names read one by one and those a scan compares keys with."""
        return set(self.names) | {n for s in self.scans for n in s.names}

    def add(self, name: str, where: str) -> None:
        self.names.setdefault(name, set()).add(where)

    @property
    def prefixes(self) -> set[str]:
        return {p for s in self.scans for p in s.prefixes}

    @property
    def suffixes(self) -> set[str]:
        return {p for s in self.scans for p in s.suffixes}

    @property
    def patterns(self) -> set[str]:
        return {p for s in self.scans for p in s.patterns}


def _module_name(package_root: Path, path: Path) -> str:
    rel = path.relative_to(package_root.parent).with_suffix("")
    return ".".join(rel.parts).removesuffix(".__init__")


class _Modules:
    """Module-level constants and imports of every module of the package."""

    def __init__(self, package_root: Path) -> None:
        self.root = package_root
        self.trees: dict[str, ast.Module] = {}
        self.paths: dict[str, Path] = {}
        for path in sorted(package_root.rglob("*.py")):
            name = _module_name(package_root, path)
            self.trees[name] = ast.parse(path.read_text(), str(path))
            self.paths[name] = path
        self.constants: dict[str, dict[str, ast.expr]] = {}
        self.aliases: dict[str, dict[str, str]] = {}  # module -> alias -> module
        self.imported: dict[str, dict[str, tuple[str, str]]] = {}  # module -> name -> (module, name)
        for mod, tree in self.trees.items():
            consts: dict[str, ast.expr] = {}
            aliases: dict[str, str] = {}
            imported: dict[str, tuple[str, str]] = {}
            for node in tree.body:
                if isinstance(node, ast.Assign):
                    for target in node.targets:
                        if isinstance(target, ast.Name):
                            consts[target.id] = node.value
                elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
                    consts[node.target.id] = node.value
                elif isinstance(node, ast.ImportFrom) and node.module:
                    for a in node.names:
                        full = f"{node.module}.{a.name}"
                        if full in self.trees:
                            aliases[a.asname or a.name] = full
                        else:
                            imported[a.asname or a.name] = (node.module, a.name)
                elif isinstance(node, ast.Import):
                    for a in node.names:
                        if a.name in self.trees:
                            aliases[a.asname or a.name] = a.name
            self.constants[mod], self.aliases[mod], self.imported[mod] = consts, aliases, imported

    def constant(self, mod: str, node: ast.expr, depth: int = 0) -> tuple[str, ast.expr] | None:
        """The module and value of the constant ``node`` names (``X``, ``mn.X``)."""
        if depth > 8:
            return None
        if isinstance(node, ast.Name):
            if node.id in self.constants.get(mod, {}):
                return mod, self.constants[mod][node.id]
            if node.id in self.imported.get(mod, {}):
                src, name = self.imported[mod][node.id]
                return self.constant(src, ast.Name(id=name), depth + 1)
            return None
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            target = self.aliases.get(mod, {}).get(node.value.id)
            if target is not None:
                return self.constant(target, ast.Name(id=node.attr), depth + 1)
        return None


def _called(f: ast.expr) -> str:
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def _is_env(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id in ENV_HOLDERS
    if isinstance(node, ast.Attribute):
        return node.attr in ENV_HOLDERS
    return False


def _scanned(node: ast.expr) -> bool:
    """``env``, ``env.items()``/``keys()``, ``list(env)``, ``sorted(env.items())``."""
    if _is_env(node):
        return True
    if isinstance(node, ast.Call):
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr in ("items", "keys") and _is_env(f.value):
            return True
        if isinstance(f, ast.Name) and f.id in ("list", "sorted", "tuple") and node.args:
            return _scanned(node.args[0])
    return False


class _Reader(ast.NodeVisitor):
    def __init__(self, mods: _Modules, mod: str, out: Reads) -> None:
        self.mods, self.mod, self.out = mods, mod, out
        self.rel = mods.paths[mod].relative_to(mods.root.parent).as_posix()
        self.funcs: list[ast.FunctionDef | ast.AsyncFunctionDef] = []
        self.loops: list[tuple[ast.expr, ast.expr]] = []  # (target, iter), innermost last

    # ------------------------------------------------------------------ scopes

    def where(self) -> str:
        return f"{self.rel}:{self.funcs[-1].name if self.funcs else '<module>'}"

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.funcs.append(node)
        self.generic_visit(node)
        self.funcs.pop()

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_For(self, node: ast.For) -> None:
        self.visit(node.iter)
        if _scanned(node.iter):
            self._scan(node, [*node.body, *node.orelse])
        self.loops.append((node.target, node.iter))
        for child in [*node.body, *node.orelse]:
            self.visit(child)
        self.loops.pop()

    def _comprehension(self, node: ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp) -> None:
        pushed = 0
        for gen in node.generators:
            self.visit(gen.iter)
            if _scanned(gen.iter):
                self._scan(node, [*gen.ifs, *([node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt])])
            self.loops.append((gen.target, gen.iter))
            pushed += 1
            for cond in gen.ifs:
                self.visit(cond)
        if isinstance(node, ast.DictComp):
            self.visit(node.key)
            self.visit(node.value)
        else:
            self.visit(node.elt)
        del self.loops[len(self.loops) - pushed :]

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comprehension  # type: ignore[assignment]

    # ------------------------------------------------------------------ reads

    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        if (isinstance(f, ast.Attribute) and f.attr == "get" and _is_env(f.value) and node.args) or ((
            (isinstance(f, ast.Attribute)
            and f.attr == "getenv")
            or (isinstance(f, ast.Name)
            and f.id == "getenv")
        ) and node.args):
            self._read(node.args[0])
        elif isinstance(f, (ast.Name, ast.Attribute)) and _called(f) in ACCESSORS and len(node.args) > 1 \
                and _is_env(node.args[0]):  # fmt: skip
            self._read(node.args[1])  # ``said(env, K)`` reads K where it is called
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.ctx, ast.Load) and _is_env(node.value):
            self._read(node.slice)
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        for op, right in zip(node.ops, node.comparators, strict=True):
            if isinstance(op, (ast.In, ast.NotIn)) and _is_env(right):
                self._read(node.left)
        self.generic_visit(node)

    def _read(self, key: ast.expr) -> None:
        if self.where() in ACCESSOR_BODIES:  # the accessor's own ``env.get(name)``: read at its callers
            return
        names = self._resolve(key)
        if names is None:
            self.out.unresolved.append(f"{self.where()} line {key.lineno}: {ast.unparse(key)}")
            return
        for name in names:
            self.out.add(name, self.where())

    # ------------------------------------------------------------------ resolving a key

    def _resolve(self, key: ast.expr) -> set[str] | None:
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            return {key.value}
        if isinstance(key, ast.Name):
            for target, iterable in reversed(self.loops):
                names = target.elts if isinstance(target, ast.Tuple) else [target]
                if any(isinstance(e, ast.Name) and e.id == key.id for e in names):
                    return None if _scanned(iterable) else self._sequence(iterable)
            local = self._local(key.id)
            if local is not None:
                return local
        return self._constant(key)

    def _constant(self, node: ast.expr) -> set[str] | None:
        """The strings of the module constant ``node`` names, read where it is defined."""
        found = self.mods.constant(self.mod, node)
        if found is not None:
            return _Reader(self.mods, found[0], self.out)._sequence(found[1])
        return None

    def _local(self, name: str) -> set[str] | None:
        """A name the enclosing function assigns (variable-shaped literals of
        the value) or takes as a parameter (literals its callers pass)."""
        if not self.funcs:
            return None
        func = self.funcs[-1]
        values = [
            n.value
            for n in ast.walk(func)
            if isinstance(n, ast.Assign)
            and any((isinstance(t, ast.Name) and t.id == name) or _binds(t, name) for t in n.targets)
        ]
        if values:
            if len(values) == 1 and not isinstance(values[0], (ast.Tuple, ast.IfExp)):
                seq = self._sequence(values[0])
                if seq is not None:
                    return seq
            return {
                c.value
                for v in values
                for c in ast.walk(v)
                if isinstance(c, ast.Constant) and isinstance(c.value, str) and VAR_SHAPE.match(c.value)
            } or None
        params = [a.arg for a in (*func.args.posonlyargs, *func.args.args)]
        if name in params:
            index = params.index(name)
            passed: set[str] = set()
            # every module: the probe scripts are joined into one child's source
            calls = (c for tree in self.mods.trees.values() for c in ast.walk(tree))
            for call in calls:
                if (
                    isinstance(call, ast.Call)
                    and isinstance(call.func, ast.Name)
                    and call.func.id == func.name
                    and len(call.args) > index
                ):
                    arg = call.args[index]
                    if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
                        return None
                    passed.add(arg.value)
            return passed or None
        return None

    def _sequence(self, node: ast.expr) -> set[str] | None:
        """The strings a tuple/list/set (of literals, constants, ``*CONSTANTS``) holds."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return {node.value}
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            out: set[str] = set()
            for elt in node.elts:
                part = self._sequence(elt.value if isinstance(elt, ast.Starred) else elt)
                if part is None:
                    return None
                out |= part
            return out
        copies = ("sorted", "list", "tuple", "set", "frozenset")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in copies and node.args:
            return self._sequence(node.args[0])
        if isinstance(node, ast.Name):
            local = self._local(node.id) if self.funcs else None
            if local is not None:
                return local
        return self._constant(node)

    # ------------------------------------------------------------------ whole-mapping scans

    def _scan(self, node: ast.AST, body: list[ast.AST]) -> None:
        scan = Scan(self.where(), getattr(node, "lineno", 0))
        for part in body:
            for n in ast.walk(part):
                if not isinstance(n, ast.Call):
                    continue
                f = n.func
                if isinstance(f, ast.Attribute) and f.attr in ("startswith", "endswith") and n.args:
                    lits = self._sequence(n.args[0]) or set()
                    (scan.prefixes if f.attr == "startswith" else scan.suffixes).update(lits)
                elif isinstance(f, ast.Attribute) and f.attr in ("match", "search", "fullmatch"):
                    found = self.mods.constant(self.mod, f.value)
                    if found is not None:
                        scan.patterns.add(_regex_source(found[1]))
                elif isinstance(f, ast.Name):
                    scan.calls.add(f.id)
            for n in ast.walk(part):  # key == "PYTEST_CURRENT_TEST"
                if isinstance(n, ast.Compare) and any(isinstance(op, ast.Eq) for op in n.ops):
                    for side in (n.left, *n.comparators):
                        if isinstance(side, ast.Constant) and isinstance(side.value, str):
                            scan.names.add(side.value)
        self.out.scans.append(scan)


def _binds(target: ast.expr, name: str) -> bool:
    return isinstance(target, ast.Tuple) and any(isinstance(e, ast.Name) and e.id == name for e in target.elts)


def _regex_source(node: ast.expr) -> str:
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
        return str(node.args[0].value)
    return ast.unparse(node)


def regex_families(pattern: str) -> tuple[set[str], set[str], list[str]]:
    """``^(NCCL_\\w+|\\w+_SOCKET_IFNAME)$`` -> prefixes {NCCL_}, suffixes
    {_SOCKET_IFNAME}, and the alternatives of any other shape."""
    body = pattern.removeprefix("^").removesuffix("$")
    if body.startswith("(") and body.endswith(")"):
        body = body[1:-1]
    prefixes, suffixes, other = set(), set(), []
    for alt in body.split("|"):
        if re.fullmatch(r"[A-Z0-9_]+\\w\+", alt):
            prefixes.add(alt[: -len("\\w+")])
        elif re.fullmatch(r"\\w\+[A-Z0-9_]+", alt):
            suffixes.add(alt[len("\\w+") :])
        else:
            other.append(alt)
    return prefixes, suffixes, other


def env_reads(package_root: Path) -> Reads:
    """Every environment read of the package at ``package_root``."""
    mods = _Modules(package_root)
    out = Reads()
    for mod, tree in mods.trees.items():
        _Reader(mods, mod, out).visit(tree)
    return out


def iter_families(reads: Reads) -> Iterator[tuple[str, str]]:
    """``("prefix", "NCCL_")``, ``("suffix", "_proxy")``... of every scan,
    the regexes' alternatives included."""
    for p in sorted(reads.prefixes):
        yield "prefix", p
    for s in sorted(reads.suffixes):
        yield "suffix", s
    for pattern in sorted(reads.patterns):
        pre, suf, _ = regex_families(pattern)
        for p in sorted(pre):
            yield "prefix", p
        for s in sorted(suf):
            yield "suffix", s
