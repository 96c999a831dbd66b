"""G1's readings and notes, and the line it ends with: the FAIL or WARN of the stages, a SKIP when
there is no CUDA ABI to check, else a PASS that says what was verified."""

from __future__ import annotations

from pytest_dgx_spark.checks.g01_cuda_abi.view import View, objects, version
from pytest_dgx_spark.checks.kit import Findings, count, first_n
from pytest_dgx_spark.model import Result, Status


def readings(v: View, out: Findings) -> None:
    scan = v.scan
    out.read("torch_version", v.torch_version or v.torch_dist)
    out.read("torch_cuda", v.torch_cuda)
    out.read("driver_cuda", v.driver_text)
    out.read("elf_files_scanned", scan.files)
    out.read("elf_scan_time", round(scan.duration_s * 1000, 1), "ms")
    out.read("elf_skipped", sum(scan.skipped.values()))
    out.read("cuda_linked_objects", len(v.linkers))
    if v.reference is not None:
        out.read("cuda_major", v.reference)
    _notes(v, out)


def _notes(v: View, out: Findings) -> None:
    f, scan, skipped, steps = v.f, v.scan, v.scan.skipped, v.c.steps
    other_wheels = sorted(
        d.name for k, d in f.dists.items()
        if k.startswith("nvidia-") and v.reference and not k.endswith(f"-cu{v.reference}")
    )  # fmt: skip
    by_child = f"torch.version.cuda {v.torch_cuda}"
    out.note(
        # where the child's seconds went (torch import, CUDA init, the loads)
        "torch child: " + ", ".join(f"{k} {s:.2f} s" for k, s in list(steps.items())[:12]) if steps else "",
        "skipped while scanning: " + ", ".join(f"{n} {r.replace('_', ' ')}" for r, n in sorted(skipped.items()))
        if skipped else "",
        f"the scan stopped early ({scan.stopped}): files after that were not read" if scan.stopped else "",
        f"ldconfig -p: {f.ldconfig_error}" if f.ldconfig_error else "",
        f"driver CUDA version unknown: {f.nvml_reason}" if f.nvml_reason else "",
        f"torch's CUDA major read from {v.major_source} (the child gave none)"
        if v.major_source and v.major_source != by_child else "",
        f"no torch CUDA build to compare with: the reference major is {v.ref_text}"
        if v.ref_from in ("driver", "profile", "modules") else "",
        f"CUDA wheels for another major installed: {', '.join(other_wheels)}" if other_wheels else "",
    )


def unverified(v: View, out: Findings) -> None:
    """The child died in another check's step before the loads ran."""
    loaded = v.f.torch.loaded
    wanted = [e for e in v.f.requested if not e.group]
    if v.died and v.torch_version and not out.problems and loaded < len(wanted):
        names = [e.name for e in wanted[loaded:]]
        out.warn(
            f"extension objects not loaded ({first_n(names)}): {v.c.describe}",
            "see the check that owns that step (G2 flash-attn, G5 bandwidth)",
            f"{count(len(names), 'extension object')} not loaded: the torch child stopped",
            "see G2/G5 for the step that stopped it", code="G1.not-loaded")


def cpu_torch_with_cuda_modules(v: View, out: Findings) -> None:
    if v.cpu_only and v.linkers:
        found = "/".join(map(str, sorted(v.linker_majors)))
        out.warn(
            f"torch {v.torch_version} is CPU-only, yet {objects(len(v.linkers), 'link')} CUDA {found}: "
            "they cannot run with this torch",
            "install a CUDA build of torch (cu130) or uninstall the CUDA packages",
            f"torch {v.torch_version} is CPU-only, yet {count(len(v.linkers), 'module')} link CUDA {found}",
            "install a CUDA torch (cu130) or uninstall them", code="G1.cpu-torch-cuda-modules")


def nothing_to_check(v: View) -> Result | None:
    scanned = v.scan.files
    no_torch = v.absent or (not v.torch_version and not v.torch_dist)
    if not ((no_torch or (v.cpu_only and not v.gpu_seen)) and not v.linkers):
        return None
    what = "torch is not installed" if no_torch else f"torch {v.torch_version} is CPU-only and there is no NVIDIA GPU"
    return Result(
        "G1", Status.SKIP,
        f"{what}, and none of the {scanned} shared objects scanned links a CUDA runtime: no CUDA ABI to check",
        headline=f"{what}; no CUDA module among {scanned} shared objects", codes=["G1.nothing-to-check"])


def verdict(v: View, out: Findings, kernel: str, loaded: int) -> Result:
    """PASS (or WARN) with what was verified, in one line."""
    body, head, found = _body(v, kernel, loaded)
    n = len(v.linkers)
    if out.warnings:
        texts = [s for s, _ in out.warnings]
        fix = "; ".join(dict.fromkeys(x for _, x in out.warnings[:2]))
        # the warnings past two: counted in the line, listed in the details
        result = Result("G1", Status.WARN, f"{first_n(texts, 2)}; {body}", fix, list(out.readings),
                        details=[*texts[2:], *out.details], codes=out.codes_of())
        return shortened(out, result)
    short = f"{f'torch {v.torch_version or v.torch_dist}' if v.ref_from == 'torch' else head} on driver CUDA "
    short += f"{v.driver_text or '?'}"
    short += f", {count(n, 'CUDA module')} on CUDA {found}" if n else ""
    short += ", kernel ok" if kernel == "ok" else ""
    return Result("G1", Status.PASS, body, readings=list(out.readings), details=list(out.details), headline=short)


def _body(v: View, kernel: str, loaded: int) -> tuple[str, str, str]:
    """The line of what was verified, its head (torch) and the modules' majors."""
    f, n = v.f, len(v.linkers)
    found = "/".join(map(str, sorted(v.linker_majors))) or "?"
    if v.cpu_only:
        consistent = ""  # said in the warning
    elif n:
        consistent = (f"the one CUDA-linked shared object uses CUDA {found}" if n == 1
                      else f"all {n} CUDA-linked shared objects use CUDA {found}")
    else:
        consistent = "no extension module links a CUDA runtime"
    picks = [f"{i.owner.split(' ', 1)[0]} picks its CUDA {version(i.chosen)} build of {len(i.tags)}"
             for i in v.variants.values() if i.chosen is not None]
    driver = f"driver supports CUDA {v.driver_text}" if v.driver_text else "driver CUDA version unknown"
    on = f.gpus[0] if f.gpus else f.torch.device_name or "the GPU"
    kernel_text = {"ok": f"tiny kernel ran on {on}", "not run": "no kernel run (no CUDA device)", "failed": ""}[kernel]
    loads = f"{count(loaded, 'extension object')} loaded" if loaded else ""
    head = (v.ref_text if v.ref_from == "torch" else f"torch {v.torch_version} (CPU-only)" if v.cpu_only
            else "torch not installed")
    scanned = f"{v.scan.files} shared objects scanned"
    body = "; ".join(x for x in (f"{head}, {driver}", consistent, *picks, kernel_text, loads, scanned) if x)
    return body, head, found


def shortened(out: Findings, result: Result) -> Result:
    """Fill the short line from the first problem's (or warning's) headline."""
    head, short = out.first_short()
    if head:
        result.headline, result.short_fix = head, short
    return result
