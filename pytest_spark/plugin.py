"""pytest entry point ``dgx_spark``.

pytest imports this module in every run of an environment where the plugin
is installed, so it does almost nothing: it registers options, ini keys and
markers, and only when ``--spark-preflight`` (or ``spark_preflight_enabled``)
is given does it import the machinery in :mod:`pytest_spark.session`.
Neither ``pynvml`` nor ``psutil`` is imported on a plain run.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_spark import catalog, options

PLUGIN_NAME = "dgx_spark_preflight"

#: the ``spark_sampler`` fixture; its module imports nothing pytest has not
#: (NVML runs in a child only once a test asks for the fixture)
pytest_plugins = ["pytest_spark.sampler"]


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_pytest_options(parser)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from pytest_spark import hooks

    pluginmanager.add_hookspecs(hooks)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{catalog.MARKER_ALL}: one of the ten DGX Spark preflight checks G1..G10"
    )
    for name, text in catalog.AREA_MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    if not options.preflight_enabled(config):
        return
    clash = pyspark_plugin_clash()
    if clash:
        raise pytest.UsageError(clash)
    try:
        settings = options.settings_from_pytest(config)
    except options.OptionError as exc:
        raise pytest.UsageError(str(exc)) from None
    replay = None
    if settings.replay is not None:
        from pytest_spark import capture

        try:
            replay = capture.load(settings.replay)
        except capture.CaptureError as exc:
            raise pytest.UsageError(str(exc)) from None
    from pytest_spark.session import SparkPreflight

    config.pluginmanager.register(SparkPreflight(config, settings, replay), PLUGIN_NAME)


def pyspark_plugin_clash() -> str | None:
    """Say so when PySpark's ``pytest-spark`` shares our ``pytest_spark`` folder.

    Both distributions install a top-level ``pytest_spark`` package; whichever
    was installed last overwrote the other's files, and uninstalling either
    breaks both. No entry-point name can fix that, so we refuse to run.
    """
    import pytest_spark

    message = (
        "pytest-dgx-spark cannot run next to pytest-spark (the PySpark plugin): both install "
        "the top-level package 'pytest_spark' and overwrite each other's files. "
        "Use separate environments, or `pip uninstall pytest-spark` and reinstall pytest-dgx-spark."
    )
    if not getattr(pytest_spark, "__dgx_spark__", False):
        return message
    from importlib import metadata

    try:
        metadata.distribution("pytest-spark")
    except metadata.PackageNotFoundError:
        return None
    except Exception:  # unreadable metadata: do not block on a guess
        return None
    return message


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
