"""Start the torch child while pytest is still starting.

``pytest --spark-preflight`` spends its first half second or more importing
pytest and every installed plugin before any hook of ours runs with the
options parsed; the CLI starts its probes at once. The one slow probe, the
torch child (seconds of ``import torch``), does not need the options to
start: it imports torch and then waits for its request on stdin (see
:meth:`pytest_dgx_spark.probes.machine.Machine.start_early`). So when pytest
imports this plugin and the command line plainly asks for the preflight on a
machine with an NVIDIA device node, the child is started here.

The run's :class:`~pytest_dgx_spark.probes.machine.Machine` claims it only if it
would start the very same child (same interpreter, same environment: a
conftest that sets ``CUDA_VISIBLE_DEVICES`` gets a fresh child); a child
nobody claims is killed when the run ends (the session's ``close``, else at
interpreter exit), and leaves by itself once its stdin closes.

Nothing starts for a run that may not need torch or runs elsewhere: a
replay, ``--spark-only`` without G1/G2/G5/G7, a ``-k`` selection, xdist
(``-n``: workers run the checks; a worker's own command line never holds
``--spark-preflight``, and ``PYTEST_XDIST_WORKER`` is inherited by any
pytest a test starts, so it says nothing), collection only, help.
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

#: options after which nothing runs here, or runs elsewhere
NOT_HERE = (
    "--spark-replay",
    "--collect-only",
    "--co",
    "--help",
    "-h",
    "--version",
    "-V",
    "--fixtures",
    "--markers",
    "--numprocesses",
    "--dist",
    "-k",
    "--setup-plan",
)

_started: dict[str, tuple[Spawned, dict[str, str], str]] = {}


def command_line(argv: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """pytest's arguments as it will read them: ``PYTEST_ADDOPTS`` first."""
    try:
        extra = shlex.split(env.get("PYTEST_ADDOPTS", ""))
    except ValueError:
        extra = []
    return [*extra, *argv]


def wanted(argv: Sequence[str], env: Mapping[str, str]) -> str | None:
    """Why the torch child should not start early (``None``: it should)."""
    args = command_line(argv, env)
    if "--spark-preflight" not in args:
        return "the command line does not ask for the preflight"
    for arg in args:
        name = arg.split("=", 1)[0]
        if name in NOT_HERE or (arg.startswith("-n") and not arg.startswith("--")):
            return f"{name} given"
    only = _only(args)
    if only is not None and not set(only) & set(TORCH_CHECKS):
        return "--spark-only names no check that reads torch"
    if not Machine(env=env).has_gpu_device_node():  # under SPARK_PREFLIGHT_HOST_ROOT, as the run sees it
        return "no NVIDIA device node"
    return None


def _only(args: Sequence[str]) -> list[str] | None:
    """The ids of the last ``--spark-only`` (``None``: not given)."""
    found: list[str] | None = None
    for i, arg in enumerate(args):
        value = None
        if arg == "--spark-only" and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith("--spark-only="):
            value = arg.split("=", 1)[1]
        if value is not None:
            found = [v.strip().upper() for v in value.split(",") if v.strip()]
    return found


def start(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> bool:
    """Start the torch child now if the command line wants the preflight
    (see :func:`wanted`); True when one started."""
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
    """The child started for ``key`` if it is the one the caller would start
    (same interpreter, same child environment); a different one is killed.
    One that died already is claimed too: following it reports how it died
    (a torch import that crashes crashes again in a new child)."""
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
