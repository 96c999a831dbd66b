"""The CI examples in conftest_examples/ run as written.

Each test takes the command out of the example file itself (the GitLab job's
script line, the Jenkinsfile's ``sh`` step) and runs it with pytester against
the GB10 double, then checks the artifact the CI system is told to read. The
preflight stage runs the ten checks only: a failing test of the user's never
fails it (issue 24, item 6). The README's GitLab job is the example's.
"""

from __future__ import annotations

import re
import shlex
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from pytest_dgx_spark import catalog

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "conftest_examples"
FAILING_USER_TEST = "def test_a_unit_test_that_fails():\n    assert 1 == 2\n"


@pytest.fixture(autouse=True)
def _gb10(spark_env):
    return spark_env


def first(pattern: str, text: str) -> str:
    """The first group of ``pattern``'s first match in ``text`` (which must have one)."""
    m = re.search(pattern, text, re.DOTALL)
    assert m, f"no {pattern!r}"
    return m.group(1)


def run_command_line(pytester: pytest.Pytester, line: str) -> pytest.RunResult:
    argv = shlex.split(line)
    assert argv[0] == "pytest"
    return pytester.runpytest(*argv[1:])


def test_gitlab_job_writes_the_junit_report_gitlab_reads(pytester: pytest.Pytester) -> None:
    pipeline = yaml.safe_load((EXAMPLES / ".gitlab-ci.yml").read_text())
    job = pipeline["spark-preflight"]
    assert job["stage"] == "preflight" and pipeline["train"]["stage"] == "train"
    assert pipeline["stages"].index("preflight") < pipeline["stages"].index("train")
    commands = [c for c in job["script"] if c.startswith("pytest ")]
    assert len(commands) == 1
    result = run_command_line(pytester, commands[0])
    assert result.ret in (0, 1)
    report = pytester.path / job["artifacts"]["reports"]["junit"]
    root = ET.parse(report).getroot()
    cases = list(root.iter("testcase"))
    assert [c.get("name") for c in cases if c.get("classname") == "spark_preflight"]
    # what GitLab shows for a passing test is its <system-out>
    assert all(c.find("system-out") is not None for c in cases)
    assert job["artifacts"]["when"] == "always"
    for path in job["artifacts"]["paths"]:
        assert (pytester.path / path).is_file()


def gitlab_command() -> str:
    job = yaml.safe_load((EXAMPLES / ".gitlab-ci.yml").read_text())["spark-preflight"]
    (command,) = [c for c in job["script"] if c.startswith("pytest ")]
    return command


def jenkins_command() -> str:
    return first(r"sh '(pytest [^']+)'", (EXAMPLES / "Jenkinsfile").read_text())


@pytest.mark.parametrize("command", [gitlab_command(), jenkins_command()], ids=["gitlab", "jenkins"])
def test_the_preflight_stage_runs_the_checks_only_so_a_failing_user_test_does_not_fail_it(
    pytester: pytest.Pytester, command: str
) -> None:
    pytester.makepyfile(test_user=FAILING_USER_TEST)
    stage = run_command_line(pytester, command)
    outcomes = stage.parseoutcomes()
    ran = sum(outcomes.get(k, 0) for k in ("passed", "failed", "skipped", "warned"))
    assert ran == len(catalog.IDS), outcomes
    assert "test_a_unit_test_that_fails" not in stage.stdout.str()
    root = ET.parse(pytester.path / "spark-preflight.xml").getroot()
    assert {c.get("classname") for c in root.iter("testcase")} == {"spark_preflight"}
    assert stage.ret == (1 if outcomes.get("failed") else 0)
    # the same line without the node id would run (and fail on) the user's test
    everything = run_command_line(pytester, command.replace(" spark_preflight ", " ", 1))
    everything.stdout.fnmatch_lines(["*FAILED test_user.py::test_a_unit_test_that_fails*"])
    assert everything.ret == 1


def test_a_user_test_file_that_cannot_import_does_not_stop_the_node_id_stage(pytester: pytest.Pytester) -> None:
    """Why the examples select by node id, not ``-m spark_preflight``: a marker
    deselects your tests only after importing their files, so one broken
    import errors the collection and fails the gate (the README says so)."""
    pytester.makepyfile(test_user="import a_module_nobody_installed\n")
    stage = run_command_line(pytester, gitlab_command())
    assert stage.ret in (0, 1) and "a_module_nobody_installed" not in stage.stdout.str()
    by_marker = run_command_line(pytester, gitlab_command().replace(" spark_preflight ", " -m spark_preflight ", 1))
    assert by_marker.ret == pytest.ExitCode.INTERRUPTED
    by_marker.stdout.fnmatch_lines(["*ModuleNotFoundError*a_module_nobody_installed*"])
    assert "one that cannot import fails the stage" in " ".join((ROOT / "README.md").read_text().split())


def test_the_readme_shows_the_examples_gitlab_job() -> None:
    """The README's GitLab snippet is the example's job (its install variable,
    install line and preflight command), so what the suite runs is what it shows."""
    readme = (ROOT / "README.md").read_text()
    snippet = yaml.safe_load(first(r"```yaml\n(.*?)```", readme))
    pipeline = yaml.safe_load((EXAMPLES / ".gitlab-ci.yml").read_text())
    assert snippet["variables"] == pipeline["variables"]
    assert snippet["spark-preflight"]["script"] == pipeline["spark-preflight"]["script"]
    assert snippet["spark-preflight"]["artifacts"]["reports"] == pipeline["spark-preflight"]["artifacts"]["reports"]
    assert "`pytest --spark-preflight spark_preflight`" in readme
    assert "`pytest --spark-preflight --spark-gate`" in readme


def test_jenkins_stage_writes_properties_jenkins_keeps(pytester: pytest.Pytester) -> None:
    text = (EXAMPLES / "Jenkinsfile").read_text()
    command = first(r"sh '(pytest [^']+)'", text)
    junit_step = re.search(r"junit testResults: '([^']+)', keepProperties: true", text)
    assert junit_step, "the junit step must keep properties for Jenkins to show them"
    run_command_line(pytester, command)
    root = ET.parse(pytester.path / junit_step.group(1)).getroot()
    g3 = next(c for c in root.iter("testcase") if c.get("name") == "G3")
    props = {p.get("name"): p.get("value") for p in g3.iter("property")}
    assert props["spark.id"] == "G3"
    assert props["spark.status"] in ("PASS", "WARN", "FAIL", "INFO", "SKIP")
    assert "spark.reading.mem_available" in props


def test_gate_conftest_skips_training_tests_when_a_check_fails(pytester: pytest.Pytester) -> None:
    pytester.copy_example("conftest.py")
    pytester.copy_example("test_training_example.py")
    blocked = pytester.runpytest(
        "--spark-preflight", "--spark-only", "G3", "--spark-workload-gb", "500", "-rs"
    )
    others = len(catalog.IDS) - 1
    assert blocked.parseoutcomes() == {"failed": 1, "passed": 1, "skipped": 1, "deselected": others}
    blocked.stdout.fnmatch_lines(
        ["SKIPPED*spark preflight blocked this training test: G3 FAIL: workload 500 GiB*"]
    )
    ready = pytester.runpytest("--spark-preflight", "--spark-only", "G3", "--spark-workload-gb", "10")
    assert ready.parseoutcomes() == {"passed": 3, "deselected": len(catalog.IDS) - 1}
