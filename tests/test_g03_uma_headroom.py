"""G3 on recorded /proc/meminfo (H200) and the GB10 double."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_spark.checks import g03_uma_headroom as g3
from pytest_spark.engine import Engine
from pytest_spark.model import Status
from pytest_spark.options import Settings
from pytest_spark.probes.machine import Machine
from pytest_spark.probes.procfs import parse_meminfo

from doubles import gb10


def facts_from(text: str, gpus=None, **kw) -> g3.Facts:
    return g3.Facts(meminfo=parse_meminfo(text), gpus=gpus or [], **kw)


def test_h200_recording_without_workload_is_info(h200: Path) -> None:
    result = g3.decide(facts_from((h200 / "proc_meminfo.txt").read_text()), None)
    assert result.status is Status.INFO
    # MemAvailable 131472676 kB = 125.4 GiB, MemTotal 131981020 kB = 125.9 GiB
    assert result.summary.startswith("MemAvailable 125.4 GiB of 125.9 GiB (MemFree 124.7, page cache 0.9")
    assert result.reading("mem_available").value == 125.4
    assert result.reading("swap_free").value == 0.0


@pytest.mark.parametrize(
    ("workload", "status", "start"),
    [
        (10, Status.PASS, "workload 10 GiB fits in MemFree 96.0 GiB (MemAvailable 112.8 of 121.7 GiB)"),
        (
            100,
            Status.WARN,
            "workload 100 GiB fits MemAvailable 112.8 GiB only once the page cache (17.2 GiB) is dropped",
        ),
        (112.7, Status.WARN, "workload 112.7 GiB fits MemAvailable"),
        (113, Status.FAIL, "workload 113 GiB > MemAvailable 112.8 GiB of 121.7 GiB (MemFree 96.0 GiB)"),
    ],
)
def test_gb10_workload_thresholds(workload: float, status: Status, start: str) -> None:
    result = g3.decide(facts_from(gb10.meminfo()), workload)
    assert result.status is status
    assert result.summary.startswith(start)
    if status is Status.WARN:
        assert "drop_caches" in result.fix
    if status is Status.FAIL:
        assert "G6" in result.fix


def test_margin_counts_against_headroom() -> None:
    result = g3.decide(facts_from(gb10.meminfo()), 90, margin_gib=10)
    assert result.status is Status.WARN
    assert result.summary.startswith("workload 90 GiB + 10 GiB margin fits MemAvailable")


def test_nvml_not_supported_is_a_na_reading_and_discrete_memory_a_detail() -> None:
    gpus = [{"index": 0, "name": "NVIDIA GB10", "memory": None, "error": "NotSupported"}]
    result = g3.decide(facts_from(gb10.meminfo(), gpus), None)
    assert result.reading("gpu0_memory_free").render() == "[N/A]"
    assert "NVML memory [N/A] (NotSupported), as on GB10's unified memory" in result.summary
    h200 = [
        {
            "index": 0,
            "name": "NVIDIA H200",
            "memory": {"total": 150109880320, "free": 149557477376, "used": 0},
        }
    ]
    discrete = g3.decide(facts_from(gb10.meminfo(), h200), None)
    assert discrete.reading("gpu0_memory_free").value == 139.3
    assert any(
        "GPU 0 (NVIDIA H200) reports its own memory: 139.3 GiB free of 139.8 GiB" in d
        for d in discrete.details
    )


def test_missing_memavailable_is_estimated_and_said() -> None:
    text = "\n".join(ln for ln in gb10.meminfo().splitlines() if not ln.startswith("MemAvailable"))
    result = g3.decide(facts_from(text), None)
    assert result.status is Status.INFO
    assert result.summary.startswith("MemAvailable (estimated) ")
    assert any("estimated as MemFree + Cached + Buffers + SReclaimable" in d for d in result.details)


@pytest.mark.parametrize("text", ["", "garbage\x00\x01", "MemTotal: 100 kB\n"])
def test_unusable_meminfo_skips_with_the_reason(text: str) -> None:
    result = g3.decide(facts_from(text), 10)
    assert result.status is Status.SKIP
    assert result.summary.startswith("cannot read memory headroom: ")


def test_hugepages_are_reported() -> None:
    text = (
        gb10.meminfo()
        .replace("HugePages_Total:       0", "HugePages_Total:    1024")
        .replace("HugePages_Free:        0", "HugePages_Free:      512")
    )
    result = g3.decide(facts_from(text), None)
    assert result.reading("hugepages_reserved").value == 2.0
    assert result.reading("hugepages_free").value == 1.0


def engine_on(root: Path, doubles, **settings) -> Engine:
    machine = Machine(root=root, env=doubles.nvml(gb10.nvml()).env)
    return Engine(Settings(**settings), machine)


def test_through_the_machine_with_unreadable_meminfo(fake_root, doubles) -> None:
    root = fake_root({"proc/meminfo/.keep": ""})  # a directory where the file should be
    result = engine_on(root, doubles).run("G3")
    assert result.status is Status.SKIP
    assert "cannot read /proc/meminfo" in result.summary


def test_drop_caches_as_root_writes_3_and_records_before_after(fake_root, doubles) -> None:
    root = fake_root({"proc/meminfo": gb10.meminfo(), "proc/sys/vm/drop_caches": ""})
    machine = Machine(root=root, env=doubles.nvml(gb10.nvml()).env, euid=0)
    result = Engine(Settings(drop_caches=True, workload_gb=10), machine).run("G3")
    assert (root / "proc/sys/vm/drop_caches").read_text() == "3\n"
    assert result.status is Status.PASS
    assert result.reading("mem_free_before_drop").value == 96.0
    assert "page cache dropped first (--spark-drop-caches)" in result.summary


def test_drop_caches_refused_when_not_root_and_nothing_written(fake_root, doubles) -> None:
    root = fake_root({"proc/meminfo": gb10.meminfo(), "proc/sys/vm/drop_caches": "untouched"})
    machine = Machine(root=root, env=doubles.nvml(gb10.nvml()).env, euid=1000)
    result = Engine(Settings(drop_caches=True), machine).run("G3")
    assert (root / "proc/sys/vm/drop_caches").read_text() == "untouched"
    assert "--spark-drop-caches refused: not root (euid 1000); nothing was written" in result.summary


def test_drop_caches_never_runs_unless_asked(fake_root, doubles) -> None:
    root = fake_root({"proc/meminfo": gb10.meminfo(), "proc/sys/vm/drop_caches": "untouched"})
    machine = Machine(root=root, env=doubles.nvml(gb10.nvml()).env, euid=0)
    Engine(Settings(workload_gb=100), machine).run("G3")
    assert (root / "proc/sys/vm/drop_caches").read_text() == "untouched"


def test_drop_caches_refused_for_a_real_unprivileged_user(nonroot_run, spark_env) -> None:
    root = nonroot_run.base / "root"
    (root / "proc/sys/vm").mkdir(parents=True)
    (root / "proc/meminfo").write_text(gb10.meminfo())
    target = root / "proc/sys/vm/drop_caches"
    target.write_text("untouched")
    target.chmod(0o666)  # even a writable file must not be written by a non-root run
    env = dict(os.environ, SPARK_PREFLIGHT_HOST_ROOT=str(root))
    proc = nonroot_run(["-m", "pytest_spark.cli", "--only", "G3", "--drop-caches"], env=env)
    assert proc.returncode == 0, proc.stderr
    assert "--spark-drop-caches refused: not root (euid " in proc.stdout
    assert target.read_text() == "untouched"


@pytest.mark.skipif(
    os.geteuid() != 0 or not os.access("/proc/sys/vm/drop_caches", os.W_OK),
    reason="needs root and a writable /proc/sys/vm/drop_caches",
)
def test_real_drop_caches_as_root(doubles) -> None:
    machine = Machine(env=doubles.nvml(gb10.nvml()).env)
    drop = machine.drop_caches()
    assert drop.get("done") is True or drop.get("error", "").startswith(
        "cannot write /proc/sys/vm/drop_caches"
    )
    if drop.get("done"):
        assert drop["before"]["fields"]["MemTotal"] == drop["after"]["fields"]["MemTotal"]
