"""The registry of finding codes: one row per stable code a check may put on a result.

A code (``G4.xid-hardware``) names a finding, not its words: the text may be reworded, the code
stays, so a dashboard, a scheduler's health check, diagnose or a test can key on it. A code once
released is never renamed or removed (``tests/data/released_codes.txt`` holds the released ones).
Every ``code=`` at a finding site must be a row here (a test scans the checks for them), and
docs/REFERENCE.md's findings table is :func:`markdown_table` of these rows (a test compares them).
Standard library only: the plugin reads it on every ``--spark-preflight`` run.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from pytest_dgx_spark import catalog

#: ``G<n>.<kebab-case-slug>``
CODE_FORMAT = re.compile(r"G\d+\.[a-z0-9]+(?:-[a-z0-9]+)*")


class FindingCode(NamedTuple):
    code: str
    #: the statuses a result carrying it may have, ``/``-separated (``FAIL/WARN``)
    status: str
    #: one line: what the finding means
    meaning: str

    @property
    def check(self) -> str:
        return self.code.split(".", 1)[0]


_ROWS: tuple[FindingCode, ...] = (
    # G1: CUDA 12/13 ABI
    FindingCode("G1.child-not-started", "FAIL", "the torch child process could not start"),
    FindingCode("G1.torch-import-error", "FAIL", "torch is installed but does not import"),
    FindingCode("G1.child-died", "FAIL",
                "the torch child crashed or hung in a G1 step (import, load, CUDA init, tiny kernel)"),
    FindingCode("G1.cuda-major-mismatch", "FAIL",
                "shared objects link another CUDA major than torch's (or the reference)"),
    FindingCode("G1.driver-too-old", "FAIL",
                "torch or the CUDA modules need a newer CUDA than the driver supports"),
    FindingCode("G1.torch-cuda-major", "FAIL",
                "torch is built for another CUDA major than the profile needs (13 on GB10)"),
    FindingCode("G1.torch-cpu-only", "FAIL", "a CPU-only torch on a machine with an NVIDIA GPU"),
    FindingCode("G1.kernel-failed", "FAIL", "torch's tiny kernel failed or returned a wrong result"),
    FindingCode("G1.cuda-unavailable", "FAIL",
                "torch.cuda.is_available() is False with a GPU and a driver present"),
    FindingCode("G1.load-failed", "FAIL", "an extension shared object does not load (dlopen error)"),
    FindingCode("G1.no-cuda-variant", "FAIL", "a per-CUDA-version package ships no build for torch's CUDA"),
    FindingCode("G1.driver-library-mismatch", "FAIL",
                "the loaded NVIDIA kernel module is not the installed user-space driver"),
    FindingCode("G1.known-bad", "FAIL/WARN", "the kernel/driver/module combination is on the known-bad list"),
    FindingCode("G1.cma-accounting", "WARN", "CmaFree > CmaTotal: the kernel's KHO/CMA accounting bug"),
    FindingCode("G1.leftover-runtime", "WARN", "CUDA runtimes of another major that nothing links"),
    FindingCode("G1.not-loaded", "WARN",
                "extension objects not loaded: the torch child stopped in another check's step"),
    FindingCode("G1.cpu-torch-cuda-modules", "WARN", "a CPU-only torch, yet installed modules link CUDA"),
    FindingCode("G1.nothing-to-check", "SKIP", "no torch and no CUDA-linked module: no CUDA ABI to check"),
    # G2: flash-attn and Unsloth
    FindingCode("G2.probe-died", "FAIL", "the flash-attn probe crashed or hung"),
    FindingCode("G2.no-package", "FAIL",
                "flash-attn is in the metadata but no flash_attn package is importable"),
    FindingCode("G2.import-error", "FAIL", "flash-attn is installed but does not import"),
    FindingCode("G2.kernel-failed", "FAIL", "flash-attn imports but its kernel fails on this GPU"),
    FindingCode("G2.unsloth-ignores-sdpa", "WARN",
                "Unsloth uses flash-attn and ignores attn_implementation='sdpa'"),
    FindingCode("G2.torch-not-loaded", "SKIP", "flash-attn not checked: torch did not load (see G1)"),
    # G3: UMA headroom (and memory pressure)
    FindingCode("G3.exceeds-total", "FAIL",
                "the declared workload is larger than the machine's whole memory"),
    FindingCode("G3.retained-memory", "FAIL",
                "the workload does not fit, and much memory is held outside every meminfo category"),
    FindingCode("G3.exceeds-available", "FAIL", "the declared workload does not fit in MemAvailable"),
    FindingCode("G3.needs-cache-drop", "WARN", "the workload fits only once the page cache is dropped"),
    FindingCode("G3.fragmented", "FAIL/WARN", "too few large free blocks in zone Normal (none: FAIL)"),
    FindingCode("G3.cgroup-below-workload", "FAIL", "the cgroup memory limit is below the declared workload"),
    FindingCode("G3.cgroup-limit", "WARN", "a cgroup memory limit well below the machine's memory"),
    FindingCode("G3.ray-memory-monitor", "WARN", "Ray's memory monitor kills workers on unified memory"),
    FindingCode("G3.oom-kills", "WARN", "the kernel's OOM killer killed processes since boot"),
    FindingCode("G3.no-workload", "INFO", "the headroom read, but no workload declared to judge it against"),
    FindingCode("G3.unreadable", "SKIP", "/proc/meminfo could not be read or is impossible"),
    # G4: thermals and power
    FindingCode("G4.driver-not-answering", "FAIL", "the GPU driver hung or stopped answering"),
    FindingCode("G4.gpu-lost", "FAIL", "a GPU was lost mid-sample (GpuIsLost)"),
    FindingCode("G4.gpu-errors", "FAIL", "a GPU answered errors only"),
    FindingCode("G4.xid-hardware", "FAIL", "GSP/hardware Xid faults in the kernel log since boot"),
    FindingCode("G4.xid-application", "WARN", "an application Xid (a GPU kernel faulted) since boot"),
    FindingCode("G4.xid-other", "WARN", "other Xid events in the kernel log since boot"),
    FindingCode("G4.low-power-stuck", "FAIL",
                "under load, SM clock and power both under the low-power gate with no throttle reason"),
    FindingCode("G4.throttle-reasons", "WARN", "thermal or power throttle reasons during the sample"),
    FindingCode("G4.temperature-high", "WARN", "the GPU temperature reached the warning level"),
    FindingCode("G4.tlimit-margin", "WARN", "the GPU is within the T.Limit margin of its slowdown limit"),
    FindingCode("G4.flat-power", "WARN", "power flat under the limit while the temperature rose"),
    FindingCode("G4.clocks-cut", "WARN", "thermal or power-brake slowdown counters grew during the sample"),
    FindingCode("G4.clocks-cut-since-boot", "WARN",
                "thermal slowdown since the driver loaded beyond the threshold"),
    FindingCode("G4.no-gpu", "SKIP", "no NVIDIA GPU to sample"),
    FindingCode("G4.resource-limit", "SKIP", "not checked: a resource limit stopped the sampler"),
    # G5: bandwidth budget
    FindingCode("G5.probe-hung", "FAIL", "the copy probe hung: the driver is not answering"),
    FindingCode("G5.plan-above-budget", "WARN", "the planned bandwidth is above what this memory sustains"),
    FindingCode("G5.copy-low", "WARN", "the measured copy bandwidth is below the healthy floor"),
    FindingCode("G5.budget-only", "INFO", "no planned bandwidth and no measurement: the budget only"),
    FindingCode("G5.probe-not-run", "SKIP", "the asked-for copy probe was refused or gave no number"),
    # G6: UMA contention
    FindingCode("G6.uncapped-process", "FAIL", "another GPU process is uncapped or above the cap"),
    FindingCode("G6.capped-process", "WARN", "another GPU process, capped or small, shares the pool"),
    FindingCode("G6.process-list-unreadable", "WARN", "neither NVML nor nvidia-smi listed the GPU processes"),
    FindingCode("G6.process-table-incomplete", "WARN", "the process table was not read whole"),
    FindingCode("G6.no-gpu", "SKIP", "no NVIDIA GPU to contend for"),
    FindingCode("G6.not-surveyed", "SKIP", "no GPU process list and no process table could be read"),
    # G7: NVFP4 vs FP8
    FindingCode("G7.torch-cpu-only", "FAIL", "a CPU-only torch on a GB10: nothing runs on the GPU"),
    FindingCode("G7.no-sm121-kernel", "FAIL", "torch's arch list has no cubin or PTX that runs on SM121"),
    FindingCode("G7.arch-list-env", "WARN", "TORCH_CUDA_ARCH_LIST builds nothing SM121 runs"),
    FindingCode("G7.nvfp4-no-target", "WARN", "NVFP4 kernels installed without an SM121 FP4 target"),
    FindingCode("G7.nvfp4-planned-no-kernel", "WARN",
                "--spark-precision nvfp4, but nothing targets sm_121a/sm_120f"),
    FindingCode("G7.triton-ptxas-old", "WARN", "Triton's ptxas is older than what accepts sm_121a"),
    FindingCode("G7.ptxas-rejects", "FAIL",
                "Triton's ptxas rejects sm_121a (or Triton refuses CUDA 13's ptxas)"),
    FindingCode("G7.triton-compile-failed", "WARN", "Triton could not compile a trivial kernel for sm_121a"),
    FindingCode("G7.python-h-missing", "FAIL/WARN", "no Python.h: Triton cannot build its launcher"),
    FindingCode("G7.fp8-cublas-tn-only", "WARN",
                "--spark-precision fp8 with a cuBLAS whose FP8 GEMMs are TN-only on cc 12.x"),
    FindingCode("G7.vllm-no-fp8-kernel", "WARN", "--spark-precision fp8, but vLLM has no cubin for SM121"),
    FindingCode("G7.arch-list-unknown", "INFO", "SM121 found, but torch's arch list could not be read"),
    FindingCode("G7.no-gpu", "SKIP", "no NVIDIA GPU found"),
    FindingCode("G7.not-sm121", "SKIP", "the GPU is not SM121: the NVFP4 vs FP8 question is GB10's"),
    # G8: stale playbooks
    FindingCode("G8.playbook-issues", "WARN", "open upstream issues name the chosen playbook"),
    FindingCode("G8.no-playbook", "INFO", "open playbook issues listed; no playbook named to match them"),
    FindingCode("G8.offline", "SKIP", "offline: GitHub not contacted"),
    FindingCode("G8.github-unavailable", "SKIP",
                "GitHub's issue list could not be read (timeout, rate limit, HTTP error)"),
    # G9: container vs bare pip
    FindingCode("G9.driver-below-image", "FAIL",
                "the image needs a newer CUDA/driver than the host's, with no forward compatibility"),
    FindingCode("G9.broken-requirements", "FAIL",
                "installed distributions break their declared requirements"),
    FindingCode("G9.forward-compat-gb10", "WARN",
                "the image relies on forward compatibility, which GB10 may not support"),
    FindingCode("G9.replaced-by-pip", "WARN", "pip replaced an NGC container's own build"),
    FindingCode("G9.no-container", "WARN", "bare pip or an unknown container"),
    # G10: two-Spark parallelism
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

#: codes only ``spark-preflight watch`` says (an event during the run; its fix: ``watch/rules.py``):
#: a preflight check never carries them, so no recorded facts make them
_WATCH_ROWS: tuple[FindingCode, ...] = (
    FindingCode("G3.memavailable-low", "WARN", "watch: MemAvailable fell below the declared workload's margin"),
    FindingCode("G3.oom-kill", "WARN", "watch: a new OOM kill in the kernel log during the run"),
    FindingCode("G4.clock-event", "INFO/WARN",
                "watch: a clock-event reason became active (power cap INFO; thermal, slowdown, brake WARN)"),
    FindingCode("G4.clocks-low", "WARN", "watch: clocks stuck low while the GPU is busy"),
    FindingCode("G4.no-answer", "WARN", "watch: NVML stopped answering for three intervals"),
    FindingCode("G6.new-process", "WARN", "watch: a new GPU process appeared during the run"),
    FindingCode("G6.over-cap", "WARN", "watch: a GPU process grew past its memory cap"),
    FindingCode("G6.job-stalled", "WARN", "watch: the job's GPU stayed idle past --stall-seconds while it ran"),
)

#: code -> its row (a check's findings)
CODES: dict[str, FindingCode] = {row.code: row for row in _ROWS}
#: code -> its row (watch's events beyond the checks' own codes)
WATCH: dict[str, FindingCode] = {row.code: row for row in _WATCH_ROWS}

#: a check that crashed (the engine), and diagnose's log evidence for a check (a strong line, a
#: medium or weak sign): codes every check has, ``G<n>.<slug>``
CRASHED, LOG_FAILURE, LOG_SIGN = "check-crashed", "log-failure", "log-sign"
PER_CHECK: dict[str, tuple[str, str]] = {
    CRASHED: ("FAIL", "the check itself crashed, so nothing was verified"),
    LOG_FAILURE: ("FAIL", "diagnose: a strong line of the failed run's logs names this gotcha"),
    LOG_SIGN: ("WARN", "diagnose: a medium or weak sign of this gotcha in the failed run's logs"),
}


def crashed(check_id: str) -> str:
    return f"{check_id}.{CRASHED}"


def log_code(check_id: str, strong: bool) -> str:
    """diagnose's code for a check's log evidence (which signature: the result's details)."""
    return f"{check_id}.{LOG_FAILURE if strong else LOG_SIGN}"


def known(code: str) -> bool:
    """A code of the registry, or one every check has (``G<n>.check-crashed``, ``G<n>.log-failure``…)."""
    if code in CODES or code in WATCH:
        return True
    check, _, slug = code.partition(".")
    return slug in PER_CHECK and check in catalog.IDS


def _check_number(code: str) -> int:
    return int(code[1:].split(".", 1)[0])


def markdown_table() -> str:
    """docs/REFERENCE.md's findings table, one row per code, by check."""
    rows = sorted((*_ROWS, *_WATCH_ROWS), key=lambda r: _check_number(r.code))  # stable within a check
    lines = ["| code | status | meaning |", "|---|---|---|"]
    lines += [f"| `{r.code}` | {r.status} | {r.meaning} |" for r in rows]
    lines += [f"| `G<n>.{slug}` | {status} | {meaning} |" for slug, (status, meaning) in PER_CHECK.items()]
    return "\n".join(lines) + "\n"


#: the lines around the generated table in docs/REFERENCE.md
TABLE_START = (
    "<!-- findings table: generated by `python -m pytest_dgx_spark.codes --update docs/REFERENCE.md` -->"
)
TABLE_END = "<!-- end of findings table -->"


def with_table(doc: str) -> str:
    """``doc`` with the text between :data:`TABLE_START` and :data:`TABLE_END` replaced by the table."""
    head, start, rest = doc.partition(TABLE_START)
    _, end, tail = rest.partition(TABLE_END)
    if not start or not end:
        raise ValueError(f"no {TABLE_START!r} … {TABLE_END!r} block")
    return f"{head}{TABLE_START}\n{markdown_table()}{TABLE_END}{tail}"


def main(argv: list[str] | None = None) -> int:
    """Print the findings table, or (``--update PATH``) rewrite it in place in PATH."""
    import sys
    from pathlib import Path

    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--update"] and len(args) == 2:
        path = Path(args[1])
        path.write_text(with_table(path.read_text(encoding="utf-8")), encoding="utf-8")
        return 0
    if args:
        print("usage: python -m pytest_dgx_spark.codes [--update docs/REFERENCE.md]", file=sys.stderr)
        return 2
    sys.stdout.write(markdown_table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
