"""G2 — flash-attn and Unsloth's override.

``evaluate()`` on facts shaped like the torch child's answer (GB10 and the H200
recording, where flash-attn and Unsloth were absent), then the check through
``Engine`` with the torch and flash-attn doubles in the child (a flash-attn
kernel needs a GPU), and Unsloth present as metadata only.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_dgx_spark.checks.g02_flash_attn import check as g2
from pytest_dgx_spark.checks.kit import Params
from pytest_dgx_spark.checks.record import plain
from pytest_dgx_spark.engine import Engine
from pytest_dgx_spark.model import Result, Status
from pytest_dgx_spark.probes.machine import Machine
from pytest_dgx_spark.settings import Settings

from doubles import gb10

TESTS = Path(__file__).parent
FA_DOUBLE = TESTS / "doubles" / "flash_attn"

WORKING = {
    "found": True,
    "importable": True,
    "version": "2.7.4.post1",
    "interface": "flash_attn_gpu",
    "interface_error": None,
    "unsloth_has_flash_attention": True,
    "kernel": {"ok": True, "shape": [1, 16, 2, 64], "expected": [1, 16, 2, 64], "finite": True},
}
FA_DIST = {"name": "flash-attn", "version": "2.7.4.post1"}
UNSLOTH = {"name": "unsloth", "version": "2025.11.1"}


def as_facts(**fields: Any) -> g2.Facts:
    """G2's facts from their JSON form, as a capture (or another process) hands them over."""
    return g2.Facts.from_dict(plain(fields))


def facts(**changes: Any) -> g2.Facts:
    base = dict(
        flash_attn_dist=FA_DIST,
        fa=dict(WORKING),
        torch_ok=True,
        capability=[12, 1],
        device_name="NVIDIA GB10",
        child={"finished": True, "step": None, "describe": "ok"},
    )
    return as_facts(**{**base, **changes})


def evaluate(f: g2.Facts) -> Result:
    """As the engine decides: on the facts after their JSON round trip."""
    return g2.evaluate(g2.Facts.from_dict(json.loads(json.dumps(f.to_dict()))), Params())


def test_facts_round_trip_through_json_to_the_same_result() -> None:
    f = facts()
    again = g2.Facts.from_dict(json.loads(json.dumps(f.to_dict())))
    assert again == f
    assert g2.evaluate(again, Params()).to_dict() == g2.evaluate(f, Params()).to_dict()


def test_h200_recording_has_no_flash_attn_and_passes(h200: Path) -> None:
    text = (h200 / "nvml_torch_probe.txt").read_text()
    assert "dist flash-attn absent" in text and "dist unsloth absent" in text
    result = evaluate(as_facts(fa={"found": False}, torch_ok=True, capability=[9, 0]))
    assert result.status is Status.PASS and result.codes == [], result.line()
    assert result.summary == "flash-attn is not installed: attention runs on PyTorch SDPA"


def test_unsloth_without_flash_attn_passes_and_says_so() -> None:
    result = evaluate(as_facts(unsloth_dist=UNSLOTH, fa={"found": False}, torch_ok=True))
    assert result.status is Status.PASS and result.codes == [], result.line()
    assert "Unsloth 2025.11.1 is installed and will also use SDPA" in result.summary


def test_working_flash_attn_without_unsloth_passes() -> None:
    result = evaluate(facts())
    assert result.status is Status.PASS and result.codes == [], result.line()
    assert result.summary.startswith(
        "flash-attn 2.7.4.post1 imports and its kernel ran on NVIDIA GB10 (12, 1) (output shape ok)"
    )
    assert "Unsloth is not installed" in result.summary


def test_unsloth_with_working_flash_attn_warns_and_offers_the_helper() -> None:
    result = evaluate(facts(unsloth_dist=UNSLOTH))
    assert result.status is Status.WARN and result.codes == ["G2.unsloth-ignores-sdpa"], result.line()
    assert "Unsloth 2025.11.1" in result.summary
    assert "pytest_dgx_spark.unsloth.force_sdpa" in result.fix
    assert any("HAS_FLASH_ATTENTION = False" in d and "finally" in d for d in result.details)
    assert result.reading("unsloth_has_flash_attention").value is True


def test_unsloth_whose_predicate_is_false_is_not_a_warning() -> None:
    fa = {
        **WORKING,
        "interface": None,
        "interface_error": "ImportError: x",
        "unsloth_has_flash_attention": False,
    }
    result = evaluate(facts(unsloth_dist=UNSLOTH, fa=fa))
    assert result.status is Status.PASS and result.codes == [], result.line()
    assert "will not switch to it (its predicate is False here)" in result.summary


@pytest.mark.parametrize(
    ("fa", "code", "expected"),
    [
        (
            {
                "found": True,
                "importable": False,
                "error": "ImportError: flash_attn_2_cuda.so: undefined symbol: _ZN3c10",
            },
            "G2.import-error",
            "flash-attn 2.7.4.post1 is installed but does not import: ImportError: flash_attn_2_cuda.so: undefined symbol",
        ),
        (
            {
                **WORKING,
                "kernel": {
                    "ok": False,
                    "error": "RuntimeError: FATAL: kernel built for sm80-sm100, but running on sm121",
                },
            },
            "G2.kernel-failed",
            "flash-attn 2.7.4.post1 imports but its kernel fails on NVIDIA GB10 (12, 1): RuntimeError: FATAL",
        ),
        (
            {
                **WORKING,
                "kernel": {"ok": False, "shape": [1, 16, 2, 32], "expected": [1, 16, 2, 64], "finite": True},
            },
            "G2.kernel-failed",
            "flash-attn 2.7.4.post1 imports but its kernel returned shape [1, 16, 2, 32] (expected [1, 16, 2, 64])",
        ),
        (
            {"found": False},
            "G2.no-package",
            "flash-attn 2.7.4.post1 is installed (metadata) but no flash_attn package is on the import path",
        ),
    ],
)
def test_broken_flash_attn_fails(fa: dict, code: str, expected: str) -> None:
    result = evaluate(facts(fa=fa))
    assert result.status is Status.FAIL and result.codes == [code], result.line()
    assert result.summary.startswith(expected)  # the version, the error or the shapes as the child said
    assert result.fix


def test_a_child_killed_in_the_flash_attn_kernel_fails() -> None:
    child = {
        "signal": "SIGSEGV",
        "step": "flash_attn kernel",
        "finished": False,
        "describe": "torch child was killed by SIGSEGV during 'flash_attn kernel'",
    }
    result = evaluate(facts(fa={**WORKING, "kernel": None}, child=child))
    assert result.status is Status.FAIL and result.codes == ["G2.probe-died"], result.line()
    assert (
        result.summary
        == "flash-attn 2.7.4.post1: torch child was killed by SIGSEGV during 'flash_attn kernel'"
    )


def test_installed_but_torch_missing_skips_with_the_reason() -> None:
    result = evaluate(
        as_facts(flash_attn_dist=FA_DIST, torch_error="ModuleNotFoundError: No module named 'torch'")
    )
    assert result.status is Status.SKIP and result.codes == ["G2.torch-not-loaded"], result.line()
    assert "could not be checked: ModuleNotFoundError: No module named 'torch' (see G1)" in result.summary


# ---------------------------------------------------------------------- through the machine


def write_dist(site: Path, name: str, version: str) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A real interpreter that sees no installed package (a fresh venv), and a
    folder holding a copy of the real nvidia-ml-py module the pynvml double
    wraps: a flash-attn or Unsloth installed on the machine running the tests
    cannot leak into the child."""
    import importlib.util
    import shutil
    import subprocess

    base = tmp_path_factory.mktemp("bare")
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(base / "venv")], check=True, timeout=60
    )
    spec = importlib.util.find_spec("pynvml")
    if spec is None or not spec.origin:
        pytest.skip("nvidia-ml-py is not installed")
    (base / "nvml").mkdir()
    shutil.copyfile(spec.origin, base / "nvml" / "pynvml.py")
    return str(base / "venv" / "bin" / "python"), str(base / "nvml")


def run_g2(
    doubles,
    tmp_path: Path,
    bare: tuple[str, str],
    *,
    fa: dict | None,
    unsloth: bool = False,
    torch: dict | None = None,
) -> Result:
    site = tmp_path / "site-packages"
    site.mkdir()
    if fa is not None:
        write_dist(site, "flash-attn", fa.get("version", "2.7.4.post1"))
        scenario = tmp_path / "fa.json"
        scenario.write_text(json.dumps(fa))
        doubles.extra["SPARK_FAKE_FLASH_ATTN"] = str(scenario)
        doubles.pythonpath.append(str(FA_DOUBLE))
    if unsloth:  # metadata only: the check must never import it
        write_dist(site, "unsloth", "2025.11.1")
        (site / "unsloth").mkdir()
        (site / "unsloth" / "__init__.py").write_text("raise SystemExit('unsloth must not be imported')\n")
    doubles.nvml(gb10.nvml()).torch(torch or gb10.torch())
    doubles.pythonpath.extend([str(site), bare[1]])
    machine = Machine(env=doubles.env, timeout=5, python=bare[0])
    return Engine(Settings(only=("G2",)), machine).run("G2")


def test_gb10_flash_attn_and_unsloth_warn(isolated, bare_python, doubles, tmp_path: Path) -> None:
    result = run_g2(doubles, tmp_path, bare_python, fa={"version": "2.7.4.post1"}, unsloth=True)
    assert result.status is Status.WARN and result.codes == ["G2.unsloth-ignores-sdpa"], result.report_text()
    assert result.summary.startswith(
        "flash-attn 2.7.4.post1 imports and its kernel ran on NVIDIA GB10 (12, 1)"
    )
    assert "Unsloth 2025.11.1 is installed" in result.summary


def test_flash_attn_cuda_fallback_name_counts_for_unsloth(
    isolated, bare_python, doubles, tmp_path: Path
) -> None:
    result = run_g2(
        doubles, tmp_path, bare_python, fa={"version": "2.5.8", "interface": "cuda"}, unsloth=True
    )
    assert result.status is Status.WARN and result.codes == ["G2.unsloth-ignores-sdpa"], result.report_text()
    assert result.reading("unsloth_has_flash_attention").value is True


def test_no_interface_module_means_unsloth_stays_on_sdpa(
    isolated, bare_python, doubles, tmp_path: Path
) -> None:
    result = run_g2(doubles, tmp_path, bare_python, fa={"interface": None}, unsloth=True)
    assert result.status is Status.PASS and result.codes == [], result.report_text()
    assert result.reading("unsloth_has_flash_attention").value is False


def test_pre_ampere_gpu_skips_the_kernel_and_unsloth_predicate(
    isolated, bare_python, doubles, tmp_path: Path
) -> None:
    torch = gb10.torch(capability=[7, 5], name="Tesla T4")
    result = run_g2(doubles, tmp_path, bare_python, fa={}, unsloth=True, torch=torch)
    assert result.status is Status.PASS and result.codes == [], result.report_text()
    assert "kernel not run: flash-attn 2 needs capability 8.0 or newer" in result.summary


@pytest.mark.parametrize(
    ("fa", "code", "expected"),
    [
        (
            {"import_error": "/x/flash_attn_2_cuda.so: undefined symbol: _ZN3c104cuda9SetDeviceEi"},
            "G2.import-error",
            "flash-attn 2.7.4.post1 is installed but does not import: ImportError: /x/flash_attn_2_cuda.so: undefined symbol",
        ),
        (
            {"kernel_error": "FATAL: kernel built for sm80-sm100, but running on sm121"},
            "G2.kernel-failed",
            "flash-attn 2.7.4.post1 imports but its kernel fails on NVIDIA GB10 (12, 1): RuntimeError: FATAL: kernel built",
        ),
        (
            {"wrong_shape": True},
            "G2.kernel-failed",
            "flash-attn 2.7.4.post1 imports but its kernel returned shape [1, 16, 2, 32]",
        ),
        (
            {"crash": {"where": "kernel", "signal": "SIGSEGV"}},
            "G2.probe-died",
            "flash-attn 2.7.4.post1: torch child was killed by SIGSEGV during 'flash_attn kernel'",
        ),
        (
            {"crash": {"where": "import", "signal": "SIGABRT"}},
            "G2.probe-died",
            "flash-attn 2.7.4.post1: torch child was killed by SIGABRT during 'import flash_attn'",
        ),
    ],
)
def test_broken_flash_attn_in_the_child_fails(
    isolated, bare_python, doubles, tmp_path: Path, fa: dict, code: str, expected: str
) -> None:
    result = run_g2(doubles, tmp_path, bare_python, fa=fa)
    assert result.status is Status.FAIL and result.codes == [code], result.report_text()
    assert result.summary.startswith(expected)  # the version, the error, the signal and step


def test_absent_flash_attn_passes_without_importing_unsloth(
    isolated, bare_python, doubles, tmp_path: Path
) -> None:
    result = run_g2(doubles, tmp_path, bare_python, fa=None, unsloth=True)
    assert result.status is Status.PASS and result.codes == [], result.report_text()
    assert "Unsloth 2025.11.1 is installed and will also use SDPA" in result.summary
    assert "unsloth" not in sys.modules


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"unsloth_dist": UNSLOTH},
        {"fa": {"found": False}, "flash_attn_dist": None},
        {
            "fa": {
                "found": True,
                "importable": False,
                "error": "ImportError: /x/f.so: undefined symbol: _ZN3c10",
            }
        },
        {"fa": {**WORKING, "kernel": {"ok": False, "error": "RuntimeError: no kernel image"}}},
        {"fa": {}, "torch_error": "ModuleNotFoundError: No module named 'torch'"},
        {"child": {"signal": "SIGSEGV", "step": "flash_attn kernel", "describe": "killed by SIGSEGV"}},
    ],
)
def test_every_result_has_a_short_headline_and_a_short_fix(changes: dict) -> None:
    """Issue 11: the default terminal line is the headline (and the short fix
    for a FAIL/WARN), not the whole evidence."""
    result = evaluate(facts(**changes))
    assert result.headline and len(result.headline) <= 90, result.headline
    if result.status in (Status.FAIL, Status.WARN):
        assert result.short_fix and len(result.short_fix) <= 60, result.short_fix
    assert len(result.short_line()) <= 120
