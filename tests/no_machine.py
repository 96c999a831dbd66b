"""Run ``spark-preflight`` or pytest under an audit hook that records every
touch of the machine (tests/test_captures_replay.py: a replay makes none).

Usage: ``python tests/no_machine.py cli|pytest ARGS...``; the record goes, as
a JSON list, to the file named by ``NO_MACHINE_LOG`` when the process exits.
With ``NO_MACHINE_CHECKS=G1,...`` the run has only those checks (tests/onlychecks.py:
a capture replays with its version's checks), linked under the working folder
before the hook is set.

Recorded: a file opened outside Python's own installation, the interpreter's
``sys.path``, the working folder (a replay's reports) and the capture itself;
any program started (``subprocess``, ``exec``, ``fork``, ``posix_spawn``,
``system``); any socket connection or name lookup; any shared library loaded
(``ctypes``: how NVML is reached); a folder listed outside those places
(``/proc``). ``/dev/null`` and the file Python's ``tempfile`` probes its
folder with are pytest's own, not the machine's; an ``O_PATH`` descriptor
(the report writer walks from ``/`` to its folder that way) reads nothing.
matplotlib drawing G4's chart from the captured samples reads its own font
cache and ``dlopen``s the running program itself (``None``): the drawing
library's, not the machine's.
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import runpy
import sys
import tempfile

PROCESS_EVENTS = ("subprocess.Popen", "os.exec", "os.posix_spawn", "os.fork", "os.system")
NETWORK_EVENTS = ("socket.connect", "socket.getaddrinfo", "socket.gethostbyname")


def main() -> None:
    mode = sys.argv.pop(1)
    if os.environ.get("NO_MACHINE_CHECKS"):
        import onlychecks

        import pytest_dgx_spark.checks as checks

        folder = onlychecks.Path(os.getcwd(), ".its-checks")
        checks.__path__ = [str(onlychecks.link_checks(folder, set(os.environ["NO_MACHINE_CHECKS"].split(","))))]
    spec = importlib.util.find_spec("pytest_dgx_spark")  # an editable install is not on sys.path
    ours = os.path.dirname(os.path.dirname(spec.origin)) if spec and spec.origin else sys.prefix
    allowed = tuple({sys.prefix, sys.base_prefix, sys.exec_prefix, ours, os.getcwd(), *(p for p in sys.path if p)})
    captures = {os.path.abspath(a.split("=", 1)[-1]) for a in sys.argv if "replay" in a or a.endswith(".gz")}
    captures |= {os.path.abspath(b) for a, b in zip(sys.argv, sys.argv[1:], strict=False) if a == "--replay"}
    harmless = {"/dev/null"}
    home = os.environ.get("HOME", "")
    drawing = tuple(p for p in (os.environ.get("MPLCONFIGDIR"), f"{home}/.cache/matplotlib", f"{home}/.config/matplotlib",
                                os.path.join(tempfile.gettempdir(), "matplotlib-")) if p and home)
    tmp = tempfile.gettempdir()  # probed before the hook: tempfile's own write test
    seen: list[str] = []

    def probe_of_tempfile(path: str) -> bool:
        return path == tmp or (os.path.dirname(path) == tmp and len(os.path.basename(path)) == 8)

    done = []

    def hook(event: str, args: tuple) -> None:
        if done:
            return
        if event in ("open", "os.listdir", "os.scandir"):
            if not args or args[0] is None or isinstance(args[0], int):
                return
            if event == "open" and len(args) > 2 and isinstance(args[2], int) and args[2] & getattr(os, "O_PATH", 0):
                return  # a descriptor that reads nothing: the report writer walking to its folder
            path = os.path.abspath(os.fsdecode(args[0]))
            if path.startswith(allowed) or path in captures or path in harmless or probe_of_tempfile(path):
                return
            if path.startswith(drawing):
                return
            seen.append(f"{event} {path}")
        elif event in PROCESS_EVENTS or event in NETWORK_EVENTS or (event == "ctypes.dlopen" and args[:1] != (None,)):
            seen.append(f"{event} {str(args)[:160]}")

    def dump() -> None:
        done.append(True)
        with open(os.environ["NO_MACHINE_LOG"], "w") as fh:
            json.dump(seen, fh)

    sys.addaudithook(hook)
    atexit.register(dump)
    sys.argv[0] = mode
    runpy.run_module("pytest_dgx_spark.cli" if mode == "cli" else "pytest", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
