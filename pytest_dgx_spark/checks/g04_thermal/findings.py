"""G4's finding codes: each stable code its results may carry, with what it means. A code once
released is never renamed or removed; ``docs/REFERENCE.md``'s findings table is built from these."""

from __future__ import annotations

from pytest_dgx_spark.checks.spec import FindingCode

CODES: tuple[FindingCode, ...] = (
    FindingCode("G4.driver-not-answering", "FAIL", "the GPU driver hung or stopped answering"),
    FindingCode("G4.gpu-lost", "FAIL", "a GPU was lost mid-sample (GpuIsLost)"),
    FindingCode("G4.gpu-errors", "FAIL", "a GPU answered errors only"),
    FindingCode("G4.xid-hardware", "FAIL", "GSP/hardware Xid faults in the kernel log since boot"),
    FindingCode("G4.xid-application", "WARN", "an application Xid (a GPU kernel faulted) since boot"),
    FindingCode("G4.xid-other", "WARN", "other Xid events in the kernel log since boot"),
    FindingCode("G4.low-power-stuck", "FAIL",
                "under load, SM clock and power both under the low-power gate with no throttle reason"),
    FindingCode("G4.throttle-reasons", "WARN", "thermal or power throttle reasons during the sample"),
    FindingCode("G4.temperature-high", "WARN", "the GPU temperature reached the warning level"),
    FindingCode("G4.tlimit-margin", "WARN", "the GPU is within the T.Limit margin of its slowdown limit"),
    FindingCode("G4.flat-power", "WARN", "power flat under the limit while the temperature rose"),
    FindingCode("G4.clocks-cut", "WARN", "thermal or power-brake slowdown counters grew during the sample"),
    FindingCode("G4.clocks-cut-since-boot", "WARN",
                "thermal slowdown since the driver loaded beyond the threshold"),
    FindingCode("G4.no-gpu", "SKIP", "no NVIDIA GPU to sample"),
    FindingCode("G4.resource-limit", "SKIP", "not checked: a resource limit stopped the sampler"),
)
