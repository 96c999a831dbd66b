"""The catalog finds the checks by convention: a ``checks/g<NN>_<name>/`` package and its ``spec.json``.
A broken spec is a packaging mistake, said by name in one line, never a traceback deep in an import."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_dgx_spark import catalog, checks
from pytest_dgx_spark.catalog import CatalogError, CheckSpec, discover

GOOD = {"id": "G11", "title": "swap on unified memory", "marker": "spark_memory", "area": "of unified-memory headroom"}


def plant(folder: Path, name: str, spec: object, *, init: bool = True) -> None:
    package = folder / name
    package.mkdir(parents=True)
    if init:
        (package / "__init__.py").write_text('"""A check."""\n')
    if spec is not None:
        (package / "spec.json").write_text(spec if isinstance(spec, str) else json.dumps(spec))


def test_the_shipped_specs_are_the_checks_by_number() -> None:
    assert [s.number for s in catalog.CHECKS] == sorted(s.number for s in catalog.CHECKS)
    for spec in catalog.CHECKS:
        assert spec.module.startswith(f"g{spec.number:02d}_") and spec.markers == (catalog.MARKER_ALL, spec.marker)
        assert (Path(checks.__path__[0]) / spec.module / "__init__.py").is_file()
    assert catalog.discover() == catalog.CHECKS


def test_a_planted_package_is_a_check_and_stray_folders_are_not(tmp_path: Path) -> None:
    plant(tmp_path, "g11_swap", GOOD)
    plant(tmp_path, "g02_two", {**GOOD, "id": "G2", "needs_torch": True})
    plant(tmp_path, "g12_leftover", None, init=False)  # a folder left behind (only __pycache__): not a package
    plant(tmp_path, "helpers", GOOD)  # not g<NN>_<name>
    plant(tmp_path, "G13_upper", {**GOOD, "id": "G13"})
    specs = discover([str(tmp_path)])
    assert specs == (
        CheckSpec("G2", GOOD["title"], GOOD["marker"], GOOD["area"], needs_torch=True, module="g02_two"),
        CheckSpec("G11", GOOD["title"], GOOD["marker"], GOOD["area"], module="g11_swap"),
    )
    assert repr(specs[1]).startswith("CheckSpec(id='G11', title='swap on unified memory'")


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        (None, "its spec.json cannot be read (No such file or directory)"),
        ("{", "its spec.json is not JSON"),
        ("[]", "its spec.json is not a JSON object"),
        ({**GOOD, "colour": "red"}, "spec.json has unknown fields ['colour']"),
        ({k: v for k, v in GOOD.items() if k != "area"}, "spec.json has no 'area'"),
        ({**GOOD, "title": " "}, "spec.json's 'title' is not a non-empty string"),
        ({**GOOD, "needs_torch": "yes"}, "spec.json's 'needs_torch' is not a boolean"),
        ({**GOOD, "id": "G12"}, "spec.json's id 'G12' does not match its name"),
    ],
    ids=["missing", "not-json", "not-object", "unknown-field", "no-area", "blank-title", "bool", "wrong-id"],
)
def test_a_broken_spec_is_named_in_one_line(tmp_path: Path, spec: object, said: str) -> None:
    plant(tmp_path, "g11_swap", spec)
    with pytest.raises(CatalogError) as error:
        discover([str(tmp_path)])
    assert str(error.value).startswith("pytest_dgx_spark.checks.g11_swap: ") and said in str(error.value)
    assert "\n" not in str(error.value)


def test_two_packages_with_one_id_are_refused(tmp_path: Path) -> None:
    plant(tmp_path, "g11_swap", GOOD)
    plant(tmp_path, "g11_swap_again", GOOD)
    plant(tmp_path, "g011_swap", GOOD)  # not g<NN>_: not a check package
    with pytest.raises(CatalogError, match=r"two check packages declare one id: \['G11', 'G11'\]"):
        discover([str(tmp_path)])
