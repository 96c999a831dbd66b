"""``pytest --spark-preflight --spark-diagnose=LOG`` on the GB10 double: the ten items
carry the logs' evidence as their failure text, and every report the diagnosis."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

POSTED = json.loads((Path(__file__).parent / "data" / "diagnose" / "posted_lines.json").read_text(encoding="utf-8"))
FILLER = (Path(__file__).parent / "data" / "diagnose" / "healthy_nccl_init.txt").read_text(encoding="utf-8")
ARGS = ("-p", "no:randomly", "--spark-offline")


@pytest.fixture(autouse=True)
def _gb10(spark_env):
    return spark_env


def plant(pytester: pytest.Pytester, name: str, line: str) -> Path:
    path = pytester.path / name
    path.write_text(FILLER + line + "\n" + FILLER, encoding="utf-8")
    return path


def test_the_failing_item_quotes_the_log_and_every_report_has_the_diagnosis(pytester: pytest.Pytester) -> None:
    plant(pytester, "train.log", POSTED["failure"]["S1"])
    result = pytester.runpytest("--spark-preflight", "--spark-diagnose=train.log", "--junitxml=r.xml",
                                "--spark-report=env.json", "--json-report", "--json-report-file=r.json", *ARGS)  # fmt: skip
    assert result.ret == 1
    result.stdout.fnmatch_lines([
        "*_ G1 CUDA 12/13 ABI _*",
        'G1 FAIL: train.log:61: "ImportError: libnvrtc.so.12: cannot open shared object file*" — a CUDA 12 wheel '
        "on a CUDA 13 stack — the first failure; fix: install the cu130 build*",
        "  this machine now: PASS: *",
        "diagnosis: G1 (first failure at train.log:61)",
    ])  # fmt: skip
    suite = ET.parse(pytester.path / "r.xml").getroot().find("testsuite")
    assert suite is not None
    props = {p.get("name"): p.get("value") for p in suite.findall("properties/property")}
    assert props["spark.diagnosis"] == "diagnosis: G1 (first failure at train.log:61)"
    assert props["spark.diagnosis.gotcha"] == "G1"
    assert json.loads((pytester.path / "env.json").read_text())["diagnosis"]["at"] == "train.log:61"
    block = json.loads((pytester.path / "r.json").read_text())["spark_preflight"]
    assert block["diagnosis"]["signature"] == "S1"


def test_the_ini_twin_reads_the_logs_and_healthy_lines_leave_the_run_green(pytester: pytest.Pytester) -> None:
    plant(pytester, "rank0.log", POSTED["healthy"]["S5"])
    pytester.makeini("[pytest]\nspark_preflight_diagnose =\n    rank0.log\n")
    result = pytester.runpytest("--spark-preflight", *ARGS)
    assert result.ret == 0
    result.stdout.fnmatch_lines(["diagnosis: unknown — no known failure in 121 lines (1 file)"])


def test_a_bad_signature_file_is_a_usage_error_in_one_line(pytester: pytest.Pytester) -> None:
    plant(pytester, "train.log", "x")
    (pytester.path / "sig.json").write_text('{"signatures": [{"id": "U1", "pattern": "(", "gotcha": "G1", "fix": "x"}]}')
    result = pytester.runpytest("--spark-preflight", "--spark-diagnose=train.log", "--spark-signatures=sig.json", *ARGS)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [ln for ln in result.stderr.lines if "ERROR" in ln]
    assert len(errors) == 1 and "--spark-signatures: signature file sig.json: signatures[0] (U1): pattern is not a " \
        "regular expression" in errors[0]
