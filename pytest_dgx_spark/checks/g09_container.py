"""G9 — container first, not bare pip.

A bare-pip stack lets torch, triton and transformers drift apart; an NGC or Unsloth container pins
them. G9 names the container it finds (markers, cgroup, NGC environment, torch's ``.nvYY.MM``
suffix) and checks, pip-check style, that the training stack's requirements hold. On cgroup v2 a
container often shows no marker, so "none found" is "unknown" unless PID 1 is an init system. An
image's CUDA floor (``CUDA_VERSION``, ``NVIDIA_REQUIRE_CUDA``, ``CUDA_DRIVER_VERSION``) above what the
host driver supports, with no forward-compatibility driver in use, FAILs (issue 22, N2;
``container_error_driver_1.txt``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from pytest_dgx_spark import readings
from pytest_dgx_spark.checks.kit import CheckContext, FactsBase, Findings, Params, count, first_n, plus_more
from pytest_dgx_spark.model import Result, Status
from pytest_dgx_spark.probes import procfs
from pytest_dgx_spark.probes.machine import MachineLike
from pytest_dgx_spark.probes.packages import canonical

#: the packages whose drift breaks training (their requirements are verified)
STACK = tuple(
    "torch torchvision torchaudio triton xformers transformers accelerate peft trl datasets tokenizers "  # noqa: SIM905
    "safetensors bitsandbytes flash-attn unsloth unsloth-zoo deepspeed vllm sglang tensorrt-llm nemo-toolkit "
    "megatron-core lightning pytorch-lightning torchao liger-kernel diffusers huggingface-hub".split()
)
#: shown in the summary when installed
HEADLINE = ("torch", "triton", "xformers", "transformers")
NGC_ENV = ("NVIDIA_PYTORCH_VERSION", "PYTORCH_BUILD_VERSION", "PYTORCH_VERSION", "NVIDIA_PRODUCT_NAME",
           "NVIDIA_BUILD_ID")  # fmt: skip
#: what an image says it needs of the driver (nvidia/cuda and NGC images set them)
CUDA_ENV = ("CUDA_VERSION", "NVIDIA_REQUIRE_CUDA", "CUDA_DRIVER_VERSION", "NV_CUDA_COMPAT_PACKAGE", "LD_LIBRARY_PATH")
#: an image's forward-compatibility driver (cuda-compat; NGC's entrypoint puts it on LD_LIBRARY_PATH
#: when the GPU and driver allow it)
COMPAT_LIBS = tuple(f"/usr/local/cuda/compat/{d}libcuda.so.1" for d in ("", "lib.real/", "lib/"))
#: a link an entrypoint makes to turn the compat driver on (``compat/lib -> lib.real``)
COMPAT_LINK = "/usr/local/cuda/compat/lib"
#: the lowest Linux driver of each CUDA minor, from NVIDIA's CUDA Toolkit release notes
#: ("CUDA Toolkit and Corresponding Driver Versions"; a driver without NVML is mapped by it)
DRIVER_FLOORS = (((13, 2), "595.45.04"), ((13, 1), "590.44.01"), ((13, 0), "580.65.06"))
#: the container runtime's configuration (CDI mode refuses ``docker --gpus``: container_error_cdi_1.txt)
RUNTIME_CONFIG = "/etc/nvidia-container-runtime/config.toml"
INIT_SYSTEMS = {"systemd", "init", "launchd", "openrc-init", "runit", "s6-svscan"}
NV_SUFFIX = re.compile(r"\.nv\d{2}\.\d{1,2}\b")


@dataclass
class Facts(FactsBase):
    dockerenv: bool = False
    containerenv: dict[str, str] | None = None  # parsed /run/.containerenv when present
    cgroup: str | None = None
    cgroup_error: str | None = None
    pid1: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    pip_constraint: bool = False  # NGC's /etc/pip/constraint.txt (25.03+)
    #: /etc/pip/constraint.txt's name==version pins (empty in 25.10+: PYTORCH_BUILD_VERSION names torch's)
    constraint_pins: dict[str, str] = field(default_factory=dict)
    singularity: bool = False
    dists: dict[str, dict[str, Any]] = field(default_factory=dict)
    metadata_errors: int = 0
    #: the checked Python's PEP 508 marker environment: requirement markers are evaluated against it
    markers: dict[str, str] = field(default_factory=dict)
    cuda_env: dict[str, str] = field(default_factory=dict)  # CUDA_ENV as set: the image's floor
    #: the host driver: /proc/driver/nvidia/version's; NVML's only when the image names a CUDA floor
    host_driver: str | None = None
    host_driver_error: str | None = None
    nvml_driver: str | None = None
    nvml_cuda: int | None = None  # NVML's cuda_driver_version: 13000 = 13.0
    nvml_error: str | None = None
    compat_lib: str | None = None  # where the image's compat libcuda.so.1 points (libcuda.so.590.48.01)
    compat_linked: bool = False  # COMPAT_LINK is a symbolic link (an entrypoint turned compat on)
    runtime_mode: str | None = None  # ``mode`` of the NVIDIA container runtime's config.toml

    #: issue 22 (N2): a capture of an earlier version has none of them; their defaults compare nothing
    ADDED: ClassVar[Mapping[str, str]] = dict.fromkeys(
        ("cuda_env", "host_driver", "host_driver_error", "nvml_driver", "nvml_cuda", "nvml_error", "compat_lib",
         "compat_linked", "runtime_mode"),
        "issue 22: the image's CUDA floor",
    )


FACTS = Facts
_MODE = re.compile(r'^\s*mode\s*=\s*"([^"]*)"', re.MULTILINE)
_PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;#]+)")


def parse_constraints(text: str) -> dict[str, str]:
    """``{canonical name: version}`` from ``name==version`` lines (pip constraint file)."""
    return {canonical(m.group(1)): m.group(2) for line in text.splitlines() if (m := _PIN.match(line))}


def _gather_markers(m: MachineLike) -> Facts:
    """The container markers: files under the root, PID 1's cgroup and name, the environment."""
    facts = Facts()
    facts.dockerenv = m.exists("/.dockerenv")
    if m.exists("/run/.containerenv"):
        text, _ = m.read_text("/run/.containerenv", 65536)
        facts.containerenv = procfs.parse_key_values(text or "")
    facts.cgroup, facts.cgroup_error = m.read_text("/proc/1/cgroup", 65536)
    comm, _ = m.read_text("/proc/1/comm", 4096)
    facts.pid1 = comm.strip() if comm else None
    keep = (*NGC_ENV, "container", "KUBERNETES_SERVICE_HOST", "APPTAINER_CONTAINER", "SINGULARITY_CONTAINER")
    facts.env = {k: m.env[k] for k in keep if m.env.get(k)}
    facts.singularity = m.exists("/.singularity.d")
    return facts


def container_of(m: MachineLike) -> tuple[str | None, str]:
    """``(name, evidence)`` of the container this runs in, or ``(None, "")``, for a check that
    needs to know (G10: a container needs ``/dev/infiniband`` passed in)."""
    return container_name(_gather_markers(m))


def gather(ctx: CheckContext) -> Facts:
    m = ctx.machine
    facts = _gather_markers(m)
    facts.pip_constraint = m.exists("/etc/pip/constraint.txt")
    if facts.pip_constraint:
        text, _ = m.read_text("/etc/pip/constraint.txt", 1 << 20)
        facts.constraint_pins = parse_constraints(text or "")
    pk = m.packages()
    facts.dists = dict(pk.get("dists") or {})
    facts.metadata_errors = int(pk.get("errors") or 0)
    facts.markers = {k: str(v) for k, v in default_environment().items()}
    _gather_driver_floor(m, facts)
    return facts


def _compat_lib(m: MachineLike) -> str | None:
    """The file the first :data:`COMPAT_LIBS` that exists points to (it names its driver version)."""
    for path in COMPAT_LIBS:
        try:
            return os.path.basename(os.readlink(m.path(path)))
        except OSError:
            if m.exists(path):
                return os.path.basename(path)
    return None


def _gather_driver_floor(m: MachineLike, facts: Facts) -> None:
    """The image's CUDA/driver floor and the host driver; NVML only when the image names a floor."""
    facts.cuda_env = {k: str(m.env[k])[:512] for k in CUDA_ENV if m.env.get(k)}
    text, facts.host_driver_error = m.read_text("/proc/driver/nvidia/version", 65536)
    if text is not None:
        facts.host_driver = procfs.module_of(text)[0]
        if facts.host_driver is None:
            facts.host_driver_error = "/proc/driver/nvidia/version names no kernel module version"
    facts.compat_lib = _compat_lib(m)
    try:
        facts.compat_linked = m.path(COMPAT_LINK).is_symlink()
    except OSError:
        facts.compat_linked = False
    if m.exists(RUNTIME_CONFIG):
        config, _ = m.read_text(RUNTIME_CONFIG, 65536)
        mode = _MODE.search(config or "")
        facts.runtime_mode = mode.group(1) if mode else None
    if image_cuda(facts.cuda_env)[0] is None and not facts.cuda_env.get("CUDA_DRIVER_VERSION"):
        return
    nv = m.nvml()
    if nv.get("ok"):
        facts.nvml_driver = nv.get("driver_version")
        cuda = nv.get("cuda_driver_version")
        facts.nvml_cuda = cuda if isinstance(cuda, int) and not isinstance(cuda, bool) else None
    else:
        facts.nvml_error = str(nv.get("reason") or "NVML unavailable")


def _markers(f: Facts) -> list[tuple[str, str]]:
    """``[(what, evidence)]`` of every container marker found, the surest first."""
    found: list[tuple[str, str]] = []
    if f.dockerenv:
        found.append(("Docker container", "/.dockerenv"))
    if f.containerenv is not None:
        image = f.containerenv.get("image")
        found.append(("Podman container" + (f" of {image}" if image else ""), "/run/.containerenv"))
    if f.env.get("APPTAINER_CONTAINER") or f.env.get("SINGULARITY_CONTAINER") or f.singularity:
        found.append(("Apptainer/Singularity container", "APPTAINER_CONTAINER"))
    if runtime := procfs.cgroup_runtime(f.cgroup or ""):
        kind = "Kubernetes pod" if runtime == "kubepods" else f"{runtime} container"
        found.append((kind, f"/proc/1/cgroup names {runtime}"))
    if f.env.get("KUBERNETES_SERVICE_HOST") and not any("Kubernetes" in k for k, _ in found):
        found.append(("Kubernetes pod", "KUBERNETES_SERVICE_HOST"))
    if f.env.get("container") and not found:
        found.append((f"{f.env['container']} container", "container= in the environment"))
    return found


def container_name(f: Facts) -> tuple[str | None, str]:
    """``(name, evidence)`` of the container we are in, or ``(None, "")``."""
    ngc = ""
    if f.env.get("NVIDIA_PYTORCH_VERSION"):
        ngc = f"NGC PyTorch {f.env['NVIDIA_PYTORCH_VERSION']}"
    elif f.env.get("NVIDIA_PRODUCT_NAME"):
        ngc = f"NGC {f.env['NVIDIA_PRODUCT_NAME']} image"
    found = _markers(f) or ([("container", "NGC environment variables")] if ngc else [])
    if not found:
        return None, ""
    return (f"{ngc} in a {found[0][0]}" if ngc else found[0][0]), ", ".join(e for _, e in found)


def broken_requirements(
    dists: Mapping[str, Mapping[str, Any]],
    stack: tuple[str, ...] = STACK,
    environment: Mapping[str, str] | None = None,
) -> tuple[list[str], list[str]]:
    """pip-check style: ``(problems, notes)`` for the installed stack packages."""
    env = {"extra": "", **(environment or {})}
    problems: list[str] = []
    notes: list[str] = []
    for dist in filter(None, map(dists.get, stack)):
        for line in dist.get("requires") or []:
            try:
                req = Requirement(line)
            except InvalidRequirement:
                notes.append(f"{dist['name']}: unparseable requirement {line!r}")
                continue
            try:
                if req.marker is not None and not req.marker.evaluate(env):
                    continue
            except Exception:  # a marker this environment cannot evaluate: the requirement does not apply
                continue
            have = dists.get(canonical(req.name))
            who = f"{dist['name']} {dist['version']}"
            if have is None:
                problems.append(f"{who} requires {req}, which is not installed")
                continue
            if not req.specifier:
                continue
            try:
                ok = req.specifier.contains(Version(str(have["version"])), prereleases=True)
            except InvalidVersion:
                notes.append(f"{have['name']} has a non-PEP 440 version {have['version']!r}")
                continue
            if not ok:
                have_text = f"{have['name']} {have['version']}"
                problems.append(f"{who} requires {req.name}{req.specifier}, but {have_text} is installed")
    return problems, notes


CONTAINER_FIX = (
    "prefer an NGC container (nvcr.io/nvidia/pytorch:25.11-py3) or Unsloth's; if bare pip "
    "is unavoidable, follow NVIDIA's install order (--no-deps for Unsloth)"
)
CONTAINER_SHORT = "use an NGC container (nvcr.io/nvidia/pytorch:25.11-py3)"
REPLACED_FIX = (
    "reinstall with the container's pins (pip install -c /etc/pip/constraint.txt …, "
    "--no-deps for Unsloth) or start from a fresh container"
)
REPLACED_SHORT = "fresh container, or pip -c /etc/pip/constraint.txt"
#: room for the finding and the fix in a 120-character ``G9 WARN: …; fix: …`` line
SHORT_BUDGET = 120 - len("G9 WARN: ") - len("; fix: ")
BROKEN_FIX = (
    "rebuild the stack from one source: an NGC container (nvcr.io/nvidia/pytorch) or "
    "Unsloth's, or reinstall these pins together; `pip check` shows the same"
)
BROKEN_SHORT = "reinstall the stack from one source (NGC/Unsloth container)"


def _requirements(facts: Facts, out: Findings) -> int:
    """pip-check style: each broken declared requirement is a FAIL."""
    problems, notes = broken_requirements(facts.dists, environment=facts.markers or None)
    out.note(*notes)
    if facts.metadata_errors:
        out.note(f"{facts.metadata_errors} distributions have unreadable metadata")
    if facts.cgroup_error:
        out.note(facts.cgroup_error)
    out.read("broken_requirements", len(problems))
    for text in problems:
        out.fail(text, BROKEN_FIX, code="G9.broken-requirements")
    return len(problems)


def replaced_by_pip(facts: Facts) -> list[tuple[str, str, str | None]]:
    """``[(package, installed version, the container's version or None)]``: NGC
    builds that pip replaced (container_vs_pip_1.txt: torch 2.9.0a0+50eac811a6.nv25.9
    replaced by the PyPI torch 2.9.1)."""
    if not facts.env.get("NVIDIA_PYTORCH_VERSION"):
        return []
    out: list[tuple[str, str, str | None]] = []
    torch = facts.dists.get("torch")
    if torch and not NV_SUFFIX.search(str(torch["version"])):
        pins, env = facts.constraint_pins, facts.env
        original = pins.get("torch") or env.get("PYTORCH_BUILD_VERSION") or env.get("PYTORCH_VERSION")
        out.append(("torch", str(torch["version"]), original))
    return out + [
        (str(dist["name"]), str(dist["version"]), pinned)
        for key, pinned in facts.constraint_pins.items()
        if key != "torch" and key in STACK
        and (dist := facts.dists.get(key)) is not None and str(dist["version"]) != pinned
    ]


def _replaced_stage(facts: Facts, out: Findings) -> tuple[str, str]:
    """WARN, naming each package pip replaced in an NGC PyTorch container."""
    replaced = replaced_by_pip(facts)
    if not replaced:
        return "", ""
    ngc = facts.env["NVIDIA_PYTORCH_VERSION"]
    for name, installed, original in replaced:
        was = f" ({name} {original})" if original else ""
        torch = f"torch {installed} has no .nvYY.MM suffix: pip replaced the container's build{was}"
        other = f"pip replaced its {name} {original} with {installed}"
        out.warn(f"NGC PyTorch {ngc} container, but {torch if name == 'torch' else other}", REPLACED_FIX,
                 code="G9.replaced-by-pip")
    name, installed, original = replaced[0]
    headline = plus_more(f"NGC {name} {original} replaced by {installed}", len(replaced))
    if not original or len(headline) > SHORT_BUDGET - len(REPLACED_SHORT):
        headline = plus_more(f"NGC {ngc}'s {name} replaced by pip's {installed}", len(replaced))
    return headline, REPLACED_SHORT


def _readings(facts: Facts, name: str | None, evidence: str, out: Findings) -> str:
    out.read("container", name or "none found")
    if evidence:
        out.read("container_evidence", evidence)
    for key in HEADLINE:
        if key in facts.dists:
            out.read(f"{key}_version", str(facts.dists[key]["version"]))
    stack = [facts.dists[k] for k in HEADLINE if k in facts.dists]
    return ", ".join(f"{d['name']} {d['version']}" for d in stack) or "no training stack installed"


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
    m = _MAJOR_MINOR.match(env.get("CUDA_VERSION", ""))
    if m:
        best, by = (int(m[1]), int(m[2])), f"CUDA_VERSION={env['CUDA_VERSION']}"
    for r in _CUDA_REQ.finditer(env.get("NVIDIA_REQUIRE_CUDA", "")):
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
    path = facts.cuda_env.get("LD_LIBRARY_PATH", "")
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


def _driver_floor(facts: Facts, gb10: bool, out: Findings) -> bool:
    """FAIL when the image needs a newer CUDA (or driver) than the host driver gives and no
    forward-compatibility driver is in use (container_error_driver_1.txt); returns whether it FAILed."""
    _runtime_mode(facts, out)
    need, by = image_cuda(facts.cuda_env)
    need_driver = facts.cuda_env.get("CUDA_DRIVER_VERSION")
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
    if facts.cuda_env.get("NV_CUDA_COMPAT_PACKAGE"):
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


def evaluate(facts: Facts, params: Params) -> Result:
    """Decide G9 (pure): an image that needs a newer driver than the host's FAILs, and
    so do broken requirements; an NGC build pip replaced, or no container, WARN; a
    container with a consistent stack PASSes."""
    out = Findings("G9")
    name, evidence = container_name(facts)
    stack_text = _readings(facts, name, evidence, out)
    floor_failed = _driver_floor(facts, params.gb10, out)
    broken = _requirements(facts, out)
    if floor_failed:
        return out.result()
    if broken:
        result = out.result()
        firsts = list(dict.fromkeys(" ".join(t.split()[:2]) for t, _ in out.problems))
        result.summary = f"training-stack requirements broken: {result.summary}"
        result.headline = f"{count(broken, 'broken requirement')}: {first_n(firsts, 2)}"
        result.short_fix = BROKEN_SHORT
        return result
    floor_warned = bool(out.warnings)
    headline, short_fix = _replaced_stage(facts, out)
    if floor_warned:
        return out.result()
    if headline:
        return out.result(headline=headline, short_fix=short_fix)
    if name:
        return out.result(
            Status.PASS, f"container: {name} ({evidence}); {stack_text}; declared requirements hold",
            headline=f"container: {name}; declared requirements hold")
    if facts.pid1 and facts.pid1 in INIT_SYSTEMS:
        posture = f"bare pip: no container marker and PID 1 is {facts.pid1}"
        headline = f"bare pip: no container (PID 1 is {facts.pid1})"
    else:
        pid1 = f"PID 1 is {facts.pid1!r}" if facts.pid1 else "PID 1 unreadable"
        posture = f"unknown: no container marker matched ({pid1}; cgroup v2 and some runtimes hide it)"
        headline = f"no container marker matched ({pid1})"
    out.warn(f"{posture}; {stack_text}; declared requirements hold", CONTAINER_FIX, code="G9.no-container")
    return out.result(headline=headline, short_fix=CONTAINER_SHORT)
