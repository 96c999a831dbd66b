"""--spark-gate: a FAILed check skips the user's own tests."""

from __future__ import annotations

import json

import pytest

from pytest_dgx_spark import catalog

IDS = list(catalog.IDS)


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
    assert result.parseoutcomes() == {"passed": 2, "warned": 1, "deselected": len(IDS) - 1}


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
    assert result.parseoutcomes() == {"failed": 1, "passed": 2, "deselected": len(IDS) - 1}


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
    assert result.parseoutcomes() == {"passed": 1, "warned": 1, "deselected": len(IDS) - 1}


def test_session_fixture_without_the_flag_skips(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_train="def test_uses_results(spark_preflight): pass")
    result = pytester.runpytest("-rs")
    result.stdout.fnmatch_lines(["SKIPPED*--spark-preflight*"])


# --------------------------------------------------------------------------- every way a check gets deselected

#: ways a user deselects the G3 check while test_train_one_step stays selected
DESELECTIONS = {
    "-k": ["-k", "one_step"],
    "-m": ["-m", "not spark_memory"],
    "--deselect": ["--deselect", "spark_preflight::G3"],
    "--lf": ["--lf"],
}


@pytest.mark.parametrize("how", list(DESELECTIONS))
def test_gate_agrees_with_itself_however_its_check_is_deselected(
    pytester: pytest.Pytester, how: str
) -> None:
    """Issue 11: with ``--lf`` the skip reason said G3 failed while the terminal
    said no check ran, env-report said ``ready`` with no checks and the exit
    code was 0. The gate runs the checks it needs whatever deselected their
    tests (-k, -m, --deselect, --lf) and all four say G3 FAILed."""
    pytester.makepyfile(test_train="def test_train_one_step(): assert False")
    base = ("-p", "no:randomly", "--spark-preflight", "--spark-only", "G3")
    if how == "--lf":  # the user's test failed last time, the check passed: --lf runs the test alone
        first = pytester.runpytest(*base)
        assert first.parseoutcomes() == {"failed": 1, "passed": 1, "deselected": len(IDS) - 1}
    result = pytester.runpytest(
        *base, "--spark-gate", "--spark-workload-gb", "500", "--spark-report", "env.json", "-rs",
        *DESELECTIONS[how],
    )  # fmt: skip
    out = result.stdout.str()
    assert result.parseoutcomes()["skipped"] == 1, out
    result.stdout.fnmatch_lines(["SKIPPED [[]1] test_train.py:1: spark preflight G3 failed"])
    assert "no preflight check ran" not in out
    result.stdout.fnmatch_lines(["*these checks ran for --spark-gate*", "G3 FAIL: *", "verdict: blocked *"])
    doc = json.loads((pytester.path / "env.json").read_text())
    assert doc["verdict"] == "blocked"
    # issue 24 item 3: the nine checks --spark-only leaves out are listed as not run
    assert list(doc["checks"]) == IDS and doc["checks"]["G3"].startswith("fail: ")
    assert doc["checks"]["G1"] == "not run: deselected (--spark-only G3)"
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_gate_needs_every_enabled_check_when_some_are_deselected(pytester: pytest.Pytester, user_tests) -> None:
    """``-k "G9 or one_step"`` keeps G9's test; the gate still decides on G3
    too (run for it, said so), so a FAIL there skips the user's test."""
    result = pytester.runpytest(
        "-p", "no:randomly", "--spark-preflight", "--spark-gate", "--spark-only", "G3,G9",
        "--spark-workload-gb", "500", "--spark-report", "env.json", "-k", "G9 or one_step", "-rs",
    )  # fmt: skip
    outcomes = result.parseoutcomes()
    # deselected: the checks --spark-only leaves out, G3 (-k) and test_eval (-k)
    assert outcomes["skipped"] == 1 and outcomes["deselected"] == len(IDS), result.stdout.str()
    result.stdout.fnmatch_lines(
        ["G3: its test deselected, run for --spark-gate", "G3 FAIL: *", "G9 PASS: *", "verdict: blocked *",
         "SKIPPED [[]1] test_train.py:1: spark preflight G3 failed"]
    )  # fmt: skip
    doc = json.loads((pytester.path / "env.json").read_text())
    assert doc["verdict"] == "blocked" and list(doc["checks"]) == IDS
    assert doc["checks"]["G3"].startswith("fail: ") and doc["checks"]["G9"] == "pass"
    assert doc["checks"]["G1"] == "not run: deselected (--spark-only G3,G9)"
    assert result.ret == pytest.ExitCode.TESTS_FAILED
