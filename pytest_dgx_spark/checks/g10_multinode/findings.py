"""G10's finding codes: each stable code its results may carry, with what it means. A code once
released is never renamed or removed; ``docs/REFERENCE.md``'s findings table is built from these."""

from __future__ import annotations

from pytest_dgx_spark.checks.spec import FindingCode

CODES: tuple[FindingCode, ...] = (
    FindingCode("G10.tp-across-nodes", "FAIL/WARN",
                "tensor parallelism across nodes for a training (or unmarked) job"),
    FindingCode("G10.tp-serving", "WARN", "a serving job runs tensor parallelism across nodes"),
    FindingCode("G10.other-job", "WARN",
                "a running process of yours, not this run's job nor marked training or serving, uses TP across nodes"),
    FindingCode("G10.container-no-rdma", "FAIL", "a multi-node job in a container without /dev/infiniband"),
    FindingCode("G10.memlock-low", "WARN", "the memlock limit is too low for NCCL's RDMA registration"),
    FindingCode("G10.nccl-ib-hca", "WARN",
                "NCCL_IB_HCA selects no usable IB device: NCCL falls back to sockets"),
    FindingCode("G10.nccl-ib-hca-twin", "WARN", "NCCL_IB_HCA names one twin of a port but not the other"),
    FindingCode("G10.nccl-ib-disabled", "WARN", "NCCL_IB_DISABLE=1 on a multi-node job"),
    FindingCode("G10.mtu-low", "WARN", "the MTU of NCCL's interface is below 9000"),
    FindingCode("G10.probe-failed", "WARN", "the all-reduce probe failed or hung"),
    FindingCode("G10.allreduce-wrong", "WARN", "the all-reduce returned wrong values"),
    FindingCode("G10.busbw-degraded", "FAIL",
                "all-reduce bus bandwidth below what a working link ever falls to"),
    FindingCode("G10.busbw-low", "WARN", "all-reduce bus bandwidth below the two-Spark floor"),
    FindingCode("G10.rank-missing", "FAIL", "a rank never joined the node comparison"),
    FindingCode("G10.nodes-not-compared", "WARN", "the node comparison could not run"),
    FindingCode("G10.nodes-differ", "FAIL", "nodes differ in GPU, driver, CUDA, torch or NCCL"),
    FindingCode("G10.nodes-differ-env", "WARN", "nodes differ in an NCCL/UCX/GLOO variable"),
    FindingCode("G10.nodes-differ-container", "WARN", "nodes run different containers"),
    FindingCode("G10.nodes-differ-mtu", "WARN", "nodes differ in the MTU of the NCCL interface"),
    FindingCode("G10.nodes-differ-packages", "WARN", "nodes differ in package versions"),
    FindingCode("G10.nodes-differ-python", "WARN", "nodes run different Pythons"),
    FindingCode("G10.node-memory-low", "WARN", "MemAvailable much lower on a node than on the best one"),
    FindingCode("G10.node-fails", "FAIL", "another node fails its own preflight"),
    FindingCode("G10.process-table-incomplete", "WARN",
                "the process table was not read whole: a job's flags may be unread"),
    FindingCode("G10.config-search-incomplete", "INFO", "the config search did not finish"),
    FindingCode("G10.config-unreadable", "SKIP", "the config named with --spark-config could not be read"),
)
