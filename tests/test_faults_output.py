"""Probes that print without end, for real (issue 12, item 3).

A ``nvidia-smi`` on PATH that runs ``yes`` took 26.7 s and 6.8 GB at
``--timeout 3``: every byte was kept until the timeout, and the 1 MiB cap was
applied afterwards. Now each stream is capped while it is read and the
probe's group is killed at the cap; the check says the output exceeded it.
The same for the Python probe children's JSON-lines reader (a ``pynvml``
that prints without end, with or without newlines).

Each run is measured from outside: wall time, and the peak RSS of the run
(``RUSAGE_CHILDREN`` of a small wrapper process that only waits for it).
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import PYTEST_CHILD
from doubles.spark_scene import CLI, Scene

TIMEOUT = 3
#: what a killed babbler may cost: start-up, the kill, a loaded CI box
WALL_LIMIT = 2 * TIMEOUT + 4
#: peak RSS of the whole run in kB (a capped run stays near 60 MB; before: gigabytes)
RSS_LIMIT_KB = 400_000

MEASURE = (
    "import resource, subprocess, sys\n"
    "r = subprocess.run(sys.argv[1:], capture_output=True, text=True, timeout=120)\n"
    "sys.stdout.write(r.stdout)\n"
    "sys.stderr.write(r.stderr)\n"
    "print('PEAK_RSS_KB', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    "sys.exit(r.returncode)\n"
)

SMI_YES = "#!/bin/sh\nexec yes\n"
#: one endless line: no newline ever comes
SMI_ONE_LINE = "#!/bin/sh\nexec tr '\\000' x < /dev/zero\n"

PYNVML_LINES = "import sys\nwhile True:\n    sys.stdout.write('not json\\n' * 4096)\n"
PYNVML_ONE_LINE = "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n"


def measured(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[str, int, float, int]:
    """(output, exit code, wall seconds, peak RSS kB) of one run."""
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, *argv], capture_output=True, text=True, timeout=120, cwd=cwd, env=env
    )
    took = time.monotonic() - start
    m = re.search(r"^PEAK_RSS_KB (\d+)$", done.stdout, re.M)
    assert m, done.stdout + done.stderr
    return done.stdout + done.stderr, done.returncode, took, int(m.group(1))


def g_line(out: str, check: str) -> str:
    return next(ln for ln in out.splitlines() if ln.startswith(f"{check} "))


@pytest.mark.parametrize("script", [SMI_YES, SMI_ONE_LINE], ids=["yes", "one-endless-line"])
def test_nvidia_smi_that_prints_without_end(tmp_path: Path, scene: Scene, script: str) -> None:
    """NVML missing, so G4 and G6 ask nvidia-smi, which prints forever: each
    is killed at 1 MiB and says so; the run ends well within the timeout and
    its memory stays small."""
    scene.nvml = {"init_error": "LibraryNotFound"}
    scene.tool("nvidia-smi", script)
    args = ["--only", "G4,G6", "--timeout", str(TIMEOUT), "--offline", "--thermal-seconds", "0.2", "-v"]
    out, rc, took, rss = measured([sys.executable, "-c", CLI, *args], tmp_path, scene.env())
    assert rc == 1, out
    assert "nvidia-smi printed more than 1 MiB on stdout (killed)" in g_line(out, "G4"), out
    assert g_line(out, "G6").startswith("G6 WARN: GPU process list unreadable"), out
    assert took < WALL_LIMIT, f"{took:.1f} s"
    assert rss < RSS_LIMIT_KB, f"peak RSS {rss} kB"
    assert "Traceback" not in out and "MemoryError" not in out


@pytest.mark.parametrize(
    ("module", "said"),
    [(PYNVML_LINES, "made no progress|printed more than 16 MiB"), (PYNVML_ONE_LINE, "printed a line over 1 MiB")],
    ids=["endless-lines", "one-endless-line"],
)
def test_probe_child_that_prints_without_end_through_pytest(
    tmp_path: Path, scene: Scene, module: str, said: str
) -> None:
    """A ``pynvml`` that prints without end when the NVML child imports it:
    the child is killed (at the step timeout for garbage lines, at the line
    cap for one endless line) and G4 says so; a whole ``pytest
    --spark-preflight`` run stays bounded in time and memory."""
    (scene.bin / "nvidia-smi").unlink()  # so G4 reports NVML's reason, not nvidia-smi's answer
    babble = tmp_path / "babble"
    babble.mkdir()
    (babble / "pynvml.py").write_text(module)
    env = scene.env()
    env["PYTHONPATH"] = f"{babble}:{env['PYTHONPATH']}"
    project = tmp_path / "project"
    project.mkdir()
    (project / "pytest.ini").write_text("[pytest]\n")
    argv = [
        *PYTEST_CHILD, "--spark-preflight", "--spark-only", "G4", f"--spark-timeout={TIMEOUT}", "--spark-thermal-seconds=0.2", "-rA",
    ]  # fmt: skip
    out, rc, took, rss = measured(argv, project, env)
    assert rc in (0, 1), out
    line = g_line(out, "G4")
    assert re.search(rf"NVML (child )?({said})", line), line
    assert took < 2 * WALL_LIMIT, f"{took:.1f} s"
    assert rss < RSS_LIMIT_KB, f"peak RSS {rss} kB"
    assert "Traceback" not in out and "INTERNALERROR" not in out


def test_background_sampler_whose_child_prints_one_endless_line(tmp_path: Path) -> None:
    """The ``spark_sampler`` fixture's NVML child, with a ``pynvml`` printing
    one endless line: killed at the line cap, the summary says so, and this
    process's memory stays small (readline kept the whole line)."""
    import resource

    from pytest_dgx_spark.sampler import GpuSampler

    babble = tmp_path / "babble"
    babble.mkdir()
    (babble / "pynvml.py").write_text(PYNVML_ONE_LINE)
    env = dict(__import__("os").environ, PYTHONPATH=str(babble))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with GpuSampler(interval=0.05, timeout=2, env=env) as sampler:
        time.sleep(3)
    summary = sampler.summary()
    assert summary["reason"] == "the sampler child printed a line over 1 MiB on stdout; killed", summary
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100_000
