"""G9's CUDA floor (issue 22, N2): an image built for a newer CUDA (or driver) than the host driver
gives, with no forward-compatibility driver in use, fails at start or on its first JIT kernel
(``container_error_driver_1.txt``); with forward compatibility on it is fine, except on GB10 (a WARN).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from pytest_dgx_spark import readings
from pytest_dgx_spark.checks.g09_container.facts import Facts
from pytest_dgx_spark.checks.kit import Findings, said

#: the lowest Linux driver of each CUDA minor, from NVIDIA's CUDA Toolkit release notes
#: ("CUDA Toolkit and Corresponding Driver Versions"; a driver without NVML is mapped by it)
DRIVER_FLOORS = (((13, 2), "595.45.04"), ((13, 1), "590.44.01"), ((13, 0), "580.65.06"))
_CUDA_REQ = re.compile(r"\bcuda\s*>=\s*(\d+)\.(\d+)")
_MAJOR_MINOR = re.compile(r"^\s*(\d+)\.(\d+)")
FLOOR_FIX = (
    "on a {host} driver, run an image built with a CUDA {host} toolchain (or update the driver through "
    "DGX OS when it offers one); keep the NGC ENTRYPOINT (it turns on forward compatibility where the GPU "
    "allows) and set no `command:` that bypasses it"
)


def image_cuda(env: Mapping[str, str]) -> tuple[tuple[int, int] | None, str]:
    """``((major, minor), evidence)`` of the CUDA the image was built for: ``CUDA_VERSION``
    (``13.2.0``) or ``NVIDIA_REQUIRE_CUDA``'s ``cuda>=13.2``, the higher; the ``brand=…,driver>=…``
    clauses there are alternatives for older drivers, not a floor."""
    best: tuple[int, int] | None = None
    by = ""
    m = _MAJOR_MINOR.match(said(env, "CUDA_VERSION"))
    if m:
        best, by = (int(m[1]), int(m[2])), f"CUDA_VERSION={env['CUDA_VERSION']}"
    for r in _CUDA_REQ.finditer(said(env, "NVIDIA_REQUIRE_CUDA")):
        v = (int(r[1]), int(r[2]))
        if best is None or v > best:
            best, by = v, f"NVIDIA_REQUIRE_CUDA cuda>={r[1]}.{r[2]}"
    return best, by


def driver_tuple(text: str | None) -> tuple[int, ...] | None:
    """``580.159.03`` -> ``(580, 159, 3)``; None when it is no driver version."""
    parts = str(text or "").strip().split(".")
    return tuple(int(p) for p in parts) if parts and all(p.isdigit() for p in parts) else None


def driver_cuda(driver: str | None) -> tuple[int, int] | None:
    """The newest CUDA minor a driver runs natively, by NVIDIA's release-notes table
    (:data:`DRIVER_FLOORS`); None below the table."""
    have = driver_tuple(driver)
    if have is None:
        return None
    return next((cuda for cuda, floor in DRIVER_FLOORS if have >= (driver_tuple(floor) or ())), None)


def compat_in_use(facts: Facts) -> bool:
    """The image's forward-compatibility driver is switched on: a compat folder on
    ``LD_LIBRARY_PATH``, or the ``compat/lib`` link an entrypoint makes."""
    path = said(facts.cuda_env, "LD_LIBRARY_PATH")
    return bool(facts.compat_lib) and (facts.compat_linked or any("/compat" in p for p in path.split(":")))


def _host_cuda(facts: Facts) -> tuple[tuple[int, int] | None, str | None, str]:
    """``(CUDA the driver supports, the driver version, how it was read)``."""
    driver = facts.nvml_driver or facts.host_driver
    if isinstance(facts.nvml_cuda, int) and facts.nvml_cuda > 0:
        return (facts.nvml_cuda // 1000, (facts.nvml_cuda % 1000) // 10), driver, "NVML"
    return driver_cuda(driver), driver, "the release notes' driver table"


def _needs(need: tuple[int, int] | None, need_driver: str | None) -> str:
    """``CUDA 13.2``, else ``driver 590.48.01``: what the image needs, for a headline."""
    return f"CUDA {need[0]}.{need[1]}" if need else f"driver {need_driver}"


def driver_floor(facts: Facts, gb10: bool, out: Findings) -> bool:
    """FAIL when the image needs a newer CUDA (or driver) than the host driver gives and no
    forward-compatibility driver is in use (container_error_driver_1.txt); returns whether it FAILed."""
    _runtime_mode(facts, out)
    need, by = image_cuda(facts.cuda_env)
    need_driver = said(facts.cuda_env, "CUDA_DRIVER_VERSION") or None
    have, driver, how = _host_cuda(facts)
    if driver:
        out.read("host_driver", driver)
    if have:
        out.read(readings.HOST_DRIVER_CUDA.name, f"{have[0]}.{have[1]}")
    if need is None and not need_driver:
        return False
    _image_readings(facts, need, need_driver, out)
    too_new = bool(need and have and need > have)
    driver_low = _driver_below(driver, need_driver)
    if not have and not driver_low:
        _floor_not_compared(facts, by, need_driver, out)
        return False
    host = f"{have[0]}.{have[1]}" if have else "?"
    if not (too_new or driver_low):
        floor = f"CUDA {need[0]}.{need[1]} ({by})" if need else f"driver {need_driver}"
        out.note(f"image built for {floor}, within what host driver {driver} supports (CUDA {host}, {how})")
        return False
    if compat_in_use(facts):
        _floor_with_compat(facts, gb10, driver, host, _needs(need, need_driver), out)
        return False
    _floor_fail(need if too_new else None, by, need_driver, (driver, host, how), out)
    return True


def _runtime_mode(facts: Facts, out: Findings) -> None:
    """The container runtime's mode; CDI mode breaks `docker run --gpus`, so say how to start instead."""
    if not facts.runtime_mode:
        return
    out.read("container_runtime_mode", facts.runtime_mode)
    if facts.runtime_mode == "cdi":
        out.note(
            "NVIDIA container runtime in CDI mode: `docker run --gpus` fails ('invoking the NVIDIA "
            "Container Runtime Hook directly … is not supported'); start containers with "
            "--device nvidia.com/gpu=all or --runtime=nvidia"
        )


def _image_readings(facts: Facts, need: tuple[int, int] | None, need_driver: str | None, out: Findings) -> None:
    """What the image asks for and brings (CUDA, driver floor, compat package and driver), for the record."""
    if need:
        out.read(readings.IMAGE_CUDA.name, f"{need[0]}.{need[1]}")
    if need_driver:
        out.read("image_driver_floor", need_driver)
    if said(facts.cuda_env, "NV_CUDA_COMPAT_PACKAGE"):
        out.read("image_compat_package", facts.cuda_env["NV_CUDA_COMPAT_PACKAGE"])
    if facts.compat_lib:
        out.read("forward_compat", ("in use: " if compat_in_use(facts) else "present, not in use: ") + facts.compat_lib)


def _driver_below(driver: str | None, need_driver: str | None) -> bool:
    """The host driver is older than the image's ``CUDA_DRIVER_VERSION`` (both read)."""
    return bool(need_driver and driver and (driver_tuple(driver) or ()) < (driver_tuple(need_driver) or ()))


def _floor_not_compared(facts: Facts, by: str, need_driver: str | None, out: Findings) -> None:
    """No host CUDA read: say the image's floor went unjudged and why, rather than pass it."""
    why = "; ".join(e for e in (facts.nvml_error, facts.host_driver_error) if e) or "no driver version read"
    out.note(f"image CUDA floor ({by or 'CUDA_DRIVER_VERSION=' + str(need_driver)}) not compared: {why}")


def _floor_with_compat(facts: Facts, gb10: bool, driver: str | None, host: str, needs: str, out: Findings) -> None:
    """Over the floor with forward compat on: fine elsewhere, a WARN on GB10 where compat may be unavailable."""
    text = (
        f"image needs more than host driver {driver} (CUDA {host}) gives; its forward-compatibility "
        f"driver {facts.compat_lib} is switched on"
    )
    if not gb10:
        out.note(text)
        return
    out.warn(  # CUDA's compat package ships for datacenter GPUs and Jetson, not GB10 (NGC: "UNAVAILABLE")
        f"{text}, but GB10 may not support forward compatibility (NGC's entrypoint reports 'compatibility "
        "mode is UNAVAILABLE' on 580 Sparks): JIT kernels can still fail (cudaErrorUnsupportedPtxVersion)",
        FLOOR_FIX.format(host=host), f"image needs {needs}, host gives CUDA {host}: forward compat on GB10",
        f"a CUDA {host} image", code="G9.forward-compat-gb10")


def _floor_fail(
    need: tuple[int, int] | None, by: str, need_driver: str | None, host_side: tuple[str | None, str, str], out: Findings
) -> None:
    """The image needs more than the host driver gives and nothing bridges it. ``need`` is the
    image's CUDA only when that is what is too new (else the driver floor is)."""
    driver, host, how = host_side
    wants = f"CUDA {need[0]}.{need[1]} ({by})" if need else f"driver {need_driver}"
    out.fail(
        f"image built for {wants}, but host driver {driver or '?'} supports CUDA {host} ({how}) and no "
        "forward-compatibility driver is in use: it fails at start ('This container was built for NVIDIA "
        "Driver Release … or later') or on its first JIT kernel (cudaErrorUnsupportedPtxVersion)",
        FLOOR_FIX.format(host=host),
        f"image needs {_needs(need, need_driver)}, host driver {driver or '?'} gives CUDA {host}",
        f"a CUDA {host} image; keep the NGC ENTRYPOINT", code="G9.driver-below-image")

