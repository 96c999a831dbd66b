"""FIFOs where files are expected, through whole runs (issue 12, item 4).

A FIFO with no writer blocks a plain ``open()`` for reading forever, and one
with no reader blocks an ``open()`` for writing; ``--spark-timeout`` bounds
probes, not file reads. Planted for real: under ``SPARK_PREFLIGHT_HOST_ROOT``
(``/proc/meminfo``, ``/proc/1/cgroup``, ``/proc/1/comm``,
``/run/.containerenv``, ``/etc/os-release``, ``/proc/sys/vm/drop_caches``, ``/dev/kmsg``)
and in the checked site-packages (a dist-info whose ``METADATA`` and
``RECORD`` are FIFOs: ``importlib.metadata`` would open them; behind a
readable ``METADATA``, each file importlib may open, and sparse ones of
600 MiB). Every run ends in bounded time with the reason in the check's text.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_dgx_spark import catalog

from conftest import PYTEST_CHILD
from doubles.spark_scene import CLI, Scene

#: a run that reads no FIFO ends in seconds; one that opens a FIFO never does
RUN_LIMIT = 60


@pytest.fixture
def scene(tmp_path: Path) -> Iterator[Scene]:
    s = Scene(tmp_path / "spark")
    s.files({".dockerenv": ""})
    yield s
    s.stop()


def fifos(base: Path, *rels: str) -> None:
    for rel in rels:
        path = base / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            path.unlink()
        os.mkfifo(path)


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_LIMIT, cwd=cwd, env=env)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"the run blocked on a FIFO ({RUN_LIMIT} s):\n{exc.stdout}") from None
    return done, time.monotonic() - start


def test_fifos_under_the_host_root_and_in_site_packages_through_pytest(tmp_path: Path, scene: Scene) -> None:
    """The whole preflight with FIFOs at five host files and at a dist-info's
    METADATA and RECORD: ten results within seconds, G3 SKIPs with the
    reason, G9's details say why ``/proc/1/cgroup`` was not read."""
    fifos(scene.root, "proc/meminfo", "proc/1/cgroup", "proc/1/comm", "run/.containerenv", "etc/os-release", "dev/kmsg")
    fifos(scene.site, "fifo_dist-1.0.dist-info/METADATA", "fifo_dist-1.0.dist-info/RECORD", "fifo_dist/x.so")
    project = tmp_path / "project"
    project.mkdir()
    (project / "pytest.ini").write_text("[pytest]\n")
    argv = [
        *PYTEST_CHILD, "--spark-preflight", "--spark-timeout=3", "--spark-offline", "--spark-thermal-seconds=0.2", "-rA",
    ]  # fmt: skip
    done, took = run(argv, project, scene.env())
    out = done.stdout + done.stderr
    assert done.returncode in (0, 1), out
    assert "Traceback" not in out and "INTERNALERROR" not in out
    lines = [ln for ln in done.stdout.splitlines() if ln.partition(" ")[0] in catalog.IDS and ": " in ln]
    assert {ln.split()[0] for ln in lines} == set(catalog.IDS)
    assert "G3 SKIP: cannot read memory headroom: cannot read /proc/meminfo: not a regular file (a FIFO)" in lines
    assert "cannot read /proc/1/cgroup: not a regular file (a FIFO)" in out
    assert any(ln.startswith("G4 INFO: GB10") for ln in lines), lines  # a kmsg that is a FIFO is no verdict
    assert took < RUN_LIMIT / 2, f"{took:.1f} s"


def test_fifos_through_the_cli(tmp_path: Path, scene: Scene) -> None:
    """The same faults through ``spark-preflight``: its lines, exit 0 or 1."""
    fifos(scene.root, "proc/meminfo", "proc/1/cgroup", "etc/os-release")
    fifos(scene.site, "fifo_dist-1.0.dist-info/METADATA")
    argv = [sys.executable, "-c", CLI, "--timeout", "3", "--offline", "--only", "G1,G3,G9"]
    done, took = run(argv, tmp_path, scene.env())
    assert done.returncode in (0, 1), done.stderr
    assert took < RUN_LIMIT / 2, f"{took:.1f} s"
    assert done.stdout.splitlines()[1] == (
        "G3 SKIP: cannot read memory headroom: cannot read /proc/meminfo: not a regular file (a FIFO)"
    )
    assert done.stderr == ""


@pytest.mark.parametrize(
    "planted",
    ["RECORD", "requires.txt", "installed-files.txt", "SOURCES.txt", "huge RECORD", "huge METADATA"],
)
def test_a_dist_info_file_behind_a_readable_metadata_never_blocks(
    tmp_path: Path, kit: Any, planted: str
) -> None:
    """The test above plants METADATA and RECORD as FIFOs in one dist-info,
    so the dist is refused at METADATA and RECORD is never reached. With a
    readable METADATA, a FIFO RECORD blocked G1 forever (its owner map falls
    back to ``dist.files``, which opens RECORD), a FIFO ``requires.txt``
    blocked G1 and G9 (``dist.requires`` opens it when METADATA lists no
    requirement), and a sparse RECORD or METADATA was read whole (3 GiB
    made 24 GB of RSS, then the OOM killer; 600 MiB here). Each is refused
    unopened, in bounded time and memory."""
    from test_faults_output import RSS_LIMIT_KB, measured

    scene = Scene(tmp_path / "spark", kit)
    scene.files({".dockerenv": ""})
    scene.cuda13_stack()  # CUDA-linked objects: G1 then reads every dist's file list for their owners
    dist = scene.site / "plain_dist-1.0.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    name = planted.split()[-1]
    if name != "METADATA":
        (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: plain-dist\nVersion: 1.0\n")
    if planted.startswith("huge"):
        with open(dist / name, "wb") as fh:
            fh.truncate(600 << 20)  # sparse: no disk used, 600 MiB to whoever reads it whole
    else:
        fifos(dist.parent, f"{dist.name}/{name}")
    argv = [sys.executable, "-c", CLI, "--timeout", "3", "--offline", "--only", "G1,G9"]
    try:
        out, code, took, peak_kb = measured(argv, tmp_path, scene.env())
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the run blocked on the planted {planted}") from None
    assert code in (0, 1), out
    assert [ln.split()[0] for ln in out.splitlines() if not ln.startswith("PEAK_RSS_KB")] == ["G1", "G9", "G2,", "verdict:"]  # G2, ... not run
    assert took < RUN_LIMIT / 2, f"{took:.1f} s"
    assert peak_kb < RSS_LIMIT_KB, f"{peak_kb} kB"
    scene.stop()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root writes drop_caches (others are refused before any write)")
def test_drop_caches_into_a_fifo_is_refused_not_blocked(tmp_path: Path, scene: Scene) -> None:
    """``--spark-drop-caches`` as root with a FIFO at ``/proc/sys/vm/drop_caches``
    under the host root: ``open(..., "w")`` waited for a reader forever; now
    G3 says the write was refused and why."""
    fifos(scene.root, "proc/sys/vm/drop_caches")
    args = ["--timeout", "3", "--offline", "--only", "G3", "--drop-caches", "-v"]
    done, took = run([sys.executable, "-c", CLI, *args], tmp_path, scene.env())
    assert done.returncode in (0, 1), done.stderr
    assert took < RUN_LIMIT / 2, f"{took:.1f} s"
    g3 = done.stdout.splitlines()[0]
    assert "--spark-drop-caches refused: cannot write /proc/sys/vm/drop_caches: not a regular file (a FIFO)" in g3
    assert os.path.exists(scene.root / "proc/sys/vm/drop_caches")
