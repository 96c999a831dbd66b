"""pytest entry point ``dgx_spark``.

pytest imports this module in every run of an environment where the plugin
is installed, so it does almost nothing: it registers options, ini keys and
markers, and only when ``--spark-preflight`` (or ``spark_preflight_enabled``)
is given does it import the machinery in :mod:`pytest_spark.configure` and
:mod:`pytest_spark.session`. It is also the one module of ours pytest
rewrites on every plain run under ``PYTHONDONTWRITEBYTECODE=1``, so it stays
short: what only a preflight (or a ``--spark-*`` flag) needs lives in
``configure.py``, loaded through :func:`_plain_import`.
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


@pytest.hookimpl(tryfirst=True)  # before junitxml, pytest-html, Allure read their paths (configure.per_rank_outputs)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{catalog.MARKER_ALL}: one of the ten DGX Spark preflight checks G1..G10"
    )
    for name, text in catalog.AREA_MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    enabled = options.preflight_enabled(config)
    bad = None if enabled else options.bad_ini(config, "spark_preflight_enabled")
    if bad:  # a plain run goes on, but says why the preflight did not run
        config.issue_config_time_warning(
            pytest.PytestConfigWarning(f"{bad}; the spark preflight does not run"), stacklevel=2
        )
    if enabled or _spark_args(config):  # the rest of the setup lives in configure.py
        _plain_import("configure").configure(config, enabled)


def _spark_args(config: pytest.Config) -> bool:
    """A ``--spark-*`` flag on the command line or in ``PYTEST_ADDOPTS``: only
    then can a plain run have something to say about our options."""
    if "--spark" in os.environ.get("PYTEST_ADDOPTS", ""):
        return True
    return any(str(a).startswith("--spark") for a in config.invocation_params.args)


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
