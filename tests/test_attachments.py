"""Attachments, not special cases (issue 31 item 5): a result carries what the reports can show (G4's
sample series, G10's node table) and every report renders it by kind, never by check id."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_dgx_spark import attachments, catalog, chart, report
from pytest_dgx_spark.checks.kit import Params
from pytest_dgx_spark.engine import check_module
from pytest_dgx_spark.model import Attachment, Reading, Result, Status

from conftest import H200

g4, g10 = check_module("G4"), check_module("G10")
PACKAGE = Path(__file__).resolve().parent.parent / "pytest_dgx_spark"
#: the modules that render results: none may decide anything by a check's id
REPORT_MODULES = ("report.py", "html_report.py", "allure_report.py", "chart.py", "attachments.py")
#: what is still read by name: the seed's ``headroom_gb`` is G3's MemAvailable reading (not an attachment:
#: G3's json-report entry and every forced G3 result would change with it)
STILL_NAMED = {"report.py": ["G3"]}


def h200_g4_facts() -> dict[str, Any]:
    """G4's facts (through their JSON round trip) of the recorded H200 load series (101 samples), with
    counters read before and after it."""
    doc = json.loads((H200 / "nvml_sample_load.json").read_text())
    dev = doc["nvml"]["devices"][0]
    before = {"sw_power_cap": 0, "sw_thermal_slowdown": 0}
    after = {"sw_power_cap": 10_257_500, "sw_thermal_slowdown": 3_000_000}
    facts = g4.Facts(seconds=10.0, duration_s=doc["sample"]["duration_s"], samples=doc["sample"]["samples"],
                     devices=[{"index": 0, "name": dev["name"], "power_limit_mw": dev["power_limit_mw"],
                               "max_clock_sm_mhz": dev["max_clock_sm_mhz"], "errors": {}}],
                     counters_before=[{"index": 0, "us": before, "errors": {}}],
                     counters_after=[{"index": 0, "us": after, "errors": {}}], counters_source="nvml")
    return json.loads(json.dumps(facts.to_dict()))


def fp(rank: int, **changes: Any) -> dict[str, Any]:
    """One rank's fingerprint as the fleet child hands it over (two Sparks alike)."""
    return {"rank": str(rank), "hostname": f"spark-{'ab'[rank]}", "gpu": "NVIDIA GB10", "capability": "12.1",
            "driver": "580.95.05", "cuda_driver": "13.0", "python": "3.12.3", "torch": "2.11.0+cu130",
            "torch_cuda": "13.0", "nccl_torch": "2.27.7", "mtu": 9000, "mem_available_kib": 115_000_000,
            "mem_free_kib": 100_000_000, "statuses": {"G1": "PASS", "G3": "INFO"}, **changes}


def round_trip(r: Result) -> Result:
    return Result.from_dict(json.loads(json.dumps(r.to_dict())))


def test_a_result_without_attachments_serialises_as_before() -> None:
    assert "attachments" not in Result("G1", Status.PASS, "ok", readings=[Reading("x", 1)]).to_dict()


def test_attachments_survive_the_json_round_trip() -> None:
    table = Attachment("nodes", "nodes", {"fingerprints": [{"rank": "0"}, {"rank": "1"}]})
    series = Attachment("chart", "a chart", {"samples": [{"t": 0.0, "gpus": []}], "names": {"0": "GPU"}},
                        "c-1")
    back = round_trip(Result("G7", Status.WARN, "w", "f", attachments=[series, table]))
    assert back.attachments == [series, table]
    assert back.attached("nodes") == [table] and back.attached("chart") == [series]
    assert back.attached("picture") == []


def test_g4_attaches_its_series_as_the_chart_it_drew_from_its_facts() -> None:
    facts = h200_g4_facts()
    result = round_trip(g4.evaluate(g4.Facts.from_dict(facts), Params(profile="generic")))
    (found,) = result.attached(attachments.CHART)
    assert (found.title, found.name) == ("G4 thermals", "thermal-g4")
    drawn = chart.from_attachment(found)
    assert drawn is not None and len(drawn.traces[0].t) == len(facts["samples"])
    expected = chart.from_facts(facts, title="G4 thermal sample")
    assert expected is not None and drawn.to_dict() == expected.to_dict()


def test_one_snapshot_attaches_nothing_to_draw() -> None:
    facts = h200_g4_facts()
    facts["samples"] = facts["samples"][:1]
    assert g4.evaluate(g4.Facts.from_dict(facts), Params(profile="generic")).attachments == []


def g10_result(fleet: dict[str, Any] | None) -> Result:
    env = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "spark-a",
           "MASTER_PORT": "29500"}
    facts = g10.Facts.from_dict({"env": env, "root": "/srv/proj", "fleet": fleet})  # as a capture holds them
    return round_trip(g10.evaluate(facts, Params(profile="gb10")))


def test_g10_attaches_the_fingerprints_and_the_env_report_and_junit_read_them() -> None:
    fps = [fp(0), fp(1, hostname="spark-b2")]
    r = g10_result({"rank": 0, "world_size": 2, "fingerprints": fps})
    (table,) = r.attached(attachments.NODES)
    shown = table.data["fingerprints"]  # each rank's fingerprint record (the keys it did not read: null)
    assert list(table.data) == ["fingerprints"] and [{k: f[k] for k in given} for f, given in zip(shown, fps, strict=True)] == fps
    section = report.nodes_section([Result("G1", Status.PASS, "ok"), r])
    assert section["nodes"] == {"0": shown[0], "1": shown[1]}
    assert section["cross_node"] == {"status": r.status.value, "line": r.line(), "details": r.details}
    props = dict(report.node_properties(report.fleet_nodes([r])))
    assert props["spark.node1.hostname"] == "spark-b2" and props["spark.node0.G3"] == "INFO"


def test_no_fingerprints_no_node_table() -> None:
    r = g10_result({"rank": 0, "world_size": 2, "error": "rank 1 never joined", "missing": [1]})
    assert r.attachments == [] and report.nodes_section([r]) == {} and report.fleet_nodes([r]) == []


def test_a_chart_is_written_beside_the_report_whichever_check_attached_it(tmp_path: Path) -> None:
    """By kind, not by check: a chart on another check's result goes beside the report under its name."""
    series = g4.evaluate(g4.Facts.from_dict(h200_g4_facts()), Params(profile="generic")).attachments
    other = Result("G7", Status.INFO, "i", attachments=[Attachment("chart", "G7 t", series[0].data, "g7-t")])
    target = tmp_path / "env-report.json"
    (note,) = report.charts_beside(target, [Result("G1", Status.PASS, "ok"), other])
    picture = tmp_path / "env-report.g7-t.svg"
    if chart.draw(chart.from_attachment(other.attachments[0]))[0] is None:
        assert note.startswith("thermal chart not drawn: ") and not picture.exists()
    else:
        assert note == f"thermal chart written to {picture}" and picture.read_bytes().startswith(b"<?xml")


class Run:
    """Stands for one run's preflight (what the reports' cache is kept by)."""


def test_a_chart_is_drawn_once_for_html_and_allure(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[object] = []
    monkeypatch.setattr(chart, "draw", lambda data, fmt="svg": calls.append(data) or (b"<svg/>", None))
    result = g4.evaluate(g4.Facts.from_dict(h200_g4_facts()), Params(profile="generic"))
    copy = round_trip(result).attachments[0]  # Allure draws from the report's copy of the result
    run, other = Run(), Run()
    assert chart.drawn(result.attachments[0], run) == chart.drawn(copy, run) == (b"<svg/>", None)
    assert len(calls) == 1
    chart.drawn(copy, other)  # another run (in-process pytester) draws its own: matplotlib may differ
    assert len(calls) == 2


def _code_strings(path: Path) -> list[str]:
    """Every string constant of a module that is not a docstring."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}  # fmt: skip
    return [n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings]


@pytest.mark.parametrize("name", REPORT_MODULES)
def test_no_report_module_names_a_check(name: str) -> None:
    import re

    ids = re.compile(r"\b(" + "|".join(catalog.IDS) + r")\b")
    assert [s for s in _code_strings(PACKAGE / name) if ids.search(s)] == STILL_NAMED.get(name, [])
