"""G3's finding codes: each stable code its results may carry, with what it means. A code once
released is never renamed or removed; ``docs/REFERENCE.md``'s findings table is built from these."""

from __future__ import annotations

from pytest_dgx_spark.checks.spec import FindingCode

CODES: tuple[FindingCode, ...] = (
    FindingCode("G3.exceeds-total", "FAIL",
                "the declared workload is larger than the machine's whole memory"),
    FindingCode("G3.retained-memory", "FAIL",
                "the workload does not fit, and much memory is held outside every meminfo category"),
    FindingCode("G3.exceeds-available", "FAIL", "the declared workload does not fit in MemAvailable"),
    FindingCode("G3.needs-cache-drop", "WARN", "the workload fits only once the page cache is dropped"),
    FindingCode("G3.fragmented", "FAIL/WARN", "too few large free blocks in zone Normal (none: FAIL)"),
    FindingCode("G3.cgroup-below-workload", "FAIL", "the cgroup memory limit is below the declared workload"),
    FindingCode("G3.cgroup-limit", "WARN", "a cgroup memory limit well below the machine's memory"),
    FindingCode("G3.ray-memory-monitor", "WARN", "Ray's memory monitor kills workers on unified memory"),
    FindingCode("G3.oom-kills", "WARN", "the kernel's OOM killer killed processes since boot"),
    FindingCode("G3.no-workload", "INFO", "the headroom read, but no workload declared to judge it against"),
    FindingCode("G3.unreadable", "SKIP", "/proc/meminfo could not be read or is impossible"),
)
