# G10 fleet child: every rank hands its fingerprint to every other rank over gloo on the CPU (it must
# work when NCCL or the GPU is the broken part). The store and the group carry the timeout, the parent's
# watchdog kills a stuck step; each rank writes "arrived/<rank>" first, so a rendezvous that times out
# names the ranks that never came (keys under _job_store.py's prefix).


def _loaded(prefix):
    """The first library mapped into this process whose name starts with ``prefix`` (the loader's pick)."""
    try:
        with open("/proc/self/maps") as fh:
            for line in fh:
                parts = line.split(None, 5)  # address perms offset dev inode [path]
                path = parts[5].strip() if len(parts) == 6 else ""
                if path.startswith("/") and _os.path.basename(path).startswith(prefix):
                    return path
    except OSError:
        pass
    return None


def _nccl_library():
    """The version the NCCL library this process loads reports itself: ``dlopen("libnccl.so.2")``
    after ``import torch`` returns the copy torch loaded (pip wheel, NGC's, LD_PRELOAD's), else
    the loader's pick: the library a collective would use, which pip metadata cannot say."""
    import ctypes

    try:
        get = ctypes.CDLL("libnccl.so.2").ncclGetVersion
    except (OSError, AttributeError) as exc:
        return {"nccl_lib": None, "nccl_lib_error": error_text(exc)}
    get.argtypes = [ctypes.POINTER(ctypes.c_int)]
    get.restype = ctypes.c_int
    code = ctypes.c_int(0)
    if get(ctypes.byref(code)) != 0 or code.value <= 0:
        return {"nccl_lib": None, "nccl_lib_error": "ncclGetVersion failed"}
    v = code.value  # NCCL >= 2.9: major*10000 + minor*100 + patch; before: major*1000 + minor*100 + patch
    major, rest = divmod(v, 10000) if v >= 10000 else divmod(v, 1000)
    return {"nccl_lib": "%d.%d.%d" % (major, rest // 100, rest % 100), "nccl_lib_path": _loaded("libnccl.so")}


def _all_gather_json(torch, dist, world, obj):
    """all_gather of a JSON document as bytes (all_gather_object needs numpy)."""
    payload = _json.dumps(obj, default=str).encode("utf-8")
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(sizes, torch.tensor([len(payload)], dtype=torch.int64))
    longest = max(int(s.item()) for s in sizes)
    mine = torch.zeros(longest, dtype=torch.uint8)
    mine[: len(payload)] = torch.tensor(list(payload), dtype=torch.uint8)
    bufs = [torch.zeros(longest, dtype=torch.uint8) for _ in range(world)]
    dist.all_gather(bufs, mine)
    return [_json.loads(bytes(b[: int(s.item())].tolist()).decode("utf-8")) for b, s in zip(bufs, sizes)]


def _open_store(dist, host, port, rank, world, timeout_s):
    """The job's store, reached within ``timeout_s``. A client's TCPStore retries a failed connect
    once after a random delay, each try as long as its timeout (three times ``timeout_s``, past the
    parent's allowance): so a client tries a second at a time until ``timeout_s`` is spent, then
    gets the full timeout for the store's waits; rank 0, hosting the store, opens it at once."""
    if rank == 0 and _os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return _job_store(dist, host, port, rank, world, timeout_s, "pytest_spark_fleet")
    deadline = _time.monotonic() + timeout_s
    while True:
        each = max(min(deadline - _time.monotonic(), 1.0), 0.1)
        try:
            prefixed = _job_store(dist, host, port, rank, world, each, "pytest_spark_fleet")
        except Exception:
            if _time.monotonic() + 0.2 >= deadline:
                raise
            _time.sleep(0.2)
            continue
        prefixed.set_timeout(_dt.timedelta(seconds=timeout_s))
        return prefixed


def _missing(store, world):
    """The ranks that never wrote their arrival key."""
    return [r for r in range(world) if not store.check(["arrived/%d" % r])]


def _exchange(cfg, rank, world, host, port):
    """Everything after the job's variables are known; every way out says why in ``data``."""
    begin("import torch", scale=cfg.get("import_scale", 6))
    try:
        import torch
        import torch.distributed as dist
    except BaseException as exc:
        return data(error="torch.distributed not importable: " + error_text(exc), cause="torch")
    if not dist.is_available() or not dist.is_gloo_available():
        return data(error="this torch build has no torch.distributed with gloo", cause="torch")
    fingerprint = dict(cfg.get("fingerprint") or {})
    versions = {"torch": str(torch.__version__), "torch_cuda": getattr(torch.version, "cuda", None)}
    fingerprint.update(versions, nccl_torch=_torch_nccl(torch))
    begin("read the NCCL library")
    fingerprint.update(_nccl_library())
    timeout = _dt.timedelta(seconds=float(cfg.get("timeout_s", 30)))
    timeout_s = timeout.total_seconds()
    store = "%s:%s" % (host, port)
    data(store=store)  # before the step: any line after a begin renews its allowance at scale 1
    begin("reach the rendezvous store", scale=2)
    try:
        prefixed = _open_store(dist, host, port, rank, world, timeout_s)
        prefixed.set("arrived/%d" % rank, "1")
    except Exception as exc:
        if rank == 0:  # rank 0 hosts the store (or torchrun's agent on its node does)
            why = "cannot open the rendezvous store at %s: %s" % (store, error_text(exc))
            return data(error=why, cause="store")
        why = "no rendezvous store answered at %s within %g s: %s" % (store, timeout_s, error_text(exc))
        return data(error=why, missing=[0])
    begin("rendezvous", scale=cfg.get("rendezvous_scale", 3))
    try:
        dist.init_process_group("gloo", store=prefixed, rank=rank, world_size=world, timeout=timeout)
    except Exception as exc:
        return data(error="rendezvous failed: " + error_text(exc), missing=_missing(prefixed, world))
    begin("exchange fingerprints")
    try:
        data(fingerprints=_all_gather_json(torch, dist, world, fingerprint))
    except Exception as exc:
        data(error="fingerprint exchange failed: " + error_text(exc), missing=_missing(prefixed, world))
    finally:
        _leave_group(dist)


def main():
    cfg = config()
    rank, world = _env_int("RANK"), _env_int("WORLD_SIZE")
    data(rank=rank, world_size=world)
    host, port = _os.environ.get("MASTER_ADDR"), _env_int("MASTER_PORT")
    if rank is None or world is None or world < 2 or not host or port is None:
        needs = "RANK, WORLD_SIZE >= 2, MASTER_ADDR, MASTER_PORT"
        data(error="not a multi-process job with a rendezvous point (%s)" % needs)
    else:
        _exchange(cfg, rank, world, host, port)
    done()
