"""What a real NVIDIA H200 run produced (driver 580.159, CUDA 13.0, torch
2.11.0+cu130), kept as fixtures: the plugin's own JUnit XML and env-report,
the CLI's lines, and real ``cuobjdump --list-elf`` output (recorded with
benchmarks/gpu_verify.sh; see tests/data/README.md)."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_spark.checks import g07_nvfp4 as g7

from conftest import DATA, H200

GLINE = re.compile(r"^G(?:[1-9]|10) (?:PASS|FAIL|WARN|SKIP|INFO): \S.*$")


def test_real_junit_is_schema_valid_and_complete() -> None:
    xmlschema = pytest.importorskip("xmlschema")
    xmlschema.XMLSchema(str(DATA / "junit-xunit2.xsd")).validate(str(H200 / "preflight_junit.xml"))
    root = ET.parse(H200 / "preflight_junit.xml").getroot()
    props = {p.get("name"): p.get("value") for p in root.find("testsuite").findall("properties/property")}
    assert props["spark.host.gpu"] == "NVIDIA H200"
    assert props["spark.host.cuda_driver"] == "13.0"
    assert props["spark.G1.status"] == "PASS" and props["spark.G1.torch_version"] == "2.11.0+cu130"
    assert props["spark.G7.status"] == "SKIP"
    names = [c.get("name") for c in root.iter("testcase")]
    assert names == [f"G{n}" for n in range(1, 11)]
    for case in root.iter("testcase"):
        outs = [ln for e in case.findall("system-out") for ln in (e.text or "").splitlines()]
        assert any(GLINE.match(ln) and ln.startswith(case.get("name") + " ") for ln in outs)


def test_real_env_report_has_the_seed_schema() -> None:
    doc = json.loads((H200 / "preflight_env_report.json").read_text())
    assert doc["platform"] == "other-nvidia"
    assert list(doc["checks"]) == [f"G{n}" for n in range(1, 11)]
    assert doc["verdict"] == "ready-with-warnings"
    assert isinstance(doc["headroom_gb"], float) and doc["headroom_gb"] > 100
    assert doc["schema"] == "pytest_spark/1"


def test_real_cli_lines_are_in_the_fixed_format() -> None:
    lines = (H200 / "preflight_cli.txt").read_text().splitlines()
    g_lines = [ln for ln in lines if ln[:1] == "G" and ln[1:2].isdigit()]
    assert len(g_lines) == 10 and all(GLINE.match(ln) for ln in g_lines)
    assert g_lines[0].startswith("G1 PASS: torch 2.11.0+cu130 (CUDA 13.0), driver supports CUDA 13.0")
    assert g_lines[6].startswith("G7 SKIP: not SM121: NVIDIA H200 has capability (9, 0)")


def test_real_cuobjdump_listing_parses() -> None:
    text = (H200 / "cuobjdump_list_elf.txt").read_text()
    listing = text.split("parsed targets")[0]
    assert sorted(set(g7.parse_cuobjdump(listing))) == ["sm_120", "sm_120a", "sm_121a", "sm_90a"]


def test_recorded_files_are_described() -> None:
    readme = (Path(__file__).parent / "data" / "README.md").read_text()
    for name in (
        "preflight_junit.xml",
        "preflight_env_report.json",
        "preflight_cli.txt",
        "cuobjdump_list_elf.txt",
        "nvml_sample_idle.json",
        "nvml_sample_load.json",
        "g1_fail_demo_cu12_module.txt",
    ):
        assert name in readme
