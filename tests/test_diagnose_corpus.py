"""``spark-preflight diagnose`` on real logs (issue 30): right on the posted failure logs, silent on
healthy ones, context and the log's own facts decide a sign's weight, and "unknown" still helps.

The healthy corpus is ``tests/data/diagnose/healthy/`` (alarming lines that healthy Sparks print,
from public captures and the field notes' list; a generated 33,000-line one-node run and a
two-node run, ``make_healthy_logs.py``) plus the public captures of working Sparks in
``tests/data/gb10/`` named in :data:`HEALTHY_CAPTURES`. The posted failure logs are in
``tests/data/gb10/``; the gotchas they name come from ``posted_logs.json`` (written from the
captures' index, not from the signature table).
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from pytest_dgx_spark import cli, logscan
from pytest_dgx_spark.diagnose import (
    Diagnosis,
    MachineFacts,
    decide,
    fact_gates,
    log_facts,
    machine_facts,
    results,
)
from pytest_dgx_spark.model import Reading, Result, Status
from pytest_dgx_spark.redact import Redactor

DATA = Path(__file__).parent / "data"
HEALTHY = DATA / "diagnose" / "healthy"
POSTED = json.loads((DATA / "diagnose" / "posted_lines.json").read_text(encoding="utf-8"))
POSTED_LOGS = json.loads((DATA / "diagnose" / "posted_logs.json").read_text(encoding="utf-8"))["logs"]
TABLE = logscan.load_table()
REDACT = Redactor({}, personal=False)
G1_LINE = "ImportError: libcudart.so.12: cannot open shared object file: No such file or directory"

#: public captures of working Sparks (tests/data/gb10/, each with its source line): nccl-tests
#: between two Sparks, NCCL_DEBUG=INFO inits, link and bandwidth probes, nvidia-smi/NVML/DCGM
#: output with its N/A fields, torch's arch lists and capability warnings
HEALTHY_CAPTURES = (
    "bandwidth_1", "bandwidth_2", "bandwidth_3", "bandwidth_5", "collect_env_1", "collect_env_2", "collect_env_3",
    "cudaMemGetInfo_1", "cuda_device_props_1", "cuda_device_props_2", "dcgm_fields_1", "link_ibstat_1",
    "link_roce_daqiri_1", "link_two_spark_ib_write_bw_1", "link_two_spark_ib_write_bw_2", "nccl_debug_two_spark_1",
    "nccl_multi_spark_6", "nccl_two_spark_1", "nccl_two_spark_2", "nccl_two_spark_4", "nccl_two_spark_5",
    "nvidia-smi-q_2", "nvidia-smi-q_3", "nvidia-smi-query_1", "nvidia-smi-query_3", "nvidia-smi_2", "nvidia-smi_3",
    "nvidia-smi_4", "nvidia-smi_5", "nvidia-smi_6", "nvidia-smi_7", "nvidia-smi_clocks_power_1",
    "nvidia-smi_clocks_power_2", "nvml_memory_1", "nvml_memory_2", "nvml_process_memory_1", "nvtop_gb10_1",
    "playbook_nccl_two_spark_1", "proc_driver_nvidia_version_1", "proc_meminfo_1", "proc_meminfo_2",
    "tool_gpu_detection_1", "torch_arch_list_1", "torch_arch_list_2", "torch_arch_list_4", "torch_arch_policy_1",
    "torch_capability_1", "torch_device_props_1", "torch_warning_1", "torch_warning_2", "torch_warning_3",
    "two_spark_config_2", "two_spark_tp_perf_1", "two_spark_tp_perf_2", "two_spark_tp_perf_3", "workload_bandwidth_1",
)  # fmt: skip


def corpus() -> list[Path]:
    return sorted([*HEALTHY.glob("*.txt"), *HEALTHY.glob("*.gz"), *(DATA / "gb10" / f"{n}.txt" for n in HEALTHY_CAPTURES)])


def scan(path: Path, table: logscan.Table = TABLE) -> logscan.FileScan:
    return logscan.Matcher(table).scan(str(path), REDACT, label=path.name)


def run(capsys: pytest.CaptureFixture[str], *paths: Path, args: tuple[str, ...] = ()) -> tuple[int, list[str]]:
    code = cli.main(["diagnose", "--no-machine", *args, *map(str, paths)])
    return code, capsys.readouterr().out.splitlines()


def lines_of(name: str) -> list[str]:
    return gzip.decompress((HEALTHY / name).read_bytes()).decode().splitlines()


# --------------------------------------------------------------------------- silent on healthy logs


def test_no_shipped_signature_counts_anywhere_in_the_healthy_corpus() -> None:
    """Every shipped signature over the whole corpus at once: no line of it may count, weak or strong."""
    files = corpus()
    assert len(files) >= len(HEALTHY_CAPTURES) + 3 and all(f.exists() for f in files)
    scans = [scan(f) for f in files]
    assert all(s.error is None for s in scans)
    counted = []
    for s in scans:  # each log alone: its own facts (one node, two nodes) decide
        diag = decide([s], TABLE)
        counted += [f"{e.hit.where} {e.sig.id} ({e.weight})" for evs in diag.per_check.values() for e in evs]
    assert counted == []
    assert sum(s.lines for s in scans) > 45_000


def test_the_corpus_holds_the_lines_that_used_to_be_blamed() -> None:
    """The corpus would catch S46 counting on one node and S47 losing its ``\\s*$`` anchor."""
    text = (HEALTHY / "alarming_lines.txt").read_text(encoding="utf-8")
    assert "NCCL INFO NET/IB : No device found." in text and "# Avg bus bandwidth    : 21.4033 " in text
    single = lines_of("single_node_train.log.gz")
    assert len(single) == 33_000 and any("NET/IB : No device found" in ln for ln in single)
    assert any(" nranks 1 " in ln for ln in single)
    assert any(" nranks 2 " in ln for ln in lines_of("two_node_train.log.gz"))


def test_a_healthy_33000_line_single_node_log_names_nothing(capsys) -> None:
    code, out = run(capsys, HEALTHY / "single_node_train.log.gz")
    assert code == 0 and out[-1] == "diagnosis: unknown — no known failure in 33,000 lines (1 file)"
    assert not [ln for ln in out if re.match(r"G\d+ (FAIL|WARN)", ln)]


def test_a_real_failure_after_a_false_early_line_is_the_cause(tmp_path, capsys) -> None:
    """The healthy log's ``No device found`` (line 9) is no failure: the ImportError 3,000 lines on is."""
    lines = lines_of("single_node_train.log.gz")
    first = next(i for i, ln in enumerate(lines, 1) if "No device found" in ln)
    log = tmp_path / "train.log"
    log.write_text("\n".join([*lines[:3000], G1_LINE, *lines[3000:]]) + "\n")
    code, out = run(capsys, log)
    assert first < 3001 and code == 1 and out[-1] == "diagnosis: G1 (first failure at train.log:3001)"
    assert not [ln for ln in out if ln.startswith("G10 ") and ("FAIL" in ln or "WARN" in ln)]


def test_no_device_found_counts_in_a_two_node_job_and_on_no_single_node(tmp_path, capsys) -> None:
    two = lines_of("two_node_train.log.gz")
    line = "spark-4440:24302:24373 [0] NCCL INFO NET/IB : No device found."
    log = tmp_path / "rank1.log"
    log.write_text("\n".join([*two[:20], line, *two[20:200]]) + "\n")
    code, out = run(capsys, log)
    assert code == 1 and out[-1] == "diagnosis: G10 (first failure at rank1.log:21)"
    g10 = next(ln for ln in out if ln.startswith("G10 "))
    assert g10.startswith('G10 FAIL: rank1.log:21: "spark-4440')
    summary = {r.check_id: r for r in results(decide([scan(log)], TABLE), TABLE)}["G10"].summary
    assert "(with a job of more than one node)" in summary
    # the same line, the job of one node (nranks 1): not counted; no context at all: not counted either
    one = tmp_path / "one.log"
    one.write_text("\n".join([line.replace("spark-4440", "spark-92ad"), *lines_of("single_node_train.log.gz")[:40]]) + "\n")
    bare = tmp_path / "bare.log"
    bare.write_text("step 1 loss 2.0\n" + line + "\n")
    for path in (one, bare):
        diag = decide([scan(path)], TABLE)
        assert diag.cause is None and not diag.per_check["G10"], path.name


def test_a_user_signature_is_checked_against_the_corpus_the_way_the_readme_says(tmp_path, capsys) -> None:
    """The README's recipe: a signature that matches a healthy line shows up as a WARN/FAIL on the corpus."""
    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps({"signatures": [
        {"id": "U1", "pattern": r"NCCL INFO Using network", "gotcha": "G10", "weight": "weak", "fix": "x", "source": "mine"},
    ]}))  # fmt: skip
    code, out = run(capsys, *sorted(HEALTHY.glob("*.gz")), args=("--signatures", str(mine)))
    assert code == 0 and any(ln.startswith("G10 WARN: ") for ln in out)
    assert "weak signs: G10 at single_node_train.log.gz:" in out[-1]


# --------------------------------------------------------------------------- right on the posted logs


@pytest.mark.parametrize("name", sorted(POSTED_LOGS))
def test_each_posted_failure_log_is_named_right(name: str, capsys) -> None:
    expected = POSTED_LOGS[name]
    code, out = run(capsys, DATA / "gb10" / f"{name}.txt")
    last = out[-1]
    named = re.match(r"diagnosis: (G\d+) \(first failure at ", last)
    weak = re.match(r"diagnosis: unknown; weak signs: (G\d+) at ", last)
    if expected.get("weak_only"):
        assert code == 0 and weak and weak.group(1) in expected["gotchas"], last
    else:
        assert code == 1 and named and named.group(1) in expected["gotchas"], last


# --------------------------------------------------------------------------- facts from the log


def facts_of(text: str, tmp_path: Path) -> dict[str, list[str]]:
    p = tmp_path / "facts.log"
    p.write_text(text)
    return log_facts(scan(p), TABLE)


def test_the_log_states_its_kernel_blocks_cma_ranks_and_hosts(tmp_path) -> None:
    frag = (DATA / "gb10" / "memory_fragmentation_1.txt").read_text(encoding="utf-8")
    facts = facts_of(frag, tmp_path)
    assert facts["kernel_release"] == ["6.17.0-1031-nvidia"] and "zero" in facts["free_32mib_blocks"]
    assert fact_gates(facts)["high_order_blocks_empty"] is True and fact_gates(facts)["kernel_7_0_0_1019"] is False
    cma = facts_of((DATA / "gb10" / "proc_meminfo_4.txt").read_text(encoding="utf-8"), tmp_path)
    assert fact_gates(cma)["cma_free_over_total"] is True
    nccl = facts_of((DATA / "gb10" / "nccl_debug_two_spark_1.txt").read_text(encoding="utf-8"), tmp_path)
    assert {"spark-fb97", "spark-4440"} <= set(nccl["host"]) and fact_gates(nccl)["multi_node"] is True
    assert fact_gates(facts_of("0 free 32 MiB blocks\n5,000 free 32 MiB blocks\n", tmp_path))["high_order_blocks_empty"]
    assert fact_gates(facts_of("5,000 free 32 MiB blocks\n", tmp_path))["high_order_blocks_empty"] is False
    assert fact_gates(facts_of("CmaTotal: 65536 kB\nCmaFree: 65536 kB\n", tmp_path))["cma_free_over_total"] is False
    single = fact_gates(facts_of("h:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 1 cudaDev 0 - Init COMPLETE\n", tmp_path))
    assert single["single_node"] is True and single["multi_node"] is False
    assert fact_gates(facts_of("torchrun --nnodes=2 --nproc_per_node=1 train.py\n", tmp_path))["multi_node"] is True


NV_ERR = POSTED["failure"]["S29"]


@pytest.mark.parametrize(
    ("stated", "machine", "weight"),
    [("Linux spark-92ad 7.0.0-1019-nvidia aarch64", None, "strong"),
     ("Linux spark-92ad 7.0.0-1025-nvidia aarch64", None, "weak"),
     ("Linux spark-92ad 6.17.0-1032-nvidia aarch64", {"kernel_release": "7.0.0-1019-nvidia"}, "weak"),
     ("Linux spark-92ad 7.0.0-1019-nvidia aarch64", {"kernel_release": "6.17.0-1032-nvidia"}, "strong"),
     ("a training run", {"kernel_release": "7.0.0-1019-nvidia"}, "strong"),
     ("a training run", {"kernel_release": "7.0.0-1025-nvidia"}, "weak"),
     ("zone Normal: 0 free 32 MiB blocks", None, "strong"),
     ("zone Normal: 5,000 free 32 MiB blocks", {"high_order_blocks_empty": True}, "weak")],
)  # fmt: skip
def test_the_logs_own_facts_gate_a_weak_sign_and_win_over_the_machines(tmp_path, stated, machine, weight) -> None:
    """Kernel 7.0.0-1025 is not 7.0.0-1019; a log from another box is judged by what it says of itself."""
    p = tmp_path / "train.log"
    p.write_text(f"{stated}\nstep 10 loss 2.1\n{NV_ERR}\n")
    diag = decide([scan(p)], TABLE, MachineFacts(**machine) if machine else None)
    assert diag.per_check["G3"][0].weight == weight
    assert (diag.cause is not None) is (weight == "strong")


def test_machine_facts_count_blocks_and_cma_as_read() -> None:
    """5,000 free 32 MiB blocks are not none; CmaFree equal to CmaTotal is not the kernel 7.0 bug."""
    g1 = Result("G1", Status.PASS, "ok", readings=[Reading("cma_total", 65536, "kB"), Reading("cma_free", 65536, "kB")])
    g3 = Result("G3", Status.PASS, "ok", readings=[Reading("normal_free_blocks", 5000)])
    facts = machine_facts({}, {"G1": g1, "G3": g3})
    assert facts.high_order_blocks_empty is False and facts.cma_free_over_total is False


# --------------------------------------------------------------------------- "unknown" still helps


def test_unknown_names_its_weak_signs_and_the_first_error_line(tmp_path, capsys) -> None:
    log = tmp_path / "train.log"
    log.write_text("\n".join(["step 1 loss 2.0"] * 7 + [NV_ERR, "step 9 loss 1.9",
                                                         "Traceback (most recent call last):",
                                                         "RuntimeError: shape mismatch in layer 3"]) + "\n")  # fmt: skip
    code, out = run(capsys, log)
    assert code == 0
    assert out[-1] == "diagnosis: unknown; weak signs: G3 at train.log:8 — no known failure in 11 lines (1 file)"
    assert '  first error-looking line: train.log:10: "Traceback (most recent call last):"' in out
    assert any("spark-preflight --capture" in ln and "train.log:10" in ln for ln in out)


def test_a_named_cause_prints_no_hints(tmp_path, capsys) -> None:
    log = tmp_path / "train.log"
    log.write_text(f"Traceback (most recent call last):\n{G1_LINE}\n")
    code, out = run(capsys, log)
    assert code == 1 and not [ln for ln in out if "first error-looking" in ln or "--capture" in ln]


# --------------------------------------------------------------------------- primacy across ranks (M2)


def test_the_compiling_rank_is_the_cause_not_the_watchdog(tmp_path, capsys) -> None:
    """FIELD-2026-12b M2: one rank compiles, its peer's watchdog fires 600 s later; the compile is the cause."""
    rank0 = tmp_path / "rank0.log"
    rank0.write_text(f"2026-09-02 11:57:00,100 step 10 loss 2.1\n2026-09-02 11:57:03,500 {POSTED['failure']['M2']}\n")
    rank1 = tmp_path / "rank1.log"
    rank1.write_text("2026-09-02 11:57:00,200 step 10 loss 2.1\n2026-09-02 12:07:05,991 " + POSTED["context"]["M2"][0] + "\n")
    code, out = run(capsys, rank1, rank0)
    assert code == 1 and out[-1] == "diagnosis: G10 (first failure at rank0.log:2)"
    alone = tmp_path / "warmup.log"  # the same compile line in a run without a watchdog: warm-up, healthy
    alone.write_text(POSTED["failure"]["M2"] + "\n")
    assert not decide([scan(alone)], TABLE).per_check["G10"]


def test_an_xid_13_is_g7_when_the_job_names_nvfp4_kernels_else_g4(tmp_path) -> None:
    """dmesg_xid_2: Xid 13 under vLLM's NVFP4 kernels; the application log of the job names them."""
    kern = tmp_path / "kern.log"
    kern.write_text("Aug 28 11:55:08 spark-0d93 kernel: NVRM: Xid (PCI:000f:01:00): 13, Graphics SM Global Exception\n")
    app = tmp_path / "vllm.log"
    app.write_text("INFO 08-28 11:40:02 [config.py:1] Using FlashInfer CUTLASS NVFP4 MoE backend\n")
    plain = tmp_path / "train.log"
    plain.write_text("step 10 loss 2.1\n")
    with_nvfp4 = decide([scan(app), scan(kern)], TABLE)
    assert with_nvfp4.per_check["G7"] and with_nvfp4.per_check["G7"][0].hit.file == "kern.log"
    assert not decide([scan(plain), scan(kern)], TABLE).per_check["G7"]
    assert decide([scan(plain), scan(kern)], TABLE).per_check["G4"][0].weight == "medium"


def test_shm_broadcast_is_weak_alone_and_strong_next_to_an_rdma_error(tmp_path) -> None:
    shm = POSTED["failure"]["M7"]
    cqe = ("[2026-04-06 23:02:12] gx10-9eba:158:188 [0] transport/net_ib/p2p.cc:651 NCCL WARN NET/IB: Got completion "
           "from peer 10.20.21.20<43007> with status=IBV_WC_REM_INV_REQ_ERR(9) opcode=IBV_WC_SEND(0) vendor_err=138")
    p = tmp_path / "head.log"
    p.write_text(shm + "\n")
    assert decide([scan(p)], TABLE).per_check["G10"][0].weight == "weak"
    p.write_text(cqe + "\n" + shm + "\n")
    diag = decide([scan(p)], TABLE)
    assert diag.cause is not None and diag.cause.sig.id == "M7" and diag.cause.hit.line == 2


# --------------------------------------------------------------------------- the decisions a user acts on


def test_a_user_signature_overrides_the_built_in_one_for_its_line(tmp_path, capsys) -> None:
    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps({"signatures": [{"id": "U1", "pattern": r"libcudart\.so\.12", "gotcha": "G1",
                                                 "weight": "strong", "fix": "use our cu130 image", "source": "runbook"}]}))  # fmt: skip
    table = logscan.load_table(mine)
    log = tmp_path / "train.log"
    log.write_text(f"step 1\n{G1_LINE}\n")
    s = scan(log, table)
    assert [h.sig for h in s.hits] == ["U1"]  # one per gotcha, the user's first
    g1 = {r.check_id: r for r in results(decide([s], table), table)}["G1"]
    assert g1.fix == "use our cu130 image" and "S2" not in "\n".join(g1.details)


def test_a_strong_sign_outranks_an_earlier_weak_one_of_the_same_check(tmp_path) -> None:
    p = tmp_path / "train.log"
    p.write_text(f"{NV_ERR}\nstep 2\n{POSTED['failure']['S25']}\n")
    diag = decide([scan(p)], TABLE)
    g3 = {r.check_id: r for r in results(diag, TABLE)}["G3"]
    assert diag.cause is not None and diag.cause.gotcha == "G3" and g3.status is Status.FAIL
    assert "train.log:3" in g3.summary


def test_s57_knows_both_of_its_lines(tmp_path) -> None:
    for line in ("FAIL — GPU IS THROTTLED", "Cause: POWER — bad USB PD or PSU issue"):
        p = tmp_path / "throttle.log"
        p.write_text(line + "\n")
        diag = decide([scan(p)], TABLE)
        assert diag.cause is not None and diag.cause.gotcha == "G4", line


# --------------------------------------------------------------------------- wording


def posted_results(sid: str, tmp_path: Path, facts: MachineFacts | None = None) -> tuple[Diagnosis, list[Result]]:
    p = tmp_path / f"{sid}.log"
    p.write_text("\n".join([*POSTED["context"].get(sid, []), POSTED["failure"][sid]]) + "\n")
    diag = decide([scan(p)], TABLE, facts)
    return diag, results(diag, TABLE)


@pytest.mark.parametrize("sid", sorted(s.id for s in TABLE.signatures if s.kind == "signature" and s.id in POSTED["failure"]))
def test_a_line_says_each_clause_once(sid: str, tmp_path) -> None:
    _, lines = posted_results(sid, tmp_path)
    for r in lines:
        assert r.summary.count("would confirm") <= 1, r.summary
        assert r.status is not Status.WARN or r.summary.count("; ") <= 2, r.summary


def test_s31_shows_the_memlock_fix_unless_the_kernel_says_n3(tmp_path) -> None:
    _, lines = posted_results("S31", tmp_path)
    g10 = {r.check_id: r for r in lines}["G10"]
    assert g10.status is Status.WARN and "memlock" in g10.fix and "6.17" not in g10.fix + (g10.short_fix or "")
    assert all(r.status is Status.INFO for r in lines if r.check_id != "G10")
    _, lines = posted_results("S31", tmp_path, MachineFacts(kernel_release="7.0.0-1019-nvidia"))
    g10 = {r.check_id: r for r in lines}["G10"]
    assert g10.status is Status.FAIL and "6.17.0-1032" in g10.fix and "kernel 7.0.0-1019" in g10.summary


PUBLIC = re.compile(r"https?://\S+|\b[\w.-]+/[\w.-]+(?:#\d+| PR #\d+| \S+\.(?:py|md|cuh?)\b| README\b| traps? \d+)|forum t/\d+")


def test_every_source_a_user_sees_is_public() -> None:
    for sig in TABLE.signatures:
        assert PUBLIC.search(sig.source), (sig.id, sig.source)
        assert not re.search(r"\bid \d{6,}|public code file|INDEX\b", sig.source), (sig.id, sig.source)
