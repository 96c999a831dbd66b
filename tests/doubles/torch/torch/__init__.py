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
  fork_sleeper: {"seconds": 30, "pidfile": path}  (at import, fork a child that sleeps in the probe's
    process group holding its pipes, as a compile or loader worker does; its pid goes to pidfile)
  copy_gbps: bandwidth the fake copy reports (for G5); mem_free: what mem_get_info says is free;
  copy_error: "CUDA out of memory ..." (raised by torch.empty on cuda);
  hang/crash where "alloc" | "copy" (G5's copy probe)
  kernel_error: "CUDA error: no kernel image is available ..." (RuntimeError from the first kernel)
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
        _log.write(f"import torch {_os.getpid()} {_time.time():.3f}\n")
if _S.get("garbage"):
    _sys.stdout.write(_S["garbage"] + "\n")
    _sys.stdout.flush()
if _S.get("half"):
    _sys.stdout.write('{"data": {"torch_vers')
    _sys.stdout.flush()
    _os._exit(0)
if _S.get("fork_sleeper"):
    _sys.stdout.flush()
    _pid = _os.fork()
    if _pid == 0:  # the worker: same process group, the probe's pipes inherited
        _time.sleep(float(_S["fork_sleeper"].get("seconds", 30)))
        _os._exit(0)
    with open(_S["fork_sleeper"]["pidfile"], "w", encoding="utf-8") as _fh:
        _fh.write(str(_pid))
_fault("import")
if _S.get("import_error"):
    raise ImportError(_S["import_error"])

__version__ = _S.get("version", "2.11.0+cu130")
float32 = "float32"
float16 = "float16"
bfloat16 = "bfloat16"
uint8 = "uint8"


class _Version:
    cuda = _S.get("cuda", "13.0")
    git_version = "fake"


version = _Version()


class Tensor:
    def __init__(self, values, shape=None):
        self.values = list(values)
        self.shape = tuple(shape) if shape is not None else (len(self.values),)

    def float(self):
        return self

    def abs(self):
        return Tensor((abs(v) for v in self.values), self.shape)

    def __mul__(self, k):
        return Tensor(v * k for v in self.values)

    def sum(self):
        return Tensor([sum(self.values)])

    def item(self):
        return self.values[0]

    def numel(self):
        return len(self.values)


def _on_device(device):
    if device == "cuda":
        _fault("kernel")
        if _S.get("kernel_error"):
            raise RuntimeError(_S["kernel_error"])


def arange(n, device=None, dtype=None):
    _on_device(device)
    return Tensor(float(i) for i in range(n))


def randn(*shape, device=None, dtype=None):
    """Deterministic stand-in values, shaped like the real thing."""
    _on_device(device)
    count = 1
    for n in shape:
        count *= int(n)
    return Tensor(((((i % 7) - 3) / 3.0) for i in range(count)), shape)


# G5's copy probe: device buffers whose copies advance a virtual GPU clock at
# the scenario's `copy_gbps` (read + write bytes), read back by CUDA events.
# `copy_error` makes the allocation fail (an OOM); hang/crash "copy" fault it.
_gpu_clock_ms = [0.0]


class _Buffer:
    def __init__(self, nbytes):
        self.nbytes = int(nbytes)

    def numel(self):
        return self.nbytes

    def element_size(self):
        return 1

    def fill_(self, value):
        return self

    def copy_(self, src):
        _fault("copy")
        gbps = float(_S.get("copy_gbps", 200.0))
        _gpu_clock_ms[0] += 2.0 * src.nbytes / (gbps * 1e9) * 1000.0
        return self


def empty(n, dtype=None, device=None):
    if device == "cuda":
        _fault("alloc")
        if _S.get("copy_error"):
            raise RuntimeError(_S["copy_error"])
    return _Buffer(n)


class _Event:
    def __init__(self, enable_timing=False):
        self.at = None

    def record(self, stream=None):
        self.at = _gpu_clock_ms[0]

    def synchronize(self):
        return None

    def elapsed_time(self, end):
        return end.at - self.at


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
        # as torch.cuda.get_arch_list(): [] whenever CUDA is not available (a CPU-only
        # build, or a CUDA build that cannot reach the GPU)
        if not _S.get("available", True):
            return []
        return list(_S.get("arch_list", ["sm_80", "sm_90", "sm_100", "sm_110", "sm_120", "compute_120"]))

    @staticmethod
    def synchronize():
        return None

    Event = _Event

    @staticmethod
    def mem_get_info(index=0):
        total = int(_S.get("total_memory", 0))
        return int(_S.get("mem_free", total)), total

    @staticmethod
    def empty_cache():
        return None


cuda = _Cuda()


class _Cudnn:
    @staticmethod
    def version():
        return _S.get("cudnn", 91900)


class _Backends:
    cudnn = _Cudnn()


backends = _Backends()
