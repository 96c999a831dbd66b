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

from pytest_spark.checks.kit import Findings, first_n

#: one node with less than this fraction of the best node's MemAvailable warns
MEMORY_SPREAD = 0.8


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


def _spread(fps: Sequence[Mapping[str, Any]], read: Callable[[Mapping[str, Any]], Any]) -> str | None:
    """``"2.27 on rank 0 (a), 2.28 on rank 1 (b)"`` when the nodes differ."""
    values = [read(fp) for fp in fps]
    if len({repr(v) for v in values}) < 2:
        return None
    return ", ".join(f"{'unset' if v in (None, '') else v} on {label(fp)}" for v, fp in zip(values, fps, strict=True))


def compare(fps: Sequence[Mapping[str, Any]], out: Findings, own_rank: Any = None) -> None:
    """Add the cross-node findings of ``fps`` (one fingerprint per rank) to ``out``.

    ``own_rank``: the rank deciding; its own G10 status is not repeated (its
    G10 findings are already in ``out``)."""
    fix = "give every node the same container image and driver (pin the image by digest)"
    for what, read in BREAKING:
        spread = _spread(fps, read)
        if spread:
            out.fail(f"nodes differ in {what}: {spread}", fix)
    _often(fps, out)
    _statuses(fps, out, None if own_rank is None else str(own_rank))


def _often(fps: Sequence[Mapping[str, Any]], out: Findings) -> None:
    keys = sorted({k for fp in fps for k in (fp.get("env") or {})})
    for key in keys:
        spread = _spread(fps, lambda f, k=key: (f.get("env") or {}).get(k))
        if spread:
            out.warn(f"{key} differs: {spread}", "set the same NCCL/UCX/GLOO variables on every node")
    for key in sorted({k for fp in fps for k in (fp.get("container") or {})}):
        spread = _spread(fps, lambda f, k=key: (f.get("container") or {}).get(k))
        if spread:
            out.warn(f"container {key} differs: {spread}", "run the same container tag on every node")
    spread = _spread(fps, lambda f: f.get("mtu"))
    if spread:
        out.warn(f"MTU of the NCCL interface differs: {spread}", "set MTU 9000 on both ends of the link")
    names = sorted({k for fp in fps for k in (fp.get("packages") or {})})
    for name in names:
        spread = _spread(fps, lambda f, n=name: (f.get("packages") or {}).get(n))
        if spread and not name.startswith("nvidia-nccl") and name != "torch":
            out.warn(f"{name} differs: {spread}", "install the same package versions on every node")
    spread = _spread(fps, lambda f: _major_minor(f.get("python")))
    if spread:
        out.warn(f"Python differs: {spread}", "use the same Python on every node")
    _memory(fps, out)


def _memory(fps: Sequence[Mapping[str, Any]], out: Findings) -> None:
    avail = [(fp.get("mem_available_kib"), fp) for fp in fps if isinstance(fp.get("mem_available_kib"), int)]
    if len(avail) < 2:
        return
    best = max(v for v, _ in avail)
    low = [(v, fp) for v, fp in avail if best and v < MEMORY_SPREAD * best]
    if low:
        shown = first_n([f"{label(fp)} {v / 1048576:.1f} GiB" for v, fp in low])
        out.warn(
            f"MemAvailable much lower on {shown} than the best node's {best / 1048576:.1f} GiB",
            "stop what holds memory there (see that node's G3 and G6) before the job starts",
        )


def _statuses(fps: Sequence[Mapping[str, Any]], out: Findings, own_rank: str | None) -> None:
    """Any check FAILed on any node blocks the job. A node's G10 status is
    its own launcher/config/link findings, decided before the comparison."""
    failed = [
        f"{label(fp)}: {cid} FAIL"
        for fp in fps
        for cid, status in (fp.get("statuses") or {}).items()
        if status == "FAIL" and not (cid == "G10" and str(fp.get("rank")) == own_rank)
    ]
    if failed:
        out.fail(f"a node fails its own preflight: {first_n(failed)}", "fix that node first (see its report)")
