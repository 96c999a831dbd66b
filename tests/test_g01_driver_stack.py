"""G1's driver stack (issue 22, N3): the kernel, the loaded module and its flavour, CMA,
NVML's user-space version, against the known-bad list (shipped and the user's).

``evaluate()`` on the texts Spark owners posted (``tests/data/gb10/``, each with its
``# source:`` line), then the whole check through ``Engine`` + ``Machine`` over a
planted machine root, and the option through the CLI.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_dgx_spark import known_bad
from pytest_dgx_spark.checks.g01_cuda_abi import check as g1
from pytest_dgx_spark.checks.g01_cuda_abi import stack as g1_stack
from pytest_dgx_spark.checks.kit import Params
from pytest_dgx_spark.checks.record import plain
from pytest_dgx_spark.engine import Engine
from pytest_dgx_spark.model import Result, Status
from pytest_dgx_spark.probes import procfs
from pytest_dgx_spark.probes.machine import Machine
from pytest_dgx_spark.settings import Settings

from conftest import make_root
from doubles import gb10

DATA = Path(__file__).parent / "data"
GB10 = Params(profile="gb10")
GENERIC = Params(profile="generic")


def posted(name: str) -> str:
    text = (DATA / "gb10" / name).read_text(encoding="utf-8")
    assert text.startswith("# source:"), name
    return text.split("\n", 1)[1]


def formats() -> tuple[str, str]:
    """The proprietary and the open layout of /proc/driver/nvidia/version (nvidia_version_formats.txt)."""
    text = (DATA / "driver" / "nvidia_version_formats.txt").read_text(encoding="utf-8").split("\n", 1)[1]
    proprietary, open_ = text.split("----\n")
    return proprietary, open_


def cma_of(meminfo_text: str) -> dict[str, int]:
    """The Cma lines of a posted /proc/meminfo, the poster's ``<- …`` annotation dropped."""
    lines = [line.split("<-", 1)[0].rstrip() for line in meminfo_text.splitlines()]
    fields = procfs.parse_meminfo("\n".join(lines))
    return {k: v for k, v in fields.items() if k in ("CmaTotal", "CmaFree")}


def stack(**changes: Any) -> g1.Facts:
    """A healthy GB10's facts (the double's values), then ``changes``."""
    base: dict[str, Any] = {
        "scan": {"files": 0, "linkers": [], "providers": []},
        "dists": {"torch": {"name": "torch", "version": "2.11.0+cu130"}},
        "driver_cuda": 13000,
        "driver_version": "580.173.02",
        "gpus": ["NVIDIA GB10"],
        "arch": "aarch64",
        "torch": {"torch_version": "2.11.0+cu130", "torch_cuda": "13.0", "cuda_available": True,
                  "device_count": 1, "kernel": {"ok": True, "value": 56.0}},
        "child": {"ok": True, "finished": True, "describe": "ok"},
        "stack_read": True,
        "kernel_release": gb10.OSRELEASE.strip(),
        "nvidia_module": gb10.NVIDIA_VERSION.strip(),
        "cma_kb": {},
        "nvml_version": "13.580.173.02",
        "known_bad": known_bad.shipped(),
    }  # fmt: skip
    base.update(changes)
    return g1.Facts.from_dict(plain(base))  # as a capture hands them over


def decide(f: g1.Facts, params: Params = GB10) -> Result:
    result = g1.evaluate(g1.Facts.from_dict(json.loads(json.dumps(f.to_dict()))), params)  # as a replay reads it
    assert result.to_dict() == g1.evaluate(f, params).to_dict()
    return result


def short_ok(result: Result) -> None:
    assert result.headline and len(result.headline) <= 90, result.headline
    assert result.short_fix and len(result.short_fix) <= 60, result.short_fix


# ---------------------------------------------------------------------- on the posted text


def test_a_healthy_spark_passes_and_shows_the_stack() -> None:
    """proc_driver_nvidia_version_1.txt: a Spark on 6.17.0-1031-nvidia with the open module 580.173.02."""
    assert gb10.NVIDIA_VERSION.strip() in posted("proc_driver_nvidia_version_1.txt")
    result = decide(stack())
    assert result.status is Status.PASS and result.codes == [], result.line()
    readings = {r.name: r.value for r in result.readings}
    assert readings["kernel_release"] == "6.17.0-1031-nvidia"
    assert readings["nvidia_module"] == "580.173.02 (open)"
    assert any(d.startswith("known-bad list: 5 entries") for d in result.details), result.details


def test_kernel_7_0_0_1019_with_cma_free_above_total_fails_with_the_kernel_fix() -> None:
    """proc_meminfo_4.txt (MiaAI-Lab/DeepSeek-v4-Flash-DSpark-2x-DGX-Spark#259): on 7.0.0-1019-nvidia
    ``CmaTotal: 0 kB`` / ``CmaFree: 940604 kB``; error_nccl_enomem_1.txt (MiaAI-Lab/DeepSeek-v4.1-Flash-
    DGX-Sparks#14): ``ibv_reg_mr_iova2 … Cannot allocate memory``, 6.17.0-1032-nvidia fixes it."""
    cma = cma_of(posted("proc_meminfo_4.txt"))
    assert cma == {"CmaTotal": 0, "CmaFree": 940604}
    kernel = re.search(r"kernel `(7\.0\.0-1019-nvidia)`", posted("error_nccl_enomem_1.txt"))
    assert kernel
    result = decide(stack(kernel_release=kernel.group(1), cma_kb=cma))
    assert result.status is Status.FAIL and result.codes == ["G1.known-bad"], result.line()  # not cma-accounting
    assert "kernel 7.0.0-1019-nvidia is known-bad (kernel-7.0.0-1019-nvidia)" in result.summary
    assert "ibv_reg_mr_iova2" in result.summary and "CmaFree > CmaTotal" in result.summary
    assert "6.17.0-1032-nvidia" in result.fix and "kho=off" in result.fix
    assert sum("CmaFree" in t for t in [result.summary, *result.details]) == 1  # said once, by the entry
    short_ok(result)


def test_kernel_7_0_0_1019_after_kho_off_only_warns() -> None:
    """proc_meminfo_4.txt's 'after kho=off' table: CmaFree 0 — the workaround holds on that kernel,
    so the kernel alone is a risk to name (WARN), not a block."""
    assert "**0**" in posted("proc_meminfo_4.txt")
    result = decide(stack(kernel_release="7.0.0-1019-nvidia", cma_kb={"CmaTotal": 0, "CmaFree": 0}))
    assert result.status is Status.WARN and result.codes == ["G1.known-bad"], result.line()
    assert "7.0.0-1019-nvidia" in result.summary and "kho=off" in result.fix


def test_cma_free_above_total_on_another_kernel_warns_with_the_kho_fix() -> None:
    """The tell alone (FIELD §4.2, proc_meminfo_4.txt), on a kernel no entry names."""
    result = decide(stack(kernel_release="7.0.0-1020-nvidia", cma_kb=cma_of(posted("proc_meminfo_4.txt"))))
    assert result.status is Status.WARN and result.codes == ["G1.cma-accounting"], result.line()
    assert "CmaFree 940604 kB > CmaTotal 0 kB" in result.summary
    assert "6.17.0-1032-nvidia" in result.fix and "kho=off" in result.fix
    short_ok(result)


def test_kernel_6_17_0_1008_warns_and_fails_when_the_gpu_is_gone() -> None:
    """FIELD F3b (NVIDIA forum t/366026): 6.17.0-1008-nvidia, ``Failed to query NVIDIA devices`` at boot."""
    seen = decide(stack(kernel_release="6.17.0-1008-nvidia"))
    assert seen.status is Status.WARN and seen.codes == ["G1.known-bad"], seen.line()
    assert "Failed to query NVIDIA devices" in seen.summary  # what breaks, as the entry says it
    gone = decide(stack(kernel_release="6.17.0-1008-nvidia", gpus=[], nvml_version=None), GENERIC)
    assert gone.status is Status.FAIL and gone.codes == ["G1.known-bad"], gone.line()
    assert "NVML sees no GPU" in gone.summary
    assert "no GPU visible: the known-bad entries for GB10 apply (an aarch64 '-nvidia' kernel)" in gone.details


def test_proprietary_modules_on_gb10_fail_as_start9_posted() -> None:
    """dmesg_xid_5.txt (Start9Labs/start-technologies PR #3693): 580.173.02's proprietary modules on a
    Spark give Xid 169 / RmInitAdapter failed; the open flavour works. The module line is the
    proprietary layout (nvidia_version_formats.txt) with that driver's version."""
    assert "Xid (PCI:000f:01:00): 169" in posted("dmesg_xid_5.txt")
    proprietary, _ = formats()
    line = proprietary.strip().replace("550.120", "580.173.02")
    assert procfs.module_of(line) == ("580.173.02", "proprietary")
    result = decide(stack(nvidia_module=line))
    assert result.status is Status.FAIL and result.codes == ["G1.known-bad"], result.line()
    assert "proprietary NVIDIA kernel modules 580.173.02 is known-bad" in result.summary
    assert "nvidia-driver-580-open" in result.fix
    short_ok(result)
    # the same modules on an H200 (generic profile, Hopper runs either flavour): nothing to say
    h200 = decide(stack(nvidia_module=line, gpus=["NVIDIA H200"], arch="x86_64"), GENERIC)
    assert h200.status is Status.PASS and h200.codes == [], h200.line()


def test_both_layouts_of_the_version_file_parse() -> None:
    proprietary, open_ = formats()
    assert procfs.module_of(proprietary) == ("550.120", "proprietary")
    assert procfs.module_of(open_.splitlines()[0]) == ("550.144.03", "open")
    assert procfs.module_of("NVRM version: something else") == (None, None)


def test_driver_library_version_mismatch_fails_with_reload() -> None:
    """NVML's own words for it (``NVMLError_LibRmVersionMismatch``, 'RM has detected an NVML/RM version
    mismatch'; nvidia-smi prints 'Driver/library version mismatch'): the module loaded is not the library."""
    refused = decide(stack(nvml_init_error="LibRmVersionMismatch", nvml_version=None, gpus=[]))
    assert refused.status is Status.FAIL and refused.codes == ["G1.driver-library-mismatch"], refused.line()
    assert "Driver/library version mismatch" in refused.summary  # nvidia-smi's words, searchable
    assert "modprobe nvidia" in refused.fix
    apart = decide(stack(nvidia_module="NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.95.05"))
    assert apart.status is Status.FAIL and apart.codes == ["G1.driver-library-mismatch"], apart.line()
    assert "580.95.05 but the user-space driver (NVML) is 580.173.02" in apart.summary
    short_ok(apart)


def test_newer_driver_branches_warn_naming_the_weak_source() -> None:
    """FIELD F3d: 590.x (conselara, page cut off) and r610 (ggml-org/llama.cpp#28659)."""
    line = "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  590.48.01"
    result = decide(stack(nvidia_module=line, nvml_version="13.590.48.01"))
    assert result.status is Status.WARN and result.codes == ["G1.known-bad"], result.line()
    assert "driver-590-branch" in result.summary
    assert "weak source" in result.summary


def test_the_h200s_nvml_library_version_is_its_driver_version() -> None:
    """tests/data/h200-cu130/nvml_sample_idle.json (the lent H200): NVML's ``13.580.159.04`` is the
    library of driver 580.159.04, so that machine's own module reads as no mismatch."""
    rec = json.loads((DATA / "h200-cu130" / "nvml_sample_idle.json").read_text())
    nv = rec.get("nvml", rec)
    assert g1_stack.userspace_version(nv["nvml_version"]) == nv["driver_version"] == "580.159.04"
    line = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04"
    h200 = stack(gpus=["NVIDIA H200"], arch="x86_64", kernel_release="6.18.44-fc-v657-gpu", nvidia_module=line,
                 nvml_version=nv["nvml_version"], driver_version=nv["driver_version"])  # fmt: skip
    assert decide(h200, GENERIC).status is Status.PASS


def test_a_capture_without_the_stack_decides_as_before() -> None:
    old = {k: v for k, v in stack(kernel_release="7.0.0-1019-nvidia").to_dict().items() if k not in g1.Facts.ADDED}
    result = g1.evaluate(g1.Facts.from_dict(old), GB10)
    assert result.status is Status.PASS and "kernel_release" not in {r.name for r in result.readings}


def test_without_torch_a_known_bad_kernel_still_warns() -> None:
    f = stack(kernel_release="7.0.0-1019-nvidia", torch={}, dists={}, child={})
    result = decide(f)
    assert result.status is Status.WARN and result.codes == ["G1.known-bad"], result.line()


# ---------------------------------------------------------------------- the list and the user's file


def test_the_shipped_list_names_a_source_and_a_fix_for_every_entry() -> None:
    entries = known_bad.shipped()
    assert {e.id for e in entries} >= {"kernel-7.0.0-1019-nvidia", "kernel-6.17.0-1008-nvidia", "proprietary-modules-gb10"}
    assert all(e.sources and e.fix and e.breaks for e in entries)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("{not json", "not JSON"),
        ('{"entries": {}}', 'expected an object {"entries": [...]}'),
        ('{"entries": [{"id": "x"}]}', "entry 1: 'sources' must be a non-empty list"),
        ('{"entries": [{"id": "x", "match": {"kernal": "6.*"}, "status": "FAIL", "breaks": "b", "fix": "f", '
         '"sources": ["s"]}]}', "unknown match key 'kernal'"),
        ('{"entries": [{"id": "x", "match": {"kernel": "6.*"}, "status": "BAD", "breaks": "b", "fix": "f", '
         '"sources": ["s"]}]}', "'status' must be one of FAIL, WARN"),
    ],
)
def test_a_malformed_file_is_one_line_naming_what_is_wrong(tmp_path: Path, text: str, said: str) -> None:
    path = tmp_path / "mine.json"
    path.write_text(text)
    with pytest.raises(known_bad.KnownBadError) as exc:
        known_bad.load(path)
    assert said in str(exc.value) and "\n" not in str(exc.value)


MINE = {"entries": [{
    "id": "lab-kernel-6.17.0-1040", "platform": "any", "match": {"kernel": "6.17.0-1040-*"},
    "status": "FAIL", "breaks": "our NCCL tests", "fix": "boot 6.17.0-1031-nvidia", "sources": ["lab ticket 12"],
}]}  # fmt: skip


def test_a_users_entry_naming_a_kernel_and_a_driver_needs_both() -> None:
    """Issue 34 item 16: every key of ``match`` must hold. Every shipped entry has one key, so an
    ``any`` there never showed; a user's entry for a kernel *with* a driver flags only that pair."""
    entry = {**MINE["entries"][0], "id": "lab-pair", "match": {"kernel": "6.17.0-1040-*", "driver": "580.95.*"}}
    entries = [*known_bad.shipped(), known_bad.parse(json.dumps({"entries": [entry]}), "mine")[0]]
    kernel_only = decide(stack(kernel_release="6.17.0-1040-nvidia", known_bad=entries))
    assert kernel_only.status is Status.PASS and kernel_only.codes == [], kernel_only.line()  # the double's driver is 580.173.02
    both = decide(stack(kernel_release="6.17.0-1040-nvidia", nvidia_module=gb10.NVIDIA_VERSION.strip().replace(
        "580.173.02", "580.95.05"), known_bad=entries))
    assert both.status is Status.FAIL and "G1.known-bad" in both.codes, both.line()
    assert "(lab-pair, from mine)" in both.summary
    pair = entries[-1]
    assert known_bad.matches(pair, known_bad.Reading(kernel="6.17.0-1040-nvidia", driver="580.95.05"))
    assert not known_bad.matches(pair, known_bad.Reading(kernel="6.17.0-1040-nvidia", driver="580.173.02"))
    assert not known_bad.matches(pair, known_bad.Reading(kernel="6.17.0-1040-nvidia", driver=None))  # not read


def stack_machine(doubles, root: Path) -> Machine:
    doubles.nvml(gb10.nvml())
    doubles.torch(gb10.torch())
    doubles.extra["SPARK_PREFLIGHT_HOST_ROOT"] = str(root)
    doubles.extra["SPARK_PREFLIGHT_PYTHON_PATH"] = ""
    return Machine(env=doubles.env, timeout=5.0)


def test_a_users_entry_is_read_through_the_option_and_decides(isolated, doubles, tmp_path: Path) -> None:
    mine = tmp_path / "known-bad.json"
    mine.write_text(json.dumps(MINE))
    root = make_root(tmp_path / "root", {"proc/meminfo": gb10.meminfo(), **gb10.stack_files("6.17.0-1040-nvidia\n")})
    engine = Engine(Settings(only=("G1",), profile="gb10", known_bad=(mine,)), stack_machine(doubles, root))
    result = engine.run("G1")
    assert result.status is Status.FAIL and result.codes == ["G1.known-bad"], result.report_text()
    assert f"kernel 6.17.0-1040-nvidia is known-bad (lab-kernel-6.17.0-1040, from {mine})" in result.summary
    assert result.fix == "boot 6.17.0-1031-nvidia"


def test_the_whole_check_reads_the_planted_root(isolated, doubles, tmp_path: Path) -> None:
    """The files G1 reads come from the host root, and what could not be read is said."""
    healthy = make_root(tmp_path / "ok", {"proc/meminfo": gb10.meminfo(), **gb10.stack_files()})
    result = Engine(Settings(only=("G1",), profile="gb10"), stack_machine(doubles, healthy)).run("G1")
    assert {r.name: r.value for r in result.readings}["kernel_release"] == "6.17.0-1031-nvidia"
    assert result.status is Status.PASS and result.codes == [], result.report_text()
    bad_meminfo = gb10.meminfo() + "CmaTotal:              0 kB\nCmaFree:          940604 kB\n"
    broken = make_root(
        tmp_path / "bad", {"proc/meminfo": bad_meminfo, **gb10.stack_files("7.0.0-1019-nvidia\n")}
    )
    result = Engine(Settings(only=("G1",), profile="gb10"), stack_machine(doubles, broken)).run("G1")
    assert result.status is Status.FAIL and result.codes == ["G1.known-bad"], result.report_text()
    assert "7.0.0-1019-nvidia" in result.summary
    garbled = make_root(tmp_path / "garbled", {"proc/meminfo": gb10.meminfo(), **gb10.stack_files(
        "6.17.0-1031-nvidia\n\x00\x01junk\n" * 3, "NVRM version: ???\n")})  # fmt: skip
    result = Engine(Settings(only=("G1",), profile="gb10"), stack_machine(doubles, garbled)).run("G1")
    assert {r.name: r.value for r in result.readings}["kernel_release"] == "6.17.0-1031-nvidia"
    assert "NVIDIA kernel module line not recognised: NVRM version: ???" in result.details, result.details
    bare = make_root(tmp_path / "bare", {"proc/meminfo": gb10.meminfo()})
    os.mkfifo(bare / "proc" / "version-fifo")
    (bare / "proc" / "sys" / "kernel").mkdir(parents=True)
    os.symlink(bare / "proc" / "version-fifo", bare / "proc" / "sys" / "kernel" / "osrelease")
    result = Engine(Settings(only=("G1",), profile="gb10"), stack_machine(doubles, bare)).run("G1")
    details = "\n".join(result.details)
    assert "kernel release not read" in details and "NVIDIA kernel module not read" in details, details


def test_the_cli_refuses_a_malformed_file_in_one_line_exit_2(tmp_path: Path) -> None:
    import subprocess

    bad = tmp_path / "bad.json"
    bad.write_text('{"entries": [{"id": "x"}]}')
    out = subprocess.run(
        [sys.executable, "-m", "pytest_dgx_spark.cli", f"--known-bad={bad}", "--only", "G1"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 2, out.stdout + out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "--known-bad" in lines[0] and "'sources' must be" in lines[0], out.stderr


def test_pytest_refuses_a_malformed_file_as_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makefile(".json", bad='{"entries": "no"}')
    result = pytester.runpytest_subprocess("--spark-preflight", "--spark-known-bad=bad.json", "--spark-only=G1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--spark-known-bad" in result.stderr.str() and "expected an object" in result.stderr.str()
    assert "Traceback" not in result.stderr.str()


def test_the_ini_twin_adds_a_users_entry_relative_to_the_rootdir(pytester: pytest.Pytester, spark_env) -> None:
    """``spark_preflight_known_bad`` (lines) in the project's ini, on the GB10 double (kernel 6.17.0-1031-nvidia)."""
    entry = dict(MINE["entries"][0], match={"kernel": "6.17.0-1031-*"}, status="WARN", short="our lab's NCCL hang")
    (pytester.path / "lab").mkdir()
    (pytester.path / "lab" / "known-bad.json").write_text(json.dumps({"entries": [entry]}))
    pytester.makeini("[pytest]\nspark_preflight_known_bad =\n    lab/known-bad.json\n")
    result = pytester.runpytest_subprocess("--spark-preflight", "--spark-only=G1", "--spark-timeout=5")
    text = result.stdout.str()
    assert "G1 WARN: kernel 6.17.0-1031-nvidia: our lab's NCCL hang; fix: boot 6.17.0-1031-nvidia" in text, text
