"""G1 — CUDA 12/13 ABI: find the module linked to the wrong CUDA major before it segfaults.

Most pip ML wheels were built against CUDA 12; GB10 (SM121) needs a CUDA 13
stack. A CUDA 12 extension in a CUDA 13 environment fails late — at its first
import (``libcudart.so.12: cannot open shared object file``, an ``undefined
symbol``) or worse, with a SIGSEGV on the first ``.cuda()``. This check
finds it up front, in two halves:

* static: the ``DT_NEEDED`` entries of every shared object in the checked
  Python's package folders (``probes/elf.py``), the CUDA libraries that
  ``ldconfig`` and ``LD_LIBRARY_PATH`` offer, and which distribution
  installed each file (``probes/dist_files.py``) — so the verdict names the
  ``pip uninstall`` to run;
* dynamic: the run's one torch child imports torch, launches a tiny kernel
  and imports every installed CUDA extension package; a crash there is named
  by its signal and step.

Only ``libcudart``/``libcublas``/``libcublasLt``/``libnvrtc`` count: their
major tracks the CUDA major, while ``libcufft.so.12`` and ``libcusparse.so.12``
ship inside CUDA 13 too.
"""

from __future__ import annotations

import os
import re
import shutil
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_spark.checks.kit import CheckContext
from pytest_spark.model import Reading, Result, Status
from pytest_spark.probes import elf
from pytest_spark.probes.dist_files import owners_for
from pytest_spark.probes.machine import format_cuda_version
from pytest_spark.probes.packages import canonical

#: installed distribution -> the module the torch child imports to prove it loads
EXTENSIONS: dict[str, str] = {
    "flash-attn": "flash_attn",
    "xformers": "xformers",
    "vllm": "vllm",
    "bitsandbytes": "bitsandbytes",
    "flashinfer-python": "flashinfer",
    "transformer-engine": "transformer_engine",
    "mamba-ssm": "mamba_ssm",
    "causal-conv1d": "causal_conv1d",
    "apex": "apex",
    "sgl-kernel": "sgl_kernel",
    "sageattention": "sageattention",
    "auto-gptq": "auto_gptq",
    "deepspeed": "deepspeed",
    "torchvision": "torchvision",
    "torchaudio": "torchaudio",
    "torchao": "torchao",
    "cupy-cuda12x": "cupy",
    "cupy-cuda13x": "cupy",
    "llama-cpp-python": "llama_cpp",
}
#: never imported by the probe (the static scan still covers their files)
NOT_IMPORTED: dict[str, str] = {
    "torch": "imported first, on its own",
    "unsloth": "its import patches transformers and needs a GPU",
    "unsloth-zoo": "imported by unsloth only",
    "tensorrt-llm": "its import initialises MPI",
    "tensorrt": "loaded by tensorrt-llm",
}
MAX_IMPORTS = 12

#: steps of the torch child that belong to G1 (extension imports are "import <name>")
G1_STEPS = ("import torch", "cuda init", "tiny kernel")

#: an import error that is an ABI problem rather than a missing Python dependency
ABI_ERROR = re.compile(
    r"undefined symbol|cannot open shared object|\.so(\.\d+)*\b|symbol lookup error|wrong ELF class|"
    r"CUDA driver version is insufficient|no kernel image|operator \S+ does not exist|libcudart|libcublas",
    re.IGNORECASE,
)
CU_TAG = re.compile(r"\+cu(\d{2,3})(?![0-9])")


@dataclass
class Facts:
    """Everything G1 decides on, JSON-shaped (recorded inputs rebuild it in tests)."""

    profile: str = "generic"
    required_major: int = 0  # threshold g1_cuda_major: 13 on GB10, 0 = none
    scan: dict[str, Any] = field(default_factory=dict)
    #: path -> {"name", "version", "hint"} for the linkers and providers only
    owners: dict[str, dict[str, Any]] = field(default_factory=dict)
    ldconfig: list[dict[str, Any]] = field(default_factory=list)
    ldconfig_error: str | None = None
    ld_library_path: list[dict[str, Any]] = field(default_factory=list)
    #: canonical name -> {"name", "version"}: torch and the nvidia-*-cu* wheels
    dists: dict[str, dict[str, Any]] = field(default_factory=dict)
    driver_cuda: int | None = None
    driver_version: str | None = None
    nvml_reason: str | None = None
    gpus: list[str] = field(default_factory=list)
    torch: dict[str, Any] = field(default_factory=dict)  # the torch child's data
    child: dict[str, Any] = field(default_factory=dict)  # ok, signal, timed_out, step, describe
    requested: list[str] = field(default_factory=list)  # extension imports asked for


# ---------------------------------------------------------------------- gathering


def _static(ctx: CheckContext) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    machine = ctx.machine
    scan = elf.scan_environment(machine)
    interesting = bool(scan.get("linkers") or scan.get("providers"))
    owners = owners_for(machine, scan.get("roots") or []) if interesting else {"owners": {}}
    return scan, owners, machine.packages()


def extension_imports(
    dists: Mapping[str, Mapping[str, Any]],
    linkers: Iterable[Mapping[str, Any]],
    owners: Mapping[str, Mapping[str, Any]],
) -> list[str]:
    """The import names of installed CUDA extension packages, known ones first.

    Known packages (flash-attn, xformers, vllm, bitsandbytes, ...) are
    imported when installed; any other distribution that owns a shared object
    linking the CUDA runtime is imported by its top-level name.
    """
    names: list[str] = []
    for dist, module in EXTENSIONS.items():
        if dist in dists and module not in names:
            names.append(module)
    for linker in linkers:
        owner = owners.get(linker["path"])
        if not owner:
            continue
        key = canonical(owner["name"])
        if key in NOT_IMPORTED or key.startswith("nvidia-") or key in EXTENSIONS:
            continue
        hint = owner.get("hint")
        if hint and hint not in names and hint != "torch":
            names.append(hint)
    return names[:MAX_IMPORTS]


def torch_request(ctx: CheckContext) -> dict[str, Any]:
    """Ask the torch child to import every installed CUDA extension package."""
    scan, owners, packages = _static(ctx)
    dists = packages.get("dists") or {}
    return {"extensions": extension_imports(dists, scan.get("linkers") or [], owners.get("owners") or {})}


def gather(ctx: CheckContext) -> Facts:
    machine = ctx.machine
    scan, owners_all, packages = _static(ctx)
    all_owners = owners_all.get("owners") or {}
    paths = {x["path"] for x in scan.get("linkers") or []} | {x["path"] for x in scan.get("providers") or []}
    dists = packages.get("dists") or {}
    keep = {
        k: {"name": v.get("name"), "version": v.get("version")}
        for k, v in dists.items()
        if k == "torch" or (k.startswith("nvidia-") and re.search(r"-cu\d+$", k))
    }

    ldconfig: list[dict[str, Any]] = []
    ldconfig_error = None
    argv = _ldconfig_argv(machine)
    if argv is None:
        ldconfig_error = "ldconfig not found"
    else:
        res = machine.command(argv, timeout=machine.timeout)
        if res.ok:
            ldconfig = elf.parse_ldconfig(res.stdout)
        else:
            ldconfig_error = res.describe()
    lib_dirs = [d for d in machine.env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]

    nv = machine.nvml()
    devices = nv.get("devices") or []
    child = ctx.torch()
    requested = extension_imports(dists, scan.get("linkers") or [], all_owners)
    return Facts(
        profile=ctx.profile,
        required_major=int(ctx.thresholds.get("g1_cuda_major", 0) or 0),
        scan=scan,
        owners={p: all_owners[p] for p in paths if p in all_owners},
        ldconfig=ldconfig,
        ldconfig_error=ldconfig_error,
        ld_library_path=elf.list_library_dirs(lib_dirs),
        dists=keep,
        driver_cuda=nv.get("cuda_driver_version") if isinstance(nv.get("cuda_driver_version"), int) else None,
        driver_version=nv.get("driver_version"),
        nvml_reason=None if nv.get("ok") and devices else nv.get("reason"),
        gpus=[str(d.get("name") or "GPU") for d in devices],
        torch=dict(child.data),
        child={
            "ok": child.ok,
            "signal": child.signal,
            "timed_out": child.timed_out,
            "step": child.step,
            "error": child.error,
            "finished": child.finished,
            "describe": child.describe("torch child"),
            "steps": dict(child.step_seconds),
        },
        requested=requested,
    )


def _ldconfig_argv(machine: Any) -> list[str] | None:
    """``ldconfig -p``: on PATH, else where Debian and RHEL keep it (``/sbin`` is
    not on an ordinary user's PATH)."""
    if shutil.which("ldconfig", path=machine.env.get("PATH", os.defpath)):
        return ["ldconfig", "-p"]
    for candidate in ("/sbin/ldconfig", "/usr/sbin/ldconfig"):
        if os.access(candidate, os.X_OK):
            return [candidate, "-p"]
    return None


# ---------------------------------------------------------------------- deciding


def cuda_major(version: Any) -> int | None:
    """``"13.0"`` -> 13; ``None``/junk -> ``None``."""
    try:
        return int(str(version).split(".", 1)[0])
    except (TypeError, ValueError):
        return None


def tag_major(torch_version: str | None) -> int | None:
    """``2.11.0+cu130`` -> 13, ``2.7.0+cu128`` -> 12; NGC's ``+…nv25.09`` -> ``None``."""
    m = CU_TAG.search(torch_version or "")
    return int(m.group(1)[:-1]) if m else None


def _rel(path: str, root: str | None) -> str:
    if root and path.startswith(root.rstrip(os.sep) + os.sep):
        return path[len(root.rstrip(os.sep)) + 1 :]
    return path


def _who(path: str, root: str | None, owners: Mapping[str, Mapping[str, Any]]) -> str:
    owner = owners.get(path)
    if owner:
        return f"{owner['name']} {owner['version']}"
    return f"{_rel(path, root)} (no installed distribution lists it)"


def _majors(linker: Mapping[str, Any]) -> set[int]:
    return {m for n in linker.get("needs") or [] if (t := elf.tracked(n)) for m in [t[1]]}


def _death_hint(c: Mapping[str, Any]) -> str:
    if c.get("timed_out") or c.get("signal") not in ("SIGSEGV", "SIGBUS", "SIGABRT", "SIGILL"):
        return ""
    if c.get("step") in ("cuda init", "tiny kernel"):
        return " (a crash at the first CUDA call is the classic sign of a build for another CUDA major)"
    return ""


def _death_fix(c: Mapping[str, Any]) -> str:
    step = str(c.get("step") or "")
    if c.get("timed_out"):
        return (
            f"{step} hung: a wedged driver looks like this — check `dmesg` for Xid/NVRM errors and "
            "nvidia-smi; reboot if they are there"
        )
    if step.startswith("import ") and step != "import torch":
        name = step.removeprefix("import ")
        return (
            f"run `python -c 'import torch, {name}'` to see it; reinstall {name} built for torch's "
            "CUDA major, or uninstall it"
        )
    if step == "import torch":
        return "run `python -c 'import torch'` to see it; reinstall torch (cu130 wheels or an NGC container)"
    return (
        "run `python -c 'import torch; print(torch.ones(1).cuda())'` to see it; make torch's CUDA major match "
        "the driver's (nvidia-smi) and this GPU"
    )


def _objects(n: int, verb: str) -> str:
    """``1 shared object links`` / ``3 shared objects link``."""
    return f"{n} shared object {verb}s" if n == 1 else f"{n} shared objects {verb}"


def evaluate(f: Facts) -> Result:
    """Decide G1 from the facts (pure; unit-tested on recorded input)."""
    scan = f.scan or {}
    linkers = [x for x in scan.get("linkers") or [] if _majors(x)]
    providers = list(scan.get("providers") or [])
    skipped = sum((scan.get("skipped") or {}).values())
    t, c = f.torch or {}, f.child or {}
    problems: list[tuple[str, str]] = []
    warnings: list[tuple[str, str]] = []
    details: list[str] = []

    # -------------------------------------------------- torch, from the child
    torch_version = t.get("torch_version")
    import_error = t.get("torch_import_error")
    absent = (
        bool(import_error) and import_error.startswith("ModuleNotFoundError") and "'torch'" in import_error
    )
    step = c.get("step")
    died = bool(c.get("signal") or c.get("timed_out")) or bool(
        c and not c.get("finished") and not c.get("error")
    )
    if c.get("error"):
        problems.append(
            (c.get("describe") or "torch child could not start", "check the Python interpreter pytest runs")
        )
    elif import_error and not absent:
        problems.append(
            (
                f"torch is installed but does not import: {import_error}",
                "reinstall torch for this CUDA (pip install torch --index-url "
                "https://download.pytorch.org/whl/cu130) or use an NGC container",
            )
        )
    elif died and (step in G1_STEPS or (step or "").startswith("import ")):
        problems.append((str(c.get("describe")) + _death_hint(c), _death_fix(c)))
    elif died:
        details.append(f"{c.get('describe')} (not a G1 step; G2/G5 report it)")

    torch_cuda = t.get("torch_cuda")
    torch_dist = (f.dists.get("torch") or {}).get("version")
    own = [x for x in linkers if (f.owners.get(x["path"]) or {}).get("name") == "torch"]
    torch_major = cuda_major(torch_cuda) if torch_version else None
    major_source = f"torch.version.cuda {torch_cuda}" if torch_major else ""
    if torch_major is None and not torch_version:  # the child gave no answer: read the files
        torch_major = tag_major(torch_dist)
        if torch_major is not None:
            major_source = f"the +cu tag of torch {torch_dist}"
        elif own:
            counted = Counter(m for x in own for m in _majors(x))
            torch_major = counted.most_common(1)[0][0] if counted else None
            major_source = "torch's own libraries" if torch_major else ""
    cpu_only = bool(torch_version) and not torch_cuda
    gpu_seen = bool(f.gpus) or bool(t.get("device_count"))

    readings = [
        Reading("torch_version", torch_version or torch_dist),
        Reading("torch_cuda", torch_cuda),
        Reading("driver_cuda", format_cuda_version(f.driver_cuda)),
        Reading("elf_files_scanned", int(scan.get("files") or 0)),
        Reading("elf_scan_time", round(float(scan.get("duration_s") or 0.0) * 1000, 1), "ms"),
        Reading("elf_skipped", skipped),
        Reading("cuda_linked_objects", len(linkers)),
    ]
    if c.get("steps"):  # where the child's seconds went (torch import, CUDA init, each extension)
        details.append("torch child: " + ", ".join(f"{k} {v:.2f} s" for k, v in c["steps"].items()))
    if skipped:
        why = ", ".join(f"{n} {r.replace('_', ' ')}" for r, n in sorted((scan.get("skipped") or {}).items()))
        details.append(f"skipped while scanning: {why}")
    if scan.get("stopped"):
        details.append(f"the scan stopped early ({scan['stopped']}): files after that were not read")
    if f.ldconfig_error:
        details.append(f"ldconfig -p: {f.ldconfig_error}")
    if f.nvml_reason:
        details.append(f"driver CUDA version unknown: {f.nvml_reason}")

    # -------------------------------------------------- the reference major
    linker_majors = Counter(m for x in linkers for m in _majors(x))
    reference = torch_major
    ref_text = (
        f"torch {torch_version or torch_dist} (CUDA {torch_cuda or torch_major})" if torch_major else ""
    )
    if reference is None and linker_majors and not cpu_only:
        reference = linker_majors.most_common(1)[0][0]
        ref_text = f"most CUDA-linked modules (CUDA {reference})"
    if reference is not None:
        readings.append(Reading("cuda_major", reference))
    if major_source and major_source != f"torch.version.cuda {torch_cuda}":
        details.append(f"torch's CUDA major read from {major_source} (the child gave none)")

    # -------------------------------------------------- mixed majors
    mismatched: list[dict[str, Any]] = []
    variants: dict[str, list[str]] = {}
    if reference is not None:
        by_dist: dict[str, set[int]] = {}
        for x in linkers:
            owner = (f.owners.get(x["path"]) or {}).get("name") or x["path"]
            by_dist.setdefault(owner, set()).update(_majors(x))
        for x in linkers:
            majors = _majors(x)
            if majors == {reference}:
                continue
            owner = (f.owners.get(x["path"]) or {}).get("name") or x["path"]
            if reference in majors or reference not in by_dist.get(owner, set()):
                mismatched.append(x)
            else:  # bitsandbytes ships one build per CUDA major and loads torch's at runtime
                variants.setdefault(owner, []).append(os.path.basename(x["path"]))
        for owner, files in sorted(variants.items()):
            other = sorted(by_dist[owner] - {reference})
            details.append(
                f"{owner} also ships builds for CUDA {'/'.join(map(str, other))} ({', '.join(sorted(files)[:4])}"
                f"{', …' if len(files) > 4 else ''}); it loads its CUDA {reference} build at runtime"
            )
    mismatched.sort(key=lambda x: x["path"])
    readings.append(Reading("mismatched_objects", len(mismatched)))
    if mismatched:
        groups: dict[str, list[str]] = {}
        for x in mismatched:
            who = _who(x["path"], x.get("root"), f.owners)
            needs = ", ".join(n for n in x["needs"] if (elf.tracked(n) or ("", reference))[1] != reference)
            groups.setdefault(who, []).append(f"{os.path.basename(x['path'])} -> {needs}")
        for who, items in groups.items():
            details.append(f"{who}: " + "; ".join(items))
        shown = [
            f"{who} ({items[0]}{f' and {len(items) - 1} more' if len(items) > 1 else ''})"
            for who, items in groups.items()
        ]
        text = "; ".join(shown[:3]) + (f"; and {len(shown) - 3} more" if len(shown) > 3 else "")
        names = [w.split(" ", 1)[0] for w in groups if "(no installed" not in w]
        problems.append(
            (
                f"{_objects(len(mismatched), 'link')} another CUDA major than {ref_text}: {text}",
                (
                    f"pip uninstall {' '.join(names)} and reinstall builds for CUDA {reference}"
                    if names
                    else f"remove or rebuild those files for CUDA {reference}"
                )
                + " (cu130 wheels, or an NGC container that ships them)",
            )
        )

    # -------------------------------------------------- torch vs driver, GB10
    driver_major = f.driver_cuda // 1000 if f.driver_cuda else None
    driver_text = format_cuda_version(f.driver_cuda)
    if reference is not None and driver_major is not None and reference > driver_major:
        problems.append(
            (
                f"{ref_text or f'CUDA {reference}'} needs CUDA {reference} but the driver "
                f"({f.driver_version or '?'}) supports CUDA {driver_text}",
                f"upgrade the NVIDIA driver to one that supports CUDA {reference}, or install a torch "
                f"built for CUDA {driver_major}",
            )
        )
    if f.required_major and torch_major is not None and torch_major != f.required_major:
        where = "GB10 (SM121)" if f.profile == "gb10" else "this profile"
        problems.append(
            (
                f"torch {torch_version or torch_dist} is built for CUDA {torch_cuda or torch_major}; "
                f"{where} needs a CUDA {f.required_major} build",
                "pip install torch --index-url https://download.pytorch.org/whl/cu130, or use an NGC "
                "container (nvcr.io/nvidia/pytorch:25.09-py3 or newer)",
            )
        )
    if cpu_only and gpu_seen:
        problems.append(
            (
                f"torch {torch_version} is a CPU-only build on a machine with {', '.join(sorted(set(f.gpus))) or 'an NVIDIA GPU'}",
                "pip install torch --index-url https://download.pytorch.org/whl/cu130",
            )
        )

    # -------------------------------------------------- the dynamic half
    kernel = t.get("kernel")
    kernel_state = "not run"
    if isinstance(kernel, dict):
        kernel_state = "ok" if kernel.get("ok") else "failed"
        if not kernel.get("ok"):
            got = kernel.get("error") or f"wrong result {kernel.get('value')!r}"
            problems.append(
                (
                    f"torch's tiny kernel failed on {f.gpus[0] if f.gpus else 'the GPU'}: {got}",
                    "install a torch build whose CUDA major and arch list cover this GPU (cu130 on GB10)",
                )
            )
    elif torch_cuda and gpu_seen and torch_version and t.get("cuda_available") is False:
        why = t.get("cuda_error") or "torch.cuda.is_available() is False"
        problems.append(
            (
                f"torch {torch_version} (CUDA {torch_cuda}) cannot use the GPU: {why}",
                "check the driver (nvidia-smi) and that torch's CUDA major is not above the driver's",
            )
        )
    readings.append(Reading("kernel", kernel_state))

    extensions = t.get("extensions") or {}
    imported = sorted(n for n, e in extensions.items() if e.get("ok"))
    for name, e in sorted(extensions.items()):
        if e.get("ok"):
            continue
        err = str(e.get("error") or "failed")
        if ABI_ERROR.search(err):
            named = any(
                name in (f.owners.get(x["path"]) or {}).get("hint", "")
                or name.replace("_", "-") == (f.owners.get(x["path"]) or {}).get("name")
                for x in mismatched
            )
            problems.append(
                (
                    f"import {name} fails: {err}",
                    ""
                    if named
                    else f"reinstall {name} built against the installed torch and its CUDA major "
                    "(pip install --force-reinstall --no-build-isolation), or uninstall it",
                )
            )
        else:
            warnings.append(
                (
                    f"import {name} fails (not an ABI error): {err}",
                    f"fix {name}'s Python dependencies (see G9) or uninstall it",
                )
            )
    missing = [n for n in f.requested if n not in extensions]
    if missing and torch_version and not problems and died:
        warnings.append(
            (
                f"extension imports not verified ({', '.join(missing)}): {c.get('describe')}",
                "see the check that owns that step (G2 flash-attn, G5 bandwidth)",
            )
        )
    readings.append(Reading("extensions_imported", len(imported)))

    # -------------------------------------------------- leftovers
    needed = {elf.tracked(n) for x in linkers for n in x.get("needs") or []}
    leftovers: dict[tuple[str, int], list[str]] = {}
    if reference is not None:
        for p in providers:
            key = (p["lib"], p["major"])
            if p["major"] != reference and key not in needed:
                owner = f.owners.get(p["path"])
                where = f"installed by {owner['name']} {owner['version']}" if owner else f"at {p['path']}"
                leftovers.setdefault(key, []).append(where)
        for p in f.ldconfig:
            key = (p["lib"], p["major"])
            if p["major"] != reference and key not in needed:
                leftovers.setdefault(key, []).append(f"registered in ldconfig ({p['path']})")
        for p in f.ld_library_path:
            key = (p["lib"], p["major"])
            if p["major"] != reference and key not in needed:
                leftovers.setdefault(key, []).append(f"on LD_LIBRARY_PATH ({p['path']})")
    if leftovers:
        parts = [
            f"{lib}.so.{major} {', '.join(dict.fromkeys(where))}"
            for (lib, major), where in sorted(leftovers.items())
        ]
        for part in parts:
            details.append(f"leftover: {part}")
        pip_names = sorted(
            {
                (f.owners.get(p["path"]) or {}).get("name")
                for p in providers
                if (p["lib"], p["major"]) in leftovers and f.owners.get(p["path"])
            }
        )
        fix = f"pip uninstall {' '.join(pip_names)}" if pip_names else ""
        if any(p for p in f.ldconfig if (p["lib"], p["major"]) in leftovers):
            fix += ("; " if fix else "") + "remove the old toolkit's /etc/ld.so.conf.d entry and run ldconfig"
        fix += " — so a CUDA 12 wheel fails at install, not half-loaded mid-run"
        warnings.append(
            (
                f"leftover CUDA {'/'.join(sorted({str(m) for _, m in leftovers}))} libraries linked by "
                f"nothing ({'; '.join(parts[:2])}{'; …' if len(parts) > 2 else ''})",
                fix.strip(),
            )
        )
    cu_wheels = sorted(
        v["name"]
        for k, v in f.dists.items()
        if k.startswith("nvidia-") and reference and not k.endswith(f"-cu{reference}")
    )
    if cu_wheels:
        details.append(f"CUDA wheels for another major installed: {', '.join(cu_wheels)}")

    # -------------------------------------------------- verdict
    # the scan time is a reading, not part of the line: the same machine must print the same line
    scanned = f"{int(scan.get('files') or 0)} shared objects scanned"
    if problems:
        summary = "; ".join(s for s, _ in problems[:3]) + (
            f"; and {len(problems) - 3} more" if len(problems) > 3 else ""
        )
        fix = "; ".join(dict.fromkeys(x for _, x in problems[:3] if x))
        details.extend(s for s, _ in problems[3:])
        return Result("G1", Status.FAIL, summary, fix, readings, details=details)

    no_torch = absent or (not torch_version and not torch_dist)
    if (no_torch or (cpu_only and not gpu_seen)) and not linkers:
        what = (
            "torch is not installed"
            if no_torch
            else f"torch {torch_version} is CPU-only and there is no NVIDIA GPU"
        )
        return Result(
            "G1",
            Status.SKIP,
            f"{what}, and none of the {int(scan.get('files') or 0)} shared objects scanned "
            "links a CUDA runtime: no CUDA ABI to check",
            readings=readings,
            details=details,
        )
    if cpu_only and linkers:
        warnings.append(
            (
                f"torch {torch_version} is CPU-only, yet {_objects(len(linkers), 'link')} CUDA "
                f"{'/'.join(map(str, sorted(linker_majors)))}: they cannot run with this torch",
                "install a CUDA build of torch (cu130) or uninstall the CUDA packages",
            )
        )

    majors_text = "/".join(map(str, sorted(linker_majors))) or "?"
    if cpu_only:
        consistent = ""  # said in the warning above
    elif len(linkers) == 1:
        consistent = f"the one CUDA-linked shared object uses CUDA {majors_text}"
    elif linkers:
        consistent = f"all {len(linkers)} CUDA-linked shared objects use CUDA {majors_text}"
    else:
        consistent = "no extension module links a CUDA runtime"
    driver = f"driver supports CUDA {driver_text}" if driver_text else "driver CUDA version unknown"
    kernel_text = {
        "ok": f"tiny kernel ran on {f.gpus[0] if f.gpus else t.get('device_name') or 'the GPU'}",
        "not run": "no kernel run (no CUDA device)",
    }.get(kernel_state, "")
    imports = f"imported {', '.join(imported)}" if imported else ""
    if ref_text and torch_major is not None:
        head = ref_text
    elif cpu_only:
        head = f"torch {torch_version} (CPU-only)"
    else:
        head = "torch not installed"
    body = "; ".join(x for x in (f"{head}, {driver}", consistent, kernel_text, imports, scanned) if x)
    if warnings:
        summary = "; ".join(s for s, _ in warnings[:2]) + f"; {body}"
        fix = "; ".join(dict.fromkeys(x for _, x in warnings[:2]))
        return Result("G1", Status.WARN, summary, fix, readings, details=details)
    return Result("G1", Status.PASS, body, readings=readings, details=details)


def run(ctx: CheckContext) -> Result:
    return evaluate(gather(ctx))
