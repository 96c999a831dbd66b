"""Typed facts (issue 31 item 2): one converter from JSON to the dataclasses a check declares, which
refuses data of another shape by naming the field, so a check reads attributes, not ``.get`` chains."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar, Literal, TypedDict

import pytest

from pytest_dgx_spark.checks.kit import FactsBase
from pytest_dgx_spark.checks.record import FactsError, Record


@dataclass
class Device(Record):
    index: int = 0
    name: str = ""
    temperature_c: float | None = None
    clocks: dict[str, int] = field(default_factory=dict)


class Loose(TypedDict, total=False):
    anything: str


@dataclass
class Facts(FactsBase):
    devices: list[Device]
    mode: Literal["live", "replay"] = "live"
    tags: tuple[str, ...] = ()
    extra: Loose = field(default_factory=lambda: Loose())
    NOT_CAPTURED: ClassVar[dict[str, object]] = {"tags": ["old"]}


def test_nested_records_lists_tuples_and_nan_come_back_as_their_types() -> None:
    facts = Facts([Device(0, "GB10", math.nan, {"sm": 2418})], "replay", ("a",))
    back = Facts.from_dict(facts.to_dict())
    assert isinstance(back.devices[0], Device) and back.devices[0].clocks == {"sm": 2418}
    assert math.isnan(back.devices[0].temperature_c or 0.0) and back.tags == ("a",) and back.mode == "replay"


def test_a_nested_field_absent_takes_its_default_and_not_captured_fills_the_top() -> None:
    back = Facts.from_dict({"devices": [{"index": 1}]})
    assert back.devices == [Device(1)] and back.tags == ("old",)


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ({"devices": [{"index": "1"}]}, "devices[0].index: expected an integer, got str '1'"),
        ({"devices": [{"temperature_c": "hot"}]}, "devices[0].temperature_c: expected a number or null, got str"),
        ({"devices": [{"clocks": {"sm": 1.5}}]}, "devices[0].clocks['sm']: expected an integer, got float 1.5"),
        ({"devices": {"index": 1}}, "devices: expected a list, got dict"),
        ({"devices": [], "mode": "dream"}, "mode: expected one of 'live', 'replay', got str 'dream'"),
        ({}, "devices: missing"),
        ({"devices": [True]}, "devices[0]: expected a table, got bool True"),
    ],
)
def test_data_of_another_shape_is_refused_naming_the_field(data: dict[str, object], said: str) -> None:
    with pytest.raises(FactsError) as caught:
        Facts.from_dict(data)
    assert str(caught.value).startswith(said)


def test_a_bool_is_not_a_number_and_an_unknown_fact_is_ignored() -> None:
    with pytest.raises(FactsError, match=r"index: expected an integer, got bool"):
        Facts.from_dict({"devices": [{"index": True}]})
    assert Facts.from_dict({"devices": [], "from_a_newer_version": 1}).devices == []


@dataclass
class Outcome(Record):
    ok: bool = False
    imported: Device = field(default_factory=Device, metadata={"key": "import"})


def test_a_recorded_key_that_is_no_python_name_maps_to_a_field() -> None:
    """The torch child writes ``{"ok": false, "import": {...}}``: ``import`` is a keyword, so the field
    names its JSON key; both directions use it, and a wrong shape names the recorded key."""
    back = Outcome.from_dict({"ok": False, "import": {"index": 2}})
    assert back.imported == Device(2) and back.to_dict() == {"ok": False, "import": Device(2).to_dict()}
    with pytest.raises(FactsError, match=r"^import\.index: expected an integer"):
        Outcome.from_dict({"import": {"index": "2"}})


@dataclass
class Fleet(Record):
    prints: list[Device] | None = None


def test_an_optional_list_of_records_names_the_field_inside_it() -> None:
    """issue 31 review: ``list[Record] | None`` once said "expected a list or null or null" and lost the path."""
    with pytest.raises(FactsError) as caught:
        Fleet.from_dict({"prints": [{"index": 0}, {"index": "one"}]})
    assert str(caught.value) == "prints[1].index: expected an integer, got str 'one'"
    with pytest.raises(FactsError, match=r"^prints: expected a list or null, got int 5$"):
        Fleet.from_dict({"prints": 5})


def test_a_probe_answer_of_another_shape_is_said_in_the_field_named() -> None:
    """from_dict_or_saying: the record itself, or one whose named field says why (never a raise)."""
    assert Device.from_dict_or_saying({"index": 1, "name": "GB10"}, "name", "unread") == Device(1, "GB10")
    said = Device.from_dict_or_saying({"index": "one"}, "name", "the NVML answer is not what G9 reads")
    assert said == Device(name="the NVML answer is not what G9 reads (index: expected an integer, got str 'one')")


def test_a_record_whose_module_left_sys_modules_still_converts(monkeypatch) -> None:
    """pytester's in-process runs restore sys.modules after each run, dropping modules first imported
    during it while their classes live on: the annotations are evaluated where they were written."""
    import sys
    import types

    module = types.ModuleType("planted_facts")
    monkeypatch.setitem(sys.modules, "planted_facts", module)
    exec(  # our own planted source
        "from __future__ import annotations\n"
        "from dataclasses import field\n"
        "from pytest_dgx_spark.checks.record import Record\n"
        "from pytest_dgx_spark.datadef import define\n"
        "@define\nclass Gpu(Record):\n    index: int = 0\n"
        "@define\nclass Seen(Record):\n    gpus: list[Gpu] = field(default_factory=list)\n",
        module.__dict__,
    )
    monkeypatch.delitem(sys.modules, "planted_facts")
    seen = module.Seen.from_dict({"gpus": [{"index": 3}]})
    assert seen == module.Seen([module.Gpu(3)])
