"""``spark-preflight diagnose LOG [LOG …]``: which gotcha a failed run's logs show.

The preflight's parser, options and engine, plus the logs: every check reads
the logs, and (unless ``--no-machine``) this machine or a capture's
(``--replay``) is checked as the preflight checks it, so a line can say that
the live reading confirms the log. Exit codes: 1 when a cause is named, 0 when
none, 2 when a log (or the signature file) cannot be read.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_dgx_spark import cli, logscan
from pytest_dgx_spark.diagnose import Diagnosis, MachineFacts, decide, ignored, results
from pytest_dgx_spark.model import Result, Status
from pytest_dgx_spark.redact import outgoing

EXIT_CODES = (
    ("0", "no known failure in the logs"),
    ("1", "a cause is named (diagnosis: G<n>)"),
    ("2", "a log, the signature file or an option could not be read"),
)


def build_parser() -> argparse.ArgumentParser:
    """The preflight's parser (its options drive the live checks) with the logs and diagnose's flags."""
    parser = cli.build_parser()
    parser.prog = "spark-preflight diagnose"
    parser.description = ("Name the gotcha (G1..G10) that a failed run's logs show: each check reads the logs,\n"
                          "then one line: diagnosis: G<n> (first failure at FILE:LINE) or diagnosis: unknown.")  # fmt: skip
    parser.epilog = "exit codes:\n" + "\n".join(f"  {c:<6} {t}" for c, t in EXIT_CODES)
    parser.add_argument("logs", nargs="+", metavar="LOG",
                        help="a log of the failed run (- for stdin, .gz read as gzip); several are ranks or nodes "
                        "of one job")  # fmt: skip
    group = parser.add_argument_group("diagnose")
    group.add_argument("--no-machine", action="store_true", help="decide from the logs alone; read no machine")
    group.add_argument("--kernel-log", action="append", default=[], metavar="PATH",
                       help="the kernel log of the failure's window (dmesg, journalctl -k), read with the logs")  # fmt: skip
    for flag, shown in (("--signatures", "a JSON file of more signatures, tried before the built-in ones"),
                        ("--spark-signatures", argparse.SUPPRESS)):  # fmt: skip
        group.add_argument(flag, dest="signatures", metavar="PATH", help=shown)
    return parser


def machine_facts(host: Mapping[str, Any], live: Mapping[str, Result]) -> MachineFacts:
    """The facts the gates read, from the run's identity and today's check readings; the rest stay None."""
    g6 = live.get("G6")
    other = g6.reading("other_gpu_processes") if g6 is not None else None
    return MachineFacts(
        kernel_release=str(host.get("kernel")) if host.get("kernel") else None,
        cma_free_over_total=None,
        high_order_blocks_empty=None,
        image_cuda_newer_than_driver=None,
        other_gpu_process=None if other is None or other.value is None else bool(other.value),
    )


def _live(ns: argparse.Namespace) -> tuple[dict[str, Result], Mapping[str, Any], Any, str]:
    """The ten checks on this machine or a capture's, as the preflight runs them."""
    engine = cli._engine(ns, cli._settings(ns))
    try:
        found = engine.run_many()
    finally:
        engine.close()
    return {r.check_id: r for r in found}, engine.machine.identity(), engine.settings, engine.profile()


def _scan(ns: argparse.Namespace, table: logscan.Table) -> list[logscan.FileScan]:
    matcher = logscan.Matcher(table)
    redactor = outgoing(os.environ)
    idle = float(ns.spark_timeout) if ns.spark_timeout else logscan.IDLE_S
    if ns.logs.count("-") > 1:
        raise cli._Stop("- (stdin) may be given once")
    names = [*ns.logs, *ns.kernel_log]
    bases = [os.path.basename(n) or n for n in names]
    labels = bases if len(set(bases)) == len(bases) else names  # train.log:1834, unless two share a name
    return [matcher.scan(name, redactor, kernel=i >= len(ns.logs), idle_s=idle, label=label)
            for i, (name, label) in enumerate(zip(names, labels, strict=True))]  # fmt: skip


def run(argv: Sequence[str]) -> int:
    """``spark-preflight diagnose …`` (the caller, :func:`cli.main`, turns exceptions into one line)."""
    ns = build_parser().parse_args(argv)
    try:
        table = logscan.load_table(Path(ns.signatures) if ns.signatures else None)
        if ns.no_machine and ns.spark_replay:
            raise cli._Stop("--no-machine and --replay: choose one (--replay names whose machine it was)")
        scans = _scan(ns, table)
        live: dict[str, Result] = {}
        host: Mapping[str, Any] = {}
        settings, profile = None, "auto"
        if not ns.no_machine:
            live, host, settings, profile = _live(ns)
    except (logscan.TableError, cli._Stop) as exc:
        cli.say_error(f"error: {exc}")
        return cli.EXIT_USAGE
    diag = decide(scans, table, machine_facts(host, live))
    lines = results(diag, table, live or None)
    written = _write(settings, lines, host, profile, diag)
    _show(ns, diag, lines, table, host)
    for note in written:
        (cli.say_error if note.startswith(("cannot write", "could not write")) else cli.say)(note)
    for error in diag.errors:
        cli.say_error(f"error: {error}")
    for scan in scans:
        for note in scan.notes:
            cli.say_error(f"note: {scan.name}: {note}")
    if diag.errors or any(n.startswith("cannot write") for n in written):
        return cli.EXIT_USAGE
    return cli.EXIT_FAIL if diag.cause is not None else cli.EXIT_OK


def _write(settings: Any, lines: list[Result], host: Mapping[str, Any], profile: str, diag: Diagnosis) -> list[str]:
    """``--report`` / ``--capture`` as the preflight writes them, with the ``diagnosis`` key."""
    if settings is None:
        return []
    from pytest_dgx_spark import report  # lazy: the report machinery

    return report.write_run_files(settings, lines, host=host, profile=profile, store_items=lambda: {},
                                  env=os.environ, extra={"diagnosis": diag.to_dict()})  # fmt: skip


def _show(ns: argparse.Namespace, diag: Diagnosis, lines: list[Result], table: logscan.Table,
          host: Mapping[str, Any]) -> None:  # fmt: skip
    """The ten lines and the diagnosis (or the JSON block), as the preflight prints its lines."""
    if ns.json:
        from pytest_dgx_spark import report  # lazy: as above

        block = report.run_block(lines, strict=False, host=host, extra={"diagnosis": diag.to_dict()})
        cli.say(json.dumps(block, indent=2, default=str))
        return
    paint = cli.colour_wanted(ns.color, sys.stdout)
    for r in lines:
        cli.say(r.report_text() if ns.verbose else r.short_line(), cli.COLOURS.get(r.status.value) if paint else None)
    if ns.verbose:
        for note in ignored(diag.files, table):
            cli.say(f"  {note}")
    for note in diag.secondary:
        cli.say(f"  {note}")
    colour = cli.COLOURS[Status.FAIL.value] if diag.cause else cli.COLOURS["ready"]
    cli.say(diag.line(), colour if paint else None)
