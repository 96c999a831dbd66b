# G10 fleet child: every rank of a multi-node job hands its fingerprint to
# every other rank, over a gloo process group on the CPU.
#
# Why gloo on the CPU: the comparison must work when NCCL (or the GPU) is the
# broken part. Why a child: a peer that never arrives would block rendezvous;
# the store and the group carry the timeout, and the parent's watchdog kills
# this process group if a step outlives its allowance anyway.
#
# Before the group forms, each rank writes "arrived/<rank>" to the store, so a
# rendezvous that times out can name the ranks that never came. Keys live
# under their own prefix ("pytest_spark_fleet/<seq>/"): the launcher's store is
# shared with the training code that runs later in this same worker.
import datetime as _dt


def _versions(torch):
    out = {"torch": str(torch.__version__), "torch_cuda": getattr(torch.version, "cuda", None)}
    try:
        nccl = torch.cuda.nccl.version()
        out["nccl_torch"] = ".".join(str(v) for v in nccl) if isinstance(nccl, tuple) else str(nccl)
    except Exception:
        out["nccl_torch"] = None
    return out


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
        data(error="torch.distributed not importable: " + error_text(exc))
        done()
        return
    if not dist.is_available() or not dist.is_gloo_available():
        data(error="this torch build has no torch.distributed with gloo")
        done()
        return
    fingerprint = dict(cfg.get("fingerprint") or {})
    fingerprint.update(_versions(torch))
    timeout = _dt.timedelta(seconds=float(cfg.get("timeout_s", 30)))

    begin("rendezvous", scale=cfg.get("rendezvous_scale", 3))
    try:
        prefixed = _job_store(dist, host, port, rank, world, timeout.total_seconds(), "pytest_spark_fleet")
        prefixed.set("arrived/%d" % rank, "1")
    except Exception as exc:
        data(error="cannot reach the rendezvous store at %s:%s: %s" % (host, port, error_text(exc)))
        done()
        return
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
