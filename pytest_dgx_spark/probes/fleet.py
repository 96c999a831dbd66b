"""The fingerprint of one node of a multi-node job, and its exchange.

Two-Spark jobs fail most often because the two machines differ: another
container tag, another NCCL build, a driver update on one box, an ``NCCL_*``
variable set on one side only, less free memory on one node. Each rank
gathers a fingerprint of its node; the fleet child (``scripts/fleet_child.py``)
hands it to every other rank over a gloo process group on the CPU, with a
timeout, so a missing peer is named instead of waited for.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pytest_dgx_spark import launch
from pytest_dgx_spark.probes import multinode as mn

#: environment variables that change how ranks talk to each other
ENV_PATTERN = re.compile(r"^(NCCL_\w+|UCX_\w+|GLOO_\w+|\w+_SOCKET_IFNAME|TORCH_NCCL_\w+)$")
#: distributions whose versions the nodes should share (name as in metadata, lower case)
PACKAGES = (
    "torch",
    "triton",
    "transformers",
    "accelerate",
    "deepspeed",
    "vllm",
    "nvidia-nccl-cu13",
    "nvidia-nccl-cu12",
)
#: container identity: NGC and Docker variables, read from the environment
CONTAINER_ENV = ("NVIDIA_PYTORCH_VERSION", "NVIDIA_BUILD_ID", "NVIDIA_PRODUCT_NAME", "PYTORCH_BUILD_VERSION", "CUDA_VERSION")


def in_job(env: Mapping[str, str]) -> bool:
    """This process is one rank of a job of at least two with a rendezvous
    point (torchrun sets all four; an srun task has its rank and the step's
    size, :mod:`pytest_dgx_spark.launch`, and the job script exports the point)."""
    return not missing_rendezvous(env) and _world(env) >= 2


def _world(env: Mapping[str, str]) -> int:
    rank, world = launch.job_rank(env)
    return world if rank is not None and world is not None else 0


def missing_rendezvous(env: Mapping[str, str]) -> list[str]:
    """``MASTER_ADDR``/``MASTER_PORT`` when a rank of a job of two or more lacks them."""
    if _world(env) < 2:
        return []
    return [k for k in ("MASTER_ADDR", "MASTER_PORT") if not env.get(k, "").strip()]


def socket_mtus(machine: Any, env: Mapping[str, str]) -> dict[str, int | None]:
    """The MTU of each interface ``NCCL_SOCKET_IFNAME`` names exactly: what a
    caller without G10's link facts can say (G10 passes ``interfaces``)."""
    names = mn.socket_ifnames(env.get("NCCL_SOCKET_IFNAME"))
    return {name: mn.interface_mtu(machine, name) for name in names}


def fingerprint(
    machine: Any,
    statuses: Mapping[str, str],
    *,
    results: Mapping[str, Mapping[str, Any]] | None = None,
    interfaces: Mapping[str, int | None] | None = None,
    image: str | None = None,
) -> dict[str, Any]:
    """What this node is: identity, versions, network settings, memory, and
    each check's status and G-line on this node (``results``).

    ``interfaces``: the interfaces NCCL's data goes over and their MTUs, as
    G10's link rules resolve them (the net devices behind the RoCE devices
    ``NCCL_IB_HCA`` selects; the socket interface when sockets carry the
    data). ``mtu`` is the lowest of them: the link runs at it.

    ``image``: the container G9 found (``NGC PyTorch 25.09 image in a Docker
    container``, ``none found``): a node outside the image, or in another
    image without NGC's variables, differs too.
    """
    env = launch.torchrun_env(machine.env)
    ident = machine.identity()
    found = machine.packages().get("dists") or {}
    dists = {name: found[name].get("version") for name in PACKAGES if isinstance(found.get(name), Mapping)}
    mem = machine.meminfo().get("fields") or {}
    mtus = dict(socket_mtus(machine, env) if interfaces is None else interfaces)
    known = [v for v in mtus.values() if isinstance(v, int)]
    return {
        "rank": env.get("RANK"),
        "node_rank": env.get("GROUP_RANK") or env.get("SLURM_NODEID") or env.get("NODE_RANK"),
        "local_rank": env.get("LOCAL_RANK"),
        "hostname": ident.get("hostname"),
        "gpu": ident.get("gpu"),
        "capability": ident.get("capability"),
        "driver": ident.get("driver"),
        "cuda_driver": ident.get("cuda_driver"),
        "python": ident.get("python"),
        "packages": dists,
        "container": {
            **({"image": image} if image else {}),
            **{k: env[k] for k in CONTAINER_ENV if env.get(k)},
        },
        "env": {k: v for k, v in sorted(env.items()) if ENV_PATTERN.match(k)},
        "nccl_ifname": ",".join(mtus) or None,
        "mtu": min(known) if known else None,
        "mtus": mtus,
        "mem_available_kib": mem.get("MemAvailable"),
        "mem_free_kib": mem.get("MemFree"),
        "statuses": dict(statuses),
        "results": {cid: dict(r) for cid, r in (results or {}).items()},
    }


def exchange(machine: Any, mine: Mapping[str, Any], timeout_s: float) -> dict[str, Any]:
    """Every rank's fingerprint (``{"fingerprints": [...]}``), or why not:
    ``{"error": …, "missing": [ranks that never arrived], "store":
    "MASTER_ADDR:MASTER_PORT", "cause": "torch" (no torch.distributed with
    gloo here) | "store" (rank 0 could not open the store)}``. Runs once per run."""
    child = machine.python_child(
        "fleet",
        ["_job_store.py", "fleet_child.py"],
        {"fingerprint": dict(mine), "timeout_s": timeout_s},
        step_timeout=max(timeout_s, machine.timeout),
        total_timeout=timeout_s * 3 + machine.timeout * 6,
        env=launch.torchrun_env(machine.env),
    )
    keys = ("rank", "world_size", "fingerprints", "missing", "error", "cause", "store")
    out: dict[str, Any] = {k: child.data.get(k) for k in keys}
    if not child.ok and not out.get("error"):
        out["error"] = child.describe("fleet exchange")
    return out
