"""Hooks pytest-dgx-spark offers to conftest files and other plugins."""

from __future__ import annotations

from typing import Any


def pytest_spark_preflight_result(config: Any, result: Any) -> None:
    """Called on the controller for each check result as its report arrives.

    ``result`` is a :class:`pytest_dgx_spark.model.Result`. Use it to forward
    readings to a dashboard, or to decide something in a conftest.
    """


def pytest_spark_preflight_finished(config: Any, results: Any, verdict: str) -> None:
    """Called once on the controller at session end with every result and the
    verdict (``ready`` | ``ready-with-warnings`` | ``blocked``)."""
