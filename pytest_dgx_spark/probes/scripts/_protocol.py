# Prologue of every probe child (see pytest_dgx_spark/probes/child.py).
# Runs as `python -c <source> [config-json]`: self-contained, standard library only.
import json as _json
import os as _os
import sys as _sys
import time as _time

# `python -c` puts the working folder first on sys.path: a checkout's `torch/` must not shadow torch
_cwd = _os.getcwd()
_sys.path[:] = [p for p in _sys.path if p not in ("", ".", _cwd)]


def emit(obj):
    _sys.stdout.write(_json.dumps(obj, default=str) + "\n")
    _sys.stdout.flush()


def begin(name, scale=1):
    # "t": when the step began, on the monotonic clock the parent reads too (an early child's steps count)
    emit({"begin": name, "scale": scale, "t": _time.monotonic()})


def data(**facts):
    emit({"data": facts})


def event(obj):
    emit({"event": obj})


def done():
    emit({"done": True, "t": _time.monotonic()})


def error_text(exc):
    """`ImportError: libcudart.so.12: cannot open shared object file` style."""
    text = str(exc).strip().splitlines()
    return type(exc).__name__ + (": " + text[0][:400] if text else "")


def config():
    try:
        return _json.loads(_sys.argv[1]) if len(_sys.argv) > 1 else {}
    except ValueError:
        return {}


def request(limit=1 << 20):
    """The request a child started early reads on stdin (one JSON object); stdin closed empty
    means the parent no longer wants the answer: leave at once."""
    raw = _sys.stdin.buffer.read(limit)
    if not raw.strip():
        _os._exit(0)
    try:
        found = _json.loads(raw)
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}
