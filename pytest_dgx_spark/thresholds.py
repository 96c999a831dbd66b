"""Named, configurable thresholds and their defaults per profile.

The seed's numbers (G4's 100 W, G5's former 180-192 GB/s, G6's 0.5 cap) are community
observations, not NVIDIA specifications (see docs/EVIDENCE.md). Each one is a
default here that a user can override with ``--spark-threshold NAME=VALUE`` or
the ``spark_preflight_thresholds`` ini lines, and each verdict quotes the value
it used.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Threshold:
    name: str
    gb10: float
    generic: float
    unit: str
    help: str


THRESHOLDS: dict[str, Threshold] = {
    t.name: t
    for t in (
        Threshold(
            "g1_cuda_major",
            13.0,
            0.0,
            "",
            "G1: the CUDA major torch must be built for (GB10/SM121 needs CUDA 13; 0: no requirement "
            "beyond the driver's)",
        ),
        Threshold(
            "g3_margin_gb",
            0.0,
            0.0,
            "GiB",
            "G3: headroom to keep free beyond the declared workload",
        ),
        Threshold(
            "g4_flat_power_w",
            100.0,
            0.0,
            "W",
            "G4: power that counts as 'flat well under the limit' while temperature climbs "
            "(GB10: the seed's ~100 W, a community observation; GB10's SoC TDP is 140 W and its "
            "PSU 240 W; 0 = derive from the enforced limit x g4_flat_power_fraction)",
        ),
        Threshold(
            "g4_flat_power_fraction",
            0.5,
            0.5,
            "",
            "G4: on a GPU with an enforced power limit, 'well under' means below this fraction of it",
        ),
        Threshold(
            "g4_flat_power_band_fraction",
            0.15,
            0.15,
            "",
            "G4: 'flat' means the power stayed within this fraction of the flat-power ceiling "
            "(15 W of GB10's 100 W), so a load ramping up is not mistaken for a plateau",
        ),
        Threshold(
            "g4_idle_power_w",
            20.0,
            0.0,
            "W",
            "G4: a GPU whose power never rose above this is idle, so the flat-power rule does not "
            "apply (GB10 never sets GpuIdle: it reads 0x0 idle; it idles at 3-16 W, nvidia-smi_6.txt, "
            "nvidia-smi_clocks_power_1.txt, and draws 37-105 W loaded, nvidia-smi_clocks_power_2.txt, "
            "nvidia-smi-q_1.txt; 0 = off, GpuIdle alone decides)",
        ),
        Threshold(
            "g4_temp_rise_c",
            5.0,
            5.0,
            "C",
            "G4: temperature rise over the sample that counts as 'climbing'",
        ),
        Threshold(
            "g4_slowdown_since_boot_s",
            10.0,
            10.0,
            "s",
            "G4: thermal + power-brake slowdown since the driver loaded (clock-event counters) above "
            "this warns. GB10: a working node counted 1.2 s of HW thermal slowdown "
            "(nvidia-smi_clocks_power_1.txt), a 91-92 C box 27.6 s of SW thermal slowdown "
            "(thermal_1.txt); hours of SW power capping are normal there and never warn",
        ),
        Threshold(
            "g4_slowdown_growth_s",
            0.0,
            0.0,
            "s",
            "G4: thermal or power-brake slowdown that grew by more than this during the sample "
            "warns (0: any growth; the counters count microseconds the clocks were cut)",
        ),
        Threshold(
            "g4_hot_c",
            85.0,
            0.0,
            "C",
            "G4: a GPU temperature at or above this warns (GB10: throttling starts near 86-87 C, "
            "thermal_2.txt; 0 = off, the T.Limit margin rule covers other GPUs)",
        ),
        Threshold(
            "g4_tlimit_margin_c",
            3.0,
            3.0,
            "C",
            "G4: a 'GPU T.Limit Temp' margin (degrees left before the slowdown limit) at or below "
            "this warns",
        ),
        Threshold(
            "g5_hardware_low_gbps",
            218.0,
            0.0,
            "GB/s",
            "G5: low end of what GB10's memory moves in a microbenchmark (218 GB/s measured, "
            "bandwidth_2.txt); the copy probe's healthy reference (generic: from NVML)",
        ),
        Threshold(
            "g5_hardware_high_gbps",
            234.0,
            0.0,
            "GB/s",
            "G5: high end of GB10's microbenchmark bandwidth (231-234 GB/s saturating read, "
            "bandwidth_1.txt; 185-223 GB/s, bandwidth_3.txt); a plan above it cannot be met",
        ),
        Threshold(
            "g5_decode_low_gbps",
            160.0,
            0.0,
            "GB/s",
            "G5: low end of what a real dense decode sustains on GB10 (Llama-3.3-70B NVFP4: "
            "40.61 GB/token x 4.0-4.2 tok/s = 162-171 GB/s effective, workload_bandwidth_1.txt)",
        ),
        Threshold(
            "g5_decode_high_gbps",
            190.0,
            0.0,
            "GB/s",
            "G5: high end of real decode bandwidth on GB10 (190 GB/s for FP4 weight kernels, "
            "bandwidth_3.txt; a dense decode reaches 162-171, workload_bandwidth_1.txt); a plan above it "
            "warns (generic: from NVML)",
        ),
        Threshold(
            "g5_spec_gbps",
            273.0,
            0.0,
            "GB/s",
            "G5: spec (theoretical) bandwidth (GB10: 273 GB/s; generic: from NVML)",
        ),
        Threshold(
            "g5_healthy_fraction",
            0.75,
            0.75,
            "",
            "G5: a measured copy bandwidth below this fraction of the healthy figure warns",
        ),
        Threshold(
            "g5_generic_budget_fraction",
            0.7,
            0.7,
            "",
            "G5 (generic profile): sustained (hardware and decode) figure as a fraction of the "
            "NVML theoretical peak, when the g5_hardware/g5_decode thresholds are 0",
        ),
        Threshold(
            "g5_probe_buffer_mib",
            1024.0,
            1024.0,
            "MiB",
            "G5: size of each of the two buffers of the intrusive copy probe (at least 512 MiB)",
        ),
        Threshold(
            "g5_probe_margin_gb",
            4.0,
            4.0,
            "GiB",
            "G5: MemAvailable the copy probe leaves untouched beyond its two buffers; it refuses "
            "to run with less",
        ),
        Threshold(
            "g6_cap_max",
            0.5,
            0.5,
            "",
            "G6: another GPU process capped at or below this memory fraction may coexist",
        ),
        Threshold(
            "g6_vllm_default_util",
            0.9,
            0.9,
            "",
            "G6: vLLM's --gpu-memory-utilization when the flag is absent (0.9 per the SPEC and "
            "vLLM <= 0.6 docs; newer vLLM docs say 0.92)",
        ),
        Threshold(
            "g6_small_process_gb",
            1.0,
            1.0,
            "GiB",
            "G6: a graphics-only process (the desktop: Xorg, gnome-shell) using less than this "
            "is listed but does not count as contention",
        ),
        Threshold(
            "g7_triton_ptxas_min",
            12.9,
            12.9,
            "CUDA release",
            "G7: Triton's ptxas for SM121 older than this CUDA release rejects sm_121a and breaks "
            "torch.compile (Triton's bundled 12.8 fails, triton #8539; CUDA 12.9 added sm_121)",
        ),
        Threshold(
            "g10_busbw_floor_gbps",
            20.0,
            20.0,
            "GB/s",
            "G10: NCCL all-reduce bus bandwidth below this warns (two-Spark link: 20-24 GB/s)",
        ),
    )
}


def defaults(profile: str) -> dict[str, float]:
    """Default thresholds for ``gb10`` or ``generic``."""
    return {name: (t.gb10 if profile == "gb10" else t.generic) for name, t in THRESHOLDS.items()}
