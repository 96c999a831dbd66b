"""G1 — CUDA 12/13 ABI: find the module linked to the wrong CUDA major before it segfaults.

GB10 needs a CUDA 13 stack; most pip wheels were built for CUDA 12 and fail late (``libnvrtc.so.12:
cannot open shared object file``, an ``undefined symbol``, a SIGSEGV at the first ``.cuda()``), and
PyPI's aarch64 torch before 2.11 is CPU-only. Statically: the ``DT_NEEDED`` of every shared object in
the package folders, ldconfig's and ``LD_LIBRARY_PATH``'s CUDA libraries, each file's distribution;
dynamically: the torch child's tiny kernel, then a ``dlopen`` of every CUDA- or libtorch-linked
extension. Only cudart/cublas/cublasLt/nvrtc count (their major tracks CUDA's). The reference major is
torch's, else the driver's, else the profile's; a tie never blames the newer major. The driver stack
(kernel, module version and flavour, CMA, NVML; issue 22, N3) is matched against
:mod:`pytest_dgx_spark.known_bad`: a DGX OS update can break a box that passed the day before.

This module is the check's face (``FACTS``, ``gather``, ``evaluate``, ``torch_request``); the parts
live beside it: :mod:`.facts` (the records), :mod:`.gather` (the probing), :mod:`.view` (what every
stage reads), the stages (:mod:`.stack`, :mod:`.torch_stages`, :mod:`.object_stages`) and
:mod:`.verdict` (the line it ends with).
"""

from __future__ import annotations

from typing import Any

from pytest_dgx_spark.checks.g01_cuda_abi import gather as probing
from pytest_dgx_spark.checks.g01_cuda_abi import object_stages, stack, torch_stages, verdict
from pytest_dgx_spark.checks.g01_cuda_abi.facts import Facts
from pytest_dgx_spark.checks.g01_cuda_abi.view import view
from pytest_dgx_spark.checks.kit import CheckContext, Findings, Params
from pytest_dgx_spark.model import Result

FACTS = Facts


def torch_request(ctx: CheckContext) -> dict[str, Any]:
    """Ask the torch child to load every CUDA- or libtorch-linked extension object."""
    return probing.torch_request(ctx)


def gather(ctx: CheckContext) -> Facts:
    """The scan, the owners, ldconfig, NVML, the torch child and the driver stack (decides nothing)."""
    return probing.gather(ctx)


def evaluate(facts: Facts, params: Params) -> Result:
    """Decide G1 from the facts (pure), stage by stage."""
    v = view(facts, params)
    out = Findings("G1")
    verdict.readings(v, out)
    stack.stack(v, out)
    torch_stages.torch_child(v, out)
    object_stages.mismatch(v, out)
    torch_stages.torch_fits(v, out)
    kernel = torch_stages.kernel(v, out)
    out.read("kernel", kernel)
    object_stages.loads(v, out)
    object_stages.variant_sets(v, out)
    object_stages.arch_notes(v, out)
    verdict.unverified(v, out)
    loaded = facts.torch.loaded
    out.read("objects_loaded", loaded - len([1 for o in v.failed.values() if not o.retry_ok]))
    if out.problems:
        return verdict.shortened(out, out.result())
    skip = None if out.warnings else verdict.nothing_to_check(v)  # a known-bad stack is said even without torch
    if skip is not None:
        skip.readings, skip.details = list(out.readings), list(out.details)
        return skip
    object_stages.leftovers(v, out)
    verdict.cpu_torch_with_cuda_modules(v, out)
    return verdict.verdict(v, out, kernel, loaded)
