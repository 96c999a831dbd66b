"""pytest-html and Allure show each check's status word, G-line and readings.

One run with a PASS (G1), a FAIL (G3), an INFO (G4, with a GB10-shaped
thermal series in its facts), a WARN (G5) and a SKIP (G8): the results are
forced by a conftest that replaces ``Engine.run`` for the run only, so each
status is exactly the one asserted. The html report is read back from its
``data-jsonblob``; Allure from its ``*-result.json`` files and
``environment.properties``. The module does not skip without pytest-html or
allure-pytest: the tests that read their reports do, the one that runs
pytest in an environment without them (and compares) does not.
"""

from __future__ import annotations

import html
import importlib.util
import json
import os
import re
import stat
import subprocess
import sys
import sysconfig
import textwrap
import venv
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

# imported before pytester's first in-process run takes its sys.modules snapshot: the runs then
# share one engine module, the one the forcing conftest patches (imported first by a run, it was
# dropped after that run while the plugin's modules kept it, so later runs were not forced)
import pytest_dgx_spark.engine  # noqa: F401

from conftest import MATPLOTLIB, PYTEST_ARGS, REPORT_PLUGINS

FORCING_CONFTEST = textwrap.dedent(
    """
    import pytest_dgx_spark.engine as engine
    from pytest_dgx_spark import attachments
    from pytest_dgx_spark.model import Reading, Result, Status

    def _gb10_series():
        out = []
        for i in range(60):
            mask = 0x20 if 40 <= i < 50 else 0
            gpu = {"index": 0, "temperature_c": 60 + min(27, i // 2), "power_usage_mw": 100000 + (i % 3) * 500,
                   "clock_sm_mhz": 1900 if mask else 2400, "clock_event_reasons": mask}
            out.append({"t": float(i), "gpus": [gpu]})
        return out

    FORCED = {
        "G1": Result("G1", Status.PASS, "torch cu130 matches the driver's CUDA 13.0",
                     readings=[Reading("torch_cuda", "13.0")]),
        "G3": Result("G3", Status.FAIL, "workload 500 GiB > MemAvailable 112.8 GiB", "stop other jobs",
                     readings=[Reading("mem_available", 112.8, "GiB")]),
        "G4": Result("G4", Status.INFO, "GPU 0 NVIDIA GB10: 60-87 C, 100-101 W",
                     readings=[Reading("temperature_max", 87.0, "C"), Reading("power_limit", None, "W")]),
        "G5": Result("G5", Status.WARN, "pinned copy 38.1 GB/s under 40 GB/s", "close other GPU jobs",
                     readings=[Reading("h2d_pinned", 38.1, "GB/s")]),
        "G8": Result("G8", Status.SKIP, "offline: GitHub not contacted"),
    }
    _saved = {}

    def _run(self, check_id):
        forced = Result.from_dict(FORCED[check_id].to_dict())
        if check_id == "G4":  # the sample rides on G4's result, as its evaluate attaches it
            forced.attachments += attachments.thermal_chart(
                "G4 thermals", "thermal-g4", chart_title="G4 thermal sample", samples=_gb10_series(),
                devices=[{"index": 0, "name": "NVIDIA GB10"}])
        return forced

    def pytest_configure(config):
        _saved["run"] = engine.Engine.run
        engine.Engine.run = _run

    def pytest_unconfigure(config):
        engine.Engine.run = _saved["run"]
    """
)
#: added to the conftest: matplotlib cannot be imported during the run
NO_MATPLOTLIB = textwrap.dedent(
    """
    import sys
    _mpl = {}

    def pytest_sessionstart(session):
        _mpl.update({k: v for k, v in sys.modules.items() if k == "matplotlib" or k.startswith("matplotlib.")})
        for k in _mpl:
            del sys.modules[k]
        sys.modules["matplotlib"] = None

    def pytest_sessionfinish(session):
        sys.modules.pop("matplotlib", None)
        sys.modules.update(_mpl)
    """
)
ONLY = ("--spark-preflight", "--spark-only", "G1,G3,G4,G5,G8", "-p", "no:randomly")


@pytest.fixture(autouse=True)
def _gb10(spark_env):
    return spark_env


@pytest.fixture
def forced(pytester: pytest.Pytester, matplotlib_loaded: None) -> pytest.Pytester:
    """The forcing conftest, for tests that read pytest-html's or Allure's output."""
    pytest.importorskip("pytest_html")
    pytest.importorskip("allure_pytest")
    pytester.makeconftest(FORCING_CONFTEST)
    return pytester


def html_tests(path: Path) -> dict[str, dict[str, Any]]:
    """pytest-html's data blob: nodeid -> the call row's data."""
    text = path.read_text(encoding="utf-8")
    blob = re.search(r'data-jsonblob="([^"]*)"', text)
    assert blob, "no data-jsonblob in the html report"
    data = json.loads(html.unescape(blob.group(1)))
    return {nodeid: rows[-1] for nodeid, rows in data["tests"].items()}


def cell(row: dict[str, Any], css: str) -> str:
    found = next(c for c in row["resultsTableRow"] if re.search(f'class="col-{css}[" ]', c))
    return html.unescape(re.sub(r"<[^>]+>", "", found))


def test_html_rows_show_status_line_and_readings(forced: pytest.Pytester) -> None:
    report = forced.path / "report.html"
    result = forced.runpytest(*ONLY, f"--html={report}", "--self-contained-html")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    rows = html_tests(report)
    by_id = {nodeid.rsplit("::", 1)[-1]: row for nodeid, row in rows.items()}
    expected = {"G1": "PASS", "G3": "FAIL", "G4": "INFO", "G5": "WARN", "G8": "SKIP"}
    for cid, word in expected.items():
        row = by_id[cid]
        assert cell(row, "sparkStatus").endswith(word), (cid, row["resultsTableRow"])
        assert cell(row, "sparkCheck").startswith(f"{cid} {word}: "), cid
        assert row["sparkStatus"].endswith(word)  # sortable: in the blob's own keys
    # pytest's outcome stays what pytest decided (its filter boxes know only these)
    assert [by_id[c]["result"] for c in ("G1", "G3", "G4", "G5", "G8")] == [
        "Passed", "Failed", "Passed", "Passed", "Skipped"
    ]
    # a WARN row differs from a PASS row in what it shows, not only in colour
    assert cell(by_id["G5"], "sparkStatus") == "⚠\u00a0WARN" != cell(by_id["G1"], "sparkStatus") == "✓\u00a0PASS"
    assert cell(by_id["G5"], "sparkCheck") == (
        "G5 WARN: pinned copy 38.1 GB/s under 40 GB/s; fix: close other GPU jobs"
    )
    assert cell(by_id["G5"], "sparkReadings") == "h2d_pinned = 38.1 GB/s"
    assert cell(by_id["G4"], "sparkReadings") == "temperature_max = 87.0 C; power_limit = [N/A]"
    assert cell(by_id["G3"], "sparkReadings") == "mem_available = 112.8 GiB"
    # G4's chart rides as an image extra (an SVG, embedded)
    images = [e for e in by_id["G4"]["extras"] if e["format_type"] == "image"]
    assert [e["name"] for e in images] == ["G4 thermals"]
    assert images[0]["content"].startswith("data:image/svg+xml;base64,")
    assert not any(e["format_type"] == "image" for e in by_id["G5"]["extras"])


def test_html_reads_as_the_terminal(forced: pytest.Pytester) -> None:
    """Issue 24 item 10: a WARN row reads "WARN" (an INFO row "INFO") while
    staying in pytest-html's "Passed" filter; the counts say ``2 Passed, 1 Warned``
    as the terminal says ``2 passed, 1 warned``; a skipped row's log says its
    reason, not pytest's ``(path, line, reason)`` tuple; the Check cell is the
    G-line on one line (cut by the browser, whole on hover)."""
    report = forced.path / "report.html"
    result = forced.runpytest(*ONLY, f"--html={report}", "--self-contained-html")
    result.stdout.fnmatch_lines(["*1 failed, 2 passed, 1 skipped*1 warned*"])
    by_id = {nodeid.rsplit("::", 1)[-1]: row for nodeid, row in html_tests(report).items()}
    # issue 34 item 9: the Result cell's text, not a CSS word over "Passed" (copy-paste and screen
    # readers got "Passed"); the row's outcome, which pytest-html's filters and sort read, stays Passed
    words = {cid: cell(by_id[cid], "result") for cid in by_id}
    assert words == {"G1": "Passed", "G3": "Failed", "G4": "INFO", "G5": "WARN", "G8": "Skipped"}, words
    assert "Passed" not in by_id["G5"]["resultsTableRow"][0] and "data-word" not in by_id["G5"]["resultsTableRow"][0]
    assert by_id["G5"]["result"] == "Passed"  # pytest-html's filters know only pytest's outcomes
    text = report.read_text(encoding="utf-8")
    assert "2 Passed, 1 Warned," in html.unescape(re.sub(r"\s+", " ", text))
    assert "content: attr(data-word)" not in text and "white-space: nowrap" in text
    log = html.unescape(by_id["G8"]["log"])
    assert log.startswith("Skipped: G8 SKIP: offline: GitHub not contacted") and "('" not in log.splitlines()[0]
    assert 'title="G5 WARN: pinned copy 38.1 GB/s under 40 GB/s; fix: close other GPU jobs"' in (
        by_id["G5"]["resultsTableRow"][2])


def test_html_summary_has_verdict_and_counts(forced: pytest.Pytester) -> None:
    report = forced.path / "report.html"
    forced.runpytest(*ONLY, f"--html={report}", "--self-contained-html")
    text = html.unescape(report.read_text(encoding="utf-8"))
    assert "spark preflight verdict: blocked (G3 failed; 1 PASS, 1 FAIL, 1 WARN, 1 SKIP, 1 INFO)" in text
    assert "checks: 1 PASS, 1 FAIL, 1 WARN, 1 SKIP, 1 INFO" in text
    assert "<li>⚠ G5 WARN: pinned copy 38.1 GB/s" in text
    assert "<li>✗ G3 FAIL: workload 500 GiB" in text


def allure_results(folder: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for path in folder.glob("*-result.json"):
        doc = json.loads(path.read_text(encoding="utf-8"))
        out[doc["name"]] = doc
    return out


def labels(doc: dict[str, Any], name: str) -> list[str]:
    return [lab["value"] for lab in doc.get("labels", []) if lab["name"] == name]


#: the forced run's checks: (status word, Allure status)
ALLURE_EXPECTED = {"G1": ("PASS", "passed"), "G3": ("FAIL", "failed"), "G4": ("INFO", "passed"),
                   "G5": ("WARN", "passed"), "G8": ("SKIP", "skipped")}  # fmt: skip


def assert_status_words(docs: dict[str, Any]) -> None:
    """Each check's Allure status, its status word as one tag (a tag filter finds
    every WARN) and as the ``spark_status`` label, and its G-line as the message."""
    assert sorted(docs) == sorted(ALLURE_EXPECTED)
    for cid, (word, allure_status) in ALLURE_EXPECTED.items():
        doc = docs[cid]
        assert doc["status"] == allure_status, cid
        assert labels(doc, "tag").count(word) == 1, cid
        assert labels(doc, "spark_status") == [word], cid
        assert doc["statusDetails"]["message"].startswith(f"{cid} {word}: "), cid


def test_allure_results_carry_status_word_line_and_readings(forced: pytest.Pytester) -> None:
    folder = forced.path / "allure"
    forced.runpytest(*ONLY, f"--alluredir={folder}")
    docs = allure_results(folder)
    assert_status_words(docs)
    # only the WARN carries the WARN tag
    assert [cid for cid, doc in docs.items() if "WARN" in labels(doc, "tag")] == ["G5"]
    assert docs["G5"]["statusDetails"]["message"] == (
        "G5 WARN: pinned copy 38.1 GB/s under 40 GB/s; fix: close other GPU jobs"
    )
    assert docs["G3"]["statusDetails"]["message"].startswith("G3 FAIL: workload 500 GiB")
    params = {p["name"]: p for p in docs["G5"]["parameters"]}
    assert params["h2d_pinned"]["value"] == "'38.1 GB/s'"
    assert params["h2d_pinned"]["excluded"] is True  # readings do not split the history
    g4_params = {p["name"]: p["value"] for p in docs["G4"]["parameters"]}
    assert g4_params["power_limit"] == "'[N/A]'"
    # G4's chart is attached, as SVG
    attachments = docs["G4"].get("attachments", [])
    svg = [a for a in attachments if a["name"] == "G4 thermals"]
    assert svg and svg[0]["type"] == "image/svg+xml"
    assert (folder / svg[0]["source"]).read_bytes().lstrip().startswith(b"<?xml")


def test_allure_environment_properties_hold_the_verdict(forced: pytest.Pytester) -> None:
    from pytest_dgx_spark.allure_report import read_environment

    folder = forced.path / "allure"
    folder.mkdir()
    (folder / "environment.properties").write_text("Browser=none\nspark.verdict=stale\n")
    forced.runpytest(*ONLY, f"--alluredir={folder}")
    props = read_environment(folder / "environment.properties")
    assert props["Browser"] == "none"  # others' keys are kept
    assert props["spark.verdict"] == "blocked"
    assert props["spark.verdict.line"].startswith("verdict: blocked (G3 failed;")
    assert props["spark.checks.WARN"] == "1" and props["spark.checks.FAIL"] == "1"
    assert props["spark.G5"] == "WARN"


def test_a_fifo_where_environment_properties_goes_never_blocks_the_run(forced: pytest.Pytester) -> None:
    """A sibling of issue 12.2/12.4: ``environment.properties`` as a FIFO
    blocked the end of the run forever (``write_text`` waits for a reader).
    Now the run ends, says so in one line, and leaves the FIFO as it was."""
    folder = forced.path / "allure"
    folder.mkdir()
    fifo = folder / "environment.properties"
    os.mkfifo(fifo)
    result = forced.runpytest_subprocess(*ONLY, f"--alluredir={folder}", timeout=60)
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # G3's FAIL, as without the FIFO
    result.stdout.fnmatch_lines(["allure environment.properties not written: *a FIFO, not a regular file*"])
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    assert list(folder.glob("*-result.json"))  # allure-pytest's own results were written


#: what ``pip install pytest-dgx-spark`` without the [html]/[allure] extras lacks
#: (pytest-metadata comes only with pytest-html)
REPORT_PACKAGES = ("pytest_html", "pytest_metadata", "allure")


def python_without(folder: Path, hidden: tuple[str, ...]) -> Path:
    """A virtual environment holding this interpreter's installed packages
    except ``hidden`` (module folders and their ``.dist-info``, matched by name
    prefix): for it those packages are simply not installed, not disabled."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(folder)
    python = folder / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")
    target = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                 capture_output=True, text=True, check=True).stdout.strip())
    ours = [Path(p) for p in dict.fromkeys([sysconfig.get_paths()["purelib"], *sys.path])
            if p and Path(p).name in ("site-packages", "dist-packages") and Path(p).is_dir()]
    for site_dir in ours:
        for entry in site_dir.iterdir():
            name = entry.name.lower().replace("-", "_")
            if not name.startswith(hidden) and not (target / entry.name).exists():
                (target / entry.name).symlink_to(entry)
    return python


def terminal(result: pytest.RunResult) -> list[str]:
    """The run's terminal output less what names installed plugins or times."""
    keep = [ln for ln in result.outlines if not ln.startswith(("plugins:", "rootdir:"))]
    return [re.sub(r" in \d+\.\d+s\b", " in Ns", ln) for ln in keep]


def junit(path: Path) -> str:
    """The JUnit XML with its clock readings blanked."""
    root = ET.parse(path).getroot()
    for el in root.iter():
        for attr in ("time", "timestamp", "hostname"):
            if attr in el.attrib:
                el.set(attr, "-")
        if el.tag == "property" and str(el.get("name", "")).endswith(("duration_s", ".seconds")):
            el.set("value", "-")
    return ET.tostring(root, encoding="unicode")


def test_without_pytest_html_and_allure_installed_nothing_changes(pytester: pytest.Pytester) -> None:
    """In an environment where pytest-html and allure-pytest are not installed
    the run's terminal output and JUnit XML are those of a run where they are
    (this interpreter's, with them if it has them): the plugin never needs them."""
    pytester.makeconftest(FORCING_CONFTEST)
    bare = python_without(pytester.path.parent / "no-report-plugins", REPORT_PACKAGES)
    for module in ("pytest_html", "allure", "allure_pytest", "pytest_metadata"):
        probe = subprocess.run([str(bare), "-c", f"import {module}"], capture_output=True, text=True)
        assert f"No module named '{module}'" in probe.stderr, module
    plugins = subprocess.run([str(bare), *PYTEST_ARGS, "--version", "--version"], capture_output=True, text=True)
    assert "dgx-spark" in plugins.stdout + plugins.stderr  # the plugin itself is there
    assert "html" not in plugins.stdout + plugins.stderr and "allure" not in plugins.stdout + plugins.stderr
    args = (*PYTEST_ARGS, *ONLY, "-rA", "--junitxml=junit.xml")  # one name: the terminal prints it
    absent = pytester.run(str(bare), *args)
    absent_xml = junit(pytester.path / "junit.xml")
    present = pytester.run(sys.executable, *args)
    assert absent.ret == present.ret == pytest.ExitCode.TESTS_FAILED
    assert terminal(absent) == terminal(present)
    assert absent_xml == junit(pytester.path / "junit.xml")
    assert any(ln.startswith("G5 WARN: pinned copy 38.1 GB/s") for ln in absent.outlines)


def test_spark_report_gets_the_g4_chart_beside_it(forced: pytest.Pytester) -> None:
    (forced.path / "out").mkdir()
    result = forced.runpytest(*ONLY, "--spark-report", "out/env-report.json")
    chart_file = forced.path / "out" / "env-report.thermal-g4.svg"
    result.stdout.fnmatch_lines([f"thermal chart written to {chart_file}"])
    root = ET.fromstring(chart_file.read_bytes())
    ids = {el.get("id") for el in root.iter()}
    assert "spark-reason-SwThermalSlowdown-gpu0-40" in ids


def test_without_matplotlib_one_line_says_why(forced: pytest.Pytester) -> None:
    forced.makeconftest(FORCING_CONFTEST + NO_MATPLOTLIB)
    report = forced.path / "report.html"
    result = forced.runpytest(*ONLY, "--spark-report", "env-report.json", f"--html={report}")
    result.stdout.fnmatch_lines(
        ["thermal chart not drawn: matplotlib is not installed (pip install 'pytest-dgx-spark[chart]')"]
    )
    assert not (forced.path / "env-report.thermal-g4.svg").exists()
    g4 = next(row for nodeid, row in html_tests(report).items() if nodeid.endswith("G4"))
    assert [e["format_type"] for e in g4["extras"]] == ["html"]  # one line instead of the picture


def test_html_rows_under_xdist(forced: pytest.Pytester) -> None:
    """The status, G-line and chart are made on the worker and ride to the controller."""
    pytest.importorskip("xdist")
    report = forced.path / "report.html"
    forced.runpytest_subprocess(*ONLY, "-n", "2", f"--html={report}", "--self-contained-html")
    by_id = {nodeid.rsplit("::", 1)[-1]: row for nodeid, row in html_tests(report).items()}
    assert cell(by_id["G5"], "sparkStatus") == "⚠\u00a0WARN"
    assert cell(by_id["G3"], "sparkCheck").startswith("G3 FAIL: workload 500 GiB")
    assert [e["name"] for e in by_id["G4"]["extras"] if e["format_type"] == "image"] == ["G4 thermals"]


def test_no_report_asked_no_chart_code_loaded(forced: pytest.Pytester) -> None:
    """With pytest-html and allure-pytest installed but neither --html, --alluredir
    nor --spark-report given, no chart is drawn and matplotlib is never imported."""
    forced.makeconftest(
        FORCING_CONFTEST
        + "\ndef pytest_terminal_summary(terminalreporter):\n"
        + "    import sys\n"
        + "    terminalreporter.write_line(f\"LOADED {sorted(m for m in ('matplotlib', 'pytest_dgx_spark.chart') "
        + "if m in sys.modules)}\")\n"
        + "    has = terminalreporter.config.pluginmanager.hasplugin\n"
        + "    terminalreporter.write_line(f\"INSTALLED {has('html')} {has('allure_pytest')}\")\n"
    )
    result = forced.runpytest_subprocess(*REPORT_PLUGINS, *ONLY)  # loaded (autoload is off in tests), unused
    result.stdout.fnmatch_lines(["LOADED []", "INSTALLED True True"])


def test_real_g4_chart_once_g4_is_on_the_contract(pytester: pytest.Pytester, matplotlib_loaded: None) -> None:
    """G4 on the gather/evaluate contract keeps its sample in the run's facts;
    the chart reads it from there (GB10 double, 1 s sample)."""
    pytester.mkdir("out")
    result = pytester.runpytest(
        "-p", "no:randomly", "--spark-preflight", "--spark-only", "G4", "--spark-report", "out/env-report.json"
    )
    result.stdout.fnmatch_lines(["thermal chart written to *env-report.thermal-g4.svg"])
    ET.fromstring((pytester.path / "out" / "env-report.thermal-g4.svg").read_bytes())


def test_allure_results_under_xdist(forced: pytest.Pytester) -> None:
    """Each check's tag, label, status message and parameters are set on the
    worker that ran it; the controller writes the verdict (it has no Allure test
    of its own, and once crashed trying to tag one)."""
    pytest.importorskip("xdist")
    from pytest_dgx_spark.allure_report import read_environment

    folder = forced.path / "allure"
    result = forced.runpytest_subprocess(*ONLY, "-n", "2", f"--alluredir={folder}")
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    docs = allure_results(folder)
    assert_status_words(docs)
    assert {p["name"]: p["value"] for p in docs["G5"]["parameters"]} == {"h2d_pinned": "'38.1 GB/s'"}
    assert [a["name"] for a in docs["G4"].get("attachments", [])].count("G4 thermals") == 1
    props = read_environment(folder / "environment.properties")
    assert props["spark.verdict"] == "blocked"
    assert props["spark.verdict.line"].startswith("verdict: blocked (G3 failed; 1 PASS, 1 FAIL, 1 WARN, 1 SKIP, 1 INFO)")
    assert [props[f"spark.{c}"] for c in ("G1", "G3", "G4", "G5", "G8")] == ["PASS", "FAIL", "INFO", "WARN", "SKIP"]
    assert props["spark.checks.FAIL"] == "1" and props["spark.checks.WARN"] == "1"


#: a real run of five checks on the GB10 double (conftest's ``spark_env``), one of each status
REAL = (
    "--spark-preflight", "-p", "no:randomly", "--spark-only", "G3,G4,G5,G6,G8",
    "--spark-workload-gb", "500", "--spark-planned-bandwidth", "273", "--spark-offline",
    "--spark-thermal-seconds", "0.3",
)  # fmt: skip
REAL_STATUSES = {"G3": "FAIL", "G4": "INFO", "G5": "WARN", "G6": "PASS", "G8": "SKIP"}


def test_a_real_run_says_the_same_in_html_allure_and_env_report(pytester: pytest.Pytester) -> None:
    """No result forced: G3 FAILs (500 GiB on a 121.7 GiB Spark), G4 samples the
    NVML double (INFO), G5 WARNs (273 GB/s planned), G6 finds no GPU process
    (PASS), G8 is offline (SKIP). Each report shows each check's word, its
    G-line as env-report.json has it, and its readings; under xdist too, and
    with ``--reruns 2`` the FAIL runs once."""
    pytest.importorskip("pytest_html")
    pytest.importorskip("allure_pytest")
    for extra in ((), ("-n", "2")):
        if extra and importlib.util.find_spec("xdist") is None:
            continue
        folder = pytester.mkdir(f"run{len(extra)}")
        outputs = (f"--spark-report={folder / 'env-report.json'}", f"--html={folder / 'r.html'}")
        reruns = ("--reruns", "2") if importlib.util.find_spec("pytest_rerunfailures") else ()
        result = pytester.runpytest_subprocess(
            *REAL, *extra, *reruns, *outputs, f"--alluredir={folder / 'allure'}"
        )
        assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
        outcomes = result.parseoutcomes()
        assert outcomes["failed"] == 1 and "rerun" not in outcomes, outcomes  # a FAIL is not flaky
        doc = json.loads((folder / "env-report.json").read_text())
        lines = {line.split(" ", 1)[0]: line for line in doc["lines"]}
        rows = {nodeid.rsplit("::", 1)[-1]: row for nodeid, row in html_tests(folder / "r.html").items()}
        docs = allure_results(folder / "allure")
        assert sorted(rows) == sorted(docs) == sorted(REAL_STATUSES), (rows.keys(), docs.keys())
        for cid, word in REAL_STATUSES.items():
            assert lines[cid].startswith(f"{cid} {word}: "), lines[cid]
            assert cell(rows[cid], "sparkStatus").endswith(f"\u00a0{word}"), cid
            assert cell(rows[cid], "sparkCheck") == lines[cid]
            first = next(iter(doc["readings"].get(cid) or {}), "")  # G8 offline reads nothing
            assert cell(rows[cid], "sparkReadings").startswith(f"{first} = " if first else ""), cid
            assert bool(cell(rows[cid], "sparkReadings")) is bool(first), cid
            assert labels(docs[cid], "tag").count(word) == 1 and labels(docs[cid], "spark_status") == [word]
            assert docs[cid]["statusDetails"]["message"] == lines[cid]
            if first:
                assert first in {p["name"] for p in docs[cid]["parameters"]}, cid
        assert [c for c, d in docs.items() if "WARN" in labels(d, "tag")] == ["G5"]  # one filter
        text = html.unescape((folder / "r.html").read_text(encoding="utf-8"))
        assert "spark preflight verdict: blocked (G3 failed; 1 PASS, 1 FAIL, 1 WARN, 1 SKIP, 1 INFO)" in text
        assert "checks: 1 PASS, 1 FAIL, 1 WARN, 1 SKIP, 1 INFO" in text
        from pytest_dgx_spark.allure_report import read_environment

        props = read_environment(folder / "allure" / "environment.properties")
        assert props["spark.verdict"] == doc["verdict"] == "blocked"
        assert (folder / "env-report.thermal-g4.svg").is_file() == MATPLOTLIB


def test_each_rank_writes_its_own_html_and_allure_results(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under torchrun every rank gets the same --html and --alluredir: rank 1
    writes ``r.rank1.html`` and ``allure.rank1/`` (was: rank 1's html replaced
    rank 0's, and both ranks' results and verdicts mixed in one Allure folder)."""
    pytest.importorskip("pytest_html")
    pytest.importorskip("allure_pytest")
    from pytest_dgx_spark.allure_report import read_environment

    args = ("--spark-preflight", "-p", "no:randomly", "--spark-only", "G3", "--html=r.html", "--alluredir=allure")
    for rank in ("1", "0"):
        monkeypatch.setenv("RANK", rank)
        monkeypatch.setenv("WORLD_SIZE", "2")
        pytester.runpytest_subprocess(*args, "--spark-workload-gb", "500" if rank == "1" else "1")
    assert (pytester.path / "r.html").is_file() and (pytester.path / "r.rank1.html").is_file()
    assert "G3 FAIL: " in html.unescape((pytester.path / "r.rank1.html").read_text(encoding="utf-8"))
    assert "G3 FAIL: " not in html.unescape((pytester.path / "r.html").read_text(encoding="utf-8"))
    assert [d["status"] for d in allure_results(pytester.path / "allure.rank1").values()] == ["failed"]
    assert [d["status"] for d in allure_results(pytester.path / "allure").values()] == ["passed"]
    assert read_environment(pytester.path / "allure" / "environment.properties")["spark.verdict"] == "ready"
    assert read_environment(pytester.path / "allure.rank1" / "environment.properties")["spark.verdict"] == "blocked"
