"""G7 (issue 22, N1 and G7+): a real Triton compile for cuda 121 in a child, Python.h, and
what ``--spark-precision fp8`` implies on SM121 from the installed cuBLAS and vLLM.

Triton is a double on the checked interpreter's path (``tests/doubles/triton``) that speaks
Triton 3.5's compile interface over a real ptxas subprocess; the posted texts are
``tests/data/gb10/error_triton_ptxas_1.txt``, ``error_triton_pythonh_1.txt``,
``error_fp8_sm121_1.txt`` and ``dmesg_xid_4.txt``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import sysconfig
import time
from pathlib import Path

import pytest
from test_g07_nvfp4 import CUOBJDUMP, P, capture, decide, facts_of, gb10_facts

from pytest_dgx_spark.checks.g07_nvfp4 import check as g7
from pytest_dgx_spark.checks.g07_nvfp4 import facts as g7facts
from pytest_dgx_spark.checks.g07_nvfp4 import probe as g7probe
from pytest_dgx_spark.engine import Engine
from pytest_dgx_spark.model import Result, Status
from pytest_dgx_spark.probes.machine import PYTHON_PATH_ENV, Machine
from pytest_dgx_spark.settings import Settings

from doubles import elfkit, gb10, tritonkit

SM121A_FATAL = "ptxas fatal   : Value 'sm_121a' is not defined for option 'gpu-name'"


def triton_site(
    tmp_path: Path, release: str, name: str = "pytorch-triton", version: str = "3.5.0+git7416ffcb"
) -> Path:
    """A site-packages folder holding the triton double as ``name`` ``version`` with its
    bundled ``ptxas`` of CUDA ``release``."""
    site = tmp_path / "site-packages"
    tritonkit.install(site, name, version, {"ptxas": release}, tmp_path / "ptxas.log")
    return site


def run(
    doubles,
    tmp_path: Path,
    site: Path,
    *,
    nvml: dict | None = None,
    env: dict | None = None,
    precision: str | None = None,
    timeout: float = 5,
) -> Result:
    doubles.nvml(nvml or gb10.nvml()).torch(gb10.torch())
    doubles.pythonpath.append(str(site))
    doubles.extra.update(env or {})
    machine = Machine(env=doubles.env, timeout=timeout)
    return Engine(Settings(only=("G7",), precision=precision), machine).run("G7")


# ---------------------------------------------------------------------- N1 through the machine


def test_bundled_ptxas_12_8_fails_the_real_compile(isolated, doubles, tmp_path: Path) -> None:
    """error_triton_ptxas_1.txt (triton #8539): pytorch-triton 3.5.0's bundled ptxas rejects
    sm_121a with ``PTXASError: PTXAS error: Internal Triton PTX codegen error``; the compile
    child gets that error from the ptxas Triton really runs, and G7 FAILs with the fix."""
    text = capture("error_triton_ptxas_1.txt")
    assert "PTXASError: PTXAS error: Internal Triton PTX codegen error" in text and SM121A_FATAL in text
    user_cache = tmp_path / "home-cache"
    site = triton_site(tmp_path, "12.8")
    result = run(doubles, tmp_path, site, env={"HOME": str(tmp_path), "TRITON_CACHE_DIR": str(user_cache)})
    assert result.codes == ["G7.ptxas-rejects"], result.report_text()
    assert (
        "pytorch-triton 3.5.0+git7416ffcb could not compile a kernel for sm_121a: ptxas 12.8"
        in result.summary
    )
    assert (
        "ptxas fatal : Value 'sm_121a' is not defined for option 'gpu-name'" in result.summary
    )  # spaces folded
    assert result.short_line() == (
        "G7 FAIL: triton's ptxas rejects sm_121a (torch.compile); fix: export TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas"
    )
    assert result.reading("triton_sm121_compile").value == "ptxas rejects sm_121a"
    calls = (tmp_path / "ptxas.log").read_text()
    assert "--gpu-name=sm_121a" in calls, calls
    assert str(user_cache) not in calls and not user_cache.exists(), "the user's Triton cache was used"


def test_triton_ptxas_path_to_cuda_13_compiles(isolated, doubles, tmp_path: Path) -> None:
    """The posted fix (masahi, thewh1teagle in triton #8539): TRITON_PTXAS_PATH to CUDA 13's
    ptxas. The child honours it as Triton does; the compile passes and says which ptxas."""
    assert "export TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas" in capture("error_triton_ptxas_1.txt")
    cuda13 = tmp_path / "cuda" / "bin"
    cuda13.mkdir(parents=True)
    tritonkit.ptxas(cuda13 / "ptxas", "13.0", tmp_path / "ptxas.log")
    site = triton_site(tmp_path, "12.8")
    result = run(doubles, tmp_path, site, env={"TRITON_PTXAS_PATH": str(cuda13 / "ptxas")})
    assert result.status is Status.PASS, result.report_text()
    assert result.reading("triton_sm121_compile").value == "ok"
    assert any(
        d.startswith("pytorch-triton 3.5.0+git7416ffcb compiled a kernel for sm_121a in")
        and f"ptxas 13.0 ({cuda13 / 'ptxas'})" in d
        for d in result.details
    ), result.details
    assert "pytorch-triton 3.5.0+git7416ffcb compiles for sm_121a" in result.summary
    assert f"{cuda13 / 'ptxas'} -lineinfo -v --gpu-name=sm_121a" in (tmp_path / "ptxas.log").read_text()


def test_a_hanging_compile_is_a_line_not_a_verdict(isolated, doubles, tmp_path: Path) -> None:
    site = triton_site(tmp_path, "13.0")
    started = time.monotonic()
    result = run(doubles, tmp_path, site, env={"SPARK_FAKE_TRITON": json.dumps({"sleep": 60})}, timeout=1)
    assert time.monotonic() - started < 20
    assert result.status is Status.PASS, result.report_text()  # the ptxas release (13.0) still reads healthy
    line = next(d for d in result.details if "no compile for sm_121a" in d)
    assert "the Triton compile child made no progress" in line and "compile for cuda 121" in line, line
    assert result.reading("triton_sm121_compile") is None


def test_a_crashing_compile_falls_back_to_the_ptxas_release(isolated, doubles, tmp_path: Path) -> None:
    site = triton_site(tmp_path, "12.8")
    result = run(doubles, tmp_path, site, env={"SPARK_FAKE_TRITON": json.dumps({"abort": True})})
    assert result.codes == ["G7.triton-ptxas-old"], result.report_text()  # the release rule decides, as before
    assert "ptxas 12.8 (< 12.9), which rejects sm_121a" in result.summary
    assert any("the Triton compile child was killed by SIGABRT" in d for d in result.details), result.details


def test_triton_not_importable_is_a_detail(isolated, doubles, tmp_path: Path) -> None:
    site = triton_site(tmp_path, "13.0")
    (site / "triton" / "__init__.py").write_text(
        "raise ImportError('libtriton.so: cannot open shared object file')\n"
    )
    result = run(doubles, tmp_path, site)
    assert result.status is Status.PASS, result.report_text()
    assert any(
        "installed but not importable in the checked Python (ImportError: libtriton.so" in d
        for d in result.details
    )


def test_no_triton_installed_compiles_nothing(isolated, doubles, tmp_path: Path) -> None:
    result = run(doubles, tmp_path, tmp_path / "empty-site")
    assert result.status is Status.PASS, result.report_text()
    assert result.reading("triton_sm121_compile") is None
    assert not any("Triton" in d or "triton" in d for d in result.details)


def test_h200_compiles_for_121_and_still_skips(isolated, doubles, tmp_path: Path) -> None:
    """Another GPU (the H200's NVML): G7 stays SKIP, and says what this Triton does for sm_121a."""
    site = triton_site(tmp_path, "12.8")
    result = run(
        doubles, tmp_path, site, nvml=gb10.nvml(device={"name": "NVIDIA H200", "capability": [9, 0]})
    )
    assert result.codes == ["G7.not-sm121"], result.report_text()
    assert result.reading("triton_sm121_compile").value == "ptxas rejects sm_121a"
    assert any(
        d.startswith("on a Spark: pytorch-triton 3.5.0+git7416ffcb could not compile") for d in result.details
    )


def test_python_h_reading_is_the_checked_interpreters(isolated, doubles, tmp_path: Path) -> None:
    """The child reads ``sysconfig.get_paths()['include']`` of the checked Python (here: this one),
    then gcc's ``CPATH``: where ``#include <Python.h>`` resolves in Triton's launcher build."""
    site = triton_site(tmp_path, "13.0")
    result = run(doubles, tmp_path, site, env={"CPATH": "", "C_INCLUDE_PATH": ""})
    include = sysconfig.get_paths()["include"]
    found = (Path(include) / "Python.h").is_file()
    assert result.reading("python_h").value == ("found" if found else "missing"), result.report_text()
    headers = tmp_path / "headers"
    headers.mkdir()
    (headers / "Python.h").write_text("/* planted */\n")
    doubles.extra["CPATH"] = str(headers)
    engine = Engine(Settings(only=("G7",)), Machine(env=doubles.env, timeout=5))
    assert engine.run("G7").reading("python_h").value == "found"
    facts = engine.facts("G7")["facts"]["triton_compile"]
    assert facts["python_h_dir"] == (include if found else str(headers))


# ---------------------------------------------------------------------- N1 on recorded facts


def compile_facts(**tc) -> g7.Facts:
    base = {
        "dist": "triton 3.6.0",
        "version": "3.6.0",
        "ptxas": "/site/triton/backends/nvidia/bin/ptxas",
        "ptxas_version": "12.9",
        "python_include": "/usr/include/python3.12",
        "python_h": True,
    }
    return gb10_facts(triton_compile={**base, **tc})


def test_python_h_missing_fails_with_torch_2_14() -> None:
    """error_triton_pythonh_1.txt: pip torch 2.14 on a Spark, the first backward pass dies in
    Triton's ``driver.c`` build; fix ``apt install python3.12-dev`` or TORCH_DISABLE_NATIVE_JIT=1."""
    text = capture("error_triton_pythonh_1.txt")
    assert "fatal error: Python.h: No such file or directory" in text
    assert "sudo apt install python3.12-dev" in text and "TORCH_DISABLE_NATIVE_JIT=1" in text
    facts = compile_facts(ok=True, python_h=False, seconds=0.8)
    facts.torch_version = "2.14.0+cu130"
    result = decide(facts)
    assert (result.status, result.codes) == (Status.FAIL, ["G7.python-h-missing"]), result.line()
    assert "no Python.h in /usr/include/python3.12" in result.summary  # where it looked
    assert (
        "torch 2.14.0+cu130 runs backward ops through Triton, so the first backward pass dies"
        in result.summary
    )
    assert result.fix.startswith(
        "sudo apt install python3.12-dev (the CPython headers), or export TORCH_DISABLE_NATIVE_JIT=1"
    )
    assert (
        result.short_line()
        == "G7 FAIL: no Python.h: Triton cannot build its launcher; fix: apt install python3.12-dev"
    )
    facts.native_jit = "1"  # the posted workaround: the backward pass no longer needs Triton
    assert (decide(facts).status, decide(facts).code) == (Status.WARN, "G7.python-h-missing")
    facts.native_jit, facts.torch_version = None, "2.11.0+cu130"
    assert (decide(facts).status, decide(facts).code) == (Status.WARN, "G7.python-h-missing")  # torch.compile only


def test_compile_outcomes_on_recorded_facts() -> None:
    error = (
        "PTXAS error: Internal Triton PTX codegen error\n`ptxas` stderr:\n" + SM121A_FATAL + "\n\n"
        "Repro command: /site/triton/backends/nvidia/bin/ptxas -lineinfo -v --gpu-name=sm_121a /tmp/x.ptx -o /tmp/x.ptx.o\n"
    )
    failed = decide(compile_facts(ok=False, error_type="triton.runtime.errors.PTXASError", error=error))
    assert failed.codes == ["G7.ptxas-rejects"] and "Value 'sm_121a' is not defined" in failed.summary  # ptxas' line
    assert failed.fix.startswith("export TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas")
    blackwell = compile_facts(
        ok=False,
        error_type="triton.runtime.errors.PTXASError",
        error=error,
        ptxas="/site/triton/backends/nvidia/bin/ptxas-blackwell",
    )
    assert decide(blackwell).short_fix == "export TRITON_PTXAS_BLACKWELL_PATH=/usr/local/cuda/bin/ptxas"
    ok = decide(compile_facts(ok=True, seconds=1.2))
    assert ok.codes == [] and ok.status is Status.PASS and ok.reading("triton_sm121_compile").value == "ok"
    # a Python error from the compile call is this check's API guess, not Triton's answer
    api = decide(
        compile_facts(ok=False, error_type="builtins.TypeError", error="unexpected keyword 'target'")
    )
    assert (api.status, api.codes) == (Status.PASS, [])
    assert any("(not decided: an API this check does not know)" in d for d in api.details)
    other = decide(
        compile_facts(ok=False, error_type="triton.compiler.errors.CompilationError", error="at 1:4")
    )
    assert other.codes == ["G7.triton-compile-failed"] and other.short_fix == "pip install -U torch triton"


def test_a_passing_compile_overrides_the_release_rule() -> None:
    """A compile that passed is what Triton does; a release below the floor is then a reading."""
    facts = compile_facts(ok=True, seconds=1.0)
    facts.triton = g7facts.TritonPtxas(dist="triton 3.6.0", binary="ptxas", path="/x/ptxas", env=None, release=[12, 8])
    result = decide(facts)
    assert (result.status, result.codes) == (Status.PASS, []), result.line()
    assert result.reading("triton_ptxas_release").value == "12.8"


# ---------------------------------------------------------------------- G7+: FP8 on SM121


def fp8_facts(cublas: list[int] | None, vllm_targets: list[str] | None = None) -> g7.Facts:
    facts = gb10_facts(cublas={"source": "nvidia-cublas 13.1.0.3", "release": cublas} if cublas else None)
    if vllm_targets is not None:
        facts.vllm = "0.11.0"
        facts.libs_installed = ["vllm"]
        facts.libs = [g7facts.Lib(dist="vllm 0.11.0", path="/site/vllm/_C.abi3.so", targets=vllm_targets)]
    return facts


def test_fp8_with_an_old_cublas_warns_tn_only() -> None:
    """FIELD F11 / pytorch PR #198188, #192707: block-scaled FP8 is TN-only on cc 12.x before
    cuBLAS 13.6, the dgrad/wgrad GEMMs of training fail (CUBLAS_STATUS_NOT_SUPPORTED)."""
    fp8 = P.replace(options={"precision": "fp8"})
    result = decide(fp8_facts([13, 1]), fp8)
    assert (result.status, result.codes) == (Status.WARN, ["G7.fp8-cublas-tn-only"]), result.line()
    assert "cuBLAS 13.1 (nvidia-cublas 13.1.0.3)" in result.summary  # the release and where it was read
    assert "CUBLAS_STATUS_NOT_SUPPORTED" in result.summary  # the error the user will see
    assert result.short_fix == g7.FP8_TRAIN_SHORT
    assert decide(fp8_facts([13, 6]), fp8).codes == []
    assert decide(fp8_facts([13, 1])).codes == []  # no precision given: a note, no verdict
    assert (
        decide(fp8_facts([13, 6]), fp8.replace(thresholds={"g7_cublas_fp8_min": 13.7})).code == "G7.fp8-cublas-tn-only"
    )
    unknown = decide(fp8_facts(None), fp8)
    assert (unknown.status, unknown.codes) == (Status.PASS, [])
    assert any(d.startswith("cuBLAS version not found") for d in unknown.details)


def test_fp8_smem_note_quotes_the_posted_limit() -> None:
    """dmesg_xid_4.txt: SM12x's 99 KiB budget (``102400 bytes required but device supports 101376``)."""
    assert "102400 bytes required but device supports 101376" in capture("dmesg_xid_4.txt")
    result = decide(fp8_facts([13, 6]), P.replace(options={"precision": "fp8"}))
    assert any("'102400 bytes required but device supports 101376'" in d for d in result.details)


def test_vllm_fp8_kernels_on_121() -> None:
    """error_fp8_sm121_1.txt: a vLLM built with 12.1f traps in ``enable_sm120_only`` ("This kernel
    only supports sm120."), its sm_120 build runs; one without any 12.x cubin has no FP8 kernel."""
    text = capture("error_fp8_sm121_1.txt")
    assert "This kernel only supports sm120." in text and "enable_sm120_only" in text
    fp8 = P.replace(options={"precision": "fp8"})
    built_121 = decide(fp8_facts([13, 6], ["sm_90a", "sm_120a", "sm_121a"]), fp8)
    assert any(
        "carries sm_121a cubins" in d and "This kernel only supports sm120." in d for d in built_121.details
    )
    none = decide(fp8_facts([13, 6], ["sm_90a", "sm_100a"]), fp8)
    assert none.codes == ["G7.vllm-no-fp8-kernel"], none.line()
    assert none.short_line().startswith("G7 WARN: vllm 0.11.0 has no FP8 kernel for SM121")
    assert none.reading("vllm_version").value == "0.11.0"


def test_cublas_from_the_wheel_and_the_toolkit(isolated, doubles, tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    info = site / "nvidia_cublas-13.1.0.3.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: nvidia-cublas\nVersion: 13.1.0.3\n")
    result = run(doubles, tmp_path, site, precision="fp8")
    assert result.codes == ["G7.fp8-cublas-tn-only"], result.report_text()
    assert result.reading("cublas_release").value == "13.1"
    toolkit = tmp_path / "cuda" / "lib64"
    toolkit.mkdir(parents=True)
    for name in ("libcublasLt.so", "libcublasLt.so.13", "libcublasLt.so.13.6.0.1"):
        (toolkit / name).write_bytes(b"\x7fELF")
    assert g7probe.cublas(Machine(env={"CUDA_HOME": str(tmp_path / "cuda")}), {}) == g7facts.Cublas(
        source=str(toolkit / "libcublasLt.so.13.6.0.1"), release=[13, 6]
    )


def test_fp8_findings_do_not_apply_off_sm12x() -> None:
    facts = facts_of(
        devices=[{"name": "NVIDIA H200", "capability": [9, 0]}],
        triton_compile={"dist": "triton 3.5.0", "ok": True, "seconds": 1.0, "python_h": True},
    )
    result = decide(facts, P.replace(options={"precision": "fp8"}))
    assert (result.status, result.codes) == (Status.SKIP, ["G7.not-sm121"])
    assert "the FP8 and NVFP4 findings are SM12x's: they do not apply here" in result.details
    plain = decide(g7.Facts(devices=facts.devices), P.replace(options={"precision": "fp8"}))
    assert "the FP8 and NVFP4 findings are SM12x's: they do not apply here" in plain.details
    assert not decide(g7.Facts(devices=facts.devices)).details  # nothing planned, nothing compiled


def test_vllm_kernels_through_the_machine_with_fp8(kit, isolated, doubles, tmp_path: Path) -> None:
    """vLLM's cubins as cuobjdump lists them: sm_90a and sm_120a (arch-specific, so neither loads
    on 12.1) give its FP8 GEMMs nothing to run on SM121 under --spark-precision fp8."""
    site = tmp_path / "site-packages"
    elfkit.install(site, "vllm", "0.11.0", {"vllm/_C.abi3.so": kit.ext13})
    doubles.tool("cuobjdump", CUOBJDUMP.format(log=tmp_path / "cuobjdump.log", extra=""))
    result = run(doubles, tmp_path, site, precision="fp8")
    assert "G7.vllm-no-fp8-kernel" in result.codes, result.report_text()
    assert result.reading("vllm_version").value == "0.11.0"
    assert "vllm 0.11.0 has no cubin that runs on SM121 (sm_90a, sm_120a)" in result.summary


def test_vllm_with_sm_120_cubins_runs_fp8(kit, isolated, doubles, tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    elfkit.install(site, "vllm", "0.11.0", {"vllm/_C.abi3.so": kit.ext13})
    extra = "ELF file    3: _C.abi3.3.sm_120.cubin\\n"
    doubles.tool("cuobjdump", CUOBJDUMP.format(log=tmp_path / "cuobjdump.log", extra=extra))
    result = run(doubles, tmp_path, site, precision="fp8")
    assert "vllm 0.11.0: FP8 kernels run through its sm_120 cubins" in result.details, result.report_text()


# ---------------------------------------------------------------------- real Triton, where installed


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="real Triton is not importable here")
def test_real_triton_compiles_for_121(tmp_path: Path) -> None:
    """On a machine with Triton (the GPU image), the child compiles for real for cuda 121: an
    outcome (compiled, or a Triton/ptxas error), within a few seconds, and never this
    check's API guess failing."""
    # this interpreter's packages are what is tested here (the suite's default hides them)
    here = os.pathsep.join(p for p in sys.path if p)
    env = {**os.environ, PYTHON_PATH_ENV: here, "PYTHONPATH": here}
    machine = Machine(env=env, timeout=30)

    class Ctx:
        pass

    ctx = Ctx()
    ctx.machine = machine  # type: ignore[attr-defined]
    started = time.monotonic()
    tc = g7probe.triton_compile(ctx)  # type: ignore[arg-type]
    took = time.monotonic() - started
    assert tc is not None, "triton importable but no triton distribution listed"
    print(json.dumps({**tc.to_dict(), "took_s": round(took, 2)}, indent=1))
    assert tc.import_error is None and tc.api_error is None and tc.child is None, tc
    assert tc.ok is not None, tc
    if not tc.ok:
        assert (tc.error_type or "").startswith("triton."), tc
    assert took < 60


def test_a_capture_before_these_facts_replays_the_old_rules() -> None:
    """The recorded captures (tests/data/captures/) predate the compile and FP8 facts: they
    replay as before (``Facts.ADDED``), while a capture lacking an older fact still SKIPs."""
    from pytest_dgx_spark.capture import facts_mismatch

    old = {k: v for k, v in gb10_facts().to_dict().items() if k not in g7.Facts.ADDED}
    assert facts_mismatch("G7", g7.Facts, old, {}) is None
    assert decide(g7.Facts.from_dict(old)).status is Status.PASS
    del old["triton"]
    skipped = facts_mismatch("G7", g7.Facts, old, {})
    assert skipped is not None and "lack 'triton'" in skipped.summary


TRITON_DATA = Path(__file__).parent / "data" / "triton"


@pytest.mark.parametrize(
    ("name", "status", "short"),
    [
        (
            "triton320",
            Status.FAIL,
            "triton's ptxas rejects sm_121 (torch.compile); fix: pip install -U torch triton (3.5+)",
        ),
        (
            "triton331",
            Status.FAIL,
            "triton's ptxas rejects sm_121a (torch.compile); fix: pip install -U torch triton (3.5+)",
        ),
        (
            "triton340",
            Status.FAIL,
            "triton's ptxas rejects sm_121a (torch.compile); fix: pip install -U torch triton (3.5+)",
        ),
        (
            "triton340_cuda13_ptxas",
            Status.FAIL,
            "triton 3.4.0 refuses CUDA 13's ptxas; fix: pip install -U torch triton (3.5+)",
        ),
        (
            "triton350",
            Status.FAIL,
            "triton's ptxas rejects sm_121a (torch.compile); fix: export TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas",
        ),
        ("triton350_cuda13_ptxas", Status.PASS, ""),
        ("triton360", Status.PASS, ""),
        ("triton390", Status.PASS, ""),
    ],
)
def test_real_triton_compiles_recorded(name: str, status: Status, short: str) -> None:
    """tests/data/triton/: the compile child run with Triton 3.2.0-3.9.0 from PyPI (no GPU): 3.2-3.5
    bundle a ptxas (12.4/12.8) that rejects SM121, as triton #8539 posted; 3.5 takes the posted fix
    (TRITON_PTXAS_PATH to CUDA 13's ptxas) and 3.4 refuses it; 3.6 (ptxas-blackwell 12.9) and 3.9
    (13.4) compile. Each took about a second or two."""
    recorded = json.loads((TRITON_DATA / f"compile_sm121_{name}.json").read_text())
    assert recorded["took_s"] < 10
    result = decide(gb10_facts(triton_compile=recorded["facts"]))
    assert result.status is status, result.line()
    if short:
        assert result.short_line() == f"G7 FAIL: {short}"
    else:
        assert result.reading("triton_sm121_compile").value == "ok"


def test_the_compile_starts_beside_the_torch_import(isolated, doubles, tmp_path: Path) -> None:
    """engine.prefetch runs G7's ``prefetch`` in its own thread while the torch child imports:
    the compile child is in the store before G7's gather asks, and the verdict is the same."""
    site = triton_site(tmp_path, "12.8")
    doubles.nvml(gb10.nvml()).torch(gb10.torch())
    doubles.pythonpath.append(str(site))
    machine = Machine(env=doubles.env, timeout=5)
    engine = Engine(Settings(only=("G7",)), machine)
    engine.prefetch()
    names = [t.name for t in engine._threads]
    assert "spark-prefetch-probes" in names, names
    for t in engine._threads:
        t.join(20)
    assert machine.store.peek("triton:compile") is not None, "the compile did not run in the prefetch"
    result = engine.run("G7")
    engine.close()
    assert result.codes == ["G7.ptxas-rejects"], result.report_text()
    assert result.reading("triton_sm121_compile").value == "ptxas rejects sm_121a"
    assert (tmp_path / "ptxas.log").read_text().count("--gpu-name=sm_121a") == 1  # compiled once


def test_triton_3_6_compiles_with_its_ptxas_blackwell(isolated, doubles, tmp_path: Path) -> None:
    """compile_sm121_triton360.json: Triton 3.6.0 bundles ptxas 12.8 and ptxas-blackwell 12.9 and
    compiles sm >= 100 with the latter, so sm_121a compiles; the double does the same."""
    recorded = json.loads((TRITON_DATA / "compile_sm121_triton360.json").read_text())["facts"]
    assert (
        recorded["ok"]
        and recorded["ptxas"].endswith("ptxas-blackwell")
        and recorded["ptxas_version"] == "12.9"
    )
    site = tmp_path / "site-packages"
    tritonkit.install(
        site, "triton", "3.6.0", {"ptxas": "12.8", "ptxas-blackwell": "12.9"}, tmp_path / "ptxas.log"
    )
    result = run(doubles, tmp_path, site)
    assert result.status is Status.PASS, result.report_text()
    assert result.reading("triton_sm121_compile").value == "ok"
    assert "ptxas-blackwell -lineinfo -v --gpu-name=sm_121a" in (tmp_path / "ptxas.log").read_text()
