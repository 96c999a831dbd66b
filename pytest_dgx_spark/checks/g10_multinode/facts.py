"""G10's facts: what ``gather`` read about the job, the link and the other nodes, as typed records.

The records of what a probe reads live with the probe (:mod:`~pytest_dgx_spark.probes.multinode`:
the configs and the link; :mod:`~pytest_dgx_spark.probes.fleet`: the fingerprints); the all-reduce
probe's outcome is recorded here. Every field has a default that means "not read", so a capture of an
earlier version, which lacks a key, replays as it did.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import ClassVar

from pytest_dgx_spark.checks.kit import FactsBase, said
from pytest_dgx_spark.checks.record import Record
from pytest_dgx_spark.datadef import define
from pytest_dgx_spark.probes import configs as cfgs
from pytest_dgx_spark.probes.fleet import Exchange
from pytest_dgx_spark.probes.multinode import JobSource, Link, Memlock


def count_of(env: Mapping[str, str], name: str) -> int | None:
    """A job variable as a count (``2``, ``"1:2"``: the max), None when unset or no count."""
    return cfgs.as_count(said(env, name))


@define
class ProbeCheck(Record):
    """The first all-reduce's values, against what the sum of the ranks must be."""

    expected: float | None = None
    got: list[float] = field(default_factory=list)


@define
class ProbeData(Record):
    """What the all-reduce child (``scripts/allreduce_child.py``) said, key for key."""

    rank: int | None = None
    world_size: int | None = None
    local_rank: int | None = None
    error: str | None = None
    torch_import_error: str | None = None
    torch_version: str | None = None
    nccl_version: str | None = None
    device_name: str | None = None
    backend: str | None = None
    size_bytes: int | None = None
    iters: int | None = None
    wrong: bool | None = None
    check: ProbeCheck | None = None
    times_s: list[float] | None = None
    time_s: float | None = None
    group_time_s: float | None = None
    algbw_gbps: float | None = None
    busbw_gbps: float | None = None
    group_algbw_gbps: float | None = None
    group_busbw_gbps: float | None = None  # the group's figure: every rank's median, averaged


@define
class Probe(Record):
    """The all-reduce probe: ``ran`` (else ``reason``), the child's ``data``, ``error``, ``hung``."""

    ran: bool = False
    reason: str | None = None
    data: ProbeData = field(default_factory=ProbeData)
    error: str | None = None
    hung: bool = False


@define
class Facts(FactsBase):
    env: dict[str, str] = field(default_factory=dict)  # the launcher, TP, NCCL and Ray variables set
    sources: list[JobSource] = field(default_factory=list)  # given, found, process, launcher
    root: str = ""
    configs_given: bool = False  # --spark-config named configs: they replaced the search
    configs_found: int = 0
    own_outputs: list[str] = field(default_factory=list)  # files this tool wrote, not read as configs
    notes: list[str] = field(default_factory=list)
    gpu_count: int | None = None
    intrusive: bool = False
    probe: Probe | None = None  # None when not attempted
    link: Link | None = None
    fleet: Exchange | None = None  # every rank's fingerprint, or what went wrong; None: not compared
    container: str | None = None  # the container this runs in (G9's markers); None on the host
    dev_infiniband: list[str] | None = None  # /dev/infiniband's entries; None when it is absent
    memlock: Memlock | None = None

    #: issue 22 (G10+): a capture of an earlier version has none of them; their defaults judge nothing
    ADDED: ClassVar[Mapping[str, str]] = dict.fromkeys(
        ("container", "dev_infiniband", "memlock"), "issue 22: RDMA access in a container"
    )
