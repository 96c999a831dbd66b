"""G1's facts: what the scan, the package metadata, NVML, the torch child and the driver stack said.

Every field has a default that means "not read", so a capture written by an older version (which
lacked a key) replays as its run decided. The scan's records (:class:`Linker`, :class:`Provider`,
:class:`Scan`) belong to the ELF probe that makes them; the rest are built in :mod:`.gather`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Any, ClassVar

from pytest_dgx_spark import known_bad
from pytest_dgx_spark.checks.kit import ChildFacts, FactsBase
from pytest_dgx_spark.checks.record import Record
from pytest_dgx_spark.datadef import define
from pytest_dgx_spark.probes.elf import Linker, Provider, Scan

__all__ = ["Facts", "ImportOutcome", "Linker", "Load", "LoadFailure", "Owner", "Provider", "Scan", "TinyKernel",
           "TorchData"]


@define
class Owner(Record):
    """The installed distribution that lists a file (or a distribution of interest by itself)."""

    name: str = ""
    version: str | None = None
    hint: str | None = None  # the importable module


@define
class Load(Record):
    """An extension object the torch child ``dlopen``\\ s; a per-CUDA (``tag``) or per-arch (``sm``)
    set of alternatives has a ``group``, of which the child loads one."""

    path: str = ""
    name: str = ""
    module: str | None = None
    group: str | None = None
    tag: int | None = None
    sm: int | None = None

    def request(self) -> dict[str, Any]:
        """As the child reads it: a key of a set is there only for a member of one."""
        return {k: v for k, v in self.to_dict().items() if v is not None or k in ("path", "name", "module")}


@define
class ImportOutcome(Record):
    ok: bool = False
    error: str | None = None


@define
class LoadFailure(Record):
    """Why an object did not load; ``imported``: its package's import (the JSON's ``import``),
    ``retry_ok``: it loaded once that ran."""

    ok: bool = False
    error: str | None = None
    retry_ok: bool = False
    imported: ImportOutcome | None = field(default=None, metadata={"key": "import"})


@define
class TinyKernel(Record):
    """torch's tiny kernel: ``ok``, the value it summed (56.0), or the error."""

    ok: bool = False
    value: Any = None
    error: str | None = None


@define
class TorchData(Record):
    """What G1 reads of the torch child's data (the child reports more, for other checks)."""

    torch_version: str | None = None
    torch_cuda: str | None = None
    torch_import_error: str | None = None
    cuda_available: bool | None = None
    cuda_error: str | None = None
    device_count: int = 0
    device_name: str | None = None
    kernel: TinyKernel | None = None
    loaded: int = 0
    load_failed: dict[str, LoadFailure] = field(default_factory=dict)
    variants: dict[str, str | None] = field(default_factory=dict)  # group -> the path the child loaded


@define
class Facts(FactsBase):
    scan: Scan = field(default_factory=Scan)
    owners: dict[str, Owner] = field(default_factory=dict)  # path -> owner, linkers and providers only
    ldconfig: list[Provider] = field(default_factory=list)
    ldconfig_error: str | None = None
    ld_library_path: list[Provider] = field(default_factory=list)
    dists: dict[str, Owner] = field(default_factory=dict)  # torch and the nvidia-*-cu* wheels
    driver_cuda: int | None = None
    driver_version: str | None = None
    nvml_reason: str | None = None
    gpus: list[str] = field(default_factory=list)
    arch: str | None = None  # platform.machine(): aarch64 PyPI torch before 2.11 is CPU-only
    torch: TorchData = field(default_factory=TorchData)
    child: ChildFacts = field(default_factory=ChildFacts)
    requested: list[Load] = field(default_factory=list)
    # the driver stack (issue 22, N3); an older capture has none of it (``stack_read`` False)
    stack_read: bool = False
    kernel_release: str | None = None  # /proc/sys/kernel/osrelease
    kernel_release_error: str | None = None
    nvidia_module: str | None = None  # the NVRM line of /proc/driver/nvidia/version
    nvidia_module_error: str | None = None
    cma_kb: dict[str, int] = field(default_factory=dict)  # CmaTotal, CmaFree of /proc/meminfo
    meminfo_error: str | None = None
    nvml_init_error: str | None = None  # NVML's error name when nvmlInit failed
    nvml_version: str | None = None  # "13.580.173.02": the CUDA major, then the driver's version
    known_bad: list[known_bad.Entry] = field(default_factory=list)  # the list this run decided with
    known_bad_errors: list[str] = field(default_factory=list)

    #: an older capture lacks these: their defaults skip the stack stage, so it decides as its run did
    ADDED: ClassVar[Mapping[str, str]] = dict.fromkeys(
        ("stack_read", "kernel_release", "kernel_release_error", "nvidia_module", "nvidia_module_error", "cma_kb",
         "meminfo_error", "nvml_init_error", "nvml_version", "known_bad", "known_bad_errors"),
        "issue 22: the driver stack and the known-bad list",
    )  # fmt: skip

    def owner(self, path: str) -> Owner | None:
        return self.owners.get(path)

    @property
    def torch_dist(self) -> str | None:
        """The installed torch distribution's version (metadata), else None."""
        return self.dists["torch"].version if "torch" in self.dists else None
