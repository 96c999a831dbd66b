"""Print the floors of pyproject.toml as pins: each ``name>=X`` of the
dependencies and of the ``test`` extra becomes ``name==X``, with markers
decided for the Python version given (``.ci/run``'s floors lane installs
these on Python 3.10 and runs the whole suite: the declared floors are the
tested floors, issue 20 item 7). A requirement with no ``>=`` floor is an
error: there would be nothing to test.
"""

from __future__ import annotations

import sys
from pathlib import Path

import tomllib
from packaging.markers import default_environment
from packaging.requirements import Requirement


def pins(pyproject: Path, python: str) -> list[str]:
    data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    project = data["project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"]["test"]]
    env = default_environment() | {"python_version": python, "python_full_version": f"{python}.0"}
    out = []
    for text in wanted:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        floors = [s.version for s in req.specifier if s.operator == ">="]
        if len(floors) != 1:
            raise SystemExit(f"floors: {text!r} has no single >= floor")
        out.append(f"{req.name}=={floors[0]}")
    return out


if __name__ == "__main__":
    print("\n".join(pins(Path(sys.argv[1]), sys.argv[2])))
