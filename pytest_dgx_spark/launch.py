"""Which rank of a multi-process job this process is: torchrun's ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``,
or srun's ``SLURM_PROCID``/``SLURM_STEP_NUM_TASKS``/``SLURM_LOCALID``. Only a task of a *step* counts:
a batch script also has ``SLURM_PROCID=0`` but is one process, not rank 0 of a job.
"""

from __future__ import annotations

from collections.abc import Mapping

#: what srun sets in each task of a step (SLURM_STEPID is its older spelling)
SRUN_STEP = ("SLURM_STEP_ID", "SLURM_STEPID")


def _int(value: str | None) -> int | None:
    try:
        return int(str(value).strip())
    except ValueError:
        return None


def from_srun(env: Mapping[str, str]) -> bool:
    """A task of an srun step, without torchrun's names (``srun … torchrun``: its workers have theirs)."""
    if env.get("RANK") or env.get("WORLD_SIZE"):
        return False
    return any(env.get(k) for k in SRUN_STEP) and _int(env.get("SLURM_PROCID")) is not None


def job_rank(env: Mapping[str, str]) -> tuple[int | None, int | None]:
    """``(rank, world size)``, ``None`` for what is not said (an older srun: ``SLURM_NTASKS``)."""
    if from_srun(env):
        world = _int(env.get("SLURM_STEP_NUM_TASKS")) or _int(env.get("SLURM_NTASKS"))
        return _int(env.get("SLURM_PROCID")), world
    return _int(env.get("RANK")), _int(env.get("WORLD_SIZE"))


def rank(env: Mapping[str, str]) -> int:
    """This process's rank; 0 when it is not one rank of a job (it writes the files)."""
    found, _ = job_rank(env)
    return found if found is not None and found >= 0 else 0


def torchrun_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with torchrun's ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` from srun's in an srun
    task: what the job children read."""
    out = dict(env)
    if from_srun(env):
        found, world = job_rank(env)
        out["RANK"] = str(found)
        if world is not None:
            out["WORLD_SIZE"] = str(world)
        if env.get("SLURM_LOCALID") and not env.get("LOCAL_RANK"):
            out["LOCAL_RANK"] = str(env["SLURM_LOCALID"])
    return out
