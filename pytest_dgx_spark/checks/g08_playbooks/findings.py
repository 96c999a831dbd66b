"""G8's finding codes: each stable code its results may carry, with what it means. A code once
released is never renamed or removed; ``docs/REFERENCE.md``'s findings table is built from these."""

from __future__ import annotations

from pytest_dgx_spark.checks.spec import FindingCode

CODES: tuple[FindingCode, ...] = (
    FindingCode("G8.playbook-issues", "WARN", "open upstream issues name the chosen playbook"),
    FindingCode("G8.no-playbook", "INFO", "open playbook issues listed; no playbook named to match them"),
    FindingCode("G8.offline", "SKIP", "offline: GitHub not contacted"),
    FindingCode("G8.github-unavailable", "SKIP",
                "GitHub's issue list could not be read (timeout, rate limit, HTTP error)"),
)
