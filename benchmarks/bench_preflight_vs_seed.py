#!/usr/bin/env python3
"""spark-preflight's quick tier against what a Spark owner would run instead.

Prints, measured side by side in this one run (interleaved repeats, medians):

* ``spark-preflight`` quick tier: all ten checks, no ``--intrusive``
  (optionally ``--offline``, so G8 does not wait on GitHub);
* the seed skill's ``preflight.sh`` (five checks: G1, G3, G4, G7, G9), run
  with ``bash`` from where it lies (``--seed PATH``; never copied here);
* ``python -m torch.utils.collect_env`` (when torch is importable);
* for reference, a bare ``python -c "import torch"`` (start, import, exit):
  what a tool that imports torch pays about once (the seed imports it
  twice; we once, in one child that skips the interpreter's teardown).

and the ratios, against the target "our ten checks take no longer than the
seed's five". Every tool runs with the same interpreter: its folder goes
first on PATH, so the seed's ``python3`` is this ``python``.

Usage:
  python benchmarks/bench_preflight_vs_seed.py [--runs 7] [--offline] [--seed PATH]
      [--thermal-seconds S] [--timeout S]

On the GPU machine, where ``../shared`` does not exist, pass ``--seed`` with
a copy of preflight.sh kept outside the repository's tracked files.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_SEED = Path("/work/shared/reference/seed-skill/skills/spark-training-gotchas/assets/preflight.sh")


def gline_count(text: str) -> int:
    """Lines that carry a check's result (``G3 INFO: …``): what each tool reports."""
    return sum(1 for ln in text.splitlines() if ln[:1] == "G" and ln.split(" ", 1)[0][1:].isdigit())


class Tool:
    """One command, its timings, and what its last run printed."""

    def __init__(self, name: str, argv: list[str], ok_codes: tuple[int, ...] = (0,)) -> None:
        self.name = name
        self.argv = argv
        self.ok_codes = ok_codes
        self.times: list[float] = []
        self.lines = 0
        self.last_code: int | None = None

    def run(self, cwd: Path, env: dict[str, str], *, record: bool = True) -> None:
        start = time.perf_counter()
        proc = subprocess.run(self.argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
        elapsed = time.perf_counter() - start
        if proc.returncode not in self.ok_codes:
            raise SystemExit(
                f"{self.name}: {' '.join(self.argv)} exited {proc.returncode}:\n"
                f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
            )
        self.last_code = proc.returncode
        self.lines = gline_count(proc.stdout)
        if record:
            self.times.append(elapsed)

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    def row(self) -> str:
        spread = statistics.pstdev(self.times) if len(self.times) > 1 else 0.0
        what = f"{self.lines} result lines" if self.lines else "report"
        return (
            f"  {self.name:<44} median {self.median:7.3f} s  (sd {spread:5.3f}, min {min(self.times):6.3f}, "
            f"n={len(self.times)}; {what})"
        )


def spark_preflight_argv(args: argparse.Namespace) -> list[str]:
    """The console script next to this interpreter, else ``-m pytest_spark.cli``."""
    script = Path(sys.executable).with_name("spark-preflight")
    argv = [str(script)] if script.exists() else [sys.executable, "-m", "pytest_spark.cli"]
    if args.offline:
        argv.append("--offline")
    if args.thermal_seconds is not None:
        argv += ["--thermal-seconds", str(args.thermal_seconds)]
    if args.timeout is not None:
        argv += ["--timeout", str(args.timeout)]
    return argv


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="timed runs of each tool (default 7)")
    parser.add_argument("--seed", type=Path, default=DEFAULT_SEED, help="the seed's preflight.sh")
    parser.add_argument("--offline", action="store_true", help="pass --offline (G8 does not ask GitHub)")
    parser.add_argument(
        "--thermal-seconds", type=float, default=None, help="G4's sample (default: the tool's)"
    )
    parser.add_argument("--timeout", type=float, default=None, help="spark-preflight --timeout")
    args = parser.parse_args()
    if not args.seed.is_file():
        print(
            f"bench_preflight_vs_seed: the seed's preflight.sh is not at {args.seed}; pass --seed PATH",
            file=sys.stderr,
        )
        return 2
    if shutil.which("bash") is None:
        print("bench_preflight_vs_seed: bash is needed to run the seed's preflight.sh", file=sys.stderr)
        return 2

    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", os.defpath)])
    for var in ("PYTEST_ADDOPTS", "SPARK_PREFLIGHT_HOST_ROOT"):
        env.pop(var, None)
    has_torch = importlib.util.find_spec("torch") is not None

    tools = [
        Tool("spark-preflight (10 checks, quick tier)", spark_preflight_argv(args), ok_codes=(0, 1)),
        Tool("seed preflight.sh (5 checks)", ["bash", str(args.seed)]),
    ]
    if has_torch:
        tools.append(
            Tool("python -m torch.utils.collect_env", [sys.executable, "-m", "torch.utils.collect_env"])
        )
        tools.append(Tool('python -c "import torch" (reference)', [sys.executable, "-c", "import torch"]))

    print(f"python {sys.version.split()[0]} at {sys.executable}; torch importable: {has_torch}")
    print(f"machine: {os.uname().nodename}, {os.uname().machine}, {os.cpu_count()} cpus")
    print(f"seed: {args.seed}")
    print(f"spark-preflight: {' '.join(tools[0].argv)}")

    # an empty folder: G10 finds no config there, pytest no ini, nothing of this checkout leaks in
    cwd = Path(tempfile.mkdtemp(prefix="bench-preflight-"))
    try:
        for tool in tools:  # warm the page cache and .pyc files; not timed
            tool.run(cwd, env, record=False)
        for i in range(args.runs):  # interleaved, the order rotating, so drift hits every tool alike
            k = i % len(tools)
            for tool in tools[k:] + tools[:k]:
                tool.run(cwd, env)
    finally:
        shutil.rmtree(cwd, ignore_errors=True)

    print(f"\n{args.runs} interleaved runs each (medians):")
    for tool in tools:
        print(tool.row())
    ours, seed = tools[0], tools[1]
    ratio = ours.median / seed.median
    print(
        f"\n  spark-preflight / seed preflight.sh = {ratio:.2f}  "
        f"({ours.lines} checks in {ours.median:.2f} s vs {seed.lines} in {seed.median:.2f} s; "
        f"per check {ours.median / max(ours.lines, 1):.3f} s vs {seed.median / max(seed.lines, 1):.3f} s)"
    )
    verdict = "met" if ratio <= 1.0 else "NOT met"
    print(f"  target: our ten checks take no longer than the seed's five -> {verdict}")
    if has_torch:
        collect, bare = tools[2], tools[3]
        print(f"  spark-preflight / collect_env = {ours.median / collect.median:.2f}")
        print(
            f"  against one bare `import torch` ({bare.median:.2f} s, start to exit): spark-preflight "
            f"{ours.median - bare.median:+.2f} s, the seed {seed.median - bare.median:+.2f} s (it imports torch "
            "twice); our torch child skips the interpreter's teardown (os._exit), so it can come out ahead"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
