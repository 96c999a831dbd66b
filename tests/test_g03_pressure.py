"""G3's second question (issue 22, N4 and N6): what ends a job before the pool is empty.

The faults are the ones DGX Spark owners posted: a fragmented zone Normal
(``tests/data/gb10/memory_fragmentation_1.txt``: sparkring #173, MiaAI DeepSeek-v4.1 #23),
the kernel's OOM killer taking the process beside the engine (``dmesg_oom_1.txt``:
LMCache #4759), Ray's memory monitor and a container limit (FIELD F6). Each is planted
as a real file under a machine root and read through :class:`Machine`, one at a time;
the healthy GB10 double keeps its line.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_dgx_spark.checks.g03_uma_headroom import check as g3
from pytest_dgx_spark.checks.g03_uma_headroom import pressure as pressure
from pytest_dgx_spark.checks.kit import CheckContext, Params
from pytest_dgx_spark.engine import Engine
from pytest_dgx_spark.model import Result, Status
from pytest_dgx_spark.probes import memory_pressure as mp
from pytest_dgx_spark.probes.machine import Machine
from pytest_dgx_spark.settings import Settings

from doubles import gb10

DATA = Path(__file__).resolve().parent / "data" / "gb10"
GB10 = Params(profile="gb10")
GENERIC = Params(profile="generic")
PMD = "sys/kernel/mm/transparent_hugepage/hpage_pmd_size"
HEALTHY_G3 = "MemAvailable 112.8 of 121.7 GiB; no workload declared"
#: FujitsuPolycom/sparkring #173's two ranks after ~7 days: compact_stall 2.7 M, compact_fail 1.35 M
SPARKRING_STALL, SPARKRING_FAIL = 2_700_000, 1_350_000


def files(changes: dict[str, str] | None = None) -> dict[str, str]:
    """The healthy double's root (meminfo and G3's memory-state files), with ``changes``
    (root-relative path -> text)."""
    return {"proc/meminfo": gb10.meminfo(), **gb10.memory_files(), **(changes or {})}


def run_g3(fake_root, doubles, root_files: dict[str, str], env: dict[str, str] | None = None, **settings) -> Result:
    machine = Machine(root=fake_root(root_files), env={**doubles.nvml(gb10.nvml()).env, **(env or {})})
    return Engine(Settings(**settings), machine).run("G3")


def detail(result: Result, start: str) -> str:
    found = [d for d in result.details if d.startswith(start)]
    assert found, result.details
    return found[0]


def fragmented_4k() -> dict[str, str]:
    """Worker 1 of MiaAI DeepSeek-v4.1 #23: 891 MB free in zone Normal, 49 blocks of 1 MiB or more,
    none of 4 MiB; the page cache keeps MemAvailable at ~118 GiB (sparkring #173's figure)."""
    buddy = gb10.buddyinfo_fragmented_4k()
    pages = gb10.free_pages(buddy)
    meminfo = gb10.meminfo(free_gib=pages * 4 / gb10.GIB_KB, cache_gib=114.0)
    return {"proc/meminfo": meminfo, "proc/buddyinfo": buddy, "proc/vmstat": gb10.vmstat(pages, 912_004, 401_733, 2_117)}


def fragmented_64k(order9: int = 0) -> dict[str, str]:
    """A 64 KiB-page sparkring #173 rank: ~117 GiB MemAvailable, 27 blocks of 16 MiB, ``order9``
    of 32 MiB (0 after a week; 55 after drop_caches + compact_memory)."""
    buddy = gb10.buddyinfo_fragmented_64k(100.0)
    if order9:
        buddy = buddy.replace("     27      0", f"     27 {order9:6d}", 1)
    pages = gb10.free_pages(buddy)
    meminfo = gb10.meminfo(free_gib=pages * 64 / gb10.GIB_KB, cache_gib=17.5)
    vmstat = gb10.vmstat(pages, SPARKRING_STALL, SPARKRING_FAIL, SPARKRING_STALL - SPARKRING_FAIL)
    return {"proc/meminfo": meminfo, "proc/buddyinfo": buddy, "proc/vmstat": vmstat, PMD: "536870912\n"}


# ----------------------------------------------------------------------------- the posted text


def test_the_posts_say_what_the_rule_counts() -> None:
    text = (DATA / "memory_fragmentation_1.txt").read_text()
    assert text.startswith("# source: (a) https://github.com/FujitsuPolycom/sparkring/issues/173")
    assert "**zero** of 32 MiB, with `compact_stall` 2.7 M / 2.0 M and `compact_fail` 1.35 M / 0.8 M" in text
    assert "| worker 1 | 891 MB | 49 | **0** |" in text  # the 4 KiB-page fleet: order 8+ / order 10+


def test_the_oom_kill_line_of_a_spark_parses_to_its_victim() -> None:
    lines = (DATA / "dmesg_oom_1.txt").read_text().splitlines()
    kills = mp.parse_oom_kills(lines)
    assert [(k.pid, k.name, k.anon_rss_kb) for k in kills] == [(3742074, "lmcache", 1058560)]
    assert kills[0].text.startswith("[Thu Aug 27 00:39:44 2026] Out of memory: Killed process 3742074 (lmcache)")
    # the oom-kill: summary line before it names the task but is not the kill
    assert mp.parse_oom_kill(next(ln for ln in lines if "oom-kill:constraint" in ln)) is None


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("6,2291,1833455,-;Memory cgroup out of memory: Killed process 41 (python3) total-vm:9000kB, anon-rss:0kB",
         (41, "python3", 0)),
        ("Out of memory (oom_kill_allocating_task): Killed process 7 (vllm) total-vm:1kB, anon-rss:2048kB", (7, "vllm", 2048)),
        ("Out of memory: Killed process 12 (pt_main_thread)", (12, "pt_main_thread", None)),
        ("Out of memory: Kill process 12 (old) score 1 or sacrifice child", None),
        ("NVRM: Out of memory [NV_ERR_NO_MEMORY] (0x00000051)", None),
        ("Out of memory: Killed process 99999999999999999999999 (x)", None),
        ("\x00garbage" * 10000, None),
    ],
)
def test_oom_kill_lines(line: str, expected: tuple | None) -> None:
    kill = mp.parse_oom_kill(line)
    assert (None if kill is None else (kill.pid, kill.name, kill.anon_rss_kb)) == expected
    if kill:
        assert len(kill.text) <= 400


def test_a_log_of_many_kills_keeps_the_latest() -> None:
    lines = (f"Out of memory: Killed process {pid} (w{pid}) total-vm:1kB, anon-rss:4kB" for pid in range(1, 5001))
    kills = mp.parse_oom_kills(lines)
    assert len(kills) == mp.MAX_OOM_KILLS and kills[-1].pid == 5000


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0::/\n", (2, "/")),
        ("0::/system.slice/docker-9751845b.scope\n", (2, "/system.slice/docker-9751845b.scope")),
        ("12:pids:/docker/ab\n4:memory:/docker/ab\n0::/\n", (1, "/docker/ab")),
        ("6:cpu,memory:/x\n", (1, "/x")),
        ("garbage\n1:name=systemd:/\n", None),
    ],
)
def test_proc_self_cgroup(text: str, expected: tuple[int, str] | None) -> None:
    assert mp.parse_cgroup(text) == expected


# ----------------------------------------------------------------------------- N4: fragmentation


def test_the_healthy_double_keeps_its_line_with_the_new_readings(fake_root, doubles) -> None:
    result = run_g3(fake_root, doubles, files())
    assert (result.status, result.codes) == (Status.INFO, ["G3.no-workload"]) and result.headline == HEALTHY_G3
    assert result.reading("page_size").value == 4
    assert result.reading("normal_free_blocks").value == 2972  # ~93 GiB in 4 MiB blocks, as 32 MiB blocks
    assert result.reading("normal_free_blocks").unit == "x 32 MiB"
    assert result.reading("compact_fail").value == 0
    assert result.reading("cgroup_memory_limit").value == "max"
    assert result.reading("dev_shm_size").value == 0.1  # Docker's 64 MiB
    assert detail(result, "this kernel's largest buddy block is 4 MiB (4 KiB pages)")
    assert pressure.KERNEL_LOG_PENDING in result.details


def test_no_4mib_block_in_zone_normal_fails_with_the_fix(fake_root, doubles) -> None:
    """MiaAI DeepSeek-v4.1 #23: order 10+ = 0 on all four ranks; the box livelocked."""
    result = run_g3(fake_root, doubles, files(fragmented_4k()))
    assert (result.status, result.codes) == (Status.FAIL, ["G3.fragmented", "G3.no-workload"])
    assert result.summary.startswith(
        "zone Normal has no free blocks of 32 MiB or more (want >= 200; 0.8 GiB free, largest block 2 MiB): what is "
        "free is in small pieces and the rest must be reclaimed and compacted first")
    assert "MemAvailable 117.5 GiB of 121.7 GiB" in result.summary  # the headroom, still there
    assert "echo 1 > /proc/sys/vm/compact_memory" in result.fix and "reboot" in result.fix
    assert result.headline == "memory fragmented: 0 free 32 MiB blocks in zone Normal (want >= 200)"
    assert result.reading("normal_free_blocks").value == 0
    assert result.reading("compact_stall").value == 912_004


def test_a_64k_page_rank_without_32mib_blocks_fails_and_says_reboot(fake_root, doubles) -> None:
    """sparkring #173: "zero of 32 MiB", compaction failing half the time, "a reboot was required"."""
    result = run_g3(fake_root, doubles, files(fragmented_64k()))
    assert (result.status, result.codes) == (Status.FAIL, ["G3.fragmented", "G3.no-workload"])
    assert result.reading("page_size").value == 64
    assert result.reading("largest_free_block").value == 16
    assert "compaction fails here (1350000 of 2700000 direct compactions since boot), so reboot" in result.fix
    assert result.short_fix == "reboot"
    assert not any(d.startswith("this kernel's largest buddy block") for d in result.details)


def test_after_compaction_55_blocks_warn(fake_root, doubles) -> None:
    """sparkring #173: drop_caches + compact_memory "recovered only to 55": under sparkring's 200."""
    result = run_g3(fake_root, doubles, files(fragmented_64k(order9=55)))
    assert (result.status, result.codes) == (Status.WARN, ["G3.fragmented", "G3.no-workload"])  # the INFO's after
    assert result.summary.startswith(
        "zone Normal has 55 x 32 MiB worth of free blocks of 32 MiB or more (want >= 200; 101.7 GiB free, largest "
        "block 32 MiB): physical memory is fragmented")
    assert result.reading("normal_free_blocks").value == 55
    # the threshold is the user's: 50 accepts this box
    assert run_g3(fake_root, doubles, files(fragmented_64k(order9=55)),
                  threshold={"g3_contig_blocks_min": 50}).status is Status.INFO


@pytest.mark.parametrize(("order9", "status"), [(199, Status.WARN), (200, Status.INFO), (201, Status.INFO)])
def test_exactly_the_minimum_of_free_blocks_is_enough(fake_root, doubles, order9: int, status: Status) -> None:
    """Issue 34 item 16: *fewer* than ``g3_contig_blocks_min`` (200) free 32 MiB blocks warn; 200 is enough."""
    buddy = gb10.buddyinfo_fragmented_64k(90.0).replace("     27      0", f"     27 {order9:6d}", 1)
    pages = gb10.free_pages(buddy)
    root = {"proc/meminfo": gb10.meminfo(free_gib=pages * 64 / gb10.GIB_KB, cache_gib=17.5), "proc/buddyinfo": buddy,
            "proc/vmstat": gb10.vmstat(pages), PMD: "536870912\n"}
    result = run_g3(fake_root, doubles, files(root))
    assert result.reading("normal_free_blocks").value == order9
    assert result.status is status, result.line()


def test_the_generic_profile_reads_fragmentation_without_judging_it() -> None:
    facts = g3.Facts.from_dict({"meminfo": {"MemTotal": 131981020, "MemFree": 4 * 977746},
                                "buddyinfo": {"zones": mp.parse_buddyinfo(gb10.buddyinfo_fragmented_4k())},
                                "vmstat": {"counters": {"nr_free_pages": 977746}}})
    assert g3.evaluate(facts, GENERIC).codes == ["G3.no-workload"]
    assert g3.evaluate(facts, GENERIC).reading("normal_free_blocks").value == 0
    assert g3.evaluate(facts, GB10).code == "G3.fragmented"


@pytest.mark.parametrize(
    ("buddyinfo", "said"),
    [
        ("Node 0, zone Normal lots of pages\n", "free-block check not made: /proc/buddyinfo has no readable"),
        ("Node 0, zone DMA 1 2 3\n", "free-block check not made: no zone Normal in /proc/buddyinfo"),
        ("Node 0, zone Normal " + "9" * 5000 + "\n", "free-block check not made: /proc/buddyinfo has no readable"),
    ],
)
def test_garbage_buddyinfo_is_a_line_and_no_verdict(fake_root, doubles, buddyinfo: str, said: str) -> None:
    result = run_g3(fake_root, doubles, files({"proc/buddyinfo": buddyinfo}))
    assert result.codes == ["G3.no-workload"] and result.headline == HEALTHY_G3
    assert detail(result, said)


def test_missing_buddyinfo_and_vmstat_say_so(fake_root, doubles) -> None:
    root = files()
    del root["proc/buddyinfo"], root["proc/vmstat"]
    result = run_g3(fake_root, doubles, root)
    assert result.codes == ["G3.no-workload"]
    assert detail(result, "free-block check not made: cannot read /proc/buddyinfo: No such file")
    assert detail(result, "compaction counters: cannot read /proc/vmstat")


def test_a_page_size_that_fits_no_kernel_is_no_verdict(fake_root, doubles) -> None:
    """No PMD size to go by, and MemFree / nr_free_pages 19.9 KiB (what a Firecracker VM's balloon
    showed on a 4 KiB-page box): no page size, no verdict."""
    root = files({PMD: "garbage\n", "proc/vmstat": gb10.vmstat(int(96 * gb10.GIB_KB / 19.9))})
    said = detail(run_g3(fake_root, doubles, root), "free-block check not made: page size unknown (")
    assert "hpage_pmd_size holds 'garbage'" in said
    # MemFree / nr_free_pages decides when they agree (4 KiB here)
    root["proc/vmstat"] = gb10.vmstat(gb10.free_pages(root["proc/buddyinfo"]))
    assert run_g3(fake_root, doubles, root).reading("page_size").value == 4


def test_a_capture_replays_to_the_same_decision_and_an_old_one_to_not_read(fake_root, doubles) -> None:
    machine = Machine(root=fake_root(files(fragmented_64k())), env=doubles.nvml(gb10.nvml()).env)
    engine = Engine(Settings(), machine)
    facts = g3.gather(CheckContext("G3", engine.settings, machine, engine))
    again = g3.Facts.from_dict(facts.to_dict())
    assert g3.evaluate(again, GB10).line() == g3.evaluate(facts, GB10).line()
    old = {k: v for k, v in facts.to_dict().items() if k in ("meminfo", "meminfo_error", "gpus", "nvml_reason", "drop")}
    before = g3.evaluate(g3.Facts.from_dict(old), GB10)
    assert before.codes == ["G3.no-workload"]
    assert "/proc/buddyinfo: not read" in before.details and "cgroup memory limit: not read" in before.details


# ----------------------------------------------------------------------------- N6: other OOM killers


#: AEON-7/vllm-ultimate-dgx-spark#9's Docker limit: 69 GiB
LIMIT_69 = str(69 * (1 << 30)) + "\n"


def test_a_cgroup_limit_below_the_workload_fails(fake_root, doubles) -> None:
    result = run_g3(fake_root, doubles, files({"sys/fs/cgroup/memory.max": LIMIT_69}), workload_gb=80)
    assert (result.status, result.codes) == (Status.FAIL, ["G3.cgroup-below-workload"])
    assert result.summary.startswith(
        "this process's cgroup limits memory to 69 GiB (/sys/fs/cgroup/memory.max), below the workload 80 GiB")
    assert "docker run --memory" in result.fix  # how to raise it
    assert result.reading("cgroup_memory_limit").value == 69.0
    # a workload under the limit: the headroom decides (PASS), the limit is a note
    fits = run_g3(fake_root, doubles, files({"sys/fs/cgroup/memory.max": LIMIT_69}), workload_gb=10)
    assert (fits.status, fits.codes) == (Status.PASS, [])
    assert detail(fits, "cgroup memory limit 69 GiB")


def test_a_cgroup_limit_well_under_memtotal_warns_without_a_workload(fake_root, doubles) -> None:
    result = run_g3(fake_root, doubles, files({"sys/fs/cgroup/memory.max": LIMIT_69}))
    assert (result.status, result.codes) == (Status.WARN, ["G3.cgroup-limit", "G3.no-workload"])
    assert result.headline == "cgroup memory limit 69 of 121.7 GiB"
    assert "--spark-workload-gb" in result.fix
    assert HEALTHY_G3.split(";")[0].replace(" of", " GiB of") in result.summary


def test_the_smallest_limit_up_the_tree_counts(fake_root, doubles) -> None:
    """Without a cgroup namespace ``/sys/fs/cgroup`` shows the host's tree: the container's own
    scope and its parent slice both limit it."""
    scope = "system.slice/docker-9751845b.scope"
    root = files({"proc/self/cgroup": f"0::/{scope}\n"})
    del root["sys/fs/cgroup/memory.max"]  # the host's root cgroup has none
    root |= {f"sys/fs/cgroup/{scope}/memory.max": "max\n", "sys/fs/cgroup/system.slice/memory.max": LIMIT_69}
    result = run_g3(fake_root, doubles, root, workload_gb=80)
    assert result.codes == ["G3.cgroup-below-workload"]
    assert "(/sys/fs/cgroup/system.slice/memory.max)" in result.summary  # the file that limits


def test_a_parent_cap_below_the_jobs_own_limit_is_the_limit(fake_root, doubles) -> None:
    """Issue 34 item 16: a job whose own cgroup says 100 GiB, capped at 16 GiB by its parent slice,
    can use 16 GiB: the smallest limit on the path counts, wherever it sits (here above the job)."""
    job = "user.slice/job-42.scope"
    root = files({"proc/self/cgroup": f"0::/{job}\n"})
    root |= {f"sys/fs/cgroup/{job}/memory.max": f"{100 << 30}\n", "sys/fs/cgroup/user.slice/memory.max": f"{16 << 30}\n"}
    result = run_g3(fake_root, doubles, root, workload_gb=20)
    assert result.reading("cgroup_memory_limit").value == 16.0
    assert result.code == "G3.cgroup-below-workload" and "(/sys/fs/cgroup/user.slice/memory.max)" in result.summary
    # and the other way round: the job's own cap under a looser parent
    root |= {f"sys/fs/cgroup/{job}/memory.max": f"{16 << 30}\n", "sys/fs/cgroup/user.slice/memory.max": f"{100 << 30}\n"}
    inner = run_g3(fake_root, doubles, root, workload_gb=20)
    assert inner.reading("cgroup_memory_limit").value == 16.0 and f"(/sys/fs/cgroup/{job}/memory.max)" in inner.summary


def test_a_v1_limit_and_v1_unlimited(fake_root, doubles) -> None:
    v1 = files({"proc/self/cgroup": "9:memory:/docker/ab\n"})
    del v1["sys/fs/cgroup/memory.max"]
    limited = v1 | {"sys/fs/cgroup/memory/memory.limit_in_bytes": LIMIT_69}
    assert run_g3(fake_root, doubles, limited, workload_gb=80).codes == ["G3.cgroup-below-workload"]
    unlimited = v1 | {"sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n"}
    assert run_g3(fake_root, doubles, unlimited, workload_gb=80).reading("cgroup_memory_limit").value == "max"


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"sys/fs/cgroup/memory.max": "lots\n"}, "cgroup memory limit: cannot read (/sys/fs/cgroup/memory.max holds 'lots'"),
        ({"proc/self/cgroup": "nonsense\n"}, "cgroup memory limit: cannot read (/proc/self/cgroup names no memory cgroup"),
    ],
)
def test_an_unreadable_limit_is_a_line(fake_root, doubles, changes: dict[str, str], said: str) -> None:
    result = run_g3(fake_root, doubles, files(changes), workload_gb=10)
    assert (result.status, result.codes) == (Status.PASS, [])
    assert detail(result, said)


def test_no_cgroupfs_is_a_line(fake_root, doubles) -> None:
    root = files()
    del root["sys/fs/cgroup/memory.max"]
    result = run_g3(fake_root, doubles, root)
    assert detail(result, "cgroup memory limit: cannot read (/sys/fs/cgroup is not mounted")


def ray_site(tmp_path: Path, version: str = "2.49.2") -> str:
    site = tmp_path / "site"
    meta = site / f"ray-{version}.dist-info"
    meta.mkdir(parents=True)
    (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: ray\nVersion: {version}\n")
    return str(site)


def test_ray_installed_on_a_spark_warns_with_the_fix(fake_root, doubles, tmp_path: Path) -> None:
    """MiaAI-Lab GLM-5.3-Flash-NVFP4-Dual-DGX-Spark PR #2: `ray.exceptions.OutOfMemoryError … (0.950345)`."""
    env = {"PYTHONPATH": ray_site(tmp_path), "SPARK_PREFLIGHT_PYTHON_PATH": ""}
    result = run_g3(fake_root, doubles, files(), env=env, profile="gb10")
    assert (result.status, result.code) == (Status.WARN, "G3.ray-memory-monitor")
    assert result.summary.startswith("Ray 2.49.2 kills workers once node memory passes 0.95 (115.6 of 121.7 GiB)")
    assert result.fix == "export RAY_memory_monitor_refresh_ms=0 on every node before ray start"
    assert result.reading("ray_memory_threshold").value == 0.95
    off = run_g3(fake_root, doubles, files(), env={**env, "RAY_memory_monitor_refresh_ms": "0"}, profile="gb10")
    assert off.codes == ["G3.no-workload"] and detail(off, "Ray's memory monitor is off")
    assert run_g3(fake_root, doubles, files(), env={**env, "RAY_memory_usage_threshold": "x"},
                  profile="gb10").codes == ["G3.no-workload"]


def test_ray_on_a_discrete_gpu_is_a_note() -> None:
    facts = g3.Facts(meminfo={"MemTotal": 131981020, "MemFree": 130000000}, ray=g3.RayMonitor(version="2.49.2"))
    result = g3.evaluate(facts, GENERIC)
    assert result.codes == ["G3.no-workload"]
    assert detail(result, "Ray 2.49.2 kills workers once node memory passes 0.95")
    assert g3.evaluate(facts, GB10).code == "G3.ray-memory-monitor"


@pytest.mark.parametrize(
    ("mounts", "size", "noted"),
    [
        (gb10.PROC_MOUNTS, 0.1, False),
        ("tmpfs /dev/shm tmpfs rw,nosuid,nodev,inode64 0 0\n", 60.8, True),  # a bare host: half of RAM
        ("shm /dev/shm tmpfs rw,size=64g 0 0\n", 64.0, True),  # F6: `shm_size: 64gb`
        ("shm /dev/shm tmpfs rw,size=10% 0 0\n", 12.2, False),
        ("proc /proc proc rw 0 0\n", None, False),
    ],
)
def test_dev_shm(fake_root, doubles, mounts: str, size: float | None, noted: bool) -> None:
    result = run_g3(fake_root, doubles, files({"proc/mounts": mounts}))
    assert result.codes == ["G3.no-workload"]  # a note, never a finding
    assert (result.reading("dev_shm_size").value if result.reading("dev_shm_size") else None) == size
    assert any(d.startswith("/dev/shm (tmpfs) may grow to") for d in result.details) is noted


def test_a_garbage_shm_size_is_a_line(fake_root, doubles) -> None:
    result = run_g3(fake_root, doubles, files({"proc/mounts": "shm /dev/shm tmpfs rw,size=lots 0 0\n"}))
    assert detail(result, "/dev/shm: cannot read its size (/proc/mounts: /dev/shm size option 'size=lots'")


def test_a_recent_oom_kill_warns_naming_the_victim() -> None:
    """LMCache #4759: the kernel killed the lmcache server beside a vLLM cold boot on a Spark."""
    kills = mp.parse_oom_kills((DATA / "dmesg_oom_1.txt").read_text().splitlines())
    facts = g3.Facts(meminfo=_meminfo(), oom_kills=kills)
    result = g3.evaluate(facts, GB10)
    assert (result.status, result.codes) == (Status.WARN, ["G3.oom-kills", "G3.no-workload"])
    assert result.summary.startswith(
        "the kernel's OOM killer killed 1 process since boot, the latest pid 3742074 (lmcache, anon-rss 1 GiB)")
    assert result.summary.endswith("MemAvailable 112.8 GiB of 121.7 GiB (MemFree 96.0, page cache 17.2, swap free "
                                   "16.0 GiB); no workload declared (--spark-workload-gb)")
    assert result.headline == "kernel OOM-killed pid 3742074 (lmcache)"
    assert "add swap" in result.fix
    none = g3.evaluate(g3.Facts(meminfo=_meminfo(), oom_kills=[]), GB10)
    assert none.codes == ["G3.no-workload"] and none.reading("oom_kills").value == 0


def _meminfo() -> dict[str, int]:
    from pytest_dgx_spark.probes.procfs import parse_meminfo

    return parse_meminfo(gb10.meminfo())


def test_findings_merge_worst_first_with_the_headroom_first_among_equals(fake_root, doubles) -> None:
    root = files(fragmented_4k())
    result = run_g3(fake_root, doubles, root, workload_gb=118)  # the headroom FAILs too
    assert (result.status, result.codes) == (Status.FAIL, ["G3.exceeds-available", "G3.fragmented"])
    assert result.summary.startswith("workload 118 GiB > MemAvailable 117.5 GiB")
    assert result.headline.endswith("(+1 more)")


def test_every_reading_reaches_the_env_report(fake_root, doubles) -> None:
    from pytest_dgx_spark import report

    result = run_g3(fake_root, doubles, files(fragmented_64k()))
    env = report.env_report([result], strict=False, host=None)
    readings = env["readings"]["G3"]
    assert readings["normal_free_blocks"] == {"value": 0, "unit": "x 32 MiB"}
    assert readings["compact_fail"]["value"] == SPARKRING_FAIL
    assert any("kernel OOM kills" in d for d in env["details"]["G3"])



def test_a_capture_from_before_these_readings_replays_them_as_not_read() -> None:
    """The H200 and GB10 captures in tests/data/captures predate them: G3 still decides from
    their meminfo (test_captures_replay.py keeps their lines), a core field missing still SKIPs."""
    from pytest_dgx_spark.capture import facts_mismatch

    old = {"meminfo": _meminfo(), "meminfo_error": None, "gpus": [], "nvml_reason": None, "drop": None}
    assert facts_mismatch("G3", g3.Facts, old, {}) is None
    skipped = facts_mismatch("G3", g3.Facts, {k: v for k, v in old.items() if k != "meminfo"}, {})
    assert skipped is not None and skipped.status is Status.SKIP and "meminfo" in skipped.summary


def test_fifos_at_every_new_file_are_lines_not_a_hang(fake_root, doubles) -> None:
    """A FIFO where a /proc or cgroup file should be would block a plain open(): each is refused
    with its reason (procfs.read_regular), and G3 keeps the headroom's line."""
    root = fake_root(files())
    for rel in ("proc/buddyinfo", "proc/vmstat", "sys/fs/cgroup/memory.max", "proc/mounts"):
        (root / rel).unlink()
        os.mkfifo(root / rel)
    machine = Machine(root=root, env=doubles.nvml(gb10.nvml()).env)
    result = Engine(Settings(), machine).run("G3")
    assert result.codes == ["G3.no-workload"] and result.headline == HEALTHY_G3
    fifo = "not a regular file (a FIFO)"
    assert detail(result, f"free-block check not made: cannot read /proc/buddyinfo: {fifo}")
    assert detail(result, f"compaction counters: cannot read /proc/vmstat: {fifo}")
    assert detail(result, f"cgroup memory limit: cannot read (cannot read /sys/fs/cgroup/memory.max: {fifo})")
    assert detail(result, f"/dev/shm: cannot read its size (cannot read /proc/mounts: {fifo}")


def test_the_oom_kill_is_read_from_the_kernel_log_under_the_root(fake_root, doubles) -> None:
    """The whole path: LMCache #4759's kernel lines as /dev/kmsg records under the machine root
    (the log G4 reads for Xids) make G3 name the victim; a root with no readable kernel log
    reads "not read", not "no kill"."""
    from pytest_dgx_spark.checks.g03_uma_headroom import pressure as g3p

    posted = [ln.split("] ", 1)[1] for ln in (DATA / "dmesg_oom_1.txt").read_text().splitlines() if "] " in ln]
    unread = run_g3(fake_root, doubles, files())  # no dev/kmsg; journalctl and dmesg are off the test PATH
    assert unread.reading("oom_kills") is None and g3p.KERNEL_LOG_PENDING in unread.details
    result = run_g3(fake_root, doubles, files({"dev/kmsg": gb10.kmsg(posted)}))  # the same root, planted
    assert result.code == "G3.oom-kills" and result.headline == "kernel OOM-killed pid 3742074 (lmcache)"
