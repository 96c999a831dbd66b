# G10 fleet child: every rank of a multi-node job hands its fingerprint to every other rank over
# gloo on the CPU (it must work when NCCL or the GPU is the broken part). A peer that never
# arrives would block rendezvous: the store and the group carry the timeout, the parent's
# watchdog kills a stuck step. Each rank writes "arrived/<rank>" before the group forms, so a
# rendezvous that times out names the ranks that never came (keys under _job_store.py's prefix).


def _versions(torch):
    return {"torch": str(torch.__version__), "torch_cuda": getattr(torch.version, "cuda", None), "nccl_torch": _torch_nccl(torch)}


def _loaded(prefix):
    """The file of the first library mapped into this process whose name
    starts with ``prefix`` (what the dynamic loader really picked)."""
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
        lib = ctypes.CDLL("libnccl.so.2")
        get = lib.ncclGetVersion
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
    size = torch.tensor([len(payload)], dtype=torch.int64)
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(sizes, size)
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
        left = deadline - _time.monotonic()
        try:
            prefixed = _job_store(dist, host, port, rank, world, max(min(left, 1.0), 0.1), "pytest_spark_fleet")
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


def main():
    cfg = config()
    rank = _env_int("RANK")
    world = _env_int("WORLD_SIZE")
    data(rank=rank, world_size=world)
    host = _os.environ.get("MASTER_ADDR")
    port = _env_int("MASTER_PORT")
    if rank is None or world is None or world < 2 or not host or port is None:
        data(error="not a multi-process job with a rendezvous point (RANK, WORLD_SIZE >= 2, MASTER_ADDR, MASTER_PORT)")
        done()
        return
    begin("import torch", scale=cfg.get("import_scale", 6))
    try:
        import torch
        import torch.distributed as dist
    except BaseException as exc:
        data(error="torch.distributed not importable: " + error_text(exc), cause="torch")
        done()
        return
    if not dist.is_available() or not dist.is_gloo_available():
        data(error="this torch build has no torch.distributed with gloo", cause="torch")
        done()
        return
    fingerprint = dict(cfg.get("fingerprint") or {})
    fingerprint.update(_versions(torch))
    begin("read the NCCL library")
    fingerprint.update(_nccl_library())
    timeout = _dt.timedelta(seconds=float(cfg.get("timeout_s", 30)))

    store = "%s:%s" % (host, port)
    data(store=store)  # before the step: any line after a begin renews its allowance at scale 1
    begin("reach the rendezvous store", scale=2)
    try:
        prefixed = _open_store(dist, host, port, rank, world, timeout.total_seconds())
        prefixed.set("arrived/%d" % rank, "1")
    except Exception as exc:
        if rank != 0:  # rank 0 hosts the store (or torchrun's agent on its node does): it is not there
            data(
                error="no rendezvous store answered at %s within %g s: %s"
                % (store, timeout.total_seconds(), error_text(exc)),
                missing=[0],
            )
        else:
            data(error="cannot open the rendezvous store at %s: %s" % (store, error_text(exc)), cause="store")
        done()
        return
    begin("rendezvous", scale=cfg.get("rendezvous_scale", 3))
    try:
        dist.init_process_group("gloo", store=prefixed, rank=rank, world_size=world, timeout=timeout)
    except Exception as exc:
        data(error="rendezvous failed: " + error_text(exc), missing=_missing(prefixed, world))
        done()
        return
    begin("exchange fingerprints")
    try:
        data(fingerprints=_all_gather_json(torch, dist, world, fingerprint))
    except Exception as exc:
        data(error="fingerprint exchange failed: " + error_text(exc), missing=_missing(prefixed, world))
    finally:
        _leave_group(dist)
    done()
