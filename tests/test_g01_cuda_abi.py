"""G1 — CUDA 12/13 ABI.

``evaluate()`` on recorded input (the H200's readelf of a cu130 torch and its
NVML/torch probe; GB10 facts from EVIDENCE.md), then the whole check through
``Engine`` + ``Machine`` with real gcc-built extension modules in a fake
site-packages, the torch double in the child, and a fake ``ldconfig``.
"""

from __future__ import annotations

import ast
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_spark.checks import g01_cuda_abi as g1
from pytest_spark.checks.kit import Params
from pytest_spark.engine import Engine
from pytest_spark.model import Result, Status
from pytest_spark.options import Settings
from pytest_spark.probes.machine import Machine

from doubles import elfkit, gb10

H200_SITE = "/opt/torch/.venv/lib/python3.12/site-packages"


# ---------------------------------------------------------------------- recorded input


def h200_recording(h200: Path) -> dict[str, Any]:
    """The torch child's data and the linkers, as the H200 recorded them."""
    probe = (h200 / "nvml_torch_probe.txt").read_text()
    m = re.search(r"^torch (\S+) cuda (\S+) avail (\w+)$", probe, re.M)
    assert m, "recording format changed"
    cap = re.search(r"^cap \((\d+), (\d+)\) (.+)$", probe, re.M)
    arch = re.search(r"^arch_list (\[.*\])$", probe, re.M)
    driver = re.search(r"^driver (\S+)$", probe, re.M)
    cuda_drv = re.search(r"^cuda_driver_version (\d+)", probe, re.M)
    torch = {
        "torch_version": m.group(1),
        "torch_cuda": m.group(2),
        "cuda_available": m.group(3) == "True",
        "device_count": 1,
        "capability": [int(cap.group(1)), int(cap.group(2))],
        "device_name": cap.group(3),
        "arch_list": ast.literal_eval(arch.group(1)),
        "kernel": {"ok": True, "value": 56.0},
    }
    linkers, current = [], None
    for line in (h200 / "readelf_torch_cuda_needed.txt").read_text().splitlines():
        if line.startswith("/") and line.strip().endswith(".so"):
            current = {"path": line.strip(), "root": H200_SITE, "needs": [], "soname": None}
            linkers.append(current)
        elif (
            current is not None
            and (n := re.search(r"Shared library: \[([^\]]+)\]", line))
            and g1.elf.tracked(n.group(1))
        ):
            current["needs"].append(n.group(1))
    return {
        "torch": torch,
        "linkers": linkers,
        "driver_version": driver.group(1),
        "cuda_driver": int(cuda_drv.group(1)),
    }


def facts(rec: dict[str, Any], **changes: Any) -> g1.Facts:
    torch_owner = {"name": "torch", "version": rec["torch"]["torch_version"].split("+")[0], "hint": "torch"}
    base = g1.Facts(
        scan={
            "roots": [H200_SITE],
            "files": len(rec["linkers"]),
            "skipped": {},
            "linkers": rec["linkers"],
            "providers": [],
            "duration_s": 0.01,
        },
        owners={x["path"]: torch_owner for x in rec["linkers"]},
        driver_cuda=rec["cuda_driver"],
        driver_version=rec["driver_version"],
        gpus=[rec["torch"]["device_name"]],
        torch=dict(rec["torch"]),
        child={"ok": True, "finished": True, "describe": "ok"},
        dists={"torch": {"name": "torch", "version": rec["torch"]["torch_version"]}},
    )
    for key, value in changes.items():
        setattr(base, key, value)
    return base


GB10 = Params(profile="gb10", thresholds={"g1_cuda_major": 13.0})


def evaluate(f: g1.Facts, params: Params | None = None) -> Result:
    """As the engine decides: on the facts after their JSON round trip."""
    again = g1.Facts.from_dict(json.loads(json.dumps(f.to_dict())))
    return g1.evaluate(again, params or Params())


def add_linker(f: g1.Facts, rel: str, needs: list[str], owner: tuple[str, str] | None) -> str:
    path = f"{H200_SITE}/{rel}"
    f.scan["linkers"] = [
        *f.scan["linkers"],
        {"path": path, "root": H200_SITE, "needs": needs, "soname": None},
    ]
    if owner:
        f.owners[path] = {"name": owner[0], "version": owner[1], "hint": rel.split("/")[0].split(".")[0]}
    return path


def test_h200_recording_passes_with_one_major(h200: Path) -> None:
    rec = h200_recording(h200)
    result = evaluate(facts(rec))
    assert result.status is Status.PASS, result.line()
    assert result.summary.startswith("torch 2.11.0+cu130 (CUDA 13.0), driver supports CUDA 13.0")
    assert "all 2 CUDA-linked shared objects use CUDA 13" in result.summary
    assert "tiny kernel ran on NVIDIA H200" in result.summary
    assert result.reading("cuda_major").value == 13
    assert result.reading("mismatched_objects").value == 0


def test_the_line_does_not_change_with_the_scan_time(h200: Path) -> None:
    """The same machine prints the same G-line (serial vs xdist, CLI vs plugin);
    the scan time is a reading only."""
    slow, fast = facts(h200_recording(h200)), facts(h200_recording(h200))
    slow.scan["duration_s"], fast.scan["duration_s"] = 0.4321, 0.0123
    a, b = evaluate(slow), evaluate(fast)
    assert a.line() == b.line()
    assert (a.reading("elf_scan_time").value, b.reading("elf_scan_time").value) == (432.1, 12.3)


def test_gb10_with_cu130_torch_passes_and_requires_13(h200: Path) -> None:
    rec = h200_recording(h200)
    rec["torch"].update(capability=[12, 1], device_name="NVIDIA GB10")
    f = facts(rec, gpus=["NVIDIA GB10"], driver_version="580.95.05")
    assert evaluate(f, GB10).status is Status.PASS


def test_gb10_with_a_cu128_torch_fails() -> None:
    rec = {
        "torch": {**gb10.TORCH, "torch_version": "2.7.0+cu128", "torch_cuda": "12.8", "kernel": {"ok": True}},
        "linkers": [],
        "cuda_driver": 13000,
        "driver_version": "580.95.05",
    }
    rec["torch"]["device_name"] = "NVIDIA GB10"
    result = evaluate(facts(rec), GB10)
    assert result.status is Status.FAIL
    assert "torch 2.7.0+cu128 is built for CUDA 12.8; GB10 (SM121) needs a CUDA 13 build" in result.summary
    assert "whl/cu130" in result.fix


def test_ngc_torch_without_a_cu_tag_is_not_a_failure(h200: Path) -> None:
    rec = h200_recording(h200)
    rec["torch"]["torch_version"] = "2.9.0a0+50eac811a6.nv25.09"
    f = facts(rec)
    result = evaluate(f, GB10)
    assert result.status is Status.PASS, result.line()
    assert "2.9.0a0+50eac811a6.nv25.09 (CUDA 13.0)" in result.summary


def test_torch_newer_than_the_driver_fails(h200: Path) -> None:
    result = evaluate(facts(h200_recording(h200), driver_cuda=12080, driver_version="570.86.15"))
    assert result.status is Status.FAIL
    assert "needs CUDA 13 but the driver (570.86.15) supports CUDA 12.8" in result.summary
    assert "upgrade the NVIDIA driver" in result.fix


def test_a_cu12_module_is_named_with_its_distribution(h200: Path) -> None:
    f = facts(h200_recording(h200))
    add_linker(
        f,
        "flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so",
        ["libcudart.so.12"],
        ("flash-attn", "2.7.4.post1"),
    )
    add_linker(f, "xformers/_C.so", ["libcublas.so.12", "libcudart.so.12"], ("xformers", "0.0.29"))
    add_linker(f, "stray/_ext.so", ["libnvrtc.so.12"], None)
    result = evaluate(f)
    assert result.status is Status.FAIL
    assert result.summary.startswith(
        "3 shared objects link another CUDA major than torch 2.11.0+cu130 (CUDA 13.0):"
    )
    assert (
        "flash-attn 2.7.4.post1 (flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so -> libcudart.so.12)"
        in result.summary
    )
    assert "xformers 0.0.29 (_C.so -> libcublas.so.12, libcudart.so.12)" in result.summary
    assert "stray/_ext.so (no installed distribution lists it)" in result.summary
    assert result.fix.startswith("pip uninstall flash-attn xformers and reinstall builds for CUDA 13")
    assert result.reading("mismatched_objects").value == 3


def test_a_package_shipping_one_build_per_major_is_not_mixed(h200: Path) -> None:
    f = facts(h200_recording(h200))
    add_linker(f, "bitsandbytes/libbitsandbytes_cuda126.so", ["libcudart.so.12"], ("bitsandbytes", "0.48.1"))
    add_linker(f, "bitsandbytes/libbitsandbytes_cuda130.so", ["libcudart.so.13"], ("bitsandbytes", "0.48.1"))
    result = evaluate(f)
    assert result.status is Status.PASS, result.line()
    # issue 10: the line reads naturally — the set counts as the one build it loads
    assert "all 3 CUDA-linked shared objects use CUDA 13" in result.summary
    assert "bitsandbytes picks its CUDA 13.0 build of 2" in result.summary
    assert (
        "bitsandbytes 0.48.1 ships 2 CUDA builds (12.6–13.0); it loads its CUDA 13.0 build" in result.details
    )


def test_leftover_cuda12_runtime_linked_by_nothing_warns(h200: Path) -> None:
    f = facts(h200_recording(h200))
    rt = f"{H200_SITE}/nvidia/cuda_runtime/lib/libcudart.so.12"
    f.scan["providers"] = [{"path": rt, "root": H200_SITE, "lib": "libcudart", "major": 12}]
    f.owners[rt] = {"name": "nvidia-cuda-runtime-cu12", "version": "12.8.90", "hint": "nvidia"}
    f.ldconfig = [
        {
            "name": "libcudart.so.12",
            "path": "/usr/local/cuda-12.8/lib64/libcudart.so.12",
            "lib": "libcudart",
            "major": 12,
        }
    ]
    result = evaluate(f)
    assert result.status is Status.WARN, result.line()
    assert result.summary.startswith(
        "leftover CUDA 12 libraries linked by nothing (libcudart.so.12 installed by "
    )
    assert (
        "nvidia-cuda-runtime-cu12 12.8.90, registered in ldconfig (/usr/local/cuda-12.8/lib64/libcudart.so.12)"
        in (result.summary)
    )
    assert "pip uninstall nvidia-cuda-runtime-cu12" in result.fix
    assert "ld.so.conf.d" in result.fix


def test_a_cuda12_runtime_that_something_links_is_not_a_leftover_but_a_mismatch(h200: Path) -> None:
    f = facts(h200_recording(h200))
    rt = f"{H200_SITE}/nvidia/cuda_runtime/lib/libcudart.so.12"
    f.scan["providers"] = [{"path": rt, "root": H200_SITE, "lib": "libcudart", "major": 12}]
    add_linker(f, "vllm/_C.abi3.so", ["libcudart.so.12"], ("vllm", "0.10.1"))
    result = evaluate(f)
    assert result.status is Status.FAIL
    assert "leftover" not in result.summary and "vllm 0.10.1" in result.summary


def test_no_torch_and_no_cuda_module_skips() -> None:
    f = g1.Facts(
        scan={"files": 12, "duration_s": 0.01, "linkers": [], "providers": []},
        torch={"torch_import_error": "ModuleNotFoundError: No module named 'torch'"},
        child={"ok": True, "finished": True},
    )
    result = evaluate(f)
    assert result.status is Status.SKIP
    assert result.summary.startswith("torch is not installed, and none of the 12 shared objects scanned")


def test_cpu_only_torch_on_a_gpu_machine_fails(h200: Path) -> None:
    rec = h200_recording(h200)
    rec["torch"].update(torch_version="2.13.0+cpu", torch_cuda=None, cuda_available=False, kernel=None)
    result = evaluate(facts(rec, scan={"files": 5, "linkers": [], "providers": []}))
    assert result.status is Status.FAIL
    assert result.summary.startswith("torch 2.13.0+cpu is a CPU-only build")
    assert "on a machine with NVIDIA H200 (driver 580.159.04, CUDA 13.0)" in result.summary
    assert "whl/cu130" in result.fix


def test_cpu_only_torch_without_a_gpu_skips_or_warns_with_cuda_modules() -> None:
    cpu = {"torch_version": "2.13.0+cpu", "torch_cuda": None, "cuda_available": False}
    base = {"torch": cpu, "child": {"ok": True, "finished": True}, "nvml_reason": "NVML unavailable"}
    skip = evaluate(g1.Facts(scan={"files": 256, "linkers": [], "providers": []}, **base))
    assert skip.status is Status.SKIP
    assert skip.summary.startswith("torch 2.13.0+cpu is CPU-only and there is no NVIDIA GPU")
    linker = {"path": "/s/cupy/_core.so", "root": "/s", "needs": ["libcudart.so.12"]}
    warn = evaluate(g1.Facts(scan={"files": 256, "linkers": [linker], "providers": []}, **base))
    assert warn.status is Status.WARN
    assert "torch 2.13.0+cpu is CPU-only, yet 1 shared object links CUDA 12" in warn.summary


@pytest.mark.parametrize(
    ("child", "expected"),
    [
        (
            {
                "signal": "SIGSEGV",
                "step": "tiny kernel",
                "describe": "torch child was killed by SIGSEGV during 'tiny kernel'",
            },
            "torch child was killed by SIGSEGV during 'tiny kernel' (a crash at the first CUDA call is the classic sign",
        ),
        (
            {
                "timed_out": True,
                "step": "import vllm",
                "describe": "torch child made no progress for 30 s during 'import vllm' (hung; killed)",
            },
            "torch child made no progress for 30 s during 'import vllm' (hung; killed)",
        ),
    ],
)
def test_a_child_that_dies_in_a_g1_step_fails_naming_signal_and_step(
    h200: Path, child: dict[str, Any], expected: str
) -> None:
    rec = h200_recording(h200)
    result = evaluate(facts(rec, child={"ok": False, "finished": False, **child}))
    assert result.status is Status.FAIL
    assert result.summary.startswith(expected)


def test_a_child_that_dies_in_another_checks_step_is_only_a_detail(h200: Path) -> None:
    rec = h200_recording(h200)
    child = {
        "ok": False,
        "finished": False,
        "signal": "SIGSEGV",
        "step": "flash_attn kernel",
        "describe": "x",
    }
    requested = [
        {"path": f"{H200_SITE}/torchvision/_C.so", "name": "torchvision/_C.so", "module": "torchvision"}
    ]
    result = evaluate(facts(rec, child=child, requested=requested))
    assert result.status is Status.WARN  # torchvision's object was never loaded
    assert "extension objects not loaded (torchvision/_C.so)" in result.summary


def test_torch_that_dies_at_import_still_gets_its_major_from_the_files(h200: Path) -> None:
    rec = h200_recording(h200)
    child = {"ok": False, "finished": False, "signal": "SIGSEGV", "step": "import torch", "describe": "died"}
    f = facts(rec, torch={}, child=child)
    add_linker(f, "flash_attn_2_cuda.so", ["libcudart.so.12"], ("flash-attn", "2.7.4"))
    result = evaluate(f)
    assert result.status is Status.FAIL
    assert result.reading("cuda_major").value == 13  # from torch's +cu130 tag
    assert "flash-attn 2.7.4" in result.summary


FA_SO = f"{H200_SITE}/flash_attn_2_cuda.so"


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (
            f"{FA_SO}: undefined symbol: _ZN3c104cuda9SetDeviceEi",
            "flash-attn 2.7.4: flash_attn_2_cuda.so does not load: undefined symbol: _ZN3c104cuda9SetDeviceEi",
        ),
        (
            "libcudart.so.13: cannot open shared object file: No such file or directory",
            "flash-attn 2.7.4: flash_attn_2_cuda.so does not load: libcudart.so.13: cannot open shared object file",
        ),
    ],
)
def test_objects_that_do_not_load_fail_naming_object_library_and_distribution(
    h200: Path, error: str, expected: str
) -> None:
    rec = h200_recording(h200)
    rec["torch"].update(loaded=3, load_failed={FA_SO: {"ok": False, "error": error}})
    f = facts(rec, requested=[{"path": FA_SO, "name": "flash_attn_2_cuda.so", "module": "flash_attn_2_cuda"}])
    f.owners[FA_SO] = {"name": "flash-attn", "version": "2.7.4", "hint": "flash_attn_2_cuda"}
    result = evaluate(f)
    assert result.status is Status.FAIL
    assert result.summary.startswith(expected)
    assert "flash-attn" in result.fix
    assert result.reading("objects_loaded").value == 2


def test_an_object_that_loads_once_its_package_is_imported_is_not_a_failure(h200: Path) -> None:
    """A package may preload a library its objects need (ctypes, RTLD_GLOBAL):
    the child retries such an object after importing the package."""
    rec = h200_recording(h200)
    outcome = {"ok": False, "error": "libnvrtc.so.13: cannot open shared object file", "import": {"ok": True}}
    rec["torch"].update(loaded=1, load_failed={FA_SO: {**outcome, "retry_ok": True}})
    f = facts(rec, requested=[{"path": FA_SO, "name": "te/libte.so", "module": "te"}])
    result = evaluate(f)
    assert result.status is Status.PASS, result.line()
    assert "te/libte.so loads only once its package is imported (it preloads what it needs)" in result.details


def test_the_load_list_skips_torch_and_toolkits_and_groups_per_cuda_builds() -> None:
    scan = {
        "linkers": [
            {"path": "/s/vendor_ext/_C.so", "root": "/s", "needs": ["libcudart.so.13"]},
            {"path": "/s/torch/lib/libc10_cuda.so", "root": "/s", "needs": ["libcudart.so.13"]},
            {"path": "/s/bnb/libbitsandbytes_cuda126.so", "root": "/s", "needs": ["libcudart.so.12"]},
            {"path": "/s/bnb/libbitsandbytes_cuda130.so", "root": "/s", "needs": ["libcudart.so.13"]},
        ],
        "torch_linked": [{"path": "/s/torchvision/_C.so", "root": "/s"}],
    }
    owners = {
        "/s/vendor_ext/_C.so": {"name": "Vendor_Ext", "version": "1", "hint": "vendor_ext"},
        "/s/torch/lib/libc10_cuda.so": {"name": "torch", "version": "2.11", "hint": "torch"},
    }
    entries = g1.load_list(scan, owners)
    assert [e["name"] for e in entries] == [
        "vendor_ext/_C.so",
        "bnb/libbitsandbytes_cuda126.so",
        "bnb/libbitsandbytes_cuda130.so",
        "torchvision/_C.so",
    ]
    assert entries[0]["module"] == "vendor_ext" and "group" not in entries[0]
    assert [e.get("tag") for e in entries[1:3]] == [126, 130]
    assert entries[1]["group"] == entries[2]["group"] == "/s/bnb/libbitsandbytes_cuda*.so"


@pytest.mark.parametrize(
    ("tags", "cuda", "picked"),
    [
        ([118, 121, 126, 128, 130, 132], "13.0", 130),
        ([118, 126, 128, 132], "13.0", 132),
        ([118, 121, 126], "12.8", 126),
        ([118, 126], "13.0", None),
        ([126, 130], None, None),
    ],
)
def test_pick_variant(tags: list[int], cuda: str | None, picked: int | None) -> None:
    assert g1.pick_variant(tags, cuda) == picked


@pytest.mark.parametrize(
    ("version", "major"),
    [
        ("2.11.0+cu130", 13),
        ("2.7.0+cu128", 12),
        ("2.1.0+cu118", 11),
        ("2.9.0a0+50eac811a6.nv25.09", None),
        (None, None),
    ],
)
def test_torch_cu_tag(version: str | None, major: int | None) -> None:
    assert g1.tag_major(version) == major


# ---------------------------------------------------------------------- through the machine


H200_NVML = gb10.nvml(
    driver_version="580.159.04",
    device={
        "name": "NVIDIA H200",
        "capability": [9, 0],
        "memory": {"total": 150109880320, "free": 149557477376, "used": 552402944},
    },
)
H200_TORCH = gb10.torch(
    name="NVIDIA H200",
    capability=[9, 0],
    arch_list=["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"],
    is_integrated=False,
)
LDCONFIG = """#!/bin/sh
cat <<'EOF'
3 libs found in cache `/etc/ld.so.cache'
\tlibz.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libz.so.1
{extra}EOF
"""


def machine_for(
    doubles,
    site: Path,
    *,
    torch: dict | None = H200_TORCH,
    ldconfig: str = "",
    timeout: float = 5.0,
    **env: str,
) -> Machine:
    doubles.nvml(H200_NVML)
    if torch is not None:
        doubles.torch(torch)
    doubles.pythonpath.append(str(site))
    doubles.tool("ldconfig", LDCONFIG.format(extra=ldconfig))
    doubles.extra["LD_LIBRARY_PATH"] = ""
    doubles.extra.update(env)
    return Machine(env=doubles.env, timeout=timeout)


def run_g1(machine: Machine) -> Result:
    return Engine(Settings(only=("G1",)), machine).run("G1")


def cu13_runtime(kit: elfkit.Kit, site: Path) -> None:
    elfkit.install(site, "nvidia-cuda-runtime", "13.0.96", {"nvidia/cu13/lib/libcudart.so.13": kit.cudart13})


def test_real_cu13_module_passes_and_is_loaded(kit, isolated, doubles, tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    cu13_runtime(kit, site)
    elfkit.install(site, "cu13-kernels", "1.0", {"cu13rp" + elfkit.EXT_SUFFIX: kit.ext13_rpath})
    elfkit.install(site, "fft-user", "1.0", {"fftuser/_C.so": kit.ext13})  # also needs libcufft.so.12: fine
    # fftuser finds its CUDA 13 libraries (and libcufft.so.12, part of CUDA 13) on LD_LIBRARY_PATH
    result = run_g1(machine_for(doubles, site, LD_LIBRARY_PATH=str(kit.cudart13.parent)))
    assert result.status is Status.PASS, result.report_text()
    assert "all 2 CUDA-linked shared objects use CUDA 13" in result.summary
    # both real modules were dlopen'ed: cu13rp found its libcudart.so.13 via RUNPATH
    assert "2 extension objects loaded" in result.summary
    assert result.reading("objects_loaded").value == 2
    assert result.reading("elf_files_scanned").value == 3
    assert isinstance(result.reading("elf_scan_time").value, float)


def test_real_cu12_module_fails_statically_and_on_import(kit, isolated, doubles, tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    cu13_runtime(kit, site)
    elfkit.install(
        site,
        "flash-attn",
        "2.7.4.post1",
        {
            "flash_attn_2_cuda" + elfkit.EXT_SUFFIX: kit.ext12,
            "flash_attn/__init__.py": "import flash_attn_2_cuda\n__version__ = '2.7.4.post1'\n",
        },
    )
    result = run_g1(machine_for(doubles, site))
    assert result.status is Status.FAIL, result.report_text()
    assert result.summary.startswith(
        "1 shared object links another CUDA major than torch 2.11.0+cu130 (CUDA 13.0): flash-attn 2.7.4.post1 "
        f"(flash_attn_2_cuda{elfkit.EXT_SUFFIX} -> libcudart.so.12: cannot open shared object file)"
    )
    assert result.summary.count("cannot open shared object file") == 1  # said once, with its object
    assert result.fix.startswith("pip uninstall flash-attn")


def test_real_undefined_symbol_is_quoted(kit, isolated, doubles, tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    elfkit.install(site, "sym-kernels", "0.1", {"symext" + elfkit.EXT_SUFFIX: kit.ext_symbol})
    # at run time the loader finds a libcudart.so.13 without the symbol the module was linked against
    machine = machine_for(doubles, site, LD_LIBRARY_PATH=str(kit.cudart13.parent))
    result = run_g1(machine)
    assert result.status is Status.FAIL, result.report_text()
    assert result.summary == (
        f"sym-kernels 0.1: symext{elfkit.EXT_SUFFIX} does not load: undefined symbol: cudaOnlyIn131"
    )
    assert "reinstall sym-kernels built against torch 2.11.0+cu130" in result.fix


def test_leftover_cu12_wheel_and_ldconfig_entry_warn(kit, isolated, doubles, tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    cu13_runtime(kit, site)
    elfkit.install(site, "cu13-kernels", "1.0", {"cu13rp" + elfkit.EXT_SUFFIX: kit.ext13_rpath})
    elfkit.install(
        site, "nvidia-cuda-runtime-cu12", "12.8.90", {"nvidia/cuda_runtime/lib/libcudart.so.12": kit.cudart12}
    )
    extra = "\tlibcudart.so.12 (libc6,x86-64) => /usr/local/cuda-12.8/lib64/libcudart.so.12\n"
    result = run_g1(machine_for(doubles, site, ldconfig=extra))
    assert result.status is Status.WARN, result.report_text()
    assert (
        "libcudart.so.12 installed by nvidia-cuda-runtime-cu12 12.8.90, registered in ldconfig"
        in result.summary
    )
    assert "pip uninstall nvidia-cuda-runtime-cu12" in result.fix
    assert any("nvidia-cuda-runtime-cu12" in d for d in result.details)


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        (
            {"crash": {"where": "kernel", "signal": "SIGSEGV"}},
            "torch child was killed by SIGSEGV during 'tiny kernel'",
        ),
        (
            {"crash": {"where": "import", "signal": "SIGABRT"}},
            "torch child was killed by SIGABRT during 'import torch'",
        ),
        (
            {"crash": {"where": "cuda_init", "signal": "SIGSEGV"}},
            "torch child was killed by SIGSEGV during 'cuda init'",
        ),
        (
            {"import_error": "libcudart.so.13: cannot open shared object file: No such file or directory"},
            "torch is installed but does not import: ImportError: libcudart.so.13: cannot open shared object file",
        ),
        ({"half": True}, "torch child stopped before finishing during 'import torch'"),
        (
            {"kernel_error": "CUDA error: no kernel image is available for execution on the device"},
            "torch's tiny kernel failed on NVIDIA H200: RuntimeError: CUDA error: no kernel image is available",
        ),
    ],
)
def test_torch_child_failures_fail_g1(isolated, doubles, tmp_path: Path, fault: dict, expected: str) -> None:
    result = run_g1(machine_for(doubles, tmp_path / "site-packages", torch={**H200_TORCH, **fault}))
    assert result.status is Status.FAIL, result.report_text()
    assert result.summary.startswith(expected)


def test_a_hung_torch_child_is_killed_within_the_timeout(isolated, doubles, tmp_path: Path) -> None:
    timeout = 0.4
    machine = machine_for(
        doubles,
        tmp_path / "site-packages",
        torch={**H200_TORCH, "hang": {"where": "kernel"}},
        timeout=timeout,
    )
    start = time.monotonic()
    result = run_g1(machine)
    elapsed = time.monotonic() - start
    assert result.status is Status.FAIL
    assert "during 'tiny kernel' (hung; killed)" in result.summary
    # the kernel step's allowance is 2 x timeout; the NVML child and the start-up come on top
    assert elapsed < 2 * timeout + 4, elapsed


def test_garbage_on_the_childs_stdout_is_not_a_failure(isolated, doubles, tmp_path: Path) -> None:
    result = run_g1(
        machine_for(doubles, tmp_path / "site-packages", torch={**H200_TORCH, "garbage": "WARNING: not json"})
    )
    assert result.status is Status.PASS, result.report_text()
    assert "torch 2.11.0+cu130 (CUDA 13.0)" in result.summary


def test_without_torch_and_cuda_modules_skips(kit, isolated, doubles, tmp_path: Path) -> None:
    """A real interpreter without torch (a fresh venv), no GPU driver library."""
    import subprocess

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    site = tmp_path / "site-packages"
    elfkit.install(site, "plain", "1.0", {"plainext" + elfkit.EXT_SUFFIX: kit.plain})
    doubles.pythonpath.append(str(site))
    doubles.tool("ldconfig", LDCONFIG.format(extra=""))
    machine = Machine(env=doubles.env, timeout=5, python=str(venv / "bin" / "python"))
    result = run_g1(machine)
    assert result.status is Status.SKIP, result.report_text()
    assert result.summary.startswith("torch is not installed, and none of the 1 shared objects scanned")


def test_the_scan_runs_once_per_run_and_is_json(kit, isolated, doubles, tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    cu13_runtime(kit, site)
    machine = machine_for(doubles, site)
    engine = Engine(Settings(only=("G1",)), machine)
    request = engine.torch_request()
    assert request["load"] == []  # nothing but a toolkit library is installed
    first = machine.store.peek("elf:scan")
    engine.run("G1")
    assert machine.store.peek("elf:scan") is first  # the same stored answer, not a second scan


def test_skipped_files_and_an_early_stop_are_reported(h200: Path) -> None:
    f = facts(h200_recording(h200))
    f.scan.update(skipped={"truncated": 2, "symlink_loop": 1}, stopped="time budget")
    result = evaluate(f)
    assert result.status is Status.PASS
    assert result.reading("elf_skipped").value == 3
    assert "skipped while scanning: 1 symlink loop, 2 truncated" in result.details
    assert "the scan stopped early (time budget): files after that were not read" in result.details
