"""The fingerprint of one node of a multi-node job, and its exchange.

Two-Spark jobs fail most often because the machines differ (container tag, NCCL build, driver, an
``NCCL_*`` variable on one side, free memory). The fleet child hands each rank's fingerprint to every
other rank over gloo on the CPU, with a timeout, so a missing peer is named instead of waited for.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import field
from typing import Any

from pytest_dgx_spark import launch
from pytest_dgx_spark.checks.record import FactsError, Record
from pytest_dgx_spark.datadef import define
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


@define
class NodeLine(Record):
    """One check's status and line on a node (``scope`` when it is not the whole check's)."""

    status: str = ""
    line: str = ""
    scope: str | None = None


@define
class Fingerprint(Record):
    """What one node of a job is, as it hands it to every rank: identity, versions (torch's and the
    NCCL library's added by the fleet child), network settings, memory, each check's status and line."""

    rank: str | None = None
    node_rank: str | None = None
    local_rank: str | None = None
    hostname: str | None = None
    gpu: str | None = None
    capability: str | None = None
    driver: str | None = None
    cuda_driver: str | None = None
    python: str | None = None
    packages: dict[str, str | None] = field(default_factory=dict)
    container: dict[str, str | None] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)  # the NCCL/UCX/GLOO variables
    nccl_ifname: str | None = None
    mtu: int | None = None  # the lowest of ``mtus``: the link's
    mtus: dict[str, int | None] = field(default_factory=dict)
    mem_available_kib: int | None = None
    mem_free_kib: int | None = None
    statuses: dict[str, str] = field(default_factory=dict)
    results: dict[str, NodeLine] = field(default_factory=dict)
    torch: str | None = None
    torch_cuda: str | None = None
    nccl_torch: str | None = None  # the NCCL torch was built with
    nccl_lib: str | None = None  # what the loadable libnccl.so.2 reports
    nccl_lib_error: str | None = None
    nccl_lib_path: str | None = None

    @property
    def who(self) -> str:
        """``rank 1 (spark-b)``."""
        return f"rank {self.rank_text} ({self.hostname or '?'})"

    @property
    def rank_text(self) -> str:
        return "?" if self.rank is None else self.rank


@define
class Exchange(Record):
    """Every rank's fingerprint, or why not: ``error``, ``missing`` (ranks that never arrived),
    ``store`` (``MASTER_ADDR:MASTER_PORT``), ``cause``: ``"torch"`` (no torch.distributed with gloo),
    ``"store"`` (rank 0 could not open it) or ``"rendezvous"`` (an srun task without a point)."""

    rank: int | None = None
    world_size: int | None = None
    fingerprints: list[Fingerprint] | None = None
    missing: list[int] | None = None
    error: str | None = None
    cause: str | None = None
    store: str | None = None


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
    machine: MachineLike, statuses: Mapping[str, str], *, results: Mapping[str, NodeLine] | None = None,
    interfaces: Mapping[str, int | None] | None = None, image: str | None = None,
) -> Fingerprint:
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
    packages, container = _software(machine.packages().get("dists") or {}, env, image)

    def text(key: str) -> str | None:
        return None if ident.get(key) is None else str(ident[key])

    return Fingerprint(
        rank=env.get("RANK"), node_rank=env.get("GROUP_RANK") or env.get("SLURM_NODEID") or env.get("NODE_RANK"),
        local_rank=env.get("LOCAL_RANK"), hostname=text("hostname"), gpu=text("gpu"),
        capability=text("capability"), driver=text("driver"), cuda_driver=text("cuda_driver"),
        python=text("python"), packages=packages, container=container,
        env={k: v for k, v in sorted(env.items()) if ENV_PATTERN.match(k)},
        nccl_ifname=",".join(interfaces) or None, mtu=min(known) if known else None, mtus=dict(interfaces),
        mem_available_kib=mem.get("MemAvailable"), mem_free_kib=mem.get("MemFree"), statuses=dict(statuses),
        results=dict(results or {}),
    )


def _software(
    found: Mapping[str, Any], env: Mapping[str, str], image: str | None
) -> tuple[dict[str, str | None], dict[str, str | None]]:
    """The fingerprint's ``packages`` and ``container``."""
    container: dict[str, str | None] = {k: env[k] for k in CONTAINER_ENV if env.get(k)}
    packages = {n: found[n].get("version") for n in PACKAGES if isinstance(found.get(n), Mapping)}
    return packages, ({"image": image, **container} if image else container)


def exchange(machine: MachineLike, mine: Fingerprint, timeout_s: float) -> Exchange:
    """Every rank's fingerprint, or why not (:class:`Exchange`). Once per run. A peer's fingerprint of
    another shape (another version of this tool) is a reason, not a crash."""
    child = machine.python_child(
        "fleet", ["_job_store.py", "fleet_child.py"], {"fingerprint": mine.to_dict(), "timeout_s": timeout_s},
        step_timeout=max(timeout_s, machine.timeout), total_timeout=timeout_s * 3 + machine.timeout * 6,
        env=launch.torchrun_env(machine.env),
    )
    keys = ("rank", "world_size", "fingerprints", "missing", "error", "cause", "store")
    data = {k: child.data.get(k) for k in keys}
    try:
        out = Exchange.from_dict({**data, "fingerprints": None})
        out.fingerprints = None if data["fingerprints"] is None else _fingerprints(data["fingerprints"])
    except FactsError as exc:
        out = Exchange(error=f"a rank's fingerprint cannot be read ({exc})")
    if not child.ok and not out.error:
        out.error = child.describe("fleet exchange")
    return out


def _fingerprints(sent: Any) -> list[Fingerprint]:
    """Every rank's fingerprint as a record; the first of another shape named by its rank's place and
    field (``fingerprints[1].mtu: expected an integer or null, got str 'jumbo'``)."""
    if not isinstance(sent, list):
        raise FactsError(f"expected a list, got {type(sent).__name__}", ("fingerprints",))
    out = []
    for i, fp in enumerate(sent):
        try:
            out.append(Fingerprint.from_dict(fp))
        except FactsError as exc:
            raise exc.inside(f"[{i}]").inside("fingerprints") from None
    return out
