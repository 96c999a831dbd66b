"""G9 — container first, not bare pip.

A bare-pip stack lets torch, triton and transformers drift apart; an NGC or Unsloth
container pins them. G9 names the container it finds (markers, cgroup, NGC
environment, torch's ``.nvYY.MM`` suffix) and checks, pip-check style, that every
installed training-stack package's requirements hold. On cgroup v2 a container often
shows no marker, so "none found" is "unknown" unless PID 1 is an init system.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from pytest_dgx_spark.checks.kit import CheckContext, FactsBase, Findings, Params, count, first_n, plus_more
from pytest_dgx_spark.model import Result, Status
from pytest_dgx_spark.probes import procfs
from pytest_dgx_spark.probes.packages import canonical

#: the packages whose drift breaks training (their requirements are verified)
STACK = tuple(
    "torch torchvision torchaudio triton xformers transformers accelerate peft trl datasets tokenizers "  # noqa: SIM905
    "safetensors bitsandbytes flash-attn unsloth unsloth-zoo deepspeed vllm sglang tensorrt-llm nemo-toolkit "
    "megatron-core lightning pytorch-lightning torchao liger-kernel diffusers huggingface-hub".split()
)
#: shown in the summary when installed
HEADLINE = ("torch", "triton", "xformers", "transformers")
NGC_ENV = (
    "NVIDIA_PYTORCH_VERSION",
    "PYTORCH_BUILD_VERSION",
    "PYTORCH_VERSION",
    "NVIDIA_PRODUCT_NAME",
    "NVIDIA_BUILD_ID",
)
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
    #: the ``name==version`` pins of /etc/pip/constraint.txt (NGC's own builds;
    #: empty in 25.10+, where PYTORCH_BUILD_VERSION still names torch's)
    constraint_pins: dict[str, str] = field(default_factory=dict)
    singularity: bool = False
    dists: dict[str, dict[str, Any]] = field(default_factory=dict)
    metadata_errors: int = 0
    #: the PEP 508 marker environment of the checked Python (python_version,
    #: platform_machine, ...): requirement markers are evaluated against it
    markers: dict[str, str] = field(default_factory=dict)


FACTS = Facts
_PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;#]+)")


def parse_constraints(text: str) -> dict[str, str]:
    """``{canonical name: version}`` from ``name==version`` lines (pip constraint file)."""
    pins: dict[str, str] = {}
    for line in text.splitlines():
        m = _PIN.match(line)
        if m:
            pins[canonical(m.group(1))] = m.group(2)
    return pins


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
    if facts.pip_constraint:
        text, _ = m.read_text("/etc/pip/constraint.txt", 1 << 20)
        facts.constraint_pins = parse_constraints(text or "")
    facts.singularity = m.exists("/.singularity.d")
    pk = m.packages()
    facts.dists = dict(pk.get("dists") or {})
    facts.metadata_errors = int(pk.get("errors") or 0)
    facts.markers = {k: str(v) for k, v in default_environment().items()}
    return facts


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
    runtime = procfs.cgroup_runtime(f.cgroup or "")
    if runtime:
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
        out.fail(text, BROKEN_FIX)
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
        original = (
            facts.constraint_pins.get("torch")
            or facts.env.get("PYTORCH_BUILD_VERSION")
            or facts.env.get("PYTORCH_VERSION")
        )
        out.append(("torch", str(torch["version"]), original))
    for key, pinned in facts.constraint_pins.items():
        dist = facts.dists.get(key)
        if key == "torch" or key not in STACK or dist is None or str(dist["version"]) == pinned:
            continue
        out.append((str(dist["name"]), str(dist["version"]), pinned))
    return out


def _replaced_stage(facts: Facts, out: Findings) -> tuple[str, str]:
    """WARN, naming each package pip replaced in an NGC PyTorch container."""
    replaced = replaced_by_pip(facts)
    if not replaced:
        return "", ""
    ngc = facts.env["NVIDIA_PYTORCH_VERSION"]
    for name, installed, original in replaced:
        was = f" ({name} {original})" if original else ""
        if name == "torch":
            text = (
                f"NGC PyTorch {ngc} container, but torch {installed} has no .nvYY.MM suffix: "
                f"pip replaced the container's build{was}"
            )
        else:
            text = f"NGC PyTorch {ngc} container, but pip replaced its {name} {original} with {installed}"
        out.warn(text, REPLACED_FIX)
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


def evaluate(facts: Facts, params: Params) -> Result:
    """Decide G9 (pure): broken requirements FAIL; an NGC build pip replaced, or
    no container, WARN; a container with a consistent stack PASSes."""
    out = Findings("G9")
    name, evidence = container_name(facts)
    stack_text = _readings(facts, name, evidence, out)
    broken = _requirements(facts, out)
    if broken:
        result = out.result()
        firsts = [" ".join(t.split()[:2]) for t, _ in out.problems]
        result.summary = f"training-stack requirements broken: {result.summary}"
        result.headline = f"{count(broken, 'broken requirement')}: {first_n(list(dict.fromkeys(firsts)), 2)}"
        result.short_fix = BROKEN_SHORT
        return result
    headline, short_fix = _replaced_stage(facts, out)
    if headline:
        return out.result(headline=headline, short_fix=short_fix)
    if name:
        return out.result(
            Status.PASS,
            f"container: {name} ({evidence}); {stack_text}; declared requirements hold",
            headline=f"container: {name}; declared requirements hold",
        )
    if facts.pid1 and facts.pid1 in INIT_SYSTEMS:
        posture = f"bare pip: no container marker and PID 1 is {facts.pid1}"
        headline = f"bare pip: no container (PID 1 is {facts.pid1})"
    else:
        pid1 = f"PID 1 is {facts.pid1!r}" if facts.pid1 else "PID 1 unreadable"
        posture = f"unknown: no container marker matched ({pid1}; cgroup v2 and some runtimes hide it)"
        headline = f"no container marker matched ({pid1})"
    out.warn(f"{posture}; {stack_text}; declared requirements hold", CONTAINER_FIX)
    return out.result(headline=headline, short_fix=CONTAINER_SHORT)
