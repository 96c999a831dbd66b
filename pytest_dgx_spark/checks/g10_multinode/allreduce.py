"""G10's all-reduce probe (``--spark-intrusive`` under torchrun): its outcome as a record, and the
bus bandwidth judged against the two floors (issue 22, G10+). A link can report 200 G and still move
a few GB/s: a re-cabled ConnectX-7 stays near 2.8 GB/s until reboot (``nccl_two_spark_7.txt``)."""

from __future__ import annotations

from pytest_dgx_spark.checks.g10_multinode.facts import Probe, ProbeData
from pytest_dgx_spark.checks.g10_multinode.link import FIX_LINK
from pytest_dgx_spark.checks.kit import Findings, Params
from pytest_dgx_spark.checks.record import FactsError
from pytest_dgx_spark.model import Status
from pytest_dgx_spark.probes.child import ChildResult


def summarize_probe(child: ChildResult) -> Probe:
    """The probe child's result as a record, with one reason when it failed."""
    try:
        d = ProbeData.from_dict({k: v for k, v in child.data.items() if k != "_allowance"})
    except FactsError as exc:  # a child of another version: said, never a crash
        return Probe(ran=True, error=f"the all-reduce child's data cannot be read ({exc})")
    if d.torch_import_error:
        return Probe(ran=False, data=d, reason=f"torch not importable ({d.torch_import_error})")
    if child.timed_out:
        error: str | None = child.describe("all-reduce probe")
    else:
        error = d.error or (None if child.ok else child.describe("all-reduce probe"))
    return Probe(ran=True, data=d, error=error, hung=bool(child.timed_out))


def _probe_readings(d: ProbeData, out: Findings) -> None:
    if d.backend:
        out.read("allreduce_backend", d.backend)
    if d.world_size:
        out.read("allreduce_ranks", d.world_size)
    if d.size_bytes:
        out.read("allreduce_size", round(d.size_bytes / (1 << 20)), "MiB")
    if d.nccl_version:
        out.read("nccl_version", d.nccl_version)


def judge_probe(probe: Probe | None, multi_node: bool, params: Params, speed: str, out: Findings) -> str:
    """Add the all-reduce probe's findings; returns the text a PASS line carries."""
    if probe is None:
        return ""
    if not probe.ran:
        return f"all-reduce not measured: {probe.reason}"
    d = probe.data
    _probe_readings(d, out)
    if probe.error:
        where = "hung" if probe.hung else "failed"
        fix = "check that every rank runs G10 with --spark-intrusive, that all reach MASTER_ADDR, and "
        out.flag(Status.WARN, f"all-reduce probe {where}: {probe.error}", fix + FIX_LINK,
                 f"all-reduce probe {where}", "run G10 on every rank; check the link",
                 code="G10.probe-failed")
        return ""
    if d.wrong:
        check = d.check
        out.flag(
            Status.WARN,
            f"all-reduce returned wrong values (expected {check and check.expected}, got {check and check.got})",
            "a corrupted collective: check the NCCL build (DGX OS's system NCCL) and the link",
            "all-reduce returned wrong values", "check the NCCL build and the link",
            code="G10.allreduce-wrong",
        )
        return ""
    if d.group_busbw_gbps is None:
        return "all-reduce gave no timing"
    return _judge_busbw(d, d.group_busbw_gbps, multi_node, params, speed, out)


def _judge_busbw(d: ProbeData, group: float, multi_node: bool, params: Params, speed: str, out: Findings) -> str:
    """The bus bandwidth against the two floors (issue 22, G10+): below ``g10_busbw_fail_gbps``
    over NCCL FAILs (a degraded link: nccl_two_spark_7.txt's 2.82 GB/s after a re-cable, 21.4
    after a reboot), below ``g10_busbw_floor_gbps`` WARNs; a single node is not judged."""
    floor, fail = params.threshold("g10_busbw_floor_gbps"), params.threshold("g10_busbw_fail_gbps")
    out.read("allreduce_busbw", round(group, 2), "GB/s")
    out.read("allreduce_algbw", round(d.group_algbw_gbps or 0.0, 2), "GB/s")
    out.read("allreduce_busbw_this_rank", round(d.busbw_gbps or 0.0, 2), "GB/s")
    out.read("busbw_floor", floor, "GB/s")
    out.read("busbw_fail_below", fail, "GB/s")
    size_mib = round((d.size_bytes or 0) / (1 << 20))
    what = f"{d.backend}, {d.world_size} ranks, {size_mib} MiB"
    text = f"all-reduce busbw {group:.1f} GB/s ({what})"
    if not multi_node:
        return text + " within one node (the two-Spark floor does not apply)"
    reports = f" while the link reports {speed}" if speed else ""
    gloo = d.backend == "gloo"
    if group < fail and not gloo:
        out.flag(
            Status.FAIL,
            f"{text}{reports}, below the {fail:g} GB/s a working two-Spark link never falls to (20-24 GB/s "
            "is healthy): a degraded ConnectX-7 link (after a re-cable or hot-plug it stays near 2.8 GB/s "
            "until reboot) or NCCL on TCP sockets",
            "reboot both Sparks (a re-cabled or hot-plugged ConnectX-7 link stays slow until then; re-seat "
            "the QSFP cable first), then re-run; check NCCL_DEBUG=INFO says NET/IB, not NET/Socket (NVIDIA "
            "dgx-spark-playbooks PR #108)",
            f"all-reduce {group:.1f} GB/s, below {fail:g} GB/s" + (f" ({speed})" if speed else ""),
            "reboot both Sparks; re-seat the cable", code="G10.busbw-degraded",
        )
        return ""
    if group < floor:
        cpu = " (measured with gloo on CPU; NCCL on the GPUs would differ)" if gloo else ""
        out.flag(
            Status.WARN,
            f"{text}{reports} is below the {floor:g} GB/s floor for a two-Spark link "
            f"(20-24 GB/s is healthy){cpu}",
            FIX_LINK, f"all-reduce {group:.1f} GB/s, below the {floor:g} GB/s floor",
            "both RoCE twins in NCCL_IB_HCA, MTU 9000", code="G10.busbw-low",
        )
        return ""
    return text
