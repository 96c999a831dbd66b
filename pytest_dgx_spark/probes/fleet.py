"""The fingerprint of one node of a multi-node job, and its exchange.

Two-Spark jobs fail most often because the machines differ (container tag, NCCL build, driver, an
``NCCL_*`` variable on one side, free memory). The fleet child hands each rank's fingerprint to every
other rank over gloo on the CPU, with a timeout, so a missing peer is named instead of waited for.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pytest_dgx_spark import launch
from pytest_dgx_spark.probes import multinode as mn
from pytest_dgx_spark.probes.machine import MachineLike

#: environment variables that change how ranks talk to each other
ENV_PATTERN = re.compile(r"^(NCCL_\w+|UCX_\w+|GLOO_\w+|\w+_SOCKET_IFNAME|TORCH_NCCL_\w+)$")
#: distributions whose versions the nodes should share
PACKAGES = ("torch", "triton", "transformers", "accelerate", "deepspeed", "vllm", "nvidia-nccl-cu13",
            "nvidia-nccl-cu12")
#: container identity: NGC and Docker variables
CONTAINER_ENV = ("NVIDIA_PYTORCH_VERSION", "NVIDIA_BUILD_ID", "NVIDIA_PRODUCT_NAME", "PYTORCH_BUILD_VERSION",
                 "CUDA_VERSION")


def missing_rendezvous(env: Mapping[str, str]) -> list[str]:
    """``MASTER_ADDR``/``MASTER_PORT`` when a rank of a job of two or more lacks them."""
    rank, world = launch.job_rank(env)
    if rank is None or (world or 0) < 2:
        return []
    return [k for k in ("MASTER_ADDR", "MASTER_PORT") if not env.get(k, "").strip()]


def in_job(env: Mapping[str, str]) -> bool:
    """This process is one rank of a job of at least two with a rendezvous point (torchrun's
    variables, or an srun task's rank and step size with the point exported)."""
    rank, world = launch.job_rank(env)
    return rank is not None and (world or 0) >= 2 and not missing_rendezvous(env)


def fingerprint(
    machine: MachineLike, statuses: Mapping[str, str], *,
    results: Mapping[str, Mapping[str, Any]] | None = None,
    interfaces: Mapping[str, int | None] | None = None, image: str | None = None,
) -> dict[str, Any]:
    """What this node is: identity, versions, network settings, memory, each check's status and G-line.
    ``interfaces``: NCCL's and their MTUs as G10 resolves them (else ``NCCL_SOCKET_IFNAME``'s); ``mtu``
    is the lowest, the link's. ``image``: the container G9 found."""
    env = launch.torchrun_env(machine.env)
    ident = machine.identity()
    mem = machine.meminfo().get("fields") or {}
    if interfaces is None:
        named = mn.socket_ifnames(env.get("NCCL_SOCKET_IFNAME"))
        interfaces = {n: mn.interface_mtu(machine, n) for n in named}
    known = [v for v in interfaces.values() if isinstance(v, int)]
    return {
        "rank": env.get("RANK"),
        "node_rank": env.get("GROUP_RANK") or env.get("SLURM_NODEID") or env.get("NODE_RANK"),
        "local_rank": env.get("LOCAL_RANK"),
        **{k: ident.get(k) for k in ("hostname", "gpu", "capability", "driver", "cuda_driver", "python")},
        **_software(machine.packages().get("dists") or {}, env, image),
        "env": {k: v for k, v in sorted(env.items()) if ENV_PATTERN.match(k)},
        "nccl_ifname": ",".join(interfaces) or None, "mtu": min(known) if known else None,
        "mtus": dict(interfaces), "mem_available_kib": mem.get("MemAvailable"),
        "mem_free_kib": mem.get("MemFree"), "statuses": dict(statuses),
        "results": {cid: dict(r) for cid, r in (results or {}).items()},
    }


def _software(found: Mapping[str, Any], env: Mapping[str, str], image: str | None) -> dict[str, Any]:
    """The fingerprint's ``packages`` and ``container``."""
    container = {k: env[k] for k in CONTAINER_ENV if env.get(k)}
    return {
        "packages": {n: found[n].get("version") for n in PACKAGES if isinstance(found.get(n), Mapping)},
        "container": {"image": image, **container} if image else container,
    }


def exchange(machine: MachineLike, mine: Mapping[str, Any], timeout_s: float) -> dict[str, Any]:
    """Every rank's fingerprint (``{"fingerprints": [...]}``), or why not: ``error``, ``missing``
    (ranks that never arrived), ``store`` (``MASTER_ADDR:MASTER_PORT``), ``cause``: ``"torch"``
    (no torch.distributed with gloo) or ``"store"`` (rank 0 could not open it). Once per run."""
    child = machine.python_child(
        "fleet", ["_job_store.py", "fleet_child.py"], {"fingerprint": dict(mine), "timeout_s": timeout_s},
        step_timeout=max(timeout_s, machine.timeout), total_timeout=timeout_s * 3 + machine.timeout * 6,
        env=launch.torchrun_env(machine.env),
    )
    keys = ("rank", "world_size", "fingerprints", "missing", "error", "cause", "store")
    out: dict[str, Any] = {k: child.data.get(k) for k in keys}
    if not child.ok and not out.get("error"):
        out["error"] = child.describe("fleet exchange")
    return out
