"""``triton.backends.nvidia.compiler``: how Triton 3.6+ finds ptxas and runs it. For
capability 100 and up it uses the bundled ``ptxas-blackwell`` where there is one (overridden
by ``TRITON_PTXAS_BLACKWELL_PATH``), else ``ptxas`` (``TRITON_PTXAS_PATH``)."""

import os
import re
import subprocess
from dataclasses import dataclass

BIN = os.path.join(os.path.dirname(__file__), "bin")


@dataclass
class NvidiaTool:
    path: str
    version: str


def _tool(binary):
    env = "TRITON_" + binary.upper().replace("-", "_") + "_PATH"
    for path in (os.environ.get(env, ""), os.path.join(BIN, binary)):
        if path and os.path.isfile(path):
            out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
            found = re.search(r"release (\d+\.\d+)", out)
            return NvidiaTool(path, found.group(1) if found else "")
    return None


def get_ptxas(arch=None):
    blackwell = arch is not None and arch >= 100 and os.path.isfile(os.path.join(BIN, "ptxas-blackwell"))
    tool = _tool("ptxas-blackwell" if blackwell else "ptxas")
    if tool is None:
        raise RuntimeError("Cannot find ptxas")
    return tool
