"""G1's driver stack stage (issue 22, N3): the kernel, the NVIDIA module (version and flavour), the
user-space library and CMA, against each other and :mod:`pytest_dgx_spark.known_bad`. A DGX OS update
can break a box that passed the day before; a capture made before these readings skips the stage."""

from __future__ import annotations

import re

from pytest_dgx_spark import known_bad, readings
from pytest_dgx_spark.checks.g01_cuda_abi.view import View
from pytest_dgx_spark.checks.kit import Findings, count, first_n
from pytest_dgx_spark.datadef import define
from pytest_dgx_spark.model import Status
from pytest_dgx_spark.probes.procfs import module_of

RELOAD = (
    "reboot (the driver was upgraded under the running module), or with nothing using the GPU reload it: "
    "sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && sudo modprobe nvidia"
)
KHO_FIX = ("boot 6.17.0-1032-nvidia (pin the 6.x line), or add kho=off to the kernel command line "
           "(safe when kexec_crash_size is 0)")


@define
class Stack:
    """The driver stack as read: the kernel, the module, the user-space library, CMA."""

    kernel: str | None
    module_version: str | None
    flavour: str | None
    userspace: str | None
    cma_broken: bool
    gb10: bool
    gb10_guessed: bool


def userspace_version(nvml_version: str | None) -> str | None:
    """NVML's ``13.580.173.02`` -> ``580.173.02`` (the CUDA major, then the driver's version)."""
    parts = (nvml_version or "").strip().split(".")
    return ".".join(parts[1:]) if len(parts) >= 3 and all(p.isdigit() for p in parts) else None


def _stack_view(v: View) -> Stack:
    f, cma = v.f, v.f.cma_kb
    gb10 = v.params.gb10 or any("GB10" in g.upper() for g in f.gpus)
    aarch64 = (f.arch or "").lower() in ("aarch64", "arm64")
    # a GB10 whose GPU did not come up looks like this (F3b, F3c)
    guessed = not gb10 and not f.gpus and aarch64 and (f.kernel_release or "").endswith("-nvidia")
    cma_broken = "CmaTotal" in cma and "CmaFree" in cma and cma["CmaFree"] > cma["CmaTotal"]
    return Stack(f.kernel_release, *module_of(f.nvidia_module), userspace_version(f.nvml_version), cma_broken,
                 gb10 or guessed, guessed)  # fmt: skip


def stack(v: View, out: Findings) -> None:
    """The kernel, the module and the library against each other and the known-bad list."""
    f, cma = v.f, v.f.cma_kb
    if not f.stack_read:  # a capture made before these readings: decided as it was
        return
    st = _stack_view(v)
    _stack_readings(v, st, out)
    _version_mismatch(v, st, out)
    reading = known_bad.Reading(
        kernel=st.kernel, driver=st.module_version or f.driver_version, flavour=st.flavour,
        gb10=st.gb10, cma_free_above_total=st.cma_broken, no_gpu=not f.gpus,
    )  # fmt: skip
    hits = [e for e in f.known_bad if known_bad.matches(e, reading)]
    for item in hits:
        _known_bad_finding(item, reading, st, out)
    if st.cma_broken and not any(e.fail_if == "cma_free_above_total" for e in hits):
        out.warn(
            f"CmaFree {cma['CmaFree']} kB > CmaTotal {cma['CmaTotal']} kB in /proc/meminfo: the kernel's KHO/CMA "
            f"accounting bug (kernel {st.kernel or '?'}); NCCL's memory registration between Sparks fails with "
            "'ibv_reg_mr_iova2 … Cannot allocate memory'", KHO_FIX,
            "CmaFree > CmaTotal: the kernel's CMA accounting bug", "boot 6.17.0-1032-nvidia or add kho=off",
            code="G1.cma-accounting")


def _stack_readings(v: View, st: Stack, out: Findings) -> None:
    f = v.f
    out.read(readings.KERNEL_RELEASE.name, st.kernel)
    out.read("nvidia_module", f"{st.module_version} ({st.flavour})" if st.module_version else None)
    if f.cma_kb:
        out.read(readings.CMA_TOTAL.name, f.cma_kb.get("CmaTotal"), "kB")
        out.read(readings.CMA_FREE.name, f.cma_kb.get("CmaFree"), "kB")
    own = [e for e in f.known_bad if e.origin != "shipped"]
    out.note(
        f"kernel release not read: {f.kernel_release_error}" if f.kernel_release_error else "",
        f"NVIDIA kernel module not read: {f.nvidia_module_error}" if f.nvidia_module_error else "",
        f"NVIDIA kernel module line not recognised: {f.nvidia_module}" if f.nvidia_module and not st.module_version else "",
        f"CmaTotal/CmaFree not read: {f.meminfo_error}" if f.meminfo_error else "",
        "no GPU visible: the known-bad entries for GB10 apply (an aarch64 '-nvidia' kernel)" if st.gb10_guessed else "",
        f"known-bad list: {count(len(f.known_bad), 'entry', 'entries')}"
        + (f", {len(own)} from {', '.join(sorted({e.origin for e in own}))}" if own else ""),
        *(f"known-bad file not used: {e}" for e in f.known_bad_errors),
    )


def _version_mismatch(v: View, st: Stack, out: Findings) -> None:
    """NVML's ``Driver/library version mismatch``: the module loaded is not the library installed."""
    module = st.module_version or "?"
    if v.f.nvml_init_error == "LibRmVersionMismatch":
        lib = f" (NVML library {st.userspace})" if st.userspace else ""
        text = (
            f"Driver/library version mismatch: NVML refuses the loaded NVIDIA kernel module {module}{lib} "
            "('RM has detected an NVML/RM version mismatch'): the driver was upgraded and the old module "
            "still runs"
        )
        head = f"Driver/library version mismatch: kernel module {module}"
    elif st.module_version and st.userspace and st.module_version != st.userspace:
        text = (
            f"the loaded NVIDIA kernel module is {st.module_version} but the user-space driver (NVML) is "
            f"{st.userspace}: a Driver/library version mismatch"
        )
        head = f"kernel module {st.module_version} != user-space driver {st.userspace}"
    else:
        return
    out.fail(text, RELOAD, head, "reboot (or reload the nvidia modules)", code="G1.driver-library-mismatch")


def _known_bad_finding(item: known_bad.Entry, reading: known_bad.Reading, st: Stack, out: Findings) -> None:
    names = {"kernel": f"kernel {st.kernel}", "driver": f"driver {reading.driver}"}

    def named(flavour: str) -> str:
        return " with ".join(
            names[k] if k in names else f"{st.flavour} {flavour} {st.module_version or ''}".strip()
            for k in item.match)

    what, tag = named("NVIDIA kernel modules"), named("modules")
    status = known_bad.status(item, reading)
    cond = item.fail_if
    now = f"; on this boot: {known_bad.FAIL_IF[cond]}" if cond and status == "FAIL" else ""
    origin = "" if item.origin == "shipped" else f", from {item.origin}"
    # without a short_fix: the fix's first clause, without parentheses
    first = re.sub(r"\s*\([^)]*\)", "", item.fix).split(";", 1)[0].strip()
    if len(first) > known_bad.SHORT_MAX:
        first = first[: known_bad.SHORT_MAX - 1] + "…"
    out.flag(
        Status(status),
        f"{what} is known-bad ({item.id}{origin}): breaks {item.breaks}{now} "
        f"(source: {first_n(list(item.sources), 1)})", item.fix,
        f"{tag}: {item.short}" if item.short else f"{tag} is known-bad ({item.id})",
        item.short_fix or first, code="G1.known-bad")
