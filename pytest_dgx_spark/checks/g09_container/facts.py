"""G9's facts: the container markers, the installed distributions and what the image needs of the
driver, as typed records. Every field has a default that means "not read": a capture of an earlier
version, which lacks a key, replays as it did."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import ClassVar

from pytest_dgx_spark.checks.kit import FactsBase
from pytest_dgx_spark.checks.record import Record
from pytest_dgx_spark.datadef import define


@define
class Dist(Record):
    """One installed distribution, as ``probes.packages`` lists it."""

    name: str = ""
    version: str | None = None
    requires: list[str] = field(default_factory=list)  # its Requires-Dist lines
    location: str = ""


@define
class Facts(FactsBase):
    dockerenv: bool = False
    containerenv: dict[str, str] | None = None  # parsed /run/.containerenv when present
    cgroup: str | None = None
    cgroup_error: str | None = None
    pid1: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    pip_constraint: bool = False  # NGC's /etc/pip/constraint.txt (25.03+)
    #: /etc/pip/constraint.txt's name==version pins (empty in 25.10+: PYTORCH_BUILD_VERSION names torch's)
    constraint_pins: dict[str, str] = field(default_factory=dict)
    singularity: bool = False
    dists: dict[str, Dist] = field(default_factory=dict)  # by canonical name
    metadata_errors: int = 0
    #: the checked Python's PEP 508 marker environment: requirement markers are evaluated against it
    markers: dict[str, str] = field(default_factory=dict)
    cuda_env: dict[str, str] = field(default_factory=dict)  # CUDA_ENV as set: the image's floor
    #: the host driver: /proc/driver/nvidia/version's; NVML's only when the image names a CUDA floor
    host_driver: str | None = None
    host_driver_error: str | None = None
    nvml_driver: str | None = None
    nvml_cuda: int | None = None  # NVML's cuda_driver_version: 13000 = 13.0
    nvml_error: str | None = None
    compat_lib: str | None = None  # where the image's compat libcuda.so.1 points (libcuda.so.590.48.01)
    compat_linked: bool = False  # COMPAT_LINK is a symbolic link (an entrypoint turned compat on)
    runtime_mode: str | None = None  # ``mode`` of the NVIDIA container runtime's config.toml

    #: issue 22 (N2): a capture of an earlier version has none of them; their defaults compare nothing
    ADDED: ClassVar[Mapping[str, str]] = dict.fromkeys(
        ("cuda_env", "host_driver", "host_driver_error", "nvml_driver", "nvml_cuda", "nvml_error", "compat_lib",
         "compat_linked", "runtime_mode"),
        "issue 22: the image's CUDA floor",
    )
