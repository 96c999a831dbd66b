"""Under xdist and pytest-randomly: the same ten results, each probe once.

The pynvml and torch doubles append a line to a log file each time NVML is
initialised or torch is imported, so "once" is counted, not assumed.
"""

from __future__ import annotations

import re

import pytest

from pytest_dgx_spark import catalog

pytest.importorskip("xdist")


GLINE = re.compile(rf"^(?:{'|'.join(catalog.IDS)}) (PASS|FAIL|WARN|SKIP|INFO): ")


def section_lines(result: pytest.RunResult) -> list[str]:
    return [ln for ln in result.stdout.lines if GLINE.match(ln)]


def run_counted(pytester: pytest.Pytester, spark_env, *args: str) -> tuple[list[str], int, int]:
    for log in (spark_env.nvml_log, spark_env.torch_log):
        log.unlink(missing_ok=True)
    result = pytester.runpytest("--spark-preflight", "--spark-workload-gb", "100", *args)
    assert result.ret == 0, result.stdout.str()
    return section_lines(result), spark_env.count(spark_env.nvml_log), spark_env.count(spark_env.torch_log)


def test_xdist_and_randomly_give_the_same_results_and_probe_once(
    pytester: pytest.Pytester, spark_env
) -> None:
    serial, nvml_serial, torch_serial = run_counted(pytester, spark_env, "-p", "no:randomly")
    assert len(serial) == len(catalog.IDS)
    assert torch_serial == 1, "torch is imported once, in one child, for all checks"
    assert nvml_serial >= 1

    spread, nvml_spread, torch_spread = run_counted(pytester, spark_env, "-n", "2", "-p", "no:randomly")
    assert spread == serial
    assert (nvml_spread, torch_spread) == (nvml_serial, torch_serial)

    shuffled, nvml_shuffled, torch_shuffled = run_counted(pytester, spark_env, "-p", "randomly")
    assert shuffled == serial
    assert (nvml_shuffled, torch_shuffled) == (nvml_serial, torch_serial)

    both, nvml_both, torch_both = run_counted(pytester, spark_env, "-n", "2", "-p", "randomly")
    assert both == serial
    assert (nvml_both, torch_both) == (nvml_serial, torch_serial)


def test_each_check_runs_once_under_xdist(pytester: pytest.Pytester, spark_env) -> None:
    result = pytester.runpytest("--spark-preflight", "-n", "2", "-v", "-p", "no:randomly")
    ran = re.findall(r"\] (?:PASSED|FAILED|SKIPPED|WARN|INFO) spark_preflight::(G\d+)", result.stdout.str())
    assert sorted(ran, key=lambda c: int(c[1:])) == list(catalog.IDS)


def test_only_the_controller_runs_checks(pytester: pytest.Pytester, spark_env, tmp_path, monkeypatch) -> None:
    """Issue 21: the preflight runs once, in the controller, before any worker
    starts; the workers get its results through ``workerinput`` and run no
    check, and no folder is shared between processes (there was one, with pid files)."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    pytester.makeconftest(
        """
        import pathlib

        def pytest_sessionfinish(session):
            plugin = session.config.pluginmanager.get_plugin("dgx_spark_preflight")
            name = getattr(session.config, "workerinput", {}).get("workerid", "controller")
            pathlib.Path(f"ran-{name}.txt").write_text(f"{plugin._engine is not None} {len(plugin.results)}")
        """
    )
    result = pytester.runpytest_subprocess("--spark-preflight", "-n", "2", "-p", "no:randomly")
    assert result.ret == 0
    ran = {p.name: p.read_text() for p in pytester.path.glob("ran-*.txt")}
    n = len(catalog.IDS)
    assert ran == {
        "ran-controller.txt": f"True {n}", "ran-gw0.txt": f"False {n}", "ran-gw1.txt": f"False {n}",
    }
    assert list(scratch.iterdir()) == []
