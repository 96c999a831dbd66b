"""G9's finding codes: each stable code its results may carry, with what it means. A code once
released is never renamed or removed; ``docs/REFERENCE.md``'s findings table is built from these."""

from __future__ import annotations

from pytest_dgx_spark.checks.spec import FindingCode

CODES: tuple[FindingCode, ...] = (
    FindingCode("G9.driver-below-image", "FAIL",
                "the image needs a newer CUDA/driver than the host's, with no forward compatibility"),
    FindingCode("G9.broken-requirements", "FAIL",
                "installed distributions break their declared requirements"),
    FindingCode("G9.forward-compat-gb10", "WARN",
                "the image relies on forward compatibility, which GB10 may not support"),
    FindingCode("G9.replaced-by-pip", "WARN", "pip replaced an NGC container's own build"),
    FindingCode("G9.no-container", "WARN", "bare pip or an unknown container"),
)
