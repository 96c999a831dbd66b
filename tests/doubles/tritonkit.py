"""Plant a Triton install for the G7 compile child: the ``triton`` double
(``tests/doubles/triton/triton``, Triton 3.5's compile interface), its dist-info, and
bundled ptxas executables that answer ``--version`` with a CUDA release and, like the
real ones, reject ``sm_121a`` before 12.9 with ptxas's verbatim line (triton #8539,
``tests/data/gb10/error_triton_ptxas_1.txt``)."""

from __future__ import annotations

import shutil
from pathlib import Path

DOUBLE = Path(__file__).parent / "triton" / "triton"

#: a ptxas: ``--version`` prints the release; a compile for sm_121a fails before 12.9, else
#: writes its output file (the last argument). Each call is logged.
PTXAS = """#!/bin/sh
echo "$0 $@" >> "{log}"
if [ "$1" = "--version" ]; then
  printf 'ptxas: NVIDIA (R) Ptx optimizing assembler\\nCopyright (c) 2005-2025 NVIDIA Corporation\\n'
  printf 'Cuda compilation tools, release {release}, V{release}.93\\nBuild cuda_{release}.r{release}/compiler\\n'
  exit 0
fi
case "{release}" in
  12.[0-8])
    echo "ptxas fatal   : Value 'sm_121a' is not defined for option 'gpu-name'" >&2
    exit 255 ;;
esac
for last; do :; done
: > "$last"
"""


def ptxas(path: Path, release: str, log: Path) -> Path:
    """Write a ptxas of CUDA ``release`` at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(PTXAS.format(log=log, release=release))
    path.chmod(0o755)
    return path


def install(site: Path, name: str, version: str, tools: dict[str, str], log: Path) -> Path:
    """The double as distribution ``name`` ``version`` in ``site``, with ``tools`` (``{"ptxas":
    "12.8"}``) in ``triton/backends/nvidia/bin``; that folder."""
    shutil.copytree(DOUBLE, site / "triton", dirs_exist_ok=True)
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    bin_dir = site / "triton" / "backends" / "nvidia" / "bin"
    for tool, release in tools.items():
        ptxas(bin_dir / tool, release, log)
    return bin_dir
