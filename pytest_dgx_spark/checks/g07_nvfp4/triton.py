"""G7's Triton stages (issue 22, N1): the compile of one kernel for capability 121 decides where it
ran (ptxas rejecting ``sm_121a``, a Triton that refuses CUDA 13's ptxas, no ``Python.h`` for its
launcher); else the release of the ptxas Triton would run (triton #8539). Pure: facts in, findings out."""

from __future__ import annotations

import re

from pytest_dgx_spark.checks.g07_nvfp4.arch import release_floor, version_tuple
from pytest_dgx_spark.checks.g07_nvfp4.facts import Facts, TritonCompile
from pytest_dgx_spark.checks.kit import Findings
from pytest_dgx_spark.model import Status

#: ptxas's line when it does not know GB10's target (triton #8539, #9181; vllm #29469)
_REJECTED = re.compile(r"Value '(sm_\d+[a-z]?)' is not defined for option 'gpu-name'")
#: what Triton 3.2-3.4 say when pointed at CUDA 13's ptxas; 3.5 is the first that runs it
TRITON_OLD_CUDA = "Triton only support CUDA 10.0 or higher"
TRITON_RUNS_CUDA13_PTXAS = (3, 5)
#: torch whose ``_native`` ops run backward through Triton (error_triton_pythonh_1.txt)
NATIVE_TRITON_TORCH = (2, 14)


def _env_name(blackwell: bool) -> str:
    """Triton 3.6+ compiles sm >= 100 with ``ptxas-blackwell``, overridden by its own variable."""
    return "TRITON_PTXAS_BLACKWELL_PATH" if blackwell else "TRITON_PTXAS_PATH"


def triton_stage(f: Facts, floor: float, out: Findings, compiled: bool = False) -> str:
    """Triton's ptxas for SM121 must know ``sm_121a`` (triton #8539); where the compile child
    compiled for 121 (``compiled``), its outcome decides and the release is a reading."""
    t = f.triton
    if t is None:
        return ""
    if t.error or not t.release:
        out.note(f"{t.dist}: {t.error or 'ptxas release unknown'}")
        return ""
    release = tuple(t.release)
    shown = f"{release[0]}.{release[1]}"
    out.read("triton_ptxas_release", shown)
    where = f"{t.env}={t.path}" if t.env else f"its bundled {t.binary}"
    if compiled:
        out.note(f"{t.dist} ptxas {shown} ({where}); the compile for sm_121a decided")
        return ""
    if release >= release_floor(floor):
        out.note(f"{t.dist} compiles SM121 kernels with ptxas {shown} ({where})")
        return f"{t.dist} ptxas {shown}"
    export = f"export {t.env or _env_name(t.binary == 'ptxas-blackwell')}=/usr/local/cuda/bin/ptxas"
    out.warn(f"{t.dist} compiles SM121 kernels with {where}, ptxas {shown} (< {floor:g}), which rejects "
             "sm_121a (\"Value 'sm_121a' is not defined for option 'gpu-name'\"): torch.compile and Triton "
             "kernels fail", f"{export} (CUDA 13's ptxas; triton #8539)",
             headline=f"triton ptxas {shown} rejects sm_121a (torch.compile)", short_fix=export,
             code="G7.triton-ptxas-old")
    return ""


def _ptxas_fix(f: Facts, tc: TritonCompile) -> tuple[str, str]:
    """``(fix, short fix)`` for a ptxas that does not know SM121: CUDA 13's ptxas, where this
    Triton can run it; Triton before 3.5 cannot (tests/data/triton/), so upgrade it first."""
    version = version_tuple(tc.version or "")
    if version and version < TRITON_RUNS_CUDA13_PTXAS:
        return (
            "upgrade to Triton 3.5 or newer with the torch that pins it (pip install -U torch triton): "
            f"triton {tc.version} refuses CUDA 13's ptxas ('{TRITON_OLD_CUDA}'), and 3.6 or newer "
            "bundles a ptxas that knows sm_121a",
            "pip install -U torch triton (3.5+)",
        )
    t = f.triton
    blackwell = (t is not None and t.binary == "ptxas-blackwell") or (tc.ptxas or "").endswith("ptxas-blackwell")
    export = f"export {(t.env if t else None) or _env_name(blackwell)}=/usr/local/cuda/bin/ptxas"
    return f"{export} (CUDA 13's ptxas knows sm_121a; triton #8539, #9181, vllm #29469)", export


def _key_line(text: str) -> str:
    """The line of an error that says what went wrong: ptxas's ``fatal`` line, else the first."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return ([line for line in lines if "fatal" in line] or lines or ["no message"])[0][:240]


def _ptxas_text(tc: TritonCompile) -> str:
    return f"ptxas {tc.ptxas_version or '?'} ({tc.ptxas or 'path unknown'})"


def _compile_failed(f: Facts, tc: TritonCompile, on_spark: bool, out: Findings) -> None:
    """The compile for 121 raised: ptxas's rejection (``PTXASError``; a ``RuntimeError`` with
    ptxas's stderr before Triton 3.3) or a Triton that refuses CUDA 13's ptxas FAILs; another
    Triton error WARNs; a Python error (an API this check does not know) is a note."""
    kind, dist = tc.error_type or "?", tc.dist or "triton"
    short, error = kind.rsplit(".", 1)[-1], tc.error or ""
    fix, short_fix = _ptxas_fix(f, tc)
    rejected = _REJECTED.search(error)
    if rejected or short == "PTXASError" or "`ptxas` stderr" in error or TRITON_OLD_CUDA in error:
        if TRITON_OLD_CUDA in error:
            what, headline = "is refused by Triton", f"{dist} refuses CUDA 13's ptxas"
            reading = "Triton refuses its ptxas"
        else:
            what = f"rejects {rejected.group(1)}" if rejected else "failed"
            headline, reading = f"triton's ptxas {what} (torch.compile)", f"ptxas {what}"
        text = (
            f"{dist} could not compile a kernel for sm_121a: {_ptxas_text(tc)} {what} "
            f"({_key_line(error)}): Triton kernels and torch.compile fail on the GB10"
        )
        out.note(f"{short}: " + " | ".join(x.strip() for x in error.splitlines() if x.strip())[:600])
        out.read("triton_sm121_compile", reading)
        if on_spark:
            out.fail(text, fix, headline=headline, short_fix=short_fix, code="G7.ptxas-rejects")
        else:
            out.note(f"on a Spark: {text}; fix: {fix}")
        return
    out.read("triton_sm121_compile", f"failed ({short})")
    if not kind.startswith("triton.") or not on_spark:
        unknown = " (not decided: an API this check does not know)" if not kind.startswith("triton.") else ""
        out.note(f"{dist}: compiling a kernel for sm_121a raised {short}: {_key_line(error)}{unknown}")
        return
    out.warn(f"{dist} could not compile a trivial kernel for sm_121a with {_ptxas_text(tc)}: {short}: "
             f"{_key_line(error)}", f"upgrade Triton (pip install -U torch triton), or {fix}",
             headline=f"triton cannot compile for sm_121a ({short})", short_fix="pip install -U torch triton",
             code="G7.triton-compile-failed")


def _python_h(f: Facts, tc: TritonCompile, on_spark: bool, out: Findings) -> None:
    """Triton builds its launcher (``driver.c``) with the C compiler and CPython's headers on
    first use: without ``Python.h`` every Triton kernel fails, and torch 2.14's ``_native`` ops
    run the first backward pass through Triton (error_triton_pythonh_1.txt)."""
    if tc.python_h is None:
        return
    out.read("python_h", "found" if tc.python_h else "missing")
    if tc.python_h:
        return
    include = tc.python_include or "?"
    m = re.search(r"python(3\.\d+)", include)
    package = f"python{m.group(1)}-dev" if m else "python3-dev"
    torch_version = f.torch_version or f.torch_dist or ""
    native = version_tuple(torch_version) >= NATIVE_TRITON_TORCH and (f.native_jit or "") != "1"
    text = (
        f"no Python.h in {include}: Triton compiles its launcher (driver.c) with the C compiler on first use "
        "and stops at 'fatal error: Python.h: No such file or directory'"
    )
    if native:
        text += f"; torch {torch_version} runs backward ops through Triton, so the first backward pass dies"
    fix = (
        f"sudo apt install {package} (the CPython headers), or export TORCH_DISABLE_NATIVE_JIT=1 (eager ops)"
    )
    if not on_spark:
        out.note(f"{text}; fix: {fix}")
        return
    out.flag(Status.FAIL if native else Status.WARN, text, fix,
             headline="no Python.h: Triton cannot build its launcher", short_fix=f"apt install {package}",
             code="G7.python-h-missing")


def compile_stage(f: Facts, on_spark: bool, out: Findings) -> tuple[str, bool]:
    """``(text, decided)``: the compile of one Triton kernel for cuda 121 (N1); ``decided`` when
    it ran to an outcome (then the ptxas release is only a reading)."""
    tc = f.triton_compile
    if tc is None:
        return "", False
    dist = tc.dist or "triton"
    if tc.import_error:
        why = tc.import_error
        out.note(f"{dist} installed but not importable in the checked Python ({why}): nothing compiled")
        return "", False
    _python_h(f, tc, on_spark, out)
    if tc.ok is None:
        why = tc.api_error or tc.child or "the child gave no outcome"
        out.note(f"{dist}: no compile for sm_121a ({why})")
        return "", False
    if tc.child:
        out.note(tc.child)
    if not tc.ok:
        _compile_failed(f, tc, on_spark, out)
        return "", True
    out.read("triton_sm121_compile", "ok")
    seconds = "?" if tc.seconds is None else tc.seconds
    out.note(f"{dist} compiled a kernel for sm_121a in {seconds} s with {_ptxas_text(tc)}, not launched")
    return f"{dist} compiles for sm_121a", True
