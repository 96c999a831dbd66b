"""A DGX Spark (GB10) built from what real Sparks printed, for machines that are not one.

Every value is taken from a capture that someone posted from a real DGX Spark
(``tests/data/gb10/``, each file with its ``# source:`` line):

* NVML: ``NVIDIA GB10``, capability (12, 1), driver 580.173.02, CUDA 13.0;
  ``nvmlDeviceGetMemoryInfo`` and ``_v2`` answer ``NOT_SUPPORTED``; 35 C and
  11.17 W idle (``nvml_memory_1.txt``); power limit ``[N/A]``, SM clock 2522 of
  3003 MHz, 0 % utilisation (``nvidia-smi_3.txt``), and the cumulative clock-event counters of a healthy box: ~3 h of
  SW power capping, ~1.2 s of HW thermal slowdown since boot
  (``nvidia-smi_clocks_power_1.txt``); per-process memory works
  (``nvml_process_memory_1.txt``).
* torch: 2.11.0+cu130, CUDA 13.0, arch list ``sm_80 … sm_120`` without
  ``sm_121`` and without a PTX entry, 48 SMs, 128452014080 bytes
  (``torch_arch_list_1.txt``, ``torch_arch_list_2.txt``).
* ``/proc/meminfo``: MemTotal 127601452 kB (121.7 GiB) (``proc_meminfo_2.txt``).
* the driver stack (G1): kernel ``6.17.0-1031-nvidia`` and the open kernel
  module 580.173.02 (``proc_driver_nvidia_version_1.txt``, a Spark on driver
  580.173.02, the same as NVML's ``13.580.173.02``).
* ``/proc/buddyinfo`` and ``/proc/vmstat`` of a freshly booted Spark: made to agree with that
  meminfo (4 KiB pages, as the 4-rank DGX Spark fleet of MiaAI-Lab/DeepSeek-v4.1-Flash-DGX-Sparks
  #23 counted them: "≥1 MiB (order 8+)", "≥4 MiB (order 10+)"), most free memory in 4 MiB blocks
  as after a reboot (``memory_fragmentation_1.txt``: "your fresh boot … 24" order-10 blocks with
  an engine loaded, thousands of them without), no compaction failures. Not a posted capture:
  no Spark owner posted a whole buddyinfo.
* THP's PMD size (2 MiB: 4 KiB pages), the container's cgroup (v2, no memory limit: ``memory.max`` is ``max``) and ``/proc/mounts``
  with Docker's default 64 MiB ``/dev/shm``.
"""

from __future__ import annotations

import copy
from typing import Any

GIB_KB = 1024 * 1024

NVML: dict[str, Any] = {
    "driver_version": "580.173.02",
    "nvml_version": "13.580.173.02",
    "cuda_driver_version": 13000,
    "devices": [
        {
            "name": "NVIDIA GB10",
            "uuid": "GPU-8b1f3c52-0000-4d2e-9a41-gb10double",
            "pci_bus_id": "0000000F:01:00.0",
            "capability": [12, 1],
            "memory": "NotSupported",
            "power_usage_mw": 11170,
            "power_limit_mw": "NotSupported",
            "temperature_c": 35,
            "clock_sm_mhz": 2522,
            "clock_mem_mhz": "NotSupported",
            "max_clock_mem_mhz": "NotSupported",
            "max_clock_sm_mhz": 3003,
            "mem_bus_width_bits": "NotSupported",
            "clock_event_reasons": 0,
            "utilization_gpu": 0,  # idle: GPU-Util 0% (nvidia-smi_3.txt)
            # cumulative clock-event counters, us (nvidia-smi_clocks_power_1.txt, a healthy node)
            "counters": {
                "sw_power_cap": 10800240649,
                "sync_boost": 0,
                "sw_thermal_slowdown": 0,
                "hw_thermal_slowdown": 1195386,
                "hw_power_brake_slowdown": 0,
            },
            "compute_procs": [],
            "graphics_procs": [],
        }
    ],
}

TORCH: dict[str, Any] = {
    "version": "2.11.0+cu130",
    "cuda": "13.0",
    "available": True,
    "capability": [12, 1],
    "name": "NVIDIA GB10",
    "arch_list": ["sm_80", "sm_90", "sm_100", "sm_110", "sm_120"],
    "total_memory": 128452014080,
    "multi_processor_count": 48,
    "is_integrated": True,
    "cudnn": 91300,
}


#: ``/proc/sys/kernel/osrelease`` and ``/proc/driver/nvidia/version`` of a healthy Spark
#: (proc_driver_nvidia_version_1.txt: spark-0e68, Linux 6.17.0-1031-nvidia, driver 580.173.02)
OSRELEASE = "6.17.0-1031-nvidia\n"
NVIDIA_VERSION = "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.173.02\n"


def stack_files(osrelease: str = OSRELEASE, nvidia_version: str = NVIDIA_VERSION) -> dict[str, str]:
    """The driver-stack files of a machine root (``make_root``), a healthy Spark's by default, and
    what a check added later reads on a healthy Spark (its test module's ``GB10_FILES``: tests/declared.py)."""
    return {"proc/sys/kernel/osrelease": osrelease, "proc/driver/nvidia/version": nvidia_version, **later_files()}


def later_files() -> dict[str, str]:
    """The files the checks' own test modules declare a healthy Spark holds for them (``GB10_FILES``)."""
    import declared  # tests/ is on sys.path (conftest)

    files: dict[str, str] = declared.by_checks("GB10_FILES")
    return files


#: MemTotal of a real Spark (proc_meminfo_2.txt), in kB
SPARK_MEMTOTAL_KB = 127601452


def meminfo(total_gib: float = SPARK_MEMTOTAL_KB / GIB_KB, free_gib: float = 96.0, cache_gib: float = 17.0) -> str:
    """``/proc/meminfo`` of a 121.7 GiB Spark holding ``cache_gib`` of page cache."""
    total = int(total_gib * GIB_KB)
    free = int(free_gib * GIB_KB)
    cached = int(cache_gib * GIB_KB)
    buffers = 262144
    available = free + cached + buffers - 524288
    lines = [
        ("MemTotal", total),
        ("MemFree", free),
        ("MemAvailable", available),
        ("Buffers", buffers),
        ("Cached", cached),
        ("SwapCached", 0),
        ("Active", 4 * GIB_KB),
        ("Inactive", cached),
        ("SwapTotal", 16 * GIB_KB),
        ("SwapFree", 16 * GIB_KB),
        ("Dirty", 120),
        ("AnonPages", 3 * GIB_KB),
        ("Shmem", 81920),
        ("SReclaimable", 409600),
        ("SUnreclaim", 204800),
    ]
    text = "".join(f"{k + ':':<16}{v:>8} kB\n" for k, v in lines)
    text += "HugePages_Total:       0\nHugePages_Free:        0\nHugePages_Rsvd:        0\n"
    text += "HugePages_Surp:        0\nHugepagesize:       2048 kB\n"
    return text


def nvml(**changes: Any) -> dict[str, Any]:
    scenario = copy.deepcopy(NVML)
    dev_changes = changes.pop("device", {})
    scenario["devices"][0].update(dev_changes)
    scenario.update(changes)
    return scenario


def torch(**changes: Any) -> dict[str, Any]:
    scenario = copy.deepcopy(TORCH)
    scenario.update(changes)
    return scenario


def zone_counts(pages: int, fixed: dict[int, int], fill_order: int, orders: int = 11) -> list[int]:
    """Free blocks per order holding ``pages`` pages: ``fixed`` counts, the rest in blocks of
    ``fill_order`` (what does not fill one goes to order 0)."""
    counts = [fixed.get(o, 0) for o in range(orders)]
    rest = pages - sum(c << o for o, c in enumerate(counts))
    counts[fill_order] += rest >> fill_order
    counts[0] += rest - ((rest >> fill_order) << fill_order)
    return counts


def buddy_lines(zones: dict[str, list[int]]) -> str:
    """``/proc/buddyinfo`` lines of node 0, in the kernel's format."""
    return "".join(f"Node 0, zone {name:>8} " + " ".join(f"{c:6d}" for c in counts) + "\n" for name, counts in zones.items())


#: a healthy zone's small blocks (orders 0-9); order 10 (4 MiB) holds the rest
_SMALL = {0: 2317, 1: 1402, 2: 873, 3: 512, 4: 301, 5: 166, 6: 97, 7: 52, 8: 31, 9: 24}
_DMA_PAGES = int(2.9 * GIB_KB) // 4
_DMA = zone_counts(_DMA_PAGES, {0: 3, 1: 2, 2: 4, 3: 3, 4: 2, 5: 3, 6: 2, 7: 2, 8: 3, 9: 2}, 10)


def buddyinfo(free_gib: float = 96.0) -> str:
    """``/proc/buddyinfo`` of a freshly booted 4 KiB-page Spark with ``free_gib`` free (as :func:`meminfo`)."""
    normal = int(free_gib * GIB_KB) // 4 - _DMA_PAGES
    return buddy_lines({"DMA": _DMA, "Normal": zone_counts(normal, _SMALL, 10)})


def buddyinfo_fragmented_4k() -> str:
    """Worker 1 of MiaAI-Lab/DeepSeek-v4.1-Flash-DGX-Sparks #23 (``memory_fragmentation_1.txt``):
    891 MB free in zone Normal, 49 blocks of 1 MiB or more (order 8+), none of 4 MiB (order 10+);
    the DMA zone as on the healthy double (G3 counts zone Normal only). MemFree 3.77 GiB."""
    normal = 891 * 1000 * 1000 // 4096
    return buddy_lines({"DMA": _DMA, "Normal": zone_counts(normal, {0: 5210, 1: 3904, 2: 2411, 3: 1720, 4: 811, 5: 402, 6: 190, 8: 41, 9: 8}, 7)})


def buddyinfo_fragmented_64k(free_gib: float = 100.0) -> str:
    """A 64 KiB-page rank of FujitsuPolycom/sparkring #173 (``memory_fragmentation_1.txt``) after
    ~7 days of serving: 27 blocks of 16 MiB (order 8), zero of 32 MiB or more (orders 9-13),
    ``free_gib`` free in smaller blocks (14 orders: arm64's 64 KiB pages reach 512 MiB)."""
    pages = int(free_gib * GIB_KB) // 64
    return buddy_lines({"Normal": zone_counts(pages, {0: 20117, 1: 9310, 2: 4406, 3: 2120, 4: 1100, 5: 540, 6: 260, 8: 27}, 7, 14)})


def free_pages(text: str) -> int:
    """The free pages a buddyinfo holds (what ``nr_free_pages`` counts, per-CPU lists aside)."""
    total = 0
    for line in text.splitlines():  # "Node 0, zone Normal c0 c1 …"
        counts = [int(c) for c in line.split()[4:]]
        total += sum(c << o for o, c in enumerate(counts))
    return total


def vmstat(free_pages: int, compact_stall: int = 3, compact_fail: int = 0, compact_success: int = 3) -> str:
    """The ``/proc/vmstat`` lines G3 reads, among a few of their real neighbours."""
    rows = [
        ("nr_free_pages", free_pages), ("nr_zone_inactive_anon", 18213), ("nr_zone_active_anon", 768051),
        ("nr_inactive_file", 4456448), ("nr_active_file", 1048576), ("pgfault", 31877412),
        ("compact_migrate_scanned", 1220), ("compact_free_scanned", 41860), ("compact_isolated", 2304),
        ("compact_stall", compact_stall), ("compact_fail", compact_fail), ("compact_success", compact_success),
        ("compact_daemon_wake", 14),
    ]
    return "".join(f"{k} {v}\n" for k, v in rows)


#: ``/proc/mounts`` inside a Docker container (the double's ``/.dockerenv``): Docker's 64 MiB /dev/shm
PROC_MOUNTS = (
    "overlay / overlay rw,relatime,lowerdir=/var/lib/docker/overlay2/l/Q3ZK:/var/lib/docker/overlay2/l/7TBA,"
    "upperdir=/var/lib/docker/overlay2/9c1f/diff,workdir=/var/lib/docker/overlay2/9c1f/work 0 0\n"
    "proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0\n"
    "tmpfs /dev tmpfs rw,nosuid,size=65536k,mode=755,inode64 0 0\n"
    "shm /dev/shm tmpfs rw,nosuid,nodev,noexec,relatime,size=65536k,inode64 0 0\n"
    "cgroup /sys/fs/cgroup cgroup2 ro,nosuid,nodev,noexec,relatime 0 0\n"
)


def memory_files(free_gib: float = 96.0) -> dict[str, str]:
    """The healthy Spark's memory-state files under a machine root (G3): buddyinfo and vmstat
    agreeing with :func:`meminfo`, the container's cgroup without a memory limit, its mounts."""
    buddy = buddyinfo(free_gib)
    return {
        "proc/buddyinfo": buddy,
        "proc/vmstat": vmstat(free_pages(buddy)),
        "proc/self/cgroup": "0::/\n",
        "sys/fs/cgroup/memory.max": "max\n",
        "proc/mounts": PROC_MOUNTS,
        # THP's PMD size: 2 MiB = 4 KiB pages (a 64 KiB-page kernel says 536870912)
        "sys/kernel/mm/transparent_hugepage/hpage_pmd_size": "2097152\n",
    }


#: lines a real Spark's kernel logged: the GPU found at GB10's bus id (dmesg_xid_5.txt)
GPU_FOUND = "NVRM: GPU at PCI:000f:01:00: GPU-0f059bf0-a212-94c1-44a7-1068a6c6be66"


def kmsg(lines: list[str], *, first_seq: int = 1, first_usec: int = 5_123_456, step_usec: int = 1_000_000) -> str:
    """``/dev/kmsg`` records (``pri,seq,usec,flags;text``, the kernel's format: Documentation/ABI/
    testing/dev-kmsg) holding ``lines``, one second apart; a plain file under a test root is
    read line by line. Priority 3 (err) for NVRM lines, as the driver logs Xids, else 6 (info)."""
    out = []
    for n, text in enumerate(lines):
        pri = 3 if text.startswith("NVRM:") and "Xid" in text else 6
        out.append(f"{pri},{first_seq + n},{first_usec + n * step_usec},-;{text}\n")
    return "".join(out)


#: a healthy Spark's kernel log: the GPU found, no Xid
HEALTHY_KMSG = kmsg([GPU_FOUND])
