"""A DGX Spark (GB10) built from EVIDENCE.md, for machines that are not one.

Every value here is what a GB10 is documented to report (sources in
``../shared/reference/EVIDENCE.md``): NVML names it ``NVIDIA GB10`` with
capability (12, 1); its memory query answers ``NotSupported`` (unified
memory) while per-process memory works; the enforced power limit is ``N/A``;
the memory clock is ``N/A``; the driver is 580.95.05 with CUDA 13.0; stock
cu130 torch wheels list no ``sm_121``; ``/proc/meminfo`` shows ~121.7 GiB.
"""

from __future__ import annotations

import copy
from typing import Any

GIB_KB = 1024 * 1024

NVML: dict[str, Any] = {
    "driver_version": "580.95.05",
    "nvml_version": "13.580.95.05",
    "cuda_driver_version": 13000,
    "devices": [
        {
            "name": "NVIDIA GB10",
            "uuid": "GPU-8b1f3c52-0000-4d2e-9a41-gb10double",
            "pci_bus_id": "0000000F:01:00.0",
            "capability": [12, 1],
            "memory": "NotSupported",
            "power_usage_mw": 11000,
            "power_limit_mw": "NotSupported",
            "temperature_c": 45,
            "clock_sm_mhz": 2405,
            "clock_mem_mhz": "NotSupported",
            "max_clock_mem_mhz": "NotSupported",
            "max_clock_sm_mhz": 3003,
            "mem_bus_width_bits": "NotSupported",
            "clock_event_reasons": 0,
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
    "arch_list": ["sm_80", "sm_90", "sm_100", "sm_110", "sm_120", "compute_120"],
    "total_memory": 128501256192,
    "is_integrated": True,
    "cudnn": 91300,
}


def meminfo(total_gib: float = 121.7, free_gib: float = 96.0, cache_gib: float = 17.0) -> str:
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
