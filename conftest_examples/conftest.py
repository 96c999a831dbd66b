"""Gate your training tests on the DGX Spark preflight.

Drop this into your project's ``conftest.py`` (or merge it) and run
``pytest --spark-preflight``: the ten checks run first, and every test marked
``@pytest.mark.training`` is skipped with the failing check's line when any
check FAILs, so a broken box costs seconds, not a six-hour run.

``--spark-gate`` does the same for *every* test; this file shows how to do it
for some tests only, and how to read one check's readings in your own test.
"""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "training: needs a DGX Spark that passed the preflight")


@pytest.fixture(autouse=True)
def _require_a_ready_spark(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("training") is None:
        return
    results = request.getfixturevalue("spark_preflight")  # provided by pytest-dgx-spark
    if results.failed:
        first = results[results.failed[0]]
        pytest.skip(f"spark preflight blocked this training test: {first.line()}")


@pytest.fixture
def headroom_gib(spark_preflight) -> float | None:
    """MemAvailable in GiB as G3 read it (None when G3 could not look)."""
    g3 = spark_preflight.get("G3")
    reading = g3.reading("mem_available") if g3 else None
    return reading.value if reading else None
