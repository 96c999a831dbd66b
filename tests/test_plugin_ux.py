"""Issue 11, "reports that agree with each other": the gate with its checks
deselected, FAIL's text in env-report, why no check ran, ``--spark-*``
options without the preflight, node ids given back to pytest, and the checks
first under pytest-randomly."""

from __future__ import annotations

import json
import re

import pytest

from pytest_dgx_spark import catalog

IDS = list(catalog.IDS)
#: an id one past the last check's: no such check
NO_SUCH = f"G{catalog.CHECKS[-1].number + 1}"
NORANDOM = ("-p", "no:randomly")


@pytest.fixture(autouse=True)
def _gb10(spark_env):
    """Every run here sees the GB10 double, never this box's hardware."""
    return spark_env


# --------------------------------------------------------------------------- the gate with -k


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_gate_with_its_checks_deselected_reports_what_it_gated_on(
    pytester: pytest.Pytester, user_tests, xdist: list[str]
) -> None:
    """The gate runs the checks it needs even when ``-k`` deselected their
    tests; the skip reason, the terminal section, env-report and the exit code
    all say G3 FAILed."""
    result = pytester.runpytest(
        *NORANDOM,
        "--spark-preflight",
        "--spark-gate",
        "--spark-only",
        "G3",
        "--spark-workload-gb",
        "500",
        "--spark-report",
        "env.json",
        "-k",
        "one_step",
        "-rs",
        *xdist,
    )
    out = result.stdout.str()
    assert result.parseoutcomes()["skipped"] == 1
    result.stdout.fnmatch_lines(["SKIPPED [[]1] test_train.py:*: spark preflight G3 failed"])
    assert "no preflight check ran" not in out
    result.stdout.fnmatch_lines(["*these checks ran for --spark-gate*", "G3 FAIL: *", "*blocked*"])
    doc = json.loads((pytester.path / "env.json").read_text())
    assert doc["verdict"] == "blocked"
    assert list(doc["checks"]) == IDS and doc["checks"]["G3"].startswith("fail: ")  # nine not run
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_gate_with_checks_deselected_and_nothing_failing_stays_green(
    pytester: pytest.Pytester, user_tests
) -> None:
    result = pytester.runpytest(
        *NORANDOM, "--spark-preflight", "--spark-gate", "--spark-only", "G3", "--spark-workload-gb", "100",
        "-k", "one_step", "--spark-report", "env.json",
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.OK
    assert result.parseoutcomes()["passed"] == 1
    doc = json.loads((pytester.path / "env.json").read_text())
    assert doc["verdict"] == "ready-with-warnings" and doc["checks"]["G3"].startswith("warn: ")


# --------------------------------------------------------------------------- env-report FAIL text


def test_env_report_fail_carries_its_text(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(
        *NORANDOM, "--spark-preflight", "--spark-only", "G3", "--spark-workload-gb", "500", "--spark-report", "e.json"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    value = json.loads((pytester.path / "e.json").read_text())["checks"]["G3"]
    word, _, text = value.partition(": ")
    assert word == "fail" and "500" in text


# --------------------------------------------------------------------------- why no check ran


def not_run_report(pytester: pytest.Pytester, name: str = "env.json") -> dict:
    """The env-report of a run in which no check ran: all ten listed as not run, never ``ready``."""
    doc = json.loads((pytester.path / name).read_text())
    assert doc["verdict"] == "ready-with-warnings", doc
    assert list(doc["checks"]) == IDS
    return doc


def test_collection_error_is_not_called_all_deselected(pytester: pytest.Pytester) -> None:
    """A user file that fails to import: the terminal and env-report both say
    the checks did not run because collection failed (nothing was verified)."""
    pytester.makepyfile(test_broken="import a_module_that_is_not_installed_anywhere")
    result = pytester.runpytest(*NORANDOM, "--spark-preflight", "--spark-report", "env.json")
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert "all deselected" not in out
    result.stdout.fnmatch_lines(
        [
            "no preflight check ran: collection failed (1 error), so no test ran",
            f"verdict: ready-with-warnings ({len(IDS)} not run)",
        ]
    )
    doc = not_run_report(pytester)
    assert set(doc["checks"].values()) == {"not run: collection error"}


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_all_deselected_by_m_is_not_ready(pytester: pytest.Pytester, user_tests, xdist: list[str]) -> None:
    """``-m x`` selects nothing (exit 5): env-report used to say ``ready``
    with no checks while the terminal said no check ran."""
    result = pytester.runpytest(*NORANDOM, "--spark-preflight", "--spark-report", "env.json", "-m", "x", *xdist)
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    result.stdout.fnmatch_lines(
        ["no preflight check ran (all deselected: -m x)",
         f"verdict: ready-with-warnings ({len(IDS)} not run)"]
    )
    assert "verdict: ready " not in result.stdout.str()
    doc = not_run_report(pytester)
    assert set(doc["checks"].values()) == {"not run: deselected (-m x)"}


def test_all_deselected_still_says_so(pytester: pytest.Pytester, user_tests) -> None:
    result = pytester.runpytest(*NORANDOM, "--spark-preflight", "-k", "one_step", "--spark-report", "env.json")
    result.stdout.fnmatch_lines(["no preflight check ran (all deselected: -k one_step)"])
    assert set(not_run_report(pytester)["checks"].values()) == {"not run: deselected (-k one_step)"}


def test_some_deselected_are_listed_as_not_run(pytester: pytest.Pytester, user_tests) -> None:
    """``-k G3``: G3 ran, the nine others were not checked; env-report and the
    terminal list them, and the verdict is not ``ready``."""
    result = pytester.runpytest(*NORANDOM, "--spark-preflight", "-k", "G3", "--spark-report", "env.json")
    result.stdout.fnmatch_lines(
        [
            "G3 INFO: *",
            ", ".join(i for i in IDS if i != "G3") + " not run: deselected (-k G3)",
            f"verdict: ready-with-warnings (1 INFO, {len(IDS) - 1} not run)",
        ]
    )
    doc = json.loads((pytester.path / "env.json").read_text())
    assert doc["verdict"] == "ready-with-warnings" and list(doc["checks"]) == IDS
    assert doc["checks"]["G3"].startswith("info: ") and doc["checks"]["G10"] == "not run: deselected (-k G3)"


def test_collect_only_writes_no_env_report(pytester: pytest.Pytester, user_tests) -> None:
    """``--co`` runs nothing by design: no env-report claims a verdict."""
    result = pytester.runpytest(*NORANDOM, "--spark-preflight", "--co", "--spark-report", "env.json")
    assert result.ret == pytest.ExitCode.OK
    assert not (pytester.path / "env.json").exists()
    assert "env report written" not in result.stdout.str()


# --------------------------------------------------------------------------- options without the flag

RECORDER = """
import json, sys

def pytest_unconfigure(config):
    with open("modules.json", "w") as fh:
        json.dump(sorted(sys.modules), fh)
"""


@pytest.mark.parametrize("quiet", [[], ["-q"]], ids=["default", "-q"])
def test_spark_options_without_the_preflight_warn_in_one_line(pytester: pytest.Pytester, quiet: list[str]) -> None:
    """A CI line that forgets --spark-preflight is told so in one line (it
    took three: this plugin's file and line, the message, that source line);
    the run stays light (the settings module is not imported to find out)."""
    pytester.makeconftest(RECORDER)
    pytester.makepyfile(test_x="def test_x(): pass")
    result = pytester.runpytest_subprocess(*NORANDOM, "--spark-gate", "--spark-report=env.json", *quiet)
    result.assert_outcomes(passed=1)
    out = result.stdout.str() + result.stderr.str()
    said = [ln for ln in out.splitlines() if "--spark-gate" in ln or "spark_preflight_enabled" in ln]
    assert said == [
        "warning: --spark-gate, --spark-report ignored: no check runs without --spark-preflight "
        "(or spark_preflight_enabled = true)"
    ], out
    # one line: no location, no source line of this plugin, no warnings section
    assert "plugin.py" not in out and "warnings summary" not in out and "issue_config_time_warning" not in out
    modules = json.loads((pytester.path / "modules.json").read_text())
    assert "pytest_dgx_spark.settings" not in modules
    assert not (pytester.path / "env.json").exists()


def test_plain_run_without_spark_options_has_no_warning(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="def test_x(): pass")
    result = pytester.runpytest(*NORANDOM)
    result.assert_outcomes(passed=1)
    assert "given without --spark-preflight" not in result.stdout.str()


# --------------------------------------------------------------------------- node ids as arguments


def _ran(result: pytest.RunResult) -> list[str]:
    """Node ids of the tests that ran, in order, from ``-v`` lines."""
    found = (re.match(r"^(\S+::\S+) (?:PASSED|FAILED|SKIPPED|WARN|INFO)\b", ln) for ln in result.stdout.lines)
    return [m.group(1) for m in found if m]


def test_printed_node_id_can_be_given_back(pytester: pytest.Pytester, user_tests) -> None:
    result = pytester.runpytest(*NORANDOM, "--spark-preflight", "spark_preflight::G3", "-v")
    assert "not found" not in result.stdout.str() + result.stderr.str()
    assert _ran(result) == ["spark_preflight::G3"]
    assert result.ret == pytest.ExitCode.OK
    assert result.parseoutcomes() == {"passed": 1}  # like a named test: the others are not "deselected"


def test_node_ids_mix_with_user_paths(pytester: pytest.Pytester, user_tests) -> None:
    result = pytester.runpytest(
        *NORANDOM, "--spark-preflight", "spark_preflight::G9", "./spark_preflight::G3", "test_train.py", "-v"
    )
    assert _ran(result) == [
        "spark_preflight::G3",
        "spark_preflight::G9",
        "test_train.py::test_train_one_step",
        "test_train.py::test_eval",
    ]


def test_the_file_id_selects_the_ten_checks_only(pytester: pytest.Pytester, user_tests) -> None:
    result = pytester.runpytest(*NORANDOM, "--spark-preflight", "spark_preflight", "--collect-only", "-q")
    assert [ln for ln in result.stdout.lines if "::" in ln] == [f"spark_preflight::{i}" for i in IDS]


def test_the_file_id_keeps_spark_only(pytester: pytest.Pytester, user_tests) -> None:
    """``spark_preflight`` names the enabled checks: --spark-only still decides which."""
    result = pytester.runpytest(
        *NORANDOM, "--spark-preflight", "--spark-only=G3,G8", "spark_preflight", "--collect-only", "-q"
    )
    assert [ln for ln in result.stdout.lines if "::" in ln] == ["spark_preflight::G3", "spark_preflight::G8"]


def test_unknown_check_id_is_one_usage_line(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(*NORANDOM, "--spark-preflight", f"spark_preflight::{NO_SUCH}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"*spark_preflight::{NO_SUCH}: no such check; the checks are *{IDS[0]} .. *{IDS[-1]}"]
    )


# --------------------------------------------------------------------------- pytest-randomly


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5, 6])
def test_checks_run_first_under_pytest_randomly(pytester: pytest.Pytester, seed: int) -> None:
    """pytest-randomly shuffles modules and tests; the checks stay first, in order."""
    pytester.makepyfile(test_a="def test_a1(): pass\ndef test_a2(): pass", test_b="def test_b(): pass")
    result = pytester.runpytest(f"--randomly-seed={seed}", "--spark-preflight", "--collect-only", "-q")
    ids = [ln for ln in result.stdout.lines if "::" in ln]
    assert ids[: len(IDS)] == [f"spark_preflight::{i}" for i in IDS]
    assert sorted(ids[len(IDS) :]) == ["test_a.py::test_a1", "test_a.py::test_a2", "test_b.py::test_b"]


def test_printed_node_id_works_from_a_subfolder_and_under_xdist(pytester: pytest.Pytester, user_tests) -> None:
    """pytest prints ids relative to the rootdir; the same text works from a
    subfolder of it, and each xdist worker takes it out of its own arguments."""
    pytester.makeini("[pytest]\n")
    sub = pytester.mkdir("sub")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(sub)
        result = pytester.runpytest(*NORANDOM, "--spark-preflight", "spark_preflight::G3", "-n", "2")
    assert result.parseoutcomes() == {"passed": 1}



# --------------------------------------------------------------------------- one rule for "not run" (issue 24, item 3)

#: four ways to select G5 alone
SELECT_G5 = {
    "node id": ["spark_preflight::G5"],
    "-k": ["-k", "G5"],
    "--spark-only": ["--spark-only", "G5"],
    "-m": ["-m", "spark_bandwidth"],
}


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_one_check_selected_any_way_gives_the_same_verdict(pytester: pytest.Pytester, xdist: list[str]) -> None:
    """A node id read ``verdict: ready`` while nine checks never ran, ``-k``
    said ``ready-with-warnings (… 9 not run)``. Now every way says the same,
    in the terminal and in env-report, and names the nine as not run."""
    seen = {}
    for how, args in SELECT_G5.items():
        result = pytester.runpytest(*NORANDOM, "--spark-preflight", "--spark-report", "env.json", *args, *xdist, "-v")
        ran = re.findall(r"(?:PASSED|FAILED|SKIPPED|WARN|INFO) (spark_preflight::G\d+)|^(spark_preflight::G\d+) ", result.stdout.str(), re.M)
        assert {"".join(r) for r in ran} == {"spark_preflight::G5"}, (how, result.stdout.str())
        verdict = next(ln for ln in result.outlines if ln.startswith("verdict: "))
        doc = json.loads((pytester.path / "env.json").read_text())
        assert list(doc["checks"]) == IDS, how
        assert all(doc["checks"][c].startswith("not run: deselected (") for c in IDS if c != "G5"), (how, doc)
        seen[how] = (verdict, doc["verdict"], doc["checks"]["G5"])
    assert len(set(seen.values())) == 1, seen
    verdict, word, _ = seen["node id"]
    assert word == "ready-with-warnings" and verdict.endswith(f", {len(IDS) - 1} not run)"), verdict


def test_collect_only_claims_no_verdict(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(*NORANDOM, "--spark-preflight", "--co", "-k", "G5")
    assert not [ln for ln in result.outlines if ln.startswith("verdict") or "= spark preflight =" in ln]
    result.stdout.fnmatch_lines([f"*1/{len(IDS)} tests collected ({len(IDS) - 1} deselected)*"])


def test_a_worker_never_runs_a_check_the_controller_did_not_plan(pytester: pytest.Pytester) -> None:
    """Under xdist the controller runs the preflight before the workers
    collect. A check item a worker has no result for (a selection the
    controller could not foresee; here its result is taken out of
    ``workerinput``) is a SKIP saying so, never a check run in the worker."""
    pytester.makeconftest(
        """
        import pathlib
        import pytest

        @pytest.hookimpl(trylast=True)
        def pytest_configure_node(node):
            data = node.workerinput["spark_preflight_results"]
            data["results"] = [r for r in data["results"] if r["id"] != "G3"]

        def pytest_sessionfinish(session):
            if hasattr(session.config, "workerinput"):
                plugin = session.config.pluginmanager.get_plugin("dgx_spark_preflight")
                pathlib.Path(session.config.workerinput["workerid"]).write_text(str(plugin._engine))
        """
    )
    result = pytester.runpytest(*NORANDOM, "--spark-preflight", "--spark-only", "G3,G9", "-n", "2", "-rs")
    result.stdout.fnmatch_lines(["SKIPPED [[]1] spark_preflight:1: G3 SKIP: not run: the xdist controller ran the preflight before*"])
    assert result.parseoutcomes()["skipped"] == 1
    assert {p.read_text() for p in pytester.path.glob("gw*")} == {"None"}


@pytest.mark.parametrize("flag", ["--setup-plan", "--setup-only", "--setupplan"])
@pytest.mark.parametrize("how", ["inline", "subprocess", "xdist"])
def test_setup_plan_and_setup_only_run_no_check(
    pytester: pytest.Pytester, spark_env, user_tests, flag: str, how: str
) -> None:
    """Issue 34 item 11: ``--setup-plan`` (like ``--co``) runs nothing, and ``--setup-only`` runs no
    test, and the checks are tests: no NVML or torch child, no section, no report claiming a
    verdict. The subprocess run also covers the torch child started while pytest loads; under
    xdist the controller, which runs the preflight before the workers start, runs none either."""
    run = pytester.runpytest if how == "inline" else pytester.runpytest_subprocess
    extra = ["-p", "xdist", "-n", "2"] if how == "xdist" else []
    result = run(*NORANDOM, *extra, "--spark-preflight", flag, "--spark-report", "env.json")
    assert result.ret == pytest.ExitCode.OK, result.outlines
    assert spark_env.count(spark_env.nvml_log) == 0 and spark_env.count(spark_env.torch_log) == 0
    assert not [ln for ln in result.outlines if ln.startswith("verdict") or "= spark preflight =" in ln]
    assert not (pytester.path / "env.json").exists()
    if how != "xdist":  # the plan still lists the checks (a worker's plan is not printed)
        result.stdout.fnmatch_lines(["*spark_preflight::G1*"])
