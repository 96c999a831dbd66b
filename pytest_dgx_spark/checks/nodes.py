"""G10's comparison of the nodes of one job: pure decisions on fingerprints.

A collective hangs or crashes when the nodes disagree on what it is built
from. What breaks collectives is a FAIL: another GPU model, driver major,
CUDA major, torch, or NCCL major.minor. What often does is a WARN: an
``NCCL_*``/``UCX_*``/``GLOO_*`` variable set differently, another container
build, another MTU on the NCCL interface, another minor version of a
package, much less free memory on one node. A FAIL of any check on any node
blocks the job too: every node must pass its own preflight.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pytest_dgx_spark.checks.kit import Findings, first_n
from pytest_dgx_spark.model import Status

#: one node with less than this fraction of the best node's MemAvailable warns
MEMORY_SPREAD = 0.8
FIX_SAME_IMAGE = "give every node the same container image and driver (pin the image by digest)"
FIX_SAME_ENV = "set the same NCCL/UCX/GLOO variables on every node"


def label(fp: Mapping[str, Any]) -> str:
    host = fp.get("hostname") or "?"
    return f"rank {fp.get('rank', '?')} ({host})"


def _major(version: Any) -> str | None:
    text = str(version or "").strip()
    return text.split(".")[0] if text else None


def _major_minor(version: Any) -> str | None:
    text = str(version or "").split("+")[0].strip()
    return ".".join(text.split(".")[:2]) if text else None


#: (what, how to read it from a fingerprint): a difference FAILs
BREAKING: tuple[tuple[str, Callable[[Mapping[str, Any]], Any]], ...] = (
    ("GPU model", lambda f: f.get("gpu")),
    ("driver major", lambda f: _major(f.get("driver"))),
    ("CUDA major of the driver", lambda f: _major(f.get("cuda_driver"))),
    ("CUDA major of torch", lambda f: _major(f.get("torch_cuda"))),
    ("torch", lambda f: f.get("torch")),
    ("NCCL (torch's) major.minor", lambda f: _major_minor(f.get("nccl_torch"))),
    ("NCCL library major.minor", lambda f: _major_minor(_nccl_lib(f))),
)


def _nccl_lib(fp: Mapping[str, Any]) -> Any:
    """The version the loadable ``libnccl.so.2`` reports (``ncclGetVersion``:
    a system NCCL in an NGC container or on DGX OS has no pip metadata), else
    the pip ``nvidia-nccl-*`` wheel's."""
    if fp.get("nccl_lib"):
        return fp["nccl_lib"]
    packages = fp.get("packages") or {}
    return packages.get("nvidia-nccl-cu13") or packages.get("nvidia-nccl-cu12")


def _shown(value: Any) -> str:
    return "unset" if value in (None, "") else str(value)


def _spread(fps: Sequence[Mapping[str, Any]], read: Callable[[Mapping[str, Any]], Any]) -> str | None:
    """``"2.27 on rank 0 (a), 2.28 on rank 1 (b)"`` when the nodes differ."""
    values = [read(fp) for fp in fps]
    if len({repr(v) for v in values}) < 2:
        return None
    return ", ".join(f"{_shown(v)} on {label(fp)}" for v, fp in zip(values, fps, strict=True))


def _short_spread(fps: Sequence[Mapping[str, Any]], read: Callable[[Mapping[str, Any]], Any]) -> str:
    """``"2.27 on rank 0, 2.28 on ranks 1,2"``: each value once, with its ranks."""
    ranks: dict[str, list[str]] = {}
    for fp in fps:
        ranks.setdefault(_shown(read(fp)), []).append(str(fp.get("rank", "?")))
    return ", ".join(f"{v} on rank{'s' if len(r) > 1 else ''} {','.join(r)}" for v, r in ranks.items())


def _differ(
    fps: Sequence[Mapping[str, Any]],
    read: Callable[[Mapping[str, Any]], Any],
    out: Findings,
    status: Status,
    what: tuple[str, str],
    fix: tuple[str, str],
) -> None:
    """One finding when the nodes differ in ``read``: ``what`` is its whole
    text's and its headline's name, ``fix`` the whole and the short fix."""
    spread = _spread(fps, read)
    if spread:
        out.flag(status, f"{what[0]}: {spread}", fix[0], f"{what[1]}: {_short_spread(fps, read)}", fix[1])


def compare(fps: Sequence[Mapping[str, Any]], out: Findings, own_rank: Any = None) -> None:
    """Add the cross-node findings of ``fps`` (one fingerprint per rank) to ``out``.

    ``own_rank``: the rank deciding; its own G10 status is not repeated (its
    G10 findings are already in ``out``)."""
    for what, read in BREAKING:
        names = (f"nodes differ in {what}", f"{what} differs")
        _differ(fps, read, out, Status.FAIL, names, (FIX_SAME_IMAGE, "same image and driver on every node"))
    _often(fps, out)
    _statuses(fps, out, None if own_rank is None else str(own_rank))


def _field(section: str, key: str) -> Callable[[Mapping[str, Any]], Any]:
    """The reader of ``fp[section][key]`` (``env``, ``container``, ``packages``)."""
    return lambda fp: (fp.get(section) or {}).get(key)


def _often(fps: Sequence[Mapping[str, Any]], out: Findings) -> None:
    env_fix = (FIX_SAME_ENV, "the same on every node")
    for key in sorted({k for fp in fps for k in (fp.get("env") or {})}):
        _differ(fps, _field("env", key), out, Status.WARN, (f"{key} differs", f"{key} differs"), env_fix)
    box_fix = ("run the same container tag on every node", "same container on every node")
    for key in sorted({k for fp in fps for k in (fp.get("container") or {})}):
        what = f"container {key} differs"
        _differ(fps, _field("container", key), out, Status.WARN, (what, what), box_fix)
    mtu = ("MTU of the NCCL interface differs", "MTU differs")
    fix = ("set MTU 9000 on both ends of the link", "MTU 9000 on both ends")
    _differ(fps, lambda f: f.get("mtu"), out, Status.WARN, mtu, fix)
    pip_fix = ("install the same package versions on every node", "same package versions on every node")
    for name in sorted({k for fp in fps for k in (fp.get("packages") or {})}):
        if not name.startswith("nvidia-nccl") and name != "torch":
            _differ(fps, _field("packages", name), out, Status.WARN, (f"{name} differs", f"{name} differs"), pip_fix)
    py = ("Python differs", "Python differs")
    fix = ("use the same Python on every node", "same Python on every node")
    _differ(fps, lambda f: _major_minor(f.get("python")), out, Status.WARN, py, fix)
    _memory(fps, out)


def _memory(fps: Sequence[Mapping[str, Any]], out: Findings) -> None:
    avail = [(fp.get("mem_available_kib"), fp) for fp in fps if isinstance(fp.get("mem_available_kib"), int)]
    if len(avail) < 2:
        return
    best = max(v for v, _ in avail)
    low = [(v, fp) for v, fp in avail if best and v < MEMORY_SPREAD * best]
    if low:
        shown = first_n([f"{label(fp)} {v / 1048576:.1f} GiB" for v, fp in low])
        short = first_n([f"rank {fp.get('rank', '?')} {v / 1048576:.1f} GiB" for v, fp in low], sep=", ")
        out.flag(
            Status.WARN,
            f"MemAvailable much lower on {shown} than the best node's {best / 1048576:.1f} GiB",
            "stop what holds memory there (see that node's G3 and G6) before the job starts",
            f"MemAvailable low: {short}, best node {best / 1048576:.1f} GiB",
            "free memory there (its G3, G6)",
        )


def _statuses(fps: Sequence[Mapping[str, Any]], out: Findings, own_rank: str | None) -> None:
    """Any check FAILed on any node blocks the job. A node's G10 status is
    its own launcher/config/link findings, decided before the comparison."""
    failed = [
        (fp, cid)
        for fp in fps
        for cid, status in (fp.get("statuses") or {}).items()
        if status == "FAIL" and not (cid == "G10" and str(fp.get("rank")) == own_rank)
    ]
    if failed:
        whole = first_n([f"{label(fp)}: {cid} FAIL" for fp, cid in failed])
        short = first_n([f"rank {fp.get('rank', '?')} {cid}" for fp, cid in failed], sep=", ")
        out.flag(
            Status.FAIL,
            f"a node fails its own preflight: {whole}",
            "fix that node first (see its report)",
            f"a node fails its own preflight: {short}",
            "fix that node first",
        )
