"""G1 — CUDA 12/13 ABI.

``evaluate()`` on recorded input (the H200's readelf of a cu130 torch and its
NVML/torch probe; GB10 facts from docs/EVIDENCE.md), then the whole check through
``Engine`` + ``Machine`` with real gcc-built extension modules in a fake
site-packages, the torch double in the child, and a fake ``ldconfig``.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_dgx_spark.checks.g01_cuda_abi import check as g1
from pytest_dgx_spark.checks.g01_cuda_abi import gather as g1_gather
from pytest_dgx_spark.checks.g01_cuda_abi import view as g1_view
from pytest_dgx_spark.checks.g01_cuda_abi.facts import Load, Owner
from pytest_dgx_spark.checks.kit import Params
from pytest_dgx_spark.checks.record import plain
from pytest_dgx_spark.engine import Engine
from pytest_dgx_spark.model import Result, Status
from pytest_dgx_spark.probes import elf
from pytest_dgx_spark.probes.machine import Machine
from pytest_dgx_spark.settings import Settings

from conftest import make_root
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
            and elf.tracked(n.group(1))
        ):
            current["needs"].append(n.group(1))
    return {
        "torch": torch,
        "linkers": linkers,
        "driver_version": driver.group(1),
        "cuda_driver": int(cuda_drv.group(1)),
    }


def as_facts(**fields: Any) -> g1.Facts:
    """G1's facts from their JSON form, as a capture (or another process) hands them over."""
    return g1.Facts.from_dict(plain(fields))


def facts(rec: dict[str, Any], **changes: Any) -> g1.Facts:
    torch_owner = {"name": "torch", "version": rec["torch"]["torch_version"].split("+")[0], "hint": "torch"}
    base = dict(
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
    return as_facts(**{**base, **changes})


GB10 = Params(profile="gb10")  # g1_cuda_major: the profile default, 13


def evaluate(f: g1.Facts, params: Params | None = None) -> Result:
    """As the engine decides: on the facts after their JSON round trip."""
    again = g1.Facts.from_dict(json.loads(json.dumps(f.to_dict())))
    return g1.evaluate(again, params or Params())


def add_linker(f: g1.Facts, rel: str, needs: list[str], owner: tuple[str, str] | None) -> str:
    path = f"{H200_SITE}/{rel}"
    f.scan.linkers.append(elf.Linker(path, H200_SITE, needs))
    if owner:
        f.owners[path] = Owner(owner[0], owner[1], rel.split("/")[0].split(".")[0])
    return path


def test_h200_recording_passes_with_one_major(h200: Path) -> None:
    rec = h200_recording(h200)
    result = evaluate(facts(rec))
    assert result.status is Status.PASS and result.codes == [], result.line()
    assert result.summary.startswith("torch 2.11.0+cu130 (CUDA 13.0), driver supports CUDA 13.0")
    assert "all 2 CUDA-linked shared objects use CUDA 13" in result.summary
    assert "tiny kernel ran on NVIDIA H200" in result.summary
    assert result.reading("cuda_major").value == 13
    assert result.reading("mismatched_objects").value == 0


def test_the_line_does_not_change_with_the_scan_time(h200: Path) -> None:
    """The same machine prints the same G-line (serial vs xdist, CLI vs plugin);
    the scan time is a reading only."""
    slow, fast = facts(h200_recording(h200)), facts(h200_recording(h200))
    slow.scan.duration_s, fast.scan.duration_s = 0.4321, 0.0123
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
    assert result.status is Status.FAIL and result.codes == ["G1.torch-cuda-major"], result.line()
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
    assert result.status is Status.FAIL and result.codes == ["G1.driver-too-old"], result.line()
    assert "needs CUDA 13 but the driver (570.86.15) supports CUDA 12.8" in result.summary


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
    assert result.status is Status.FAIL and result.codes == ["G1.cuda-major-mismatch"], result.line()
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
    f.scan.providers = [elf.Provider(rt, "libcudart", 12, root=H200_SITE)]
    f.owners[rt] = Owner("nvidia-cuda-runtime-cu12", "12.8.90", "nvidia")
    f.ldconfig = [elf.Provider("/usr/local/cuda-12.8/lib64/libcudart.so.12", "libcudart", 12, name="libcudart.so.12")]
    result = evaluate(f)
    assert result.status is Status.WARN and result.codes == ["G1.leftover-runtime"], result.line()
    assert result.summary.startswith("leftover CUDA 12 libraries linked by nothing (libcudart.so.12 installed by ")
    assert (
        "nvidia-cuda-runtime-cu12 12.8.90, registered in ldconfig (/usr/local/cuda-12.8/lib64/libcudart.so.12)"
        in (result.summary)
    )
    assert "pip uninstall nvidia-cuda-runtime-cu12" in result.fix
    assert "ld.so.conf.d" in result.fix  # the ldconfig entry's own step


def test_a_cuda12_runtime_that_something_links_is_not_a_leftover_but_a_mismatch(h200: Path) -> None:
    f = facts(h200_recording(h200))
    rt = f"{H200_SITE}/nvidia/cuda_runtime/lib/libcudart.so.12"
    f.scan.providers = [elf.Provider(rt, "libcudart", 12, root=H200_SITE)]
    add_linker(f, "vllm/_C.abi3.so", ["libcudart.so.12"], ("vllm", "0.10.1"))
    result = evaluate(f)
    assert result.codes == ["G1.cuda-major-mismatch"], result.line()  # not G1.leftover-runtime
    assert "vllm 0.10.1" in result.summary


def test_no_torch_and_no_cuda_module_skips() -> None:
    f = as_facts(
        scan={"files": 12, "duration_s": 0.01, "linkers": [], "providers": []},
        torch={"torch_import_error": "ModuleNotFoundError: No module named 'torch'"},
        child={"ok": True, "finished": True},
    )
    result = evaluate(f)
    assert result.status is Status.SKIP and result.codes == ["G1.nothing-to-check"], result.line()
    assert result.summary.startswith("torch is not installed, and none of the 12 shared objects scanned")


def test_cpu_only_torch_on_a_gpu_machine_fails(h200: Path) -> None:
    rec = h200_recording(h200)
    rec["torch"].update(torch_version="2.13.0+cpu", torch_cuda=None, cuda_available=False, kernel=None)
    result = evaluate(facts(rec, scan={"files": 5, "linkers": [], "providers": []}))
    assert result.status is Status.FAIL and result.codes == ["G1.torch-cpu-only"], result.line()
    assert result.summary.startswith("torch 2.13.0+cpu is")
    assert "on a machine with NVIDIA H200 (driver 580.159.04, CUDA 13.0)" in result.summary
    assert "whl/cu130" in result.fix


def test_cpu_only_torch_without_a_gpu_skips_or_warns_with_cuda_modules() -> None:
    cpu = {"torch_version": "2.13.0+cpu", "torch_cuda": None, "cuda_available": False}
    base = {"torch": cpu, "child": {"ok": True, "finished": True}, "nvml_reason": "NVML unavailable"}
    skip = evaluate(as_facts(scan={"files": 256, "linkers": [], "providers": []}, **base))
    assert skip.status is Status.SKIP and skip.codes == ["G1.nothing-to-check"], skip.line()
    assert skip.summary.startswith("torch 2.13.0+cpu is CPU-only and there is no NVIDIA GPU")
    linker = {"path": "/s/cupy/_core.so", "root": "/s", "needs": ["libcudart.so.12"]}
    warn = evaluate(as_facts(scan={"files": 256, "linkers": [linker], "providers": []}, **base))
    assert warn.status is Status.WARN and warn.codes == ["G1.cpu-torch-cuda-modules"], warn.line()
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
    assert result.status is Status.FAIL and result.codes == ["G1.child-died"], result.line()
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
    assert result.status is Status.WARN and result.codes == ["G1.not-loaded"]  # never loaded
    assert "(torchvision/_C.so)" in result.summary


def test_torch_that_dies_at_import_still_gets_its_major_from_the_files(h200: Path) -> None:
    rec = h200_recording(h200)
    child = {"ok": False, "finished": False, "signal": "SIGSEGV", "step": "import torch", "describe": "died"}
    f = facts(rec, torch={}, child=child)
    add_linker(f, "flash_attn_2_cuda.so", ["libcudart.so.12"], ("flash-attn", "2.7.4"))
    result = evaluate(f)
    assert result.codes == ["G1.child-died", "G1.cuda-major-mismatch"], result.line()
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
    f.owners[FA_SO] = Owner("flash-attn", "2.7.4", "flash_attn_2_cuda")
    result = evaluate(f)
    assert result.status is Status.FAIL and result.codes == ["G1.load-failed"], result.line()
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
    assert result.status is Status.PASS and result.codes == [], result.line()
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
    entries = g1_gather.load_list(
        elf.Scan.from_dict(scan), {p: g1.Facts.from_dict({"owners": {p: o}}).owners[p] for p, o in owners.items()}
    )
    assert [e.name for e in entries] == [
        "vendor_ext/_C.so",
        "bnb/libbitsandbytes_cuda126.so",
        "bnb/libbitsandbytes_cuda130.so",
        "torchvision/_C.so",
    ]
    assert entries[0].module == "vendor_ext" and entries[0].group is None
    assert "group" not in entries[0].request() and "tag" not in entries[0].request()  # as the child reads it
    assert [e.tag for e in entries[1:3]] == [126, 130]
    assert entries[1].group == entries[2].group == "/s/bnb/libbitsandbytes_cuda*.so"
    assert entries[1].request()["tag"] == 126


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
    assert g1_view.pick_variant(tags, cuda) == picked


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
    assert g1_view.tag_major(version) == major


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
    planted_root(doubles, {})
    return Machine(env=doubles.env, timeout=timeout)


def planted_root(doubles, files: dict[str, str]) -> Path:
    """The machine root G1 reads the driver stack under: what the test plants, never this box's
    ``/proc`` (on a GPU image its real module next to the NVML double would read as a mismatch)."""
    root = make_root(doubles.folder / "root", files)
    doubles.extra.setdefault("SPARK_PREFLIGHT_HOST_ROOT", str(root))
    return root


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
    assert result.status is Status.FAIL and result.codes == ["G1.cuda-major-mismatch"], result.report_text()
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
    assert result.status is Status.FAIL and result.codes == ["G1.load-failed"], result.report_text()
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
    assert result.status is Status.WARN and result.codes == ["G1.leftover-runtime"], result.report_text()
    assert (
        "libcudart.so.12 installed by nvidia-cuda-runtime-cu12 12.8.90, registered in ldconfig"
        in result.summary
    )
    assert "pip uninstall nvidia-cuda-runtime-cu12" in result.fix
    assert any("nvidia-cuda-runtime-cu12" in d for d in result.details)


@pytest.mark.parametrize(
    ("fault", "code", "expected"),
    [
        (
            {"crash": {"where": "kernel", "signal": "SIGSEGV"}},
            "G1.child-died",
            "torch child was killed by SIGSEGV during 'tiny kernel'",
        ),
        (
            {"crash": {"where": "import", "signal": "SIGABRT"}},
            "G1.child-died",
            "torch child was killed by SIGABRT during 'import torch'",
        ),
        (
            {"crash": {"where": "cuda_init", "signal": "SIGSEGV"}},
            "G1.child-died",
            "torch child was killed by SIGSEGV during 'cuda init'",
        ),
        (
            {"import_error": "libcudart.so.13: cannot open shared object file: No such file or directory"},
            "G1.torch-import-error",
            "torch is installed but does not import: ImportError: libcudart.so.13: cannot open shared object file",
        ),
        ({"half": True}, "G1.child-died", "torch child stopped before finishing during 'import torch'"),
        (
            {"kernel_error": "CUDA error: no kernel image is available for execution on the device"},
            "G1.kernel-failed",
            "torch's tiny kernel failed on NVIDIA H200: RuntimeError: CUDA error: no kernel image is available",
        ),
    ],
)
def test_torch_child_failures_fail_g1(
    isolated, doubles, tmp_path: Path, fault: dict, code: str, expected: str
) -> None:
    result = run_g1(machine_for(doubles, tmp_path / "site-packages", torch={**H200_TORCH, **fault}))
    assert result.status is Status.FAIL and result.codes == [code], result.report_text()
    assert result.summary.startswith(expected)  # the signal, the step, the error as the child said it


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
    assert result.status is Status.FAIL and result.codes == ["G1.child-died"], result.line()
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
    planted_root(doubles, {})
    machine = Machine(env=doubles.env, timeout=5, python=str(venv / "bin" / "python"))
    result = run_g1(machine)
    assert result.status is Status.SKIP and result.codes == ["G1.nothing-to-check"], result.report_text()
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
    f.scan.skipped, f.scan.stopped = {"truncated": 2, "symlink_loop": 1}, "time budget"
    result = evaluate(f)
    assert result.status is Status.PASS
    assert result.reading("elf_skipped").value == 3
    assert "skipped while scanning: 1 symlink loop, 2 truncated" in result.details
    assert "the scan stopped early (time budget): files after that were not read" in result.details


# ---------------------------------------------------------------------- GB10 field errors (issue 8)

GB10_DATA = Path(__file__).parent / "data" / "gb10"


def capture(name: str) -> str:
    """A capture's text without its ``# source:`` header line."""
    text = (GB10_DATA / name).read_text(encoding="utf-8")
    assert text.startswith("# source:"), name
    return text.split("\n", 1)[1]


def assert_short(result: Result) -> None:
    """Issue 11: a headline of a few words and, for a FAIL/WARN, a short fix."""
    assert result.headline and len(result.headline) <= 90, result.headline
    if result.status in (Status.FAIL, Status.WARN):
        assert result.short_fix and len(result.short_fix) <= 60, result.short_fix
    assert len(result.short_line()) <= 120


def test_healthy_gb10_from_a_real_spark_passes() -> None:
    """torch_arch_list_2.txt: a bare pip venv on a ThinkStation PGX (GB10), torch
    2.11.0+cu130, driver 580.159.03 CUDA 13.0, arch list up to sm_120 (no sm_121:
    healthy, sm_120 cubins run on 12.1). G1 must PASS."""
    doc = json.loads(capture("torch_arch_list_2.txt"))
    t = doc["modules"]["torch"]
    dev = t["cuda"]["devices"][0]
    smi = doc["commands"]["nvidia_smi"]["stdout"]
    driver = re.search(r"Driver Version: (\S+)\s+CUDA Version: (\d+)\.(\d+)", smi)
    assert driver and "sm_121" not in t["cuda"]["arch_list"]
    f = as_facts(
        scan={"files": 0, "linkers": [], "providers": []},
        dists={"torch": {"name": "torch", "version": t["version"]}},
        driver_cuda=int(driver.group(2)) * 1000 + int(driver.group(3)) * 10,
        driver_version=driver.group(1),
        gpus=[dev["name"]],
        arch=doc["platform"]["machine"],
        torch={
            "torch_version": t["version"],
            "torch_cuda": t["cuda"]["built_cuda"],
            "cuda_available": t["cuda"]["cuda_available"],
            "device_count": t["cuda"]["device_count"],
            "capability": dev["capability"],
            "device_name": dev["name"],
            "arch_list": t["cuda"]["arch_list"],
            "kernel": {"ok": True, "value": 56.0},  # what the child reports on a working GPU
        },
        child={"ok": True, "finished": True, "describe": "ok"},
    )
    result = evaluate(f, GB10)
    assert result.status is Status.PASS, result.line()
    assert result.summary.startswith("torch 2.11.0+cu130 (CUDA 13.0), driver supports CUDA 13.0")
    assert "sm_121" not in result.line()
    assert result.headline == "torch 2.11.0+cu130 on driver CUDA 13.0, kernel ok"
    assert_short(result)


def gb10_machine(doubles, site: Path, *, torch: dict | None = None, **env: str) -> Machine:
    doubles.nvml(gb10.nvml())
    doubles.torch(torch or gb10.torch())
    doubles.pythonpath.append(str(site))
    doubles.tool("ldconfig", LDCONFIG.format(extra=""))
    doubles.extra["LD_LIBRARY_PATH"] = ""
    doubles.extra.update(env)
    planted_root(doubles, {"proc/meminfo": gb10.meminfo(), **gb10.stack_files()})
    return Machine(env=doubles.env, timeout=5.0)


def run_gb10(machine: Machine) -> Result:
    return Engine(Settings(only=("G1",), profile="gb10"), machine).run("G1")


def test_healthy_gb10_through_the_whole_check_passes(kit, isolated, doubles, tmp_path: Path) -> None:
    """torch_arch_list_1.txt: torch 2.11.0+cu130, torch.version.cuda 13.0, arch list
    without sm_121, on a GB10 — with a real cu13 module installed: PASS."""
    assert '"torch_cuda": "13.0"' in capture("torch_arch_list_1.txt")
    site = tmp_path / "site-packages"
    cu13_runtime(kit, site)
    elfkit.install(site, "cu13-kernels", "1.0", {"cu13rp" + elfkit.EXT_SUFFIX: kit.ext13_rpath})
    arch = ["sm_80", "sm_90", "sm_100", "sm_110", "sm_120"]
    result = run_gb10(gb10_machine(doubles, site, torch=gb10.torch(arch_list=arch)))
    assert result.status is Status.PASS, result.report_text()
    assert "tiny kernel ran on NVIDIA GB10" in result.summary
    assert_short(result)


def test_sgl_kernel_linked_to_cuda12_on_a_cuda13_spark_fails_as_the_capture_shows(
    kit, isolated, doubles, tmp_path: Path
) -> None:
    """error_cuda12_abi_3.txt (sgl-kernel 0.3.21, sm100/common_ops.abi3.so linked to
    libnvrtc.so.12/libcudart.so.12 on a CUDA-13-only Spark, driver 580.142) and
    error_cuda12_abi_1.txt ("ImportError: libnvrtc.so.12: cannot open shared object
    file"). A real object linked that way, no CUDA 12 library installed."""
    assert "libnvrtc.so.12: cannot open shared object file" in capture("error_cuda12_abi_1.txt")
    assert "sgl-kernel** | 0.3.21" in capture("error_cuda12_abi_3.txt")
    nvrtc12 = elfkit.stub_library(tmp_path / "cu12", "libnvrtc.so.12", 12080)
    ops = elfkit.extension(tmp_path / "mods", "common_ops", [nvrtc12, kit.cudart12])
    site = tmp_path / "site-packages"
    cu13_runtime(kit, site)
    elfkit.install(
        site,
        "sgl-kernel",
        "0.3.21",
        {"sgl_kernel/sm100/common_ops.abi3.so": ops, "sgl_kernel/__init__.py": ""},
    )
    torch = gb10.torch(version="2.9.1+cu130")
    result = run_gb10(gb10_machine(doubles, site, torch=torch))
    assert result.status is Status.FAIL and result.codes == ["G1.cuda-major-mismatch"], result.report_text()
    assert result.summary.startswith(
        "1 shared object links another CUDA major than torch 2.9.1+cu130 (CUDA 13.0): sgl-kernel 0.3.21 "
        "(common_ops.abi3.so -> libcudart.so.12, libnvrtc.so.12: cannot open shared object file)"
    )
    assert result.fix.startswith("pip uninstall sgl-kernel and reinstall builds for CUDA 13 (cu130 wheels")
    # the default line: distribution and version, the object and the library not found, the fix
    assert result.short_line() == (
        "G1 FAIL: sgl-kernel 0.3.21: common_ops.abi3.so: libnvrtc.so.12 not found; "
        "fix: reinstall sgl-kernel for CUDA 13"
    )
    assert_short(result)


@pytest.mark.parametrize(
    ("name", "version", "needle"),
    [
        ("error_cpu_torch_1.txt", "2.9.1+cpu", "PyTorch `2.9.1+cpu`"),
        ("container_vs_pip_2.txt", "2.10.0", "`torch==2.10.0` CPU build"),
    ],
)
def test_cpu_only_torch_next_to_a_working_gb10_driver_fails(
    isolated, doubles, tmp_path: Path, name: str, version: str, needle: str
) -> None:
    """error_cpu_torch_1.txt (PyTorch 2.9.1+cpu on a GB10), container_vs_pip_2.txt
    (PyPI torch==2.10.0, a CPU build on aarch64), error_cpu_torch_2.txt (driver
    580.95.05, CUDA 13.0 working), error_cpu_torch_3.txt ("Torch not compiled with
    CUDA enabled"): the whole check on the GB10 doubles."""
    assert needle in capture(name)
    assert "Torch not compiled with CUDA enabled" in capture("error_cpu_torch_3.txt")
    assert "Driver Version: 580.95.05      CUDA Version: 13.0" in capture("error_cpu_torch_2.txt")
    torch = gb10.torch(version=version, cuda=None, available=False)
    result = run_gb10(gb10_machine(doubles, tmp_path / "site-packages", torch=torch))
    assert result.status is Status.FAIL and result.codes == ["G1.torch-cpu-only"], result.report_text()
    assert result.summary.startswith(
        f'torch {version} is a CPU-only build (torch.version.cuda is None: "Torch not compiled with CUDA '
        'enabled") on a machine with NVIDIA GB10 (driver 580.173.02, CUDA 13.0)'
    )
    assert result.fix.startswith("pip install torch --index-url https://download.pytorch.org/whl/cu130")
    assert result.headline == f"torch {version} is CPU-only on NVIDIA GB10"
    assert_short(result)


def test_cpu_only_pypi_torch_on_aarch64_says_why() -> None:
    """container_vs_pip_2.txt: "Linux aarch64 CUDA builds of PyTorch have apparently
    only been available on PyPI since PyTorch 2.11"."""
    assert "only been available on PyPI since PyTorch 2.11" in capture("container_vs_pip_2.txt")
    base = {
        "scan": {"files": 3, "linkers": [], "providers": []},
        "driver_cuda": 13000,
        "driver_version": "580.95.05",
        "gpus": ["NVIDIA GB10"],
        "child": {"ok": True, "finished": True},
    }
    old = evaluate(
        as_facts(arch="aarch64", torch={"torch_version": "2.10.0", "torch_cuda": None}, **base), GB10
    )
    assert old.codes == ["G1.torch-cpu-only"], old.line()
    assert "PyPI's aarch64 torch before 2.11 is CPU-only" in old.fix
    new = evaluate(
        as_facts(arch="aarch64", torch={"torch_version": "2.11.0+cpu", "torch_cuda": None}, **base), GB10
    )
    assert new.codes == ["G1.torch-cpu-only"] and "before 2.11" not in new.fix


# ---------------------------------------------------------------------- loads (issue 10)


def test_a_torch_abi_undefined_symbol_is_named_with_object_and_distribution(
    kit, isolated, doubles, tmp_path: Path
) -> None:
    """A module built against another torch: it links libc10.so and calls a c10
    symbol the installed libc10.so lacks. dlopen(RTLD_NOW) resolves it at once."""
    symbol = "_ZN3c104cuda9SetDeviceEi"
    built_against = elfkit.stub_library(
        tmp_path / "old_torch", "libc10.so", 0, f"int {symbol}(int *v) {{ return 0; }}"
    )
    installed = elfkit.stub_library(tmp_path / "new_torch", "libc10.so", 0)
    ext = elfkit.extension(
        tmp_path / "mods", "flash_attn_2_cuda", [built_against], call=[symbol], rpath="$ORIGIN/c10stub"
    )
    site = tmp_path / "site-packages"
    name = "flash_attn_2_cuda" + elfkit.EXT_SUFFIX
    elfkit.install(site, "flash-attn", "2.8.3", {name: ext, "c10stub/libc10.so": installed})
    result = run_g1(machine_for(doubles, site))
    assert result.status is Status.FAIL and result.codes == ["G1.load-failed"], result.report_text()
    assert result.summary == f"flash-attn 2.8.3: {name} does not load: undefined symbol: {symbol}"
    assert result.fix.startswith(
        "reinstall flash-attn built against torch 2.11.0+cu130 (pip install --force-reinstall --no-build-isolation "
        "flash-attn), or pip uninstall flash-attn"
    )
    assert result.headline == f"flash-attn 2.8.3: flash_attn_2_cuda.so: undefined symbol {symbol}"
    assert_short(result)


def bnb_site(kit: elfkit.Kit, tmp_path: Path, tags: list[int]) -> Path:
    """A bitsandbytes-style package: one build per CUDA version, each linking its runtime."""
    site = tmp_path / "site-packages"
    cu13_runtime(kit, site)
    files: dict[str, Path | str] = {"bitsandbytes/__init__.py": ""}
    for tag in tags:
        runtime = kit.cudart13 if tag >= 130 else kit.cudart12
        built = elfkit.extension(
            tmp_path / "bnb", f"libbitsandbytes_cuda{tag}", [runtime], rpath="$ORIGIN/../nvidia/cu13/lib"
        )
        files[f"bitsandbytes/libbitsandbytes_cuda{tag}.so"] = built
    elfkit.install(site, "bitsandbytes", "0.48.1", files)
    return site


def test_a_per_cuda_package_loads_only_the_build_for_torchs_cuda(
    kit, isolated, doubles, tmp_path: Path
) -> None:
    """Only libbitsandbytes_cuda130.so is loaded (the CUDA 12 builds could not be:
    no libcudart.so.12 here), and the line says which build, not "CUDA 12/13"."""
    site = bnb_site(kit, tmp_path, [118, 126, 128, 130, 132])
    result = run_g1(machine_for(doubles, site))
    assert result.status is Status.PASS, result.report_text()
    assert "the one CUDA-linked shared object uses CUDA 13" in result.summary
    assert "bitsandbytes picks its CUDA 13.0 build of 5" in result.summary
    assert "1 extension object loaded" in result.summary
    assert "12/13" not in result.summary and "11/" not in result.summary
    assert (
        "bitsandbytes 0.48.1 ships 5 CUDA builds (11.8–13.2); it loads its CUDA 13.0 build" in result.details
    )
    assert_short(result)


def test_a_per_cuda_package_without_a_build_for_torchs_cuda_fails(
    kit, isolated, doubles, tmp_path: Path
) -> None:
    site = bnb_site(kit, tmp_path, [118, 126])
    result = run_g1(machine_for(doubles, site))
    assert result.status is Status.FAIL and result.codes == ["G1.no-cuda-variant"], result.report_text()
    assert (
        result.summary == "bitsandbytes 0.48.1 ships builds for CUDA 11.8–12.6 and none for torch's CUDA 13.0"
    )
    assert result.fix.startswith("pip install -U bitsandbytes")
    assert_short(result)


# ---------------------------------------------------------------------- the reference major (issue 11)


def no_torch_facts(**changes: Any) -> g1.Facts:
    """No torch; one cu12 and one cu13 module (the cu12 one scanned first)."""
    linkers = [
        {"path": "/s/cupy/_core.so", "root": "/s", "needs": ["libcudart.so.12"]},
        {"path": "/s/newkern/_C.so", "root": "/s", "needs": ["libcudart.so.13"]},
    ]
    base = dict(
        scan={"files": 40, "linkers": linkers, "providers": []},
        owners={
            "/s/cupy/_core.so": {"name": "cupy-cuda12x", "version": "13.6.0", "hint": "cupy"},
            "/s/newkern/_C.so": {"name": "newkern", "version": "1.0", "hint": "newkern"},
        },
        torch={"torch_import_error": "ModuleNotFoundError: No module named 'torch'"},
        child={"ok": True, "finished": True},
        nvml_reason="NVML Shared Library Not Found",
    )
    return as_facts(**{**base, **changes})


def test_without_torch_a_tie_never_blames_the_newer_major() -> None:
    """One cu12 and one cu13 module: a 1-1 tie is not "most"; the line says the
    newer major was taken, and why (nothing else to go by)."""
    result = evaluate(no_torch_facts())
    assert result.status is Status.FAIL and result.codes == ["G1.cuda-major-mismatch"], result.line()
    assert result.summary.startswith(
        "1 shared object links another CUDA major than the newer of the CUDA-linked modules' majors "
        "(CUDA 13; a tie, and no torch or driver to go by): cupy-cuda12x 13.6.0"
    )
    assert "most" not in result.line() and "most" not in result.short_line()
    assert "newkern" not in result.summary
    assert "reinstall builds for CUDA 13 (cu130 wheels" in result.fix
    assert result.short_line() == (
        "G1 FAIL: cupy-cuda12x 13.6.0: _core.so links libcudart.so.12 (CUDA 12 build); "
        "fix: reinstall cupy-cuda12x for CUDA 13"
    )
    assert_short(result)


def test_without_torch_a_majority_of_modules_is_the_reference() -> None:
    extra = {"path": "/s/other/_C.so", "root": "/s", "needs": ["libcudart.so.13"]}
    f = no_torch_facts()
    f.scan.linkers.append(elf.Linker.from_dict(extra))
    result = evaluate(f)
    assert result.codes == ["G1.cuda-major-mismatch"], result.line()
    assert "than most CUDA-linked modules (CUDA 13; 2 of 3): cupy-cuda12x 13.6.0" in result.summary


def test_the_recorded_cu12_module_fails_with_dist_library_and_fix_on_the_default_line() -> None:
    """tests/data/captures/h200-cu12.json.gz: a gcc-built extension linked to
    libcudart.so.12, next to torch 2.11.0+cu130 on the H200."""
    from pytest_dgx_spark import capture

    doc = capture.load(Path(__file__).parent / "data" / "captures" / "h200-cu12.json.gz")
    result = evaluate(g1.Facts.from_dict(doc["checks"]["G1"]["facts"]))
    assert result.codes == ["G1.cuda-major-mismatch"], result.line()
    assert result.short_line() == (
        "G1 FAIL: cu12-demo 0.1: _C.so: libcudart.so.12 not found (CUDA 12 build); "
        "fix: reinstall cu12-demo for CUDA 13"
    )
    assert "_C.cpython-312-x86_64-linux-gnu.so -> libcudart.so.12: cannot open shared object file" in result.line()
    assert_short(result)


def test_without_torch_the_drivers_cuda_is_the_reference() -> None:
    result = evaluate(no_torch_facts(driver_cuda=12080, driver_version="570.86.15", nvml_reason=None))
    assert result.status is Status.FAIL and result.codes == ["G1.cuda-major-mismatch"], result.line()
    assert "than the driver's CUDA 12.8: newkern 1.0 (_C.so -> libcudart.so.13)" in result.summary
    assert "reinstall builds for CUDA 12 (CUDA 12 wheels)" in result.fix
    assert "cu130" not in result.fix


def test_without_torch_or_driver_the_gb10_profile_is_the_reference() -> None:
    result = evaluate(no_torch_facts(), GB10)
    assert result.codes == ["G1.cuda-major-mismatch"], result.line()
    assert "than GB10's CUDA 13: cupy-cuda12x 13.6.0 (_core.so -> libcudart.so.12)" in result.summary
    assert "cu130 wheels" in result.fix


def test_every_g1_failure_has_a_short_line(h200: Path) -> None:
    rec = h200_recording(h200)
    for f, params in [
        (facts(rec, driver_cuda=12080, driver_version="570.86.15"), Params()),
        (
            facts(rec, child={"ok": False, "signal": "SIGSEGV", "step": "tiny kernel", "describe": "x"}),
            Params(),
        ),
        (no_torch_facts(), Params()),
    ]:
        assert_short(evaluate(f, params))


def test_a_replay_with_another_required_major_decides_again(h200: Path) -> None:
    """evaluate reads g1_cuda_major from params (not from the facts), so a replay
    with --spark-threshold g1_cuda_major=12 re-decides the same facts."""
    f = facts(h200_recording(h200))
    assert evaluate(f, GB10).status is Status.PASS
    stricter = Params(profile="gb10", thresholds={"g1_cuda_major": 12.0})
    result = evaluate(f, stricter)
    assert result.status is Status.FAIL and result.codes == ["G1.torch-cuda-major"], result.line()
    assert "needs a CUDA 12 build" in result.summary


ONCE = """
#include <stdlib.h>
extern int cudaRuntimeGetVersion(int *);
/* like a second TORCH_LIBRARY registration of one namespace: the second copy aborts */
__attribute__((constructor)) static void once(void) {
    if (getenv("SPARK_TEST_OPS_LOADED")) abort();
    setenv("SPARK_TEST_OPS_LOADED", "1", 1);
}
int ops_version(void) { int v = 0; cudaRuntimeGetVersion(&v); return v; }
"""


def test_per_arch_alternatives_are_loaded_one_per_process(kit, isolated, doubles, tmp_path: Path) -> None:
    """sgl-kernel ships ``sm90/common_ops.abi3.so`` and ``sm100/common_ops.abi3.so``
    and picks one by GPU arch (error_cuda12_abi_1.txt: "Architecture-specific
    pattern: …/sgl_kernel/sm100/common_ops.*"). Both register the same op
    library, so loading both aborts: the child loads the one for this GPU."""
    assert "sgl_kernel/sm100/common_ops" in capture("error_cuda12_abi_1.txt")
    src = tmp_path / "ops.c"
    src.write_text(ONCE)
    built = tmp_path / "common_ops.abi3.so"
    lib = kit.cudart13
    args = ["gcc", "-shared", "-fPIC", "-o", str(built), str(src), "-Wl,--no-as-needed"]
    args += [f"-L{lib.parent}", f"-l:{lib.name}", "-Wl,-rpath,$ORIGIN/../../nvidia/cu13/lib"]
    subprocess.run(args, check=True, timeout=60, capture_output=True)
    site = tmp_path / "site-packages"
    cu13_runtime(kit, site)
    files = {f"sgl_kernel/{arch}/common_ops.abi3.so": built for arch in ("sm90", "sm100")}
    elfkit.install(site, "sgl-kernel", "0.3.21", {**files, "sgl_kernel/__init__.py": ""})
    result = run_gb10(gb10_machine(doubles, site))
    assert result.status is Status.PASS, result.report_text()
    assert "1 extension object loaded" in result.summary
    assert (
        "sgl_kernel/*/common_ops.abi3.so: 2 builds per GPU arch, one loaded per process; "
        "loaded sgl_kernel/sm100/common_ops.abi3.so"
    ) in result.details


def test_facts_round_trip_through_json_to_the_same_result(h200: Path) -> None:
    f = facts(h200_recording(h200))
    add_linker(f, "xformers/_C.so", ["libcudart.so.12"], ("xformers", "0.0.29"))
    again = g1.Facts.from_dict(json.loads(json.dumps(f.to_dict())))
    assert again == f
    assert g1.evaluate(again, Params()).to_dict() == g1.evaluate(f, Params()).to_dict()


def test_three_leftover_libraries_are_counted_not_cut_with_an_ellipsis(h200: Path) -> None:
    """The warning showed two leftovers and ``; …`` for the rest; it now counts
    them by the kit's rule, and every one is still in the details."""
    f = facts(h200_recording(h200))
    f.scan.providers = []
    for lib, dist in (("libcudart", "cuda-runtime"), ("libcublas", "cublas"), ("libnvrtc", "cuda-nvrtc")):
        path = f"{H200_SITE}/nvidia/{lib}/lib/{lib}.so.12"
        f.scan.providers.append(elf.Provider(path, lib, 12, root=H200_SITE))
        f.owners[path] = Owner(f"nvidia-{dist}-cu12", "12.8.90", "nvidia")
    result = evaluate(f)
    assert result.status is Status.WARN and result.codes == ["G1.leftover-runtime"], result.line()
    assert "…" not in result.summary
    assert result.summary.startswith(
        "leftover CUDA 12 libraries linked by nothing (libcublas.so.12 installed by nvidia-cublas-cu12 12.8.90; "
        "libcudart.so.12 installed by nvidia-cuda-runtime-cu12 12.8.90; and 1 more)"
    ), result.summary
    assert "leftover: libnvrtc.so.12 installed by nvidia-cuda-nvrtc-cu12 12.8.90" in result.details


def test_a_third_warning_is_counted_in_the_line_and_listed_in_the_details(h200: Path) -> None:
    """G1's WARN joined the first two warnings and dropped a third from the line
    and the details alike. A CPU-only torch (no GPU) whose child was killed
    before the extension loads, next to a leftover CUDA 12 runtime and CUDA 13
    modules, warns three times: the line counts the third, the details hold it."""
    f = facts(h200_recording(h200))
    f.gpus = []
    f.torch.torch_version, f.torch.torch_cuda, f.torch.device_count, f.torch.loaded = "2.11.0+cpu", None, 0, 0
    f.child.signal, f.child.describe = "SIGKILL", "killed by SIGKILL in step 'flash_attn'"
    f.requested = [Load(name="vllm._C", path=f"{H200_SITE}/vllm/_C.so")]
    rt = f"{H200_SITE}/nvidia/cuda_runtime/lib/libcudart.so.12"
    f.scan.providers = [elf.Provider(rt, "libcudart", 12, root=H200_SITE)]
    result = evaluate(f)
    assert result.status is Status.WARN, result.line()
    assert result.codes == ["G1.not-loaded", "G1.leftover-runtime", "G1.cpu-torch-cuda-modules"]
    assert result.summary.startswith("extension objects not loaded (vllm._C): killed by SIGKILL")
    assert "; and 1 more; torch 2.11.0+cpu (CPU-only)" in result.summary
    assert result.details[0] == "torch 2.11.0+cpu is CPU-only, yet 2 shared objects link CUDA 13: they cannot run with this torch"


def test_a_child_that_dies_in_another_checks_step_after_every_load_leaves_g1_pass(h200: Path) -> None:
    """Every requested extension object loaded, then the torch child died in
    G2's step: nothing of G1's is unverified, so G1 PASSes (the death is a
    detail; G2 reports it) and says how many objects it loaded."""
    rec = h200_recording(h200)
    child = {"ok": False, "finished": False, "signal": "SIGSEGV", "step": "flash_attn kernel", "describe": "x"}
    requested = [
        {"path": f"{H200_SITE}/torchvision/_C.so", "name": "torchvision/_C.so", "module": "torchvision"}
    ]
    f = facts(rec, child=child, requested=requested)
    f.torch.loaded = 1
    result = evaluate(f)
    assert result.status is Status.PASS and result.codes == [], result.line()
    assert "1 extension object loaded" in result.summary
    assert "x (not a G1 step; G2/G5 report it)" in result.details
    assert result.reading("objects_loaded").value == 1
