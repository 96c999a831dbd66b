"""G9 — container first, not bare pip.

A bare-pip stack lets torch, triton and transformers drift apart; an NGC or Unsloth container pins
them. G9 names the container it finds (markers, cgroup, NGC environment, torch's ``.nvYY.MM``
suffix) and checks, pip-check style, that the training stack's requirements hold. On cgroup v2 a
container often shows no marker, so "none found" is "unknown" unless PID 1 is an init system. An
image's CUDA floor (``CUDA_VERSION``, ``NVIDIA_REQUIRE_CUDA``, ``CUDA_DRIVER_VERSION``) above what the
host driver supports, with no forward-compatibility driver in use, FAILs (issue 22, N2;
``container_error_driver_1.txt``).

The package is the check's home: :mod:`.facts` (the records), :mod:`.floor` (the image's CUDA floor
against the host driver) and this module (``FACTS``, ``gather``, ``evaluate``: the container and the
training stack's requirements).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from pytest_dgx_spark.checks.g09_container.facts import Dist, Facts
from pytest_dgx_spark.checks.g09_container.floor import driver_floor, image_cuda
from pytest_dgx_spark.checks.kit import CheckContext, Findings, Params, count, first_n, plus_more, said
from pytest_dgx_spark.model import Result, Status
from pytest_dgx_spark.probes import procfs
from pytest_dgx_spark.probes.machine import MachineLike
from pytest_dgx_spark.probes.packages import canonical

__all__ = ["FACTS", "Facts", "container_of", "evaluate", "gather"]

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
#: the container runtime's configuration (CDI mode refuses ``docker --gpus``: container_error_cdi_1.txt)
RUNTIME_CONFIG = "/etc/nvidia-container-runtime/config.toml"
INIT_SYSTEMS = {"systemd", "init", "launchd", "openrc-init", "runit", "s6-svscan"}
NV_SUFFIX = re.compile(r"\.nv\d{2}\.\d{1,2}\b")


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
    facts.env = {k: m.env[k] for k in keep if said(m.env, k)}
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
    dists, errors = pk.get("dists") or {}, pk.get("errors") or 0
    facts.dists = {k: Dist.from_dict(d) for k, d in dists.items()}
    facts.metadata_errors = int(errors)
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


def _gather_runtime(m: MachineLike, facts: Facts) -> None:
    """The image's forward-compatibility driver (and whether an entrypoint linked it), the runtime's mode."""
    facts.compat_lib = _compat_lib(m)
    try:
        facts.compat_linked = m.path(COMPAT_LINK).is_symlink()
    except OSError:
        facts.compat_linked = False
    if m.exists(RUNTIME_CONFIG):
        config, _ = m.read_text(RUNTIME_CONFIG, 65536)
        mode = _MODE.search(config or "")
        facts.runtime_mode = mode.group(1) if mode else None


def _gather_driver_floor(m: MachineLike, facts: Facts) -> None:
    """The image's CUDA/driver floor and the host driver; NVML only when the image names a floor."""
    facts.cuda_env = {k: str(m.env[k])[:512] for k in CUDA_ENV if said(m.env, k)}
    text, facts.host_driver_error = m.read_text("/proc/driver/nvidia/version", 65536)
    if text is not None:
        facts.host_driver = procfs.module_of(text)[0]
        if facts.host_driver is None:
            facts.host_driver_error = "/proc/driver/nvidia/version names no kernel module version"
    _gather_runtime(m, facts)
    if image_cuda(facts.cuda_env)[0] is None and not said(facts.cuda_env, "CUDA_DRIVER_VERSION"):
        return
    nv = m.nvml()
    if not nv.get("ok"):
        facts.nvml_error = str(nv.get("reason") or "NVML unavailable")
        return
    facts.nvml_driver, cuda = nv.get("driver_version"), nv.get("cuda_driver_version")
    facts.nvml_cuda = cuda if isinstance(cuda, int) and not isinstance(cuda, bool) else None


def _markers(f: Facts) -> list[tuple[str, str]]:
    """``[(what, evidence)]`` of every container marker found, the surest first."""
    found: list[tuple[str, str]] = []
    if f.dockerenv:
        found.append(("Docker container", "/.dockerenv"))
    if f.containerenv is not None:
        image = said(f.containerenv, "image")
        found.append(("Podman container" + (f" of {image}" if image else ""), "/run/.containerenv"))
    if said(f.env, "APPTAINER_CONTAINER") or said(f.env, "SINGULARITY_CONTAINER") or f.singularity:
        found.append(("Apptainer/Singularity container", "APPTAINER_CONTAINER"))
    if runtime := procfs.cgroup_runtime(f.cgroup or ""):
        kind = "Kubernetes pod" if runtime == "kubepods" else f"{runtime} container"
        found.append((kind, f"/proc/1/cgroup names {runtime}"))
    if said(f.env, "KUBERNETES_SERVICE_HOST") and not any("Kubernetes" in k for k, _ in found):
        found.append(("Kubernetes pod", "KUBERNETES_SERVICE_HOST"))
    if said(f.env, "container") and not found:
        found.append((f"{f.env['container']} container", "container= in the environment"))
    return found


def container_name(f: Facts) -> tuple[str | None, str]:
    """``(name, evidence)`` of the container we are in, or ``(None, "")``."""
    ngc = ""
    if said(f.env, "NVIDIA_PYTORCH_VERSION"):
        ngc = f"NGC PyTorch {f.env['NVIDIA_PYTORCH_VERSION']}"
    elif said(f.env, "NVIDIA_PRODUCT_NAME"):
        ngc = f"NGC {f.env['NVIDIA_PRODUCT_NAME']} image"
    found = _markers(f) or ([("container", "NGC environment variables")] if ngc else [])
    if not found:
        return None, ""
    return (f"{ngc} in a {found[0][0]}" if ngc else found[0][0]), ", ".join(e for _, e in found)


def broken_requirements(
    dists: Mapping[str, Dist],
    stack: tuple[str, ...] = STACK,
    environment: Mapping[str, str] | None = None,
) -> tuple[list[str], list[str]]:
    """pip-check style: ``(problems, notes)`` for the installed stack packages."""
    env = {"extra": "", **(environment or {})}
    problems: list[str] = []
    notes: list[str] = []
    for dist in (dists[name] for name in stack if name in dists):
        for line in dist.requires:
            try:
                req = Requirement(line)
            except InvalidRequirement:
                notes.append(f"{dist.name}: unparseable requirement {line!r}")
                continue
            if _applies(req, env):
                _check(dist, req, dists.get(canonical(req.name)), problems, notes)
    return problems, notes


def _applies(req: Requirement, env: Mapping[str, str]) -> bool:
    """The requirement's marker holds here (a marker this environment cannot evaluate: it does not apply)."""
    try:
        return req.marker is None or bool(req.marker.evaluate(dict(env)))
    except Exception:
        return False


def _check(dist: Dist, req: Requirement, have: Dist | None, problems: list[str], notes: list[str]) -> None:
    """One requirement of ``dist`` against what is installed (``have``): a problem, a note, or nothing."""
    who = f"{dist.name} {dist.version}"
    if have is None:
        problems.append(f"{who} requires {req}, which is not installed")
        return
    if not req.specifier:
        return
    try:
        ok = req.specifier.contains(Version(str(have.version)), prereleases=True)
    except InvalidVersion:
        notes.append(f"{have.name} has a non-PEP 440 version {have.version!r}")
        return
    if not ok:
        problems.append(f"{who} requires {req.name}{req.specifier}, but {have.name} {have.version} is installed")


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
    if not said(facts.env, "NVIDIA_PYTORCH_VERSION"):
        return []
    out: list[tuple[str, str, str | None]] = []
    dists, pins, env = facts.dists, facts.constraint_pins, facts.env
    if "torch" in dists and not NV_SUFFIX.search(str(dists["torch"].version)):
        original = said(pins, "torch") or said(env, "PYTORCH_BUILD_VERSION") or said(env, "PYTORCH_VERSION")
        out.append(("torch", str(dists["torch"].version), original or None))
    return out + [
        (dists[key].name, str(dists[key].version), pinned)
        for key, pinned in pins.items()
        if key != "torch" and key in STACK and key in dists and str(dists[key].version) != pinned
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
            out.read(f"{key}_version", str(facts.dists[key].version))
    stack = [facts.dists[k] for k in HEADLINE if k in facts.dists]
    return ", ".join(f"{d.name} {d.version}" for d in stack) or "no training stack installed"

def evaluate(facts: Facts, params: Params) -> Result:
    """Decide G9 (pure): an image that needs a newer driver than the host's FAILs, and
    so do broken requirements; an NGC build pip replaced, or no container, WARN; a
    container with a consistent stack PASSes."""
    out = Findings("G9")
    name, evidence = container_name(facts)
    stack_text = _readings(facts, name, evidence, out)
    floor_failed = driver_floor(facts, params.gb10, out)
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
