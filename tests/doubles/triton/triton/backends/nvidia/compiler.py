"""``triton.backends.nvidia.compiler``: how Triton 3.5 finds ptxas and runs it."""

import os
import re
import subprocess
from dataclasses import dataclass


@dataclass
class NvidiaTool:
    path: str
    version: str


def get_ptxas(arch=None):
    """``TRITON_PTXAS_PATH`` when it names a file, else the bundled ``bin/ptxas``."""
    bundled = os.path.join(os.path.dirname(__file__), "bin", "ptxas")
    for path in (os.environ.get("TRITON_PTXAS_PATH", ""), bundled):
        if path and os.path.isfile(path):
            out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
            found = re.search(r"release (\d+\.\d+)", out)
            return NvidiaTool(path, found.group(1) if found else "")
    raise RuntimeError("Cannot find ptxas")
