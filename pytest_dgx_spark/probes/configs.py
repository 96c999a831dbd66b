"""Read training/serving configs and command lines for G10, by value.

A grep for ``tensor_parallel`` flags ``parallelism_config_tp_size: 1``; here each file is parsed
(YAML, JSON, TOML, ``.py`` through ``ast``, else shell text) and a finding keeps the key path and
its value. Configs come from anywhere: size, parsing, walking and searching are all bounded, and
every limit hit is a reason, never an exception. YAML goes through PyYAML's safe loader.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import stat
import sys
import time
from collections import Counter, deque
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

from pytest_dgx_spark.redact import program_word, split_title

MAX_BYTES = 1 << 20  # 1 MiB: a config larger than this is not a config
MAX_DEPTH = 64
MAX_NODES = 200_000
MAX_STRING = 16_384  # strings longer than this are not parsed as command lines
#: YAML nested deeper is refused before parsing: libyaml's composer recurses in C and a deep
#: enough document kills the process with SIGSEGV (no RecursionError to catch)
MAX_YAML_NESTING = 100
SEARCH_DEPTH, SEARCH_FILES, SEARCH_ENTRIES = 5, 200, 20_000
#: one folder's budget inside the search's (a 30,000-file ``data/`` hid ``zz_jobs/train.yaml``):
#: entries looked at, config files taken, names listed to judge it
FOLDER_ENTRIES, FOLDER_FILES, FOLDER_LIST = 2_000, 100, 100_000
#: a folder of more files than this, most (DATA_SHARE) of one suffix, holds data
DATA_FOLDER_FILES, DATA_SHARE = 500, 0.8
PLACES = 5  # places named in a note, at most

CONFIG_SUFFIXES = {".yaml": "yaml", ".yml": "yaml", ".json": "json", ".toml": "toml"}
#: build output and envs; test suites (their fixtures are not the job's); records of past runs
SKIP_DIRS = {"node_modules", "__pycache__", "site-packages", "dist-packages", "build", "dist", "venv",
             "tests", "test", "wandb", "mlruns", "outputs", "multirun", "lightning_logs", "checkpoints"}
#: a test run's own records: Allure results and report folders, allure-pytest's files anywhere
REPORT_DIRS = {"allure-results", "allure-report"}
REPORT_FILE = re.compile(r".+-(?:result|container)\.json|.+-attachment(?:\.[\w-]+)?", re.IGNORECASE)
#: this package's own folder (its data files are JSON): run from a checkout of pytest-dgx-spark, it lies
#: under the rootdir, and G10 read ``pytest_dgx_spark/data/known_bad.json`` as a config (issue 34 item 5)
PACKAGE_DIR = os.path.realpath(Path(__file__).resolve().parent.parent)
SKIP_FILES = {"package.json", "package-lock.json", "tsconfig.json", "tokenizer.json", "tokenizer_config.json",
              "vocab.json", "special_tokens_map.json", "generation_config.json"}  # fmt: skip

# Keys and flags compare normalized: lower case, leading dashes stripped, "-" -> "_".
#: tensor-parallel degree: vLLM, SGLang/TRT-LLM/transformers/DeepSpeed inference, Megatron/NeMo,
#: accelerate (YAML and env), DeepSpeed AutoTP, accelerate's Megatron plugin, NVIDIA txt2kg, torchtitan
TP_KEYS = {"tensor_parallel_size", "tp_size", "tensor_model_parallel_size", "parallelism_config_tp_size",
           "autotp_size", "megatron_lm_tp_degree", "vllm_tensor_parallel_size", "tensor_parallel_degree"}
TP_FLAGS = {"tp"}  # only as flags (SGLang --tp, vLLM -tp): a bare ``tp:`` YAML key is too often else
PP_KEYS = {"pipeline_parallel_size", "pp_size", "pipeline_model_parallel_size", "pipeline_parallel_degree"}
PP_FLAGS = {"pp"}
NODE_KEYS = {"num_machines", "nnodes"}  # accelerate; torchrun / vLLM
#: ``num_nodes`` also means "vertices" in graph configs: only under these parents
NUM_NODES_PARENTS = {"", "trainer", "distributed", "launcher", "cluster", "slurm", "resources", "compute"}
NODE_FLAGS = {"nnodes", "num_machines", "num_nodes"}
STRATEGY_KEYS = {"distributed_type", "strategy"}
BACKEND_KEYS = {"distributed_executor_backend"}
LAUNCH_STRATEGY_FLAGS = {"use_fsdp": "FSDP", "use_deepspeed": "DEEPSPEED", "use_megatron_lm": "MEGATRON_LM"}
#: flags that take a value G10 reads
VALUE_FLAGS = NODE_FLAGS | TP_KEYS | TP_FLAGS | PP_KEYS | PP_FLAGS | BACKEND_KEYS | STRATEGY_KEYS

_KNOWN = TP_KEYS | TP_FLAGS | PP_KEYS | PP_FLAGS | NODE_KEYS | {"num_nodes", "headless"} | BACKEND_KEYS
_FLAG_HINT = re.compile(r"(?:^|[\s\"'\[,=.])(?:--?|\+{0,2})("
                        + "|".join(sorted({k.replace("_", "[-_]") for k in _KNOWN}, key=len, reverse=True))
                        + r")\b", re.IGNORECASE)  # fmt: skip
#: what starts a server or an inference engine (a job that serves a model, not one that trains it)
_SERVING = re.compile(
    r"(?:\bvllm\s+serve\b|\bvllm\.entrypoints\b|\bsglang\.launch_server\b|\btrtllm-serve\b"
    r"|\btext-generation-launcher\b|\bLLM\s*\(|\bAsyncLLMEngine\b|\bsglang\.Engine\b)"
)
#: a quoted stretch of a parser's message (file text), unless a token name (``'<block end>'``) or one character
_QUOTED = re.compile(r"""(['"])(?!<)([^'"]{2,})\1""")


def norm(key: str) -> str:
    return str(key).strip().lstrip("-+").lower().replace("-", "_")


@dataclass
class Finding:
    """One fact read from a config or a command line."""

    what: str  # tp | pp | nodes | strategy | backend | headless | tp_plan
    value: int | str | bool | None
    key: str  # the key path or flag that said it
    raw: str = ""  # the value as written, when it is not a plain number

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Source:
    """One file or command line and what it says."""

    name: str
    kind: str  # given | found | process | launcher
    findings: list[Finding] = field(default_factory=list)
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    role: str | None = None  # "serving" when it starts a server or an inference engine

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def serving_marker(text: str) -> str | None:
    """The words that say ``text`` serves a model (``vllm serve``, ``LLM(...)``...), or None."""
    m = _SERVING.search(text[:MAX_BYTES])
    return " ".join(m.group(0).split()) if m else None


def as_count(value: Any) -> int | None:
    """A parallel degree or node count: ``2``, ``2.0``, ``"2"``, ``"1:2"`` (torchrun MIN:MAX: the max)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    m = isinstance(value, str) and re.fullmatch(r"(\d{1,6})(?::(\d{1,6}))?", value.strip().strip("\"'"))
    return max(int(m.group(1)), int(m.group(2) or 0)) if m else None


def make_finding(what: str, value: Any, key: str) -> Finding:
    """A finding with its value as a count, or ``None`` and the text as written (``${TP}``): shown, never judged."""
    count = as_count(value)
    return Finding(what, count, key) if count is not None else Finding(what, None, key, raw=str(value)[:80])


def classify(key: str, value: Any, path: str, parent: str, *, flag: bool = False) -> Finding | None:
    """What ``key = value`` says, if anything G10 cares about."""
    k = norm(key)
    for what, keys, flags in (("tp", TP_KEYS, TP_FLAGS), ("pp", PP_KEYS, PP_FLAGS)):
        if k in keys or (flag and k in flags):
            return make_finding(what, value, path)
    if k in NODE_KEYS or (k == "num_nodes" and (flag or norm(parent) in NUM_NODES_PARENTS)):
        return make_finding("nodes", value, path)
    if k == "tp_plan":
        if value in (None, "", False) or value == {}:
            return Finding("tp_plan", None, path, raw=str(value))
        return Finding("tp_plan", "auto" if isinstance(value, str) else "custom", path, raw=str(value)[:80])
    if k in STRATEGY_KEYS and isinstance(value, str) and value.strip():
        return Finding("strategy", value.strip(), path)
    if k in BACKEND_KEYS and isinstance(value, str):
        return Finding("backend", value.strip().lower(), path)
    return Finding("headless", True, path) if k == "headless" and value is True else None


def command_lines(text: str) -> Iterator[str]:
    """Logical lines of shell text: continuations joined, comments dropped (``#SBATCH`` kept)."""
    buf = ""
    for raw in text.splitlines():
        line = raw.rstrip()
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        stripped, buf = (buf + line).strip(), ""
        if stripped and (not stripped.startswith("#") or stripped.upper().startswith("#SBATCH")):
            yield stripped
    if buf.strip():
        yield buf.strip()


def _flag(words: list[str], i: int, slurm: bool, prefix: str, found: list[Finding]) -> int:
    """One ``--flag[=value]`` at ``words[i]``; how many following words it took as its value."""
    word, nxt = words[i], words[i + 1] if i + 1 < len(words) else None
    name, eq, val = word.partition("=")
    value: str | None = val if eq else None
    full = norm(name)
    k = full.rsplit(".", 1)[-1]  # --trainer.num_nodes=2 (LightningCLI)
    where = f"{prefix}{name}"
    if value is None and (k == "headless" or k in LAUNCH_STRATEGY_FLAGS):
        found.append(Finding("headless", True, where) if k == "headless" else Finding("strategy", LAUNCH_STRATEGY_FLAGS[k], where))
        return 0
    slurm_nodes = slurm and (k == "nodes" or name == "-N")
    if not slurm_nodes and k not in VALUE_FLAGS:
        return 0
    takes = slurm_nodes or (nxt is not None and not (nxt.startswith("-") and as_count(nxt) is None))
    v = value if value is not None else (nxt if takes else None)
    if v is None:
        return 0
    if slurm_nodes:
        found.append(make_finding("nodes", v.split("-")[-1], where))
    elif (f := classify(k, v, where, ("." + full).rsplit(".", 2)[-2], flag=True)) is not None:  # parent: "" if none
        found.append(f)
    return 1 if value is None else 0


def parse_argv(argv: list[str], where: str = "") -> list[Finding]:
    """Flags of one command: ``--flag N``, ``--flag=N``, ``-tp N``, hydra ``trainer.num_nodes=2``,
    env prefixes ``VLLM_TENSOR_PARALLEL_SIZE=2``, ``#SBATCH --nodes=2`` and ``srun -N 2``."""
    found: list[Finding] = []
    prefix = f"{where} " if where else ""
    words = [str(a) for a in argv]
    slurm = bool(words) and (words[0].upper() == "#SBATCH" or os.path.basename(words[0]) in ("srun", "sbatch", "salloc"))
    i = 0
    while i < len(words):
        word = words[i]
        if word.startswith("-") and len(word) > 1:
            i += _flag(words, i, slurm, prefix, found)
        elif "=" in word:
            name = word.partition("=")[0].lstrip("+")
            parent = name.rsplit(".", 2)[-2] if "." in name else ""
            if re.fullmatch(r"[A-Za-z_][\w.\-]*", name):
                f = classify(name.rsplit(".", 1)[-1], word.partition("=")[2], f"{prefix}{name}", parent)
                found.extend([f] if f is not None else [])
        i += 1
    return found


def parse_command_text(text: str, where: str = "") -> list[Finding]:
    found: list[Finding] = []
    for line in command_lines(text):
        try:
            words = shlex.split(line, comments=False)
        except ValueError:
            words = line.split()
        found.extend(parse_argv(words, where))
    return found


def walk(doc: Any, notes: list[str]) -> list[Finding]:
    """Findings in a parsed YAML/JSON/TOML document (iterative, bounded)."""
    found: list[Finding] = []
    seen: set[int] = set()
    stack: list[tuple[Any, str, str, int]] = [(doc, "", "", 0)]
    nodes, deep = 0, False
    while stack:
        obj, path, parent, depth = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            notes.append(f"more than {MAX_NODES} values: the rest not read")
            break
        if isinstance(obj, (dict, list)):
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            if depth >= MAX_DEPTH:
                deep = True
                continue
        if isinstance(obj, dict):
            _walk_dict(obj, path, parent, depth, stack, found)
        elif isinstance(obj, list):
            if obj and all(isinstance(x, str) for x in obj) and any(_FLAG_HINT.search(x) for x in obj[:200]):
                found.extend(parse_argv(list(obj), f"{path}:" if path else ""))
            else:
                stack.extend((value, f"{path}[{index}]", parent, depth + 1) for index, value in enumerate(obj))
        elif isinstance(obj, str) and len(obj) <= MAX_STRING and _FLAG_HINT.search(obj):
            found.extend(parse_command_text(obj, f"{path}:" if path else ""))
    if deep:
        notes.append(f"nested deeper than {MAX_DEPTH} levels: the deeper part not read")
    return found


def _walk_dict(obj: dict[Any, Any], path: str, parent: str, depth: int, stack: list[tuple[Any, str, str, int]], found: list[Finding]) -> None:
    """One mapping of :func:`walk`: its findings, and its containers (and unknown values) to visit."""
    name = obj.get("name") if isinstance(obj.get("name"), str) else None
    if name is not None and "value" in obj and len(obj) <= 3:  # k8s env: {name, value}
        f = classify(name, obj["value"], f"{path}[{name}]".lstrip("."), parent)
        found.extend([f] if f is not None else [])
    for key, value in obj.items():
        sub = f"{path}.{key}" if path else str(key)
        if not isinstance(value, (dict, list)):
            f = classify(str(key), value, sub, parent=path.rsplit(".", 1)[-1] if path else "")
            if f is not None:
                found.append(f)
                continue
        stack.append((value, sub, str(key), depth + 1))


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
        dashes = 0
        rest = stripped
        while rest.startswith("- ") or rest == "-":
            dashes += 1
            rest = rest[2:].lstrip(" ")
        quote = ""
        for ch in rest:
            if quote:
                quote = "" if ch == quote else quote
            elif ch in "'\"":
                quote = ch
            elif ch == "#":
                break
            elif ch in "[{":
                flow += 1
                deepest = max(deepest, len(indents) + dashes + flow)
            elif ch in "]}":
                flow = max(0, flow - 1)
        deepest = max(deepest, len(indents) + dashes + flow)
    return deepest


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
        pairs: list[tuple[str, Any, int]] = []
        if isinstance(node, ast.keyword) and node.arg:
            pairs.append((node.arg, node.value, getattr(node.value, "lineno", 0)))
        elif isinstance(node, ast.Assign):
            pairs += [(t.id, node.value, node.lineno) for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.Dict):
            pairs += [(k.value, v, getattr(k, "lineno", 0))
                      for k, v in zip(node.keys, node.values, strict=False)
                      if isinstance(k, ast.Constant) and isinstance(k.value, str)]
        for name, value, line in pairs:
            if not isinstance(value, ast.Constant):
                if norm(name) in TP_KEYS | PP_KEYS | NODE_KEYS:
                    notes.append(f"line {line}: {name} is computed, not a constant; not judged")
            elif (f := classify(name, value.value, f"line {line}: {name}", "")) is not None:
                found.append(f)
    return found


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
        if fmt == "python":
            src.findings += _parse_python(text, src.notes)
        elif fmt == "text":
            src.findings += parse_command_text(text)
        else:
            for doc in _load(fmt, text):
                src.findings += walk(doc, src.notes)
    except ImportError as exc:  # tomli on Python 3.10, PyYAML
        said = " ".join(str(exc).split()).replace('in "<unicode string>", line', "at line")
        said = (f"{type(exc).__name__}: {said}" if said else type(exc).__name__)[:200]
        src.error = f"no {fmt.upper()} parser here ({said}): not read"
    except RecursionError:
        src.error = f"{fmt.upper()} nested too deeply to parse: not read"
    except MemoryError:
        src.error = f"invalid {fmt.upper()}: too large to parse"
    except Exception as exc:  # every parser's own error type, and anything odd in a document
        src.error = f"invalid {fmt.upper() if fmt != 'python' else 'Python'}: {parse_error(exc)}"
    return src


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


@dataclass
class Scan:
    """What :func:`find_configs` found, and what it passed over (``*_places``: the first few, relative)."""

    root: str
    files: list[str] = field(default_factory=list)
    entries: int = 0
    unreadable: int = 0
    limit: str | None = None
    skipped_reports: int = 0  # test-report folders and files (:func:`report_output`)
    report_places: list[str] = field(default_factory=list)
    data_places: list[str] = field(default_factory=list)  # ``data/ (30000 files, 30000 .jpg)``
    data_dirs: int = 0
    data_configs: int = 0  # data folders of config-suffixed files, not read
    partial_places: list[str] = field(default_factory=list)  # folders cut at their own budget
    partial_dirs: int = 0
    links_out: int = 0  # symlinked files leading out of the root: never read
    link_places: list[str] = field(default_factory=list)

    def place(self, path: str, folder: bool = True) -> str:
        rel = os.path.relpath(path, self.root).replace(os.sep, "/")
        if not folder:
            return rel
        rel = rel.rstrip("/.") + "/"
        return "./" if rel == "/" else rel

    def note(self, places: list[str], text: str) -> None:
        if text not in places and len(places) < PLACES:
            places.append(text)

    def incomplete(self) -> str | None:
        """Why the search did not see every config under the root, or ``None``."""
        why = [self.limit] if self.limit else []
        if self.partial_dirs:
            why.append(f"{self.partial_dirs} folder(s) only partly read: {', '.join(self.partial_places)}")
        if self.data_configs:
            why.append(f"{self.data_configs} data folder(s) of config-like files not read")
        return "; ".join(why) or None


def report_output(path: str, is_dir: bool) -> bool:
    """A test run's own output: an Allure folder, pytest-html's ``assets`` (its ``style.css`` and
    the tests' extras), an allure-pytest file; hundreds of them filled the file cap (issue 11)."""
    name = os.path.basename(path)
    if is_dir:
        return name in REPORT_DIRS or (name == "assets" and os.path.isfile(os.path.join(path, "style.css")))
    return REPORT_FILE.fullmatch(name) is not None


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def data_folder(entries: list[os.DirEntry[str]]) -> tuple[str, str] | None:
    """``(what it holds, its main suffix)`` of a folder of data (a dataset, shards): more than
    :data:`DATA_FOLDER_FILES` files, :data:`DATA_SHARE` of one suffix; else ``None``."""
    files = [e for e in entries if not _is_dir(e)]
    if len(files) <= DATA_FOLDER_FILES:
        return None
    suffix, count = Counter(os.path.splitext(e.name)[1].lower() for e in files).most_common(1)[0]
    if count < DATA_SHARE * len(files):
        return None
    return f"{len(files)} files, {count} {suffix or 'without a suffix'}", suffix


@dataclass
class _Search:
    scan: Scan
    real_root: str
    max_depth: int
    max_files: int
    max_entries: int
    deadline: float | None
    folder_entries: int
    folder_files: int

    def listing(self, folder: str) -> tuple[list[os.DirEntry[str]], bool] | None:
        """The folder's entries by name (at most :data:`FOLDER_LIST`) and whether there were more."""
        try:
            with os.scandir(folder) as it:
                entries = list(islice(it, FOLDER_LIST + 1))
        except OSError:
            self.scan.unreadable += 1
            return None
        return sorted(entries[:FOLDER_LIST], key=lambda e: e.name), len(entries) > FOLDER_LIST

    def leaves_root(self, entry: os.DirEntry[str]) -> bool:
        """A symlinked file leading outside the root (``job.yaml -> /root/secret.yaml``)."""
        try:
            if not entry.is_symlink():
                return False
        except OSError:
            return True
        return os.path.commonpath([self.real_root, os.path.realpath(entry.path)]) != self.real_root

    def skipped_dir(self, entry: os.DirEntry[str], depth: int) -> bool:
        name = entry.name
        venv = os.path.join(entry.path, "pyvenv.cfg")
        return (name.startswith(".") or name in SKIP_DIRS or name.endswith(".egg-info")
                or depth + 1 > self.max_depth or os.path.exists(venv)
                or (name == os.path.basename(PACKAGE_DIR) and os.path.realpath(entry.path) == PACKAGE_DIR))  # fmt: skip

    def folder(self, folder: str, depth: int, entries: list[os.DirEntry[str]], listed_more: bool, queue: deque[tuple[str, int]]) -> bool:
        """One folder's entries, within its budget; True when the whole search stops."""
        scan, taken, more = self.scan, 0, listed_more or len(entries) > self.folder_entries
        for entry in entries[: self.folder_entries]:
            scan.entries += 1
            if scan.entries > self.max_entries:
                scan.limit = f"stopped after {self.max_entries} entries"
                return True
            if self.deadline is not None and time.monotonic() > self.deadline:
                scan.limit = "stopped at the time limit"
                return True
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                scan.unreadable += 1
                continue
            name = entry.name
            if report_output(entry.path, is_dir):
                scan.skipped_reports += 1
                scan.note(scan.report_places, scan.place(entry.path if is_dir else folder))
            elif is_dir:
                if not self.skipped_dir(entry, depth):
                    queue.append((entry.path, depth + 1))
            elif name.startswith(".") or name in SKIP_FILES or os.path.splitext(name)[1].lower() not in CONFIG_SUFFIXES:
                continue
            elif self.leaves_root(entry):
                scan.links_out += 1
                scan.note(scan.link_places, scan.place(entry.path, folder=False))
            elif taken >= self.folder_files:  # the folder's share taken; its subfolders still searched
                more = True
            else:
                scan.files.append(entry.path)
                taken += 1
                if len(scan.files) >= self.max_files:
                    scan.limit = f"stopped at {self.max_files} config files"
                    return True
        if more:
            scan.partial_dirs += 1
            scan.note(scan.partial_places, f"{scan.place(folder)} ({len(entries)}{'+' if listed_more else ''} entries)")
        return False


def find_configs(
    root: Path, *, max_depth: int = SEARCH_DEPTH, max_files: int = SEARCH_FILES,
    max_entries: int = SEARCH_ENTRIES, deadline: float | None = None, folder_entries: int = FOLDER_ENTRIES,
    folder_files: int = FOLDER_FILES,
) -> Scan:
    """YAML/JSON/TOML files under ``root``, breadth first, skipping hidden and VCS folders, venvs
    (``pyvenv.cfg``), caches, build output, test suites, run records, test reports, data
    folders and this package's own folder, each folder within its own budget. Symlinked folders are not followed, symlinked
    files only when they stay under ``root``. :meth:`Scan.incomplete` says what was not seen."""
    scan = Scan(root=str(root))
    search = _Search(scan, os.path.realpath(root), max_depth, max_files, max_entries, deadline, folder_entries, folder_files)
    queue: deque[tuple[str, int]] = deque([(str(root), 0)])
    while queue:
        folder, depth = queue.popleft()
        listed = search.listing(folder)
        if listed is None:
            continue
        data = data_folder(listed[0]) if depth > 0 else None
        if data is not None:
            scan.data_dirs += 1
            scan.data_configs += data[1] in CONFIG_SUFFIXES
            if len(scan.data_places) < PLACES:
                scan.data_places.append(f"{scan.place(folder)} ({data[0]})")
        elif search.folder(folder, depth, *listed, queue):
            break
    return scan


def read_found(root: Path, scan: Scan, *, deadline: float | None = None, max_bytes: int = MAX_BYTES) -> tuple[list[Source], list[str]]:
    """Parse the files :func:`find_configs` listed; ``(sources, notes)``."""
    sources: list[Source] = []
    notes: list[str] = []
    too_big = 0
    for index, path in enumerate(scan.files):
        if deadline is not None and time.monotonic() > deadline:
            notes.append(f"time limit: {len(scan.files) - index} of {len(scan.files)} found configs not read")
            break
        try:
            name = os.path.relpath(path, root)
        except ValueError:
            name = path
        src = read_config(Path(path), name, "found", max_bytes=max_bytes)
        if src.error and "limit for a config" in src.error:
            too_big += 1
        else:
            sources.append(src)
    if too_big:
        notes.append(f"{too_big} found file(s) over {max_bytes / 1e6:.1f} MB not read (data, not configs)")
    if scan.skipped_reports:
        notes.append(f"test reports not read as configs (Allure, pytest-html): {', '.join(scan.report_places)}")
    if scan.data_dirs:
        notes.append(f"data folders not searched (they hold data, not configs): {', '.join(scan.data_places)}")
    if scan.links_out:
        notes.append(f"{scan.links_out} symlink(s) leading out of the project not followed: {', '.join(scan.link_places)}")
    return sources, notes


def process_sources(processes: Iterable[dict[str, Any]], own_pid: int | None = None) -> list[Source]:
    """Command lines of running processes that carry G10's flags. Ancestors of this run
    (``self``: the torchrun or srun that launched it) are the *launcher*; others are separate
    jobs (a vLLM server), judged on their own flags."""
    out: list[Source] = []
    for p in processes:
        argv = split_title(p.get("cmdline") or [])  # a title (exec -a) holds the flags in argv[0]
        if not argv or p.get("pid") == own_pid or not _FLAG_HINT.search(" ".join(argv[:64])):
            continue
        findings = parse_argv(argv)
        if not findings:
            continue
        # name and the flags found only: a full command line may carry secrets (--api-key ...)
        name = str(p.get("name") or "") or program_word(argv[0]) or "?"
        role = "serving" if serving_marker(" ".join(argv[:64])) else None
        kind = "launcher" if p.get("self") else "process"
        out.append(Source(name=f"pid {p.get('pid')} ({name})", kind=kind, findings=findings, role=role))
    return out
