"""One config file read and parsed for G10 (YAML, JSON, TOML, ``.py`` through ``ast``, else shell
text), its size, nesting and parsing bounded: every limit hit and every parser's error is the
source's ``error`` in one line, never an exception, and never the file's text. YAML goes through
PyYAML's safe loader.
"""

from __future__ import annotations

import ast
import json
import os
import re
import stat
import sys
from pathlib import Path
from typing import Any

from pytest_dgx_spark.probes.config_values import (
    MAX_BYTES,
    NODE_KEYS,
    PP_KEYS,
    TP_KEYS,
    Finding,
    Source,
    classify,
    norm,
    parse_command_text,
    serving_marker,
    walk,
)

#: YAML nested deeper is refused before parsing: libyaml's composer recurses in C and a deep
#: enough document kills the process with SIGSEGV (no RecursionError to catch)
MAX_YAML_NESTING = 100
CONFIG_SUFFIXES = {".yaml": "yaml", ".yml": "yaml", ".json": "json", ".toml": "toml"}
#: a quoted stretch of a parser's message (file text), unless a token name (``'<block end>'``) or one character
_QUOTED = re.compile(r"""(['"])(?!<)([^'"]{2,})\1""")


def yaml_nesting(text: str) -> int:
    """An upper bound on a YAML document's nesting without parsing it: open flow brackets outside
    quotes, block indentation levels, and ``- `` markers that start a line's content."""
    deepest = flow = 0
    indents: list[int] = []
    for line in text.splitlines():
        stripped = line.lstrip(" ")
        if not stripped or stripped.startswith("#"):
            continue
        indent = len(line) - len(stripped)
        if flow == 0:
            while indents and indents[-1] >= indent:
                indents.pop()
            indents.append(indent)
        dashes, rest = _dashes(stripped)
        peak, flow = _flow(rest, flow)
        deepest = max(deepest, len(indents) + dashes + max(peak, flow))
    return deepest


def _dashes(stripped: str) -> tuple[int, str]:
    """The ``- `` markers that start a line's content (each a level), and the rest of it."""
    dashes, rest = 0, stripped
    while rest.startswith("- ") or rest == "-":
        dashes += 1
        rest = rest[2:].lstrip(" ")
    return dashes, rest


def _flow(rest: str, flow: int) -> tuple[int, int]:
    """``(deepest, open)`` flow brackets (``[``, ``{``) outside quotes and comments, from ``flow``
    open before the line: the most open at once after an opening one (0: none opened), and at its end."""
    peak, quote = 0, ""
    for ch in rest:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#":
            break
        elif ch in "[{":
            flow += 1
            peak = max(peak, flow)
        elif ch in "]}":
            flow = max(0, flow - 1)
    return peak, flow


def _load(fmt: str, text: str) -> list[Any]:
    """The documents of ``text``; the parser's own error when it is not valid."""
    if fmt == "yaml":
        import yaml  # lazy: PyYAML only when a YAML file is read

        nesting = yaml_nesting(text)
        if nesting > MAX_YAML_NESTING:
            raise RecursionError(f"YAML nested about {nesting} levels deep (more than {MAX_YAML_NESTING})")
        return list(yaml.load_all(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))
    if fmt == "json":
        return [json.loads(text)]
    if sys.version_info >= (3, 11):
        import tomllib  # lazy: only when a TOML file is read
    else:
        import tomli as tomllib  # lazy: the same; on Python 3.10 pytest depends on tomli
    return [tomllib.loads(text)]


def _parse_python(text: str, notes: list[str]) -> list[Finding]:
    """Keyword arguments and assignments with a constant: ``LLM(..., tensor_parallel_size=2)``."""
    found: list[Finding] = []
    for node in ast.walk(ast.parse(text)):
        for name, value, line in _python_pairs(node):
            if not isinstance(value, ast.Constant):
                if norm(name) in TP_KEYS | PP_KEYS | NODE_KEYS:
                    notes.append(f"line {line}: {name} is computed, not a constant; not judged")
            elif (f := classify(name, value.value, f"line {line}: {name}", "")) is not None:
                found.append(f)
    return found


def _python_pairs(node: ast.AST) -> list[tuple[str, Any, int]]:
    """``(name, value node, line)`` that ``node`` binds: a keyword argument, an assignment to a
    name, a dict's string keys."""
    if isinstance(node, ast.keyword) and node.arg:
        return [(node.arg, node.value, getattr(node.value, "lineno", 0))]
    if isinstance(node, ast.Assign):
        return [(t.id, node.value, node.lineno) for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.Dict):
        return [(k.value, v, getattr(k, "lineno", 0))
                for k, v in zip(node.keys, node.values, strict=False)
                if isinstance(k, ast.Constant) and isinstance(k.value, str)]  # fmt: skip
    return []


def _read_text(path: Path, max_bytes: int) -> tuple[str | None, str | None]:
    """``(text, None)`` of a config file, or ``(None, why not)``."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            return None, "not a regular file (a FIFO, device or folder is never read)"
        if st.st_size > max_bytes:
            return None, f"{st.st_size / 1e6:.1f} MB, over the {max_bytes / 1e6:.1f} MB limit for a config: not read"
        with open(path, "rb") as fh:
            raw = fh.read(max_bytes + 1)
    except OSError as exc:
        return None, f"cannot read: {exc.strerror or exc}"
    if len(raw) > max_bytes:
        return None, f"grew past the {max_bytes / 1e6:.1f} MB limit while being read: not read"
    if b"\x00" in raw[:8192]:
        return None, "binary, not a text config"
    try:
        return raw.decode("utf-8-sig"), None
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8 text (byte {exc.start}): not read"


def read_config(path: Path, name: str, kind: str, *, max_bytes: int = MAX_BYTES) -> Source:
    """Parse one file into a :class:`Source`; every failure is its ``error``."""
    src = Source(name=name, kind=kind)
    text, src.error = _read_text(path, max_bytes)
    if text is None:
        return src
    fmt = CONFIG_SUFFIXES.get(path.suffix.lower(), "python" if path.suffix == ".py" else "text")
    src.role = "serving" if serving_marker(text) else None
    try:
        _parse(fmt, text, src)
    except Exception as exc:  # every parser's own error type, and anything odd in a document
        src.error = _failure(fmt, exc)
    return src


def _parse(fmt: str, text: str, src: Source) -> None:
    """What a file's text says, parsed as ``fmt``, into ``src``; the parser's error when it is not valid."""
    if fmt == "python":
        src.findings += _parse_python(text, src.notes)
    elif fmt == "text":
        src.findings += parse_command_text(text)
    else:
        for doc in _load(fmt, text):
            src.findings += walk(doc, src.notes)


def _failure(fmt: str, exc: Exception) -> str:
    """Why a file of format ``fmt`` was not read, in one line."""
    if isinstance(exc, ImportError):  # tomli on Python 3.10, PyYAML
        said = " ".join(str(exc).split()).replace('in "<unicode string>", line', "at line")
        said = (f"{type(exc).__name__}: {said}" if said else type(exc).__name__)[:200]
        return f"no {fmt.upper()} parser here ({said}): not read"
    if isinstance(exc, RecursionError):
        return f"{fmt.upper()} nested too deeply to parse: not read"
    if isinstance(exc, MemoryError):
        return f"invalid {fmt.upper()}: too large to parse"
    return f"invalid {fmt.upper() if fmt != 'python' else 'Python'}: {parse_error(exc)}"


def parse_error(exc: BaseException) -> str:
    """A parser's error as its kind and position, never the file's text (PyYAML quotes the
    offending line: a root-only file's line must not reach a report, issue 19)."""
    problem = getattr(exc, "problem", None) or getattr(exc, "msg", None)
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    if mark is not None:  # PyYAML
        line, col = getattr(mark, "line", -1) + 1, getattr(mark, "column", -1) + 1
    elif isinstance(exc, SyntaxError):
        line, col = exc.lineno, exc.offset
    else:  # JSONDecodeError; tomllib's carries lineno/colno from Python 3.14 and says it in msg before
        line, col = getattr(exc, "lineno", None), getattr(exc, "colno", None)
    if type(exc).__name__ == "TOMLDecodeError" and line is None:
        problem = str(exc)  # "Invalid value (at line 3, column 8)": its own words and position
    if not isinstance(problem, str) or not problem.strip():
        problem = type(exc).__name__
    text = _QUOTED.sub(lambda m: f"{m.group(1)}…{m.group(1)}", " ".join(problem.split()))
    where = f" at line {line}, column {col}" if isinstance(line, int) and line > 0 else ""
    return f"{type(exc).__name__}: {text}{where}"[:200]

