"""Training and serving configs and command lines read by value, for G10: a finding keeps the
key path or flag and its value (a grep for ``tensor_parallel`` flags ``parallelism_config_tp_size:
1``). Here are the keys and flags that say a tensor- or pipeline-parallel degree, a node count, a
strategy, a backend; how a parsed document is walked (iterative, bounded) and how a command line's
flags are read (``--flag N``, hydra ``a.b=N``, env prefixes, ``#SBATCH``, ``srun -N``).
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, field
from typing import Any

from pytest_dgx_spark.datadef import define
from pytest_dgx_spark.redact import program_word, split_title

MAX_BYTES = 1 << 20  # 1 MiB: a config larger than this is not a config
MAX_DEPTH = 64
MAX_NODES = 200_000
MAX_STRING = 16_384  # strings longer than this are not parsed as command lines

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


def norm(key: str) -> str:
    return str(key).strip().lstrip("-+").lower().replace("-", "_")


@define
class Finding:
    """One fact read from a config or a command line."""

    what: str  # tp | pp | nodes | strategy | backend | headless | tp_plan
    value: int | str | bool | None
    key: str  # the key path or flag that said it
    raw: str = ""  # the value as written, when it is not a plain number

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@define
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




def _tp_plan(value: Any, path: str) -> Finding:
    if value in (None, "", False) or value == {}:
        return Finding("tp_plan", None, path, raw=str(value))
    return Finding("tp_plan", "auto" if isinstance(value, str) else "custom", path, raw=str(value)[:80])


def _strategy(value: Any, path: str) -> Finding | None:
    return Finding("strategy", value.strip(), path) if isinstance(value, str) and value.strip() else None


def _backend(value: Any, path: str) -> Finding | None:
    return Finding("backend", value.strip().lower(), path) if isinstance(value, str) else None


def _headless(value: Any, path: str) -> Finding | None:
    return Finding("headless", True, path) if value is True else None


#: the keys whose finding is not a count: each with what reads its value
_NAMED: dict[str, Callable[[Any, str], Finding | None]] = {
    "tp_plan": _tp_plan, "headless": _headless,
    **dict.fromkeys(STRATEGY_KEYS, _strategy), **dict.fromkeys(BACKEND_KEYS, _backend),
}  # fmt: skip
_DEGREES = (("tp", TP_KEYS, TP_FLAGS), ("pp", PP_KEYS, PP_FLAGS))


def classify(key: str, value: Any, path: str, parent: str, *, flag: bool = False) -> Finding | None:
    """What ``key = value`` says, if anything G10 cares about."""
    k = norm(key)
    for what, keys, flags in _DEGREES:
        if k in keys or (flag and k in flags):
            return make_finding(what, value, path)
    if k in NODE_KEYS or (k == "num_nodes" and (flag or norm(parent) in NUM_NODES_PARENTS)):
        return make_finding("nodes", value, path)
    named = _NAMED.get(k)
    return named(value, path) if named is not None else None


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


def _next_value(words: list[str], i: int, slurm_nodes: bool) -> str | None:
    """The word after the flag at ``words[i]`` when it is the flag's value: there is one, and it is
    no flag (``-1`` is a value); srun's ``-N`` takes it whatever it is."""
    nxt = words[i + 1] if i + 1 < len(words) else None
    if nxt is None or slurm_nodes:
        return nxt
    return None if nxt.startswith("-") and as_count(nxt) is None else nxt


def _switch(k: str, where: str) -> Finding | None:
    """A flag that says something without a value: ``--headless``, accelerate's ``--use_fsdp``."""
    if k == "headless":
        return Finding("headless", True, where)
    strategy = LAUNCH_STRATEGY_FLAGS.get(k)
    return Finding("strategy", strategy, where) if strategy is not None else None


def _flag(words: list[str], i: int, slurm: bool, prefix: str, found: list[Finding]) -> int:
    """One ``--flag[=value]`` at ``words[i]``; how many following words it took as its value."""
    name, eq, val = words[i].partition("=")
    value: str | None = val if eq else None
    full = norm(name)
    k = full.rsplit(".", 1)[-1]  # --trainer.num_nodes=2 (LightningCLI)
    where = f"{prefix}{name}"
    if value is None and (switch := _switch(k, where)) is not None:
        found.append(switch)
        return 0
    slurm_nodes = slurm and (k == "nodes" or name == "-N")
    if not slurm_nodes and k not in VALUE_FLAGS:
        return 0
    v = value if value is not None else _next_value(words, i, slurm_nodes)
    if v is None:
        return 0
    parent = ("." + full).rsplit(".", 2)[-2]  # "" if none
    f = make_finding("nodes", v.split("-")[-1], where) if slurm_nodes else classify(k, v, where, parent, flag=True)
    if f is not None:
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
        _visit(obj, path, parent, depth, stack, found)
    if deep:
        notes.append(f"nested deeper than {MAX_DEPTH} levels: the deeper part not read")
    return found


def _visit(obj: Any, path: str, parent: str, depth: int, stack: list[tuple[Any, str, str, int]],
           found: list[Finding]) -> None:  # fmt: skip
    """One value of :func:`walk`: a mapping's or a command list's findings, a command string's, or the
    list's items to visit."""
    if isinstance(obj, dict):
        _walk_dict(obj, path, parent, depth, stack, found)
    elif isinstance(obj, list):
        _walk_list(obj, path, parent, depth, stack, found)
    elif isinstance(obj, str) and len(obj) <= MAX_STRING and _FLAG_HINT.search(obj):
        found.extend(parse_command_text(obj, f"{path}:" if path else ""))


def _walk_list(obj: list[Any], path: str, parent: str, depth: int, stack: list[tuple[Any, str, str, int]],
               found: list[Finding]) -> None:  # fmt: skip
    """One list of :func:`walk`: a command's words (``args: [--tp, 2]``) read as one, else its
    items to visit."""
    if obj and all(isinstance(x, str) for x in obj) and any(_FLAG_HINT.search(x) for x in obj[:200]):
        found.extend(parse_argv(list(obj), f"{path}:" if path else ""))
    else:
        stack.extend((value, f"{path}[{index}]", parent, depth + 1) for index, value in enumerate(obj))


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


def process_sources(processes: Iterable[dict[str, Any]], own_pid: int | None = None) -> list[Source]:
    """Command lines of running processes that carry G10's flags. Ancestors of this run
    (``self``: the torchrun or srun that launched it) are the *launcher*; others are separate
    jobs (a vLLM server), judged on their own flags."""
    sources = (_process_source(p) for p in processes if p.get("pid") != own_pid)
    return [s for s in sources if s is not None]


def _process_source(p: dict[str, Any]) -> Source | None:
    """One process's :class:`Source` when its command line carries G10's flags, else ``None``."""
    argv = split_title(p.get("cmdline") or [])  # a title (exec -a) holds the flags in argv[0]
    if not argv or not _FLAG_HINT.search(" ".join(argv[:64])):
        return None
    findings = parse_argv(argv)
    if not findings:
        return None
    # name and the flags found only: a full command line may carry secrets (--api-key ...)
    name = str(p.get("name") or "") or program_word(argv[0]) or "?"
    role = "serving" if serving_marker(" ".join(argv[:64])) else None
    kind = "launcher" if p.get("self") else "process"
    return Source(name=f"pid {p.get('pid')} ({name})", kind=kind, findings=findings, role=role)
