"""WARN in ``-r`` short summaries, no reruns of a check, the sampler's chart.

G3 on the GB10 double (MemAvailable 112.8 GiB) gives a real WARN with a
100 GiB workload and a real FAIL with 500 GiB (see test_plugin_outcomes.py).
"""

from __future__ import annotations

import base64
import html
import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from localserver import ISSUES_PATH, Answer, LocalServer

from pytest_dgx_spark import catalog
from pytest_dgx_spark.report_plugins import wants_warn_lines

from doubles import gb10
from doubles.spark_scene import DATA, Scene, run_plugin, section

WARN_LINE = "WARN spark_preflight::G3 - G3 WARN: workload 100 GiB fits MemAvailable*"


@pytest.fixture(autouse=True)
def _gb10(spark_env):
    return spark_env


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:randomly", "--spark-preflight", "--spark-only", "G3", *args)


def summary_section(result: pytest.RunResult) -> list[str]:
    lines = result.stdout.lines
    start = next((i for i, ln in enumerate(lines) if "short test summary info" in ln), None)
    if start is None:
        return []
    return [ln for ln in lines[start + 1 :] if not ln.startswith("=")]


@pytest.mark.parametrize("chars", ["-rA", "-ra", "-rw", "-rW"])
def test_warn_is_listed_in_the_short_summary(pytester: pytest.Pytester, chars: str) -> None:
    result = run(pytester, "--spark-workload-gb", "100", chars)
    assert result.parseoutcomes() == {"warned": 1, "deselected": len(catalog.IDS) - 1}
    section = summary_section(result)
    assert len([ln for ln in section if ln.startswith("WARN ")]) == 1, section
    result.stdout.fnmatch_lines(["*short test summary info*", WARN_LINE])


def test_warn_line_follows_pytests_own_lines_under_ra(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user="def test_bad(): assert False")
    result = run(pytester, "--spark-workload-gb", "100", "-rA", "test_user.py")
    section = summary_section(result)
    assert section[0].startswith("FAILED test_user.py::test_bad")
    assert section[-1].startswith("WARN spark_preflight::G3 - G3 WARN:")
    assert sum("short test summary info" in ln for ln in result.stdout.lines) == 1


def test_no_warn_line_by_default_or_after_N(pytester: pytest.Pytester) -> None:
    for extra in ([], ["-rAN"]):
        result = run(pytester, "--spark-workload-gb", "100", *extra)
        assert not any(ln.startswith("WARN spark_preflight") for ln in result.stdout.lines), extra


def test_full_warn_line_under_vv(pytester: pytest.Pytester) -> None:
    result = run(pytester, "--spark-workload-gb", "100", "-rA", "-vv")
    line = next(ln for ln in summary_section(result) if ln.startswith("WARN "))
    g_line = next(ln for ln in result.stdout.lines if ln.startswith("G3 WARN: "))
    assert line == f"WARN spark_preflight::G3 - {g_line}"
    assert len(line) > 80  # not cut to the terminal's width


def test_wants_warn_lines() -> None:
    assert [wants_warn_lines(c) for c in ("fE", "A", "a", "w", "W", "AN", "NA", "s")] == [
        False, True, True, True, True, False, True, False
    ]


def test_a_failing_check_is_not_rerun(pytester: pytest.Pytester) -> None:
    pytest.importorskip("pytest_rerunfailures")
    pytester.makepyfile(test_user="def test_flaky(): assert False")
    result = run(pytester, "--spark-workload-gb", "500", "--reruns", "2", "test_user.py")
    outcomes = result.parseoutcomes()
    # the user's test is rerun twice (rerunfailures is active), the check not at all
    assert outcomes == {"failed": 2, "rerun": 2, "deselected": len(catalog.IDS) - 1}
    assert result.stdout.str().count("G3 FAIL: workload 500 GiB") >= 1
    assert not any(ln.startswith("RERUN spark_preflight") for ln in result.stdout.lines)
    result.stdout.fnmatch_lines(["spark_preflight F*", "test_user.py RRF*"])


def test_not_rerun_even_in_append_mode(pytester: pytest.Pytester) -> None:
    pytest.importorskip("pytest_rerunfailures")
    result = run(pytester, "--spark-workload-gb", "500", "--reruns", "2", "--reruns-mode", "append")
    assert result.parseoutcomes() == {"failed": 1, "deselected": len(catalog.IDS) - 1}


SAMPLER_TEST = """
import pytest

@pytest.mark.parametrize("spark_sampler", [{"interval": 0.02}], indirect=True)
def test_train(spark_sampler):
    import time
    deadline = time.monotonic() + 5
    while spark_sampler.summary()["samples"] < 12 and time.monotonic() < deadline:
        time.sleep(0.02)
"""


def hot_gb10(n: int = 40) -> dict[str, Any]:
    samples = [
        {"temperature_c": 70 + i, "power_usage_mw": 95000, "clock_event_reasons": 0x20 if i >= 5 else 0}
        for i in range(n)
    ]
    return gb10.nvml(device={"samples": samples})


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_sampler_chart_in_html_allure_and_beside_the_report(
    pytester: pytest.Pytester, doubles: Any, monkeypatch: pytest.MonkeyPatch, xdist: list[str]
) -> None:
    """The sampler's series (GB10 double heating with SwThermalSlowdown) drawn
    into the test's html row, attached in Allure and written beside env-report
    (under xdist by the worker that ran the test)."""
    pytest.importorskip("pytest_html")
    pytest.importorskip("allure_pytest")
    pytest.importorskip("matplotlib")
    if xdist:
        pytest.importorskip("xdist")
    doubles.nvml(hot_gb10()).apply(monkeypatch)
    pytester.makepyfile(test_train=SAMPLER_TEST)
    result = pytester.runpytest_subprocess(
        "-p", "no:randomly", "--spark-preflight", "--spark-only", "G3", "--spark-report", "env-report.json",
        "--html=report.html", "--self-contained-html", "--alluredir=allure", *xdist, "test_train.py",
    )
    # xdist's workers deselect unseen
    result.assert_outcomes(passed=2, deselected=0 if xdist else len(catalog.IDS) - 1)
    chart_file = pytester.path / "env-report.thermal-test_train_spark_sampler0.svg"
    result.stdout.fnmatch_lines([f"thermal chart written to {chart_file}"])
    root = ET.fromstring(chart_file.read_bytes())
    assert any((el.get("id") or "").startswith("spark-reason-SwThermalSlowdown-gpu0") for el in root.iter())

    text = (pytester.path / "report.html").read_text(encoding="utf-8")
    blob = json.loads(html.unescape(re.search(r'data-jsonblob="([^"]*)"', text).group(1)))  # type: ignore[union-attr]
    row = next(rows[-1] for nodeid, rows in blob["tests"].items() if "test_train" in nodeid)
    images = [e for e in row["extras"] if e["format_type"] == "image"]
    assert [e["name"] for e in images] == ["spark_sampler thermals"]
    svg = base64.b64decode(images[0]["content"].split(",", 1)[1])
    assert b"SwThermalSlowdown" in svg

    docs = [json.loads(p.read_text()) for p in (pytester.path / "allure").glob("*-result.json")]
    train = next(d for d in docs if d["name"].startswith("test_train"))
    assert "spark_sampler thermals" in json.dumps(train)


def test_plain_sampler_run_loads_no_chart_code(
    pytester: pytest.Pytester, doubles: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    doubles.nvml(hot_gb10()).apply(monkeypatch)
    pytester.makepyfile(
        test_train=SAMPLER_TEST
        + "\ndef test_after():\n    import sys\n    assert 'pytest_dgx_spark.chart' not in sys.modules\n"
        + "    assert 'matplotlib' not in sys.modules\n"
    )
    result = pytester.runpytest_subprocess("-p", "no:randomly", "test_train.py")
    result.assert_outcomes(passed=2)


def test_no_marker_when_no_rerun_is_asked(pytester: pytest.Pytester) -> None:
    """Without --reruns, rerunfailures leaves every test alone, so do we."""
    pytest.importorskip("pytest_rerunfailures")
    pytester.makeconftest(
        "def pytest_collection_finish(session):\n"
        "    print('MARKED', [i.name for i in session.items if i.get_closest_marker('flaky')])\n"
    )
    plain = run(pytester, "-s")
    plain.stdout.fnmatch_lines(["MARKED []"])
    asked = run(pytester, "-s", "--reruns", "1")
    asked.stdout.fnmatch_lines(["MARKED ['G3']"])


# --------------------------------------------------------------------------- default output width (issue 11)


@pytest.fixture
def blocked_run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, kit: Any, tmp_path: Path
) -> Iterator[Callable[..., pytest.RunResult]]:
    """``pytest --spark-preflight`` on the broken Spark of test_gb10_end_to_end
    (3 FAIL, 5 WARN), as CI runs it: ``CI=true`` keeps pytest from cutting the
    short summary to the terminal's width."""
    from test_gb10_end_to_end import blocked_spark

    scene = Scene(tmp_path / "spark", kit)
    args, _ = blocked_spark(scene, pytester.path)
    scene.env_vars["CI"] = "true"
    with LocalServer() as server:
        server.answers[ISSUES_PATH] = Answer(body=(DATA / "github" / "issues_open.json").read_bytes())

        def run(*extra: str) -> pytest.RunResult:
            return run_plugin(pytester, monkeypatch, scene, [*args, "--github-url", server.url], *extra)

        try:
            yield run
        finally:
            scene.stop()


#: pytest's own header lines (paths and plugin lists of this machine, not ours)
PYTEST_HEADER = ("platform ", "rootdir: ", "configfile: ", "plugins: ", "cachedir: ")


def test_default_output_shows_each_fail_whole_once(blocked_run: Callable[..., pytest.RunResult]) -> None:
    """Issue 24 item 1: a FAIL's whole text and fix are in the default output,
    once (its FAILURES body); the section keeps one short line per check, no
    line is wider than the terminal, and the short summary names the finding
    instead of pointing back at a cut line. (Issue 11's four copies stay gone.)"""
    result = blocked_run()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    lines = [ln for ln in result.outlines if not ln.startswith(PYTEST_HEADER)]
    g_lines = section(result.outlines)
    assert len(g_lines) == len(catalog.IDS) + 1  # a line per check and the verdict
    assert all(len(ln) <= 120 for ln in g_lines), g_lines
    out = result.stdout.str()
    full = [ln for ln in section(blocked_run("-v").outlines) if " FAIL: " in ln]
    assert full, "the blocked scene has FAILs"
    for line in full:
        assert "; fix: " in line
        failures = out.split("= FAILURES =", 1)[1].split("= spark preflight =", 1)[0]
        assert failures.count(line) == 1, (line, out)  # the whole line with its fix, in its body, once
        section_text = out.split("= spark preflight =", 1)[1].split("short test summary", 1)[0]
        assert line not in section_text  # the section keeps the short line
    assert "see the spark preflight section" not in out
    # the short summary names each FAILed check with its finding
    result.stdout.fnmatch_lines(["FAILED spark_preflight::G1 - G1 FAIL: *"])
    assert len([ln for ln in lines if ln.startswith("FAILED spark_preflight::")]) == len(full)


def test_full_text_under_v_and_ra(blocked_run: Callable[..., pytest.RunResult]) -> None:
    """The whole G-line and its details stay one flag away."""
    for flag in ("-rA", "-v"):
        result = blocked_run(flag)
        out = result.stdout.str()
        assert "G1 FAIL: 1 shared object links another CUDA major than torch 2.11.0+cu130" in out, flag
        assert re.search(r"^  \S", out, re.M), flag
    # the last run's -v: under the section's G1 line (unchanged), the finding's codes
    lines = result.outlines
    start = next(i for i, ln in enumerate(lines) if re.match(r"^=+ spark preflight =+$", ln))
    at = next(i for i in range(start, len(lines)) if lines[i].startswith("G1 FAIL: "))
    assert lines[at + 1].startswith("  code") and "G1.cuda-major-mismatch" in lines[at + 1], lines[at : at + 2]
