# Shared by the children that join a multi-process job (allreduce_child.py,
# fleet_child.py); joined after _protocol.py and before the child's own code.
#
# Why its own store prefix: the job's launcher store (torchrun's agent store
# at MASTER_ADDR:MASTER_PORT) is shared with the training code that may run
# later in this same worker. Keys written under the default prefix by a probe
# (the NCCL unique id, barrier counters) could be read by that later
# init_process_group. A per-rank sequence number under "<prefix>/" keeps every
# run of a probe in a namespace of its own.
import datetime as _dt


def _env_int(name, default=None):
    try:
        return int(_os.environ.get(name, ""))
    except ValueError:
        return default


def _job_store(dist, host, port, rank, world, timeout_s, prefix):
    """The job's rendezvous store under ``prefix/<this run's number>``: rank 0
    hosts it unless torchrun's agent already does."""
    agent = _os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    master = rank == 0 and not agent
    store = dist.TCPStore(
        host,
        port,
        world_size=world if master else None,
        is_master=master,
        timeout=_dt.timedelta(seconds=timeout_s),
        wait_for_workers=False,
    )
    seq = store.add("%s/seq/%d" % (prefix, rank), 1)
    return dist.PrefixStore("%s/%d" % (prefix, seq), store)


def _leave_group(dist):
    """Destroy the process group; a group that never formed is no error here."""
    try:
        dist.destroy_process_group()
    except Exception:
        pass
