#!/usr/bin/env python3
"""The watcher's own CPU: ``spark-preflight watch`` around a job that does nothing (``sleep``).

Issue 32's bound: at the default interval (5 s) the watcher, with its NVML child, uses at most
1 % of one core. Two watches run, a short and a long one; the CPU time the watcher and its
children used (``RUSAGE_CHILDREN`` of this script, which runs nothing else; ``sleep`` itself uses
~0) is measured for each, and the difference over the difference in wall time is the steady rate
(the start-up, Python and the NVML child importing, counted apart). On a machine without a GPU
the NVML test double answers (``--double``, the default there), so every tick still asks NVML for
a sample and its processes, reads /proc/meminfo, /proc/buddyinfo and the kernel log.

    python benchmarks/bench_watch.py [--seconds 60] [--interval 5] [--double | --no-double]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOUBLE = ROOT / "tests" / "doubles" / "nvml"


def cpu_of(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one run and everything it started."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    begun = time.monotonic()
    subprocess.run(argv, env=env, check=False, stdout=subprocess.DEVNULL)
    wall = time.monotonic() - begun
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="the long watch (default 60)")
    ap.add_argument("--interval", type=float, default=5.0)
    ap.add_argument(
        "--double",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="answer NVML with the test double (default: when nvidia-smi is not on PATH)",
    )
    ns = ap.parse_args()
    env = dict(os.environ)
    double = ns.double if ns.double is not None else shutil.which("nvidia-smi") is None
    with tempfile.TemporaryDirectory() as folder:
        if double:
            sys.path.insert(0, str(ROOT / "tests"))
            from doubles import gb10  # the GB10 scenario the tests use

            scenario = Path(folder) / "nvml.json"
            scenario.write_text(
                json.dumps(gb10.nvml(device={"compute_procs": [{"pid": 1, "used_bytes": 1 << 30}]}))
            )
            env.update(
                SPARK_FAKE_NVML=str(scenario),
                PYTHONPATH=os.pathsep.join(filter(None, [str(DOUBLE), env.get("PYTHONPATH")])),
            )
        timeline = str(Path(folder) / "t.jsonl")
        watch = [
            sys.executable,
            "-m",
            "pytest_dgx_spark",
            "watch",
            "--interval",
            str(ns.interval),
            "--timeline",
            timeline,
            "--",
        ]
        short_s = max(2 * ns.interval, 5.0)
        short_cpu, short_wall = cpu_of([*watch, "sleep", str(short_s)], env)
        long_cpu, long_wall = cpu_of([*watch, "sleep", str(short_s + ns.seconds)], env)
        size = os.path.getsize(timeline)
    steady = (long_cpu - short_cpu) / (long_wall - short_wall)
    print(f"NVML: {'test double' if double else 'this machine'}; interval {ns.interval:g} s")
    print(f"short watch: {short_cpu:.3f} s CPU in {short_wall:.1f} s (start-up included)")
    print(f"long watch:  {long_cpu:.3f} s CPU in {long_wall:.1f} s; timeline {size:,} bytes")
    print(
        f"steady CPU of the watcher and its NVML child: {100 * steady:.3f} % of one core "
        f"(bound: 1 %) -> {'ok' if steady <= 0.01 else 'OVER'}"
    )
    return 0 if steady <= 0.01 else 1


if __name__ == "__main__":
    sys.exit(main())
