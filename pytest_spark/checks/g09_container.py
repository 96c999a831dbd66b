"""G9 — container first, not bare pip.

A bare-pip stack lets torch, triton, xformers and transformers drift apart;
an NGC or Unsloth container pins them to a build that targets GB10. This
check names the container it finds (marker files, cgroup, NGC environment,
torch's ``.nvYY.MM`` suffix) and verifies, pip-check style, that every
installed training-stack package's declared requirements hold.

On cgroup v2 ``/proc/1/cgroup`` is only ``0::/`` inside most containers, so
"no marker" is reported as "unknown", not as proof of a bare host, unless
PID 1 is an init system.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_spark.checks.kit import CheckContext
from pytest_spark.model import Reading, Result, Status
from pytest_spark.probes import procfs
from pytest_spark.probes.packages import canonical

#: the packages whose drift breaks training (their requirements are verified)
STACK = (
    "torch",
    "torchvision",
    "torchaudio",
    "triton",
    "xformers",
    "transformers",
    "accelerate",
    "peft",
    "trl",
    "datasets",
    "tokenizers",
    "safetensors",
    "bitsandbytes",
    "flash-attn",
    "unsloth",
    "unsloth-zoo",
    "deepspeed",
    "vllm",
    "sglang",
    "tensorrt-llm",
    "nemo-toolkit",
    "megatron-core",
    "lightning",
    "pytorch-lightning",
    "torchao",
    "liger-kernel",
    "diffusers",
    "huggingface-hub",
)
#: shown in the summary when installed
HEADLINE = ("torch", "triton", "xformers", "transformers")

NGC_ENV = ("NVIDIA_PYTORCH_VERSION", "PYTORCH_BUILD_VERSION", "NVIDIA_PRODUCT_NAME", "NVIDIA_BUILD_ID")
INIT_SYSTEMS = {"systemd", "init", "launchd", "openrc-init", "runit", "s6-svscan"}
NV_SUFFIX = re.compile(r"\.nv\d{2}\.\d{1,2}\b")


@dataclass
class Facts:
    dockerenv: bool = False
    containerenv: dict[str, str] | None = None  # parsed /run/.containerenv when present
    cgroup: str | None = None
    cgroup_error: str | None = None
    pid1: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    pip_constraint: bool = False  # NGC's /etc/pip/constraint.txt (25.03+)
    singularity: bool = False
    dists: dict[str, dict[str, Any]] = field(default_factory=dict)
    metadata_errors: int = 0


def gather(ctx: CheckContext) -> Facts:
    m = ctx.machine
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
    facts.pip_constraint = m.exists("/etc/pip/constraint.txt")
    facts.singularity = m.exists("/.singularity.d")
    pk = m.packages()
    facts.dists = dict(pk.get("dists") or {})
    facts.metadata_errors = int(pk.get("errors") or 0)
    return facts


def container_name(f: Facts) -> tuple[str | None, str]:
    """``(name, evidence)`` of the container we are in, or ``(None, why-unknown)``."""
    ngc = ""
    if f.env.get("NVIDIA_PYTORCH_VERSION"):
        ngc = f"NGC PyTorch {f.env['NVIDIA_PYTORCH_VERSION']}"
    elif f.env.get("NVIDIA_PRODUCT_NAME"):
        ngc = f"NGC {f.env['NVIDIA_PRODUCT_NAME']} image"
    found: list[tuple[str, str]] = []
    if f.dockerenv:
        found.append(("Docker container", "/.dockerenv"))
    if f.containerenv is not None:
        image = f.containerenv.get("image")
        found.append(("Podman container" + (f" of {image}" if image else ""), "/run/.containerenv"))
    if f.env.get("APPTAINER_CONTAINER") or f.env.get("SINGULARITY_CONTAINER") or f.singularity:
        found.append(("Apptainer/Singularity container", "APPTAINER_CONTAINER"))
    runtime = procfs.cgroup_runtime(f.cgroup or "")
    if runtime:
        kind = "Kubernetes pod" if runtime == "kubepods" else f"{runtime} container"
        found.append((kind, f"/proc/1/cgroup names {runtime}"))
    if f.env.get("KUBERNETES_SERVICE_HOST") and not any("Kubernetes" in k for k, _ in found):
        found.append(("Kubernetes pod", "KUBERNETES_SERVICE_HOST"))
    if f.env.get("container") and not found:
        found.append((f"{f.env['container']} container", "container= in the environment"))
    if not found and ngc:
        found.append(("container", "NGC environment variables"))
    if found:
        name = found[0][0]
        if ngc:
            name = f"{ngc} in a {name}"
        return name, ", ".join(e for _, e in found)
    return None, ""


def broken_requirements(
    dists: Mapping[str, Mapping[str, Any]],
    stack: tuple[str, ...] = STACK,
    environment: Mapping[str, str] | None = None,
) -> tuple[list[str], list[str]]:
    """pip-check style: ``(problems, notes)`` for the installed stack packages.

    Requirements behind an extra are not checked (nothing says the extra was
    asked for); unparseable metadata is a note, not a problem.
    """
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.version import InvalidVersion, Version

    env = {"extra": ""}
    if environment:
        env.update(environment)
    problems: list[str] = []
    notes: list[str] = []
    for key in stack:
        dist = dists.get(key)
        if dist is None:
            continue
        for line in dist.get("requires") or []:
            try:
                req = Requirement(line)
            except InvalidRequirement:
                notes.append(f"{dist['name']}: unparseable requirement {line!r}")
                continue
            if req.marker is not None:
                try:
                    if not req.marker.evaluate(env):
                        continue
                except Exception:
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
                problems.append(
                    f"{who} requires {req.name}{req.specifier}, but {have['name']} {have['version']} is installed"
                )
    return problems, notes


def evaluate(facts: Facts, environment: Mapping[str, str] | None = None) -> Result:
    readings: list[Reading] = []
    details: list[str] = []
    name, evidence = container_name(facts)
    readings.append(Reading("container", name or "none found"))
    if evidence:
        readings.append(Reading("container_evidence", evidence))
    for key in HEADLINE:
        if key in facts.dists:
            readings.append(Reading(f"{key}_version", str(facts.dists[key]["version"])))
    stack = [facts.dists[k] for k in HEADLINE if k in facts.dists]
    stack_text = ", ".join(f"{d['name']} {d['version']}" for d in stack) or "no training stack installed"

    problems, notes = broken_requirements(facts.dists, environment=environment)
    details.extend(notes)
    if facts.metadata_errors:
        details.append(f"{facts.metadata_errors} distributions have unreadable metadata")
    if facts.cgroup_error:
        details.append(facts.cgroup_error)
    readings.append(Reading("broken_requirements", len(problems)))
    if problems:
        shown = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
        details.extend(problems)
        return Result(
            "G9",
            Status.FAIL,
            f"training-stack requirements broken: {shown}",
            fix="rebuild the stack from one source: an NGC container (nvcr.io/nvidia/pytorch) or "
            "Unsloth's, or reinstall these pins together; `pip check` shows the same",
            readings=readings,
            details=details,
        )

    torch = facts.dists.get("torch")
    if facts.env.get("NVIDIA_PYTORCH_VERSION") and torch and not NV_SUFFIX.search(str(torch["version"])):
        return Result(
            "G9",
            Status.WARN,
            f"NGC PyTorch {facts.env['NVIDIA_PYTORCH_VERSION']} container, but torch "
            f"{torch['version']} has no .nvYY.MM suffix: pip replaced the container's build",
            fix="reinstall with the container's pins (pip install -c /etc/pip/constraint.txt …, "
            "--no-deps for Unsloth) or start from a fresh container",
            readings=readings,
            details=details,
        )

    if name:
        return Result(
            "G9",
            Status.PASS,
            f"container: {name} ({evidence}); {stack_text}; declared requirements hold",
            readings=readings,
            details=details,
        )

    if facts.pid1 and facts.pid1 in INIT_SYSTEMS:
        posture = f"bare pip: no container marker and PID 1 is {facts.pid1}"
    else:
        pid1 = f"PID 1 is {facts.pid1!r}" if facts.pid1 else "PID 1 unreadable"
        posture = f"unknown: no container marker matched ({pid1}; cgroup v2 and some runtimes hide it)"
    return Result(
        "G9",
        Status.WARN,
        f"{posture}; {stack_text}; declared requirements hold",
        fix="prefer an NGC container (nvcr.io/nvidia/pytorch:25.11-py3) or Unsloth's; if bare pip "
        "is unavoidable, follow NVIDIA's install order (--no-deps for Unsloth)",
        readings=readings,
        details=details,
    )


def run(ctx: CheckContext) -> Result:
    return evaluate(gather(ctx))
