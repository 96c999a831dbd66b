"""G4's finding codes: each stable code its results may carry, with what it means. A code once
released is never renamed or removed; ``docs/REFERENCE.md``'s findings table is built from these.

The fixes the findings give live here too, next to their codes (the watch's rules name the Xid ones)."""

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

DRIVER_FIX = ("check `dmesg | grep -i -e NVRM -e Xid` (Xid 79: fallen off the bus); a wedged driver needs a "
              "reboot (on GB10 a full AC power cycle if it persists)")
DRIVER_SHORT = "dmesg | grep -i Xid; reboot"
COOL_FIX = ("cool it (clear vents, lower ambient); on GB10 `sudo nvidia-smi -lgc 0,2100` caps the clock "
            "(reported to take 91-92 C down to 65-80 C)")
COOL_SHORT = "cool it; cap clocks: sudo nvidia-smi -lgc 0,2100"
BRAKE_FIX = ("the power supply asserted the brake: check the adapter and cable (GB10: the 240 W USB-C PD "
             "supply; a full AC power cycle clears a degraded PD state)")
BRAKE_SHORT = "check the power adapter; full AC power cycle"
FLAT_FIX = ("power held down while the chip heats is the seed's throttling pattern: check cooling and "
            "the power adapter, then re-sample under the real load (--spark-thermal-seconds 900, or the "
            "spark_sampler fixture in a training smoke test)")
FLAT_SHORT = "check cooling and power adapter; re-sample under load"
HW_SLOWDOWN_FIX = ("HW slowdown is heat or the power supply: check cooling, the supply and dmesg",
                   "check cooling, the power supply and dmesg")
LOW_POWER_FIX = ("a stuck low-power (USB-C PD) state: unplug the power brick from the wall and from the "
                 "Spark, wait 60 s, plug it back in (`nvidia-smi -lgc` does not lift it); if it persists, "
                 "try another 240 W supply, then RMA")
LOW_POWER_SHORT = "unplug the power brick (wall + Spark), wait 60 s"

#: the fix of a hardware-class Xid, by the codes it applies to (the first that matches), and its short form
XID_FIXES: tuple[tuple[frozenset[int] | None, str, str], ...] = (
    (frozenset({119, 120}), "GSP firmware hang (display hotplug polling, suspend): add `options nvidia "
     "NVreg_EnableHotplugDetection=0` to /etc/modprobe.d/, disable nvidia-suspend, nvidia-hibernate and "
     "nvidia-resume (`sudo systemctl disable nvidia-suspend nvidia-hibernate nvidia-resume`; driver updates "
     "re-enable them), `sudo update-initramfs -u`, reboot",
     "NVreg_EnableHotplugDetection=0; disable nvidia-suspend; reboot"),
    (frozenset({169}), "the proprietary kernel modules cannot drive GB10 (Blackwell is supported by the open "
     "kernel modules only): install the open flavour of the same driver (nvidia-driver-<ver>-open / "
     "nvidia-open) and reboot", "install the open kernel modules; reboot"),
    (frozenset({79, 154}), "the GPU needs a reset: reboot; if it comes back, a full power cycle (unplug the "
     "power brick, wait 60 s)", "reboot; if it persists, full AC power cycle"),
    (None, "reboot; if the Xid comes back, collect `sudo nvidia-bug-report.sh` and contact NVIDIA support "
     "(possible RMA)", "reboot; nvidia-bug-report.sh if it recurs"),
)
XID_APP_FIX = ("a GPU kernel of that process faulted and the process most likely died (a service may "
               "still exit 0): update or patch the kernel path it ran (nightly NVFP4/FP8 kernels, attention "
               "backends), then re-run it")
XID_OTHER_FIX = "look the Xid up in NVIDIA's Xid catalogue (docs.nvidia.com/deploy/xid-errors)"
