"""Faults of the machine's files and of the user, injected for real.

Files are made unreadable with real permissions, so these run as a real
unprivileged user (``nonroot_run``: root reads every file, whatever its
mode): the whole preflight, through ``spark-preflight`` and through
``pytest --spark-preflight``, with ``/proc/meminfo`` and ``/proc/1/cgroup``
unreadable, a site-packages holding a truncated ``.so``, a folder named
``*.so``, a symlink loop and an unreadable library, and
``--spark-drop-caches`` asked for. Then G10's configs that are invalid,
10 MB, binary or nested 300 000 deep, with the time and the memory a run
needs to refuse them.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from suiteuser import NONROOT_USER as NONROOT

from pytest_dgx_spark import catalog

from conftest import PYTEST_ARGS
from doubles import elfkit
from doubles.spark_scene import CLI, ISOLATE_CONFTEST, Scene, assert_clean


def user_uid() -> int:
    """The euid the preflight runs with under ``nonroot_run``."""
    return pwd.getpwnam(NONROOT).pw_uid if os.geteuid() == 0 else os.geteuid()


@pytest.fixture
def shared_scene(nonroot_run: Any, kit: elfkit.Kit) -> Iterator[Scene]:
    """A GB10 scene in a folder the unprivileged user can read, whose
    site-packages holds one good CUDA 13 module and every kind of bad file."""
    scene = Scene(Path(nonroot_run.base) / "spark", kit)
    scene.cuda13_stack()
    site = scene.site
    bad = site / "badpkg"
    bad.mkdir()
    (bad / "truncated.so").write_bytes(kit.ext13.read_bytes()[:200])
    (bad / "folder.so").mkdir()
    (bad / "loop.so").symlink_to("loop.so")
    secret = bad / "secret.so"
    shutil.copyfile(kit.ext13, secret)
    secret.chmod(0o000)
    for folder in (scene.base, *scene.base.rglob("*")):
        if folder.is_dir():
            folder.chmod(0o755)
    yield scene
    scene.stop()


SKIPPED_FILES = "skipped while scanning: 1 directory, 1 symlink loop, 1 truncated, 1 unreadable"


def test_spark_preflight_as_a_non_root_user_with_unreadable_files(
    nonroot_run: Any, shared_scene: Scene
) -> None:
    """``/proc/meminfo`` and ``/proc/1/cgroup`` without read permission, and a
    site-packages with a truncated ``.so``, a folder named ``*.so``, a symlink
    loop and an unreadable library: ten results, each bad file counted by
    reason, each unreadable file a reason in its check — never a crash.

    Lines that need a probe child are not compared: on a box where the
    suite runs as root, the unprivileged user may not be allowed to execute
    the venv's interpreter (this one lives under /root), so those children
    cannot start there (a reason too, tested in test_faults_gpu.py)."""
    scene = shared_scene
    scene.files({"proc/1/cgroup": "0::/\n"})
    for rel in ("proc/meminfo", "proc/1/cgroup"):
        (scene.root / rel).chmod(0o000)
    project = scene.base / "project"
    project.mkdir(mode=0o755)
    proc = nonroot_run(
        ["-c", CLI, "--json", "--offline", "--thermal-seconds", "0.2", "--timeout", "2"],
        env=scene.env(),
        cwd=project,
    )

    assert proc.returncode in (0, 1) and proc.stderr == "", proc.stderr
    results = {r["id"]: r for r in json.loads(proc.stdout)["results"]}
    assert list(results) == list(catalog.IDS)
    assert not any("the check itself crashed" in r["line"] for r in results.values())
    assert (
        results["G3"]["line"]
        == "G3 SKIP: cannot read memory headroom: cannot read /proc/meminfo: Permission denied"
    )
    g1 = results["G1"]
    assert SKIPPED_FILES in g1["details"]
    assert g1["readings"]["elf_skipped"]["value"] == 4
    # torch's library and the two CUDA 13 runtime wheels were read; the bad files were not
    assert g1["readings"]["elf_files_scanned"]["value"] == 3
    assert results["G9"]["line"] == (
        "G9 WARN: unknown: no container marker matched (PID 1 unreadable; cgroup v2 and some runtimes hide it); "
        "torch 2.11.0+cu130; declared requirements hold; fix: prefer an NGC container "
        "(nvcr.io/nvidia/pytorch:25.11-py3) or Unsloth's; if bare pip is unavoidable, follow NVIDIA's install "
        "order (--no-deps for Unsloth)"
    )
    assert "cannot read /proc/1/cgroup: Permission denied" in results["G9"]["details"]


def pytest_as_user(
    nonroot_run: Any, scene: Scene, project: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    """``pytest --spark-preflight`` as the unprivileged user, on the scene's
    site-packages only (the isolating conftest.py in the project folder)."""
    project.mkdir(mode=0o755, exist_ok=True)
    (project / "conftest.py").write_text(ISOLATE_CONFTEST)
    plugin = [*PYTEST_ARGS, "--spark-preflight"]
    return nonroot_run([*plugin, *args], env=scene.env(), cwd=project)


def test_pytest_as_a_non_root_user_refuses_to_drop_caches(nonroot_run: Any, shared_scene: Scene) -> None:
    """The whole plugin run as an unprivileged user with ``--spark-drop-caches``:
    refused with the reason in G3's line, and nothing written — not even to a
    ``drop_caches`` file the user could write."""
    scene = shared_scene
    scene.files({"proc/sys/vm/drop_caches": "untouched\n", ".dockerenv": "", "proc/1/cgroup": "0::/\n"})
    target = scene.root / "proc/sys/vm/drop_caches"
    target.chmod(0o666)
    args = [
        "-rA",  # captured output of passing checks too: G1's details are read below
        "-v",  # the whole lines in the spark preflight section
        "--spark-drop-caches",
        "--spark-offline",
        "--spark-thermal-seconds",
        "0.2",
        "--spark-timeout",
        "2",
    ]
    proc = pytest_as_user(nonroot_run, scene, scene.base / "project", *args)

    out = proc.stdout + proc.stderr
    assert proc.returncode in (0, 1), out
    assert_clean(out)
    assert target.read_text() == "untouched\n"
    lines = [ln for ln in proc.stdout.splitlines() if ln[:2] == "G3"]
    head = (
        "G3 INFO: MemAvailable 112.8 GiB of 121.7 GiB (MemFree 96.0, page cache 17.2, swap free 16.0 GiB); "
    )
    tail = (
        f"--spark-drop-caches refused: not root (euid {user_uid()}); nothing was written; no workload declared "
        "(--spark-workload-gb)"
    )
    # Where the unprivileged user may run this interpreter (the GPU image), the
    # NVML child starts and G3 adds NVML's [N/A]; where the interpreter lives
    # under a private /root (this CI box) the child cannot start and G3 says nothing of NVML.
    nvml = "NVML memory [N/A] (NotSupported), as on GB10's unified memory; "
    assert lines[-1] in (head + tail, head + nvml + tail)
    assert "G1 " in proc.stdout and SKIPPED_FILES in proc.stdout  # G1's report lists what it skipped
    verdict = [ln for ln in proc.stdout.splitlines() if ln.startswith("verdict: ")]
    assert len(verdict) == 1, proc.stdout
    assert "the check itself crashed" not in proc.stdout


def test_pytest_report_into_a_read_only_folder_as_a_non_root_user(
    nonroot_run: Any, shared_scene: Scene
) -> None:
    """The plugin's twin of tests/test_options.py's CLI case: a UsageError
    naming the option, exit 4, one line, before any check runs."""
    folder = shared_scene.base / "read-only"
    folder.mkdir(mode=0o555)
    folder.chmod(0o555)
    proc = pytest_as_user(
        nonroot_run, shared_scene, shared_scene.base / "project", "--spark-report", str(folder / "r.json")
    )
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR
    assert proc.stderr.strip().splitlines() == [
        f"ERROR: --spark-report: folder '{folder}' is not writable (Permission denied)"
    ]
    assert_clean(proc.stdout, proc.stderr)


# --------------------------------------------------------------------------- G10 configs


def run_measured(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[str, int, float, int]:
    """(stdout, exit code, seconds, peak RSS in KiB) of one child, by wait4."""
    start = time.monotonic()
    proc = subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return out, proc.returncode, time.monotonic() - start, usage.ru_maxrss


def test_bad_g10_configs_cost_a_reason_and_bounded_time_and_memory(tmp_path: Path, quiet_root: Path) -> None:
    """Invalid YAML, invalid JSON, a real 10 MB YAML, a binary file and JSON
    and YAML nested 300 000 deep, all given at once: G10 names each reason,
    and the run costs about what a run with one good config costs (peak RSS
    measured with wait4, against that baseline in the same test)."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "pytest.ini").write_text("[pytest]\n")
    bad = {
        "broken.yaml": b"compute_environment: LOCAL_MACHINE\nmain_process_ip: < TODO: specify IP >\n  x: [\n",
        "broken.json": b'{"tensor_parallel": {"autotp_size": 2,',
        "huge.yaml": b"num_machines: 1\n" * (10 * 1000 * 1000 // 16),
        "blob.json": bytes(range(256)) * 64,
        "deep.json": b"[" * 300_000 + b"]" * 300_000,
        "deep.yaml": b"[" * 300_000 + b"]" * 300_000,
    }
    for name, content in bad.items():
        (tmp_path / name).write_bytes(content)
    (tmp_path / "good.yaml").write_text("distributed_type: FSDP\nnum_machines: 1\n")
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "LOCAL_WORLD_SIZE", "NNODES")}
    env["SPARK_PREFLIGHT_HOST_ROOT"] = str(quiet_root)  # other tests' fake TP servers are not G10's input here
    cli = [sys.executable, "-m", "pytest_dgx_spark.cli", "--only", "G10", "--timeout", "2", "--json"]

    _, _, base_took, baseline = run_measured([*cli, "--config", str(tmp_path / "good.yaml")], project, env)
    given = [a for name in bad for a in ("--config", str(tmp_path / name))]
    out, code, took, peak = run_measured([*cli, *given], project, env)

    result = json.loads(out)["results"][0]
    reasons = {
        "broken.yaml": "invalid YAML: ScannerError: mapping values are not allowed in this context at line 2, "
        "column 24",
        "broken.json": "invalid JSON: JSONDecodeError: Expecting property name enclosed in double quotes "
        "at line 1, column 39",
        "huge.yaml": "10.0 MB, over the 1.0 MB limit for a config: not read",
        "blob.json": "binary, not a text config",
        "deep.json": "JSON nested too deeply to parse: not read",
        "deep.yaml": "YAML nested too deeply to parse: not read",
    }
    assert result["details"] == [f"{tmp_path / name}: {why}" for name, why in reasons.items()]
    assert result["line"] == (  # none of the six was read: none is counted as read
        "G10 SKIP: cannot judge the named config: no launcher environment (WORLD_SIZE, NNODES, SLURM_NNODES), "
        f"no tensor parallelism or node count (no config file read under {project} "
        f"(6 unreadable; {tmp_path / 'broken.yaml'}: {reasons['broken.yaml']})), no training/serving process "
        "with those flags"
    )
    assert code == 0
    # --timeout 2 bounds them: at most that and some more than the same run on one good config (measured
    # beside it, so a loaded box slows both)
    assert took < base_took + 2 + 1.5, f"{took:.1f} s against {base_took:.1f} s for one good config"
    assert peak - baseline < 32 * 1024, (
        f"{(peak - baseline) / 1024:.0f} MiB more than a run on one good config"
    )
