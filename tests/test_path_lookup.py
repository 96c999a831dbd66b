"""Programs never come from the working folder (issue 19, item 7).

A checkout holds its own ``nvidia-smi``, ``ldconfig`` and ``cuobjdump`` (in the
folder itself and in ``bin/``), each writing a marker file when it runs. With
PATH naming the working folder (``.``, an empty entry, a relative ``bin``),
what runs is the real program from an absolute PATH entry, or nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_dgx_spark.checks.g01_cuda_abi.gather import _ldconfig
from pytest_dgx_spark.checks.g07_nvfp4.probe import _find_cuobjdump
from pytest_dgx_spark.probes.commands import run_command
from pytest_dgx_spark.probes.machine import Machine

PLANTED = ("nvidia-smi", "ldconfig", "cuobjdump")


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, Path]:
    """(working folder with planted programs, the marker they write, a folder
    with the real ones), with the working folder as cwd."""
    work, real = tmp_path / "checkout", tmp_path / "real"
    marker = tmp_path / "PLANTED-RAN"
    for folder in (work, work / "bin", work / "cuda" / "bin"):
        folder.mkdir(parents=True)
        for name in PLANTED:
            prog = folder / name
            prog.write_text(f"#!/bin/sh\necho \"$0\" >> {marker}\necho planted\n")
            prog.chmod(0o755)
    real.mkdir()
    for name in PLANTED:
        prog = real / name
        prog.write_text("#!/bin/sh\necho real\n")
        prog.chmod(0o755)
    monkeypatch.chdir(work)
    return work, marker, real


def _paths(real: Path) -> list[str]:
    sysbin = "/usr/bin:/bin"  # sh for the planted scripts' #! line
    return [
        f".:{real}:{sysbin}",
        f"bin:{real}:{sysbin}",
        f"{real}:{sysbin}:",
        f":{real}:{sysbin}",
        f"{real}::{sysbin}",
        f"./bin:cuda/bin:{real}:{sysbin}",
    ]


def test_run_command_skips_relative_and_empty_path_entries(checkout: tuple[Path, Path, Path]) -> None:
    _, marker, real = checkout
    for path in _paths(real):
        result = run_command(["nvidia-smi", "-L"], timeout=10, env={"PATH": path})
        assert result.ok and result.stdout.strip() == "real", (path, result.describe(), result.stdout)
    # only relative entries: nothing is found, nothing runs
    for path in (".", "", "bin", ":", "./bin:bin"):
        assert run_command(["nvidia-smi"], timeout=10, env={"PATH": path}).error == "not found on PATH"
    assert not marker.exists(), marker.read_text()


def test_checks_and_probe_children_skip_the_working_folder(checkout: tuple[Path, Path, Path]) -> None:
    """G1's ``ldconfig -p``, G7's cuobjdump (also under a relative CUDA_HOME) and
    the nvidia-smi the sample child runs in turn."""
    work, marker, real = checkout
    for path in _paths(real):
        machine = Machine(root="/", env={"PATH": path, "CUDA_HOME": "cuda"}, timeout=10)
        _, error = _ldconfig(machine)
        assert error is None or "planted" not in error
        found = _find_cuobjdump({"PATH": path, "CUDA_HOME": "cuda"})
        assert found is not None and os.path.isabs(found) and not found.startswith(str(work))
        child = machine.python_child(
            "smi:path", ["smi_child.py"], {"argv": ["nvidia-smi", "-L"], "seconds": 0, "interval": 0.1}
        )
        assert child.ok, child.describe()
        assert [e["out"].strip() for e in child.events] == ["real"]
    assert not marker.exists(), marker.read_text()
