"""Start the torch child while pytest is still starting: ``pytest --spark-preflight`` spends half a
second or more loading plugins, and the child (seconds of ``import torch``) needs no option. It
starts at plugin import when the command line plainly asks for the preflight on a machine with an
NVIDIA device node; the run claims it only if it would start the very same child, and one nobody
claims is killed at the end of the run (or at exit).
"""

from __future__ import annotations

import atexit
import os
import shlex
import sys
from collections.abc import Mapping, Sequence

from pytest_dgx_spark.catalog import TORCH_CHECKS
from pytest_dgx_spark.probes.child import Spawned, abandon, child_env
from pytest_dgx_spark.probes.machine import TORCH_SCRIPTS, Machine, spawn_early

#: options after which nothing runs here, or it runs elsewhere
NOT_HERE = frozenset({"--spark-replay", "--collect-only", "--collectonly", "--co", "--help", "-h", "--version", "-V",
                      "--fixtures", "--markers", "--numprocesses", "--dist", "-k", "--setup-plan", "--setupplan",
                      "--setup-only", "--setuponly", "--spark-python"})  # fmt: skip

_started: dict[str, tuple[Spawned, dict[str, str], str]] = {}


def wanted(argv: Sequence[str], env: Mapping[str, str]) -> str | None:
    """Why the torch child should not start early (``None``: it should)."""
    try:
        args = [*shlex.split(env.get("PYTEST_ADDOPTS", "")), *argv]  # as pytest reads them
    except ValueError:
        args = list(argv)
    if "--spark-preflight" not in args:
        return "the command line does not ask for the preflight"
    only: list[str] | None = None
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name in NOT_HERE or (arg.startswith("-n") and not arg.startswith("--")):
            return f"{name} given"
        if name == "--spark-only" and (eq or i + 1 < len(args)):
            only = [v.strip().upper() for v in (value if eq else args[i + 1]).split(",") if v.strip()]
    if only is not None and not set(only) & set(TORCH_CHECKS):
        return "--spark-only names no check that reads torch"
    if not Machine(env=env).has_gpu_device_node():  # under SPARK_PREFLIGHT_HOST_ROOT, as the run sees it
        return "no NVIDIA device node"
    return None


def start(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> bool:
    """Start the torch child now if the command line wants the preflight; True when one started."""
    argv = list(sys.argv[1:] if argv is None else argv)
    env = dict(os.environ if env is None else env)
    if "torch" in _started or wanted(argv, env) is not None:
        return False
    spawned = spawn_early(TORCH_SCRIPTS, env)
    if spawned is None:
        return False
    _started["torch"] = (spawned, child_env(base=env), sys.executable)
    atexit.register(drop)
    return True


def claim(key: str, env: Mapping[str, str], python: str) -> Spawned | None:
    """The child started for ``key`` if the caller would start the same one (interpreter and child
    environment), else killed; one that died is claimed too: following it says how it died."""
    entry = _started.pop(key, None)
    if entry is None:
        return None
    spawned, its_env, its_python = entry
    if its_python == python and its_env == child_env(base=env):
        return spawned
    abandon(spawned)
    return None


def drop() -> int:
    """Kill the children started here that nobody claimed; how many."""
    left = [spawned for spawned, _, _ in _started.values()]
    _started.clear()
    for spawned in left:
        abandon(spawned)
    return len(left)
