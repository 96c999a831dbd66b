"""A ``triton`` double for the G7 compile child: Triton 3.5/3.6's public compile interface
(``triton.jit``, ``triton.compile``, ``triton.compiler.ASTSource``,
``triton.backends.compiler.GPUTarget``, ``triton.backends.nvidia.compiler.get_ptxas``,
``triton.runtime.errors.PTXASError``) over a real ptxas subprocess.

Like Triton, ``compile`` runs the ptxas named by ``TRITON_PTXAS_PATH`` (else the bundled
``backends/nvidia/bin/ptxas``; for capability 100 and up a bundled ``ptxas-blackwell``, as 3.6
does, overridden by ``TRITON_PTXAS_BLACKWELL_PATH``) with ``--gpu-name=sm_<arch>a`` on a PTX file written under
``TRITON_CACHE_DIR``, and raises ``PTXASError`` with Triton's message when ptxas fails
(triton-lang/triton#8539). ``SPARK_FAKE_TRITON`` (JSON) may add ``{"sleep": s}`` before
the compile (a hang) or ``{"abort": true}`` (a crash).
"""

from __future__ import annotations

import inspect

from . import backends, compiler, language, runtime  # noqa: F401 - the package's submodules
from .compiler import compile as compile

__version__ = "3.5.0"


class JITFunction:
    """What ``@triton.jit`` returns; like Triton it reads the function's source at once."""

    def __init__(self, fn):
        self.fn = fn
        self.src = inspect.getsource(fn)  # OSError for a function typed into `python -c`, as Triton
        self.arg_names = list(inspect.signature(fn).parameters)
        self.__name__ = fn.__name__


def jit(fn):
    return JITFunction(fn)
