"""Statuses become pytest outcomes exactly as SPEC's table says.

G3 on the GB10 double (MemFree 96.0 GiB, MemAvailable 112.8 GiB of 121.7 GiB)
gives every status from one real check: a 10 GiB workload PASSes, 100 GiB
WARNs (fits only after dropping the page cache), 500 GiB FAILs, no workload
is INFO, and a machine without /proc/meminfo SKIPs.
"""

from __future__ import annotations

import re
import textwrap

import pytest

from pytest_dgx_spark import catalog

GLINE = re.compile(rf"^(?:{'|'.join(catalog.IDS)}) (?:PASS|FAIL|WARN|SKIP|INFO): \S.*$")


@pytest.fixture(autouse=True)
def _gb10(spark_env):
    return spark_env


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:randomly", "--spark-preflight", *args)


def spark_section(result: pytest.RunResult) -> list[str]:
    out = result.stdout.lines
    start = next(i for i, ln in enumerate(out) if re.match(r"^=+ spark preflight =+$", ln))
    section = []
    for line in out[start + 1 :]:
        if line.startswith("=") or line.startswith("-" * 10):
            break
        section.append(line)
    return section


def test_pass_is_passed(pytester: pytest.Pytester) -> None:
    result = run(pytester, "--spark-only", "G3", "--spark-workload-gb", "10")
    result.assert_outcomes(passed=1, deselected=len(catalog.IDS) - 1)
    assert result.ret == 0
    assert "G3 PASS: workload 10 GiB fits in MemFree 96.0 GiB" in result.stdout.str()


def test_info_passes_with_letter_i_and_word_info(pytester: pytest.Pytester) -> None:
    result = run(pytester, "--spark-only", "G3")
    result.assert_outcomes(passed=1, deselected=len(catalog.IDS) - 1)
    result.stdout.fnmatch_lines(["spark_preflight I*"])
    verbose = run(pytester, "--spark-only", "G3", "-v")
    verbose.stdout.fnmatch_lines(["spark_preflight::G3 INFO*"])
    assert verbose.ret == 0
    # INFO stays in the "passed" category, so an all-good run stays green.
    assert "warned" not in verbose.stdout.lines[-1]


def test_warn_is_a_warned_pass(pytester: pytest.Pytester) -> None:
    result = run(pytester, "--spark-only", "G3", "--spark-workload-gb", "100")
    outcomes = result.parseoutcomes()
    assert outcomes == {"warned": 1, "deselected": len(catalog.IDS) - 1}
    assert result.ret == 0
    result.stdout.fnmatch_lines(["spark_preflight W*"])
    # by default one short line (issue 11: at most 120 characters), the whole line under -v
    line = next(ln for ln in spark_section(result) if ln.startswith("G3"))
    assert line.startswith("G3 WARN: workload 100 GiB fits only after dropping 17.2 GiB of page cache")
    assert "; fix: " in line and len(line) <= 120
    verbose = run(pytester, "--spark-only", "G3", "--spark-workload-gb", "100", "-v")
    verbose.stdout.fnmatch_lines(["spark_preflight::G3 WARN*"])
    full = next(ln for ln in spark_section(verbose) if ln.startswith("G3"))
    assert full.startswith("G3 WARN: workload 100 GiB fits MemAvailable 112.8 GiB only once the page cache")
    assert "; fix: between runs, sudo sh -c 'sync; echo 3 > /proc/sys/vm/drop_caches'" in full


def test_strict_turns_warn_into_failure(pytester: pytest.Pytester) -> None:
    result = run(pytester, "--spark-only", "G3", "--spark-workload-gb", "100", "--spark-strict")
    result.assert_outcomes(failed=1, deselected=len(catalog.IDS) - 1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["G3 WARN: workload 100 GiB fits only after dropping*", "verdict: blocked*"])
    # the failure's body (shown under -rA/-v) says why a WARN failed the test
    verbose = run(pytester, "--spark-only", "G3", "--spark-workload-gb", "100", "--spark-strict", "-rA")
    verbose.stdout.fnmatch_lines(["G3 WARN: workload 100 GiB *(a failure under --spark-strict)"])


def test_fail_fails_with_the_g_line_and_no_traceback(pytester: pytest.Pytester) -> None:
    result = run(pytester, "--spark-only", "G3", "--spark-workload-gb", "500", "-rf", "-vv")
    result.assert_outcomes(failed=1, deselected=len(catalog.IDS) - 1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    assert "Traceback" not in out
    assert "def runtest" not in out and "raise SparkCheckFailed" not in out
    result.stdout.fnmatch_lines(
        [
            "*_ G3 UMA headroom _*",
            "G3 FAIL: workload 500 GiB > MemTotal 121.7 GiB: larger than this machine's whole memory*; fix: shrink*",
            "FAILED spark_preflight::G3 - G3 FAIL: workload 500 GiB*",
        ]
    )
    assert "verdict: blocked (G3 failed" in out


def test_skip_says_why(pytester: pytest.Pytester, spark_env) -> None:
    (spark_env.root / "proc" / "meminfo").unlink()
    result = run(pytester, "--spark-only", "G3", "-rs")
    result.assert_outcomes(skipped=1, deselected=len(catalog.IDS) - 1)
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        ["SKIPPED [[]1] spark_preflight:1: G3 SKIP: cannot read memory headroom: cannot read /proc/meminfo*"]
    )


def test_terminal_section_has_ten_g_lines_and_a_verdict(pytester: pytest.Pytester) -> None:
    result = run(pytester, "--spark-workload-gb", "10")
    section = spark_section(result)
    assert section[0].startswith("gotchas: G1 CUDA 12/13 ABI")  # each gotcha's name first (issue 34 item 7)
    section = section[next(i for i, ln in enumerate(section) if GLINE.match(ln)) :]
    g_lines = [ln for ln in section if GLINE.match(ln)]
    assert [ln.split()[0] for ln in g_lines] == list(catalog.IDS)
    assert section[len(g_lines)].startswith("verdict: ")
    assert re.match(r"^verdict: (ready|ready-with-warnings|blocked) \(", section[len(g_lines)])


def test_a_crashing_check_is_that_checks_fail_not_an_internal_error(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        textwrap.dedent(
            """
            import pytest_dgx_spark.checks.g03_uma_headroom.check as g3

            def broken(*args, **kwargs):
                raise ZeroDivisionError("planted")

            g3.evaluate = broken
            """
        )
    )
    result = pytester.runpytest_subprocess("--spark-preflight", "--spark-only", "G3,G9")
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    result.assert_outcomes(failed=1, passed=1, deselected=len(catalog.IDS) - 2)
    # the short line names the exception; -v the place it was raised
    result.stdout.fnmatch_lines(["G3 FAIL: the check itself crashed (ZeroDivisionError), so nothing was verified*"])
    verbose = pytester.runpytest_subprocess("--spark-preflight", "--spark-only", "G3,G9", "-v")
    verbose.stdout.fnmatch_lines(
        ["G3 FAIL: the check itself crashed (ZeroDivisionError: planted at *), so nothing was verified*"]
    )


def test_a_failure_says_its_whole_text_and_fix_once(pytester: pytest.Pytester) -> None:
    """Issue 24 item 1: by default a FAIL's whole text and fix are in its
    failure body, once, with its details and readings; the section keeps its
    short line and pytest's short summary names the G-line (it pointed at the
    section, which held only the cut line). No captured copy beside the body
    (issue 11: a FAIL was printed four times)."""
    for extra in ([], ["-rA"]):
        result = run(pytester, "--spark-only", "G3", "--spark-workload-gb", "500", *extra)
        text = result.stdout.str()
        full = next(ln for ln in result.outlines if ln.startswith("G3 FAIL:") and len(ln) > 120)
        assert "; fix: shrink the workload" in full and not full.endswith("…")
        # once in the failure's body; pytest's own short summary ("FAILED … - <message>",
        # whole under CI=true, cut to the terminal's width otherwise) may quote it again
        assert [ln for ln in result.outlines if full in ln and not ln.startswith("FAILED ")] == [full], extra
        result.stdout.fnmatch_lines(["*_ G3 UMA headroom _*", "G3 FAIL:*", "  mem_available = 112.8 GiB"])
        assert [ln for ln in spark_section(result) if ln.startswith("G3 FAIL")] == [
            "G3 FAIL: workload 500 GiB > this machine's total memory 121.7 GiB; fix: shrink the workload (quantize…"
        ]
        result.stdout.fnmatch_lines(["FAILED spark_preflight::G3 - G3 FAIL: workload 500 GiB*"])
        assert "see the spark preflight section" not in text and "Captured stdout call" not in text


def test_section_lines_fit_the_terminal(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 24 item 9: the section's lines use the terminal's width (80
    columns here), as pytest's own lines do; -v gives the whole line."""
    monkeypatch.setenv("COLUMNS", "80")
    result = run(pytester, "--spark-workload-gb", "100")
    lines = [ln for ln in spark_section(result) if GLINE.match(ln)]
    assert len(lines) == len(catalog.IDS) and all(len(ln) <= 80 for ln in lines), lines
    g3 = next(ln for ln in lines if ln.startswith("G3 "))
    assert g3.startswith("G3 WARN: workload 100 GiB") and "; fix: " in g3 and g3.endswith("…")
    verbose = run(pytester, "--spark-workload-gb", "100", "-v")
    full = next(ln for ln in spark_section(verbose) if ln.startswith("G3 "))
    assert len(full) > 80 and "; fix: between runs, sudo sh -c 'sync; echo 3 > /proc/sys/vm/drop_caches'" in full
