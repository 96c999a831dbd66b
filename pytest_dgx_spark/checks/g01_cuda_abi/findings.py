"""G1's finding codes: each stable code its results may carry, with what it means. A code once
released is never renamed or removed; ``docs/REFERENCE.md``'s findings table is built from these."""

from __future__ import annotations

from pytest_dgx_spark.checks.spec import FindingCode

CODES: tuple[FindingCode, ...] = (
    FindingCode("G1.child-not-started", "FAIL", "the torch child process could not start"),
    FindingCode("G1.torch-import-error", "FAIL", "torch is installed but does not import"),
    FindingCode("G1.child-died", "FAIL",
                "the torch child crashed or hung in a G1 step (import, load, CUDA init, tiny kernel)"),
    FindingCode("G1.cuda-major-mismatch", "FAIL",
                "shared objects link another CUDA major than torch's (or the reference)"),
    FindingCode("G1.driver-too-old", "FAIL",
                "torch or the CUDA modules need a newer CUDA than the driver supports"),
    FindingCode("G1.torch-cuda-major", "FAIL",
                "torch is built for another CUDA major than the profile needs (13 on GB10)"),
    FindingCode("G1.torch-cpu-only", "FAIL", "a CPU-only torch on a machine with an NVIDIA GPU"),
    FindingCode("G1.kernel-failed", "FAIL", "torch's tiny kernel failed or returned a wrong result"),
    FindingCode("G1.cuda-unavailable", "FAIL",
                "torch.cuda.is_available() is False with a GPU and a driver present"),
    FindingCode("G1.load-failed", "FAIL", "an extension shared object does not load (dlopen error)"),
    FindingCode("G1.no-cuda-variant", "FAIL", "a per-CUDA-version package ships no build for torch's CUDA"),
    FindingCode("G1.driver-library-mismatch", "FAIL",
                "the loaded NVIDIA kernel module is not the installed user-space driver"),
    FindingCode("G1.known-bad", "FAIL/WARN", "the kernel/driver/module combination is on the known-bad list"),
    FindingCode("G1.cma-accounting", "WARN", "CmaFree > CmaTotal: the kernel's KHO/CMA accounting bug"),
    FindingCode("G1.leftover-runtime", "WARN", "CUDA runtimes of another major that nothing links"),
    FindingCode("G1.not-loaded", "WARN",
                "extension objects not loaded: the torch child stopped in another check's step"),
    FindingCode("G1.cpu-torch-cuda-modules", "WARN", "a CPU-only torch, yet installed modules link CUDA"),
    FindingCode("G1.nothing-to-check", "SKIP", "no torch and no CUDA-linked module: no CUDA ABI to check"),
)
