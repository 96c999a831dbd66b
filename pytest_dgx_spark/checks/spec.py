"""What a check's ``findings`` module declares: its stable finding codes. Standard library only. (The
check's identity is its package's ``spec.json``, which :mod:`pytest_dgx_spark.catalog` reads.)"""

from __future__ import annotations

from typing import NamedTuple


class FindingCode(NamedTuple):
    """One stable code a check may put on a result (``G4.xid-hardware``): it names a finding, not
    its words, so a dashboard, a scheduler, diagnose or a test can key on it. Released once, kept."""

    code: str
    #: the statuses a result carrying it may have, ``/``-separated (``FAIL/WARN``)
    status: str
    #: one line: what the finding means
    meaning: str

    @property
    def check(self) -> str:
        return self.code.split(".", 1)[0]
