"""What no test inherits from the machine that runs the suite.

Every environment variable a check or probe reads changes a line, so a test
decides from what it plants only if the machine's own value is gone: an ML
image exports ``TORCH_CUDA_ARCH_LIST=9.0a`` (G7 warns in every GB10 test),
``NVIDIA_PRODUCT_NAME``/``CUDA_VERSION`` (G9 names an NGC image), a Slurm or
torchrun job exports ``SLURM_NNODES``/``WORLD_SIZE`` (G10 sees two nodes).

The lists below are reviewed by hand and checked against the code:
``tests/test_hermetic.py`` derives every read from ``pytest_dgx_spark``'s source
(:mod:`envscan`) and fails when one is neither scrubbed here nor in
:data:`KEPT` with its reason. ``tests/conftest.py``'s autouse fixture
removes them before every test, so what a test starts (pytester runs, CLI
and probe children, ranks) inherits the clean environment.

Families are wider than today's reads on purpose: a read added tomorrow to
the ``NCCL_*`` family (G10's fingerprint takes every ``NCCL_*`` already) is
covered before anyone thinks of it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

from pytest_dgx_spark.probes.multinode import LAUNCHER_ENV
from pytest_dgx_spark.redact import SECRET_NAME

#: single variables
NAMES = frozenset(
    {
        # launchers (torchrun, torch.distributed.run, accelerate, srun, mpirun): G10's
        # list, and the role variables torchrun sets beside it
        *LAUNCHER_ENV,
        "ROLE_RANK",
        "ROLE_WORLD_SIZE",
        # CUDA builds and the toolkit
        "TORCH_CUDA_ARCH_LIST",
        "LD_LIBRARY_PATH",
        "LD_PRELOAD",
        "PYTHONPATH",
        "PYTHONSTARTUP",
        # where gcc finds Python.h for Triton's launcher build (G7), and torch's switch around it
        "CPATH",
        "C_INCLUDE_PATH",
        "TORCH_DISABLE_NATIVE_JIT",
        # container markers in the environment (the files are under the machine root)
        "container",
        # CI detection (pytest's and ours: lines are cut, or not)
        "CI",
        "BUILD_NUMBER",
        # colour, as pytest decides it (the CLI follows the same rule): a test sets them
        "PY_COLORS",
        "NO_COLOR",
        "FORCE_COLOR",
        # pytest options and plugins from the shell
        "PYTEST_ADDOPTS",
        "PYTEST_PLUGINS",
        # this project's own switches and its doubles' logs
        "SMI_LOG",
        "SMI_APPS",
        "NO_MACHINE_LOG",
    }
)

#: whole families, by prefix
PREFIXES = (
    "SLURM_",
    "SLURMD_",  # SLURMD_NODENAME: the node a Slurm health check runs on (pytest_dgx_spark/slurm.py)
    "OMPI_",
    "PMI_",
    "PMIX_",
    "TORCHELASTIC_",
    "PET_",
    "NCCL_",
    "TORCH_NCCL_",
    "UCX_",
    "GLOO_",
    "NVIDIA_",
    "CUDA_",
    "NV_CUDA_",  # nvidia/cuda images: NV_CUDA_COMPAT_PACKAGE (G9's CUDA floor)
    "PYTORCH_",
    "TRITON_",
    "VLLM_",
    "RAY_",
    "PARALLELISM_CONFIG_",
    "KUBERNETES_",
    "APPTAINER_",
    "SINGULARITY_",
    "SPARK_FAKE_",
    "SPARK_PREFLIGHT_",  # the machine root, the checked import path
)

#: families by suffix (compared in any case: the proxy variables come in both)
SUFFIXES = ("_SOCKET_IFNAME", "_PROXY")

#: the names G8/the redactor treat as secrets (``GITHUB_TOKEN``, ``HF_TOKEN``, ...):
#: a real token would be sent, or redacted out of a line a test compares
PATTERNS = (SECRET_NAME,)

#: read by the code and left as the runner has them, with why
KEPT = {
    "PATH": "tools are found on it; a test that needs a tool plants it first on PATH",
    "HOME": "the redactor's home folder; a test about it sets it (pip, git and gcc need the real one)",
    "USER": "the redactor's user name; a test about it passes its own",
    "LOGNAME": "as USER",
    "TERM": "colour on a terminal that is not dumb, as pytest; output to a pipe is never coloured",
    "PYTEST_XDIST": "the running xdist worker's own; the probes drop them from their children",
    "PYTEST_CURRENT_TEST": "pytest's own, set per test; the probes drop it from their children",
}

#: set in every test: a pytest run a test starts loads only the plugins it names;
#: the checked Python's package folders are only those a test plants on
#: PYTHONPATH (G1's shared-object scan and G9's metadata skip this
#: interpreter's site-packages: an ML image's torchvision/torchaudio would FAIL them)
#: (``COLUMNS``: every run a test starts has a 120-column terminal, the width the
#: expected lines are written for; the section fits its lines to the terminal)
SET = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "SPARK_PREFLIGHT_PYTHON_PATH": "", "COLUMNS": "120"}


#: the machine's GPU tools the checks run: a test sees one only where it plants it
#: (G4/G6 fall back to nvidia-smi when NVML says NotSupported; G7 runs cuobjdump; G4 reads
#: the kernel log with journalctl or dmesg when the root has no dev/kmsg: this machine's log is not a test's)
GPU_TOOLS = ("nvidia-smi", "cuobjdump", "nvcc", "ptxas", "journalctl", "dmesg")


def tool_free_path(path: str, shadows: Path) -> str:
    """``path`` with every folder that holds a :data:`GPU_TOOLS` tool replaced
    by a shadow folder under ``shadows``: links to everything else in it (on a
    GPU machine that folder is ``/usr/bin``, which the tests need)."""
    out = []
    for folder in path.split(os.pathsep):
        if not folder or not any(os.path.exists(os.path.join(folder, t)) for t in GPU_TOOLS):
            out.append(folder)
            continue
        shadow = shadows / hashlib.sha1(folder.encode()).hexdigest()[:12]
        if not shadow.is_dir():
            partial = shadows / f"{shadow.name}.{os.getpid()}"
            partial.mkdir(parents=True, exist_ok=True)
            for name in os.listdir(folder):
                if name not in GPU_TOOLS:
                    os.symlink(os.path.join(folder, name), partial / name)
            try:
                os.rename(partial, shadow)
            except OSError:  # another xdist worker made it first
                shutil.rmtree(partial, ignore_errors=True)
        out.append(str(shadow))
    return os.pathsep.join(out)


def scrubbed(name: str) -> bool:
    """``name`` is the machine's and must not reach a test."""
    upper = name.upper()
    return (
        name in NAMES
        or name.startswith(PREFIXES)
        or upper.endswith(SUFFIXES)
        or any(p.search(name) for p in PATTERNS)
    )


def clean(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) without the machine's variables, with :data:`SET`."""
    out = {k: v for k, v in (os.environ if env is None else env).items() if not scrubbed(k)}
    out.update(SET)
    return out


def covers_prefix(prefix: str) -> bool:
    """A scan of every variable starting with ``prefix`` only sees scrubbed ones
    (or kept ones)."""
    return prefix.startswith(PREFIXES) or any(prefix.startswith(k) for k in KEPT)


def covers_suffix(suffix: str) -> bool:
    return suffix.upper().endswith(SUFFIXES)


def covers_pattern(pattern: str) -> bool:
    """A regex the code tests names with: one of :data:`PATTERNS`, or every
    alternative a scrubbed family."""
    if any(p.pattern == pattern for p in PATTERNS):
        return True
    from envscan import regex_families

    prefixes, suffixes, other = regex_families(pattern)
    return not other and all(map(covers_prefix, prefixes)) and all(map(covers_suffix, suffixes))


def covers(name: str) -> bool:
    return scrubbed(name) or name in KEPT or name.startswith(tuple(KEPT))

