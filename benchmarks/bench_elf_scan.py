#!/usr/bin/env python3
"""G1's ELF scan: files per second, our struct reader vs pyelftools.

SPEC target: a full ML environment (~1,000 shared objects) in < 0.5 s,
reading only ELF headers. Two trees are measured with both readers, in the
same run so the ratio is fair:

* a generated tree of ``--files`` shared objects (gcc-built modules linking
  stub ``libcudart.so.12``/``.so.13``, mixed with copies of this Python's real
  extension modules), spread over folders like a site-packages;
* the real package folders of the running Python (what ``spark-preflight``
  scans), plus the distribution-owner map G1 builds when something is found.

Times are best-of and median of ``--repeat`` warm runs (the page cache holds
the headers after the first run; the first, cold, run is printed apart).

    python benchmarks/bench_elf_scan.py [--files 1000] [--repeat 5] [--root DIR ...]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pytest_dgx_spark.probes import dist_files, elf

STUB = "int cudaRuntimeGetVersion(int *v) { *v = %d; return 0; }\n"
MODULE = "extern int cudaRuntimeGetVersion(int *);\nint spark_probe_%d(void) { int v; return cudaRuntimeGetVersion(&v) + v; }\n"


def build_objects(work: Path) -> list[Path]:
    """Four real shared objects built with gcc (none when gcc is missing)."""
    if shutil.which("gcc") is None:
        return []
    out: list[Path] = []
    for major, version in ((12, 12080), (13, 13000)):
        src = work / f"stub{major}.c"
        src.write_text(STUB % version)
        lib = work / f"libcudart.so.{major}"
        subprocess.run(
            ["gcc", "-shared", "-fPIC", f"-Wl,-soname,libcudart.so.{major}", "-o", str(lib), str(src)],
            check=True,
            timeout=60,
        )
        msrc = work / f"mod{major}.c"
        msrc.write_text(MODULE % major)
        mod = work / f"mod{major}.so"
        subprocess.run(
            [
                "gcc",
                "-shared",
                "-fPIC",
                "-o",
                str(mod),
                str(msrc),
                "-Wl,--no-as-needed",
                f"-L{work}",
                f"-l:{lib.name}",
            ],
            check=True,
            timeout=60,
        )
        out += [lib, mod]
    return out


def real_objects(roots: list[str], limit: int = 400) -> list[Path]:
    stats = elf.ScanStats()
    return [Path(p) for _, p, _ in elf.iter_shared_objects(roots, stats, max_files=limit)]


def generated_tree(base: Path, n: int, sources: list[Path]) -> Path:
    site = base / "site-packages"
    for i in range(n):
        src = sources[i % len(sources)]
        folder = site / f"pkg{i // 20:03d}" / ("lib" if i % 3 == 0 else "")
        folder.mkdir(parents=True, exist_ok=True)
        name = f"m{i}.cpython-312-x86_64-linux-gnu.so" if i % 2 else f"libx{i}.so.{i % 5}"
        shutil.copyfile(src, folder / name)
        if i % 10 == 0:  # site-packages are mostly not shared objects
            (folder / f"mod{i}.py").write_text("x = 1\n")
    return site


def measure(fn: Callable[[], dict], repeat: int) -> tuple[float, list[float], dict]:
    start = time.perf_counter()
    result = fn()
    cold = time.perf_counter() - start
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return cold, times, result


def report(label: str, roots: list[str], repeat: int, readers: dict[str, Callable]) -> dict[str, float]:
    best: dict[str, float] = {}
    for name, reader in readers.items():
        cold, times, result = measure(lambda r=reader: elf.scan(roots, reader=r), repeat)
        n = result.files
        b, med = min(times), statistics.median(times)
        best[name] = b
        skipped = sum(result.skipped.values())
        print(
            f"{label:10s} {name:10s} files={n:5d} skipped={skipped:3d} linkers={len(result.linkers):4d} "
            f"cold={cold * 1000:8.1f} ms best={b * 1000:8.1f} ms median={med * 1000:8.1f} ms "
            f"-> {n / b:9.0f} files/s; per 1,000 files: {b / max(n, 1) * 1000:.3f} s"
        )
    if "struct" in best and "pyelftools" in best:
        print(f"{label:10s} ratio pyelftools/struct (best): {best['pyelftools'] / best['struct']:.1f}x")
    stats = elf.ScanStats()
    start = time.perf_counter()
    for _ in elf.iter_shared_objects(roots, stats):
        pass
    print(
        f"{label:10s} walk only (no ELF reads): {(time.perf_counter() - start) * 1000:.1f} ms over {stats.dirs} folders"
    )
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument(
        "--root", action="append", help="scan these folders instead of this Python's site-packages"
    )
    ap.add_argument(
        "--exclude", action="append", default=[], help="leave this folder out (a carried pyelftools)"
    )
    args = ap.parse_args()

    readers: dict[str, Callable] = {"struct": elf.read_dynamic}
    try:
        import elftools  # noqa: F401

        readers["pyelftools"] = elf.read_dynamic_pyelftools
    except ImportError:
        print("pyelftools not installed: measuring the struct reader only")

    print(f"python {sys.version.split()[0]} on {os.uname().machine}, {os.cpu_count()} CPUs")
    excluded = {os.path.realpath(x) for x in args.exclude}
    roots = args.root or [r for r in elf.site_roots(sys.path) if r not in excluded]
    with tempfile.TemporaryDirectory(prefix="bench-elf-") as tmp:
        work = Path(tmp)
        sources = build_objects(work) + real_objects(roots)
        if not sources:
            print("no gcc and no shared object to copy: generated tree skipped")
        else:
            site = generated_tree(work, args.files, sources)
            print(f"generated tree: {args.files} shared objects ({len(sources)} distinct sources)")
            report("generated", [str(site)], args.repeat, readers)

    print(f"real environment: {', '.join(roots)}")
    best = report("real", roots, args.repeat, readers)
    start = time.perf_counter()
    owners = dist_files.shared_object_owners(roots)
    print(
        f"real       owner map: {len(owners['owners'])} shared objects of {owners['dists']} distributions "
        f"in {(time.perf_counter() - start) * 1000:.1f} ms"
    )
    target = 0.5
    verdict = "meets" if best["struct"] < target else "MISSES"
    print(f"struct reader {verdict} the < {target} s target on the real environment ({best['struct']:.3f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
