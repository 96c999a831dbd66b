#!/usr/bin/env python3
"""G5's copy probe against the best copy PyTorch gets on the same GPU.

SPEC target: the probe reaches within 10 % of the best copy bandwidth torch
gets on the same GPU (ratio >= 0.9), in < 2 s of GPU time.

In one run, on cuda:0:

1. our probe code, exactly as the torch child runs it
   (``pytest_dgx_spark/probes/scripts/torch_bandwidth.py: measure_copy`` with the
   configuration G5 sends: 2 x 1 GiB buffers, warm-up, 7 samples of ~25 ms),
   run three times interleaved with the sweep;
2. a sweep of plain torch copies: ``clone()`` and ``copy_()`` into a
   preallocated tensor, float32 and uint8, 256 MiB to 4 GiB (as far as free
   memory allows), each timed with CUDA events over ~100 ms, best of 5;
3. the ratio probe / best sweep figure, the probe's GPU and wall time.

With ``--engine`` it also runs the real check (``Engine(...).run("G5")`` with
``--spark-intrusive``) and prints its G-line. Without a CUDA GPU it says so
and exits 0.

    python benchmarks/bench_g5_bandwidth.py [--engine] [--buffer-mib 1024]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve().parents[1] / "pytest_dgx_spark" / "probes" / "scripts" / "torch_bandwidth.py"
MIB = 1 << 20


def load_probe() -> dict[str, Any]:
    """The probe script's functions, with the child protocol stubbed out."""
    namespace: dict[str, Any] = {
        "begin": lambda *a, **k: None,
        "data": lambda **k: None,
        "error_text": lambda exc: f"{type(exc).__name__}: {exc}",
    }
    exec(compile(SCRIPT.read_text(), str(SCRIPT), "exec"), namespace)
    return namespace


def timed_copies(torch: Any, fn: Any, bytes_moved: int, target_ms: float = 100.0, repeats: int = 5) -> float:
    """Best GB/s of ``repeats`` CUDA-event timings of ``fn`` looped ~target_ms."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    iters = max(1, min(1000, round(target_ms / max(start.elapsed_time(end), 1e-3))))
    best = 0.0
    for _ in range(repeats):
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        ms = start.elapsed_time(end)
        best = max(best, bytes_moved * iters / (ms / 1000.0) / 1e9)
    return best


def sweep(torch: Any, free: int) -> list[tuple[str, int, float]]:
    rows: list[tuple[str, int, float]] = []
    for mib in (256, 512, 1024, 2048, 4096):
        size = mib * MIB
        if 3 * size > free * 0.8:
            print(f"  (skipping {mib} MiB: {free / (1 << 30):.1f} GiB free)")
            continue
        for dtype, name in ((torch.float32, "float32"), (torch.uint8, "uint8")):
            n = size // torch.tensor([], dtype=dtype).element_size()
            src = torch.empty(n, dtype=dtype, device="cuda")
            src.fill_(1)
            dst = torch.empty_like(src)
            rows.append(
                (f"copy_  {name}", mib, timed_copies(torch, lambda d=dst, s=src: d.copy_(s), 2 * size))
            )
            holder: list[Any] = [None]

            def clone(s: Any = src, h: list[Any] = holder) -> None:
                h[0] = s.clone()

            rows.append((f"clone  {name}", mib, timed_copies(torch, clone, 2 * size)))
            del src, dst, holder
            torch.cuda.empty_cache()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--buffer-mib", type=int, default=1024, help="probe buffer size (G5's default 1024)")
    parser.add_argument(
        "--engine", action="store_true", help="also run the real G5 check with --spark-intrusive"
    )
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError as exc:
        print(f"no torch ({exc}): nothing to measure")
        return 0
    if not torch.cuda.is_available():
        print(
            f"no CUDA GPU (torch {torch.__version__}, torch.cuda.is_available() is False): nothing to measure"
        )
        return 0
    print(f"GPU: {torch.cuda.get_device_name(0)}; torch {torch.__version__} (CUDA {torch.version.cuda})")
    free, total = torch.cuda.mem_get_info()
    print(f"memory: {free / (1 << 30):.1f} GiB free of {total / (1 << 30):.1f} GiB")
    probe = load_probe()
    cfg = {"bytes": args.buffer_mib * MIB, "samples": 7, "warmup": 2, "sample_ms": 25.0}

    runs: list[dict[str, Any]] = []
    t0 = time.monotonic()
    runs.append(probe["measure_copy"](torch, cfg))
    print(
        f"probe run 1 (cold): {runs[-1].get('gbps')} GB/s, GPU {runs[-1].get('gpu_ms')} ms, wall {runs[-1].get('wall_s')} s"
    )
    print("sweep of plain torch copies (best of 5, ~100 ms each):")
    rows = sweep(torch, free)
    for label, mib, gbps in rows:
        print(f"  {label} {mib:>5} MiB  {gbps:9.1f} GB/s")
    for i in (2, 3):
        runs.append(probe["measure_copy"](torch, cfg))
        print(
            f"probe run {i}: {runs[-1].get('gbps')} GB/s, GPU {runs[-1].get('gpu_ms')} ms, wall {runs[-1].get('wall_s')} s"
        )
    elapsed = time.monotonic() - t0
    ok = [r for r in runs if r.get("gbps")]
    if not ok or not rows:
        print(f"probe answered {runs[-1]}; nothing to compare")
        return 0
    probe_gbps = statistics.median(r["gbps"] for r in ok)
    best_label, best_mib, best = max(rows, key=lambda r: r[2])
    ratio = probe_gbps / best
    gpu_ms = max(r.get("gpu_ms") or 0 for r in ok)
    wall = max(r.get("wall_s") or 0 for r in ok)
    print()
    print(f"best torch copy: {best:.1f} GB/s ({best_label.strip()} {best_mib} MiB)")
    print(
        f"our probe (median of {len(ok)} runs): {probe_gbps:.1f} GB/s; samples of the last run {ok[-1]['samples_gbps']}"
    )
    print(f"ratio probe / best: {ratio:.3f}  (target >= 0.9: {'MET' if ratio >= 0.9 else 'MISSED'})")
    print(
        f"probe GPU time: {gpu_ms:.1f} ms, wall incl. allocation {wall:.3f} s  (target < 2 s: {'MET' if gpu_ms < 2000 else 'MISSED'})"
    )
    print(f"whole benchmark: {elapsed:.1f} s")
    if args.engine:
        from pytest_dgx_spark.engine import Engine
        from pytest_dgx_spark.probes.machine import Machine
        from pytest_dgx_spark.settings import Settings

        start = time.monotonic()
        result = Engine(Settings(intrusive=True), Machine(), ["G5"]).run("G5")
        print(
            f"engine: {result.line()}  ({time.monotonic() - start:.2f} s including torch import in the child)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
