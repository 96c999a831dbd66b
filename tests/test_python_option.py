"""``--python PATH`` (issue 33 item 1): G1, G2, G7 and G9 judge another interpreter's packages and run
the torch child with it. A real second venv (``python -m venv --without-pip``) holds a planted torch
2.5.0+cu124 (CUDA 12); the tool's own environment has none."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_dgx_spark import capture
from pytest_dgx_spark.engine import Engine
from pytest_dgx_spark.model import Status
from pytest_dgx_spark.probes.machine import Machine
from pytest_dgx_spark.settings import Settings

from conftest import DOUBLES, make_root
from conftest import spark_cli as cli
from doubles import gb10

TORCH_VERSION = "2.5.0+cu124"


def make_venv(base: Path) -> tuple[Path, Path]:
    """A real venv without pip, and its site-packages."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(base)], check=True, timeout=120)
    python = base / "bin" / "python"
    out = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True, timeout=60)  # fmt: skip
    return python, Path(out.stdout.strip())


def plant_torch(site: Path, scenario: Path) -> None:
    """torch 2.5.0+cu124 as a wheel installs it: the package (the torch double, so the child can import
    it), ``torch/version.py`` and ``torch-2.5.0+cu124.dist-info`` with METADATA and RECORD."""
    pkg = site / "torch"
    shutil.copytree(DOUBLES / "torch" / "torch", pkg)
    (pkg / "version.py").write_text(f"__version__ = '{TORCH_VERSION}'\ncuda = '12.4'\n")
    info = site / f"torch-{TORCH_VERSION}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {TORCH_VERSION}\n\n")
    (info / "RECORD").write_text("torch/__init__.py,,\ntorch/version.py,,\n")
    scenario.write_text(json.dumps(gb10.torch(version=TORCH_VERSION, cuda="12.4")))


@pytest.fixture(scope="module")
def job_venv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """``(the venv's python, the torch double's scenario file)``."""
    base = tmp_path_factory.mktemp("job")
    python, site = make_venv(base / "venv")
    scenario = base / "torch.json"
    plant_torch(site, scenario)
    return python, scenario


@pytest.fixture
def gb10_doubles(doubles, tmp_path: Path):
    """A GB10 through the NVML double and a planted root; no torch for the tool's own interpreter."""
    doubles.nvml(gb10.nvml())
    root = make_root(tmp_path / "root", {"proc/meminfo": gb10.meminfo(), **gb10.stack_files()})
    doubles.extra.update({"SPARK_PREFLIGHT_HOST_ROOT": str(root), "SPARK_PREFLIGHT_PYTHON_PATH": "",
                          "LD_LIBRARY_PATH": ""})  # fmt: skip
    return doubles


def run(check: str, machine: Machine, python: str | None) -> object:
    return Engine(Settings(only=(check,), profile="gb10", python=python), machine).run(check)


def test_g1_fails_on_the_judged_venvs_cuda12_torch_while_ours_has_none(job_venv, gb10_doubles, tmp_path) -> None:
    """The tool's own environment: a bare venv runs its children (a GPU image's interpreter has a torch)
    and its package scan reads only what the test plants (``SPARK_PREFLIGHT_PYTHON_PATH`` empty)."""
    python, scenario = job_venv
    bare, _ = make_venv(tmp_path / "tool")
    gb10_doubles.extra["SPARK_FAKE_TORCH"] = str(scenario)
    ours = run("G1", Machine(env=gb10_doubles.env, timeout=10.0, python=str(bare)), None)
    assert ours.status is Status.SKIP, ours.report_text()
    assert "torch is not installed" in ours.summary
    machine = Machine(env=gb10_doubles.env, timeout=10.0, python=str(bare), judged=str(python))
    result = run("G1", machine, str(python))
    assert result.status is Status.FAIL, result.report_text()
    assert result.summary.startswith(f"python {python}: torch {TORCH_VERSION} is built for CUDA 12.4")
    assert result.short_line().startswith("G1 FAIL: venv/bin/python: torch 2.5.0+cu124")
    # the judged interpreter listed its own packages and its own sys.path
    found = machine.interpreter()
    assert found["ok"] and found["executable"] == str(python)
    assert found["dists"]["torch"]["version"] == TORCH_VERSION
    assert any(p.endswith("site-packages") and str(python.parent.parent) in p for p in machine.python_path())
    assert machine.torch({}).data["torch_version"] == TORCH_VERSION


def test_g2_g7_g9_name_the_judged_interpreter(job_venv, gb10_doubles) -> None:
    python, scenario = job_venv
    gb10_doubles.extra["SPARK_FAKE_TORCH"] = str(scenario)
    machine = Machine(env=gb10_doubles.env, timeout=10.0, judged=str(python))
    for check in ("G2", "G7", "G9"):
        result = run(check, machine, str(python))
        assert result.summary.startswith(f"python {python}: "), result.line()
    untouched = run("G3", machine, str(python))
    assert "python" not in untouched.summary


def test_an_interpreter_that_cannot_list_its_packages_is_not_a_pass(job_venv, gb10_doubles, tmp_path) -> None:
    """It answered the option's probe, then hangs in the scan: a SKIP that says why, never a PASS."""
    python, _ = job_venv
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\ncase "$2" in *spark-python*) exec "{python}" "$@";; esac\nsleep 30\n')
    wrapper.chmod(0o755)
    machine = Machine(env=gb10_doubles.env, timeout=1.0, judged=str(wrapper))
    result = run("G9", machine, str(wrapper))
    assert result.status is Status.SKIP, result.line()
    assert f"python {wrapper}: not checked: its packages could not be listed" in result.summary
    assert "hung; killed" in result.summary


def test_cli_judges_the_venv_and_the_capture_records_it(job_venv, gb10_doubles, tmp_path: Path) -> None:
    python, scenario = job_venv
    gb10_doubles.extra["SPARK_FAKE_TORCH"] = str(scenario)
    cap = tmp_path / "run.json"
    done = cli("--only", "G1", "--profile", "gb10", "--offline", "--python", str(python), "--capture", str(cap),
               "-v", cwd=tmp_path, env=gb10_doubles.env)  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"G1 FAIL: python {python}: torch {TORCH_VERSION}" in done.stdout
    doc = capture.load(cap)
    assert doc["options"]["python"] == str(python)
    assert doc["probes"]["python:judged"]["dists"]["torch"]["version"] == TORCH_VERSION
    # decided again from the record: the same line, the interpreter named
    again = cli("--replay", str(cap), "-v", cwd=tmp_path, env=gb10_doubles.env)
    assert f"G1 FAIL: python {python}: torch {TORCH_VERSION}" in again.stdout, again.stdout + again.stderr


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda d: d / "missing", "is not a runnable Python: no such file"),
        (lambda d: d, "is a folder, not a runnable Python"),
        (lambda d: _script(d / "true", "#!/bin/sh\nexit 0\n"), "is not a runnable Python: it did not answer"),
        (lambda d: _script(d / "crash", "#!/bin/sh\necho boom >&2\nexit 3\n"),
         "is not a runnable Python: crash exited 3: boom"),
        (lambda d: _script(d / "data", "print('x')\n", mode=0o644), "is not a runnable Python: not executable"),
    ],
    ids=["missing", "folder", "silent", "crashing", "not-executable"],
)
def test_a_path_that_is_not_a_runnable_python_is_one_line_and_exit_2(tmp_path: Path, make, why) -> None:
    path = make(tmp_path)
    done = cli("--only", "G9", "--python", str(path), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and why in lines[0] and lines[0].startswith("spark-preflight: error: --python: ")


def test_pytest_spark_python_bad_path_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--spark-preflight", "--spark-python", "no/such/python")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --spark-python: 'no/such/python' is not a runnable Python: no such file"])
    assert "Traceback" not in result.stderr.str()


def test_pytest_ini_twin_runs_g1_in_the_named_interpreter(job_venv, gb10_doubles, pytester, monkeypatch) -> None:
    python, scenario = job_venv
    gb10_doubles.extra["SPARK_FAKE_TORCH"] = str(scenario)
    gb10_doubles.apply(monkeypatch)
    pytester.makeini(f"[pytest]\nspark_preflight_python = {python}\n")
    result = pytester.runpytest_subprocess("--spark-preflight", "--spark-only", "G1", "--spark-profile", "gb10")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([f"spark preflight: profile gb10, timeout 10 s, only G1, python {python}",
                                 f"*G1 FAIL: venv/bin/python: torch {TORCH_VERSION}*"])  # fmt: skip


def _script(path: Path, text: str, mode: int = 0o755) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path
