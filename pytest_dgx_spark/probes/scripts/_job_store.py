# Shared by the children that join a multi-process job (allreduce_child.py, fleet_child.py),
# joined after _protocol.py. The launcher's store (torchrun's agent store at MASTER_ADDR:
# MASTER_PORT) is shared with the training code that may run later in this worker: keys a probe
# writes (the NCCL unique id, barrier counters) live under "<prefix>/<this run's number>/".
import datetime as _dt


def _env_int(name, default=None):
    try:
        return int(_os.environ.get(name, ""))
    except ValueError:
        return default


def _job_store(dist, host, port, rank, world, timeout_s, prefix):
    """The job's rendezvous store under ``prefix/<seq>``: rank 0 hosts it unless torchrun's agent does."""
    master = rank == 0 and _os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True"
    store = dist.TCPStore(
        host, port, world_size=world if master else None, is_master=master,
        timeout=_dt.timedelta(seconds=timeout_s), wait_for_workers=False,
    )
    seq = store.add("%s/seq/%d" % (prefix, rank), 1)
    return dist.PrefixStore("%s/%d" % (prefix, seq), store)


def _torch_nccl(torch):
    """The NCCL version torch was built with, as text (None when it has none)."""
    try:
        nccl = torch.cuda.nccl.version()
    except Exception:
        return None
    return ".".join(str(v) for v in nccl) if isinstance(nccl, tuple) else str(nccl)


def _leave_group(dist):
    """Destroy the process group; a group that never formed is no error here."""
    try:
        dist.destroy_process_group()
    except Exception:
        pass
