#!/usr/bin/env python3
"""How long the Slurm prolog and health check take on this machine (docs/SLURM.md states it).

Runs ``spark-slurm-prolog`` and ``spark-slurm-health``'s preflight (``python -m
pytest_dgx_spark.slurm prolog`` and the health check's ``--only G4``; the health check's
``scontrol`` calls are not timed, they need a cluster) ``--runs`` times, interleaved, and prints
the median, min and max wall time of each beside the budget, with the exit codes seen. Run it as
root on a Spark (or the GPU machine) with the package installed; nothing here calls Slurm.

    python benchmarks/bench_slurm_prolog.py --runs 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

from pytest_dgx_spark import slurm


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    ns = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="spark-slurm-bench-") as state:
        env = {**os.environ, slurm.STATE_DIR_ENV: state, slurm.ARGS_FILE_ENV: os.path.join(state, "none")}
        commands = {
            "prolog (spark-slurm-prolog)": [sys.executable, "-m", "pytest_dgx_spark.slurm", "prolog"],
            "health check's preflight (--only G4)": [sys.executable, "-m", "pytest_dgx_spark", "--json",
                                                     "--offline", "--only", slurm.HEALTH_CHECKS],
        }  # fmt: skip
        times: dict[str, list[float]] = {name: [] for name in commands}
        codes: dict[str, set[int]] = {name: set() for name in commands}
        for _ in range(ns.runs):
            for name, argv in commands.items():
                started = time.perf_counter()
                done = subprocess.run(argv, capture_output=True, env=env, timeout=slurm.BUDGET_S * 2)
                times[name].append(time.perf_counter() - started)
                codes[name].add(done.returncode)
    print(f"{'':40} {'median':>8} {'min':>8} {'max':>8}  budget {slurm.BUDGET_S:g} s")
    for name, seen in times.items():
        print(f"{name:40} {statistics.median(seen):7.2f}s {min(seen):7.2f}s {max(seen):7.2f}s"
              f"  exit {sorted(codes[name])}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
