"""What a check declares about itself, read on every pytest run (markers, ``--help``, ``--spark-only``):
plain data, standard library only. Each check package's ``__init__`` holds one :class:`CheckSpec`;
:mod:`pytest_dgx_spark.catalog` finds them by convention (a package ``g<NN>_<name>``), so adding a
check adds a package and edits no table."""

from __future__ import annotations

from typing import NamedTuple

#: the marker every check's test carries (``-m spark_preflight``)
MARKER_ALL = "spark_preflight"


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


class CheckSpec(NamedTuple):
    """A check's identity and what the plugin builds from it: its test's id and title, its area
    marker (with the phrase the marker's help says of the area) and whether it reads the torch child.
    ``module`` is its package's name, filled in by the catalog. Its finding codes are in its
    ``findings`` module, loaded only by the preflight."""

    id: str
    title: str
    marker: str
    #: what the area marker's help says of its checks: "of thermals and power"
    area: str
    #: reads the run's torch child (the engine starts one only when a selected check does)
    needs_torch: bool = False
    module: str = ""

    @property
    def number(self) -> int:
        return int(self.id[1:])

    @property
    def markers(self) -> tuple[str, str]:
        return (MARKER_ALL, self.marker)
