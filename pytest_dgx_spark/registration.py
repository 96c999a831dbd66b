"""The hooks and fixtures of the ``dgx_spark`` entry point (:mod:`pytest_dgx_spark.plugin`).

pytest loads this on every run of an environment where the plugin is
installed, so it does almost nothing: it registers options, ini keys and
markers, and only when ``--spark-preflight`` (or ``spark_preflight_enabled``)
is given does it import the machinery in :mod:`pytest_dgx_spark.configure` and
:mod:`pytest_dgx_spark.session`. Neither ``pynvml`` nor ``psutil`` is imported on
a plain run. It is loaded with Python's own loader (``plugin.plain_import``),
so pytest never re-rewrites it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from pytest_dgx_spark.plugin import PLUGIN_NAME, plain_import

catalog = plain_import("catalog")
options = plain_import("options")


def start_early() -> str | None:
    """``pytest --spark-preflight``: start the torch child now, while pytest
    goes on loading plugins and collecting (see pytest_dgx_spark/early.py). A
    plain run pays for one string search. It only saves time, so a failure
    here never stops pytest: the run starts its child later, as without it.
    Returns why it failed (``None``: started, or not wanted)."""
    if "--spark-preflight" not in sys.argv and "--spark-preflight" not in os.environ.get(
        "PYTEST_ADDOPTS", ""
    ):
        return None
    try:
        plain_import("early").start()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


start_early()


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_pytest_options(parser)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(plain_import("hooks"))


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
        plain_import("configure").configure(config, enabled)


def _spark_args(config: pytest.Config) -> bool:
    """A ``--spark-*`` flag on the command line or in ``PYTEST_ADDOPTS``: only
    then can a plain run have something to say about our options."""
    if "--spark" in os.environ.get("PYTEST_ADDOPTS", ""):
        return True
    return any(str(a).startswith("--spark") for a in config.invocation_params.args)



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
    :class:`pytest_dgx_spark.sampler.GpuSampler`.
    """
    # imported here, not at the top: a plain run must not load (and, under
    # PYTHONDONTWRITEBYTECODE, have pytest re-rewrite) the sampler's module
    from pytest_dgx_spark.sampler import run_fixture

    yield from run_fixture(request)
