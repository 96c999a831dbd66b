"""The watch's command line: ``spark-preflight watch [options] -- COMMAND [ARGS…]`` or ``--pid PID``.

Every value is checked here, before anything starts: a bad one is :class:`Usage`, one line and exit
2. The options themselves are declared once, in :mod:`pytest_dgx_spark.options`.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from pytest_dgx_spark import options, outfile
from pytest_dgx_spark.redact import scrub
from pytest_dgx_spark.thresholds import THRESHOLDS
from pytest_dgx_spark.watch.probes import process_state

EXIT_USAGE = 2


class Usage(Exception):
    """Bad input: one line, exit 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise Usage(scrub(message))


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="spark-preflight watch", allow_abbrev=False,
                     usage="spark-preflight watch [options] -- COMMAND [ARGS...]  |  --pid PID",
                     description="Run COMMAND (or watch --pid) and say, as it happens, when the GPU "
                     "throttles, another process takes the GPU, memory runs out or fragments, an Xid or OOM "
                     "kill appears, or "
                     "the job's GPU goes idle; a diagnosis when it fails. Exit code: the job's (128+N for a "
                     "signal); 2 for bad input.")  # fmt: skip
    options.add_watch_options(parser)
    return parser


def _number(ns: argparse.Namespace, name: str) -> float | None:
    opt = next(o for o in (*options.WATCH_OPTIONS, options.BY_NAME["workload-gb"]) if o.name == name)
    raw = getattr(ns, opt.dest)
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise Usage(f"{opt.cli_flag}: expected a number, got {raw!r}") from None
    low = opt.minimum if opt.minimum is not None else float("-inf")
    if not (value > low if opt.exclusive_min else value >= low) or value != value:
        raise Usage(f"{opt.cli_flag}: expected a number above {low:g}, got {raw!r}")
    if opt.maximum is not None and value > opt.maximum:
        raise Usage(f"{opt.cli_flag}: at most {opt.maximum:g}, got {raw!r}")
    return value


def _pid(raw: str) -> int:
    if not raw.isdigit() or not 0 < int(raw) < 1 << 22:
        raise Usage(f"--pid: expected a process id, got {raw!r}")
    pid = int(raw)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        raise Usage(f"--pid {pid}: no such process") from None
    except PermissionError:
        raise Usage(
            f"--pid {pid}: another user's process, not readable as this user (run as its owner or root)"
        ) from None
    if process_state(pid) in (None, "Z", "X"):
        raise Usage(f"--pid {pid}: the process has ended")
    return pid


def parse(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    args = list(argv)
    command: list[str] = []
    if "--" in args:
        at = args.index("--")
        args, command = args[:at], args[at + 1 :]
    ns = build_parser().parse_args(args)
    for name in ("interval", "stall-seconds", "workload-gb"):
        setattr(ns, "spark_" + name.replace("-", "_"), _number(ns, name))
    for pair in ns.spark_threshold or []:
        key, _, number = str(pair).partition("=")
        if key.strip() not in THRESHOLDS:
            raise Usage(
                f"--threshold {pair}: no threshold named {key.strip()!r} (spark-preflight --help-thresholds)"
            )
        try:
            float(number)
        except ValueError:
            raise Usage(f"--threshold {pair}: expected NAME=NUMBER") from None
    from pytest_dgx_spark.settings import PARSERS, OptionError  # lazy: the option parsers G4 reads them by

    opt = options.BY_NAME["xid-class"]
    try:
        ns.spark_xid_class = PARSERS[opt.kind](opt, ns.spark_xid_class or [], opt.cli_flag, Path.cwd())
    except OptionError as exc:
        raise Usage(str(exc)) from None
    if ns.spark_pid is not None and command:
        raise Usage("give either --pid PID or -- COMMAND, not both")
    if ns.spark_pid is None and not command:
        raise Usage("no COMMAND: spark-preflight watch [options] -- COMMAND [ARGS...] (or --pid PID)")
    if ns.spark_pid is not None:
        ns.spark_pid = _pid(str(ns.spark_pid))
    if ns.spark_timeline is not None:
        if not str(ns.spark_timeline).strip():
            raise Usage("--timeline: an empty path")
        try:
            outfile.check(ns.spark_timeline)
        except OSError as exc:
            raise Usage(f"--timeline {ns.spark_timeline}: {exc.strerror or exc}") from None
    if ns.spark_prometheus_textfile is not None:
        try:
            outfile.check(ns.spark_prometheus_textfile)
        except OSError as exc:
            why = exc.strerror or exc
            raise Usage(f"--prometheus-textfile {ns.spark_prometheus_textfile}: {why}") from None
    return ns, command
