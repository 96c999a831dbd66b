"""``spark-preflight``: the ten checks without pytest's output around them.

Same engine, same options (but ``--gate``, which is pytest's), same lines as
``pytest --spark-preflight``: exit 0 when nothing FAILs, 1 on a FAIL (or a
WARN with ``--strict``), 2 when it could not run (a bad option, an unreadable
config file), 128+N when signal N stopped it. Its help is its own (``--help``
lists the exit codes and the threshold names).
"""

from __future__ import annotations

import argparse
import configparser
import json
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest_dgx_spark
from pytest_dgx_spark import options

__version__ = pytest_dgx_spark.__version__

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


class ConfigError(Exception):
    """The project's pytest configuration could not be read."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, exit 2 (argparse's code too)
        from pytest_dgx_spark.redact import scrub  # argparse quotes unknown arguments: `--token ghp_…`

        say_error(f"error: {scrub(message)}")
        self.exit(EXIT_USAGE)


def say(text: str) -> None:
    """Write our own lines to stdout: the CLI's one writer of results.

    Every value in them was escaped already (``model.one_line``); this
    escapes the block once more, keeping only its newlines, and fits it to
    the terminal's encoding (an ASCII or latin-1 terminal gets "..." for
    "…" instead of a UnicodeEncodeError and no line at all). A closed
    stdout (``spark-preflight >&-``) takes nothing: :func:`_main` says the
    verdict on stderr instead."""
    from pytest_dgx_spark.safe_text import fit, visible_lines

    if sys.stdout is not None:
        sys.stdout.write(fit(visible_lines(text), getattr(sys.stdout, "encoding", None)) + "\n")


def say_error(text: str) -> None:
    """``spark-preflight: <text>`` on stderr, the CLI's one writer of
    messages: always one line (a newline or control in a quoted path or
    value is escaped, never acted on), fitted to the terminal's encoding,
    nothing when stderr is closed."""
    from pytest_dgx_spark.safe_text import fit, visible

    if sys.stderr is not None:
        sys.stderr.write(fit(f"spark-preflight: {visible(text)}", getattr(sys.stderr, "encoding", None)) + "\n")
        sys.stderr.flush()


EXIT_CODES = (
    ("0", "no check FAILed (WARN and SKIP allowed, unless --strict)"),
    ("1", "a check FAILed, or the verdict is blocked (a WARN under --strict)"),
    ("2", "could not run: a bad option or value, an unreadable config or capture, an unwritten report"),
    ("128+N", "stopped by signal N (130: Ctrl-C, 143: SIGTERM); probes are killed first"),
    ("141", "the output was closed early (spark-preflight -v | head -1); nothing said"),
)
#: 128 + SIGPIPE: the shell's code for a program stopped by a closed pipe
EXIT_PIPE = 128 + signal.SIGPIPE


def _number(value: float) -> str:
    return f"{value:g}"


def epilog() -> str:
    """Exit codes, the threshold names with their defaults, and where the
    settings come from: what a user of the command needs and the pytest
    options' help does not say."""
    import re
    import textwrap

    from pytest_dgx_spark.thresholds import THRESHOLDS

    lines = ["exit codes:"]
    lines += [f"  {code:<6} {text}" for code, text in EXIT_CODES]
    lines += ["", "thresholds for --threshold NAME=VALUE (default with the gb10 / the generic profile):"]
    for t in THRESHOLDS.values():
        check, _, what = t.help.partition(": ")
        what = re.sub(r"\s*\([^()]*\)", "", what).split("; ")[0]
        unit = f" {t.unit}" if t.unit else ""
        lines.append(f"  {t.name} = {_number(t.gb10)} / {_number(t.generic)}{unit}")
        lines += textwrap.wrap(f"{check}: {what}", 96, initial_indent=" " * 6, subsequent_indent=" " * 6)
    lines += [
        "",
        *textwrap.wrap(
            "Settings also come from the project's pytest configuration (spark_preflight_<name> keys in "
            "pytest.ini, pyproject.toml, tox.ini or setup.cfg); flags win. Each --<name> is also accepted "
            "as --spark-<name>, the pytest spelling that check lines quote. pytest's --spark-gate has no "
            "CLI twin: here the exit code is the gate.",
            100,
        ),
    ]
    return "\n".join(lines)


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Wrapped option help, the epilog's table kept as written."""


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="spark-preflight",
        description="Run the ten DGX Spark preflight checks (G1..G10) on this machine and print one\n"
        "line each, then the verdict: ready, ready-with-warnings or blocked.",
        epilog=epilog(),
        formatter_class=_HelpFormatter,
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of lines")
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="print each check's whole line, its details and readings (default: one short line each)",
    )
    parser.add_argument(
        "--rootdir",
        metavar="DIR",
        default=None,
        help="where to look for pytest.ini / pyproject.toml / tox.ini / setup.cfg "
        "(default: the current folder and its parents, as pytest does)",
    )
    parser.add_argument("--version", action="version", version=f"pytest-dgx-spark {__version__}")
    options.add_cli_options(parser)
    return parser


# --------------------------------------------------------------------------- ini


def _pyproject_ini(path: Path) -> dict[str, Any] | None:
    try:
        import tomllib  # type: ignore[import-not-found]
    except ModuleNotFoundError:  # Python 3.10: pytest depends on tomli there
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        from pytest_dgx_spark.probes.configs import parse_error  # the position, never the file's text

        raise ConfigError(f"{path}: invalid TOML ({parse_error(exc)})") from None
    section = data.get("tool", {}).get("pytest", {})
    if not isinstance(section, dict):
        return None
    ini = section.get("ini_options")
    return ini if isinstance(ini, dict) else None


def _ini_section(path: Path, section: str) -> dict[str, Any] | None:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(path.read_text(encoding="utf-8"), source=str(path))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    except configparser.Error as exc:
        raise ConfigError(f"{path}: {str(exc).splitlines()[0]}") from None
    if not parser.has_section(section):
        return None
    return dict(parser.items(section))


def find_ini(start: Path) -> tuple[Path | None, dict[str, Any]]:
    """Find the pytest configuration the way pytest does (first match upward)."""
    for folder in (start, *start.parents):
        for name, section in (
            ("pytest.ini", "pytest"),
            (".pytest.ini", "pytest"),
            ("pyproject.toml", None),
            ("tox.ini", "pytest"),
            ("setup.cfg", "tool:pytest"),
        ):
            path = folder / name
            try:
                if not path.is_file():
                    continue
            except OSError:  # a folder we may not enter: as pytest, look further up
                continue
            found = _pyproject_ini(path) if section is None else _ini_section(path, section)
            if found is not None or name in ("pytest.ini", ".pytest.ini"):
                return path, dict(found or {})
    return None, {}


# --------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    """Run the checks; never a traceback (exit 2 with one line instead)."""
    from pytest_dgx_spark.probes.commands import install_signal_handlers, restore_signal_handlers, signal_name

    # SIGTERM/SIGHUP (a CI timeout, a closed terminal) end the run like Ctrl-C:
    # every probe group is killed first (probes run in their own session, so
    # a kill of our process group never reaches them).
    install_signal_handlers()
    try:
        code = _main(argv)
        if sys.stdout is not None:
            sys.stdout.flush()  # a closed pipe must show here, not at interpreter exit
        return code
    except BrokenPipeError:
        return _stdout_closed()
    except KeyboardInterrupt as exc:
        signum = getattr(exc, "signum", signal.SIGINT)
        say_error(f"interrupted by {signal_name(signum)}; probes stopped")
        return 128 + signum
    except Exception as exc:  # a bug of ours must still end in one line
        say_error(f"error: internal error ({type(exc).__name__}: {exc})")
        return EXIT_USAGE
    finally:
        restore_signal_handlers()


def _stdout_closed() -> int:
    """The reader of our stdout went away (``| head -1``): no error of ours.

    Python's own advice (the ``signal`` module's notes on SIGPIPE): point
    stdout at devnull, so the flush at exit does not fail a second time,
    and leave quietly, with the code a shell gives a program SIGPIPE stopped."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no real stdout file descriptor: nothing will flush to it
        pass
    return EXIT_PIPE


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)
    from pytest_dgx_spark import report
    from pytest_dgx_spark.model import Status, verdict, verdict_line
    from pytest_dgx_spark.settings import OptionError, settings_from_cli

    pytest_only = [o.cli_flag for o in options.OPTIONS if o.name in options.PYTEST_ONLY and getattr(ns, o.dest)]
    if pytest_only:
        say_error(
            f"error: {', '.join(pytest_only)} is a pytest option (it skips pytest tests when "
            "a check FAILs); spark-preflight has no tests to skip: its exit code is 1 on a FAIL"
        )
        return EXIT_USAGE
    try:
        cwd = Path.cwd()
    except OSError as exc:  # the shell's folder was deleted under it
        say_error(f"error: the current folder is gone ({exc.strerror or exc}: deleted under this shell?); cd into one")
        return EXIT_USAGE
    start = Path(ns.rootdir).resolve() if ns.rootdir else cwd
    try:
        inipath, ini = find_ini(start)
        rootdir = inipath.parent if inipath else start
        settings = settings_from_cli(ns, ini, base=cwd, rootdir=rootdir)
    except (ConfigError, OptionError) as exc:
        say_error(f"error: {exc}")
        return EXIT_USAGE

    ignored = options.replay_ignores(
        [o.cli_flag for o in options.OPTIONS if o.name in options.GATHER_ONLY and getattr(ns, o.dest) is not None]
    )
    if settings.replay is not None and ignored:
        say_error(f"note: {ignored}")
    made = _engine(settings)
    if isinstance(made, str):
        say_error(f"error: {made}")
        return EXIT_USAGE
    engine = made
    settings = engine.settings  # a replay's: with the captured run's checks and --strict
    try:
        results = engine.run_many()
    finally:
        engine.close()
    host = engine.machine.identity()
    profile = engine.profile()
    notes = report.write_run_files(
        settings, results, host=host, profile=profile, store_items=engine.machine.store.items, env=os.environ
    )
    failed_writes = [n for n in notes if n.startswith("cannot write")]
    for note in failed_writes:
        say_error(f"error: {note}")
    for note in notes:  # an extra (G4's chart) not written: said, the run's outcome unchanged
        if note.startswith("could not write"):
            say_error(f"warning: {note}")
    if failed_writes:
        return EXIT_USAGE
    last = verdict_line(results, strict=settings.strict)
    if ns.json:
        block = report.run_block(
            results, strict=settings.strict, host=host, settings=settings.to_dict(), profile=profile
        )
        say(json.dumps(block, indent=2, default=str))
    else:
        say("\n".join([*(r.report_text() if ns.verbose else r.short_line() for r in results), last]))
    if sys.stdout is None:  # `>&-`: the verdict said where it can be, and in the exit code
        say_error(f"stdout is closed: no check line printed; {last}")
    blocked = verdict(results, strict=settings.strict).value == "blocked"
    if any(r.status is Status.FAIL for r in results) or blocked:
        return EXIT_FAIL
    return EXIT_OK


def _engine(settings: Any) -> Any:
    """The run's engine: over this machine, or over a capture for ``--replay``
    (a string: why the capture cannot be replayed)."""
    from pytest_dgx_spark.engine import Engine

    if settings.replay is not None:
        from pytest_dgx_spark import capture

        try:
            doc = capture.load(settings.replay)
        except capture.CaptureError as exc:
            return str(exc)
        return Engine(capture.replay_settings(settings, doc), capture.ReplayMachine(doc), replay=doc)
    from pytest_dgx_spark.probes.machine import Machine

    return Engine(settings, Machine(timeout=settings.timeout))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
