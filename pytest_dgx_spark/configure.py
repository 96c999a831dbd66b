"""What ``pytest_configure`` does once a run has something for us.

Loaded by :mod:`pytest_dgx_spark.plugin` only when ``--spark-preflight`` (or
``spark_preflight_enabled``) is given, or a ``--spark-*`` flag is on the
command line, so that a plain run parses none of it (see
``plugin.plain_import``): check the ``--spark-config PATH`` trap, warn about
options given without the preflight, refuse next to PySpark's plugin, read
the settings and the capture to replay, and register
:class:`~pytest_dgx_spark.session.SparkPreflight`.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest

from pytest_dgx_spark import options
from pytest_dgx_spark.plugin import PLUGIN_NAME
from pytest_dgx_spark.safe_text import visible


def configure(config: pytest.Config, enabled: bool) -> None:
    """``pytest_configure`` past the markers (``enabled``: the preflight runs)."""
    moved = value_taken_as_test_path(config)
    if moved:
        raise pytest.UsageError(visible(moved))
    if not enabled:  # a plain run given --spark-* flags (plugin.py warned of a bad ini value)
        ignored = options_without_preflight(config)
        if ignored:  # one line at the end of the run, not a warnings-summary entry with our source line
            config.pluginmanager.register(OneLine(f"warning: {ignored}"), "dgx_spark_ignored_options")
        return
    from pytest_dgx_spark.settings import OptionError, settings_from_pytest

    try:
        settings = settings_from_pytest(config)
    except OptionError as exc:
        raise pytest.UsageError(visible(str(exc))) from None
    replay = None
    if settings.replay is not None:
        from pytest_dgx_spark import capture

        try:
            replay = capture.load(settings.replay)
        except capture.CaptureError as exc:
            raise pytest.UsageError(visible(str(exc))) from None
        settings = capture.replay_settings(settings, replay)  # the captured run's checks and --strict
    per_rank_outputs(config)
    refuse_planted_outputs(config)
    keep_early_child_only_if_used(config, settings)
    from pytest_dgx_spark.session import SparkPreflight

    config.pluginmanager.register(SparkPreflight(config, settings, replay), PLUGIN_NAME)


def keep_early_child_only_if_used(config: pytest.Config, settings: Any) -> None:
    """The torch child started while pytest loaded (pytest_dgx_spark/early.py)
    guessed from the command line; now the ini file and every option are
    known. Kill it at once when this process will not run a check that reads
    torch: a replay, ``spark_preflight_only`` without G1/G2/G5/G7, or an
    xdist controller (``addopts = -n auto`` in the ini: the workers run the checks)."""
    early = sys.modules.get("pytest_dgx_spark.early")
    if early is None:
        return
    distributed = (
        bool(getattr(config.option, "numprocesses", None)) or getattr(config.option, "dist", "no") != "no"
    )
    torch_checks = set(settings.selected) & set(early.TORCH_CHECKS)
    if settings.replay is not None or not torch_checks or distributed:
        early.drop()


#: the report options every rank would write to: --junitxml, pytest-html's --html, allure-pytest's --alluredir
PER_RANK_OPTIONS = ("xmlpath", "htmlpath", "allure_report_dir")


def per_rank_outputs(config: pytest.Config) -> None:
    """Under torchrun (or srun) every rank runs pytest with the same
    ``--junitxml``, ``--html`` and ``--alluredir``; the last rank to finish
    would overwrite rank 0's JUnit file (which carries the ``spark.node<k>.*``
    properties) and html report, and mix its Allure results (the same checks,
    so Allure shows one rank's as retries of the other's) and verdict into
    rank 0's folder. Rank N writes ``<stem>.rankN<suffix>``, as
    ``--spark-report`` does. Runs before those plugins read their options."""
    from pytest_dgx_spark import launch

    if launch.rank(os.environ) == 0:
        return
    from pytest_dgx_spark.report import per_rank_path

    for name in PER_RANK_OPTIONS:
        value = getattr(config.option, name, None)
        if value:
            setattr(config.option, name, str(per_rank_path(value, os.environ)))


#: other plugins' outputs: (option dest, its flag, a folder?)
FOREIGN_OUTPUTS = (("xmlpath", "--junitxml", False), ("htmlpath", "--html", False), ("allure_report_dir", "--alluredir", True))


def refuse_planted_outputs(config: pytest.Config) -> None:
    """JUnit, pytest-html and Allure write their own files, through whatever
    another user planted at those paths (a root run in ``/tmp``: issue 19,
    item 1); this plugin's own files refuse that (:mod:`pytest_dgx_spark.outfile`).
    A preflight run checks theirs before it starts and stops in one line."""
    from pytest_dgx_spark import outfile

    for dest, flag, folder in FOREIGN_OUTPUTS:
        value = getattr(config.option, dest, None)
        if not value:
            continue
        try:
            outfile.check_foreign(str(value), folder=folder)
        except outfile.Refused as exc:
            raise pytest.UsageError(visible(f"{flag}: {str(value)!r} refused: {exc.strerror}")) from None


def options_without_preflight(config: pytest.Config) -> str | None:
    """One line naming the ``--spark-*`` options given on a run without the
    preflight: a CI line that forgets ``--spark-preflight`` would otherwise
    gate nothing, silently. Only ``config.option`` values are read (an option
    not given is ``None``), so a plain run stays light; xdist workers stay
    quiet (the controller says it once)."""
    if hasattr(config, "workerinput"):
        return None
    given = [o.flag for o in options.OPTIONS if getattr(config.option, o.dest, None) is not None]
    if not given:
        return None
    return f"{', '.join(given)} ignored: no check runs without --spark-preflight (or spark_preflight_enabled = true)"


class OneLine:
    """Registered on a plain run that was given ``--spark-*`` options: says
    so in one line of the terminal summary. A ``PytestConfigWarning`` took
    three (where it was raised in this plugin, the message, that source line)
    under a "warnings summary" heading; this one is visible under ``-q`` too."""

    def __init__(self, line: str) -> None:
        self.line = line

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        from pytest_dgx_spark.safe_text import write_line

        write_line(terminalreporter, self.line, yellow=True)


def value_taken_as_test_path(config: pytest.Config) -> str | None:
    """Say so when ``--spark-config PATH`` (space form) moved the rootdir.

    pytest finds the rootdir and the ini file before it loads plugins from
    entry points, so at that moment ``--spark-config`` is an unknown flag
    and the ``PATH`` after it reads as a test path: the rootdir becomes
    PATH's folder and the project's ini (its addopts, its ``spark_preflight_*``
    keys) is not read. No option declaration can change that order. Once
    loaded, we find the setup again without our values; when it differs, the
    run stops with one line asking for ``--spark-config=PATH``. Cheap on a
    plain run: nothing happens unless a ``--spark-*`` flag is followed by a
    separate value.
    """
    import shlex

    args = [*shlex.split(os.environ.get("PYTEST_ADDOPTS", "")), *map(str, config.invocation_params.args)]
    valued = {o.flag for o in options.OPTIONS if o.kind != "bool"}
    spaced = [(args[i], args[i + 1]) for i in range(len(args) - 1) if args[i] in valued]
    if not spaced:
        return None
    try:
        from _pytest.config.findpaths import determine_setup

        ns = config.known_args_namespace
        rootpath, inipath, *_ = determine_setup(
            inifile=ns.inifilename,
            override_ini=ns.override_ini,
            args=[str(a) for a in ns.file_or_dir],
            rootdir_cmd_arg=ns.rootdir or None,
            invocation_dir=config.invocation_params.dir,
        )
    except Exception:  # another pytest's internals: do not guess, do not block
        return None
    if rootpath == config.rootpath and inipath == config.inipath:
        return None
    flag, value = spaced[0]
    ini = f"{inipath} was not read" if inipath else "no ini file"
    return (
        f"{flag} {value}: pytest read {value!r} as a test path before this plugin loaded, so the rootdir "
        f"became {config.rootpath} ({ini}); write {flag}={value}"
    )
