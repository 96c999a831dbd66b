"""Named, configurable thresholds and their defaults per profile.

The seed's numbers (G4's 100 W, G5's 180-192 GB/s, G6's 0.5 cap) are community
observations, not NVIDIA specifications (see EVIDENCE.md). Each one is a
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
            "(GB10 community observation ~100 W; generic: derived from the enforced limit)",
        ),
        Threshold(
            "g4_flat_power_fraction",
            0.5,
            0.5,
            "",
            "G4: on a GPU with an enforced power limit, 'well under' means below this fraction of it",
        ),
        Threshold(
            "g4_temp_rise_c",
            5.0,
            5.0,
            "C",
            "G4: temperature rise over the sample that counts as 'climbing'",
        ),
        Threshold(
            "g5_budget_low_gbps",
            180.0,
            0.0,
            "GB/s",
            "G5: low end of the sustained bandwidth budget (GB10 seed figure; generic: "
            "derived from NVML bus width x memory clock)",
        ),
        Threshold(
            "g5_budget_high_gbps",
            192.0,
            0.0,
            "GB/s",
            "G5: high end of the sustained bandwidth budget (GB10 seed figure)",
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
            "G5 (generic profile): sustained budget as a fraction of the theoretical peak",
        ),
        Threshold(
            "g6_cap_max",
            0.5,
            0.5,
            "",
            "G6: another GPU process capped at or below this memory fraction may coexist",
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
