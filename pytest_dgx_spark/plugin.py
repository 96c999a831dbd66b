"""The ``dgx_spark`` entry point, loaded on every pytest run, so small: options, ini keys, markers,
the two fixtures. Only with ``--spark-preflight`` (or ``spark_preflight_enabled``) or a ``--spark-*``
flag does it import the machinery; a plain run never imports ``pynvml``, ``psutil`` or the checks.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from pytest_dgx_spark import catalog, hooks, options
from pytest_dgx_spark.hooks import PLUGIN_NAME

if TYPE_CHECKING:  # a plain run does not import the model
    from pytest_dgx_spark.model import PreflightResults

__all__ = ["PLUGIN_NAME", "spark_preflight", "spark_sampler", "start_early"]


def start_early() -> str | None:
    """``pytest --spark-preflight``: start the torch child now (:mod:`.early`); it only saves time,
    so a failure never stops pytest: returns why it failed."""
    if "--spark-preflight" not in sys.argv and "--spark-preflight" not in os.environ.get("PYTEST_ADDOPTS", ""):
        return None
    try:
        from pytest_dgx_spark import early  # lazy: only with --spark-preflight (it loads the probes)

        early.start()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


start_early()


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_pytest_options(parser)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hooks)


@pytest.hookimpl(tryfirst=True)  # before junitxml, pytest-html, Allure read their paths (session.per_rank_outputs)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{catalog.MARKER_ALL}: one of the {catalog.HOW_MANY} DGX Spark preflight checks {catalog.SPAN}")
    for name, text in catalog.AREA_MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    enabled = options.preflight_enabled(config)
    bad = None if enabled else options.bad_ini(config, "spark_preflight_enabled")
    if bad:  # a plain run goes on, but says why the preflight did not run
        warning = pytest.PytestConfigWarning(f"{bad}; the spark preflight does not run")
        config.issue_config_time_warning(warning, stacklevel=2)
    spark_args = "--spark" in os.environ.get("PYTEST_ADDOPTS", "") or any(
        str(a).startswith("--spark") for a in config.invocation_params.args
    )
    if enabled or spark_args:
        from pytest_dgx_spark import configure  # lazy: only with --spark-preflight or a --spark-* flag

        configure.configure(config, enabled)


@pytest.fixture(scope="session")
def spark_preflight(request: pytest.FixtureRequest) -> PreflightResults:
    """The preflight results (``"G3" -> Result``, ``.verdict``, ``.failed``), computed once before the
    first test, so a training test can decide on them."""
    plugin: Any = request.config.pluginmanager.get_plugin(PLUGIN_NAME)
    if plugin is None:
        pytest.skip("the spark_preflight fixture needs --spark-preflight (or spark_preflight_enabled = true)")
    results: PreflightResults = plugin.fixture_results()
    return results


@pytest.fixture
def spark_sampler(request: pytest.FixtureRequest) -> Iterator[Any]:
    """Sample every GPU in the background while the test runs, into the test's report (``-rA``, JUnit,
    json-report); indirect parameters ``interval`` (1 s), ``procs_every``, ``max_points``. Yields a
    :class:`pytest_dgx_spark.sampler.GpuSampler`."""
    from pytest_dgx_spark.sampler import run_fixture  # lazy: a plain run must not load the sampler

    yield from run_fixture(request)
