#!/usr/bin/env python3
"""diagnose's throughput on a large log against ``grep -E -f`` with the same patterns.

Issue 23's target: ``spark-preflight diagnose`` reads a log in at most 2x the
time ``grep -E -f patterns LOG`` takes on the same file, memory flat. The log
is built from the healthy lines of a real two-Spark NCCL start
(``tests/data/diagnose/healthy_nccl_init.txt``: its whitelisted ``dlvsym`` and
``GPU Direct RDMA Disabled`` lines are realistic floods), with one failure line
near its end. The runs are interleaved (grep, diagnose with grep -F, diagnose
without grep on PATH: its prefilter on RE2 when google-re2 is installed, and on
Python's ``re`` as an install without it, repeated) and the medians compared;
diagnose's peak RSS is its child's ``ru_maxrss``. Issue 30: <= 2x also without grep.

    python benchmarks/bench_diagnose.py [--mib 500] [--runs 3] [--log PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FILLER = ROOT / "tests" / "data" / "diagnose" / "healthy_nccl_init.txt"
FAILURE = "ImportError: libnvrtc.so.12: cannot open shared object file: No such file or directory\n"
#: argv[2]: grep (grep -F on PATH), no-grep (PATH without grep: the filter child, on RE2 when
#: installed), no-re2 (no grep, and RE2 hidden as an install without google-re2 runs)
SCAN = ("import os, sys\nfrom pytest_dgx_spark import logengine, logscan\n"
        "from pytest_dgx_spark.redact import outgoing\n"
        "if sys.argv[2] != 'grep':\n    os.environ['PATH'] = '/nonexistent'\n"
        "if sys.argv[2] == 'no-re2':\n    logengine.re2 = None\n"
        "m = logscan.Matcher(logscan.load_table())\n"
        "s = m.scan(sys.argv[1], outgoing())\n"
        "print(s.lines, sum(s.counts.values()), s.error)\n")  # fmt: skip


def build_log(path: Path, mib: int) -> None:
    lines = [ln + "\n" for ln in FILLER.read_text(encoding="utf-8").splitlines() if ln.strip()]
    block = "".join(lines * 200).encode()
    with open(path, "wb") as fh:
        for _ in range(max(1, (mib << 20) // len(block))):
            fh.write(block)
        fh.write(FAILURE.encode())
        fh.write(block[:100000])


def patterns_file(work: Path) -> Path:
    from pytest_dgx_spark.logscan import builtin_table

    path = work / "patterns.txt"
    path.write_text("\n".join(s.pattern.pattern for s in builtin_table()) + "\n")
    return path


def timed(argv: list[str]) -> tuple[float, str, int]:
    """Wall seconds, stdout, and the child's peak RSS in KiB."""
    start = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    took = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return took, done.stdout.strip(), max(peak, before)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=500, help="size of the generated log (default 500 MiB)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--log", type=Path, help="measure this log instead of a generated one")
    ns = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        log = ns.log or work / "train.log"
        if ns.log is None:
            build_log(log, ns.mib)
        pats = patterns_file(work)
        size = log.stat().st_size
        cases = {
            "grep -E -f": ["grep", "-E", "-c", "-f", str(pats), str(log)],
            "diagnose (grep -F)": [sys.executable, "-c", SCAN, str(log), "grep"],
            "diagnose (no grep)": [sys.executable, "-c", SCAN, str(log), "no-grep"],
        }
        from pytest_dgx_spark import logengine

        if logengine.re2 is not None:  # the same without grep, as an install without google-re2 reads
            cases["diagnose (no grep, no RE2)"] = [sys.executable, "-c", SCAN, str(log), "no-re2"]
        times: dict[str, list[float]] = {k: [] for k in cases}
        said: dict[str, str] = {}
        timed(cases["grep -E -f"])  # warm the page cache
        for _ in range(ns.runs):
            for name, argv in cases.items():
                took, out, _ = timed(argv)
                times[name].append(took)
                said[name] = out
        base = statistics.median(times["grep -E -f"])
        print(f"log: {size / (1 << 20):.0f} MiB, {os.cpu_count()} CPUs, median of {ns.runs} interleaved runs")
        for name, ts in times.items():
            med = statistics.median(ts)
            print(f"  {name:<20} {med:7.2f} s  {size / (1 << 20) / med:7.1f} MiB/s  {med / base:5.2f}x grep  "
                  f"(output: {said[name]})")  # fmt: skip
        for name in ("diagnose (grep -F)", "diagnose (no grep)"):
            ratio = statistics.median(times[name]) / base
            print(f"target: {name} <= 2x grep -E -f: {ratio:.2f}x ({'met' if ratio <= 2 else 'NOT met'})")
        print(json.dumps({k: round(statistics.median(v), 3) for k, v in times.items()}))
        print(f"peak RSS of any child (KiB): {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
