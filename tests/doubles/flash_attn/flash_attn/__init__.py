"""A test double of ``flash_attn`` for the torch probe child (no GPU here).

Put ``tests/doubles/flash_attn`` first on the child's PYTHONPATH (after the
torch double) and point ``SPARK_FAKE_FLASH_ATTN`` at a JSON scenario:

  version ("2.7.4.post1"),
  import_error: "... undefined symbol: _ZN3c10..." (ImportError at import, as a
      flash-attn built against another torch fails),
  interface: "gpu" | "cuda" | null  (which flash_attn_interface name exists:
      flash_attn_gpu in 2.7+, flash_attn_cuda before; null: neither),
  kernel_error: "FATAL: kernel built for sm80-sm100, but running on sm121"
      (RuntimeError from flash_attn_func),
  wrong_shape: true (the kernel returns a tensor of another shape),
  crash: {"where": "import" | "kernel", "signal": "SIGSEGV"}
"""

import json as _json
import os as _os
import signal as _signal
import sys as _sys

with open(_os.environ["SPARK_FAKE_FLASH_ATTN"], encoding="utf-8") as _fh:
    _S = _json.load(_fh)


def _crash(where):
    crash = _S.get("crash") or {}
    if crash.get("where") == where:
        _sys.stdout.flush()
        _os.kill(_os.getpid(), getattr(_signal, crash.get("signal", "SIGSEGV")))


_crash("import")
if _S.get("import_error"):
    raise ImportError(_S["import_error"])

__version__ = _S.get("version", "2.7.4.post1")

from flash_attn.flash_attn_interface import flash_attn_func  # noqa: E402,F401
