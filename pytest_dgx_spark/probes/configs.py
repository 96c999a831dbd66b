"""Read training/serving configs and command lines for G10, by value.

The seed greps for ``tensor_parallel|tp_size|tensor-parallel``; that flags
NVIDIA's own two-Spark FSDP config (``parallelism_config_tp_size: 1``) and
``--tensor-parallel-size 1``. Here every file is parsed (YAML, JSON, TOML;
a given ``.py`` through ``ast``; anything else as shell command text), the
structure is walked, and a finding is kept only with the key path that
produced it and the value it holds, so the check can say "file: key = value"
and decide on the number.

Everything is bounded, because configs come from anywhere: a file over
:data:`MAX_BYTES` is not read, binary files are refused, parsers' recursion
errors are caught, the walk over a parsed document visits each container once
(YAML aliases can make a "billion laughs" DAG) and stops at
:data:`MAX_DEPTH` and :data:`MAX_NODES`, and the search under the rootdir
stops at a depth, a number of files and a deadline. Every limit hit is a
reason in the result, never an exception.

YAML needs a parser: PyYAML (``safe_load`` only — plain types, no object
construction; the C loader when libyaml is there). It is the parser
accelerate, transformers and vLLM already depend on, so it is on every box
that has one of these configs; it is imported only when a YAML file is read.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import stat
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pytest_dgx_spark.redact import program_word, split_title

MAX_BYTES = 1 << 20  # 1 MiB: a config larger than this is not a config
MAX_DEPTH = 64
MAX_NODES = 200_000
MAX_STRING = 16_384  # strings longer than this are not parsed as command lines
SEARCH_DEPTH = 5
SEARCH_FILES = 200
SEARCH_ENTRIES = 20_000

CONFIG_SUFFIXES = {".yaml": "yaml", ".yml": "yaml", ".json": "json", ".toml": "toml"}
SKIP_DIRS = {
    "node_modules",
    "__pycache__",
    "site-packages",
    "dist-packages",
    "build",
    "dist",
    "venv",
    # a test suite's fixtures are not the job's configs (ours hold TP=2 examples)
    "tests",
    "test",
    # records of past runs, not the run about to start
    "wandb",
    "mlruns",
    "outputs",
    "multirun",
    "lightning_logs",
    "checkpoints",
}
#: a test run's own records, never a job's configs: Allure results (``--alluredir`` default
#: name) and the report ``allure generate`` writes
REPORT_DIRS = {"allure-results", "allure-report"}
#: allure-pytest's files, in whatever folder ``--alluredir`` names: ``<uuid>-result.json``,
#: ``<uuid>-container.json``, ``<uuid>-attachment.<ext>``
REPORT_FILE = re.compile(r".+-(?:result|container)\.json|.+-attachment(?:\.[\w-]+)?", re.IGNORECASE)
SKIP_FILES = {
    "package.json",
    "package-lock.json",
    "tsconfig.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.json",
    "special_tokens_map.json",
    "generation_config.json",
}

# --------------------------------------------------------------------------- what the keys mean
# Keys and flags are compared after normalizing: lower case, leading dashes
# stripped, "-" -> "_".

#: tensor-parallel degree
TP_KEYS = {
    "tensor_parallel_size",  # vLLM, TRT-LLM LLM API, vLLM config YAML
    "tp_size",  # SGLang, TRT-LLM, transformers DistributedConfig, DeepSpeed inference
    "tensor_model_parallel_size",  # Megatron-LM, NeMo
    "parallelism_config_tp_size",  # accelerate (YAML key and PARALLELISM_CONFIG_TP_SIZE)
    "autotp_size",  # DeepSpeed AutoTP training: tensor_parallel.autotp_size
    "megatron_lm_tp_degree",  # accelerate's Megatron-LM plugin
    "vllm_tensor_parallel_size",  # env var (NVIDIA txt2kg)
    "tensor_parallel_degree",  # torchtitan TOML [parallelism]
}
#: only as command-line flags: a bare ``tp:`` key in a YAML is too often something else
TP_FLAGS = {"tp"}  # SGLang --tp, vLLM -tp
PP_KEYS = {"pipeline_parallel_size", "pp_size", "pipeline_model_parallel_size", "pipeline_parallel_degree"}
PP_FLAGS = {"pp"}
NODE_KEYS = {"num_machines", "nnodes"}  # accelerate; torchrun / vLLM
#: ``num_nodes`` also means "vertices" in graph configs: only under these parents
NUM_NODES_PARENTS = {"", "trainer", "distributed", "launcher", "cluster", "slurm", "resources", "compute"}
NODE_FLAGS = {"nnodes", "num_machines", "num_nodes"}
STRATEGY_KEYS = {"distributed_type", "strategy"}
BACKEND_KEYS = {"distributed_executor_backend"}
#: ``accelerate launch`` switches
LAUNCH_STRATEGY_FLAGS = {"use_fsdp": "FSDP", "use_deepspeed": "DEEPSPEED", "use_megatron_lm": "MEGATRON_LM"}
#: flags that take a value G10 reads
VALUE_FLAGS = NODE_FLAGS | TP_KEYS | TP_FLAGS | PP_KEYS | PP_FLAGS | BACKEND_KEYS | STRATEGY_KEYS

_KNOWN = TP_KEYS | TP_FLAGS | PP_KEYS | PP_FLAGS | NODE_KEYS | {"num_nodes", "headless"} | BACKEND_KEYS
_FLAG_HINT = re.compile(
    r"(?:^|[\s\"'\[,=.])(?:--?|\+{0,2})("
    + "|".join(sorted({k.replace("_", "[-_]") for k in _KNOWN}, key=len, reverse=True))
    + r")\b",
    re.IGNORECASE,
)


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
    #: "serving" when the text starts a server or an inference engine (see :func:`serving_marker`)
    role: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "findings": [f.to_dict() for f in self.findings],
            "error": self.error,
            "notes": list(self.notes),
            "role": self.role,
        }


#: what starts a server or an inference engine (a job that serves a model, not one that trains it)
_SERVING = re.compile(
    r"(?:\bvllm\s+serve\b|\bvllm\.entrypoints\b|\bsglang\.launch_server\b|\btrtllm-serve\b"
    r"|\btext-generation-launcher\b|\bLLM\s*\(|\bAsyncLLMEngine\b|\bsglang\.Engine\b)"
)


def serving_marker(text: str) -> str | None:
    """The words that say ``text`` serves a model (``vllm serve``,
    ``sglang.launch_server``, ``trtllm-serve``, vLLM's ``LLM(...)``), or None."""
    m = _SERVING.search(text[: MAX_BYTES])
    return " ".join(m.group(0).split()) if m else None


# --------------------------------------------------------------------------- values


def as_count(value: Any) -> int | None:
    """A parallel degree or node count: ``2``, ``2.0``, ``"2"``, ``"1:2"`` (max)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        text = value.strip().strip("\"'")
        if re.fullmatch(r"\d{1,6}", text):
            return int(text)
        m = re.fullmatch(r"(\d{1,6}):(\d{1,6})", text)  # torchrun --nnodes MIN:MAX
        if m:
            return max(int(m.group(1)), int(m.group(2)))
    return None


def make_finding(what: str, value: Any, key: str) -> Finding:
    """A finding with its value as a count, or ``None`` and the text as written
    (``${TP}``, ``auto``): shown, never judged."""
    count = as_count(value)
    if count is not None:
        return Finding(what, count, key)
    return Finding(what, None, key, raw=str(value)[:80])


def classify(key: str, value: Any, path: str, parent: str, *, flag: bool = False) -> Finding | None:
    """What ``key = value`` says, if anything G10 cares about."""
    k = norm(key)
    if k in TP_KEYS or (flag and k in TP_FLAGS):
        return make_finding("tp", value, path)
    if k in PP_KEYS or (flag and k in PP_FLAGS):
        return make_finding("pp", value, path)
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
    if k == "headless" and value is True:
        return Finding("headless", True, path)
    return None


# --------------------------------------------------------------------------- command lines


def _split_line(line: str) -> list[str]:
    try:
        return shlex.split(line, comments=False)
    except ValueError:
        return line.split()


def command_lines(text: str) -> Iterator[str]:
    """Logical lines of shell text: continuations joined, comments dropped
    (``#SBATCH`` lines kept: they carry the node count)."""
    buf = ""
    for raw in text.splitlines():
        line = raw.rstrip()
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        line = buf + line
        buf = ""
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#") and not stripped.upper().startswith("#SBATCH"):
            continue
        yield stripped
    if buf.strip():
        yield buf.strip()


def parse_argv(argv: list[str], where: str = "") -> list[Finding]:
    """Flags of one command: ``--flag N``, ``--flag=N``, ``-tp N``, hydra
    ``trainer.num_nodes=2``, env prefixes ``VLLM_TENSOR_PARALLEL_SIZE=2``,
    ``#SBATCH --nodes=2`` and ``srun -N 2``."""
    found: list[Finding] = []
    prefix = f"{where} " if where else ""
    words = [str(a) for a in argv]
    slurm = bool(words) and (
        words[0].upper() == "#SBATCH" or os.path.basename(words[0]) in ("srun", "sbatch", "salloc")
    )
    i = 0
    while i < len(words):
        word = words[i]
        nxt = words[i + 1] if i + 1 < len(words) else None
        if word.startswith("-") and len(word) > 1:
            name, eq, val = word.partition("=")
            value: str | None = val if eq else None
            full = norm(name)
            k = full.rsplit(".", 1)[-1]  # --trainer.num_nodes=2 (LightningCLI)
            parent = full.rsplit(".", 2)[-2] if "." in full else ""
            takes = value is None and nxt is not None and not (nxt.startswith("-") and as_count(nxt) is None)
            if slurm and (k == "nodes" or name == "-N"):
                v = value if value is not None else nxt
                if v is not None:
                    found.append(make_finding("nodes", v.split("-")[-1], f"{prefix}{name}"))
                    i += 1 if value is None else 0
            elif k == "headless" and value is None:
                found.append(Finding("headless", True, f"{prefix}{name}"))
            elif k in LAUNCH_STRATEGY_FLAGS and value is None:
                found.append(Finding("strategy", LAUNCH_STRATEGY_FLAGS[k], f"{prefix}{name}"))
            elif k in VALUE_FLAGS:
                v = value if value is not None else (nxt if takes else None)
                if v is not None:
                    f = classify(k, v, f"{prefix}{name}", parent, flag=True)
                    if f is not None:
                        found.append(f)
                    if value is None:
                        i += 1
        elif "=" in word:
            name, _, val = word.partition("=")
            last = name.lstrip("+").rsplit(".", 1)[-1]
            parent = name.lstrip("+").rsplit(".", 2)[-2] if "." in name else ""
            if re.fullmatch(r"[A-Za-z_][\w.\-]*", name.lstrip("+")):
                f = classify(last, val, f"{prefix}{name.lstrip('+')}", parent)
                if f is not None:
                    found.append(f)
        i += 1
    return found


def parse_command_text(text: str, where: str = "") -> list[Finding]:
    found: list[Finding] = []
    for line in command_lines(text):
        found.extend(parse_argv(_split_line(line), where))
    return found


# --------------------------------------------------------------------------- parsed documents


def walk(doc: Any, notes: list[str]) -> list[Finding]:
    """Findings in a parsed YAML/JSON/TOML document (iterative, bounded)."""
    found: list[Finding] = []
    seen: set[int] = set()
    stack: list[tuple[Any, str, str, int]] = [(doc, "", "", 0)]
    nodes = 0
    deep = False
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
            name = obj.get("name") if isinstance(obj.get("name"), str) else None
            if name is not None and "value" in obj and len(obj) <= 3:  # k8s env: {name, value}
                f = classify(name, obj["value"], f"{path}[{name}]".lstrip("."), parent)
                if f is not None:
                    found.append(f)
            for key, value in obj.items():
                key_text = str(key)
                sub = f"{path}.{key_text}" if path else key_text
                if not isinstance(value, (dict, list)):
                    f = classify(key_text, value, sub, parent=path.rsplit(".", 1)[-1] if path else "")
                    if f is not None:
                        found.append(f)
                        continue
                stack.append((value, sub, key_text, depth + 1))
        elif isinstance(obj, list):
            if obj and all(isinstance(x, str) for x in obj) and any(_FLAG_HINT.search(x) for x in obj[:200]):
                found.extend(parse_argv(list(obj), f"{path}:" if path else ""))
                continue
            for index, value in enumerate(obj):
                stack.append((value, f"{path}[{index}]", parent, depth + 1))
        elif isinstance(obj, str) and len(obj) <= MAX_STRING and _FLAG_HINT.search(obj):
            found.extend(parse_command_text(obj, f"{path}:" if path else ""))
    if deep:
        notes.append(f"nested deeper than {MAX_DEPTH} levels: the deeper part not read")
    return found


#: YAML nested deeper than this is refused before parsing: libyaml's composer
#: recurses in C, and a deep enough document overflows the C stack and kills
#: the process with SIGSEGV (seen on the H200 machine, PyYAML with libyaml,
#: Python 3.12) — no RecursionError to catch.
MAX_YAML_NESTING = 100


def yaml_nesting(text: str) -> int:
    """An upper bound on a YAML document's nesting, without parsing it.

    Counts open flow brackets (``[``/``{`` outside quotes), block indentation
    levels, and ``- `` sequence markers that start a line's content.
    """
    deepest = 0
    flow = 0
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
                if ch == quote:
                    quote = ""
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


def _load_yaml(text: str) -> list[Any]:
    import yaml

    nesting = yaml_nesting(text)
    if nesting > MAX_YAML_NESTING:
        raise RecursionError(f"YAML nested about {nesting} levels deep (more than {MAX_YAML_NESTING})")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return list(yaml.load_all(text, Loader=loader))


def _load_toml(text: str) -> Any:
    try:
        import tomllib  # type: ignore[import-not-found]
    except ModuleNotFoundError:  # Python 3.10: pytest depends on tomli there
        import tomli as tomllib  # type: ignore[no-redef]
    return tomllib.loads(text)


def _parse_python(text: str, notes: list[str]) -> list[Finding]:
    """Keyword arguments and assignments with an int constant:
    ``LLM(..., tensor_parallel_size=2)``, ``ParallelismConfig(tp_size=2)``."""
    tree = ast.parse(text)
    found: list[Finding] = []
    for node in ast.walk(tree):
        pairs: list[tuple[str, Any, int]] = []
        if isinstance(node, ast.keyword) and node.arg:
            pairs.append((node.arg, node.value, getattr(node.value, "lineno", 0)))
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    pairs.append((target.id, node.value, node.lineno))
        elif isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values, strict=False):
                if isinstance(k, ast.Constant) and isinstance(k.value, str):
                    pairs.append((k.value, v, getattr(k, "lineno", 0)))
        for name, value, line in pairs:
            if not isinstance(value, ast.Constant):
                if norm(name) in TP_KEYS | PP_KEYS | NODE_KEYS:
                    notes.append(f"line {line}: {name} is computed, not a constant; not judged")
                continue
            f = classify(name, value.value, f"line {line}: {name}", "")
            if f is not None:
                found.append(f)
    return found


def file_format(path: Path) -> str:
    return CONFIG_SUFFIXES.get(path.suffix.lower(), "python" if path.suffix == ".py" else "text")


def read_config(path: Path, name: str, kind: str, *, max_bytes: int = MAX_BYTES) -> Source:
    """Parse one file into a :class:`Source`; every failure is its ``error``."""
    src = Source(name=name, kind=kind)
    try:
        st = os.stat(path)
    except OSError as exc:
        src.error = f"cannot read: {exc.strerror or exc}"
        return src
    if not stat.S_ISREG(st.st_mode):
        src.error = "not a regular file (a FIFO, device or folder is never read)"
        return src
    if st.st_size > max_bytes:
        src.error = (
            f"{st.st_size / 1e6:.1f} MB, over the {max_bytes / 1e6:.1f} MB limit for a config: not read"
        )
        return src
    try:
        with open(path, "rb") as fh:
            raw = fh.read(max_bytes + 1)
    except OSError as exc:
        src.error = f"cannot read: {exc.strerror or exc}"
        return src
    if len(raw) > max_bytes:
        src.error = f"grew past the {max_bytes / 1e6:.1f} MB limit while being read: not read"
        return src
    if b"\x00" in raw[:8192]:
        src.error = "binary, not a text config"
        return src
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        src.error = f"not UTF-8 text (byte {exc.start}): not read"
        return src
    fmt = file_format(path)
    if serving_marker(text):
        src.role = "serving"
    try:
        if fmt == "yaml":
            docs = _load_yaml(text)
            for doc in docs:
                src.findings.extend(walk(doc, src.notes))
        elif fmt == "json":
            import json

            src.findings.extend(walk(json.loads(text), src.notes))
        elif fmt == "toml":
            src.findings.extend(walk(_load_toml(text), src.notes))
        elif fmt == "python":
            src.findings.extend(_parse_python(text, src.notes))
        else:
            src.findings.extend(parse_command_text(text))
    except ImportError as exc:  # tomli on Python 3.10 (pytest depends on it there), PyYAML
        src.error = f"no {fmt.upper()} parser here ({_one_line(exc)}): not read"
    except RecursionError:
        src.error = f"{fmt.upper()} nested too deeply to parse: not read"
    except MemoryError:
        src.error = f"invalid {fmt.upper()}: too large to parse"
    except Exception as exc:  # every parser's own error type, and anything odd in a document
        src.error = f"invalid {fmt.upper() if fmt != 'python' else 'Python'}: {parse_error(exc)}"
    return src


#: a quoted stretch of a parser's message: text of the file, unless it is a
#: token name (``'<block end>'``) or one character
_QUOTED = re.compile(r"""(['"])(?!<)([^'"]{2,})\1""")


def parse_error(exc: BaseException) -> str:
    """A parser's error as its kind and position, never the file's text.

    PyYAML without libyaml quotes the offending line (``in "<unicode
    string>", line 2`` and the line under it): a config the search followed
    to a root-only file put that file's line in the terminal, a 0644 env
    report and the capture (issue 19, item 8). Only the problem's own words
    (quoted text of the file masked) and the line and column are kept."""
    problem = getattr(exc, "problem", None) or getattr(exc, "msg", None)
    line = col = None
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    if mark is not None:  # PyYAML
        line, col = getattr(mark, "line", -1) + 1, getattr(mark, "column", -1) + 1
    elif isinstance(exc, SyntaxError):
        line, col = exc.lineno, exc.offset
    else:  # json.JSONDecodeError; tomllib's carries lineno/colno from Python 3.14 and says it in msg before
        line, col = getattr(exc, "lineno", None), getattr(exc, "colno", None)
    if type(exc).__name__ == "TOMLDecodeError" and line is None:
        problem = str(exc)  # "Invalid value (at line 3, column 8)": its own words and position
    if not isinstance(problem, str) or not problem.strip():
        problem = type(exc).__name__
    text = _QUOTED.sub(lambda m: f"{m.group(1)}…{m.group(1)}", " ".join(problem.split()))
    where = f" at line {line}, column {col}" if isinstance(line, int) and line > 0 else ""
    return f"{type(exc).__name__}: {text}{where}"[:200]


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()).replace('in "<unicode string>", line', "at line")
    return (f"{type(exc).__name__}: {text}" if text else type(exc).__name__)[:200]


# --------------------------------------------------------------------------- finding configs


#: entries of one folder looked at: a data folder cannot spend the whole
#: search's budget (a 30,000-file ``data/`` hid ``zz_jobs/train.yaml``, issue 19)
FOLDER_ENTRIES = 2_000
#: config files taken from one folder
FOLDER_FILES = 100
#: names listed from one folder at most, to judge what it holds
FOLDER_LIST = 100_000
#: a folder holding more files than this, most of them of one suffix, holds data
DATA_FOLDER_FILES = 500
DATA_SHARE = 0.8
#: places named in a note, at most
PLACES = 5


@dataclass
class Scan:
    root: str
    files: list[str] = field(default_factory=list)
    entries: int = 0
    skipped_dirs: int = 0
    unreadable: int = 0
    limit: str | None = None
    #: test-report folders and files skipped (see :func:`report_output`)
    skipped_reports: int = 0
    #: where they were: ``allure-results/``, ``out/al/`` (relative to the root, first few)
    report_places: list[str] = field(default_factory=list)
    #: folders skipped for what they hold (:func:`data_folder`): ``data/ (30000 files, 30000 .jpg)``
    data_places: list[str] = field(default_factory=list)
    data_dirs: int = 0
    #: data folders whose files have a config suffix: those files were not read
    data_configs: int = 0
    #: folders cut at their own budget (:data:`FOLDER_ENTRIES`, :data:`FOLDER_FILES`)
    partial_places: list[str] = field(default_factory=list)
    partial_dirs: int = 0
    #: symlinked files leading out of the root: never read (issue 19, item 8)
    links_out: int = 0
    link_places: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def place(self, path: str, folder: bool = True) -> str:
        rel = os.path.relpath(path, self.root).replace(os.sep, "/")
        if not folder:
            return rel
        rel = rel.rstrip("/.") + "/"
        return "./" if rel == "/" else rel

    def skip_report(self, folder: str) -> None:
        self.skipped_reports += 1
        place = self.place(folder)
        if place not in self.report_places and len(self.report_places) < PLACES:
            self.report_places.append(place)

    def incomplete(self) -> str | None:
        """Why the search did not see every config under the root, or ``None``."""
        why = [self.limit] if self.limit else []
        if self.partial_dirs:
            why.append(f"{self.partial_dirs} folder(s) only partly read: {', '.join(self.partial_places)}")
        if self.data_configs:
            why.append(f"{self.data_configs} data folder(s) of config-like files not read")
        return "; ".join(why) or None


def _is_venv(path: str) -> bool:
    return os.path.exists(os.path.join(path, "pyvenv.cfg"))


def report_output(path: str, is_dir: bool) -> bool:
    """A test run's own output, not a config: an Allure results or report folder,
    pytest-html's ``assets`` folder (its ``style.css`` and the tests' extras,
    ``<test id>_0_0.json``), or an allure-pytest file in a folder with another name.
    With a few hundred tests these would fill the search's file cap before the
    job's own config is reached (issue 11). JUnit XML and the HTML page never
    match the search's suffixes; JSON reports are recognized by content."""
    name = os.path.basename(path)
    if is_dir:
        return name in REPORT_DIRS or (name == "assets" and os.path.isfile(os.path.join(path, "style.css")))
    return REPORT_FILE.fullmatch(name) is not None


def data_folder(entries: list[os.DirEntry[str]]) -> tuple[str, str] | None:
    """``(what it holds, its main suffix)`` when a folder holds data, not
    configs: more than :data:`DATA_FOLDER_FILES` files, most of them
    (:data:`DATA_SHARE`) of one suffix (``30000 files, 30000 .jpg``): a
    dataset, shards, per-sample annotations. ``None`` otherwise."""
    files = [e for e in entries if not _is_dir(e)]
    if len(files) <= DATA_FOLDER_FILES:
        return None
    from collections import Counter

    suffix, count = Counter(os.path.splitext(e.name)[1].lower() for e in files).most_common(1)[0]
    if count < DATA_SHARE * len(files):
        return None
    return f"{len(files)} files, {count} {suffix or 'without a suffix'}", suffix


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def _list_folder(folder: str, scan: Scan) -> tuple[list[os.DirEntry[str]], bool] | None:
    """The folder's entries by name (at most :data:`FOLDER_LIST`), and whether
    there were more; ``None`` when it cannot be read."""
    entries: list[os.DirEntry[str]] = []
    more = False
    try:
        with os.scandir(folder) as it:
            for entry in it:
                if len(entries) >= FOLDER_LIST:
                    more = True
                    break
                entries.append(entry)
    except OSError:
        scan.unreadable += 1
        return None
    entries.sort(key=lambda e: e.name)
    return entries, more


def _link_leaves(entry: os.DirEntry[str], real_root: str) -> bool:
    """A symlinked file whose target is outside the root: a checkout's
    ``job.yaml -> /root/secret.yaml`` must not be read into a report."""
    try:
        if not entry.is_symlink():
            return False
    except OSError:
        return True
    target = os.path.realpath(entry.path)
    return os.path.commonpath([real_root, target]) != real_root


@dataclass
class _Limits:
    max_depth: int
    max_files: int
    max_entries: int
    deadline: float | None
    folder_entries: int
    folder_files: int


def find_configs(
    root: Path,
    *,
    max_depth: int = SEARCH_DEPTH,
    max_files: int = SEARCH_FILES,
    max_entries: int = SEARCH_ENTRIES,
    deadline: float | None = None,
    folder_entries: int = FOLDER_ENTRIES,
    folder_files: int = FOLDER_FILES,
) -> Scan:
    """YAML/JSON/TOML files under ``root``, breadth first, skipping VCS and
    hidden folders, virtual environments (any folder with ``pyvenv.cfg``),
    ``node_modules``, caches, build output, test suites, run records, test
    reports (:func:`report_output`, counted in ``skipped_reports``) and data
    folders (:func:`data_folder`). Each folder has its own budget
    (``folder_entries``, ``folder_files``) inside the search's. Symlinked
    folders are not followed (no loops), symlinked files only when they stay
    under ``root``. :meth:`Scan.incomplete` says what was not seen."""
    scan = Scan(root=str(root))
    limits = _Limits(max_depth, max_files, max_entries, deadline, folder_entries, folder_files)
    real_root = os.path.realpath(root)
    queue: deque[tuple[str, int]] = deque([(str(root), 0)])
    while queue:
        folder, depth = queue.popleft()
        listed = _list_folder(folder, scan)
        if listed is None:
            continue
        entries, more = listed
        data = data_folder(entries) if depth > 0 else None
        if data is not None:
            scan.data_dirs += 1
            scan.data_configs += data[1] in CONFIG_SUFFIXES
            if len(scan.data_places) < PLACES:
                scan.data_places.append(f"{scan.place(folder)} ({data[0]})")
            continue
        if _scan_folder(folder, depth, entries, more, scan, queue, limits, real_root):
            return scan
    return scan


def _scan_folder(
    folder: str,
    depth: int,
    entries: list[os.DirEntry[str]],
    listed_more: bool,
    scan: Scan,
    queue: deque[tuple[str, int]],
    limits: _Limits,
    real_root: str,
) -> bool:
    """One folder's entries, within its budget; True when the whole search stops."""
    taken = 0
    more = listed_more
    for index, entry in enumerate(entries):
        if index >= limits.folder_entries:
            more = True
            break
        scan.entries += 1
        if scan.entries > limits.max_entries:
            scan.limit = f"stopped after {limits.max_entries} entries"
            return True
        if limits.deadline is not None and time.monotonic() > limits.deadline:
            scan.limit = "stopped at the time limit"
            return True
        name = entry.name
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
        except OSError:
            scan.unreadable += 1
            continue
        if report_output(entry.path, is_dir):
            scan.skip_report(entry.path if is_dir else folder)
            continue
        if is_dir:
            if _skipped_dir(name, entry.path, depth, limits.max_depth):
                scan.skipped_dirs += 1
            else:
                queue.append((entry.path, depth + 1))
            continue
        if name.startswith(".") or name in SKIP_FILES or os.path.splitext(name)[1].lower() not in CONFIG_SUFFIXES:
            continue
        if _link_leaves(entry, real_root):
            scan.links_out += 1
            if len(scan.link_places) < PLACES:
                scan.link_places.append(scan.place(entry.path, folder=False))
            continue
        if taken >= limits.folder_files:  # the folder's share taken; its subfolders still searched
            more = True
            continue
        scan.files.append(entry.path)
        taken += 1
        if len(scan.files) >= limits.max_files:
            scan.limit = f"stopped at {limits.max_files} config files"
            return True
    if more:
        scan.partial_dirs += 1
        if len(scan.partial_places) < PLACES:
            scan.partial_places.append(f"{scan.place(folder)} ({len(entries)}{'+' if listed_more else ''} entries)")
    return False


def _skipped_dir(name: str, path: str, depth: int, max_depth: int) -> bool:
    return (
        name.startswith(".")
        or name in SKIP_DIRS
        or name.endswith(".egg-info")
        or depth + 1 > max_depth
        or _is_venv(path)
    )


def read_found(
    root: Path, scan: Scan, *, deadline: float | None = None, max_bytes: int = MAX_BYTES
) -> tuple[list[Source], list[str]]:
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
            continue
        sources.append(src)
    if too_big:
        notes.append(f"{too_big} found file(s) over {max_bytes / 1e6:.1f} MB not read (data, not configs)")
    if scan.skipped_reports:
        places = ", ".join(scan.report_places)
        notes.append(f"test reports not read as configs (Allure, pytest-html): {places}")
    if scan.data_dirs:
        notes.append(f"data folders not searched (they hold data, not configs): {', '.join(scan.data_places)}")
    if scan.links_out:
        places = ", ".join(scan.link_places)
        notes.append(f"{scan.links_out} symlink(s) leading out of the project not followed: {places}")
    return sources, notes


def process_sources(processes: Iterable[dict[str, Any]], own_pid: int | None = None) -> list[Source]:
    """Command lines of running processes that carry G10's flags.

    Ancestors of this run (``self``: the torchrun or srun that launched it)
    are the *launcher*: they describe this job. Others are separate jobs
    (a vLLM server) and are judged on their own flags.
    """
    out: list[Source] = []
    for p in processes:
        argv = split_title(p.get("cmdline") or [])  # a title (exec -a) holds the flags in argv[0]
        if not argv or p.get("pid") == own_pid:
            continue
        text = " ".join(argv[:64])
        if not _FLAG_HINT.search(text):
            continue
        findings = parse_argv(argv)
        if not findings:
            continue
        # name and the flags found only: a full command line may carry secrets (--api-key ...)
        name = str(p.get("name") or "") or program_word(argv[0]) or "?"
        kind = "launcher" if p.get("self") else "process"
        role = "serving" if serving_marker(" ".join(argv[:64])) else None
        out.append(Source(name=f"pid {p.get('pid')} ({name})", kind=kind, findings=findings, role=role))
    return out
