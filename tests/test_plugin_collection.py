"""Collection: ten tests G1..G10, in order, first; selection behaves normally."""

from __future__ import annotations

import re

import pytest

from pytest_dgx_spark import catalog

IDS = list(catalog.IDS)


@pytest.fixture(autouse=True)
def _gb10(spark_env):
    """Every run here sees the GB10 double, never this CI box's hardware."""
    return spark_env


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """An inner run with pytest-randomly off, so order can be asserted."""
    return pytester.runpytest("-p", "no:randomly", *args)


def collected_ids(result: pytest.RunResult) -> list[str]:
    return re.findall(r"spark_preflight::(G\d+)", result.stdout.str())


def test_without_the_flag_nothing_is_collected(pytester: pytest.Pytester) -> None:
    result = run(pytester, "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    assert "spark_preflight" not in result.stdout.str()


def test_flag_collects_ten_checks_in_order_before_user_tests(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user="def test_train(): pass")
    result = run(pytester, "--spark-preflight", "--collect-only", "-q")
    lines = [ln for ln in result.stdout.lines if "::" in ln]
    assert lines == [f"spark_preflight::{i}" for i in IDS] + ["test_user.py::test_train"]
    result.stdout.fnmatch_lines([f"{len(IDS) + 1} tests collected*"])


def test_ini_twin_enables_the_preflight(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nspark_preflight_enabled = true\n")
    result = run(pytester, "--collect-only", "-q")
    assert collected_ids(result) == IDS


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("G1", [i for i in IDS if "G1" in i]),  # pytest's -k matches a substring of a name: G10 holds G1
        ("g1", [i for i in IDS if "G1" in i]),  # in any case
        ("G5", ["G5"]),
        ("G10", [i for i in IDS if "G10" in i]),
        ("G1 and not G10", [i for i in IDS if "G1" in i and "G10" not in i]),
        ("G1 or G5", [i for i in IDS if "G1" in i or "G5" in i]),
        ("not G1", [i for i in IDS if "G1" not in i]),
        ("spark_preflight and not G10", [i for i in IDS if "G10" not in i]),
    ],
)
def test_keyword_selects_check_ids_as_pytest_selects_any_test(
    pytester: pytest.Pytester, expr: str, expected: list[str]
) -> None:
    """Issue 31 item 6: pytest's own ``-k`` selects the check items, as it does any test (the
    plugin used to evaluate ``-k`` itself with pytest's private matcher so that ``-k G1`` left G10 out)."""
    result = run(pytester, "--spark-preflight", "--collect-only", "-q", "-k", expr)
    assert collected_ids(result) == expected


def test_keyword_matches_checks_and_user_tests_alike(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user="def test_G1_config(): pass\ndef test_other(): pass")
    result = run(pytester, "--spark-preflight", "--collect-only", "-q", "-k", "G1")
    out = result.stdout.str()
    assert "spark_preflight::G1\n" in out + "\n"
    assert "test_user.py::test_G1_config" in out
    assert "spark_preflight::G10" in out
    assert "test_other" not in out


#: the area marker of each check named here (a later check's comes from its spec)
AREAS = {
    "spark_launch": ["G1", "G2", "G9"],
    "spark_memory": ["G3", "G6"],
    "spark_thermal": ["G4"],
    "spark_bandwidth": ["G5"],
    "spark_precision": ["G7"],
    "spark_upstream": ["G8"],
    "spark_multinode": ["G10"],
}
NAMED = {i for ids in AREAS.values() for i in ids}


@pytest.mark.parametrize(
    ("marker", "expected"), [*AREAS.items(), ("spark_preflight", sorted(NAMED, key=IDS.index))]
)
def test_area_markers_select(pytester: pytest.Pytester, marker: str, expected: list[str]) -> None:
    result = run(pytester, "--spark-preflight", "--collect-only", "-q", "-m", marker)
    got = collected_ids(result)
    assert [i for i in got if i in NAMED] == expected
    assert got == [c.id for c in catalog.CHECKS if marker in c.markers]


def test_markers_are_listed(pytester: pytest.Pytester) -> None:
    result = run(pytester, "--markers")
    for name in (
        "spark_preflight",
        "spark_launch",
        "spark_memory",
        "spark_thermal",
        "spark_bandwidth",
        "spark_precision",
        "spark_upstream",
        "spark_multinode",
    ):
        result.stdout.fnmatch_lines([f"@pytest.mark.{name}:*"])


def test_markers_registered_without_the_flag_so_strict_markers_accepts_them(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_user="""
        import pytest
        @pytest.mark.spark_memory
        def test_big_model(): pass
        """
    )
    result = run(pytester, "--strict-markers")
    result.assert_outcomes(passed=1)


def test_spark_only_deselects_the_rest(pytester: pytest.Pytester) -> None:
    result = run(pytester, "--spark-preflight", "--spark-only", "G3,g9")
    result.assert_outcomes(passed=2, deselected=len(IDS) - 2)
    assert "G3 INFO:" in result.stdout.str()


def test_plugin_can_be_disabled(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user="def test_train(): pass")
    result = run(pytester, "-p", "no:dgx_spark")
    result.assert_outcomes(passed=1)
    result = run(pytester, "-p", "no:dgx_spark", "--spark-preflight")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--spark-preflight" in result.stderr.str()


def test_last_failed_reruns_the_failed_check_and_user_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user="def test_ok(): pass\ndef test_bad(): assert 0")
    first = run(pytester, "--spark-preflight", "--spark-workload-gb", "500")
    assert first.parseoutcomes()["failed"] == 2
    second = run(pytester, "--spark-preflight", "--spark-workload-gb", "500", "--lf", "-v")
    ran = re.findall(r"^(\S+::\S+) (?:PASSED|FAILED|SKIPPED|WARN|INFO)", second.stdout.str(), re.M)
    assert ran == ["spark_preflight::G3", "test_user.py::test_bad"]
    second.assert_outcomes(failed=2, deselected=len(IDS) - 1)


def test_exitfirst_stops_at_the_first_failing_check(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user="def test_train(): pass")
    result = run(pytester, "--spark-preflight", "--spark-workload-gb", "500", "-x")
    outcomes = result.parseoutcomes()
    assert outcomes["failed"] == 1
    assert "test_train" not in result.stdout.str().split("short test summary")[0].split("spark preflight")[-1]
    assert "G3 FAIL" in result.stdout.str()
    assert sum(outcomes.get(k, 0) for k in ("passed", "skipped", "warned", "failed")) < len(IDS) + 1


@pytest.mark.parametrize("stop", [["-x"], ["--maxfail=1"]], ids=["-x", "--maxfail"])
def test_exitfirst_says_which_checks_tests_it_left_unrun(pytester: pytest.Pytester, stop: list[str]) -> None:
    """Issue 34 item 12: with ``-x`` and a FAIL, the checks after it have lines (the preflight ran
    them all before the first test) but their tests never ran; the section says so, naming them and
    why, instead of leaving the seven lines to read as seven passed tests."""
    pytester.makepyfile(test_user="def test_train(): pass")
    result = run(pytester, "--spark-preflight", "--spark-workload-gb", "500", *stop)
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed") == 1 and outcomes.get("passed") == 2, outcomes  # G1, G2 passed; G3 failed
    section = result.stdout.str().split("= spark preflight =")[-1].splitlines()
    said = [ln for ln in section if "tests not run" in ln]
    # the start, which fits any width (a narrow terminal may cut the rest: "(the lines above are …")
    left = ", ".join(IDS[IDS.index("G4") :])
    assert len(said) == 1 and said[0].startswith(f"{left} tests not run: stopping after 1 failures"), section
    assert [ln for ln in section if ln.startswith("verdict: blocked (G3 failed")], section


def test_a_run_that_ran_every_check_says_no_test_was_left(pytester: pytest.Pytester) -> None:
    """Without ``-x`` every check's test runs after the same FAIL: no such line."""
    result = run(pytester, "--spark-preflight", "--spark-workload-gb", "500")
    assert "tests not run" not in result.stdout.str()
    assert result.parseoutcomes().get("failed") == 1


# --------------------------------------------------------------------------- issue 31 item 6: public API only

ARGS_RECORDER = """
import json

def pytest_unconfigure(config):
    with open("args.json", "w") as fh:
        json.dump({"given": [str(a) for a in config.invocation_params.args], "args": list(config.args)}, fh)
"""


def test_a_check_node_id_is_read_from_the_arguments_never_edited(pytester: pytest.Pytester) -> None:
    """pytest finds no file for ``spark_preflight::G3``: the plugin reads it from ``config.args`` and
    pytest collects the other arguments; the arguments themselves stay as given (they were rewritten)."""
    import json

    pytester.makeconftest(ARGS_RECORDER)
    pytester.makepyfile(test_user="def test_train(): pass\ndef test_other(): pass")
    result = run(pytester, "--spark-preflight", "spark_preflight::G3", "test_user.py::test_train", "-v")
    assert re.findall(r"^(\S+::\S+) (?:PASSED|INFO|WARN)", result.stdout.str(), re.M) == [
        "spark_preflight::G3", "test_user.py::test_train"
    ]  # fmt: skip
    seen = json.loads((pytester.path / "args.json").read_text())
    assert seen["args"] == ["spark_preflight::G3", "test_user.py::test_train"]
    given = seen["given"]
    start = given.index("spark_preflight::G3")
    assert given[start : start + 3] == ["spark_preflight::G3", "test_user.py::test_train", "-v"]


def test_a_file_named_beside_a_check_keeps_pytests_assertion_rewriting(pytester: pytest.Pytester) -> None:
    """The plugin collects the other arguments in pytest's place; pytest's assertion rewriter still
    learns them first, so a named file outside ``python_files`` keeps its assertion introspection."""
    pytester.makepyfile(check_me="def test_x():\n    a = 1\n    assert a == 2\n")
    result = run(pytester, "--spark-preflight", "spark_preflight::G3", "check_me.py")
    assert result.parseoutcomes()["failed"] == 1
    result.stdout.fnmatch_lines(["E       assert 1 == 2"])


def test_k_and_m_together_are_both_named_for_a_check_they_leave_out(pytester: pytest.Pytester) -> None:
    """pytest does not say which of ``-k`` and ``-m`` left a test out: both are named."""
    import json

    result = run(pytester, "--spark-preflight", "--spark-report", "env.json", "-k", "G3 or G6 or G4",
                 "-m", "spark_memory")  # fmt: skip
    assert result.parseoutcomes()["deselected"] == len(IDS) - 2  # all but G3 and G6
    checks = json.loads((pytester.path / "env.json").read_text())["checks"]
    assert [c for c, v in checks.items() if not v.startswith("not run")] == ["G3", "G6"]
    assert {checks[c] for c in ("G1", "G4")} == {"not run: deselected (-k G3 or G6 or G4, -m spark_memory)"}
