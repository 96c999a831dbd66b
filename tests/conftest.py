"""Shared fixtures: recorded H200 output, a fake machine root, and test
doubles of ``pynvml`` and ``torch`` that the probe children import instead
of the real ones (this machine has no GPU)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).parent
DATA = TESTS / "data"
H200 = DATA / "h200-cu130"
DOUBLES = TESTS / "doubles"


class Doubles:
    """Builds the environment a probe child runs in, with doubles first on
    PYTHONPATH (``nvml(...)``, ``torch(...)``) and fake tools first on PATH."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.pythonpath: list[str] = []
        self.path: list[str] = []
        self.extra: dict[str, str] = {}

    def _scenario(self, name: str, scenario: Mapping[str, Any]) -> str:
        path = self.folder / f"{name}.json"
        path.write_text(json.dumps(scenario))
        return str(path)

    def nvml(self, scenario: Mapping[str, Any]) -> Doubles:
        self.extra["SPARK_FAKE_NVML"] = self._scenario("nvml", scenario)
        if str(DOUBLES / "nvml") not in self.pythonpath:
            self.pythonpath.insert(0, str(DOUBLES / "nvml"))
        return self

    def torch(self, scenario: Mapping[str, Any]) -> Doubles:
        self.extra["SPARK_FAKE_TORCH"] = self._scenario("torch", scenario)
        if str(DOUBLES / "torch") not in self.pythonpath:
            self.pythonpath.insert(0, str(DOUBLES / "torch"))
        return self

    def tool(self, name: str, script: str) -> Path:
        """Put an executable ``name`` (a shell script) first on PATH."""
        bindir = self.folder / "bin"
        bindir.mkdir(exist_ok=True)
        exe = bindir / name
        exe.write_text(script)
        exe.chmod(0o755)
        if str(bindir) not in self.path:
            self.path.insert(0, str(bindir))
        return exe

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.extra)
        if self.pythonpath:
            env["PYTHONPATH"] = os.pathsep.join([*self.pythonpath, env.get("PYTHONPATH", "")]).rstrip(
                os.pathsep
            )
        if self.path:
            env["PATH"] = os.pathsep.join([*self.path, env.get("PATH", "")])
        return env

    def apply(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Export into this process's environment (for pytester/CLI runs)."""
        for key, value in self.env.items():
            if os.environ.get(key) != value:
                monkeypatch.setenv(key, value)


@pytest.fixture
def doubles(tmp_path: Path) -> Doubles:
    folder = tmp_path / "doubles"
    folder.mkdir()
    return Doubles(folder)


@pytest.fixture
def h200() -> Path:
    """Recorded output of a real NVIDIA H200 (driver 580, CUDA 13.0, torch 2.11+cu130)."""
    return H200


def make_root(base: Path, files: Mapping[str, str | bytes]) -> Path:
    """A fake machine root: ``{"proc/meminfo": text, ".dockerenv": ""}``."""
    base.mkdir(parents=True, exist_ok=True)
    for rel, content in files.items():
        path = base / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return base


@pytest.fixture
def fake_root(tmp_path: Path):
    def build(files: Mapping[str, str | bytes]) -> Path:
        return make_root(tmp_path / "root", files)

    return build
