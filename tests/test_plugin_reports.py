"""JUnit XML, pytest-json-report and env-report.json, with and without xdist."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_dgx_spark import catalog

from conftest import DATA

xmlschema = pytest.importorskip("xmlschema")

XSD = DATA / "junit-xunit2.xsd"
IDS = list(catalog.IDS)
#: G3 WARN (100 GiB fits only after dropping cache); the rest as the double makes them
ARGS = ("--spark-workload-gb", "100", "-p", "no:randomly")


@pytest.fixture(autouse=True)
def _gb10(spark_env):
    return spark_env


def junit(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, ET.Element]:
    result = pytester.runpytest("--spark-preflight", "--junitxml=r.xml", *ARGS, *args)
    path = pytester.path / "r.xml"
    return result, ET.parse(path).getroot()


def suite_props(root: ET.Element) -> dict[str, str]:
    suite = root.find("testsuite")
    assert suite is not None
    return {p.get("name"): p.get("value") for p in suite.findall("properties/property")}


def cases(root: ET.Element) -> dict[str, ET.Element]:
    return {c.get("name"): c for c in root.iter("testcase")}


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_default_xunit2_is_schema_valid_and_carries_suite_properties(
    pytester: pytest.Pytester, xdist: list[str]
) -> None:
    result, root = junit(pytester, *xdist)
    assert result.ret == 0
    xmlschema.XMLSchema(str(XSD)).validate(str(pytester.path / "r.xml"))
    props = suite_props(root)
    assert props["spark.schema"] == "pytest_spark/1"
    assert props["spark.verdict"] in ("ready", "ready-with-warnings", "blocked")
    assert props["spark.host.gpu"] == "NVIDIA GB10"
    assert props["spark.host.driver"] == "580.173.02"
    assert props["spark.host.cuda_driver"] == "13.0"
    assert props["spark.G3.status"] == "WARN"
    assert props["spark.G3.mem_available"] == "112.8 GiB"
    assert props["spark.G3.gpu0_memory_free"] == "[N/A]"
    assert props["spark.G3.summary"].startswith("workload 100 GiB fits MemAvailable")
    for cid in IDS:
        assert props[f"spark.{cid}.status"] in ("PASS", "FAIL", "WARN", "SKIP", "INFO")
        if props[f"spark.{cid}.status"] in ("FAIL", "WARN"):  # every FAIL/WARN carries its finding codes
            assert props[f"spark.{cid}.codes"], cid
    assert props["spark.G3.codes"] == "G3.needs-cache-drop"
    # xunit2: no per-testcase properties (they would break the schema)
    for case in root.iter("testcase"):
        assert case.find("properties") is None


def test_failure_and_skip_messages_are_the_g_lines(pytester: pytest.Pytester, spark_env) -> None:
    result, root = junit(pytester, "--spark-workload-gb", "500", "--spark-offline")
    assert result.ret == 1
    g3 = cases(root)["G3"]
    failure = g3.find("failure")
    assert failure is not None
    assert failure.get("message").startswith("G3 FAIL: workload 500 GiB > MemTotal 121.7 GiB")
    assert "; fix: " in failure.get("message")
    skipped = [c.find("skipped") for c in root.iter("testcase") if c.find("skipped") is not None]
    assert skipped, "the double leaves some checks with nothing to look at"
    for element in skipped:
        assert element.get("message").split(" ")[1] == "SKIP:"
    classnames = {c.get("classname") for c in root.iter("testcase")}
    assert classnames == {"spark_preflight"}


def test_system_out_holds_the_g_line_and_readings(pytester: pytest.Pytester) -> None:
    _, root = junit(pytester, "-o", "junit_logging=system-out")
    for name, case in cases(root).items():
        outs = [e.text or "" for e in case.findall("system-out")]
        lines = [ln for text in outs for ln in text.splitlines()]
        assert any(ln.startswith(f"{name} ") for ln in lines), name
    g3_out = cases(root)["G3"].find("system-out").text
    assert "mem_available = 112.8 GiB" in g3_out


@pytest.mark.parametrize("family", ["xunit1", "legacy"])
def test_xunit1_and_legacy_carry_per_testcase_properties(pytester: pytest.Pytester, family: str) -> None:
    result, root = junit(pytester, "-o", f"junit_family={family}")
    assert result.ret == 0
    g3 = cases(root)["G3"]
    props = {p.get("name"): p.get("value") for p in g3.findall("properties/property")}
    assert props["spark.id"] == "G3"
    assert props["spark.status"] == "WARN"
    assert props["spark.summary"].startswith("workload 100 GiB")
    assert props["spark.reading.mem_free"] == "96.0 GiB"
    assert props["spark.codes"] == "G3.needs-cache-drop"
    assert suite_props(root)["spark.G3.status"] == "WARN"


def test_junit_emits_no_warning(pytester: pytest.Pytester) -> None:
    # pytest-benchmark (on the GPU image) warns under xdist by itself: not ours to judge
    result = pytester.runpytest(
        "--spark-preflight", "--junitxml=r.xml", "-W", "error", "-p", "no:benchmark", *ARGS
    )
    assert result.ret == 0
    assert "warnings summary" not in result.stdout.str()


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_json_report_metadata_and_run_block(pytester: pytest.Pytester, xdist: list[str]) -> None:
    pytest.importorskip("pytest_jsonreport")
    result = pytester.runpytest(
        "--spark-preflight", "--json-report", "--json-report-file=r.json", *ARGS, *xdist
    )
    assert result.ret == 0
    data = json.loads((pytester.path / "r.json").read_text())
    by_id = {t["nodeid"].split("::")[-1]: t for t in data["tests"]}
    assert sorted(by_id, key=lambda c: int(c[1:])) == IDS
    assert by_id["G3"]["outcome"] == "warned"
    assert by_id["G3"]["metadata"]["spark"]["status"] == "WARN"
    assert by_id["G3"]["metadata"]["spark"]["readings"]["mem_free"] == {"value": 96.0, "unit": "GiB"}
    assert by_id["G3"]["metadata"]["spark"]["codes"] == ["G3.needs-cache-drop"]
    assert data["summary"]["warned"] >= 1
    block = data["spark_preflight"]
    assert block["schema"] == "pytest_spark/1"
    assert [r["id"] for r in block["results"]] == IDS
    assert next(r for r in block["results"] if r["id"] == "G3")["codes"] == ["G3.needs-cache-drop"]
    assert block["host"]["gpu"] == "NVIDIA GB10"


def test_env_report_in_the_seed_schema(pytester: pytest.Pytester) -> None:
    (pytester.path / "out").mkdir()
    result = pytester.runpytest("--spark-preflight", "--spark-report", "out/env-report.json", *ARGS)
    assert result.ret == 0
    doc = json.loads((pytester.path / "out" / "env-report.json").read_text())
    assert doc["platform"] == "dgx-spark"
    assert list(doc["checks"]) == IDS
    assert doc["checks"]["G3"].startswith("warn: workload 100 GiB fits MemAvailable")
    for value in doc["checks"].values():
        assert value in ("pass", "fail") or value.split(":")[0] in ("warn", "skip", "info")
    assert doc["headroom_gb"] == 112.8
    assert doc["verdict"] == "ready-with-warnings"
    assert doc["schema"] == "pytest_spark/1"
    assert doc["readings"]["G3"]["mem_free"] == {"value": 96.0, "unit": "GiB"}
    assert doc["codes"]["G3"] == ["G3.needs-cache-drop"]
    loud = [cid for cid, value in doc["checks"].items() if value.split(":")[0] in ("warn", "fail")]
    assert loud and all(doc["codes"].get(cid) for cid in loud)  # every FAIL/WARN carries its codes
    assert set(doc["timings"]) == set(IDS)
    assert doc["host"]["gb10"] is True
    result.stdout.fnmatch_lines(["env report written to *env-report.json"])


def test_env_report_blocked_on_fail(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(
        "--spark-preflight", "--spark-report", "env.json", "--spark-workload-gb", "500", "-p", "no:randomly"
    )
    assert result.ret == 1
    doc = json.loads(Path(pytester.path / "env.json").read_text())
    assert doc["verdict"] == "blocked"
    assert doc["checks"]["G3"].startswith("fail: workload 500 GiB")
    assert doc["codes"]["G3"] == ["G3.exceeds-total"]
