#!/usr/bin/env python3
"""What the installed plugin costs a plain pytest run, and what the preflight costs.

Prints, measured side by side in this one run (interleaved, medians):

1. import time of ``pytest_spark.plugin`` (``python -X importtime``), the only
   module a plain run loads;
2. a plain ``pytest`` run of a one-test project with the plugin installed vs
   the same run with ``-p no:dgx_spark`` (target: no measurable difference);
3. ``pytest --spark-preflight`` in an empty folder vs an empty pytest run
   (SPEC target without a GPU: < 1 s beyond pytest's own start).

Usage: python benchmarks/bench_plugin_overhead.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed(argv: list[str], cwd: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 1, 5):
        raise SystemExit(
            f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        )
    return elapsed


#: what a plain run loads: the entry point, and the sampler fixture it registers
PLAIN_RUN_MODULES = ("pytest_spark.plugin", "pytest_spark.sampler")


def import_ms(env: dict[str, str]) -> float:
    """Cumulative import time of the modules a plain run loads, once pytest is loaded."""
    code = "import pytest, _pytest.config; " + "; ".join(f"import {m}" for m in PLAIN_RUN_MODULES)
    best = float("inf")
    for _ in range(7):
        proc = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", code], env=env, capture_output=True, text=True
        )
        total = 0
        for line in proc.stderr.splitlines():
            parts = [p.strip() for p in line.split("|")]
            if len(parts) == 3 and parts[2] in PLAIN_RUN_MODULES:
                total += int(parts[1])
        best = min(best, total / 1000)
    return best


def interleaved(
    a: list[str], b: list[str], cwd: Path, env: dict[str, str], runs: int
) -> tuple[list[float], list[float]]:
    ta: list[float] = []
    tb: list[float] = []
    timed(a, cwd, env)  # warm the page cache and .pyc files
    timed(b, cwd, env)
    for _ in range(runs):
        ta.append(timed(a, cwd, env))
        tb.append(timed(b, cwd, env))
    return ta, tb


def describe(name: str, times: list[float]) -> str:
    med = statistics.median(times)
    spread = statistics.pstdev(times) if len(times) > 1 else 0.0
    return f"  {name:<46} median {med * 1000:8.1f} ms   (sd {spread * 1000:5.1f} ms, n={len(times)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    env = dict(os.environ)
    # A set PYTHONDONTWRITEBYTECODE (any value, "0" too) means no .pyc files,
    # which no real install has: every run would recompile the plugin.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("PYTEST_ADDOPTS", None)
    py = sys.executable
    print(f"python {sys.version.split()[0]} at {py}")
    print(f"machine: {os.uname().machine}, {os.cpu_count()} cpus, {os.uname().nodename}")

    ms = import_ms(env)
    print("\n1. import cost of what a plain run loads (plugin + sampler fixture module; .pyc cached)")
    print(f"  {' + '.join(PLAIN_RUN_MODULES)} (best of 7)  {ms:8.2f} ms   target < 10 ms")

    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp) / "project"
        project.mkdir()
        (project / "test_one.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
        base = [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"]
        with_plugin, without = interleaved(base, [*base, "-p", "no:dgx_spark"], project, env, args.runs)
        print(f"\n2. plain pytest, one-test project ({args.runs} interleaved runs each)")
        print(describe("plugin installed", with_plugin))
        print(describe("-p no:dgx_spark", without))
        diff = statistics.median(with_plugin) - statistics.median(without)
        ratio = statistics.median(with_plugin) / statistics.median(without)
        noise = statistics.pstdev(without)
        print(f"  difference {diff * 1000:+.1f} ms, ratio {ratio:.3f} (noise: sd {noise * 1000:.1f} ms)")

        empty = Path(tmp) / "empty"
        empty.mkdir()
        runs = max(3, args.runs // 3)
        preflight, bare = interleaved([*base, "--spark-preflight"], base, empty, env, runs)
        print(f"\n3. pytest --spark-preflight in an empty folder ({runs} interleaved runs each)")
        print(describe("pytest --spark-preflight", preflight))
        print(describe("pytest (empty run, exit 5)", bare))
        extra = statistics.median(preflight) - statistics.median(bare)
        print(f"  preflight costs {extra:.3f} s beyond pytest's own start (SPEC target without a GPU: < 1 s)")


if __name__ == "__main__":
    main()
