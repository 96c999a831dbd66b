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
