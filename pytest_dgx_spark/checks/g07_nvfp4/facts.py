"""G7's facts: what :func:`.check.gather` read, as typed records (:mod:`pytest_dgx_spark.checks.record`).

Every field of a nested record has a default that means "not read" (``None``): a capture written
before a field existed, or a child that did not get that far, replays as it did when these were
tables whose key was absent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import ClassVar

from pytest_dgx_spark.checks.kit import FactsBase
from pytest_dgx_spark.checks.record import Record
from pytest_dgx_spark.datadef import define


@define
class Device(Record):
    """One GPU as NVML lists it."""

    name: str | None = None
    capability: list[int] | None = None


@define
class Lib(Record):
    """One kernel library inspected with cuobjdump: its targets, or why not."""

    dist: str = ""
    path: str = ""
    #: the cubin targets; ``[]``: no device code (JIT); None: not listed (``error`` says why)
    targets: list[str] | None = None
    error: str | None = None


@define
class TritonCompile(Record):
    """The Triton compile child's answer (probes/scripts/triton_compile.py): ``ok``, else
    ``error_type``/``error``; or why nothing was compiled (``import_error``, ``api_error``,
    ``child``: the child hung or died). ``ok`` None: no outcome; ``python_h`` None: not looked."""

    dist: str = ""
    version: str | None = None
    import_error: str | None = None
    api_error: str | None = None
    api: str | None = None
    ok: bool | None = None
    error_type: str | None = None
    error: str | None = None
    seconds: int | float | None = None
    ptxas: str | None = None
    ptxas_version: str | None = None
    python_include: str | None = None
    python_h: bool | None = None
    python_h_dir: str | None = None
    child: str | None = None
    #: where the child imported Triton from (another Triton than the checked environment's: no verdict)
    triton_file: str | None = None


@define
class TritonPtxas(Record):
    """The ptxas Triton compiles SM121 kernels with; ``env``: the override variable when one is set."""

    dist: str = ""
    path: str = ""
    binary: str = ""
    env: str | None = None
    release: list[int] | None = None
    error: str | None = None


@define
class Cublas(Record):
    """The cuBLAS FP8 GEMMs load: its source (a distribution or a file) and release ``[major, minor]``."""

    source: str = ""
    release: list[int] | None = None


@define
class Facts(FactsBase):
    devices: list[Device] = field(default_factory=list)
    nvml_reason: str | None = None
    torch_capability: list[int] | None = None
    torch_device: str | None = None
    torch_version: str | None = None
    torch_cuda: str | None = None  # torch.version.cuda: None on a CPU-only wheel
    arch_list: list[str] | None = None
    arch_list_error: str | None = None
    env_arch_list: str | None = None
    cuobjdump: str | None = None  # the tool's path, or None when absent
    libs: list[Lib] = field(default_factory=list)
    libs_installed: list[str] = field(default_factory=list)  # NVFP4 dists installed
    triton: TritonPtxas | None = None
    triton_compile: TritonCompile | None = None  # in a child (N1)
    torch_dist: str | None = None  # the installed torch's version (dist metadata)
    native_jit: str | None = None  # TORCH_DISABLE_NATIVE_JIT as set
    cublas: Cublas | None = None
    vllm: str | None = None  # the installed vLLM's version
    ADDED: ClassVar[Mapping[str, str]] = {
        "triton_compile": "issue 22 (N1): the compile for 121; without it the ptxas release decides",
        "torch_dist": "issue 22 (N1): torch's version for the Python.h rule, which needs triton_compile",
        "native_jit": "issue 22 (N1): TORCH_DISABLE_NATIVE_JIT for the Python.h rule",
        "cublas": "issue 22 (G7+): the cuBLAS release; None: not read, the FP8 layout rule says so",
        "vllm": "issue 22 (G7+): vLLM's version; None: no vLLM FP8 finding",
    }
