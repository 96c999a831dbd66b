"""G7 — NVFP4 vs FP8 on SM121: arch parsing, the verdict, and the probe with a fake cuobjdump."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from pytest_dgx_spark.checks.g07_nvfp4 import check as g7
from pytest_dgx_spark.checks.kit import Params
from pytest_dgx_spark.checks.record import plain
from pytest_dgx_spark.engine import Engine
from pytest_dgx_spark.model import Result, Status
from pytest_dgx_spark.probes.machine import Machine
from pytest_dgx_spark.settings import Settings

from doubles import elfkit, gb10
from doubles.tritonkit import ptxas

A = g7.Arch
GB10 = Path(__file__).parent / "data" / "gb10"


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


def facts_of(**fields) -> g7.Facts:
    """G7's facts from JSON-shaped fields (tables where the facts hold records), as a capture holds
    them: the one converter builds the records."""
    return g7.Facts.from_dict(json.loads(json.dumps(plain(fields))))


def gb10_facts(**changes) -> g7.Facts:
    base = {
        "devices": [{"name": "NVIDIA GB10", "capability": [12, 1]}],
        "arch_list": list(gb10.TORCH["arch_list"]),
        "torch_version": "2.11.0+cu130",
        "torch_cuda": "13.0",
    }
    return facts_of(**{**base, **changes})


P = Params(profile="gb10")


def decide(facts: g7.Facts, params: Params = P) -> Result:
    """evaluate() on the facts after their JSON round trip, as the engine does;
    the round trip must not change the verdict."""
    again = g7.Facts.from_dict(json.loads(json.dumps(facts.to_dict())))
    assert again == facts
    result = g7.evaluate(again, params)
    assert result.line() == g7.evaluate(facts, params).line()
    assert len(result.short_line()) <= 120
    assert result.headline, "every G7 result has a headline for the short line"
    if result.status in (Status.FAIL, Status.WARN):
        assert result.short_fix
    return result


def capture(name: str) -> str:
    """A real GB10 capture from tests/data/gb10 (each starts with its ``# source:``)."""
    text = (GB10 / name).read_text()
    assert text.startswith("# source:")
    return text


def test_h200_recording_skips_with_its_capability(h200: Path) -> None:
    text = (h200 / "nvml_torch_probe.txt").read_text()
    assert "'cc': (9, 0)" in text
    result = decide(facts_of(devices=[{"name": "NVIDIA H200", "capability": [9, 0]}]))
    assert (result.status, result.codes) == (Status.SKIP, ["G7.not-sm121"])
    assert result.summary.startswith("not SM121: NVIDIA H200 has capability (9, 0) (from NVML)")


def test_no_gpu_skips_with_the_nvml_reason() -> None:
    result = decide(g7.Facts(nvml_reason="NVML unavailable: NVML Shared Library Not Found (LibraryNotFound)"))
    assert (result.status, result.codes) == (Status.SKIP, ["G7.no-gpu"])
    assert "LibraryNotFound" in result.summary  # NVML's reason, named


@pytest.mark.parametrize("name", ["torch_arch_list_1.txt", "torch_arch_list_2.txt"])
def test_stock_cu130_torch_on_gb10_passes(name: str) -> None:
    """torch_arch_list_1.txt (vLLM container) and torch_arch_list_2.txt (bare pip venv):
    torch 2.11.0+cu130 lists sm_80 … sm_120 and no sm_121 on a real GB10. That is
    healthy (torch_arch_policy_1.txt: "compatible with 12.0"), so G7 passes.

    Verdict change (issue 8): this was a WARN ("stay on FP8"), so a healthy Spark
    never read ``ready``."""
    text = capture(name)
    body = json.loads(text[text.index("\n") + 1 :])
    torch = body.get("modules", {}).get("torch") or {}
    arch_list = body.get("arch_list") or torch["cuda"]["arch_list"]
    assert "sm_121" not in arch_list and "sm_120" in arch_list
    assert "compatible with `12.0`" in capture("torch_arch_policy_1.txt")
    result = decide(gb10_facts(arch_list=arch_list))
    assert (result.status, result.codes) == (Status.PASS, []), result.line()
    assert result.summary.startswith(
        "NVIDIA GB10 is SM121 (12.1); torch 2.11.0+cu130 arch list sm_80, sm_90, sm_100, sm_110, sm_120: "
        "its sm_120 cubins run on 12.1; TORCH_CUDA_ARCH_LIST unset; no NVFP4 kernel library installed"
    )
    assert result.short_line() == "G7 PASS: torch 2.11.0+cu130 runs on SM121 through its sm_120 cubins"
    assert "32" not in result.line()  # the seed's unsourced "~32 % slower" is never quoted


def test_nix_torch_arch_list_line_passes() -> None:
    """torch_arch_list_4.txt: the Python-list form ``arch_list ['sm_80', …, 'sm_120']``."""
    line = next(x for x in capture("torch_arch_list_4.txt").splitlines() if x.startswith("arch_list "))
    arch_list = [t.strip(" '") for t in line[len("arch_list ") :].strip("[]").split(",")]
    result = decide(gb10_facts(arch_list=arch_list, torch_version="2.11.0"))
    assert result.status is Status.PASS
    assert result.reading("torch_arch_list").value == "sm_80, sm_90, sm_100, sm_110, sm_120"


@pytest.mark.parametrize(
    ("name", "version"),
    [
        ("torch_warning_1.txt", "2.13.0+cu130"),
        ("torch_warning_2.txt", "2.11.0+cu130"),
        ("torch_warning_3.txt", "2.9.0+cu130"),
    ],
)
def test_torchs_capability_warning_is_not_a_warn(name: str, version: str) -> None:
    """torch_warning_1..3.txt: torch prints "(8.0) - (12.0)" / "does not include kernels"
    on a GB10, and the reporters and maintainers call it harmless; the stock cu130 arch
    list behind it must read healthy, not WARN."""
    text = capture(name)
    assert "Found GPU0 NVIDIA GB10" in text
    assert "cuda capability 12.1" in text or "(CC) 12.1" in text
    result = decide(gb10_facts(torch_version=version, arch_list=["sm_80", "sm_90", "sm_100", "sm_120"]))
    assert (result.status, result.codes) == (Status.PASS, []), result.line()


@pytest.mark.parametrize(
    ("name", "version"), [("error_cpu_torch_1.txt", "2.9.1+cpu"), ("error_cpu_torch_3.txt", "2.9.1")]
)
def test_cpu_only_torch_fails(name: str, version: str) -> None:
    """error_cpu_torch_1.txt (PyTorch 2.9.1+cpu on a GB10) and error_cpu_torch_3.txt
    ("Torch not compiled with CUDA enabled"): a CPU-only wheel runs nothing on SM121.
    A CPU build reports torch.version.cuda None and an empty arch list."""
    text = capture(name)
    assert version in text or "Torch not compiled with CUDA enabled" in text
    result = decide(gb10_facts(torch_version=version, torch_cuda=None, arch_list=[]))
    assert (result.status, result.codes) == (Status.FAIL, ["G7.torch-cpu-only"]), result.line()
    assert f"torch {version} is a CPU-only build" in result.summary  # the version, named
    assert result.short_line() == (
        f"G7 FAIL: torch {version} is CPU-only; "
        "fix: pip install torch --index-url https://download.pytorch.org/whl/cu130"
    )


def test_no_12x_cubin_nor_compatible_ptx_fails() -> None:
    result = decide(gb10_facts(arch_list=["sm_80", "sm_90", "sm_100a", "sm_120a"]))
    assert (result.status, result.codes) == (Status.FAIL, ["G7.no-sm121-kernel"]), result.line()
    ptx = decide(gb10_facts(arch_list=["sm_80", "sm_90", "compute_90"]))
    assert (ptx.status, ptx.codes) == (Status.PASS, [])  # PTX is JIT-compiled for 12.1
    assert "runs through compute_90 PTX (JIT)" in ptx.summary  # the PTX target, named
    assert decide(gb10_facts(arch_list=["sm_90", "compute_120"])).status is Status.PASS
    assert decide(gb10_facts(arch_list=["compute_121a"])).status is Status.PASS
    assert decide(gb10_facts(arch_list=["compute_120a"])).codes == ["G7.no-sm121-kernel"]


def test_arch_targets_that_run_on_sm121() -> None:
    runs = ["sm_120", "sm_121", "sm_120f", "sm_121a", "sm_121f", "compute_90", "compute_120f"]
    never = ["sm_120a", "sm_100", "sm_90a", "compute_122", "sm_122", "compute_120a"]
    assert all(g7.runs_on_sm121(g7.parse_arch(n)[0]) for n in runs)
    assert not any(g7.runs_on_sm121(g7.parse_arch(n)[0]) for n in never)
    assert [
        n
        for n in ("sm_120", "sm_120a", "sm_120f", "sm_121a", "sm_121f")
        if g7.fp4_target(g7.parse_arch(n)[0])
    ] == [
        "sm_120f",
        "sm_121a",
        "sm_121f",
    ]


def test_unknown_torch_build_is_info_not_pass() -> None:
    result = decide(
        gb10_facts(arch_list=None, torch_version=None, arch_list_error="ModuleNotFoundError: torch")
    )
    assert (result.status, result.codes) == (Status.INFO, ["G7.arch-list-unknown"])
    assert "torch arch list unknown (ModuleNotFoundError: torch)" in result.summary  # why, named


def test_a_custom_torch_or_arch_list_with_121a_passes() -> None:
    assert decide(gb10_facts(arch_list=["sm_90", "sm_120", "sm_121a"])).status is Status.PASS
    result = decide(gb10_facts(env_arch_list="12.1a"))
    assert result.status is Status.PASS
    assert "TORCH_CUDA_ARCH_LIST=12.1a" in result.summary


def test_an_arch_list_env_that_builds_nothing_for_sm121_warns() -> None:
    """build_error_k2_1-style: extensions built with ``TORCH_CUDA_ARCH_LIST=8.0;9.0`` cannot run."""
    result = decide(gb10_facts(env_arch_list="8.0;9.0"))
    assert (result.status, result.codes) == (Status.WARN, ["G7.arch-list-env"])
    assert "TORCH_CUDA_ARCH_LIST=8.0;9.0" in result.summary  # the value, named


def test_precision_nvfp4_without_an_sm121_fp4_target_warns() -> None:
    """error_nvfp4_1.txt: NVFP4 on a Spark fails without kernels for sm_121a ("Failed to
    run cutlass FP4 gemm on sm120"). --spark-precision nvfp4 with the stock torch and no
    kernel library: WARN; fp8 and bf16: no NVFP4 question."""
    assert "Failed to run cutlass FP4 gemm on sm120" in capture("error_nvfp4_1.txt")
    nvfp4 = P.replace(options={"precision": "nvfp4"})
    result = decide(gb10_facts(), nvfp4)
    assert (result.status, result.codes) == (Status.WARN, ["G7.nvfp4-planned-no-kernel"]), result.line()
    for other in ("fp8", "bf16"):
        assert decide(gb10_facts(), P.replace(options={"precision": other})).codes == []
    assert decide(gb10_facts(env_arch_list="12.1a"), nvfp4).status is Status.PASS
    assert decide(gb10_facts(arch_list=["sm_120", "sm_120f"]), nvfp4).status is Status.PASS


def test_many_kernel_libraries_and_targets_are_counted_not_dropped() -> None:
    """The WARN listed the first three libraries and six targets of each and
    dropped the rest without saying so; now the kit's rule counts them."""
    targets = [f"sm_{n}" for n in (70, 75, 80, 86, 89, 90, 100, 120)]
    libs = [{"dist": f"lib{i} 1.0", "path": f"/s/lib{i}.so", "targets": targets} for i in range(5)]
    installed = [f"lib{i}" for i in range(5)]
    warn = decide(gb10_facts(arch_list=["sm_121a"], libs=libs, libs_installed=installed, cuobjdump="/x"))
    assert (warn.status, warn.codes) == (Status.WARN, ["G7.nvfp4-no-target"])
    six = "sm_70, sm_75, sm_80, sm_86, sm_89, sm_90, and 2 more"
    assert f"no sm_121a cubin in lib0 1.0 ({six}), lib1 1.0 ({six}), lib2 1.0 ({six}), and 2 more" in warn.summary


def test_kernel_libraries_decide_when_listed() -> None:
    """error_fp8_sm121_1.txt / error_flashinfer_arch_1.txt: NVFP4 kernel libraries built
    for other targets break on GB10; the WARN names the library and its targets."""
    assert "This kernel only supports sm120" in capture("error_fp8_sm121_1.txt")
    assert "No supported CUDA architectures found for major versions [10]" in capture(
        "error_flashinfer_arch_1.txt"
    )
    vllm = {"dist": "vllm 0.11.0", "path": "/s/vllm/_C.abi3.so", "targets": ["sm_90a", "sm_100a", "sm_120a"]}
    warn = decide(gb10_facts(arch_list=["sm_121a"], libs=[vllm], libs_installed=["vllm"], cuobjdump="/x"))
    assert warn.codes == ["G7.nvfp4-no-target"]  # torch targets it, but the NVFP4 kernels do not
    assert "no sm_121a cubin in vllm 0.11.0 (sm_90a, sm_100a, sm_120a)" in warn.summary  # names and targets
    assert warn.headline == "no sm_121a NVFP4 kernel in vllm 0.11.0 (sm_90a, sm_100a, sm_120a)"
    assert "…" not in warn.short_line()
    good = {**vllm, "targets": ["sm_120a", "sm_121a"]}
    ok = decide(gb10_facts(libs=[vllm, good], libs_installed=["vllm"], cuobjdump="/x"))
    assert (ok.status, ok.codes) == (Status.PASS, [])
    assert "sm_121a cubins in vllm 0.11.0" in ok.summary
    assert ok.reading("kernel_libraries_with_sm_121a").value == 1
    family = {**vllm, "dist": "flashinfer-python 0.6.8", "targets": ["sm_100f", "sm_120f"]}
    assert decide(gb10_facts(libs=[family], libs_installed=["flashinfer-python"])).status is Status.PASS
    quiet = decide(gb10_facts(libs=[vllm], libs_installed=["vllm"]), P.replace(options={"precision": "bf16"}))
    assert quiet.codes == []  # the run uses no NVFP4: the library is noted, not judged
    assert any("are not judged" in d for d in quiet.details)


def test_sgl_kernel_without_fp4_targets_is_named() -> None:
    """error_nvfp4_2.txt: on GB10 sgl_kernel imports, but has no SM12x FP4 GEMM; a
    library whose cubins stop at sm_100a is named with the targets it has."""
    assert "what's missing is `cutlass_scaled_fp4_mm`" in capture("error_nvfp4_2.txt")
    sgl = {
        "dist": "sgl-kernel 0.3.21",
        "path": "/s/sgl_kernel/common_ops.so",
        "targets": ["sm_90a", "sm_100a"],
    }
    result = decide(gb10_facts(libs=[sgl], libs_installed=["sgl-kernel"], cuobjdump="/x"))
    assert result.codes == ["G7.nvfp4-no-target"]
    assert result.short_line() == (
        "G7 WARN: no sm_121a NVFP4 kernel in sgl-kernel 0.3.21 (sm_90a, sm_100a); "
        "fix: use FP8, or NVFP4 builds for sm_121a"
    )


def test_libraries_without_cuobjdump_are_named() -> None:
    """Verdict change (issue 8): uninspected libraries alone no longer WARN; with
    --spark-precision nvfp4 they do, named."""
    facts = gb10_facts(libs_installed=["vllm", "flashinfer-python"])
    assert decide(facts).codes == []
    result = decide(facts, P.replace(options={"precision": "nvfp4"}))
    assert result.codes == ["G7.nvfp4-planned-no-kernel"]
    assert (
        "vllm, flashinfer-python installed but cuobjdump not found, so their cubins were not listed"
        in result.summary
    )


def test_torch_capability_is_the_fallback_without_nvml() -> None:
    f = g7.Facts(torch_capability=[12, 1], torch_device="NVIDIA GB10", arch_list=["sm_120"], nvml_reason="x")
    assert decide(f).status is Status.PASS
    f = g7.Facts(torch_capability=[8, 6], torch_device="NVIDIA RTX A6000")
    assert decide(f).codes == ["G7.not-sm121"] and "from torch" in decide(f).summary  # the source, named


def ptxas_facts(release: list[int] | None, binary: str = "ptxas", env: str | None = None) -> g7.Facts:
    triton = {
        "dist": "pytorch-triton 3.5.0+git7416ffcb",
        "binary": binary,
        "path": "/site/triton/backends/nvidia/bin/" + binary,
        "env": env,
        "release": release,
    }
    return gb10_facts(triton=triton)


def test_old_triton_ptxas_warns_with_the_fix() -> None:
    """error_triton_ptxas_1.txt (triton #8539): pytorch-triton 3.5.0's bundled ptxas (12.8)
    rejects sm_121a, and TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas fixes it."""
    text = capture("error_triton_ptxas_1.txt")
    assert "Value 'sm_121a' is not defined for option 'gpu-name'" in text
    assert "export TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas" in text
    result = decide(ptxas_facts([12, 8]))
    assert (result.status, result.codes) == (Status.WARN, ["G7.triton-ptxas-old"]), result.line()
    assert "its bundled ptxas, ptxas 12.8 (< 12.9)" in result.summary  # which ptxas, its release
    assert result.fix.startswith("export TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas")  # the variable to set
    assert result.short_line() == (
        "G7 WARN: triton ptxas 12.8 rejects sm_121a (torch.compile); "
        "fix: export TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas"
    )
    assert decide(ptxas_facts([13, 0])).status is Status.PASS
    assert decide(ptxas_facts([12, 9])).status is Status.PASS
    blackwell = decide(ptxas_facts([12, 8], binary="ptxas-blackwell"))
    assert "export TRITON_PTXAS_BLACKWELL_PATH=" in blackwell.fix
    strict = P.replace(thresholds={"g7_triton_ptxas_min": 13.0})
    assert decide(ptxas_facts([12, 9]), strict).codes == ["G7.triton-ptxas-old"]  # the threshold decides


def test_triton_without_an_install_folder_is_a_note(isolated, doubles, tmp_path: Path) -> None:
    facts = gb10_facts(
        triton={"dist": "triton 3.4.0", "error": "its install folder is unknown (no dist-info path)"}
    )
    assert decide(facts).status is Status.PASS


def test_unreadable_ptxas_is_a_note_not_a_verdict() -> None:
    facts = gb10_facts(
        triton={"dist": "triton 3.4.0", "binary": "ptxas", "path": "/x", "error": "no ptxas in /x"}
    )
    result = decide(facts)
    assert result.status is Status.PASS
    assert "triton 3.4.0: no ptxas in /x" in result.details


# ---------------------------------------------------------------------- through the machine


CUOBJDUMP = """#!/bin/sh
echo "$@" >> "{log}"
case "$2" in
  *_C.abi3.so) printf 'ELF file    1: _C.abi3.1.sm_90a.cubin\\nELF file    2: _C.abi3.2.sm_120a.cubin\\n{extra}' ;;
  *) echo "cuobjdump info    : File '$2' does not contain device code" >&2; exit 255 ;;
esac
"""


def run_g7(
    doubles,
    tmp_path: Path,
    kit: elfkit.Kit,
    *,
    nvml: dict,
    extra: str = "",
    tool: bool = True,
    precision: str | None = None,
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
    result = Engine(Settings(only=("G7",), precision=precision), machine).run("G7")
    result.details.append(f"cuobjdump calls: {log.read_text() if log.exists() else ''}")
    return result


def test_gb10_vllm_cubins_without_121a_warn(kit, isolated, doubles, tmp_path: Path) -> None:
    result = run_g7(doubles, tmp_path, kit, nvml=gb10.nvml())
    assert result.codes == ["G7.nvfp4-no-target"], result.report_text()
    assert "no sm_121a cubin in vllm 0.11.0 (sm_90a, sm_120a)" in result.summary  # the targets cuobjdump listed
    assert (
        result.reading("kernel_libraries_inspected").value == 2
    )  # _C.abi3.so and _small.so (no device code)
    assert any("_small.so: no device code (JIT)" in d for d in result.details)


def test_gb10_vllm_cubins_with_121a_pass(kit, isolated, doubles, tmp_path: Path) -> None:
    result = run_g7(
        doubles, tmp_path, kit, nvml=gb10.nvml(), extra="ELF file    3: _C.abi3.3.sm_121a.cubin\\n"
    )
    assert (result.status, result.codes) == (Status.PASS, []), result.report_text()
    assert "sm_121a cubins in vllm 0.11.0" in result.summary


def test_gb10_without_cuobjdump_names_what_was_not_inspected(kit, isolated, doubles, tmp_path: Path) -> None:
    if shutil.which("cuobjdump") or os.access("/usr/local/cuda/bin/cuobjdump", os.X_OK):
        pytest.skip("a real cuobjdump is installed here")
    result = run_g7(doubles, tmp_path, kit, nvml=gb10.nvml(), tool=False, precision="nvfp4")
    assert result.codes == ["G7.nvfp4-planned-no-kernel"], result.report_text()
    assert "vllm installed but cuobjdump not found" in result.summary


def test_h200_skips_without_running_cuobjdump_or_torch(kit, isolated, doubles, tmp_path: Path) -> None:
    nvml = gb10.nvml(device={"name": "NVIDIA H200", "capability": [9, 0]})
    result = run_g7(doubles, tmp_path, kit, nvml=nvml)
    assert result.codes == ["G7.not-sm121"], result.report_text()
    assert result.summary.startswith("not SM121: NVIDIA H200 has capability (9, 0)")
    assert not (tmp_path / "cuobjdump.log").exists()


def test_no_driver_library_skips_without_importing_torch(isolated, doubles, tmp_path: Path) -> None:
    log = tmp_path / "torch.log"
    doubles.nvml({"init_error": "LibraryNotFound"}).torch(gb10.torch(log=str(log)))
    result = Engine(Settings(only=("G7",)), Machine(env=doubles.env, timeout=5)).run("G7")
    assert result.codes == ["G7.no-gpu"], result.report_text()
    assert "(NVML unavailable:" in result.summary  # NVML's reason
    assert not log.exists(), "torch was imported for nothing"


def test_a_hung_nvml_falls_back_to_torchs_capability(isolated, doubles, tmp_path: Path) -> None:
    doubles.nvml({**gb10.nvml(), "hang": {"where": "nvmlDeviceGetCount", "seconds": 30}}).torch(gb10.torch())
    result = Engine(Settings(only=("G7",)), Machine(env=doubles.env, timeout=0.5)).run("G7")
    assert result.status is Status.PASS, result.report_text()
    assert result.summary.startswith("NVIDIA GB10 is SM121 (12.1)")


def test_cpu_only_torch_through_the_machine_fails(isolated, doubles, tmp_path: Path) -> None:
    """error_cpu_torch_2.txt: plain pip on aarch64 gave a CPU torch next to a working
    driver (nvidia-smi shows the GB10); the torch child reports no CUDA."""
    assert "No GPU or other accelerator detected" in capture("error_cpu_torch_2.txt")
    cpu = gb10.torch(version="2.9.1+cpu", cuda=None, available=False, arch_list=[])
    doubles.nvml(gb10.nvml()).torch(cpu)
    result = Engine(Settings(only=("G7",)), Machine(env=doubles.env, timeout=5)).run("G7")
    assert result.codes == ["G7.torch-cpu-only"], result.report_text()


def test_a_cuda_torch_that_cannot_reach_the_gpu_is_not_called_unimportable(
    isolated, doubles, tmp_path: Path
) -> None:
    """torch.cuda.get_arch_list() is [] whenever CUDA is unavailable, so a cu130 torch
    that cannot reach the GB10 (driver, device nodes) lists nothing: G7 cannot judge its
    targets and says why (G1 names the cause), not "torch not importable"."""
    doubles.nvml(gb10.nvml()).torch(gb10.torch(available=False))
    result = Engine(Settings(only=("G7",)), Machine(env=doubles.env, timeout=5)).run("G7")
    assert result.codes == ["G7.arch-list-unknown"], result.report_text()
    assert "torch arch list unknown (torch.cuda.is_available() is False; see G1)" in result.summary
    assert "not importable" not in result.line()
    assert result.short_line() == (
        "G7 INFO: SM121 found; torch 2.11.0+cu130's build unknown (torch.cuda.is_available() is False; see G1)"
    )


def fake_triton(site: Path, log: Path, name: str, version: str, tools: dict[str, str]) -> Path:
    """A triton distribution on disk: dist-info metadata and ``bin/<tool>`` scripts
    printing ``ptxas --version`` for the given release."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    bin_dir = site / "triton" / "backends" / "nvidia" / "bin"
    bin_dir.mkdir(parents=True)
    for tool, release in tools.items():
        ptxas(bin_dir / tool, release, log)
    return bin_dir


def run_triton(doubles, tmp_path: Path, tools: dict[str, str], env: dict[str, str] | None = None) -> Result:
    site = tmp_path / "site-packages"
    log = tmp_path / "ptxas.log"
    fake_triton(site, log, "pytorch-triton", "3.5.0+git7416ffcb", tools)
    doubles.nvml(gb10.nvml()).torch(gb10.torch())
    doubles.pythonpath.append(str(site))
    doubles.extra.update(env or {})
    result = Engine(Settings(only=("G7",)), Machine(env=doubles.env, timeout=5)).run("G7")
    result.details.append(f"ptxas calls: {log.read_text() if log.exists() else ''}")
    return result


def test_triton_bundled_ptxas_12_8_warns(isolated, doubles, tmp_path: Path) -> None:
    """error_triton_ptxas_1.txt (triton #8539): pytorch-triton 3.5.0+git7416ffcb's bundled
    ``triton/backends/nvidia/bin/ptxas`` (CUDA 12.8) rejects sm_121a; the fix is CUDA 13's."""
    assert "site-packages/triton/backends/nvidia/bin/ptxas -lineinfo -v --gpu-name=sm_121a" in capture(
        "error_triton_ptxas_1.txt"
    )
    result = run_triton(doubles, tmp_path, {"ptxas": "12.8"})
    assert result.codes == ["G7.triton-ptxas-old"], result.report_text()
    assert "pytorch-triton 3.5.0+git7416ffcb compiles SM121 kernels with its bundled ptxas, ptxas 12.8" in (
        result.summary
    )
    assert result.short_fix == "export TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas"
    assert result.reading("triton_ptxas_release").value == "12.8"
    assert any("/bin/ptxas --version" in d for d in result.details)


def test_triton_ptxas_override_to_cuda_13_passes(isolated, doubles, tmp_path: Path) -> None:
    cuda13 = tmp_path / "cuda" / "bin"
    ptxas(cuda13 / "ptxas", "13.0", tmp_path / "ptxas.log")
    result = run_triton(doubles, tmp_path, {"ptxas": "12.8"}, {"TRITON_PTXAS_PATH": str(cuda13 / "ptxas")})
    assert result.status is Status.PASS, result.report_text()
    assert result.reading("triton_ptxas_release").value == "13.0"
    assert any(f"TRITON_PTXAS_PATH={cuda13 / 'ptxas'}" in d for d in result.details)


def test_triton_with_ptxas_blackwell_uses_it_for_sm121(isolated, doubles, tmp_path: Path) -> None:
    """Tritons that bundle ``ptxas-blackwell`` (13.x) compile sm >= 100 with it; the 12.8
    ``ptxas`` next to it is never used for GB10, so it is not a WARN."""
    result = run_triton(doubles, tmp_path, {"ptxas": "12.8", "ptxas-blackwell": "13.1"})
    assert result.status is Status.PASS, result.report_text()
    assert result.reading("triton_ptxas_release").value == "13.1"
    calls = next(d for d in result.details if d.startswith("ptxas calls:"))
    assert "ptxas-blackwell --version" in calls and "/bin/ptxas --version" not in calls


def test_a_hanging_ptxas_is_noted_not_waited_for(isolated, doubles, tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    bin_dir = fake_triton(site, tmp_path / "log", "triton", "3.4.0", {"ptxas": "12.8"})
    (bin_dir / "ptxas").write_text("#!/bin/sh\nsleep 30\n")
    doubles.nvml(gb10.nvml()).torch(gb10.torch())
    doubles.pythonpath.append(str(site))
    result = Engine(Settings(only=("G7",)), Machine(env=doubles.env, timeout=1)).run("G7")
    assert result.status is Status.PASS, result.report_text()
    assert any(d.startswith("triton 3.4.0: `ptxas --version` gave no release") for d in result.details)


def test_precision_option_reaches_g7(isolated, doubles, tmp_path: Path) -> None:
    doubles.nvml(gb10.nvml()).torch(gb10.torch())
    machine = Machine(env=doubles.env, timeout=5)
    result = Engine(Settings(only=("G7",), precision="nvfp4"), machine).run("G7")
    assert result.codes == ["G7.nvfp4-planned-no-kernel"], result.report_text()
    assert "precision nvfp4" in result.summary


# ---------------------------------------------------------------------- the captures, through the engine


def torch_from_capture(name: str) -> dict:
    """The torch child's answer as the GB10 in ``name`` gave it: version, CUDA, arch list,
    capability, device (torch_arch_list_1.txt: a vLLM container's probe JSON;
    torch_arch_list_2.txt: spark_doctor.py's JSON from a bare pip venv)."""
    text = capture(name)
    body = json.loads(text[text.index("\n") + 1 :])
    if "packages" in body:
        version, cuda = body["packages"]["torch"]["version"], body["torch_cuda"]
        dev, arch_list = body, body["arch_list"]
        capability, device = dev["device_capability"], dev["device_name"]
    else:
        torch = body["modules"]["torch"]
        version, cuda, arch_list = torch["version"], torch["cuda"]["built_cuda"], torch["cuda"]["arch_list"]
        dev = torch["cuda"]["devices"][0]
        capability, device = dev["capability"], dev["name"]
    return gb10.torch(
        version=version,
        cuda=cuda,
        arch_list=arch_list,
        capability=capability,
        name=device,
        total_memory=dev["total_memory"],
        multi_processor_count=dev["multi_processor_count"],
    )


@pytest.mark.parametrize("name", ["torch_arch_list_1.txt", "torch_arch_list_2.txt"])
def test_stock_cu130_torch_from_the_capture_passes_through_the_engine(
    isolated, doubles, tmp_path: Path, name: str
) -> None:
    """torch_arch_list_1.txt and torch_arch_list_2.txt: what torch 2.11.0+cu130 answered on
    real GB10s (sm_80 … sm_120, no sm_121, no PTX), given to the torch child, with the GB10's
    NVML: the whole check reads it healthy."""
    torch = torch_from_capture(name)
    assert (torch["version"], torch["cuda"], torch["capability"]) == ("2.11.0+cu130", "13.0", [12, 1])
    doubles.nvml(gb10.nvml()).torch(torch)
    result = Engine(Settings(only=("G7",)), Machine(env=doubles.env, timeout=5)).run("G7")
    assert result.status is Status.PASS, result.report_text()
    assert result.short_line() == "G7 PASS: torch 2.11.0+cu130 runs on SM121 through its sm_120 cubins"
    assert result.reading("torch_arch_list").value == "sm_80, sm_90, sm_100, sm_110, sm_120"


def test_nix_torch_from_the_capture_passes_through_the_engine(isolated, doubles, tmp_path: Path) -> None:
    """torch_arch_list_4.txt: a Nix-packaged PyTorch 2.11.0 (no local version tag) printing
    ``capability (12, 1)`` and ``arch_list ['sm_80', …, 'sm_120']``."""
    lines = dict(x.split(" ", 1) for x in capture("torch_arch_list_4.txt").splitlines() if " " in x)
    assert lines["capability"] == "(12, 1)" and lines["device"] == "NVIDIA GB10"
    arch_list = [t.strip(" '") for t in lines["arch_list"].strip("[]").split(",")]
    doubles.nvml(gb10.nvml()).torch(gb10.torch(version="2.11.0", arch_list=arch_list))
    result = Engine(Settings(only=("G7",)), Machine(env=doubles.env, timeout=5)).run("G7")
    assert result.status is Status.PASS, result.report_text()
    assert result.short_line() == "G7 PASS: torch 2.11.0 runs on SM121 through its sm_120 cubins"


@pytest.mark.parametrize(
    ("precision", "status"), [("nvfp4", Status.WARN), ("fp8", Status.PASS), ("bf16", Status.PASS)]
)
def test_nvfp4_with_the_stock_torch_through_the_engine(
    isolated, doubles, tmp_path: Path, precision: str, status: Status
) -> None:
    """error_nvfp4_1.txt: NVFP4 on two Sparks fails with "Failed to run cutlass FP4 gemm on
    sm120" when nothing carries sm_121a kernels. The stock torch of torch_arch_list_1.txt and
    no NVFP4 kernel library: --spark-precision nvfp4 WARNs, fp8 and bf16 do not."""
    assert "Failed to run cutlass FP4 gemm on sm120" in capture("error_nvfp4_1.txt")
    doubles.nvml(gb10.nvml()).torch(torch_from_capture("torch_arch_list_1.txt"))
    machine = Machine(root=tmp_path, env=doubles.env, timeout=5)  # no CUDA toolkit's cuBLAS: none planted
    result = Engine(Settings(only=("G7",), precision=precision), machine).run("G7")
    assert (result.status, result.codes) == (status, ["G7.nvfp4-planned-no-kernel"] if status is Status.WARN else []), result.report_text()


SGL_CUOBJDUMP = """#!/bin/sh
case "$2" in
  *common_ops*.so) printf 'ELF file    1: common_ops.1.sm_90a.cubin\\n'
                   printf 'ELF file    2: common_ops.2.sm_100a.cubin\\n' ;;
  *) echo "cuobjdump info    : File '$2' does not contain device code" >&2; exit 255 ;;
esac
"""


def test_sglang_kernel_from_the_capture_is_named_through_the_engine(
    kit, isolated, doubles, tmp_path: Path
) -> None:
    """error_nvfp4_2.txt: on a GB10 with torch 2.11.0+cu130, "sglang-kernel 0.4.2.post2
    (aarch64 wheel)" imports but has no SM12.x FP4 GEMM. That distribution (sgl-kernel's
    name since 0.4) installed with cubins that stop at sm_100a: G7 names it and its targets."""
    text = capture("error_nvfp4_2.txt")
    assert "sglang-kernel 0.4.2.post2" in text and "no SM12.x FP4 GEMM in the wheel" in text
    site = tmp_path / "site-packages"
    elfkit.install(site, "sglang-kernel", "0.4.2.post2", {"sgl_kernel/common_ops.abi3.so": kit.ext13})
    doubles.tool("cuobjdump", SGL_CUOBJDUMP)
    doubles.nvml(gb10.nvml()).torch(torch_from_capture("torch_arch_list_1.txt"))
    doubles.pythonpath.append(str(site))
    result = Engine(Settings(only=("G7",)), Machine(env=doubles.env, timeout=5)).run("G7")
    assert result.codes == ["G7.nvfp4-no-target"], result.report_text()
    assert "no sm_121a cubin in sglang-kernel 0.4.2.post2 (sm_90a, sm_100a)" in result.summary
    assert result.short_line().startswith("G7 WARN: no sm_121a NVFP4 kernel in sglang-kernel 0.4.2.post2")
    assert result.short_line().endswith("; fix: use FP8, or NVFP4 builds for sm_121a")
