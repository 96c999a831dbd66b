"""G10's all-reduce probe against an nccl-tests-style loop, in one torchrun job.

Run on every rank through torchrun, from the repo root:

    python -m torch.distributed.run --nproc-per-node 2 benchmarks/bench_g10_allreduce.py

1. G10 runs through the engine with ``--spark-intrusive``: its probe child
   (``scripts/allreduce_child.py``) measures all-reduce bus bandwidth, one
   synchronize per iteration, median time, averaged over ranks.
2. This process then joins a process group of its own through ``env://``
   (the launcher's store, default prefix: the probe kept its keys under
   ``pytest_spark_g10/``, so this init must not trip over them) and times
   the same buffer the way nccl-tests does: back-to-back all-reduces, one
   synchronize, time averaged over ranks.

Rank 0 prints both bus bandwidths and their ratio (target: probe/reference
>= 0.9; the probe's per-iteration synchronize costs a launch latency each).
Numbers only; nothing is asserted.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pytest_dgx_spark.checks.g10_multinode import check as g10
from pytest_dgx_spark.engine import Engine
from pytest_dgx_spark.probes.machine import Machine
from pytest_dgx_spark.settings import Settings


def reference(size_bytes: int, iters: int, warmup: int = 5) -> tuple[str, float, float]:
    """``(backend, seconds per all-reduce averaged over ranks, busbw GB/s)``."""
    import torch
    import torch.distributed as dist

    backend = "nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if backend == "nccl":
        device = torch.device("cuda", local % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend)
    world = dist.get_world_size()

    def sync() -> None:
        if backend == "nccl":
            torch.cuda.synchronize(device)

    buf = torch.ones(size_bytes // 4, dtype=torch.float32, device=device)
    for _ in range(warmup):
        dist.all_reduce(buf)
    sync()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buf)
    sync()
    per = (time.perf_counter() - start) / iters
    t = torch.tensor([per], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    avg = float(t.item()) / world
    dist.destroy_process_group()
    return backend, avg, size_bytes / avg / 1e9 * 2 * (world - 1) / world


def main() -> int:
    rank = int(os.environ.get("RANK", "0"))
    if int(os.environ.get("WORLD_SIZE", "1")) < 2:
        print("run me under torchrun with 2 or more processes", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as empty:  # an empty rootdir: no configs to find
        settings = Settings(only=("G10",), intrusive=True, rootdir=Path(empty), timeout=20.0)
        start = time.perf_counter()
        result = Engine(settings, Machine(timeout=20.0)).run("G10")
        probe_s = time.perf_counter() - start
    probe = result.reading("allreduce_busbw")
    backend = result.reading("allreduce_backend")
    size = g10.PROBE_BYTES.get(str(backend.value) if backend else "gloo", 8 << 20)
    iters = g10.PROBE_ITERS.get(str(backend.value) if backend else "gloo", 8)
    ref_backend, ref_time, ref_busbw = reference(size, iters)
    if rank == 0:
        print(result.line())
        print(
            f"probe:     {probe.value if probe else 'n/a'} GB/s busbw ({probe_s:.1f} s wall, torch import included)"
        )
        print(
            f"reference: {ref_busbw:.2f} GB/s busbw ({ref_backend}, {size >> 20} MiB, {iters} back-to-back, "
            f"{ref_time * 1e3:.3f} ms each)"
        )
        if probe and isinstance(probe.value, (int, float)) and ref_busbw:
            print(f"ratio probe/reference: {probe.value / ref_busbw:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
