"""Without --spark-preflight the plugin imports nothing heavy and collects nothing.

Measured in a subprocess, because this very test process has long since
imported everything.
"""

from __future__ import annotations

import json

import pytest

RECORDER = """
import json, sys

def pytest_unconfigure(config):
    with open("modules.json", "w") as fh:
        json.dump(sorted(sys.modules), fh)
"""


@pytest.mark.parametrize("extra", [[], ["-p", "no:dgx_spark"]], ids=["installed", "disabled"])
def test_plain_run_imports_nothing_heavy(pytester: pytest.Pytester, extra: list[str]) -> None:
    pytester.makeconftest(RECORDER)
    pytester.makepyfile(test_x="def test_x(): pass")
    result = pytester.runpytest_subprocess(*extra)
    result.assert_outcomes(passed=1)
    modules = json.loads((pytester.path / "modules.json").read_text())
    loaded = [
        m
        for m in modules
        if m.split(".")[0] in ("pynvml", "psutil", "torch", "yaml", "elftools")
        or m.startswith(
            ("pytest_spark.session", "pytest_spark.engine", "pytest_spark.probes", "pytest_spark.checks")
        )
    ]
    assert loaded == []
    if not extra:
        assert "pytest_spark.plugin" in modules, "the plugin itself is loaded (and registers its options)"


def test_with_the_flag_the_machinery_loads(pytester: pytest.Pytester, spark_env) -> None:
    pytester.makeconftest(RECORDER)
    result = pytester.runpytest_subprocess("--spark-preflight", "--spark-only", "G3")
    result.assert_outcomes(passed=1, deselected=9)
    modules = json.loads((pytester.path / "modules.json").read_text())
    assert "pytest_spark.engine" in modules
    # NVML and torch run in child processes: never imported into pytest itself
    assert "pynvml" not in modules and "torch" not in modules
