# G10 all-reduce probe child: one rank of a torchrun job measures all-reduce bus bandwidth
# (NCCL on GPUs, gloo on CPU). A wrong NCCL_SOCKET_IFNAME or a missing peer hangs rendezvous or
# the first collective: every step begins, so the parent's watchdog kills a stuck one; the store
# and the group carry timeouts too, so the usual failure is an error line. busbw follows
# nccl-tests (doc/PERFORMANCE.md): algbw = bytes / time, busbw = algbw * 2 (n - 1) / n; the
# "group" figure averages the time over ranks as nccl-tests does, the same on every rank.


def _median(values):
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _job():
    """RANK, WORLD_SIZE, LOCAL_RANK and the rendezvous point, or None once why not is reported."""
    rank, world, local_rank = _env_int("RANK"), _env_int("WORLD_SIZE"), _env_int("LOCAL_RANK", 0)
    data(rank=rank, world_size=world, local_rank=local_rank)
    if rank is None or world is None or world < 2:
        data(error="not part of a multi-process job (RANK/WORLD_SIZE unset or WORLD_SIZE < 2)")
        return None
    host, port = _os.environ.get("MASTER_ADDR"), _env_int("MASTER_PORT")
    if not host or port is None:
        data(error="MASTER_ADDR/MASTER_PORT unset: no rendezvous point")
        return None
    return rank, world, local_rank, host, port


def _import_torch(cfg):
    """(torch, torch.distributed), or None once the reason is reported."""
    begin("import torch", scale=cfg.get("import_scale", 6))
    try:
        import torch
        import torch.distributed as dist
    except BaseException as exc:
        data(torch_import_error=error_text(exc))
        return None
    data(torch_version=str(torch.__version__))
    if not dist.is_available():
        data(error="this torch build has no torch.distributed")
        return None
    return torch, dist


def _backend_and_device(torch, dist, cfg, local_rank):
    """The backend asked for (or NCCL when every local rank has a GPU) and this rank's device."""
    wanted = cfg.get("backend") or "auto"
    local_world = _env_int("LOCAL_WORLD_SIZE", 1) or 1
    try:
        # NCCL needs a GPU of its own for every local rank ("invalid usage"): else gloo, the host path
        cuda = bool(torch.cuda.is_available()) and torch.cuda.device_count() >= local_world
    except Exception:
        cuda = False
    backend = wanted if wanted != "auto" else "nccl" if cuda and dist.is_nccl_available() else "gloo"
    if backend != "nccl":
        return backend, torch.device("cpu")
    device = torch.device("cuda", local_rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    if (nccl := _torch_nccl(torch)) is not None:
        data(nccl_version=nccl)
    data(device_name=torch.cuda.get_device_name(device))
    return backend, device


def _plan(cfg, backend):
    """Elements per buffer, timed iterations and warm-ups for this backend."""
    size = int((cfg.get("size_bytes") or {}).get(backend, 8 << 20))
    numel = max(1 << 20, min(size, 1 << 30)) // 4  # never above 1 GiB: 16 GB buffers can freeze a UMA box
    iters = int(cfg.get("iters", {}).get(backend, 10))
    data(backend=backend, size_bytes=numel * 4, iters=iters)
    return numel, iters, int(cfg.get("warmup", 3))


def _rendezvous(dist, cfg, job, backend, device):
    """Join the process group under a store prefix of this run; False once the error is reported."""
    rank, world, _local_rank, host, port = job
    rdzv_s, coll_s = float(cfg.get("rendezvous_timeout_s", 30)), float(cfg.get("collective_timeout_s", 10))
    begin("rendezvous", scale=cfg.get("rendezvous_scale", 3))
    try:
        prefixed = _job_store(dist, host, port, rank, world, rdzv_s, "pytest_spark_g10")
        timeout = _dt.timedelta(seconds=max(coll_s, rdzv_s))
        kwargs = dict(backend=backend, store=prefixed, rank=rank, world_size=world, timeout=timeout)
        if backend == "nccl":
            kwargs["device_id"] = device  # eager communicator init: a bad link fails here
        try:
            dist.init_process_group(**kwargs)
        except TypeError:
            kwargs.pop("device_id", None)
            dist.init_process_group(**kwargs)
    except Exception as exc:
        data(error="rendezvous failed: " + error_text(exc))
        return False
    return True


def _measure(torch, dist, cfg, rank, world, backend, device, plan):
    """Check one all-reduce's sum, warm up, time the iterations and share the median."""
    numel, iters, warmup = plan

    def sync():
        if backend == "nccl":
            torch.cuda.synchronize(device)

    begin("first all-reduce", scale=cfg.get("rendezvous_scale", 3))
    buf = torch.full((numel,), float(rank + 1), dtype=torch.float32, device=device)
    dist.all_reduce(buf)
    sync()
    expected = world * (world + 1) / 2
    got = [float(buf[0].item()), float(buf[-1].item())]
    data(wrong=any(abs(g - expected) > 1e-3 for g in got), check={"expected": expected, "got": got})
    for i in range(warmup):
        begin(f"warm-up all-reduce {i + 1}/{warmup}")
        buf.fill_(1.0)
        dist.all_reduce(buf)
        sync()
    times = []
    for i in range(iters):
        begin(f"all-reduce {i + 1}/{iters}")
        buf.fill_(1.0)
        sync()
        t0 = _time.perf_counter()
        dist.all_reduce(buf)
        sync()
        times.append(_time.perf_counter() - t0)
    own = _median(times)
    begin("share timings")
    shared = torch.tensor([own], dtype=torch.float64, device=device)
    dist.all_reduce(shared)
    group = float(shared.item()) / world
    factor = 2.0 * (world - 1) / world
    algbw, group_algbw = numel * 4 / own / 1e9, numel * 4 / group / 1e9
    data(
        times_s=[round(t, 6) for t in times], time_s=own, group_time_s=group, algbw_gbps=algbw,
        busbw_gbps=algbw * factor, group_algbw_gbps=group_algbw, group_busbw_gbps=group_algbw * factor,
    )


def main():
    cfg = config()
    job = _job()
    imported = _import_torch(cfg) if job is not None else None
    if imported is None:
        done()
        return
    torch, dist = imported
    backend, device = _backend_and_device(torch, dist, cfg, job[2])
    plan = _plan(cfg, backend)
    if not _rendezvous(dist, cfg, job, backend, device):
        done()
        return
    try:
        _measure(torch, dist, cfg, job[0], job[1], backend, device, plan)
    except Exception as exc:
        data(error="all-reduce failed: " + error_text(exc))
    finally:
        _leave_group(dist)
    done()
