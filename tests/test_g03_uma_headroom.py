"""G3 on recorded /proc/meminfo (H200), the GB10 double, and /proc/meminfo
lines and measurements posted from real DGX Sparks (tests/data/gb10/)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from pytest_dgx_spark.checks.g03_uma_headroom import check as g3
from pytest_dgx_spark.checks.kit import Params
from pytest_dgx_spark.engine import Engine
from pytest_dgx_spark.model import Result, Status
from pytest_dgx_spark.probes.machine import Machine
from pytest_dgx_spark.probes.procfs import parse_meminfo
from pytest_dgx_spark.settings import Settings

from doubles import gb10


def facts_from(text: str, gpus=None, **kw) -> g3.Facts:
    """Facts as a capture holds them (JSON), rebuilt by the one converter."""
    return g3.Facts.from_dict({"meminfo": parse_meminfo(text), "gpus": gpus or [], **kw})


def test_h200_recording_without_workload_is_info(h200: Path) -> None:
    result = g3.decide(facts_from((h200 / "proc_meminfo.txt").read_text()), None)
    assert (result.status, result.codes) == (Status.INFO, ["G3.no-workload"])
    # MemAvailable 131472676 kB = 125.4 GiB, MemTotal 131981020 kB = 125.9 GiB
    assert result.summary.startswith("MemAvailable 125.4 GiB of 125.9 GiB (MemFree 124.7, page cache 0.9")
    assert result.reading("mem_available").value == 125.4
    assert result.reading("swap_free").value == 0.0


@pytest.mark.parametrize(
    ("workload", "status", "code", "start"),
    [
        (10, Status.PASS, "", "workload 10 GiB fits in MemFree 96.0 GiB (MemAvailable 112.8 of 121.7 GiB)"),
        (
            100,
            Status.WARN,
            "G3.needs-cache-drop",
            "workload 100 GiB fits MemAvailable 112.8 GiB only once the page cache (17.2 GiB) is dropped",
        ),
        (112.7, Status.WARN, "G3.needs-cache-drop", "workload 112.7 GiB fits MemAvailable"),
        (113, Status.FAIL, "G3.exceeds-available",
         "workload 113 GiB > MemAvailable 112.8 GiB of 121.7 GiB (MemFree 96.0 GiB)"),
    ],
)
def test_gb10_workload_thresholds(workload: float, status: Status, code: str, start: str) -> None:
    result = g3.decide(facts_from(gb10.meminfo()), workload)
    assert (result.status, result.code) == (status, code)
    assert result.summary.startswith(start)  # the numbers the line must show
    if status is Status.WARN:
        assert "drop_caches" in result.fix  # the command to run
    if status is Status.FAIL:
        assert "G6" in result.fix


def test_margin_counts_against_headroom() -> None:
    result = g3.decide(facts_from(gb10.meminfo()), 90, margin_gib=10)
    assert (result.status, result.codes) == (Status.WARN, ["G3.needs-cache-drop"])
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
    assert (result.status, result.codes) == (Status.INFO, ["G3.no-workload"])
    assert result.summary.startswith("MemAvailable (estimated) ")
    assert any("estimated as MemFree + Cached + Buffers + SReclaimable" in d for d in result.details)


@pytest.mark.parametrize("text", ["", "garbage\x00\x01", "MemTotal: 100 kB\n"])
def test_unusable_meminfo_skips_with_the_reason(text: str) -> None:
    result = g3.decide(facts_from(text), 10)
    assert (result.status, result.codes) == (Status.SKIP, ["G3.unreadable"])


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
    assert (result.status, result.codes) == (Status.SKIP, ["G3.unreadable"])
    assert "cannot read /proc/meminfo" in result.summary  # which file


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
    proc = nonroot_run(["-m", "pytest_dgx_spark.cli", "--only", "G3", "--drop-caches", "-v"], env=env)
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


# ---------------------------------------------------------------------- real GB10 captures

GB10_DATA = Path(__file__).parent / "data" / "gb10"
GIB_KB = 1024 * 1024


def capture_meminfo(name: str) -> str:
    """The ``/proc/meminfo`` lines a capture holds (they sit in source code or
    a string constant there: ``MemTotal:  127600816 kB`` or ``…kB\\nMemFree…``)."""
    text = (GB10_DATA / name).read_text().replace("\\n", "\n")
    lines = re.findall(r"^\s*\"?([A-Za-z_()]+):\s+(\d+)( kB)?", text, flags=re.M)
    return "".join(f"{k}: {v}{unit}\n" for k, v, unit in lines)


def cuda_rows() -> dict[str, dict[str, float]]:
    """cudaMemGetInfo_1.txt's measurement (GiB): ``[baseline] cuda_free=103.25 MemFree=103.25 …``."""
    rows = {}
    for label, rest in re.findall(
        r"^\[(.+?)\]\s+(.*)$", (GB10_DATA / "cudaMemGetInfo_1.txt").read_text(), re.M
    ):
        rows[label] = {k: float(v) for k, v in re.findall(r"(\w+)=\s*([\d.]+)", rest)}
    return rows


def meminfo_gib(total: float, free: float, available: float, cached: float) -> str:
    return "".join(
        f"{k}: {int(v * GIB_KB)} kB\n"
        for k, v in (("MemTotal", total), ("MemFree", free), ("MemAvailable", available), ("Cached", cached))
    )


def run_g3(fake_root, doubles, meminfo: str, **settings) -> Result:
    """The whole check through the engine, on a crafted ``/proc/meminfo``."""
    root = fake_root({"proc/meminfo": meminfo})
    return engine_on(root, doubles, **settings).run("G3")


def test_cuda_free_is_memfree_so_a_page_cache_write_turns_pass_into_warn(fake_root, doubles) -> None:
    """cudaMemGetInfo_1.txt (unsloth PR #10704, a GB10): cudaMemGetInfo's free
    equals MemFree in every row, and writing a 60 GiB file moves MemFree from
    103.25 to 41.52 GiB while MemAvailable stays ~115.7. The same 50 GiB
    workload PASSes before, WARNs (drop the page cache) after, PASSes once the
    file is gone. MemTotal is the Spark's of proc_meminfo_2.txt (127601452 kB)."""
    rows = cuda_rows()
    assert list(rows) == ["baseline", "after writing 60GB", "after deleting the file"]
    assert all(r["cuda_free"] == r["MemFree"] for r in rows.values())
    total = 127601452 / GIB_KB
    statuses = []
    for label, r in rows.items():
        text = meminfo_gib(total, r["MemFree"], r["MemAvailable"], r["Cached"])
        statuses.append(run_g3(fake_root, doubles, text, workload_gb=50).status)
        if label == "after writing 60GB":
            warned = run_g3(fake_root, doubles, text, workload_gb=50)
    assert statuses == [Status.PASS, Status.WARN, Status.PASS]
    assert warned.codes == ["G3.needs-cache-drop"]
    assert "MemFree is 41.5 GiB" in warned.summary
    assert any(
        d.startswith("cudaMemGetInfo on GB10 reports MemFree, not MemAvailable") for d in warned.details
    )
    assert (
        warned.headline
        == "workload 50 GiB fits only after dropping 72.6 GiB of page cache (MemFree 41.5 GiB)"
    )


def test_real_spark_meminfo_with_a_big_page_cache(fake_root, doubles) -> None:
    """proc_meminfo_2.txt ("Captured from a real DGX Spark"): MemFree 43.4 GiB,
    MemAvailable 110.3 of 121.7 GiB. Nothing declared: INFO with the reading;
    60 GiB (the 60 GB file of cudaMemGetInfo_1.txt) fits only once the cache goes."""
    text = capture_meminfo("proc_meminfo_2.txt")
    assert text.startswith("MemTotal: 127601452 kB\nMemFree: 45557560 kB\nMemAvailable: 115669068 kB")
    info = run_g3(fake_root, doubles, text)
    assert (info.status, info.codes) == (Status.INFO, ["G3.no-workload"])
    assert info.summary.startswith("MemAvailable 110.3 GiB of 121.7 GiB (MemFree 43.4, page cache 0.0")
    warn = run_g3(fake_root, doubles, text, workload_gb=60)
    assert (warn.status, warn.codes) == (Status.WARN, ["G3.needs-cache-drop"])


def test_spark_after_a_runner_stopped_fails_and_notes_the_unaccounted_pool(fake_root, doubles) -> None:
    """proc_meminfo_1.txt (a Spark after stopping a Qwen runner, no CUDA process):
    MemFree 3.0 GiB, MemAvailable 38.3 of 121.7 GiB, and ~80 GiB in no
    /proc/meminfo category (the driver's retained pool). 96 GiB does not fit
    the pool (FAIL), and the line names the fault the capture shows: with no other job
    running (G6), the memory outside every category is the driver's, and a reboot
    returns it (was: only "stop other jobs", on a box that ran none). The capture has no
    swap lines: swap free is [N/A], not 0."""
    text = capture_meminfo("proc_meminfo_1.txt")
    assert "no CUDA process running" in (GB10_DATA / "proc_meminfo_1.txt").read_text()
    result = run_g3(fake_root, doubles, text, workload_gb=96)
    assert (result.status, result.codes) == (Status.FAIL, ["G3.retained-memory"])
    assert result.summary.startswith(
        "workload 96 GiB > MemAvailable 38.3 GiB of 121.7 GiB (MemFree 3.0 GiB), and 80.1 GiB is held outside "
        "every /proc/meminfo category: other GPU jobs, or, with none running, memory the NVIDIA driver kept"
    )
    assert "G6" in result.fix and "a reboot returns the 80.1 GiB to MemAvailable" in result.fix
    assert result.short_line() == (
        "G3 FAIL: workload 96 GiB > MemAvailable 38.3 GiB; 80.1 GiB outside meminfo; fix: stop GPU jobs (G6); "
        "if none, reboot"
    )
    info = run_g3(fake_root, doubles, text)
    assert "swap free [N/A])" in info.summary and info.reading("swap_free").value is None
    assert result.reading("unaccounted").value == 80.1
    assert any(d.startswith("80.1 GiB is held outside every /proc/meminfo category") for d in result.details)
    healthy = run_g3(fake_root, doubles, gb10.meminfo())
    assert healthy.reading("unaccounted").value < 8
    assert not any("outside every /proc/meminfo category" in d for d in healthy.details)


def test_a_workload_larger_than_the_machine_says_so(fake_root, doubles) -> None:
    """Issue 8/11: 130 GiB on a 121.7 GiB Spark (proc_meminfo_1.txt) is larger
    than the whole machine; stopping other jobs cannot help, and the line says so."""
    result = run_g3(fake_root, doubles, capture_meminfo("proc_meminfo_1.txt"), workload_gb=130)
    assert (result.status, result.codes) == (Status.FAIL, ["G3.exceeds-total"])
    assert result.summary.startswith("workload 130 GiB > MemTotal 121.7 GiB")
    assert "stop other jobs" not in result.text and "G6" not in result.fix
    assert result.headline == "workload 130 GiB > this machine's total memory 121.7 GiB"
    assert result.short_fix.startswith("shrink the workload")
    # just below the total but above MemAvailable: the pool verdict, stop other jobs
    pool = run_g3(fake_root, doubles, capture_meminfo("proc_meminfo_1.txt"), workload_gb=120)
    assert (pool.status, pool.codes) == (Status.FAIL, ["G3.retained-memory"]) and "stop other jobs" in pool.fix
    # a pool held by processes the kernel names (AnonPages): nothing unaccounted to name
    held = meminfo_gib(121.7, 20, 30, 10) + f"AnonPages: {90 * GIB_KB} kB\n"
    plain = run_g3(fake_root, doubles, held, workload_gb=60)
    assert (plain.status, plain.codes) == (Status.FAIL, ["G3.exceeds-available"]), plain.text


def test_healthy_gb10_without_a_workload_is_info_with_a_short_line(fake_root, doubles) -> None:
    result = run_g3(fake_root, doubles, gb10.meminfo())
    assert result.status is Status.INFO
    assert result.headline == "MemAvailable 112.8 of 121.7 GiB; no workload declared"
    assert result.short_line() == "G3 INFO: MemAvailable 112.8 of 121.7 GiB; no workload declared"


@pytest.mark.parametrize("workload", [None, 10, 100, 113, 500])
def test_every_result_has_a_headline_and_a_short_line(workload: float | None) -> None:
    result = g3.decide(facts_from(gb10.meminfo()), workload)
    assert result.headline and len(result.short_line()) <= 120
    if result.status in (Status.FAIL, Status.WARN):
        assert result.short_fix and "; fix: " in result.short_line()
        assert result.short_line().count(result.headline[:20]) == 1  # said once


@pytest.mark.parametrize(
    ("meminfo", "reason"),
    [
        ("MemTotal: 0 kB\nMemFree: 0 kB\nMemAvailable: 0 kB\n", "MemTotal is 0"),
        (
            # MemFree of 9.5e+26 GiB
            f"MemTotal: 127601452 kB\nMemFree: {int(9.5e26) * GIB_KB} kB\nMemAvailable: 115669068 kB\n",
            "MemFree 9.5e+26 GiB > MemTotal 121.7 GiB",
        ),
        ("MemTotal: 1000 kB\nMemFree: 2000 kB\nMemAvailable: 500 kB\n", "MemFree 0 GiB > MemTotal 0 GiB"),
        (f"MemTotal: {1 << 45} kB\nMemFree: 1 kB\nMemAvailable: 1 kB\n", "more than any machine has"),
        ("MemTotal: 1000000 kB\nMemFree: 10 kB\nMemAvailable: 2000000 kB\n", "MemAvailable"),
        # siblings: a negative field was dropped as unparsable, so a negative MemAvailable
        # was silently replaced by an estimate and a 10 GiB workload PASSed; MemTotal -5
        # read "lacks MemTotal/MemFree"
        ("MemTotal: 127601452 kB\nMemFree: 100663296 kB\nMemAvailable: -5 kB\n", "MemAvailable is negative"),
        ("MemTotal: -5 kB\nMemFree: 1 kB\nMemAvailable: 1 kB\n", "MemTotal is negative"),
    ],
)
def test_impossible_meminfo_is_a_skip_with_the_reason(fake_root, doubles, meminfo: str, reason: str) -> None:
    """Issue 12: a crafted /proc/meminfo under the machine's root with values no
    machine has PASSed a 10 GiB workload; it is a SKIP that names the reading."""
    result = run_g3(fake_root, doubles, meminfo, workload_gb=10)
    assert (result.status, result.codes) == (Status.SKIP, ["G3.unreadable"])
    assert result.summary.startswith("cannot read memory headroom: impossible /proc/meminfo: ")
    assert reason in result.summary  # the field and its figures
    assert len(result.short_line()) <= 120


def test_facts_round_trip_through_json_to_the_same_result() -> None:
    facts = facts_from(capture_meminfo("proc_meminfo_1.txt"), drop={"done": False, "refused": "not root"})
    again = g3.Facts.from_dict(json.loads(json.dumps(facts.to_dict())))
    params = Params(profile="gb10", options={"workload_gb": 30.0})
    assert g3.evaluate(again, params) == g3.evaluate(facts, params)


@pytest.mark.parametrize(
    ("workload", "status", "code", "start"),
    [
        (96.0, Status.PASS, "", "workload 96 GiB fits in MemFree 96.0 GiB"),
        (96.5, Status.WARN, "G3.needs-cache-drop", "workload 96.5 GiB fits MemAvailable 112.0 GiB"),
        (112.0, Status.WARN, "G3.needs-cache-drop", "workload 112 GiB fits MemAvailable 112.0 GiB"),
        (121.0, Status.FAIL, "G3.exceeds-available", "workload 121 GiB > MemAvailable 112.0 GiB of 121.0 GiB"),
        (121.5, Status.FAIL, "G3.exceeds-total", "workload 121.5 GiB > MemTotal 121.0 GiB"),
    ],
)
def test_each_pool_holds_a_workload_of_exactly_its_size(
    workload: float, status: Status, code: str, start: str
) -> None:
    """The three bounds are inclusive: a workload of exactly MemFree PASSes
    (cudaMemGetInfo's free on GB10), one of exactly MemAvailable fits once
    the page cache is dropped (WARN), and only one above MemTotal is "larger
    than this machine's whole memory" (one of exactly MemTotal FAILs as not
    fitting what is available)."""
    text = meminfo_gib(total=121.0, free=96.0, available=112.0, cached=17.0)
    result = g3.decide(facts_from(text), workload)
    assert (result.status, result.code) == (status, code), result.line()
    assert result.summary.startswith(start), result.summary
