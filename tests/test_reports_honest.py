"""Reports that lie or vanish (issue 19, item 11).

- A run that cannot write its env report fails (pytest: usage error, as the
  CLI's exit 2), and the last run's file is not left for CI to read as this
  run's verdict. The write is made to fail for real: ``RLIMIT_FSIZE`` smaller
  than the report (``File too large``), after the option check passed.
- ``--report X --capture X`` is refused in one line (the capture was
  written last and the report silently lost).
- ``HOME=/usr`` (a service account) no longer makes the redactor rewrite
  every ``/usr/…`` path of a capture to ``/home/<user>/…``.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_dgx_spark import capture
from pytest_dgx_spark.redact import Redactor

from conftest import PYTEST_CHILD

CLI = "import sys\nfrom pytest_dgx_spark.cli import main\nsys.exit(main())\n"
STALE = {"verdict": "ready", "note": "the last run's"}
#: the offline G8 alone: SKIP, exit 0, no network and no machine probe
QUIET = ["--only", "G8", "--offline"]


def _small_files() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (600, 600))  # a G8 env report is some 2 KB


def run(argv: list[str], cwd: Path, *, limited: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        preexec_fn=_small_files if limited else None,
    )


def stale_report(folder: Path) -> Path:
    path = folder / "env-report.json"
    path.write_text(json.dumps(STALE))
    return path


def test_pytest_that_cannot_write_the_report_fails_and_leaves_no_stale_file(tmp_path: Path) -> None:
    path = stale_report(tmp_path)
    args = ["--spark-preflight", "--spark-only=G8", "--spark-offline", f"--spark-report={path}"]
    done = run([*PYTEST_CHILD, *args], tmp_path, limited=True)
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
    assert f"cannot write {path}: File too large; the file there from an earlier run was removed" in done.stdout
    assert not path.exists()
    assert not list(tmp_path.glob(".env-report.json-*"))  # nor the half-written temporary file
    again = run([*PYTEST_CHILD, *args], tmp_path)  # the same run with room: green, the report there
    assert again.returncode == pytest.ExitCode.OK, again.stdout
    assert json.loads(path.read_text())["checks"]["G8"].startswith("skip")


def test_cli_that_cannot_write_the_report_leaves_no_stale_file(tmp_path: Path) -> None:
    path = stale_report(tmp_path)
    done = run([sys.executable, "-c", CLI, *QUIET, "--report", str(path)], tmp_path, limited=True)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"spark-preflight: error: cannot write {path}: File too large; the file there from an earlier run was removed"
    ]
    assert not path.exists()


def test_report_and_capture_to_the_same_file_is_refused_in_one_line(tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    by_cli = run([sys.executable, "-c", CLI, *QUIET, "--report", "out.json", "--capture", str(target)], tmp_path)
    assert by_cli.returncode == 2
    assert by_cli.stderr.strip().splitlines() == [
        f"spark-preflight: error: --report and --capture name the same file ({target}): give each its own path"
    ]
    (tmp_path / "pytest.ini").write_text("[pytest]\nspark_preflight_capture = out.json\n")
    by_pytest = run([*PYTEST_CHILD, "--spark-preflight", "--spark-only=G8", f"--spark-report={target}"], tmp_path)
    assert by_pytest.returncode == pytest.ExitCode.USAGE_ERROR
    assert by_pytest.stderr.strip().splitlines() == [
        f"ERROR: --spark-report and spark_preflight_capture (ini) name the same file ({target}): "
        "give each its own path"
    ]
    assert not target.exists()


def test_a_system_home_is_not_rewritten_in_a_capture() -> None:
    from pytest_dgx_spark import redact

    doc = {"probes": {"ld": ["/usr/lib/aarch64-linux-gnu/libcuda.so.1", "/usr/local/cuda/bin/nvcc"]}}
    for home in ("/usr", "/usr/local", "/", "/var", "/nonexistent", "/bin"):
        clean = json.loads(capture.encode(doc, Path("c.json"), {"HOME": home, "USER": "svc"}))
        assert clean == doc, home
        assert not redact.personal_home(home)
    own = Redactor({"HOME": "/srv/alice", "USER": "alice"})
    assert own.text("/srv/alice/job.yaml /srv/alicex/y") == "/home/<user>/job.yaml /srv/alicex/y"
    assert Redactor({"HOME": "/var/lib/jenkins"}).text("/var/lib/jenkins/ws") == "/home/<user>/ws"
