"""G2's finding codes: each stable code its results may carry, with what it means. A code once
released is never renamed or removed; ``docs/REFERENCE.md``'s findings table is built from these."""

from __future__ import annotations

from pytest_dgx_spark.checks.spec import FindingCode

CODES: tuple[FindingCode, ...] = (
    FindingCode("G2.probe-died", "FAIL", "the flash-attn probe crashed or hung"),
    FindingCode("G2.no-package", "FAIL",
                "flash-attn is in the metadata but no flash_attn package is importable"),
    FindingCode("G2.import-error", "FAIL", "flash-attn is installed but does not import"),
    FindingCode("G2.kernel-failed", "FAIL", "flash-attn imports but its kernel fails on this GPU"),
    FindingCode("G2.unsloth-ignores-sdpa", "WARN",
                "Unsloth uses flash-attn and ignores attn_implementation='sdpa'"),
    FindingCode("G2.torch-not-loaded", "SKIP", "flash-attn not checked: torch did not load (see G1)"),
)
