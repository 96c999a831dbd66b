"""What a command line runs: inference servers, trainers, launchers, the memory cap each
declares in its flags, and the program behind a wrapper.

A full command line can carry secrets (``--api-key S``) and G6's facts go to reports, so only
the program, a known subcommand and the cap flags in :data:`READ_FLAGS` leave the process table
(:func:`reduce_cmdline`); the reduced line classifies exactly like the full one. A process title
(``exec -a``: the whole command line in argv[0]) is split into its words first, everywhere here.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Sequence

from pytest_dgx_spark.checks.record import Record
from pytest_dgx_spark.datadef import define
from pytest_dgx_spark.probes.commands import CommandResult
from pytest_dgx_spark.redact import program_word, split_title

#: text that only our own probe children carry in their ``python -c`` source
PROBE_MARK = "Prologue of every probe child"
PYTHON = re.compile(r"^(python|pypy)(\d+(\.\d+)*)?$")
#: interpreter options that take a value (``python -W ignore train.py``)
PY_OPTS_WITH_VALUE = {"-W", "-X", "-Q", "--check-hash-based-pycs"}
#: a Python training script by its file name: train.py, run_train.py, finetune.py, my-sft.py, pretrain2.py
TRAIN_SCRIPT = re.compile(r"(^|[_-])(train|finetune|fine_tune|fine-tune|sft|pretrain)\d*([_-][\w.-]*)?\.py$")
#: launchers whose workers are one job (ours, when the launcher is our ancestor); the training
#: ones only ever start training (mpirun/srun start anything)
LAUNCHER_PROGRAMS = {"torchrun", "deepspeed", "mpirun", "mpiexec", "srun"}
TRAINING_LAUNCHERS = {"torchrun", "deepspeed"}
LAUNCHER_MODULES = {"torch.distributed.run", "torch.distributed.launch", "accelerate.commands.launch",
                    "deepspeed.launcher.runner"}
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

#: programs that run another command: their options that take a value (``--opt=v`` always does)
WRAPPERS: dict[str, set[str]] = {name: set(options.split()) for name, options in {
    "timeout": "-s --signal -k --kill-after",
    "nohup": "",
    "env": "-u --unset -C --chdir -S --split-string",
    "nice": "-n --adjustment",
    "setsid": "",
    "stdbuf": "-i -o -e",
    "uv": "--with --python -p --project --directory --env-file --extra --group --package --index --from",
    "srun": "-N --nodes -n --ntasks -c --cpus-per-task -p --partition -t --time -J --job-name -w --nodelist "
            "-G --gpus --gpus-per-node --ntasks-per-node -A --account --mem --container-image "
            "--container-mounts --mpi -o --output -e --error --export --gres --cpu-bind -x --exclude -q "
            "--qos",
}.items()}


@define(frozen=True)
class Program:
    """What a command line runs: a program name (binary or console script), or
    a Python module, and the arguments that program gets."""

    name: str
    module: str | None
    script: str | None
    args: tuple[str, ...]
    code: bool = False  # python -c


def program_of(cmdline: Sequence[str]) -> Program:
    """``[python3, /usr/bin/vllm, serve, m]`` -> Program("vllm", args=("serve", "m")):
    console scripts run through their shebang, so the script's file name is the program."""
    cmdline = split_title(cmdline)
    if not cmdline:
        return Program("", None, None, ())
    exe = os.path.basename(cmdline[0])
    if not PYTHON.match(exe):
        return Program(exe, None, None, tuple(cmdline[1:]))
    i = 1
    while i < len(cmdline):
        arg = cmdline[i]
        if arg.startswith("-m") and (len(arg) > 2 or i + 1 < len(cmdline)):
            module, rest = (arg[2:], i + 1) if len(arg) > 2 else (cmdline[i + 1], i + 2)
            return Program("", module, None, tuple(cmdline[rest:]))
        if arg == "-c":
            return Program(exe, None, None, tuple(cmdline[i + 2 :]), code=True)
        if not arg.startswith("-"):
            return Program(os.path.basename(arg), None, arg, tuple(cmdline[i + 1 :]))
        i += 2 if arg in PY_OPTS_WITH_VALUE else 1
    return Program(exe, None, None, ())


def unwrap(cmdline: Sequence[str]) -> list[str]:
    """The command behind ``timeout 60``, ``nohup``, ``env A=1``, ``uv run``, ``srun -N 2``, ``nice``,
    ``setsid``, ``stdbuf`` (nested too); the line itself when no wrapper starts it or nothing follows."""
    cmd = split_title(cmdline)
    while cmd:
        name = os.path.basename(cmd[0])
        takes = WRAPPERS.get(name)
        if takes is None or (name == "uv" and cmd[1:2] != ["run"]):
            return cmd
        i = 2 if name == "uv" else 1
        while i < len(cmd) and (cmd[i].startswith("-") or (name == "env" and "=" in cmd[i])):
            i += 2 if cmd[i] in takes else 1
        if name == "timeout":
            i += 1  # the duration
        if i >= len(cmd):
            return cmd
        cmd = cmd[i:]
    return cmd


def job_name(cmdline: Sequence[str]) -> str:
    """What a job is called: the program behind its wrappers, a ``python -m``
    module, a Python script's file name (``timeout 60 python3 x.py`` -> ``x.py``)."""
    cmd = unwrap(cmdline)
    p = program_of(cmd)
    return program_word(p.module or p.name or (cmd[0] if cmd else ""))


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
    """A script's path from a known marker (``vllm/entrypoints/…``), else its file name."""
    at = next((script.find(m) for m in SCRIPT_MARKS if m in script), -1)
    return script[at:] if at >= 0 else os.path.basename(script)


def reduce_cmdline(cmdline: Sequence[str]) -> list[str]:
    """The command line with everything a check does not read left out:
    ``[python3, /h/.venv/bin/vllm, serve, m, --api-key, S, --gpu-memory-utilization, 0.9]``
    -> ``[python3, vllm, serve, --gpu-memory-utilization=0.9]`` (``-c`` source is ``…``)."""
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
    return out + [f"{flag}={v[:32]}" for flag in READ_FLAGS if (v := flag_value(p.args, flag)) is not None]


@define(frozen=True)
class Kind:
    """A recognised GPU workload and the memory cap its flags declare."""

    kind: str  # "vLLM", "SGLang", "Ollama", "llama.cpp", "TRT-LLM", "TGI", "trainer"
    cap: float | None
    cap_source: str


def _cap(
    args: Sequence[str], names: Sequence[str], default: float | None, note: str
) -> tuple[float | None, str]:
    """The cap a flag declares: only a fraction in (0, 1] is one; anything else
    (negative, zero, NaN, infinite) counts as uncapped, and the reason says so."""
    raw = flag_value(args, *names)
    if raw is None:
        return default, note
    try:
        value = float(raw)
    except ValueError:
        return None, f"unreadable {names[0]} {raw!r}"
    if not math.isfinite(value) or not 0 < value <= 1:
        return None, f"unreadable {names[0]} {raw!r} (not a fraction in (0, 1]): counted as uncapped"
    return value, f"{names[0]} {raw}"


def _server(p: Program, argv0: str, vllm_default: float) -> Kind | None:
    """vLLM, SGLang, Ollama, llama.cpp, TRT-LLM, TGI."""
    name, module, script, args = p.name, p.module or "", p.script or "", p.args
    first = args[0] if args else ""
    if ((name == "vllm" and first in ("serve", "run-batch")) or module.startswith("vllm.entrypoints")
            or "vllm/entrypoints/" in script or argv0.startswith("VLLM::")):
        note = f"vLLM default {vllm_default:g} (flag absent; newer vLLM docs say 0.92)"
        return Kind("vLLM", *_cap(args, VLLM_FLAGS, vllm_default, note))
    if (module.startswith("sglang.launch_server") or script.endswith("sglang/launch_server.py")
            or (name == "sglang" and first == "serve")):
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
        note = "TGI default --cuda-memory-fraction 1.0 (flag absent)"
        return Kind("TGI", *_cap(args, TGI_FLAGS, 1.0, note))
    return None


def classify(cmdline: Sequence[str], *, vllm_default: float = 0.9) -> Kind | None:
    """An inference server or trainer by its command line: program and module
    names the projects document, and Python scripts named train/finetune/sft."""
    cmdline = split_title(cmdline)
    if not cmdline:
        return None
    p = program_of(cmdline)
    server = _server(p, os.path.basename(cmdline[0]), vllm_default)
    if server is not None:
        return server
    if _launches(p, TRAINING_LAUNCHERS):
        return Kind("trainer", None, "a training launcher: no memory cap")
    if p.script and TRAIN_SCRIPT.search(os.path.basename(p.script)):
        return Kind("trainer", None, "a training script: no memory cap")
    return None


def is_launcher(cmdline: Sequence[str]) -> bool:
    """torchrun, accelerate launch, deepspeed, mpirun, srun: as our ancestor, its workers are our job."""
    return _launches(program_of(cmdline), LAUNCHER_PROGRAMS)


def _launches(p: Program, programs: set[str]) -> bool:
    accelerate = p.name == "accelerate" and p.args[:1] == ("launch",)
    return p.name in programs or accelerate or (p.module or "") in LAUNCHER_MODULES


def is_probe_child(cmdline: Sequence[str]) -> bool:
    """One of our own probe children (its ``python -c`` source carries the mark)."""
    return any(PROBE_MARK in arg for arg in cmdline[1:4])


@define
class GpuEntry(Record):
    """One process on a GPU's list (NVML's, or nvidia-smi's): its memory in bytes (None: no figure)."""

    pid: int | None = None
    used: int | None = None
    type: str = ""  # "compute" | "graphics"
    gpu: str = "0"  # the GPU's index
    name: str = ""  # nvidia-smi's process name (its first word's base name); NVML names none


COMPUTE_APPS = ["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory",
                "--format=csv,noheader,nounits"]


def compute_apps(command: Callable[[Sequence[str]], CommandResult]) -> tuple[CommandResult, list[GpuEntry]]:
    """nvidia-smi's GPU process list, for when NVML cannot be used from Python: the answer and its entries."""
    res = command(COMPUTE_APPS)
    return res, parse_compute_apps(res.stdout) if res.ok else []


#: more MiB than any GPU holds (1 EiB): a figure past it is no figure
_MAX_MIB = float(1 << 40)


def _mib_to_bytes(used: str) -> int | None:
    """``"8808"`` (MiB) -> bytes; ``[N/A]``, negative, NaN, infinite (``1e999``)
    or absurd -> None: nvidia-smi's output is data (``int(inf)`` crashed G6)."""
    try:
        mib = float(used)
    except ValueError:
        return None
    return int(mib * (1 << 20)) if math.isfinite(mib) and 0 <= mib <= _MAX_MIB else None


def parse_compute_apps(text: str) -> list[GpuEntry]:
    """``[gpu_uuid,] pid, process_name, used_memory`` CSV (MiB) -> entries."""
    out: list[GpuEntry] = []
    for line in text.splitlines():
        cols = [c.strip() for c in line.split(",")]
        if cols and cols[0].startswith("GPU-"):
            cols = cols[1:]
        if len(cols) < 3 or not cols[0].isdigit() or len(cols[0]) > 10:
            continue  # header, "No running processes found", blank, a pid no kernel gives
        used_bytes = _mib_to_bytes(cols[-1].split()[0] if cols[-1].split() else "")
        name = program_word(",".join(cols[1:-1]))
        out.append(GpuEntry(pid=int(cols[0]), used=used_bytes, type="compute", gpu="0", name=name))
    return out
