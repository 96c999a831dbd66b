"""G7 — NVFP4 vs FP8 on SM121: arch parsing, the verdict, and the probe with a fake cuobjdump."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from pytest_spark.checks import g07_nvfp4 as g7
from pytest_spark.engine import Engine
from pytest_spark.model import Result, Status
from pytest_spark.options import Settings
from pytest_spark.probes.machine import Machine

from doubles import elfkit, gb10

A = g7.Arch


@pytest.mark.parametrize(
    ("token", "expected"),
    [
        ("sm_121a", [A(12, 1, "a", "sm")]),
        ("sm_120f", [A(12, 0, "f", "sm")]),
        ("compute_121a", [A(12, 1, "a", "compute")]),
        ("compute_120", [A(12, 0, "", "compute")]),
        ("sm_90", [A(9, 0, "", "sm")]),
        ("sm_100", [A(10, 0, "", "sm")]),
        ("12.0a", [A(12, 0, "a", "sm")]),
        ("12.1+PTX", [A(12, 1, "", "sm"), A(12, 1, "", "compute")]),
        ("9.0a", [A(9, 0, "a", "sm")]),
        ("121", [A(12, 1, "", "sm")]),
        ("SM_121A", [A(12, 1, "a", "sm")]),
        ("lto_90a", [A(9, 0, "a", "sm")]),
        ("", []),
        ("sm_", []),
        ("7", []),
        ("twelve", []),
    ],
)
def test_arch_names_parse_defensively(token: str, expected: list) -> None:
    assert g7.parse_arch(token) == expected


def test_torch_cuda_arch_list_strings_and_names() -> None:
    archs, bad = g7.parse_arch_list("8.0;9.0a 12.0+PTX, Hopper;bogus")
    assert [a.name for a in archs] == ["sm_80", "sm_90a", "sm_120", "compute_120", "sm_90"]
    assert bad == ["bogus"]
    assert g7.targets_121a(g7.parse_arch_list("12.1a")[0])
    assert not g7.targets_121a(g7.parse_arch_list("12.0a;12.1;12.0f")[0])
    assert g7.targets_121a(g7.parse_arch_list(["compute_121a"])[0])


def test_cuobjdump_listing_is_parsed() -> None:
    # the format of `cuobjdump --list-elf` (CUDA 12/13)
    text = (
        "ELF file    1: _C.abi3.1.sm_90a.cubin\n"
        "ELF file    2: _C.abi3.2.sm_100a.cubin\n"
        "ELF file    3: _C.abi3.3.sm_120a.cubin\n"
        "ELF file    4: _C.abi3.4.sm_120a.cubin\n"
        "ELF file    5: _C.abi3.5.sm_121a.cubin\n"
        "PTX file    1: _C.abi3.1.sm_120.ptx\n"
    )
    assert g7.parse_cuobjdump(text) == ["sm_90a", "sm_100a", "sm_120a", "sm_121a"]


def gb10_facts(**changes) -> g7.Facts:
    base = g7.Facts(
        devices=[{"name": "NVIDIA GB10", "capability": [12, 1]}],
        arch_list=list(gb10.TORCH["arch_list"]),
        torch_version="2.11.0+cu130",
    )
    for key, value in changes.items():
        setattr(base, key, value)
    return base


def test_h200_recording_skips_with_its_capability(h200: Path) -> None:
    text = (h200 / "nvml_torch_probe.txt").read_text()
    assert "'cc': (9, 0)" in text
    result = g7.evaluate(g7.Facts(devices=[{"name": "NVIDIA H200", "capability": [9, 0]}]))
    assert result.status is Status.SKIP
    assert result.summary.startswith("not SM121: NVIDIA H200 has capability (9, 0) (from NVML)")


def test_no_gpu_skips_with_the_nvml_reason() -> None:
    result = g7.evaluate(
        g7.Facts(nvml_reason="NVML unavailable: NVML Shared Library Not Found (LibraryNotFound)")
    )
    assert result.status is Status.SKIP
    assert "LibraryNotFound" in result.summary


def test_stock_cu130_torch_on_gb10_warns_stay_on_fp8() -> None:
    result = g7.evaluate(gb10_facts())
    assert result.status is Status.WARN
    assert result.summary.startswith(
        "NVIDIA GB10 is SM121 (12.1); torch arch list sm_80, sm_90, sm_100, sm_110, sm_120; "
        "TORCH_CUDA_ARCH_LIST unset; no NVFP4 kernel library installed"
    )
    assert "nothing installed targets sm_121a" in result.summary
    assert result.fix.startswith("stay on FP8")
    assert "32" not in result.line()  # the seed's unsourced "~32 % slower" is never quoted


def test_a_custom_torch_or_arch_list_with_121a_passes() -> None:
    assert g7.evaluate(gb10_facts(arch_list=["sm_90", "sm_120", "sm_121a"])).status is Status.PASS
    result = g7.evaluate(gb10_facts(env_arch_list="12.1a"))
    assert result.status is Status.PASS
    assert "TORCH_CUDA_ARCH_LIST=12.1a" in result.summary


def test_kernel_libraries_decide_when_listed() -> None:
    vllm = {"dist": "vllm 0.11.0", "path": "/s/vllm/_C.abi3.so", "targets": ["sm_90a", "sm_100a", "sm_120a"]}
    warn = g7.evaluate(
        gb10_facts(arch_list=["sm_121a"], libs=[vllm], libs_installed=["vllm"], cuobjdump="/x")
    )
    assert warn.status is Status.WARN  # torch targets it, but the NVFP4 kernels do not
    assert "no sm_121a cubin in vllm 0.11.0 (sm_90a, sm_100a, sm_120a)" in warn.summary
    good = {**vllm, "targets": ["sm_120a", "sm_121a"]}
    ok = g7.evaluate(gb10_facts(libs=[vllm, good], libs_installed=["vllm"], cuobjdump="/x"))
    assert ok.status is Status.PASS
    assert "sm_121a cubins in vllm 0.11.0" in ok.summary
    assert ok.reading("kernel_libraries_with_sm_121a").value == 1


def test_libraries_without_cuobjdump_are_named() -> None:
    result = g7.evaluate(gb10_facts(libs_installed=["vllm", "flashinfer-python"]))
    assert result.status is Status.WARN
    assert (
        "vllm, flashinfer-python installed but cuobjdump not found, so their cubins were not listed"
        in result.summary
    )


def test_torch_capability_is_the_fallback_without_nvml() -> None:
    f = g7.Facts(torch_capability=[12, 1], torch_device="NVIDIA GB10", arch_list=["sm_120"], nvml_reason="x")
    assert g7.evaluate(f).status is Status.WARN
    f = g7.Facts(torch_capability=[8, 6], torch_device="NVIDIA RTX A6000")
    assert "from torch" in g7.evaluate(f).summary


# ---------------------------------------------------------------------- through the machine


CUOBJDUMP = """#!/bin/sh
echo "$@" >> "{log}"
case "$2" in
  *_C.abi3.so) printf 'ELF file    1: _C.abi3.1.sm_90a.cubin\\nELF file    2: _C.abi3.2.sm_120a.cubin\\n{extra}' ;;
  *) echo "cuobjdump info    : File '$2' does not contain device code" >&2; exit 255 ;;
esac
"""


def run_g7(
    doubles, tmp_path: Path, kit: elfkit.Kit, *, nvml: dict, extra: str = "", tool: bool = True
) -> Result:
    site = tmp_path / "site-packages"
    elfkit.install(site, "vllm", "0.11.0", {"vllm/_C.abi3.so": kit.ext13, "vllm/_small.so": kit.plain})
    log = tmp_path / "cuobjdump.log"
    if tool:
        doubles.tool("cuobjdump", CUOBJDUMP.format(log=log, extra=extra))
    else:
        doubles.extra["PATH"] = ""
        doubles.extra["CUDA_HOME"] = str(tmp_path / "no-cuda")
    doubles.nvml(nvml).torch(gb10.torch())
    doubles.pythonpath.append(str(site))
    machine = Machine(env=doubles.env, timeout=5)
    result = Engine(Settings(only=("G7",)), machine).run("G7")
    result.details.append(f"cuobjdump calls: {log.read_text() if log.exists() else ''}")
    return result


def test_gb10_vllm_cubins_without_121a_warn(kit, isolated, doubles, tmp_path: Path) -> None:
    result = run_g7(doubles, tmp_path, kit, nvml=gb10.nvml())
    assert result.status is Status.WARN, result.report_text()
    assert "no sm_121a cubin in vllm 0.11.0 (sm_90a, sm_120a)" in result.summary
    assert (
        result.reading("kernel_libraries_inspected").value == 2
    )  # _C.abi3.so and _small.so (no device code)
    assert any("_small.so: no device code (JIT)" in d for d in result.details)


def test_gb10_vllm_cubins_with_121a_pass(kit, isolated, doubles, tmp_path: Path) -> None:
    result = run_g7(
        doubles, tmp_path, kit, nvml=gb10.nvml(), extra="ELF file    3: _C.abi3.3.sm_121a.cubin\\n"
    )
    assert result.status is Status.PASS, result.report_text()
    assert "sm_121a cubins in vllm 0.11.0" in result.summary


def test_gb10_without_cuobjdump_names_what_was_not_inspected(kit, isolated, doubles, tmp_path: Path) -> None:
    if shutil.which("cuobjdump") or os.access("/usr/local/cuda/bin/cuobjdump", os.X_OK):
        pytest.skip("a real cuobjdump is installed here")
    result = run_g7(doubles, tmp_path, kit, nvml=gb10.nvml(), tool=False)
    assert result.status is Status.WARN, result.report_text()
    assert "vllm installed but cuobjdump not found" in result.summary


def test_h200_skips_without_running_cuobjdump_or_torch(kit, isolated, doubles, tmp_path: Path) -> None:
    nvml = gb10.nvml(device={"name": "NVIDIA H200", "capability": [9, 0]})
    result = run_g7(doubles, tmp_path, kit, nvml=nvml)
    assert result.status is Status.SKIP, result.report_text()
    assert result.summary.startswith("not SM121: NVIDIA H200 has capability (9, 0)")
    assert not (tmp_path / "cuobjdump.log").exists()


def test_no_driver_library_skips_without_importing_torch(isolated, doubles, tmp_path: Path) -> None:
    log = tmp_path / "torch.log"
    doubles.nvml({"init_error": "LibraryNotFound"}).torch(gb10.torch(log=str(log)))
    result = Engine(Settings(only=("G7",)), Machine(env=doubles.env, timeout=5)).run("G7")
    assert result.status is Status.SKIP, result.report_text()
    assert "no NVIDIA GPU found (NVML unavailable:" in result.summary
    assert not log.exists(), "torch was imported for nothing"


def test_a_hung_nvml_falls_back_to_torchs_capability(isolated, doubles, tmp_path: Path) -> None:
    doubles.nvml({**gb10.nvml(), "hang": {"where": "nvmlDeviceGetCount", "seconds": 30}}).torch(gb10.torch())
    result = Engine(Settings(only=("G7",)), Machine(env=doubles.env, timeout=0.5)).run("G7")
    assert result.status is Status.WARN, result.report_text()
    assert result.summary.startswith("NVIDIA GB10 is SM121 (12.1)")
