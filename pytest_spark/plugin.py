"""pytest entry point ``dgx_spark``.

pytest imports this module in every run of an environment where the plugin
is installed, so it does almost nothing: it registers options, ini keys and
markers, and only when ``--spark-preflight`` (or ``spark_preflight_enabled``)
is given does it import the machinery in :mod:`pytest_spark.session`.
Neither ``pynvml`` nor ``psutil`` is imported on a plain run.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

import pytest_spark

PLUGIN_NAME = "dgx_spark_preflight"


def _plain_import(name: str) -> ModuleType:
    """Import ``pytest_spark.<name>`` with Python's own loader, not pytest's.

    pytest marks every module of an installed plugin's package for assertion
    rewriting. Ours hold no asserts, but under ``PYTHONDONTWRITEBYTECODE=1``
    (common in container images) pytest never writes its rewritten .pyc, so
    it would read, parse and compile each module again on every plain run
    (~3.5 ms for the option table and catalog, 2% of a one-test run).
    Python's loader reads the .pyc the install wrote instead.
    """
    full = f"{__package__}.{name}"
    if full in sys.modules:
        return sys.modules[full]
    spec = importlib.machinery.PathFinder.find_spec(full, pytest_spark.__path__)
    if spec is None or spec.loader is None:  # an unusual install: the ordinary way
        return importlib.import_module(full)
    module = importlib.util.module_from_spec(spec)
    sys.modules[full] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[full]
        raise
    setattr(pytest_spark, name, module)
    return module


catalog = _plain_import("catalog")
options = _plain_import("options")


def start_early() -> str | None:
    """``pytest --spark-preflight``: start the torch child now, while pytest
    goes on loading plugins and collecting (see pytest_spark/early.py). A
    plain run pays for one string search. It only saves time, so a failure
    here never stops pytest: the run starts its child later, as without it.
    Returns why it failed (``None``: started, or not wanted)."""
    if "--spark-preflight" not in sys.argv and "--spark-preflight" not in os.environ.get(
        "PYTEST_ADDOPTS", ""
    ):
        return None
    try:
        _plain_import("early").start()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


start_early()


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_pytest_options(parser)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(_plain_import("hooks"))


@pytest.hookimpl(tryfirst=True)  # before junitxml, pytest-html, Allure read their paths (per_rank_outputs)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{catalog.MARKER_ALL}: one of the ten DGX Spark preflight checks G1..G10"
    )
    for name, text in catalog.AREA_MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    moved = value_taken_as_test_path(config)
    if moved:
        raise pytest.UsageError(moved)
    if not options.preflight_enabled(config):
        bad = options.bad_ini(config, "spark_preflight_enabled")
        if bad:  # a plain run goes on, but says why the preflight did not run
            config.issue_config_time_warning(
                pytest.PytestConfigWarning(f"{bad}; the spark preflight does not run"), stacklevel=2
            )
        ignored = options_without_preflight(config)
        if ignored:  # one line at the end of the run, not a warnings-summary entry with our source line
            config.pluginmanager.register(OneLine(f"warning: {ignored}"), "dgx_spark_ignored_options")
        return
    clash = pyspark_plugin_clash()
    if clash:
        raise pytest.UsageError(clash)
    from pytest_spark.settings import OptionError, settings_from_pytest  # not on a plain run

    try:
        settings = settings_from_pytest(config)
    except OptionError as exc:
        raise pytest.UsageError(str(exc)) from None
    replay = None
    if settings.replay is not None:
        from pytest_spark import capture

        try:
            replay = capture.load(settings.replay)
        except capture.CaptureError as exc:
            raise pytest.UsageError(str(exc)) from None
    per_rank_outputs(config)
    keep_early_child_only_if_used(config, settings)
    from pytest_spark.session import SparkPreflight

    config.pluginmanager.register(SparkPreflight(config, settings, replay), PLUGIN_NAME)


def keep_early_child_only_if_used(config: pytest.Config, settings: Any) -> None:
    """The torch child started while pytest loaded (pytest_spark/early.py)
    guessed from the command line; now the ini file and every option are
    known. Kill it at once when this process will not run a check that reads
    torch: a replay, ``spark_preflight_only`` without G1/G2/G5/G7, or an
    xdist controller (``addopts = -n auto`` in the ini: the workers run the checks)."""
    early = sys.modules.get(f"{__package__}.early")
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
    from pytest_spark import launch

    if launch.rank(os.environ) == 0:
        return
    from pytest_spark.report import per_rank_path

    for name in PER_RANK_OPTIONS:
        value = getattr(config.option, name, None)
        if value:
            setattr(config.option, name, str(per_rank_path(value, os.environ)))


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
        terminalreporter.write_line(self.line, yellow=True)


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


def pyspark_plugin_clash() -> str | None:
    """The PySpark-clash check, kept under its old name; it lives in
    :mod:`pytest_spark.clash` (no pytest there, for the CLI), imported only
    when a preflight runs."""
    from pytest_spark.clash import pyspark_plugin_clash as check

    return check()


def get_plugin(config: pytest.Config) -> Any:
    return config.pluginmanager.get_plugin(PLUGIN_NAME)


@pytest.fixture(scope="session")
def spark_preflight(request: pytest.FixtureRequest) -> Any:
    """The preflight results (a mapping ``"G3" -> Result`` with ``.verdict``
    and ``.failed``), computed once and shared with the ten check tests, so a
    training test can decide on them."""
    plugin = get_plugin(request.config)
    if plugin is None:
        pytest.skip("the spark_preflight fixture needs --spark-preflight (or spark_preflight_enabled = true)")
    return plugin.results_view()


@pytest.fixture
def spark_sampler(request: pytest.FixtureRequest) -> Iterator[Any]:
    """Sample every GPU in the background while the test runs.

    At teardown the summary and the series go to the test's report: a
    "Captured stdout teardown" section (shown with ``-rA``, and in JUnit's
    ``<system-out>`` with ``-o junit_logging=system-out``), pytest-json-report
    metadata when that plugin is active, and ``spark.sampler.*`` properties
    under ``junit_family=xunit1``/``legacy`` (xunit2 allows none on a test
    case). Parameters: ``interval`` (default 1 s), ``procs_every``,
    ``max_points`` through indirect parametrization. Yields a
    :class:`pytest_spark.sampler.GpuSampler`.
    """
    # imported here, not at the top: a plain run must not load (and, under
    # PYTHONDONTWRITEBYTECODE, have pytest re-rewrite) the sampler's module
    from pytest_spark.sampler import run_fixture

    yield from run_fixture(request)
