"""PySpark's ``pytest-spark`` installed after us replaces ``pytest_spark/__init__.py``
(no ``__version__``, no ``__dgx_spark__``): both front doors refuse in one line.

The clash is staged for real: a copy of our package on PYTHONPATH whose
``__init__.py`` is replaced by one like PySpark's plugin (which defines
neither name), ahead of the installed package.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import pytest_spark
from pytest_spark import clash, plugin

PYSPARK_INIT = '''"""pytest-spark: a pytest plugin to run tests with support of pyspark (stand-in)."""
import os
'''


@pytest.fixture
def overlaid(tmp_path: Path) -> dict[str, str]:
    """An environment whose ``pytest_spark`` is ours with PySpark's ``__init__.py``."""
    site = tmp_path / "site"
    shutil.copytree(
        Path(pytest_spark.__file__).parent,
        site / "pytest_spark",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    (site / "pytest_spark" / "__init__.py").write_text(PYSPARK_INIT)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.pop("PYTEST_ADDOPTS", None)
    return env


@pytest.mark.parametrize(
    "args", [[], ["--offline", "--only", "G3"], ["--json"]], ids=["plain", "only", "json"]
)
def test_cli_refuses_in_one_line_exit_2(tmp_path: Path, overlaid: dict[str, str], args: list[str]) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_spark.cli", *args],
        cwd=tmp_path,
        env=overlaid,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith("spark-preflight: error: pytest-dgx-spark cannot run next to pytest-spark")
    assert "Traceback" not in proc.stderr


def test_python_m_pytest_spark_refuses_too(tmp_path: Path, overlaid: dict[str, str]) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_spark"],
        cwd=tmp_path,
        env=overlaid,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "cannot run next to pytest-spark" in proc.stderr


def test_the_check_passes_for_our_own_package() -> None:
    assert clash.pyspark_plugin_clash() is None
    assert plugin.pyspark_plugin_clash() is None  # the old name still answers


def test_the_check_names_the_clash_when_our_marker_is_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(pytest_spark, "__dgx_spark__")
    assert clash.pyspark_plugin_clash() == clash.MESSAGE
    assert plugin.pyspark_plugin_clash() == clash.MESSAGE


def test_the_plugin_refuses_the_preflight_but_not_a_plain_run(
    pytester: pytest.Pytester, overlaid: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", overlaid["PYTHONPATH"])
    pytester.makepyfile(test_x="def test_x(): pass")
    plain = pytester.runpytest_subprocess("-p", "no:randomly")
    plain.assert_outcomes(passed=1)
    refused = pytester.runpytest_subprocess("-p", "no:randomly", "--spark-preflight")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["*pytest-dgx-spark cannot run next to pytest-spark*"])
    assert "Traceback" not in refused.stderr.str()
