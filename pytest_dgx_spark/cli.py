"""``spark-preflight``: the checks without pytest's output around them (same engine, options,
configuration files and lines as ``pytest --spark-preflight``); the exit code is the gate."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from typing import Any

from pytest_dgx_spark import catalog, cli_diagnose, options
from pytest_dgx_spark.cli_diagnose import build_diagnose_parser
from pytest_dgx_spark.cli_output import (
    COLOURS,
    EXIT_FAIL,
    EXIT_OK,
    EXIT_PIPE,
    EXIT_USAGE,
    Formatter,
    Parser,
    add_output_flags,
    say,
    say_error,
    say_lines,
    terminal_width,
    thresholds_help,
    wrapped,
)
from pytest_dgx_spark.cli_setup import ConfigError, Stop, engine_for, project_config, settings_for
from pytest_dgx_spark.safe_text import visible

#: what tests, slurm.py and ``python -m`` reach through this module
__all__ = ["EXIT_FAIL", "EXIT_OK", "EXIT_USAGE", "ConfigError", "build_diagnose_parser", "build_parser", "main",
           "project_config", "say", "say_error", "thresholds_help"]

EXIT_CODES = (
    ("0", "no check FAILed (WARN and SKIP allowed, unless --strict)"),
    ("1", "a check FAILed, or the verdict is blocked (a WARN under --strict)"),
    ("2", "could not run: a bad option or value, an unreadable config or capture, an unwritten report"),
    ("128+N", "stopped by signal N (130: Ctrl-C, 143: SIGTERM); probes are killed first"),
    ("141", "the output was closed early (spark-preflight -v | head -1); nothing said"),
)


def epilog() -> str:
    lines = ["exit codes:"]
    for code, text in EXIT_CODES:
        lines += wrapped(f"  {code:<6} ", text, 9)
    lines += ["", *wrapped("", "Settings also come from the project's pytest configuration, found as the "
              "installed pytest finds it (pytest.toml, pytest.ini, pyproject.toml, tox.ini, setup.cfg): "
              "spark_preflight_<name> keys; flags win. Each --<name> is also accepted as --spark-<name>, the "
              "pytest spelling that check lines quote; pytest's --spark-gate has no twin: here the exit code "
              "is the gate.", 0)]  # fmt: skip
    return "\n".join(lines)


def usage() -> str:
    """The usage lines: the preflight, then each subcommand (:data:`SUBCOMMANDS`) with what it does."""
    lines = ["spark-preflight [OPTION ...]"]
    lines += [f"       spark-preflight {name} {args}" for name, (args, _, _) in SUBCOMMANDS.items()]
    return "\n".join(lines)


def commands_help() -> str:
    """``commands:``, a line for each subcommand, for the top-level ``--help``."""
    lines = ["commands (spark-preflight COMMAND --help for each):"]
    for name, (_, text, _) in SUBCOMMANDS.items():
        lines += wrapped(f"  {name:<10} ", text, 13)
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    what = (f"Run the {catalog.HOW_MANY} DGX Spark preflight checks ({catalog.SPAN}) on this machine: one line each, "
            "then the verdict: ready, ready-with-warnings or blocked.")  # fmt: skip
    description = textwrap.fill(what, 80) + "\n\n" + commands_help()  # 80 columns, however many checks
    # allow_abbrev off as in pytest: --workload is no --workload-gb
    parser = Parser(prog="spark-preflight", usage=usage(), description=description, epilog=epilog(),
                     formatter_class=Formatter, allow_abbrev=False)  # fmt: skip
    groups = options.add_cli_options(parser)
    add_output_flags(parser, groups["files"])
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the checks; never a traceback (exit 2 with one line instead)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["watch"]:  # its own signal handling: it forwards signals to the job it runs
        return _watch(args[1:])
    from pytest_dgx_spark.probes import commands  # lazy: the probe machinery, not for --help

    # SIGTERM/SIGHUP end the run like Ctrl-C: every probe group is killed first
    commands.install_signal_handlers()
    try:
        code = _main(argv)
        if sys.stdout is not None:
            sys.stdout.flush()  # a closed pipe must show here, not at interpreter exit
        return code
    except BrokenPipeError:  # the reader left (| head -1): stdout to devnull, as the signal module advises
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        except (OSError, ValueError):  # no real stdout file descriptor: nothing will flush to it
            pass
        return EXIT_PIPE
    except KeyboardInterrupt as exc:
        signum = getattr(exc, "signum", signal.SIGINT)
        say_error(f"interrupted by {commands.signal_name(signum)}; probes stopped")
        return 128 + signum
    except Exception as exc:  # a bug of ours must still end in one line
        say_error(f"error: internal error ({type(exc).__name__}: {exc})")
        return EXIT_USAGE
    finally:
        commands.restore_signal_handlers()


def _not_run(results: list[Any], universe: Sequence[str]) -> tuple[str, dict[str, str]]:
    """Why checks were not run, and the checks of this run (``universe``: a replayed capture's may be
    fewer) --only left out, by one rule with pytest's (issue 24 item 3)."""
    ran = {r.check_id for r in results}
    why = f"deselected (--only {','.join(c for c in universe if c in ran)})"
    return why, {cid: why for cid in universe if cid not in ran}


def _said(written: list[str]) -> list[str] | None:
    """The files written, to say; a report not written is an error (None: exit 2), an extra
    not written (G4's chart) a warning that keeps the outcome; both on stderr."""
    for note in written:
        if note.startswith(("cannot write", "could not write")):
            say_error(f"{'error' if note.startswith('cannot write') else 'warning'}: {note}")
    if any(n.startswith("cannot write") for n in written):
        return None
    return [n for n in written if not n.startswith(("cannot write", "could not write"))]


def _main(argv: Sequence[str] | None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in SUBCOMMANDS:  # a subcommand; without one the argv is the preflight's, as before
        return SUBCOMMANDS[args[0]][2](args[1:])
    ns = build_parser().parse_args(args)
    if ns.spark_diagnose or ns.spark_signatures:
        say_error("error: --diagnose and --signatures read logs: spark-preflight diagnose LOG [LOG ...]")
        return EXIT_USAGE
    from pytest_dgx_spark import report  # lazy: the preflight machinery, once the flags parsed
    from pytest_dgx_spark.model import Status, shorten, verdict, verdict_line  # lazy: as above

    try:
        engine = engine_for(ns, settings_for(ns))
    except Stop as stop:
        say_error(f"error: {stop}")
        return EXIT_USAGE
    settings = engine.settings
    started = (time.time(), time.monotonic())
    try:
        results = engine.run_many()
    finally:
        engine.close()
    host, profile = engine.machine.identity(), engine.profile()
    why, not_run = _not_run(results, settings.universe)
    said = _said(report.write_run_files(
        settings, results, host=host, profile=profile, store_items=engine.machine.store.items, env=os.environ,
        not_run=not_run, started=started[0], duration=time.monotonic() - started[1],
    ))  # fmt: skip
    if said is None:
        return EXIT_USAGE
    strict = settings.strict
    last, v = verdict_line(results, strict=strict, not_run=not_run), verdict(results, strict=strict, not_run=not_run).value
    if ns.json:  # the block on stdout, what was written where on stderr
        block = report.run_block(results, strict=strict, host=host, settings=settings.to_dict(),
                                 profile=profile, not_run=not_run)  # fmt: skip
        say(json.dumps(block, indent=2, default=str))
        for note in said:
            say_error(note)
    else:  # a line each and the verdict, coloured as pytest colours them
        paint = say_lines(ns, results)
        if not_run:  # as pytest's section says it
            say(shorten(f"{', '.join(not_run)} not run: {why}", terminal_width()), COLOURS["WARN"] if paint else None)
        say(last, COLOURS[v] if paint else None)
        for note in said:
            say(visible(note))  # one line: a newline in a path is escaped, not printed
    if sys.stdout is None:  # `>&-`: the verdict said where it can be, and in the exit code
        say_error(f"stdout is closed: no check line printed; {last}")
    return EXIT_FAIL if v == "blocked" or any(r.status is Status.FAIL for r in results) else EXIT_OK


# --------------------------------------------------------------------------- diagnose (issue 23)

def _watch(args: Sequence[str]) -> int:
    from pytest_dgx_spark.watch.run import main as watch  # lazy: only for the subcommand

    return watch(args)


#: ``spark-preflight NAME …``: its arguments in the usage line, what it does, its entry (the rest of the
#: argv -> exit code; :func:`main` turns its exceptions into one line). A new subcommand is one entry here.
SUBCOMMANDS: dict[str, tuple[str, str, Callable[[Sequence[str]], int]]] = {
    "diagnose": ("[OPTION ...] LOG [LOG ...]", f"name the gotcha ({catalog.SPAN}) a failed run's logs show", cli_diagnose.run),
    # main() runs it before the preflight's signal handlers: it forwards signals to the job it wraps
    "watch": ("[OPTION ...] (-- COMMAND [ARG ...] | --pid PID)",
              "run or follow a job, say each G3/G4/G6 event as it happens, diagnose it if it fails", _watch),
}


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
