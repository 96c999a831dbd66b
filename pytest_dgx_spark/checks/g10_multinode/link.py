"""G10's link rules: the two-Spark link as NCCL is told to use it (only for a multi-node job).

One QSFP port shows up as two RoCE "twins" (``rocep1s0f1``, ``roceP2p1s0f1``); NCCL reaches 20-24 GB/s
only with both in ``NCCL_IB_HCA`` and MTU 9000 (issue 8). In a container NCCL needs ``/dev/infiniband``
and a memlock limit that lets it pin its buffers (issue 22).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from pytest_dgx_spark.checks.kit import Findings, Params, first_n, said
from pytest_dgx_spark.datadef import define
from pytest_dgx_spark.model import Status
from pytest_dgx_spark.probes import multinode as mn
from pytest_dgx_spark.probes.multinode import Link, Memlock, RdmaDevice

#: the two-Spark link reaches 20-24 GB/s only with jumbo frames (two_spark_config_2.txt: mtu: 9000)
MIN_MTU = 9000
FIX_LINK = (
    "put NCCL on the ConnectX-7 port: NCCL_SOCKET_IFNAME=enp1s0f1np1 (and GLOO_SOCKET_IFNAME, "
    "UCX_NET_DEVICES), NCCL_IB_HCA naming both halves, MTU 9000; ~3 GB/s means the wrong interface"
)

_TWIN = re.compile(r"^(?P<kind>[a-z]+?)(?:P(?P<domain>\d+))?p(?P<bus>\d+)s(?P<slot>\d+)f(?P<fn>\d+)$")


@define(frozen=True)
class NcclNet:
    """How NCCL is told to reach the other node, read once from the job's variables."""

    ib_hca: str = ""  # NCCL_IB_HCA as set
    ib_disabled: bool = False  # NCCL_IB_DISABLE=1: TCP sockets, not RoCE
    socket_ifname: str = ""  # NCCL_SOCKET_IFNAME as set

    @classmethod
    def of(cls, env: Mapping[str, str]) -> NcclNet:
        disabled = said(env, "NCCL_IB_DISABLE").strip() == "1"
        return cls(said(env, "NCCL_IB_HCA"), disabled, said(env, "NCCL_SOCKET_IFNAME"))


def twin_key(device: str) -> tuple[tuple[str, str, str, str], str] | None:
    """``rocep1s0f1`` -> ``(("roce", "1", "0", "1"), "0")``: the port, its PCIe domain (``roceP2…``: 2)."""
    m = _TWIN.match(device)
    return ((m["kind"], m["bus"], m["slot"], m["fn"]), m["domain"] or "0") if m else None


def hca_selection(value: str, devices: list[str]) -> list[str]:
    """What ``NCCL_IB_HCA`` selects: ``dev[:port]`` list, prefixes unless ``=``, ``^`` excludes."""
    text = value.strip()
    exclude, text = text.startswith("^"), text.lstrip("^")
    exact = text.startswith("=")
    entries = [e.split(":")[0].strip() for e in text.lstrip("=").split(",") if e.strip()]
    return [d for d in devices if any(d == e if exact else d.startswith(e) for e in entries) != exclude]


def chosen(net: NcclNet, rdma: dict[str, RdmaDevice]) -> tuple[list[str], bool]:
    """The RoCE devices ``NCCL_IB_HCA`` selects (all when unset), and whether RoCE is on at all."""
    if not rdma or net.ib_disabled:
        return [], False
    return (hca_selection(net.ib_hca, sorted(rdma)) if net.ib_hca.strip() else sorted(rdma)), True


def data_ifnames(net: NcclNet, link: Link, selected: list[str], roce: bool) -> list[str]:
    """Interfaces that carry NCCL's data: the net devices behind the RoCE devices in use, and
    NCCL_SOCKET_IFNAME when it is one of them or when sockets carry the data (RoCE off or absent).
    A socket interface beside working RoCE only bootstraps (nccl_two_spark_1.txt: wlP9s9, 23 GB/s)."""
    rdma = link.rdma
    behind = [n for d in selected if d in rdma and not rdma[d].down for n in rdma[d].netdevs]
    all_roce = {n for d in rdma.values() for n in d.netdevs}
    sockets = [n for n in mn.socket_ifnames(net.socket_ifname) if n in all_roce or not roce]
    return list(dict.fromkeys([*sockets, *behind]))  # the interface the user named first


def fleet_interfaces(env: Mapping[str, str] | NcclNet, link: Link | None) -> dict[str, int | None]:
    """The interfaces NCCL's data goes over (:func:`data_ifnames`), and their MTUs."""
    if not link:
        return {}
    net = env if isinstance(env, NcclNet) else NcclNet.of(env)
    selected, roce = chosen(net, link.rdma)
    return {name: link.mtu.get(name) for name in data_ifnames(net, link, selected, roce)}


def link_speed(net: NcclNet, link: Link | None) -> str:
    """What NCCL's interfaces negotiated (``enp1s0f1np1 200 Gb/s``), else the RoCE ports' ``rate``."""
    if not link:
        return ""
    named = fleet_interfaces(net, link)
    parts = [f"{n} {speed / 1000:g} Gb/s" for n in named if isinstance(speed := link.speed.get(n), int)]
    rates = [
        f"{name} {rate}" for name, dev in sorted(link.rdma.items()) if not dev.down
        for rate in dev.rates.values() if rate
    ]  # fmt: skip
    return ", ".join(parts) if parts else ", ".join(rates[:2])


def judge_rdma_access(net: NcclNet, link: Link | None, container: str | None,
                      dev_infiniband: list[str] | None, memlock: Memlock | None, params: Params,
                      out: Findings) -> None:  # fmt: skip
    """A multi-node job in a container needs the RDMA devices passed in, and NCCL needs to pin
    memory (issue 22, G10+): no ``/dev/infiniband`` while the host's RoCE devices show in sysfs
    FAILs (NCCL: ``NET/IB : No device found``, then TCP sockets); a small ``RLIMIT_MEMLOCK`` WARNs."""
    if net.ib_disabled:
        return
    rdma = link.rdma if link else {}
    verbs = [e for e in dev_infiniband or [] if e.startswith("uverbs")]
    out.read("dev_infiniband", ", ".join(dev_infiniband) if dev_infiniband else "absent")
    if container:
        out.read("container", container)
    if container and rdma and not verbs:
        _no_rdma_devices(container, dev_infiniband, sorted(rdma), out)
    elif container and not rdma and not verbs:
        out.note(
            "no RoCE device under /sys/class/infiniband and no /dev/infiniband here: RDMA access not judged"
        )
    if rdma or verbs:
        _judge_memlock(memlock, params, out)


def _no_rdma_devices(container: str, dev_infiniband: list[str] | None, roce: list[str], out: Findings) -> None:
    """FAIL: the host's RoCE devices show in sysfs, and the container was started without them."""
    out.flag(
        Status.FAIL,
        f"a multi-node job in a container ({container}) without /dev/infiniband"
        + ("" if dev_infiniband is None else " uverbs devices")
        + f" while the host has RoCE devices ({first_n(roce, 2, sep=', ')}): NCCL cannot open "
        "them ('NET/IB : No device found') and falls back to TCP sockets (a few GB/s)",
        "start the container with --device /dev/infiniband --cap-add IPC_LOCK --ulimit memlock=-1:-1 on "
        "every node (compose: devices, cap_add and ulimits), so NCCL reaches the ConnectX-7 over RoCE",
        "no /dev/infiniband in this container",
        "--device /dev/infiniband --cap-add IPC_LOCK --ulimit memlock=-1:-1",
        code="G10.container-no-rdma",
    )


def _judge_memlock(memlock: Memlock | None, params: Params, out: Findings) -> None:
    """WARN when RLIMIT_MEMLOCK is neither unlimited nor at least ``g10_memlock_min_mib``."""
    if not memlock:
        return
    soft = memlock.soft
    if soft is None:
        out.note(f"memlock limit not read: {memlock.error or 'no value'}")
    elif soft == "unlimited":
        out.read("memlock", soft, "")
    else:
        mib, least = int(soft) / (1 << 20), params.threshold("g10_memlock_min_mib")
        out.read("memlock", round(mib, 1), "MiB")
        if mib < least:
            out.flag(
                Status.WARN,
                f"memlock limit {mib:g} MiB (RLIMIT_MEMLOCK of this process), below {least:g} MiB: NCCL's "
                "RDMA registration (ibv_reg_mr) can fail with 'Cannot allocate memory'",
                "raise the memlock limit: --ulimit memlock=-1:-1 for a container, or `* - memlock unlimited` "
                "in /etc/security/limits.conf (LimitMEMLOCK=infinity for a systemd service) on the host",
                f"memlock limit {mib:g} MiB, below {least:g} MiB",
                "--ulimit memlock=-1:-1 (or limits.conf memlock unlimited)", code="G10.memlock-low",
            )


def _judge_hca(value: str, rdma: dict[str, RdmaDevice], selected: list[str], out: Findings) -> None:
    """WARN when NCCL_IB_HCA (``value``) selects no usable RoCE device, or one RoCE twin of a port and not
    the other."""
    devices = sorted(rdma)
    if not value.strip():
        return
    up = [d for d in devices if not rdma[d].down]
    if (devices and not selected) or (up and not [d for d in selected if d in up]):
        what = "none of this node's RoCE devices" if not selected else "only RoCE devices whose port is down"
        use = ",".join(up or devices)
        out.flag(
            Status.WARN,
            f"NCCL_IB_HCA={value} selects {what} ({', '.join(selected or devices)}): NCCL finds no usable IB "
            "device and sends over TCP sockets (a few GB/s where the two-Spark link gives 20-24)",
            f"NCCL_IB_HCA={use} on every node (the devices `ibdev2netdev` shows Up), or unset it",
            f"NCCL_IB_HCA={value} {'matches no RoCE device here' if not selected else 'names only down ports'}",
            f"NCCL_IB_HCA={use}", code="G10.nccl-ib-hca",
        )
        return
    _judge_twins(value, selected, rdma, out)


def _missing_twins(dev: str, selected: list[str], rdma: dict[str, RdmaDevice]) -> list[str]:
    """The up twins of ``dev`` (the same QSFP port on the other PCIe root) that are not selected."""
    key = twin_key(dev)
    if key is None or rdma[dev].down:
        return []
    others = {d: twin_key(d) for d in sorted(rdma) if d != dev}
    twins = [d for d, k in others.items() if k and k[0] == key[0] and k[1] != key[1]]
    return [t for t in twins if t not in selected and not rdma[t].down]


def _judge_twins(value: str, selected: list[str], rdma: dict[str, RdmaDevice], out: Findings) -> None:
    """WARN (once) for a chosen device whose up twin, on the other PCIe root, is not chosen."""
    for dev in selected:
        missing = _missing_twins(dev, selected, rdma)
        if missing:
            both = ",".join([*(d for d in selected if d != dev), dev, *missing])
            out.flag(
                Status.WARN,
                f"NCCL_IB_HCA={value} names {dev} but not its twin {missing[0]} (the same QSFP port on the "
                "other PCIe root): one twin caps near 12 GB/s, both reach 20-24 GB/s",
                f"NCCL_IB_HCA={both} on every node (NCCL_IB_MERGE_NICS=1 merges them)",
                f"NCCL_IB_HCA has one RoCE twin of 2 ({dev})", f"NCCL_IB_HCA={both}",
                code="G10.nccl-ib-hca-twin",
            )
            return


def judge_link(net: NcclNet, link: Link | None, out: Findings) -> None:
    """The two-Spark link as NCCL is told to use it (only for a multi-node job)."""
    if net.ib_disabled:
        out.flag(
            Status.WARN,
            "NCCL_IB_DISABLE=1 on a multi-node job: NCCL sends over TCP sockets, not RoCE "
            "(a few GB/s where the two-Spark link gives 20-24)",
            "unset NCCL_IB_DISABLE (or set it to 0) so NCCL uses RoCE on the ConnectX-7 port; over TCP "
            "sockets the link gives a few GB/s",
            "NCCL_IB_DISABLE=1 across nodes: TCP, not RoCE", "unset NCCL_IB_DISABLE",
            code="G10.nccl-ib-disabled",
        )
    if not link or not link.sysfs:
        return
    if net.ib_hca and not link.rdma:
        out.note("NCCL_IB_HCA is set but no RoCE device is under /sys/class/infiniband: twins not checked")
    selected, roce = chosen(net, link.rdma)
    if roce:
        _judge_hca(net.ib_hca, link.rdma, selected, out)
    _judge_mtu(fleet_interfaces(net, link), out)


def _judge_mtu(mtus: dict[str, int | None], out: Findings) -> None:
    """WARN when an interface NCCL's data goes over has an MTU below :data:`MIN_MTU`."""
    low = [(n, m) for n, m in mtus.items() if m is not None and m < MIN_MTU]
    if low:
        shown = first_n([f"{n} ({m})" for n, m in low], 3, sep=", ")
        names_low = ", ".join(n for n, _ in low)
        out.flag(
            Status.WARN,
            f"MTU below {MIN_MTU} on NCCL's interface: {shown}; the two-Spark link reaches 20-24 GB/s at "
            "MTU 9000",
            f"set mtu: 9000 on {names_low} on both Sparks (netplan), then re-run",
            f"MTU {low[0][1]} on {low[0][0]}, below {MIN_MTU}", f"set MTU 9000 on {names_low}",
            code="G10.mtu-low",
        )
