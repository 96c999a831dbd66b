"""G10's comparison of the nodes of one job: pure decisions on fingerprints.

What breaks collectives FAILs (GPU model, driver/CUDA major, torch, NCCL major.minor); what often does
WARNs (NCCL/UCX/GLOO variables, container, MTU, package minors, Python, much less free memory). A FAIL
of any check on any node blocks the job too. An exchange that brought no fingerprints says why.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Literal

from pytest_dgx_spark.checks.kit import Findings, first_n
from pytest_dgx_spark.model import Status
from pytest_dgx_spark.probes.fleet import Exchange, Fingerprint

Read = Callable[[Fingerprint], object]
#: (whole text, short text, how to read it, whole fix, short fix, the finding's code) of one comparison
Row = tuple[str, str, Read, str, str, str]
Section = Literal["env", "container", "packages"]

#: one node with less than this fraction of the best node's MemAvailable warns
MEMORY_SPREAD = 0.8


def label(fp: Fingerprint) -> str:
    return fp.who


def _major(version: object) -> str | None:
    text = str(version or "").strip()
    return text.split(".")[0] if text else None


def _major_minor(version: object) -> str | None:
    text = str(version or "").split("+")[0].strip()
    return ".".join(text.split(".")[:2]) if text else None


def _nccl_lib(fp: Fingerprint) -> object:
    """What the loadable ``libnccl.so.2`` reports (a system NCCL has no pip metadata), else the wheel's."""
    wheels = [fp.packages[n] for n in ("nvidia-nccl-cu13", "nvidia-nccl-cu12") if n in fp.packages]
    return fp.nccl_lib or next((w for w in wheels if w), None)


#: (what, how to read it from a fingerprint): a difference FAILs
BREAKING: tuple[tuple[str, Read], ...] = (
    ("GPU model", lambda f: f.gpu),
    ("driver major", lambda f: _major(f.driver)),
    ("CUDA major of the driver", lambda f: _major(f.cuda_driver)),
    ("CUDA major of torch", lambda f: _major(f.torch_cuda)),
    ("torch", lambda f: f.torch),
    ("NCCL (torch's) major.minor", lambda f: _major_minor(f.nccl_torch)),
    ("NCCL library major.minor", lambda f: _major_minor(_nccl_lib(f))),
)
#: section of a fingerprint -> (what differs, whole fix, short fix, code); a difference WARNs
SECTIONS: dict[Section, tuple[str, str, str, str]] = {
    "env": ("{key} differs", "set the same NCCL/UCX/GLOO variables on every node", "the same on every node",
            "G10.nodes-differ-env"),
    "container": (
        "container {key} differs", "run the same container tag on every node", "same container on every node",
        "G10.nodes-differ-container",
    ),
    "packages": (
        "{key} differs", "install the same package versions on every node",
        "same package versions on every node", "G10.nodes-differ-packages",
    ),
}


def _shown(value: object) -> str:
    return "unset" if value in (None, "") else str(value)


def _differ(fps: Sequence[Fingerprint], out: Findings, status: Status, row: Row) -> None:
    """One finding when the nodes differ in what ``row`` reads."""
    what, short_what, read, fix, short_fix, code = row
    values = [read(fp) for fp in fps]
    if len({repr(v) for v in values}) < 2:
        return
    spread = ", ".join(f"{_shown(v)} on {label(fp)}" for v, fp in zip(values, fps, strict=True))
    ranks: dict[str, list[str]] = {}  # each value once, with its ranks
    for v, fp in zip(values, fps, strict=True):
        ranks.setdefault(_shown(v), []).append(fp.rank_text)
    short = ", ".join(f"{v} on rank{'s' if len(r) > 1 else ''} {','.join(r)}" for v, r in ranks.items())
    out.flag(status, f"{what}: {spread}", fix, f"{short_what}: {short}", short_fix, code=code)


def compare(fps: Sequence[Fingerprint], out: Findings, own_rank: object = None) -> None:
    """Add the cross-node findings of ``fps`` (one per rank) to ``out``; ``own_rank``'s
    own G10 status is not repeated (its findings are already in ``out``)."""
    fix = "give every node the same container image and driver (pin the image by digest)"
    for what, read in BREAKING:
        row = (f"nodes differ in {what}", f"{what} differs", read, fix, "same image and driver on every node",
               "G10.nodes-differ")
        _differ(fps, out, Status.FAIL, row)
    for row in _often(fps):
        _differ(fps, out, Status.WARN, row)
    _memory(fps, out)
    _statuses(fps, out, None if own_rank is None else str(own_rank))


def _part(fp: Fingerprint, section: Section) -> dict[str, str] | dict[str, str | None]:
    return fp.env if section == "env" else fp.container if section == "container" else fp.packages


def _field(section: Section, key: str) -> Read:
    return lambda fp: _part(fp, section).get(key)


def _section(fps: Sequence[Fingerprint], section: Section) -> Iterator[Row]:
    text, fix, short, code = SECTIONS[section]
    for key in sorted({k for fp in fps for k in _part(fp, section)}):
        if section != "packages" or not (key.startswith("nvidia-nccl") or key == "torch"):  # those FAIL
            yield text.format(key=key), text.format(key=key), _field(section, key), fix, short, code


def _often(fps: Sequence[Fingerprint]) -> Iterator[Row]:
    """What often breaks a job, in the order it is said: variables, container, MTU, packages, Python."""
    yield from _section(fps, "env")
    yield from _section(fps, "container")
    yield ("MTU of the NCCL interface differs", "MTU differs", lambda f: f.mtu,
           "set MTU 9000 on both ends of the link", "MTU 9000 on both ends", "G10.nodes-differ-mtu")
    yield from _section(fps, "packages")
    yield ("Python differs", "Python differs", lambda f: _major_minor(f.python),
           "use the same Python on every node", "same Python on every node", "G10.nodes-differ-python")


def _memory(fps: Sequence[Fingerprint], out: Findings) -> None:
    avail = [(v, fp) for fp in fps if (v := fp.mem_available_kib) is not None]
    best = max((v for v, _ in avail), default=0)
    low = [(v, fp) for v, fp in avail if best and v < MEMORY_SPREAD * best] if len(avail) > 1 else []
    if low:
        shown = first_n([f"{label(fp)} {v / 1048576:.1f} GiB" for v, fp in low])
        short = first_n([f"rank {fp.rank_text} {v / 1048576:.1f} GiB" for v, fp in low], sep=", ")
        out.warn(
            f"MemAvailable much lower on {shown} than the best node's {best / 1048576:.1f} GiB",
            "stop what holds memory there (see that node's G3 and G6) before the job starts",
            f"MemAvailable low: {short}, best node {best / 1048576:.1f} GiB",
            "free memory there (its G3, G6)", code="G10.node-memory-low",
        )


def _statuses(fps: Sequence[Fingerprint], out: Findings, own_rank: str | None) -> None:
    """Any check FAILed on any node blocks the job (a node's own G10 is decided before this)."""
    failed = [
        (fp, cid) for fp in fps for cid, status in fp.statuses.items()
        if status == "FAIL" and not (cid == "G10" and str(fp.rank) == own_rank)
    ]
    if failed:
        whole = first_n([f"{label(fp)}: {cid} FAIL" for fp, cid in failed])
        short = first_n([f"rank {fp.rank_text} {cid}" for fp, cid in failed], sep=", ")
        out.fail(
            f"a node fails its own preflight: {whole}", "fix that node first (see its report)",
            f"a node fails its own preflight: {short}", "fix that node first", code="G10.node-fails",
        )


def not_compared(exchanged: Exchange, out: Findings) -> None:
    """No fingerprints came back: which rank never joined (FAIL), or why the comparison could not run."""
    missing = exchanged.missing or []
    error = exchanged.error or "no fingerprints came back"
    store = exchanged.store or "MASTER_ADDR:MASTER_PORT"
    torch = exchanged.cause == "torch"
    if missing:
        who = ", ".join(str(r) for r in missing)
        first = f"start rank {who}"
        if 0 in missing:
            first += " (it, or torchrun on its node, hosts the rendezvous store)"
        out.fail(
            f"rank {who} never joined the node comparison ({error})",
            f"{first} with the same MASTER_ADDR/MASTER_PORT on every node, and check that {store} is "
            "reachable from every node (firewall, the address MASTER_ADDR resolves to)",
            f"rank {who} never joined the node comparison", f"start rank {who}; check {store} is reachable",
            code="G10.rank-missing",
        )
    elif exchanged.cause == "rendezvous":
        out.warn(
            f"nodes not compared: {error}",
            'export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1) and '
            "MASTER_PORT=<a free port, the same on every node> before srun (README: Two Sparks)",
            "nodes not compared: srun gives no MASTER_ADDR/MASTER_PORT",
            "export MASTER_ADDR, MASTER_PORT before srun", code="G10.nodes-not-compared",
        )
    else:
        out.warn(
            f"nodes not compared: {error}",
            "install torch with torch.distributed (gloo) on every node" if torch
            else f"use a MASTER_PORT that is free on rank 0's node and the same on every node (now {store})",
            "nodes not compared", "install torch with gloo" if torch else "check MASTER_ADDR/MASTER_PORT",
            code="G10.nodes-not-compared",
        )
