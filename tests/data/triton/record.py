"""Record what G7's Triton compile child finds for one interpreter (``tests/data/triton/``).

    python tests/data/triton/record.py PYTHON [NAME=VALUE ...] > compile_<what>.json

runs ``probes/scripts/triton_compile.py`` through ``g07_nvfp4._triton_compile`` with the
given interpreter (its site-packages are what is listed and imported) and the extra
environment, and prints the facts as JSON with that interpreter's site-packages folder
written as ``<site-packages>``, its CPython headers' folder as ``<include>``, and the temporary PTX folder as ``<tmp>``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from types import SimpleNamespace

from pytest_dgx_spark.checks.g07_nvfp4 import probe as g7probe
from pytest_dgx_spark.probes.machine import PYTHON_PATH_ENV, Machine


def main(argv: list[str]) -> int:
    python, extra = argv[0], dict(a.split("=", 1) for a in argv[1:])
    paths = subprocess.run(
        [python, "-c", "import os, sys, sysconfig; print(sysconfig.get_paths()['include']); "
         "print(os.pathsep.join(p for p in sys.path if p))"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout.strip()
    include, paths = paths.split("\n", 1)
    site = next(p for p in paths.split(os.pathsep) if p.endswith("site-packages"))
    env = {**os.environ, PYTHON_PATH_ENV: paths, **extra}
    started = time.monotonic()
    facts = g7probe.triton_compile(SimpleNamespace(machine=Machine(env=env, timeout=30, python=python)))  # type: ignore[arg-type]
    took = round(time.monotonic() - started, 2)
    text = json.dumps({"env": extra, "took_s": took, "facts": facts.to_dict() if facts else None}, indent=1)
    text = text.replace(site, "<site-packages>").replace(include, "<include>")
    print(re.sub(r"/tmp/tmp\w+", "<tmp>/kernel", text))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
