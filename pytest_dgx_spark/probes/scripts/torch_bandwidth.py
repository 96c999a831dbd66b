# G5 step of the torch child: device copy bandwidth (intrusive; opt-in). Two large buffers copied
# device to device, timed with CUDA events after a warm-up, counting bytes read plus written: the
# median of samples that each repeat the copy for ~`sample_ms` (launch overhead is noise from GB10,
# ~10 ms a 1 GiB copy, to H200, ~0.5 ms). torch's same-dtype contiguous copy_ is a cudaMemcpyAsync.
# `measure_copy` is free of the child protocol so benchmarks can run it as is.
import statistics as _bw_statistics
import time as _bw_time


def _timed_copies(copy, start, end, elapsed, size, cfg, max_iters):
    """``(GB/s of each sample, copies a sample, GPU ms in all)``."""
    start.record()
    copy()
    end.record()
    end.synchronize()
    one_ms = max(float(elapsed(start, end)), 1e-3)
    iters = int(max(1, min(max_iters, round(float(cfg.get("sample_ms", 25.0)) / one_ms))))
    results, gpu_ms = [], one_ms
    for _ in range(max(1, int(cfg.get("samples", 7)))):
        start.record()
        for _ in range(iters):
            copy()
        end.record()
        end.synchronize()
        ms = float(elapsed(start, end))
        gpu_ms += ms
        if ms > 0:
            results.append(2.0 * size * iters / (ms / 1000.0) / 1e9)
    return results, iters, gpu_ms


def _summary(engine, results, size, iters, t_start, **extra):
    if not results:
        return {"error": "CUDA events measured no time"}
    return {
        "engine": engine, "gbps": round(_bw_statistics.median(results), 2),
        "samples_gbps": [round(r, 2) for r in results], "buffer_bytes": size, "iters": iters,
        "samples": len(results), "wall_s": round(_bw_time.monotonic() - t_start, 4), **extra,
    }


def measure_copy(torch, cfg):
    """Copy bandwidth through torch on cuda:0 (a refusal is ``{"skipped": why}``)."""
    size = int(cfg.get("bytes", 1 << 30))
    t_start = _bw_time.monotonic()
    try:
        free, total = torch.cuda.mem_get_info()
    except Exception:
        free = total = None
    if free is not None and free < 2 * size + (256 << 20):
        why = "the GPU reports %.1f GiB free, the probe needs 2 x %.2f GiB" % (free / 2**30, size / 2**30)
        return {"skipped": why, "free_bytes": free}
    src = torch.empty(size, dtype=torch.uint8, device="cuda")
    dst = torch.empty(size, dtype=torch.uint8, device="cuda")
    try:
        src.fill_(1)
        for _ in range(max(1, int(cfg.get("warmup", 2)))):
            dst.copy_(src)
        torch.cuda.synchronize()
        events = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        timed = _timed_copies(lambda: dst.copy_(src), *events, lambda a, b: a.elapsed_time(b), size, cfg,
                              int(cfg.get("max_iters", 200)))
    finally:
        src = dst = None  # the buffers go before empty_cache
        try:
            torch.cuda.empty_cache()
        except Exception:
            pass
    results, iters, gpu_ms = timed
    extra = {"gpu_ms": round(gpu_ms, 3), "free_bytes": free, "total_bytes": total}
    return _summary("torch", results, size, iters, t_start, **extra)


def measure_copy_cupy(cupy, cfg):
    """The same measurement through CuPy, for a torch without CUDA."""
    size = int(cfg.get("bytes", 1 << 30))
    t_start = _bw_time.monotonic()
    src = cupy.ones(size, dtype=cupy.uint8)
    dst = cupy.empty_like(src)

    def copy():
        dst[...] = src

    try:
        copy()
        cupy.cuda.Device().synchronize()
        events = cupy.cuda.Event(), cupy.cuda.Event()
        results, iters, _ = _timed_copies(copy, *events, cupy.cuda.get_elapsed_time, size, cfg, 200)
    finally:
        src = dst = None
    return _summary("cupy", results, size, iters, t_start)


def step_bandwidth(torch, cfg, cuda):
    begin("bandwidth", scale=3)
    cupy = None
    if not cuda.get("cuda_available"):
        try:
            import cupy
        except Exception:
            return data(bandwidth={"skipped": "torch sees no CUDA device and CuPy is not installed"})
    try:
        result = measure_copy_cupy(cupy, cfg) if cupy is not None else measure_copy(torch, cfg)
    except Exception as exc:
        result = {"error": error_text(exc)}
    data(bandwidth=result)
