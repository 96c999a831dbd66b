"""``spark-preflight``: the ten checks without pytest's output around them (same engine, options,
configuration files and lines as ``pytest --spark-preflight``); the exit code is the gate."""

from __future__ import annotations

import argparse
import difflib
import json
import os
import shutil
import signal
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from pytest_dgx_spark import __version__, catalog, options
from pytest_dgx_spark.redact import scrub
from pytest_dgx_spark.safe_text import fit, visible, visible_lines
from pytest_dgx_spark.thresholds import THRESHOLDS

if TYPE_CHECKING:  # pragma: no cover - the diagnose types; --help imports none of them
    from pytest_dgx_spark.diagnose import Diagnosis
    from pytest_dgx_spark.logscan import Table
    from pytest_dgx_spark.model import Result

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
#: 128 + SIGPIPE: the shell's code for a program stopped by a closed pipe
EXIT_PIPE = 128 + signal.SIGPIPE
EXIT_CODES = (
    ("0", "no check FAILed (WARN and SKIP allowed, unless --strict)"),
    ("1", "a check FAILed, or the verdict is blocked (a WARN under --strict)"),
    ("2", "could not run: a bad option or value, an unreadable config or capture, an unwritten report"),
    ("128+N", "stopped by signal N (130: Ctrl-C, 143: SIGTERM); probes are killed first"),
    ("141", "the output was closed early (spark-preflight -v | head -1); nothing said"),
)
#: ANSI colours of a check line by status, and of the verdict, as pytest's terminal shows them
COLOURS = {"PASS": "32", "INFO": "36", "WARN": "33", "FAIL": "31;1", "ready": "32",
           "ready-with-warnings": "33", "blocked": "31;1"}  # fmt: skip
HELP_WIDTH = 80


class ConfigError(Exception):
    """The project's pytest configuration could not be read."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2; argparse quotes arguments: `--token ghp_…`
        say_error(f"error: {scrub(message)}")
        self.exit(EXIT_USAGE)


class _Formatter(argparse.RawDescriptionHelpFormatter):
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


def _wrapped(lead: str, text: str, indent: int) -> list[str]:
    return textwrap.wrap(text, HELP_WIDTH - 2, initial_indent=lead, subsequent_indent=" " * indent)


def epilog() -> str:
    lines = ["exit codes:"]
    for code, text in EXIT_CODES:
        lines += _wrapped(f"  {code:<6} ", text, 9)
    lines += ["", *_wrapped("", "Settings also come from the project's pytest configuration, found as the "
              "installed pytest finds it (pytest.toml, pytest.ini, pyproject.toml, tox.ini, setup.cfg): "
              "spark_preflight_<name> keys; flags win. Each --<name> is also accepted as --spark-<name>, the "
              "pytest spelling that check lines quote; pytest's --spark-gate has no twin: here the exit code "
              "is the gate.", 0)]  # fmt: skip
    return "\n".join(lines)


def thresholds_help() -> str:
    lines = ["thresholds for --threshold NAME=VALUE (default with the gb10 / the generic profile):"]
    for t in THRESHOLDS.values():
        lines.append(f"  {t.name} = {t.gb10:g} / {t.generic:g}{' ' + t.unit if t.unit else ''}")
        lines += _wrapped(" " * 6, t.help, 6)
    return "\n".join(lines)


class _ThresholdsHelp(argparse.Action):
    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        say(thresholds_help())
        parser.exit(EXIT_OK)


def usage() -> str:
    """The usage lines: the preflight, then each subcommand (:data:`SUBCOMMANDS`) with what it does."""
    lines = ["spark-preflight [OPTION ...]"]
    lines += [f"       spark-preflight {name} {args}" for name, (args, _, _) in SUBCOMMANDS.items()]
    return "\n".join(lines)


def commands_help() -> str:
    """``commands:``, a line for each subcommand, for the top-level ``--help``."""
    lines = ["commands (spark-preflight COMMAND --help for each):"]
    for name, (_, text, _) in SUBCOMMANDS.items():
        lines += _wrapped(f"  {name:<10} ", text, 13)
    return "\n".join(lines)


def _add_output_flags(parser: argparse.ArgumentParser, out: Any, shown: bool = True) -> None:
    """--json, -v, --color, -c, --rootdir, --help-thresholds, --version: the CLI's own; ``shown``: listed."""
    def text(words: str) -> str:
        return words if shown else argparse.SUPPRESS

    parser.add_argument("--help-thresholds", nargs=0, action=_ThresholdsHelp, help=text("list the thresholds and exit"))
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


def build_parser() -> argparse.ArgumentParser:
    description = ("Run the ten DGX Spark preflight checks (G1..G10) on this machine: one line each,\n"
                   "then the verdict: ready, ready-with-warnings or blocked.\n\n" + commands_help())  # fmt: skip
    # allow_abbrev off as in pytest: --workload is no --workload-gb
    parser = _Parser(prog="spark-preflight", usage=usage(), description=description, epilog=epilog(),
                     formatter_class=_Formatter, allow_abbrev=False)  # fmt: skip
    groups = options.add_cli_options(parser)
    _add_output_flags(parser, groups["files"])
    return parser


def project_config(cwd: Path, inifile: str | None, rootdir: str | None) -> tuple[Path, dict[str, Any], list[str]]:
    """``(rootdir, spark_preflight_* values, notes)`` found by pytest's documented discovery
    (:mod:`.inifiles`), so both read the same file by the same rules; the values converted as its
    ``getini`` converts them."""
    from pytest_dgx_spark import inifiles  # lazy: not for --help
    from pytest_dgx_spark.settings import ini_value  # lazy: the preflight's validation, not --help's

    try:
        setup = inifiles.locate(cwd, inifile=inifile, rootdir=rootdir)
    except inifiles.ConfigError as exc:
        raise ConfigError(str(exc).strip().splitlines()[0]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the pytest configuration: {exc}") from None
    values: dict[str, Any] = {}
    notes: list[str] = []
    known = {o.ini: o for o in options.OPTIONS}
    for key, (value, mode) in setup.values.items():
        if key in known:
            values[key] = ini_value(known[key], value, mode, setup.inipath)
        elif key.startswith("spark_preflight") and key != "spark_preflight_enabled":
            near = difflib.get_close_matches(key, known, 1)
            notes.append(f"unknown config option: {key} in {setup.inipath}"
                         + (f" (did you mean {near[0]}?)" if near else ""))  # fmt: skip
    return setup.rootdir, values, notes


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


class _Stop(Exception):
    """A reason not to run, said in one line (exit 2)."""


def _settings(ns: argparse.Namespace) -> Any:
    """The run's settings, from the project's pytest configuration and the flags."""
    from pytest_dgx_spark.settings import OptionError, settings_from_cli  # lazy: the preflight machinery

    pytest_only = [o.cli_flag for o in options.OPTIONS if o.name in options.PYTEST_ONLY and getattr(ns, o.dest)]
    if pytest_only:
        raise _Stop(f"{', '.join(pytest_only)} is a pytest option (it skips pytest tests when a check "
                    "FAILs); spark-preflight has no tests to skip: its exit code is 1 on a FAIL")  # fmt: skip
    try:
        cwd = Path.cwd()
    except OSError as exc:  # the shell's folder was deleted under it
        raise _Stop(f"the current folder is gone ({exc.strerror or exc}: deleted under this shell?); cd into one") from None
    try:
        rootdir, ini, notes = project_config(cwd, ns.config_file, ns.rootdir)
        settings = settings_from_cli(ns, ini, base=cwd, rootdir=rootdir)
    except (ConfigError, OptionError) as exc:
        raise _Stop(str(exc)) from None
    for note in notes:
        say_error(f"warning: {note}")
    return settings


def _engine(ns: argparse.Namespace, settings: Any) -> Any:
    """The engine on this machine, or on a capture's (``--replay``: its checks and --strict)."""
    from pytest_dgx_spark import capture  # lazy: the preflight machinery
    from pytest_dgx_spark.engine import Engine  # lazy: as above
    from pytest_dgx_spark.probes.machine import Machine  # lazy: as above

    if (path := settings.replay) is None:
        return Engine(settings, Machine(timeout=settings.timeout, judged=settings.python))
    given = [o.cli_flag for o in options.OPTIONS if o.name in options.GATHER_ONLY and getattr(ns, o.dest) is not None]
    if given:
        say_error(f"note: {', '.join(given)} {'has' if len(given) == 1 else 'have'} no effect on a replay: "
                  "the capture's facts were gathered by the run that made it")  # fmt: skip
    try:
        replay = capture.load(path)
    except capture.CaptureError as exc:
        raise _Stop(str(exc)) from None
    settings = capture.replay_settings(settings, replay)
    cap = replay.get("host") or {}
    # stdout stays the captured run's own lines; that they are a replay's is said beside them
    say_error(f"note: replay of {path.name} (captured {replay.get('created_at', '?')}, host "
              f"{cap.get('hostname', '?')}, {cap.get('gpu') or 'no GPU'}): this machine was not read")
    return Engine(settings, capture.ReplayMachine(replay), replay=replay)


def _not_run(results: list[Any]) -> tuple[str, dict[str, str]]:
    """Why checks were not run, and the checks --only left out, by one rule with pytest's (issue 24 item 3)."""
    ran = {r.check_id for r in results}
    why = f"deselected (--only {','.join(c for c in catalog.IDS if c in ran)})"
    return why, {cid: why for cid in catalog.IDS if cid not in ran}


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
        engine = _engine(ns, _settings(ns))
    except _Stop as stop:
        say_error(f"error: {stop}")
        return EXIT_USAGE
    settings = engine.settings
    started = (time.time(), time.monotonic())
    try:
        results = engine.run_many()
    finally:
        engine.close()
    host, profile = engine.machine.identity(), engine.profile()
    why, not_run = _not_run(results)
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
        paint = _say_lines(ns, results)
        if not_run:  # as pytest's section says it
            say(shorten(f"{', '.join(not_run)} not run: {why}", terminal_width()), COLOURS["WARN"] if paint else None)
        say(last, COLOURS[v] if paint else None)
        for note in said:
            say(visible(note))  # one line: a newline in a path is escaped, not printed
    if sys.stdout is None:  # `>&-`: the verdict said where it can be, and in the exit code
        say_error(f"stdout is closed: no check line printed; {last}")
    return EXIT_FAIL if v == "blocked" or any(r.status is Status.FAIL for r in results) else EXIT_OK


def terminal_width() -> int:
    """The width of a default line: the terminal's as pytest reads it (``COLUMNS``, then the terminal,
    80 for one under 40 columns); ``SHORT_WIDTH`` when stdout is no terminal (a pipe, a file)."""
    from pytest_dgx_spark.model import SHORT_WIDTH  # lazy: the model, once the flags parsed

    columns = shutil.get_terminal_size(fallback=(SHORT_WIDTH, 24)).columns
    return columns if columns >= 40 else 80


def _at_a_terminal() -> bool:
    try:
        return sys.stdout is not None and sys.stdout.isatty()
    except (ValueError, OSError):  # closed or detached
        return False


def _say_lines(ns: argparse.Namespace, results: list[Any]) -> bool:
    """A line for each result (its whole text under -v, else at most the terminal's width), coloured if
    wanted, after each gotcha's name at a terminal (a pipe gets the lines alone); whether coloured."""
    paint = colour_wanted(ns.color, sys.stdout)
    width = terminal_width()
    if _at_a_terminal():
        for line in catalog.legend([r.check_id for r in results], width):
            say(line)
    for r in results:
        text = r.report_text(codes=True) if ns.verbose else r.short_line(width)
        say(text, COLOURS.get(r.status.value) if paint else None)
    return paint


# --------------------------------------------------------------------------- diagnose (issue 23)

DIAGNOSE_EXIT_CODES = (
    ("0", "no known failure in the logs"),
    ("1", "a cause is named (diagnosis: G<n>)"),
    ("2", "a log, the signature file or an option could not be read"),
)


def build_diagnose_parser() -> argparse.ArgumentParser:
    """The logs and diagnose's own flags, listed first and alone; the preflight's options (they drive
    the live checks) are accepted unlisted: ``spark-preflight --help`` lists them."""
    description = ("Name the gotcha (G1..G10) that a failed run's logs show: each check reads\n"
                   "the logs, then one line: diagnosis: G<n> (first failure at FILE:LINE)\n"
                   "or diagnosis: unknown.")  # fmt: skip
    epilog = "\n".join([
        "exit codes:", *(f"  {c:<6} {t}" for c, t in DIAGNOSE_EXIT_CODES), "",
        *_wrapped("", "The live checks take every option of spark-preflight --help (--workload-gb, --config, "
                  "--threshold, ...), and the project's pytest configuration as the preflight reads it.", 0),
    ])  # fmt: skip
    parser = _Parser(prog="spark-preflight diagnose", description=description, epilog=epilog,
                     formatter_class=_Formatter, allow_abbrev=False)  # fmt: skip
    parser.add_argument("logs", nargs="+", metavar="LOG",
                        help="a log of the failed run (- for stdin, .gz read as gzip); several are ranks or nodes "
                        "of one job")  # fmt: skip
    group = parser.add_argument_group("diagnose")
    group.add_argument("--kernel-log", action="append", default=[], metavar="PATH",
                       help="the kernel log of the failure's window (dmesg, journalctl -k), read with the logs")  # fmt: skip
    group.add_argument("--no-machine", action="store_true", help="decide from the logs alone; read no machine")
    options.add_cli_options(parser, "diagnose", into=group)
    _add_output_flags(parser, group, shown=False)
    return parser


def _diagnose_live(
    ns: argparse.Namespace, table: Any, idle: float, settings: Any
) -> tuple[dict[str, Result], Mapping[str, Any], Any, str, list[Any]]:
    """The ten checks on this machine or a capture's, as the preflight runs them, and this machine's
    kernel log since boot (G3 and G4 read it; a replay has none) scanned as a ``--kernel-log`` file
    named after its source (``kmsg:12``, ``journalctl:40``)."""
    from pytest_dgx_spark import logscan  # lazy: the log reader, only for diagnose

    engine = _engine(ns, settings)
    kernel: list[str] = []
    try:
        found = engine.run_many()
        if not ns.spark_replay and not ns.kernel_log:
            from pytest_dgx_spark.probes import kernel_log  # lazy: the reader G4 loads for its Xids

            log = engine.machine.kernel_log()
            kernel = [str(log.get("source") or "")] + [r.text for r in kernel_log.records(log)]
    finally:
        engine.close()
    live = ({r.check_id: r for r in found}, engine.machine.identity(), engine.settings, engine.profile())
    if len(kernel) < 2 or not kernel[0]:
        return (*live, [])
    name = "kmsg" if kernel[0].endswith("kmsg") else os.path.basename(kernel[0].split()[0]) or "kernel-log"
    with tempfile.TemporaryDirectory(prefix="spark-diagnose-") as folder:
        path = Path(folder) / name
        path.write_text("\n".join(kernel[1:]) + "\n", encoding="utf-8", errors="replace")
        return (*live, logscan.scan_logs([], [str(path)], table, idle))


def _diagnose(argv: Sequence[str]) -> int:
    """``spark-preflight diagnose …``: the logs, then the machine (the caller, :func:`main`, turns exceptions into one line)."""
    ns = build_diagnose_parser().parse_args(argv)
    from pytest_dgx_spark import logscan  # lazy: the log reader, only for diagnose
    from pytest_dgx_spark.diagnose import diagnose_run  # lazy: as above

    try:
        table = logscan.load_table(Path(ns.spark_signatures) if ns.spark_signatures else None)
        ns.logs += ns.spark_diagnose or []
        if ns.no_machine and ns.spark_replay:
            raise _Stop("--no-machine and --replay: choose one (--replay names whose machine it was)")
        idle = float(ns.spark_timeout) if ns.spark_timeout else logscan.IDLE_S
        given = _settings(ns)  # every option checked (and the ini twins read) before a log is
        limit = int(given.gunzip_max_mib * logscan.MIB)
        scans = logscan.scan_logs(ns.logs, ns.kernel_log, table, idle, gunzip_limit=limit)
        unread = [scan.error for scan in scans if scan.error]
        if unread:  # refused before any check line: ten "no sign" lines would read as a verdict
            for error in unread:
                say_error(f"error: {error}")
            return EXIT_USAGE
        live: dict[str, Result] = {}
        host: Mapping[str, Any] = {}
        settings, profile = None, "auto"
        if not ns.no_machine:
            live, host, settings, profile, kernel_scans = _diagnose_live(ns, table, idle, given)
            scans += kernel_scans
    except (logscan.TableError, logscan.LogError, _Stop) as exc:
        say_error(f"error: {exc}")
        return EXIT_USAGE
    except ValueError:  # --timeout not a number: the preflight's own check says it below
        say_error(f"error: --timeout: expected a number, got {ns.spark_timeout!r}")
        return EXIT_USAGE
    lines, diag = diagnose_run(scans, table, live, host)
    written: list[str] = []
    if settings is not None:  # --report / --capture as the preflight writes them, with the diagnosis key
        from pytest_dgx_spark import report  # lazy: the report machinery

        written = report.write_run_files(settings, lines, host=host, profile=profile, store_items=lambda: {},
                                         env=os.environ, extra={"diagnosis": diag.to_dict()})  # fmt: skip
    _diagnose_show(ns, diag, lines, table, host)
    for note in written:
        (say_error if note.startswith(("cannot write", "could not write")) else say)(note)
    for error in diag.errors:
        say_error(f"error: {error}")
    for scan in scans:
        for note in scan.notes:
            say_error(f"note: {scan.name}: {note}")
    if diag.errors or any(n.startswith("cannot write") for n in written):
        return EXIT_USAGE
    return EXIT_FAIL if diag.cause is not None else EXIT_OK


def _diagnose_show(ns: argparse.Namespace, diag: Diagnosis, lines: list[Result], table: Table,
                   host: Mapping[str, Any]) -> None:  # fmt: skip
    """The ten lines and the diagnosis (or the JSON block), as the preflight prints its lines."""
    from pytest_dgx_spark.diagnose import ignored  # lazy: as above
    if ns.json:
        from pytest_dgx_spark import report  # lazy: as above

        block = report.run_block(lines, strict=False, host=host, extra={"diagnosis": diag.to_dict()})
        say(json.dumps(block, indent=2, default=str))
        return
    paint = _say_lines(ns, lines)
    if ns.verbose:
        for note in ignored(diag.files, table):
            say(f"  {note}")
    for note in [*diag.secondary, *diag.hints()]:
        say(f"  {note}")
    colour = COLOURS["FAIL"] if diag.cause else COLOURS["ready"]
    say(diag.line(), colour if paint else None)


def _watch(args: Sequence[str]) -> int:
    from pytest_dgx_spark.watch.run import main as watch  # lazy: only for the subcommand

    return watch(args)


#: ``spark-preflight NAME …``: its arguments in the usage line, what it does, its entry (the rest of the
#: argv -> exit code; :func:`main` turns its exceptions into one line). A new subcommand is one entry here.
SUBCOMMANDS: dict[str, tuple[str, str, Callable[[Sequence[str]], int]]] = {
    "diagnose": ("[OPTION ...] LOG [LOG ...]", "name the gotcha (G1..G10) a failed run's logs show", _diagnose),
    # main() runs it before the preflight's signal handlers: it forwards signals to the job it wraps
    "watch": ("[OPTION ...] (-- COMMAND [ARG ...] | --pid PID)",
              "run or follow a job, say each G3/G4/G6 event as it happens, diagnose it if it fails", _watch),
}


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
