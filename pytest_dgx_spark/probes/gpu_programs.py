"""What a command line runs: inference servers, trainers, launchers, and the
memory cap each declares in its flags.

G6 asks this module two things: :func:`classify` (is this process GPU work,
and what cap did it start with) and :func:`reduce_cmdline` (the part of a
command line a check may record). A full command line can carry secrets
(``vllm serve m --api-key SECRET``, ``--hf_token hf_…``), and G6's facts are
written to reports and captures, so only the program, a known subcommand and
the cap flags in :data:`READ_FLAGS` ever leave the process table: the reduced
command line classifies exactly like the full one (a test asserts it). A
process title (``setproctitle``, ``exec -a``: the whole command line in
argv[0]) is split into its words first, everywhere here.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_dgx_spark.redact import program_word, split_title

#: text that only our own probe children carry in their ``python -c`` source
PROBE_MARK = "Prologue of every probe child"
PYTHON = re.compile(r"^(python|pypy)(\d+(\.\d+)*)?$")
#: interpreter options that take a value (``python -W ignore train.py``)
PY_OPTS_WITH_VALUE = {"-W", "-X", "-Q", "--check-hash-based-pycs"}
#: a Python training script: train.py, train_lora.py, run_train.py, finetune.py,
#: my-sft.py, pretrain2.py — the file name, not a directory name or "trainer_utils.py"
TRAIN_SCRIPT = re.compile(r"(^|[_-])(train|finetune|fine_tune|fine-tune|sft|pretrain)\d*([_-][\w.-]*)?\.py$")
#: launchers whose workers are one job (ours, when the launcher is our ancestor)
LAUNCHER_PROGRAMS = {"torchrun", "deepspeed", "mpirun", "mpiexec", "srun"}
#: the ones that only ever start training (mpirun/srun start anything)
TRAINING_LAUNCHERS = {"torchrun", "deepspeed"}
LAUNCHER_MODULES = {
    "torch.distributed.run",
    "torch.distributed.launch",
    "accelerate.commands.launch",
    "deepspeed.launcher.runner",
}
#: the memory-cap flags of each server (the only flags G6 reads)
VLLM_FLAGS = ("--gpu-memory-utilization", "--gpu_memory_utilization")
SGLANG_FLAGS = ("--mem-fraction-static", "--mem_fraction_static")
TRTLLM_FLAGS = ("--kv_cache_free_gpu_memory_fraction", "--kv-cache-free-gpu-memory-fraction")
TGI_FLAGS = ("--cuda-memory-fraction",)
READ_FLAGS = (*VLLM_FLAGS, *SGLANG_FLAGS, *TRTLLM_FLAGS, *TGI_FLAGS)
#: first arguments that name a subcommand the rules read (never a model name or a path)
SUBCOMMANDS = {"serve", "run-batch", "runner", "launch", "run", "chat"}
#: where a script's path says what it is (``…/vllm/entrypoints/openai/api_server.py``)
SCRIPT_MARKS = ("vllm/entrypoints/", "sglang/launch_server.py")


@dataclass(frozen=True)
class Program:
    """What a command line runs: a program name (binary or console script), or
    a Python module, and the arguments that program gets."""

    name: str
    module: str | None
    script: str | None
    args: tuple[str, ...]
    code: bool = False  # python -c


def program_of(cmdline: Sequence[str]) -> Program:
    """``[python3, /usr/bin/vllm, serve, m]`` -> Program("vllm", args=("serve", "m")).

    Console scripts run through their shebang, so ``/proc`` shows the
    interpreter first; the script's file name is the program.
    """
    cmdline = split_title(cmdline)
    if not cmdline:
        return Program("", None, None, ())
    exe = os.path.basename(cmdline[0])
    if not PYTHON.match(exe):
        return Program(exe, None, None, tuple(cmdline[1:]))
    i = 1
    while i < len(cmdline):
        arg = cmdline[i]
        if arg == "-m" and i + 1 < len(cmdline):
            return Program("", cmdline[i + 1], None, tuple(cmdline[i + 2 :]))
        if arg.startswith("-m") and len(arg) > 2:
            return Program("", arg[2:], None, tuple(cmdline[i + 1 :]))
        if arg == "-c":
            return Program(exe, None, None, tuple(cmdline[i + 2 :]), code=True)
        if arg in PY_OPTS_WITH_VALUE:
            i += 2
            continue
        if arg.startswith("-"):
            i += 1
            continue
        return Program(os.path.basename(arg), None, arg, tuple(cmdline[i + 1 :]))
    return Program(exe, None, None, ())


def flag_value(args: Sequence[str], *names: str) -> str | None:
    """The last value given for a flag, as ``--flag X`` or ``--flag=X``."""
    found = None
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                found = args[i + 1]
            elif arg.startswith(name + "="):
                found = arg[len(name) + 1 :]
    return found


def _script_tail(script: str) -> str:
    """A script's path as far as the rules read it: from a known marker
    (``vllm/entrypoints/…``), else the file name (a home folder stays out)."""
    for mark in SCRIPT_MARKS:
        at = script.find(mark)
        if at >= 0:
            return script[at:]
    return os.path.basename(script)


def reduce_cmdline(cmdline: Sequence[str]) -> list[str]:
    """The command line with everything a check does not read left out.

    ``[/usr/bin/python3, /home/u/.venv/bin/vllm, serve, org/model, --api-key, S,
    --gpu-memory-utilization, 0.9]`` -> ``[python3, vllm, serve,
    --gpu-memory-utilization=0.9]``: the interpreter and program by file
    name, a ``-m`` module, a known subcommand, and the flags of
    :data:`READ_FLAGS` (last value wins, as argparse does). ``python -c``
    source is replaced by ``…``. The program's own word is shown only as
    :func:`~pytest_dgx_spark.redact.program_word` (a token there is redacted).
    """
    cmd = split_title(cmdline)
    if not cmd:
        return []
    p = program_of(cmd)
    out = [program_word(cmd[0])]
    if p.module is not None:
        out += ["-m", p.module]
    elif p.code:
        out += ["-c", "…"]
    elif p.script is not None:
        out.append(_script_tail(p.script))
    if p.args and p.args[0] in SUBCOMMANDS:
        out.append(p.args[0])
    for flag in READ_FLAGS:
        value = flag_value(p.args, flag)
        if value is not None:
            out.append(f"{flag}={value[:32]}")
    return out


@dataclass(frozen=True)
class Kind:
    """A recognised GPU workload and the memory cap its flags declare."""

    kind: str  # "vLLM", "SGLang", "Ollama", "llama.cpp", "TRT-LLM", "TGI", "trainer"
    cap: float | None
    cap_source: str


def _cap(
    args: Sequence[str], names: Sequence[str], default: float | None, default_note: str
) -> tuple[float | None, str]:
    """The cap a flag declares. Only a fraction in (0, 1] is a cap: a negative,
    zero, NaN or infinite value (which the server would refuse or misread) is
    unreadable, so the process counts as uncapped and the reason says so."""
    raw = flag_value(args, *names)
    if raw is None:
        return default, default_note
    try:
        value = float(raw)
    except ValueError:
        return None, f"unreadable {names[0]} {raw!r}"
    if not math.isfinite(value) or not 0 < value <= 1:
        return None, f"unreadable {names[0]} {raw!r} (not a fraction in (0, 1]): counted as uncapped"
    return value, f"{names[0]} {raw}"


def _vllm(p: Program, argv0: str) -> bool:
    first = p.args[0] if p.args else ""
    return (
        (p.name == "vllm" and first in ("serve", "run-batch"))
        or (p.module or "").startswith("vllm.entrypoints")
        or "vllm/entrypoints/" in (p.script or "")
        or argv0.startswith("VLLM::")
    )


def _server(p: Program) -> Kind | None:
    """The other servers: SGLang, Ollama, llama.cpp, TRT-LLM, TGI."""
    name, module, script, args = p.name, p.module or "", p.script or "", p.args
    first = args[0] if args else ""
    if (
        module.startswith("sglang.launch_server")
        or script.endswith("sglang/launch_server.py")
        or (name == "sglang" and first == "serve")
    ):
        note = "no --mem-fraction-static (SGLang sizes its static pool itself)"
        return Kind("SGLang", *_cap(args, SGLANG_FLAGS, None, note))
    if (name == "ollama" and first in ("serve", "runner")) or name.startswith("ollama_llama_server"):
        return Kind("Ollama", None, "Ollama has no memory-fraction cap (loads models on demand)")
    if name == "llama-server":
        return Kind("llama.cpp", None, "llama-server has no memory-fraction cap")
    if name == "trtllm-serve" or module.startswith("tensorrt_llm.commands.serve"):
        note = "TRT-LLM default --kv_cache_free_gpu_memory_fraction 0.9 (flag absent)"
        return Kind("TRT-LLM", *_cap(args, TRTLLM_FLAGS, 0.9, note))
    if name in ("text-generation-launcher", "text-generation-server"):
        return Kind(
            "TGI", *_cap(args, TGI_FLAGS, 1.0, "TGI default --cuda-memory-fraction 1.0 (flag absent)")
        )
    return None


def classify(cmdline: Sequence[str], *, vllm_default: float = 0.9) -> Kind | None:
    """Recognise an inference server or trainer by its command line.

    The rule is deliberately bounded: program and module names the projects
    document, plus Python scripts whose file name says train/finetune/sft.
    """
    cmdline = split_title(cmdline)
    if not cmdline:
        return None
    p = program_of(cmdline)
    if _vllm(p, os.path.basename(cmdline[0])):
        note = f"vLLM default {vllm_default:g} (flag absent; newer vLLM docs say 0.92)"
        return Kind("vLLM", *_cap(p.args, VLLM_FLAGS, vllm_default, note))
    server = _server(p)
    if server is not None:
        return server
    first = p.args[0] if p.args else ""
    if (
        p.name in TRAINING_LAUNCHERS
        or (p.name == "accelerate" and first == "launch")
        or (p.module or "") in LAUNCHER_MODULES
    ):
        return Kind("trainer", None, "a training launcher: no memory cap")
    if p.script and TRAIN_SCRIPT.search(os.path.basename(p.script)):
        return Kind("trainer", None, "a training script: no memory cap")
    return None


def is_launcher(cmdline: Sequence[str]) -> bool:
    """Launchers (torchrun, accelerate launch, deepspeed, mpirun, srun): when one
    is an ancestor of this pytest, its other workers are this same job."""
    p = program_of(cmdline)
    return (
        p.name in LAUNCHER_PROGRAMS
        or (p.name == "accelerate" and p.args[:1] == ("launch",))
        or (p.module or "") in LAUNCHER_MODULES
    )


def is_probe_child(cmdline: Sequence[str]) -> bool:
    """One of our own probe children (its ``python -c`` source carries the mark)."""
    return any(PROBE_MARK in arg for arg in cmdline[1:4])
