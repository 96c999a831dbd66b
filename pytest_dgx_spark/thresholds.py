"""Named thresholds with their GB10 and generic-profile defaults.

Each is a default a user can override (``--spark-threshold NAME=VALUE`` or the
``spark_preflight_threshold`` ini lines), and each verdict quotes the value it
used. Where every number comes from is docs/EVIDENCE.md (most are community
observations, not NVIDIA specifications).
"""

from __future__ import annotations

from typing import NamedTuple


class Threshold(NamedTuple):
    name: str
    gb10: float
    generic: float
    unit: str
    help: str


_TABLE = (
    ("g1_cuda_major", 13, 0, "", "G1: the CUDA major torch must be built for (0: the driver's)"),
    ("g3_margin_gb", 0, 0, "GiB", "G3: headroom to keep free beyond the declared workload"),
    ("g3_contig_block_mib", 32, 32, "MiB", "G3: the free block size zone Normal is counted in (larger blocks count "
     "proportionally)"),
    ("g3_contig_blocks_min", 200, 0, "blocks", "G3: fewer free g3_contig_block_mib blocks in zone Normal warns, none "
     "fails (0: off)"),
    ("g3_cgroup_limit_fraction", 0.9, 0.9, "", "G3: with no workload declared, a cgroup memory limit below this "
     "fraction of MemTotal warns"),
    ("g4_flat_power_w", 100, 0, "W", "G4: power that counts as flat well under the limit while temperature "
     "climbs (0: the enforced limit x g4_flat_power_fraction)"),
    ("g4_flat_power_fraction", 0.5, 0.5, "", "G4: with an enforced power limit, 'well under' is below this "
     "fraction of it"),
    ("g4_flat_power_band_fraction", 0.15, 0.15, "", "G4: 'flat' is within this fraction of the flat-power "
     "ceiling, so a ramp is no plateau"),
    ("g4_idle_power_w", 20, 0, "W", "G4: a GPU whose power never rose above this is idle (0: GpuIdle alone "
     "decides)"),
    ("g4_temp_rise_c", 5, 5, "C", "G4: temperature rise over the sample that counts as climbing"),
    ("g4_slowdown_since_boot_s", 10, 10, "s", "G4: thermal and power-brake slowdown since the driver loaded "
     "above this warns"),
    ("g4_slowdown_growth_s", 0, 0, "s", "G4: slowdown that grew by more than this during the sample warns"),
    ("g4_hot_c", 85, 0, "C", "G4: a GPU temperature at or above this warns (0: off)"),
    ("g4_tlimit_margin_c", 3, 3, "C", "G4: a T.Limit margin at or below this warns"),
    ("g4_low_power_util_pct", 80, 80, "%", "G4: the low-power rule judges only samples at or above this GPU "
     "utilisation (below: not under load, cannot tell)"),
    ("g4_low_power_clock_mhz", 1400, 0, "MHz", "G4: under load, an SM clock below this with power under "
     "g4_low_power_w and no throttle reason is a stuck low-power state (0: off)"),
    ("g4_low_power_w", 30, 0, "W", "G4: under load, power below this with the SM clock under "
     "g4_low_power_clock_mhz is a stuck low-power state (0: off)"),
    ("g5_hardware_low_gbps", 218, 0, "GB/s", "G5: low end of microbenchmark bandwidth, the copy probe's "
     "healthy reference (generic: from NVML)"),
    ("g5_hardware_high_gbps", 234, 0, "GB/s", "G5: high end of microbenchmark bandwidth; a plan above it "
     "cannot be met"),
    ("g5_decode_low_gbps", 160, 0, "GB/s", "G5: low end of what a real dense decode sustains"),
    ("g5_decode_high_gbps", 190, 0, "GB/s", "G5: high end of real decode bandwidth; a plan above it warns "
     "(generic: from NVML)"),
    ("g5_spec_gbps", 273, 0, "GB/s", "G5: spec (theoretical) bandwidth (generic: from NVML)"),
    ("g5_healthy_fraction", 0.75, 0.75, "", "G5: a copy bandwidth below this fraction of the healthy figure "
     "warns"),
    ("g5_generic_budget_fraction", 0.7, 0.7, "", "G5 (generic): sustained bandwidth as a fraction of the NVML "
     "peak, when the g5_hardware/g5_decode thresholds are 0"),
    ("g5_probe_buffer_mib", 1024, 1024, "MiB", "G5: each of the copy probe's two buffers (at least 512 MiB)"),
    ("g5_probe_margin_gb", 4, 4, "GiB", "G5: MemAvailable the copy probe leaves untouched beyond its "
     "buffers; it refuses to run with less"),
    ("g6_cap_max", 0.5, 0.5, "", "G6: another GPU process capped at or below this memory fraction may "
     "coexist"),
    ("g6_vllm_default_util", 0.9, 0.9, "", "G6: vLLM's --gpu-memory-utilization when the flag is absent"),
    ("g6_small_process_gb", 1, 1, "GiB", "G6: a graphics-only process (the desktop) using less than this is "
     "listed, not contention"),
    ("g7_triton_ptxas_min", 12.9, 12.9, "CUDA release", "G7: Triton's ptxas older than this rejects sm_121a "
     "and breaks torch.compile"),
    ("g7_cublas_fp8_min", 13.6, 13.6, "cuBLAS release", "G7: with --spark-precision fp8 on SM12x, cuBLAS older "
     "than this runs block-scaled FP8 GEMMs in the TN layout only (training's dgrad/wgrad fail)"),
    ("g10_busbw_floor_gbps", 20, 20, "GB/s", "G10: NCCL all-reduce bus bandwidth below this warns"),
    ("g10_busbw_fail_gbps", 5, 5, "GB/s", "G10: NCCL all-reduce bus bandwidth below this fails (a degraded "
     "link or TCP sockets)"),
    ("g10_memlock_min_mib", 1024, 1024, "MiB", "G10: a memlock limit (RLIMIT_MEMLOCK) below this, not "
     "unlimited, warns on a multi-node RDMA job"),
)
THRESHOLDS: dict[str, Threshold] = {
    row[0]: Threshold(row[0], float(row[1]), float(row[2]), row[3], row[4]) for row in _TABLE
}


def defaults(profile: str) -> dict[str, float]:
    """Default thresholds for ``gb10`` or ``generic``."""
    return {name: (t.gb10 if profile == "gb10" else t.generic) for name, t in THRESHOLDS.items()}
