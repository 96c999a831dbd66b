"""Hooks pytest-dgx-spark offers to conftest files and other plugins, and the
name its plugin object is registered under (``config.pluginmanager.get_plugin``)."""

from __future__ import annotations

from typing import Any

#: the name of the plugin object registered with ``--spark-preflight``
PLUGIN_NAME = "dgx_spark_preflight"


def pytest_spark_preflight_result(config: Any, result: Any) -> None:
    """Called on the controller once per check result (a
    :class:`pytest_dgx_spark.model.Result`), when the preflight has run,
    before the first test. Use it to forward readings to a dashboard."""


def pytest_spark_preflight_finished(config: Any, results: Any, verdict: str) -> None:
    """Called once on the controller at session end with every result and the
    verdict (``ready`` | ``ready-with-warnings`` | ``blocked``)."""
