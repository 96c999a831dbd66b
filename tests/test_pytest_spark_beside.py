"""PySpark's ``pytest-spark`` installed beside us: both plugins load in one run.

``pytest-spark`` installs a top-level ``pytest_spark`` package, the name this
project's import package had in 0.3.0; ours is ``pytest_dgx_spark`` now, so
a data team can have both (issue 21, item 6). The real ``pytest-spark`` is
needed here (its report header imports ``pyspark``: ``pyspark-client`` is the
small pure-Python one); CI's ML-image lane installs both, and elsewhere these
tests skip and say why.
"""

from __future__ import annotations

import importlib.util
from importlib import metadata

import pytest

from pytest_dgx_spark import catalog


def _pytest_spark_problem() -> str | None:
    try:
        dist = metadata.distribution("pytest-spark")
    except metadata.PackageNotFoundError:
        return "pytest-spark is not installed here (CI's ml-image lane installs it with pyspark-client)"
    if importlib.util.find_spec("pyspark") is None:
        return f"pytest-spark {dist.version} is installed without pyspark, which its report header imports"
    return None


PROBLEM = _pytest_spark_problem()
pytestmark = pytest.mark.skipif(PROBLEM is not None, reason=PROBLEM or "")

INI = """
[pytest]
spark_options =
    spark.app.name: dgx-preflight-beside
    spark.executor.cores: 1
spark_preflight_only = G3,G9
spark_preflight_workload_gb = 4
"""


def test_both_packages_are_distinct() -> None:
    import pytest_spark

    import pytest_dgx_spark

    assert pytest_spark.__file__ != pytest_dgx_spark.__file__
    assert hasattr(pytest_spark, "spark_session"), "the real PySpark plugin, not a stand-in"
    assert pytest_dgx_spark.__version__


def test_fixtures_of_both_plugins_are_listed(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess("-p", "spark", "--fixtures")
    assert result.ret == 0, result.stdout.str()[-2000:]
    out = result.stdout.str()
    assert "spark_session" in out and "spark_context" in out  # pytest-spark's
    assert "spark_preflight" in out  # ours


def test_preflight_runs_with_pytest_spark_loaded(pytester: pytest.Pytester, spark_env) -> None:
    """The ten checks' run in a project whose ini has pytest-spark's ``spark_options``:
    both plugins read their own keys, and no key is reported unknown."""
    pytester.makeini(INI)
    result = pytester.runpytest_subprocess(
        "-p", "spark", "--spark-preflight", "--spark-offline", "-W", "error::pytest.PytestConfigWarning"
    )
    out = result.stdout.str()
    assert result.ret in (0, 1), out[-3000:]
    assert "spark.app.name: dgx-preflight-beside" in out  # pytest-spark's header read its ini key
    assert "PytestConfigWarning" not in out and "Unknown config option" not in out
    section = out.split("spark preflight", 1)[-1]
    assert "G3 " in section and "G9 " in section
    result.assert_outcomes(passed=2, deselected=len(catalog.IDS) - 2)
