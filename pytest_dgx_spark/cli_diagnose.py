"""``spark-preflight diagnose LOG [LOG ...]``: name the gotcha a failed run's logs show, with this
machine's (or a capture's) checks beside them (issue 23)."""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_dgx_spark import catalog, options
from pytest_dgx_spark.cli_output import (
    COLOURS,
    EXIT_FAIL,
    EXIT_OK,
    EXIT_USAGE,
    Formatter,
    Parser,
    add_output_flags,
    say,
    say_error,
    say_lines,
    wrapped,
)
from pytest_dgx_spark.cli_setup import Stop, engine_for, settings_for

if TYPE_CHECKING:  # pragma: no cover - the diagnose types; --help imports none of them
    from pytest_dgx_spark.diagnose import Diagnosis
    from pytest_dgx_spark.logscan import Table
    from pytest_dgx_spark.model import Result


DIAGNOSE_EXIT_CODES = (
    ("0", "no known failure in the logs"),
    ("1", "a cause is named (diagnosis: G<n>)"),
    ("2", "a log, the signature file or an option could not be read"),
)


def build_diagnose_parser() -> argparse.ArgumentParser:
    """The logs and diagnose's own flags, listed first and alone; the preflight's options (they drive
    the live checks) are accepted unlisted: ``spark-preflight --help`` lists them."""
    description = (f"Name the gotcha ({catalog.SPAN}) that a failed run's logs show: each check reads\n"
                   "the logs, then one line: diagnosis: G<n> (first failure at FILE:LINE)\n"
                   "or diagnosis: unknown.")  # fmt: skip
    epilog = "\n".join([
        "exit codes:", *(f"  {c:<6} {t}" for c, t in DIAGNOSE_EXIT_CODES), "",
        *wrapped("", "The live checks take every option of spark-preflight --help (--workload-gb, --config, "
                  "--threshold, ...), and the project's pytest configuration as the preflight reads it.", 0),
    ])  # fmt: skip
    parser = Parser(prog="spark-preflight diagnose", description=description, epilog=epilog,
                     formatter_class=Formatter, allow_abbrev=False)  # fmt: skip
    parser.add_argument("logs", nargs="+", metavar="LOG",
                        help="a log of the failed run (- for stdin, .gz read as gzip); several are ranks or nodes "
                        "of one job")  # fmt: skip
    group = parser.add_argument_group("diagnose")
    group.add_argument("--kernel-log", action="append", default=[], metavar="PATH",
                       help="the kernel log of the failure's window (dmesg, journalctl -k), read with the logs")  # fmt: skip
    group.add_argument("--no-machine", action="store_true", help="decide from the logs alone; read no machine")
    options.add_cli_options(parser, "diagnose", into=group)
    add_output_flags(parser, group, shown=False)
    return parser


def diagnose_live(
    ns: argparse.Namespace, table: Any, idle: float, settings: Any
) -> tuple[dict[str, Result], Mapping[str, Any], Any, str, list[Any]]:
    """The checks on this machine or a capture's, as the preflight runs them, and this machine's
    kernel log since boot (G3 and G4 read it; a replay has none) scanned as a ``--kernel-log`` file
    named after its source (``kmsg:12``, ``journalctl:40``)."""
    from pytest_dgx_spark import logscan  # lazy: the log reader, only for diagnose

    engine = engine_for(ns, settings)
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


def run(argv: Sequence[str]) -> int:
    """``spark-preflight diagnose …``: the logs, then the machine (the caller, :func:`main`, turns exceptions into one line)."""
    ns = build_diagnose_parser().parse_args(argv)
    from pytest_dgx_spark import logscan  # lazy: the log reader, only for diagnose
    from pytest_dgx_spark.diagnose import diagnose_run  # lazy: as above

    try:
        table = logscan.load_table(Path(ns.spark_signatures) if ns.spark_signatures else None)
        ns.logs += ns.spark_diagnose or []
        if ns.no_machine and ns.spark_replay:
            raise Stop("--no-machine and --replay: choose one (--replay names whose machine it was)")
        idle = float(ns.spark_timeout) if ns.spark_timeout else logscan.IDLE_S
        given = settings_for(ns)  # every option checked (and the ini twins read) before a log is
        limit = int(given.gunzip_max_mib * logscan.MIB)
        scans = logscan.scan_logs(ns.logs, ns.kernel_log, table, idle, gunzip_limit=limit)
        unread = [scan.error for scan in scans if scan.error]
        if unread:  # refused before any check line: a "no sign" line per check would read as a verdict
            for error in unread:
                say_error(f"error: {error}")
            return EXIT_USAGE
        live: dict[str, Result] = {}
        host: Mapping[str, Any] = {}
        settings, profile = None, "auto"
        if not ns.no_machine:
            live, host, settings, profile, kernel_scans = diagnose_live(ns, table, idle, given)
            scans += kernel_scans
    except (logscan.TableError, logscan.LogError, Stop) as exc:
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
    diagnose_show(ns, diag, lines, table, host)
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


def diagnose_show(ns: argparse.Namespace, diag: Diagnosis, lines: list[Result], table: Table,
                   host: Mapping[str, Any]) -> None:  # fmt: skip
    """A line per check and the diagnosis (or the JSON block), as the preflight prints its lines."""
    from pytest_dgx_spark.diagnose import ignored  # lazy: as above
    if ns.json:
        from pytest_dgx_spark import report  # lazy: as above

        block = report.run_block(lines, strict=False, host=host, extra={"diagnosis": diag.to_dict()})
        say(json.dumps(block, indent=2, default=str))
        return
    paint = say_lines(ns, lines)
    if ns.verbose:
        for note in ignored(diag.files, table):
            say(f"  {note}")
    for note in [*diag.secondary, *diag.hints()]:
        say(f"  {note}")
    colour = COLOURS["FAIL"] if diag.cause else COLOURS["ready"]
    say(diag.line(), colour if paint else None)
