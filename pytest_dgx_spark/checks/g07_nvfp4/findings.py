"""G7's finding codes: each stable code its results may carry, with what it means. A code once
released is never renamed or removed; ``docs/REFERENCE.md``'s findings table is built from these."""

from __future__ import annotations

from pytest_dgx_spark.checks.spec import FindingCode

CODES: tuple[FindingCode, ...] = (
    FindingCode("G7.torch-cpu-only", "FAIL", "a CPU-only torch on a GB10: nothing runs on the GPU"),
    FindingCode("G7.no-sm121-kernel", "FAIL", "torch's arch list has no cubin or PTX that runs on SM121"),
    FindingCode("G7.arch-list-env", "WARN", "TORCH_CUDA_ARCH_LIST builds nothing SM121 runs"),
    FindingCode("G7.nvfp4-no-target", "WARN", "NVFP4 kernels installed without an SM121 FP4 target"),
    FindingCode("G7.nvfp4-planned-no-kernel", "WARN",
                "--spark-precision nvfp4, but nothing targets sm_121a/sm_120f"),
    FindingCode("G7.triton-ptxas-old", "WARN", "Triton's ptxas is older than what accepts sm_121a"),
    FindingCode("G7.ptxas-rejects", "FAIL",
                "Triton's ptxas rejects sm_121a (or Triton refuses CUDA 13's ptxas)"),
    FindingCode("G7.triton-compile-failed", "WARN", "Triton could not compile a trivial kernel for sm_121a"),
    FindingCode("G7.python-h-missing", "FAIL/WARN", "no Python.h: Triton cannot build its launcher"),
    FindingCode("G7.fp8-cublas-tn-only", "WARN",
                "--spark-precision fp8 with a cuBLAS whose FP8 GEMMs are TN-only on cc 12.x"),
    FindingCode("G7.vllm-no-fp8-kernel", "WARN", "--spark-precision fp8, but vLLM has no cubin for SM121"),
    FindingCode("G7.arch-list-unknown", "INFO", "SM121 found, but torch's arch list could not be read"),
    FindingCode("G7.no-gpu", "SKIP", "no NVIDIA GPU found"),
    FindingCode("G7.not-sm121", "SKIP", "the GPU is not SM121: the NVFP4 vs FP8 question is GB10's"),
)
