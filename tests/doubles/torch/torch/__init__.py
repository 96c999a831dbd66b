"""A test double of ``torch`` for the probe child, driven by a JSON scenario.

Put ``tests/doubles/torch`` first on the child's ``PYTHONPATH`` and point
``SPARK_FAKE_TORCH`` at a scenario. It answers the calls the probe makes
(``torch.version.cuda``, ``torch.cuda.get_arch_list()``, the tiny kernel)
and can fail the way real builds fail:

  version ("2.11.0+cu130"), cuda ("13.0" | null), available (bool),
  capability ([12, 1]), name ("NVIDIA GB10"), arch_list, total_memory,
  is_integrated, cudnn (91900),
  import_error: "libcudart.so.12: cannot open shared object file: ..." (raised as ImportError)
  crash: {"where": "import" | "cuda_init" | "kernel", "signal": "SIGSEGV" | "SIGABRT"}
  hang: {"where": "import" | "cuda_init" | "kernel", "seconds": 60}
  garbage: "text printed on stdout at import (not JSON)"
  half: true  (print half a JSON line at import, then exit 0)
  log: path of a file that gets one line per import (to count probes)
  copy_gbps: bandwidth the fake copy reports (for G5)
"""

import json as _json
import os as _os
import signal as _signal
import sys as _sys
import time as _time

with open(_os.environ["SPARK_FAKE_TORCH"], encoding="utf-8") as _fh:
    _S = _json.load(_fh)


def _fault(where):
    hang = _S.get("hang") or {}
    if hang.get("where") == where:
        _time.sleep(float(hang.get("seconds", 3600)))
    crash = _S.get("crash") or {}
    if crash.get("where") == where:
        _sys.stdout.flush()
        _os.kill(_os.getpid(), getattr(_signal, crash.get("signal", "SIGSEGV")))


if _S.get("log"):  # lets a test count how often torch was imported
    with open(_S["log"], "a", encoding="utf-8") as _log:
        _log.write(f"import torch {_os.getpid()}\n")
if _S.get("garbage"):
    _sys.stdout.write(_S["garbage"] + "\n")
    _sys.stdout.flush()
if _S.get("half"):
    _sys.stdout.write('{"data": {"torch_vers')
    _sys.stdout.flush()
    _os._exit(0)
_fault("import")
if _S.get("import_error"):
    raise ImportError(_S["import_error"])

__version__ = _S.get("version", "2.11.0+cu130")
float32 = "float32"


class _Version:
    cuda = _S.get("cuda", "13.0")
    git_version = "fake"


version = _Version()


class Tensor:
    def __init__(self, values):
        self.values = list(values)

    def __mul__(self, k):
        return Tensor(v * k for v in self.values)

    def sum(self):
        return Tensor([sum(self.values)])

    def item(self):
        return self.values[0]

    def numel(self):
        return len(self.values)


def arange(n, device=None, dtype=None):
    if device == "cuda":
        _fault("kernel")
    return Tensor(float(i) for i in range(n))


class _Props:
    def __init__(self):
        self.total_memory = int(_S.get("total_memory", 0))
        self.is_integrated = bool(_S.get("is_integrated", False))
        self.name = _S.get("name", "NVIDIA GB10")


class _Cuda:
    @staticmethod
    def is_available():
        _fault("cuda_init")
        return bool(_S.get("available", True))

    @staticmethod
    def device_count():
        return 1 if _S.get("available", True) else 0

    @staticmethod
    def get_device_capability(index=0):
        return tuple(_S.get("capability", [12, 1]))

    @staticmethod
    def get_device_name(index=0):
        return _S.get("name", "NVIDIA GB10")

    @staticmethod
    def get_device_properties(index=0):
        return _Props()

    @staticmethod
    def get_arch_list():
        return list(_S.get("arch_list", ["sm_80", "sm_90", "sm_100", "sm_110", "sm_120", "compute_120"]))

    @staticmethod
    def synchronize():
        return None


cuda = _Cuda()


class _Cudnn:
    @staticmethod
    def version():
        return _S.get("cudnn", 91900)


class _Backends:
    cudnn = _Cudnn()


backends = _Backends()
