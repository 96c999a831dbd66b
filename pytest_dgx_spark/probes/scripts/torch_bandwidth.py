# G5 step of the torch child: device copy bandwidth (intrusive; opt-in).
#
# A device-to-device copy of two large buffers, timed with CUDA events (GPU
# time, not host time), after a warm-up, counting the bytes read plus the
# bytes written, as the median of several samples. Each sample repeats the
# copy enough times to last ~`sample_ms`, so launch overhead is noise on any
# GPU from GB10 (~200 GB/s: one 1 GiB copy ~10 ms) to H200 (~4 TB/s: ~0.5 ms).
# torch's same-dtype contiguous copy_ is a cudaMemcpyAsync, the same path
# clone() takes, so this is the best copy torch itself gets.
# `measure_copy` is free of the child protocol so benchmarks can run it as is.
import time as _bw_time


def _median(values):
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0


def measure_copy(torch, cfg):
    """Copy bandwidth through torch on cuda:0; returns a dict (never raises
    for a refusal: {"skipped": why})."""
    size = int(cfg.get("bytes", 1 << 30))
    samples = max(1, int(cfg.get("samples", 7)))
    warmup = max(1, int(cfg.get("warmup", 2)))
    sample_ms = float(cfg.get("sample_ms", 25.0))
    max_iters = int(cfg.get("max_iters", 200))
    t_start = _bw_time.monotonic()
    try:
        free, total = torch.cuda.mem_get_info()
    except Exception:
        free = total = None
    if free is not None and free < 2 * size + (256 << 20):
        return {
            "skipped": "the GPU reports %.1f GiB free, the probe needs 2 x %.2f GiB"
            % (free / 2**30, size / 2**30),
            "free_bytes": free,
        }
    src = torch.empty(size, dtype=torch.uint8, device="cuda")
    dst = torch.empty(size, dtype=torch.uint8, device="cuda")
    try:
        src.fill_(1)
        for _ in range(warmup):
            dst.copy_(src)
        torch.cuda.synchronize()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        one_ms = max(float(start.elapsed_time(end)), 1e-3)
        iters = int(max(1, min(max_iters, round(sample_ms / one_ms))))
        results = []
        gpu_ms = one_ms
        for _ in range(samples):
            start.record()
            for _ in range(iters):
                dst.copy_(src)
            end.record()
            end.synchronize()
            ms = float(start.elapsed_time(end))
            gpu_ms += ms
            if ms > 0:
                results.append(2.0 * size * iters / (ms / 1000.0) / 1e9)
    finally:
        del src, dst
        try:
            torch.cuda.empty_cache()
        except Exception:
            pass
    if not results:
        return {"error": "CUDA events measured no time"}
    return {
        "engine": "torch",
        "gbps": round(_median(results), 2),
        "samples_gbps": [round(r, 2) for r in results],
        "buffer_bytes": size,
        "iters": iters,
        "samples": len(results),
        "gpu_ms": round(gpu_ms, 3),
        "wall_s": round(_bw_time.monotonic() - t_start, 4),
        "free_bytes": free,
        "total_bytes": total,
    }


def measure_copy_cupy(cupy, cfg):
    """The same measurement through CuPy, for a torch without CUDA."""
    size = int(cfg.get("bytes", 1 << 30))
    samples = max(1, int(cfg.get("samples", 7)))
    sample_ms = float(cfg.get("sample_ms", 25.0))
    t_start = _bw_time.monotonic()
    src = cupy.ones(size, dtype=cupy.uint8)
    dst = cupy.empty_like(src)
    try:
        dst[...] = src
        cupy.cuda.Device().synchronize()
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        dst[...] = src
        end.record()
        end.synchronize()
        one_ms = max(float(cupy.cuda.get_elapsed_time(start, end)), 1e-3)
        iters = int(max(1, min(200, round(sample_ms / one_ms))))
        results = []
        for _ in range(samples):
            start.record()
            for _ in range(iters):
                dst[...] = src
            end.record()
            end.synchronize()
            ms = float(cupy.cuda.get_elapsed_time(start, end))
            if ms > 0:
                results.append(2.0 * size * iters / (ms / 1000.0) / 1e9)
    finally:
        del src, dst
    if not results:
        return {"error": "CUDA events measured no time"}
    return {
        "engine": "cupy",
        "gbps": round(_median(results), 2),
        "samples_gbps": [round(r, 2) for r in results],
        "buffer_bytes": size,
        "iters": iters,
        "samples": len(results),
        "wall_s": round(_bw_time.monotonic() - t_start, 4),
    }


def step_bandwidth(torch, cfg, cuda):
    begin("bandwidth", scale=3)
    if not cuda.get("cuda_available"):
        try:
            import cupy
        except Exception:
            data(bandwidth={"skipped": "torch sees no CUDA device and CuPy is not installed"})
            return
        try:
            result = measure_copy_cupy(cupy, cfg)
        except Exception as exc:
            result = {"error": error_text(exc)}
        data(bandwidth=result)
        return
    try:
        result = measure_copy(torch, cfg)
    except Exception as exc:
        result = {"error": error_text(exc)}
    data(bandwidth=result)
