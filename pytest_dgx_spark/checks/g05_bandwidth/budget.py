"""G5's budget (pure): what the memory moves in a real dense decode (the planning figure) and in a
microbenchmark (the hardware figure, the copy probe's healthy reference) — GB10's measured figures from
the thresholds, elsewhere derived from NVML's bus width and memory clock unless set explicitly."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_dgx_spark.checks.kit import Params
from pytest_dgx_spark.datadef import define

if TYPE_CHECKING:  # pragma: no cover
    from pytest_dgx_spark.checks.g05_bandwidth.check import Facts


def gbps(value: float | None) -> str:
    """Whole GB/s above 100 (4814, not 4814.3); three digits below."""
    if value is None:
        return "[N/A]"
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


@define
class Budget:
    """What the memory moves in a real dense decode (the planning figure) and in a
    microbenchmark (the hardware figure, the probe's healthy reference)."""

    decode_low: float | None
    decode_high: float | None
    hardware_low: float | None
    hardware_high: float | None
    spec: float | None
    spec_source: str

    @property
    def healthy(self) -> float | None:
        return self.hardware_low or self.hardware_high

    @property
    def high(self) -> float | None:
        """The most a plan may assume."""
        return self.decode_high or self.hardware_high

    def decode_text(self) -> str:
        return _band(self.decode_low, self.decode_high)

    def hardware_text(self) -> str:
        return _band(self.hardware_low, self.hardware_high)

    def text(self) -> str:
        if self.high is None:
            return "no budget (NVML gave no memory bus width or clock)"
        word = "peak" if self.spec_source.startswith("NVML") else "spec"
        spec = f"{word} {gbps(self.spec)} GB/s, {self.spec_source}" if self.spec else ""
        decode, hardware = self.decode_text(), self.hardware_text()
        if decode == hardware:
            return f"{decode} GB/s budget" + (f" ({spec})" if spec else "")
        return f"{decode} GB/s real-decode budget (hardware {hardware} GB/s" + (f", {spec})" if spec else ")")


def _band(low: float | None, high: float | None) -> str:
    return f"{gbps(low)}-{gbps(high)}" if low and high and gbps(low) != gbps(high) else gbps(high or low)


def theoretical_peak(bus_width_bits: int | None, max_mem_clock_mhz: int | None) -> float | None:
    """Bus width x max memory clock x 2 (DDR) / 8 bits, in GB/s (H200: 6016 x 3201 -> 4814)."""
    if not bus_width_bits or not max_mem_clock_mhz:
        return None
    return round(bus_width_bits / 8 * max_mem_clock_mhz * 1e6 * 2 / 1e9, 1)


def budget(facts: Facts, params: Params) -> Budget:
    """GB10: the configured (measured) figures. Elsewhere: from NVML, unless set explicitly."""

    def pair(low_name: str, high_name: str, derived: float | None) -> tuple[float | None, float | None]:
        low = params.threshold(low_name) or None
        high = params.threshold(high_name) or low or derived
        low = low or high
        return (high, low) if low and high and low > high else (low, high)

    spec = params.threshold("g5_spec_gbps") or None
    source = "GB10 LPDDR5X spec" if params.gb10 else "configured"
    peak = theoretical_peak(facts.bus_width_bits, facts.max_mem_clock_mhz)
    if spec is None and peak is not None:
        spec, source = peak, f"NVML {facts.bus_width_bits}-bit x {facts.max_mem_clock_mhz} MHz x 2"
    sustained = round(spec * params.threshold("g5_generic_budget_fraction"), 1) if spec else None
    hw_low, hw_high = pair("g5_hardware_low_gbps", "g5_hardware_high_gbps", sustained)
    dec_low, dec_high = pair("g5_decode_low_gbps", "g5_decode_high_gbps", sustained)
    return Budget(dec_low, dec_high, hw_low, hw_high, spec, source)
