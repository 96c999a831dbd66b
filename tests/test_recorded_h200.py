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

from pytest_dgx_spark import catalog
from pytest_dgx_spark.checks.g07_nvfp4 import check as g7

from conftest import DATA, H200

GLINE = re.compile(rf"^(?:{'|'.join(catalog.IDS)}) (?:PASS|FAIL|WARN|SKIP|INFO): \S.*$")

#: the checks of the release that made the recording (G1..G10), in the catalog's order
RECORDED = list(catalog.IDS[: catalog.IDS.index("G10") + 1])


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
    assert names == RECORDED
    for case in root.iter("testcase"):
        outs = [ln for e in case.findall("system-out") for ln in (e.text or "").splitlines()]
        assert any(GLINE.match(ln) and ln.startswith(case.get("name") + " ") for ln in outs)


def test_real_env_report_has_the_seed_schema() -> None:
    doc = json.loads((H200 / "preflight_env_report.json").read_text())
    assert doc["platform"] == "other-nvidia"
    assert list(doc["checks"]) == RECORDED
    assert doc["verdict"] == "ready-with-warnings"
    assert isinstance(doc["headroom_gb"], float) and doc["headroom_gb"] > 100
    assert doc["schema"] == "pytest_spark/1"


def test_real_cli_lines_are_in_the_fixed_format() -> None:
    """The default lines are short (at most 120 characters) and in the fixed
    format; ``--json`` of the same session has the whole lines."""
    lines = (H200 / "preflight_cli.txt").read_text().splitlines()
    g_lines = [ln for ln in lines if ln[:1] == "G" and ln[1:2].isdigit()]
    assert len(g_lines) == len(RECORDED) and all(GLINE.match(ln) and len(ln) <= 120 for ln in g_lines)
    assert g_lines[0].startswith("G1 PASS: torch 2.11.0+cu130 on driver CUDA 13.0")
    full = json.loads((H200 / "preflight_cli.json").read_text())["lines"]
    assert full[0].startswith("G1 PASS: torch 2.11.0+cu130 (CUDA 13.0), driver supports CUDA 13.0")
    assert full[6].startswith("G7 SKIP: not SM121: NVIDIA H200 has capability (9, 0)")
    assert [ln.split(":")[0] for ln in full] == [ln.split(":")[0] for ln in g_lines]


def test_a_healthy_h200_skips_only_what_could_not_be_checked() -> None:
    """Issue 8's rule on real hardware: a SKIP means "could not check". The H200
    has no SM121 (G7) and the machine no network (G8: DNS failed); G5 without a
    plan is INFO with its budget and G10 on one node is PASS (0.1.0 SKIPped both)."""
    doc = json.loads((H200 / "preflight_env_report.json").read_text())
    skipped = {cid for cid, value in doc["checks"].items() if value.startswith("skip")}
    assert skipped == {"G7", "G8"}
    assert doc["checks"]["G8"].startswith("skip: offline: cannot resolve api.github.com")
    assert doc["checks"]["G5"].startswith("info: 3370 GB/s budget")
    assert doc["checks"]["G10"] == "pass"  # PASS is the seed's bare "pass"; its text is in lines
    assert doc["lines"][9].startswith("G10 PASS: single node:")


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
