"""--spark-gate: a FAILed check skips the user's own tests."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _gb10(spark_env):
    return spark_env


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_gate_skips_user_tests_when_a_check_fails(pytester: pytest.Pytester, user_tests, xdist) -> None:
    result = pytester.runpytest(
        "--spark-preflight", "--spark-gate", "--spark-only", "G3", "--spark-workload-gb", "500", "-rs", *xdist
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    outcomes = result.parseoutcomes()
    assert outcomes["failed"] == 1 and outcomes["skipped"] == 2
    assert result.stdout.str().count("spark preflight G3 failed") == 2
    result.stdout.fnmatch_lines(["SKIPPED [[]1] test_train.py:*: spark preflight G3 failed"])


def test_gate_lets_user_tests_run_when_nothing_fails(pytester: pytest.Pytester, user_tests) -> None:
    result = pytester.runpytest(
        "--spark-preflight", "--spark-gate", "--spark-only", "G3", "--spark-workload-gb", "100"
    )
    assert result.parseoutcomes() == {"passed": 2, "warned": 1, "deselected": 9}


def test_gate_treats_warn_as_failure_under_strict(pytester: pytest.Pytester, user_tests) -> None:
    result = pytester.runpytest(
        "--spark-preflight",
        "--spark-gate",
        "--spark-strict",
        "--spark-only",
        "G3",
        "--spark-workload-gb",
        "100",
        "-rs",
    )
    assert result.parseoutcomes()["skipped"] == 2
    result.stdout.fnmatch_lines(["SKIPPED [[]1] test_train.py:*: spark preflight G3 failed"])


def test_gate_still_decides_when_only_user_tests_are_selected(pytester: pytest.Pytester, user_tests) -> None:
    result = pytester.runpytest(
        "--spark-preflight",
        "--spark-gate",
        "--spark-only",
        "G3",
        "--spark-workload-gb",
        "500",
        "-k",
        "one_step",
        "-rs",
    )
    assert result.parseoutcomes()["skipped"] == 1
    result.stdout.fnmatch_lines(["SKIPPED [[]1] test_train.py:1: spark preflight G3 failed"])


def test_gate_off_by_default(pytester: pytest.Pytester, user_tests) -> None:
    result = pytester.runpytest("--spark-preflight", "--spark-only", "G3", "--spark-workload-gb", "500")
    assert result.parseoutcomes() == {"failed": 1, "passed": 2, "deselected": 9}


def test_session_fixture_gives_the_results_to_user_tests(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_train="""
        def test_uses_results(spark_preflight):
            g3 = spark_preflight["G3"]
            assert g3.status.value == "WARN"
            assert g3.reading("mem_available").value == 112.8
            assert spark_preflight.verdict == "ready-with-warnings"
        """
    )
    result = pytester.runpytest("--spark-preflight", "--spark-only", "G3", "--spark-workload-gb", "100")
    assert result.parseoutcomes() == {"passed": 1, "warned": 1, "deselected": 9}


def test_session_fixture_without_the_flag_skips(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_train="def test_uses_results(spark_preflight): pass")
    result = pytester.runpytest("-rs")
    result.stdout.fnmatch_lines(["SKIPPED*--spark-preflight*"])
