"""Recorded captures replay here, with no GPU, no network and an empty PATH,
to the lines their runs printed.

``h200-*.json.gz`` were made on an NVIDIA H200 (driver 580, torch 2.11.0+cu130)
by ``benchmarks/gpu_captures.sh``; each ``.lines`` file is what that run
printed there, exit code included. ``gb10-public-healthy.json.gz`` is a capture
of the GB10 double, whose answers are what DGX Spark owners posted (its
``built_from`` key lists the files; ``make_gb10_public.py`` rebuilds it).
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_spark import capture

CAPTURES = Path(__file__).resolve().parent / "data" / "captures"
NAMES = sorted(p.name.removesuffix(".json.gz") for p in CAPTURES.glob("*.json.gz"))


def replay(path: Path, *args: str) -> tuple[str, int]:
    env = {"PATH": "", "HOME": "/nonexistent", "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    env["SPARK_PREFLIGHT_HOST_ROOT"] = "/nonexistent-host-root"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_spark.cli", "--replay", str(path), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.stderr == ""
    return proc.stdout, proc.returncode


def test_there_are_five_captures() -> None:
    assert NAMES == ["gb10-public-healthy", "h200-cu12", "h200-healthy", "h200-load", "h200-vllm"]


@pytest.mark.parametrize("name", NAMES)
def test_a_capture_replays_to_the_lines_its_run_printed(name: str) -> None:
    out, code = replay(CAPTURES / f"{name}.json.gz")
    assert out + f"exit {code}\n" == (CAPTURES / f"{name}.lines").read_text()


def test_h200_captures_hold_what_their_runs_saw() -> None:
    docs = {n: capture.load(CAPTURES / f"{n}.json.gz") for n in NAMES if n.startswith("h200")}
    for doc in docs.values():
        assert doc["host"]["gpu"] == "NVIDIA H200" and doc["host"]["driver"].startswith("580.")
        assert doc["probes"]["nvml"]["devices"][0]["capability"] == [9, 0]
    # the fake vLLM held GPU memory and was found, its --api-key value redacted
    vllm = json.dumps(docs["h200-vllm"])
    assert "NOT-A-REAL-KEY" not in vllm
    g6 = docs["h200-vllm"]["checks"]["G6"]["result"]
    assert g6["status"] == "FAIL" and "vLLM" in g6["summary"]
    # the cu12 module's missing libcudart.so.12 is in G1's facts
    assert "libcudart.so.12" in json.dumps(docs["h200-cu12"]["checks"]["G1"]["facts"])
    # under load the sampled power is in the hundreds of watts
    assert docs["h200-load"]["checks"]["G4"]["result"]["readings"]["power_max"]["value"] > 300


def test_the_gb10_capture_names_its_sources_and_reads_ready() -> None:
    doc = json.loads(gzip.decompress((CAPTURES / "gb10-public-healthy.json.gz").read_bytes()))
    assert doc["host"]["gpu"] == "NVIDIA GB10" and doc["profile"] == "gb10"
    root = CAPTURES.parent.parent.parent
    assert doc["built_from"] and all((root / f).is_file() for f in doc["built_from"])
    out, code = replay(CAPTURES / "gb10-public-healthy.json.gz")
    assert out.splitlines()[-1] == "verdict: ready (7 PASS, 3 INFO)" and code == 0


def test_other_thresholds_change_a_recorded_verdict() -> None:
    """The H200 under load drew ~690 W: with a GB10-style 'hot' threshold at 50 C
    G4 warns from the same recorded samples."""
    out, _ = replay(CAPTURES / "h200-load.json.gz", "--only", "G4", "--threshold", "g4_hot_c=50")
    assert out.startswith("G4 WARN"), out
