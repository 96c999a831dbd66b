"""``spark-preflight``'s output: its lines on stdout and errors on stderr (escaped, fitted, coloured by
pytest's rules), its exit codes, its parsers' one-line errors, and the output flags every subcommand takes."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import textwrap
from typing import Any, NoReturn, TextIO

from pytest_dgx_spark import __version__, catalog
from pytest_dgx_spark.redact import scrub
from pytest_dgx_spark.safe_text import fit, visible, visible_lines
from pytest_dgx_spark.thresholds import THRESHOLDS

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
#: 128 + SIGPIPE: the shell's code for a program stopped by a closed pipe
EXIT_PIPE = 128 + signal.SIGPIPE
#: ANSI colours of a check line by status, and of the verdict, as pytest's terminal shows them
COLOURS = {"PASS": "32", "INFO": "36", "WARN": "33", "FAIL": "31;1", "ready": "32",
           "ready-with-warnings": "33", "blocked": "31;1"}  # fmt: skip
HELP_WIDTH = 80




class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2; argparse quotes arguments: `--token ghp_…`
        say_error(f"error: {scrub(message)}")
        self.exit(EXIT_USAGE)


class Formatter(argparse.RawDescriptionHelpFormatter):
    def __init__(self, prog: str) -> None:
        super().__init__(prog, width=min(HELP_WIDTH, shutil.get_terminal_size().columns))


def say(text: str, colour: str | None = None) -> None:
    """Our lines on stdout: escaped (newlines kept), fitted to its encoding, coloured when asked;
    nothing when stdout is closed (``>&-``)."""
    if sys.stdout is not None:
        text = fit(visible_lines(text), getattr(sys.stdout, "encoding", None))
        sys.stdout.write((f"\x1b[{colour}m{text}\x1b[0m" if colour else text) + "\n")


def say_error(text: str) -> None:
    """``spark-preflight: <text>`` on stderr, always one line. With stderr closed (``2>&-``) an
    ``error:`` goes to stdout instead, so an exit 2 is never silent; notes and warnings do not
    (``--json``'s stdout is the block alone)."""
    stream = sys.stderr if sys.stderr is not None else sys.stdout if text.startswith("error:") else None
    if stream is not None:
        stream.write(fit(f"spark-preflight: {visible(text)}", getattr(stream, "encoding", None)) + "\n")
        stream.flush()


def colour_wanted(choice: str, stream: TextIO | None) -> bool:
    """pytest's rule (``--color``, then PY_COLORS, NO_COLOR, FORCE_COLOR, a tty that is not dumb)."""
    env = os.environ
    if choice != "auto":
        return choice == "yes"
    if env.get("PY_COLORS") in ("0", "1"):
        return env["PY_COLORS"] == "1"
    if env.get("NO_COLOR") or env.get("FORCE_COLOR"):
        return not env.get("NO_COLOR")
    return stream is not None and stream.isatty() and env.get("TERM") != "dumb"


def wrapped(lead: str, text: str, indent: int) -> list[str]:
    return textwrap.wrap(text, HELP_WIDTH - 2, initial_indent=lead, subsequent_indent=" " * indent)


def thresholds_help() -> str:
    lines = ["thresholds for --threshold NAME=VALUE (default with the gb10 / the generic profile):"]
    for t in THRESHOLDS.values():
        lines.append(f"  {t.name} = {t.gb10:g} / {t.generic:g}{' ' + t.unit if t.unit else ''}")
        lines += wrapped(" " * 6, t.help, 6)
    return "\n".join(lines)


class ThresholdsHelp(argparse.Action):
    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        say(thresholds_help())
        parser.exit(EXIT_OK)


def add_output_flags(parser: argparse.ArgumentParser, out: Any, shown: bool = True) -> None:
    """--json, -v, --color, -c, --rootdir, --help-thresholds, --version: the CLI's own; ``shown``: listed."""
    def text(words: str) -> str:
        return words if shown else argparse.SUPPRESS

    parser.add_argument("--help-thresholds", nargs=0, action=ThresholdsHelp, help=text("list the thresholds and exit"))
    parser.add_argument("--version", action="version", version=f"pytest-dgx-spark {__version__}",
                        help=text("show the version and exit"))  # fmt: skip
    out.add_argument("--json", action="store_true", help="print the results as JSON instead of lines")
    out.add_argument("-v", "--verbose", action="store_true",
                     help="print each check's whole line, details and readings (default: one short line)")  # fmt: skip
    out.add_argument("--color", choices=("yes", "no", "auto"), default="auto",
                     help=text("colour the lines: yes, no or auto (default: on a terminal, as pytest)"))  # fmt: skip
    config = parser.add_argument_group("configuration (as pytest's)")
    config.add_argument("-c", "--config-file", metavar="FILE", help=text("read this pytest configuration file"))
    config.add_argument("--rootdir", metavar="DIR", help=text("the project's folder (default: the config file's)"))


def terminal_width() -> int:
    """The width of a default line: the terminal's as pytest reads it (``COLUMNS``, then the terminal,
    80 for one under 40 columns); ``SHORT_WIDTH`` when stdout is no terminal (a pipe, a file)."""
    from pytest_dgx_spark.model import SHORT_WIDTH  # lazy: the model, once the flags parsed

    columns = shutil.get_terminal_size(fallback=(SHORT_WIDTH, 24)).columns
    return columns if columns >= 40 else 80


def at_a_terminal() -> bool:
    try:
        return sys.stdout is not None and sys.stdout.isatty()
    except (ValueError, OSError):  # closed or detached
        return False


def say_lines(ns: argparse.Namespace, results: list[Any]) -> bool:
    """A line for each result (its whole text under -v, else at most the terminal's width), coloured if
    wanted, after each gotcha's name at a terminal (a pipe gets the lines alone); whether coloured."""
    paint = colour_wanted(ns.color, sys.stdout)
    width = terminal_width()
    if at_a_terminal():
        for line in catalog.legend([r.check_id for r in results], width):
            say(line)
    for r in results:
        text = r.report_text(codes=True) if ns.verbose else r.short_line(width)
        say(text, COLOURS.get(r.status.value) if paint else None)
    return paint
