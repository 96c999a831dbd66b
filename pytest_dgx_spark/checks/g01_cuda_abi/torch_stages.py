"""G1's stages about torch itself: the child (does torch import, did it die in a G1 step), torch's
CUDA major against the driver and the profile, a CPU-only build, and the tiny kernel."""

from __future__ import annotations

import re

from pytest_dgx_spark.checks.g01_cuda_abi.facts import Load, Owner
from pytest_dgx_spark.checks.g01_cuda_abi.view import TORCH_INDEX, View, gist
from pytest_dgx_spark.checks.kit import ChildFacts, Findings

#: steps of the torch child that belong to G1 ("load <object>", "import <package>" come on top)
G1_STEPS = ("import torch", "wait for the request", "cuda init", "tiny kernel")
CRASHES = ("SIGSEGV", "SIGBUS", "SIGABRT", "SIGILL")


def torch_child(v: View, out: Findings) -> None:
    """torch does not import, the child could not start, or it died in a G1 step."""
    c, err = v.c, v.f.torch.torch_import_error
    step = c.step or ""
    if c.error:
        what = c.describe or "torch child could not start"
        out.fail(what, "check the Python interpreter pytest runs", what, "check the Python interpreter",
                 code="G1.child-not-started")
    elif err and not v.absent:
        out.fail(
            f"torch is installed but does not import: {err}",
            f"reinstall torch for this CUDA ({TORCH_INDEX}) or use an NGC container",
            f"torch does not import: {gist(err)}", "reinstall torch (cu130 index)",
            code="G1.torch-import-error")
    elif v.died and (step in G1_STEPS or step.startswith(("load ", "import "))):
        how = c.signal or ("hung" if c.timed_out else "stopped")
        crash = not c.timed_out and c.signal in CRASHES
        hint = (
            " (a crash at the first CUDA call is the classic sign of a build for another CUDA major)"
            if crash and step in ("cuda init", "tiny kernel") else ""
        )
        fix, short = _death_fix(v, step, c)
        out.fail(c.describe + hint, fix, f"torch child {how} in {step!r}", short, code="G1.child-died")
    elif v.died:
        out.note(f"{c.describe} (not a G1 step; G2/G5 report it)")


def _death_fix(v: View, step: str, c: ChildFacts) -> tuple[str, str]:
    """The fix, and its short form, for a child that died in ``step``."""
    if c.timed_out:
        return (
            f"{step} hung: a wedged driver looks like this — check `dmesg` for Xid/NVRM errors and "
            "nvidia-smi; reboot if they are there", "check dmesg for Xid errors; reboot")
    name, package = step.split(" ", 1)[-1], "reinstall or uninstall that package"
    if step.startswith("load "):
        entry = next((e for e in v.f.requested if e.name == name), Load())
        dist = (v.f.owner(entry.path) or Owner()).name or entry.module or name
        return (
            f"run `python -c 'import torch, ctypes; ctypes.CDLL(\"{entry.path or name}\")'` to see it; "
            f"reinstall {dist} built for torch's CUDA major, or uninstall it", package)
    if step.startswith("import ") and step != "import torch":
        return (
            f"run `python -c 'import torch, {name}'` to see it; reinstall {name} built for torch's CUDA "
            "major, or uninstall it", package)
    short = "reinstall torch for this CUDA (cu130 on GB10)"
    if step == "import torch":
        fix = "run `python -c 'import torch'` to see it; reinstall torch (cu130 wheels or an NGC container)"
        return fix, short
    return (
        "run `python -c 'import torch; print(torch.ones(1).cuda())'` to see it; make torch's CUDA major match "
        "the driver's (nvidia-smi) and this GPU", short)


def torch_fits(v: View, out: Findings) -> None:
    """torch (or the reference) newer than the driver; not the profile's major; CPU-only."""
    _driver_too_old(v, out)
    _profile_major(v, out)
    if v.cpu_only and v.gpu_seen:
        _cpu_only_torch(v, out)


def _driver_too_old(v: View, out: Findings) -> None:
    f, ref = v.f, v.reference
    if ref is None or v.ref_from not in ("torch", "modules") or v.driver_major is None or ref <= v.driver_major:
        return
    out.fail(
        f"{v.ref_text or f'CUDA {ref}'} needs CUDA {ref} but the driver ({f.driver_version or '?'}) "
        f"supports CUDA {v.driver_text}",
        f"upgrade the NVIDIA driver to one that supports CUDA {ref}, or install a torch built for "
        f"CUDA {v.driver_major}",
        f"CUDA {ref} build, driver {f.driver_version or '?'} supports CUDA {v.driver_text}",
        f"upgrade the driver to CUDA {ref}", code="G1.driver-too-old")


def _profile_major(v: View, out: Findings) -> None:
    required = int(v.params.threshold("g1_cuda_major") or 0)
    if not required or v.torch_major is None or v.torch_major == required:
        return
    where = "GB10 (SM121)" if v.params.gb10 else "this profile"
    version, built = v.torch_version or v.torch_dist, v.torch_cuda or v.torch_major
    out.fail(
        f"torch {version} is built for CUDA {built}; {where} needs a CUDA {required} build",
        f"{TORCH_INDEX}, or use an NGC container (nvcr.io/nvidia/pytorch:25.09-py3 or newer)",
        f"torch {version} is CUDA {built}; {where} needs CUDA {required}",
        "pip install torch from the cu130 index", code="G1.torch-cuda-major")


def _cpu_only_torch(v: View, out: Findings) -> None:
    """A CPU-only wheel next to a working driver: what plain pip on aarch64 gave before torch 2.11."""
    f = v.f
    gpu = ", ".join(sorted(set(f.gpus))) or "an NVIDIA GPU"
    driver = f" (driver {f.driver_version}, CUDA {v.driver_text})" if f.driver_version and v.driver_text else ""
    old = re.match(r"(\d+)\.(\d+)", v.torch_version or "")
    before = old is not None and (int(old[1]), int(old[2])) < (2, 11)
    aarch64 = (f.arch or "").lower() in ("aarch64", "arm64") and before
    out.fail(
        f"torch {v.torch_version} is a CPU-only build (torch.version.cuda is None: "
        f'"Torch not compiled with CUDA enabled") on a machine with {gpu}{driver}',
        TORCH_INDEX + ("; PyPI's aarch64 torch before 2.11 is CPU-only" if aarch64 else ""),
        f"torch {v.torch_version} is CPU-only on {gpu}", "pip install torch from the cu130 index",
        code="G1.torch-cpu-only")


def kernel(v: View, out: Findings) -> str:
    """torch's tiny kernel: ``ok``, ``failed`` or ``not run``."""
    t, f = v.f.torch, v.f
    ran, gpu = t.kernel, f.gpus[0] if f.gpus else "the GPU"
    if ran is not None:
        if ran.ok:
            return "ok"
        got = ran.error or f"wrong result {ran.value!r}"
        out.fail(
            f"torch's tiny kernel failed on {gpu}: {got}",
            "install a torch build whose CUDA major and arch list cover this GPU (cu130 on GB10)",
            f"torch's tiny kernel failed on {gpu}", "reinstall torch for this GPU (cu130 on GB10)",
            code="G1.kernel-failed")
        return "failed"
    if v.torch_cuda and v.gpu_seen and v.torch_version and t.cuda_available is False:
        why = t.cuda_error or "torch.cuda.is_available() is False"
        out.fail(
            f"torch {v.torch_version} (CUDA {v.torch_cuda}) cannot use the GPU: {why}",
            "check the driver (nvidia-smi) and that torch's CUDA major is not above the driver's",
            f"torch {v.torch_version} cannot use the GPU", "check nvidia-smi and torch's CUDA major",
            code="G1.cuda-unavailable")
    return "not run"
