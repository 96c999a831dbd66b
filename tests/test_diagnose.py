"""``spark-preflight diagnose``: a failed run's logs name the gotcha (issue 23).

Every signature of the table is found in the line Spark owners posted
(``tests/data/diagnose/posted_lines.json``), buried among the healthy lines
of a real two-Spark NCCL start (``healthy_nccl_init.txt``); the whitelisted
lines alone give ``diagnosis: unknown``; ranks are ordered by timestamps,
else by the order given; gates follow FIELD-2026-12 §4.3.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_dgx_spark import catalog, cli, logscan
from pytest_dgx_spark.diagnose import MachineFacts, decide, results
from pytest_dgx_spark.model import Status
from pytest_dgx_spark.redact import Redactor

DATA = Path(__file__).parent / "data" / "diagnose"
POSTED = json.loads((DATA / "posted_lines.json").read_text(encoding="utf-8"))
FILLER = (DATA / "healthy_nccl_init.txt").read_text(encoding="utf-8").splitlines()
TABLE = logscan.load_table()
REDACT = Redactor({}, personal=False)

#: a gotcha id past the last check: no signature may name it
NO_CHECK = f"G{len(catalog.IDS) + 1}"


def buried(line: str, at: int = 40) -> str:
    """``line`` at line ``at + 1`` of a log of healthy lines (filler before and after)."""
    before = [FILLER[i % len(FILLER)] for i in range(at)]
    return "\n".join([*before, line, *FILLER[:25]]) + "\n"


def diagnose(tmp_path: Path, capsys: pytest.CaptureFixture[str], *logs: str, args: tuple[str, ...] = ()
             ) -> tuple[int, list[str], str]:  # fmt: skip
    paths = []
    for i, text in enumerate(logs):
        p = tmp_path / f"rank{i}.log"
        p.write_text(text, encoding="utf-8")
        paths.append(str(p))
    code = cli.main(["diagnose", "--no-machine", *args, *paths])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err


def scan_text(tmp_path: Path, text: str, name: str = "train.log", grep: bool = True) -> logscan.FileScan:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    found = logscan.Matcher(TABLE).scan(str(p), REDACT, grep=grep)
    alone = logscan.Matcher(TABLE).scan(str(p), REDACT, grep=False)  # the two readers find the same lines
    assert (found.lines, found.hits, found.counts) == (alone.lines, alone.hits, alone.counts)
    return found


# --------------------------------------------------------------------------- the table


def test_the_table_covers_every_gotcha_row_of_field_4_1() -> None:
    ids = {s.id for s in TABLE.signatures}
    field_rows = {"S1", "S2", "S4", "S7", "S9", "S10", "S11", "S12", "S13", "S14", "S15", "S16", "S17", "S18",
                  "S19", "S20", "S21", "S22", "S23", "S24", "S25", "S26", "S27", "S29", "S30", "S31", "S32",
                  "S33", "S34", "S38", "S39", "S40", "S41", "S43", "S46", "S47", "S48", "S49", "S51", "S52",
                  "S56", "S57", "S60", "S5", "S6", "S54"}  # fmt: skip
    assert field_rows <= ids
    assert set(POSTED["failure"]) == {s.id for s in TABLE.signatures if s.kind == "signature"}
    for sig in TABLE.signatures:
        assert sig.source and "shared" not in sig.source, sig.id
        if sig.kind == "signature":
            assert sig.fix and sig.means, sig.id


@pytest.mark.parametrize("sid", sorted(POSTED["failure"]))
def test_each_signature_is_named_from_its_posted_line_among_healthy_ones(sid: str, tmp_path: Path) -> None:
    """The gotcha expected is the one the post names (``posted_lines.json``'s ``gotcha``), not the
    table's own: a gotcha changed in signatures.json fails here. Context a signature requires
    (S46: a multi-node job) comes after the line, from the same posts."""
    sig = TABLE.by_id(sid)
    context = POSTED["context"].get(sid, [])
    scan = scan_text(tmp_path, buried(POSTED["failure"][sid]) + "".join(f"{c}\n" for c in context))
    assert scan.lines == 40 + 1 + 25 + len(context)
    assert (sid, 41) in [(h.sig, h.line) for h in scan.hits]
    others = [h.sig for h in scan.hits if h.sig != sid]  # S22's line is S21's too (G3 and G6)
    assert all(TABLE.by_id(o).gotcha != sig.gotcha for o in others)
    diag = decide([scan], TABLE)
    expected = POSTED["gotcha"][sid]
    assert diag.per_check[expected] and diag.per_check[expected][0].hit.line == 41
    line = {r.check_id: r for r in results(diag, TABLE)}[expected]
    assert line.status is (Status.FAIL if sig.weight == "strong" else Status.WARN)
    assert line.codes == [f"{expected}.log-failure" if line.status is Status.FAIL else f"{expected}.log-sign"]
    assert "train.log:41" in line.summary and line.fix == (sig.ungated_fix or sig.fix)
    if sig.weight == "strong":
        assert diag.line() == f"diagnosis: {expected} (first failure at {tmp_path / 'train.log'}:41)"
    else:  # a medium or weak sign names no cause and says what would confirm it
        assert "sign" in line.summary
        assert (diag.cause is None) is (not others)


def test_whitelisted_lines_alone_give_unknown_and_v_lists_them(tmp_path, capsys) -> None:
    log = buried("\n".join(POSTED["healthy"].values()))
    code, out, _ = diagnose(tmp_path, capsys, log, args=("-v",))
    assert code == 0
    assert out[-1] == "diagnosis: unknown — no known failure in 70 lines (1 file)"
    assert not [ln for ln in out if ln.startswith("G") and (" FAIL: " in ln or " WARN: " in ln)]
    ignored = [ln for ln in out if "ignored" in ln]
    assert {w.split()[4] for w in ignored} == {"S5", "S6", "S54", "GDR"}


# --------------------------------------------------------------------------- the decision


def test_the_rank_that_failed_first_by_timestamp_is_the_cause(tmp_path, capsys) -> None:
    rank0 = buried("2026-12-05 10:00:09,100 torch.AcceleratorError: CUDA error: out of memory\n"
                   "2026-12-05 10:00:09,200 spark-fb97:1:1 [0] NCCL WARN NET/IB : Got completion with error 12\n"
                   "2026-12-05 10:00:10,000 ValueError: No available memory for the cache blocks.")  # fmt: skip
    rank1 = buried("2026-12-05 10:00:02,500 ImportError: libnvrtc.so.12: cannot open shared object file: "
                   "No such file or directory", at=100)  # fmt: skip
    code, out, _ = diagnose(tmp_path, capsys, rank0, rank1)
    assert code == 1
    assert out[-1] == "diagnosis: G1 (first failure at rank1.log:101)"
    assert any("rank0.log:43 (G3, S25) came after the first failure: secondary" in ln for ln in out)
    assert any("1 NCCL error line(s) in" in ln and "secondary" in ln for ln in out)


def test_without_timestamps_the_first_file_given_is_the_first_failure(tmp_path, capsys) -> None:
    code, out, _ = diagnose(tmp_path, capsys, buried(POSTED["failure"]["S46"], at=300),
                            buried(POSTED["failure"]["S9"], at=3))  # fmt: skip
    assert code == 1 and out[-1].startswith("diagnosis: G10 (first failure at") and "rank0.log:301" in out[-1]


def test_primacy_beats_frequency_within_a_rank(tmp_path) -> None:
    flood = "\n".join([POSTED["failure"]["S27"]] * 50)
    scan = scan_text(tmp_path, buried(POSTED["failure"]["S10"] + "\n" + flood))
    diag = decide([scan], TABLE)
    assert diag.cause is not None and diag.cause.gotcha == "G7" and diag.cause.hit.line == 41
    assert scan.counts["S27"] == 50 and len([h for h in scan.hits if h.sig == "S27"]) == logscan.KEEP_HITS


@pytest.mark.parametrize(
    ("facts", "weight"),
    [({}, "weak"), ({"kernel_release": "6.17.0-1032-nvidia", "high_order_blocks_empty": False}, "weak"),
     ({"kernel_release": "7.0.0-1019-nvidia"}, "strong"), ({"high_order_blocks_empty": True}, "strong")],
)  # fmt: skip
def test_nv_err_no_memory_is_no_cause_alone(tmp_path, facts: dict[str, Any], weight: str) -> None:
    scan = scan_text(tmp_path, buried(POSTED["failure"]["S29"]))
    diag = decide([scan], TABLE, MachineFacts(**facts))
    assert diag.per_check["G3"][0].weight == weight
    assert (diag.cause is not None) is (weight == "strong")
    line = {r.check_id: r for r in results(diag, TABLE)}["G3"]
    if weight == "weak":
        assert "kernel 7.0.0-1019" in line.summary and "would confirm it" in line.summary


def test_ibv_reg_mr_is_memlock_unless_kernel_or_cma_say_n3(tmp_path) -> None:
    """G10 either way (the posts: error_nccl_enomem_1, N3 on a two-Spark job), but the fix shown is
    the memlock limit unless the kernel or CMA say N3; the kernel's fix only then."""
    scan = scan_text(tmp_path, buried(POSTED["failure"]["S31"]))
    alone = decide([scan], TABLE)
    assert alone.per_check["G10"][0].weight == "medium" and alone.cause is None
    warn = {r.check_id: r for r in results(alone, TABLE)}["G10"]
    assert warn.status is Status.WARN and "memlock" in warn.fix and "6.17" not in warn.fix
    assert not any(alone.per_check[g] for g in ("G1", "G3"))
    gated = decide([scan], TABLE, MachineFacts(cma_free_over_total=True))
    assert gated.cause is not None and gated.cause.gotcha == "G10" and "6.17.0-1032" in (gated.cause.fix or "")


def test_a_kernel_log_is_read_with_the_application_log(tmp_path, capsys) -> None:
    kern = tmp_path / "kern.log"
    kern.write_text((DATA / "healthy_nccl_init.txt").read_text() + POSTED["failure"]["S33"] + "\n")
    code, out, _ = diagnose(tmp_path, capsys, buried("training step 12 loss 2.1"), args=("--kernel-log", str(kern)))
    assert code == 1 and out[-1] == "diagnosis: G9 (first failure at kern.log:61)"  # the driver flavour


def test_json_and_the_report_carry_the_diagnosis(tmp_path, capsys) -> None:
    code, out, _ = diagnose(tmp_path, capsys, buried(POSTED["failure"]["S18"]), args=("--json",))
    block = json.loads("\n".join(out))
    assert code == 1 and block["diagnosis"]["gotcha"] == "G2" and block["diagnosis"]["signature"] == "S18"
    assert block["diagnosis"]["code"] == "G2.log-failure"
    assert [(r["status"], r["codes"]) for r in block["results"] if r["id"] == "G2"] == [("FAIL", ["G2.log-failure"])]
    assert all(r["codes"] == [] for r in block["results"] if r["status"] == "INFO")  # no sign: no finding


# --------------------------------------------------------------------------- the machine


def test_a_replay_says_whose_machine_it_was_and_confirms_the_log(tmp_path, capsys) -> None:
    log = tmp_path / "train.log"
    log.write_text(buried(POSTED["failure"]["S2"]))
    capture = Path(__file__).parent / "data" / "captures" / "h200-cu12.json.gz"
    report = tmp_path / "env-report.json"
    code = cli.main(["diagnose", "--replay", str(capture), "--report", str(report), str(log)])
    out, err = capsys.readouterr()
    assert code == 1 and "replay of h200-cu12.json.gz" in err
    g1 = next(ln for ln in out.splitlines() if ln.startswith("G1 "))
    assert g1.startswith("G1 FAIL: ") and "train.log:41" in g1
    doc = json.loads(report.read_text())
    assert doc["diagnosis"]["gotcha"] == "G1" and "this machine confirms it now (FAIL" in doc["lines"][0]


# --------------------------------------------------------------------------- user signatures


def test_a_user_file_adds_patterns(tmp_path, capsys) -> None:
    extra = tmp_path / "mine.json"
    extra.write_text(json.dumps({"signatures": [{"id": "U1", "pattern": r"my_loader: shard \d+ missing",
                                                  "gotcha": "G8", "weight": "strong", "fix": "resync the shards",
                                                  "source": "our runbook"}]}))  # fmt: skip
    code, out, _ = diagnose(tmp_path, capsys, buried("my_loader: shard 17 missing"), args=("--signatures", str(extra)))
    assert code == 1 and out[-1].startswith("diagnosis: G8") and "resync the shards" in out[7]


@pytest.mark.parametrize(
    ("content", "reason"),
    [("{not json", "not JSON"), ('{"signatures": [{"id": "U1", "pattern": "(", "gotcha": "G1", "fix": "x"}]}',
                                 "not a regular expression"),
     (json.dumps({"signatures": [{"id": "U1", "pattern": "x", "gotcha": NO_CHECK, "fix": "x"}]}),
      f"must be one of {catalog.SPAN}"),
     ('{"signatures": [{"id": "U1", "pattern": "x", "gotcha": "G1", "weight": "huge", "fix": "x"}]}', "weight"),
     ("[]", "expected a JSON object")],
)  # fmt: skip
def test_a_malformed_signature_file_is_one_line_and_exit_2(tmp_path, capsys, content: str, reason: str) -> None:
    extra = tmp_path / "bad.json"
    extra.write_text(content)
    code, out, err = diagnose(tmp_path, capsys, "x\n", args=("--spark-signatures", str(extra)))
    assert code == 2 and out == [] and len(err.splitlines()) == 1 and reason in err


# --------------------------------------------------------------------------- untrusted input, bounded


def test_a_gzip_log_and_stdin_are_read(tmp_path, capsys, monkeypatch) -> None:
    import gzip
    import io

    gz = tmp_path / "rank0.log.gz"
    gz.write_bytes(gzip.compress(buried(POSTED["failure"]["S40"]).encode()))
    assert cli.main(["diagnose", "--no-machine", str(gz)]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == "diagnosis: G7 (first failure at rank0.log.gz:41)"
    stdin = tmp_path / "stdin.txt"
    stdin.write_text(buried(POSTED["failure"]["S9"]))
    with open(stdin, "rb") as fh:
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(fh))
        assert cli.main(["diagnose", "--no-machine", "-"]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == "diagnosis: G9 (first failure at -:41)"


def test_quoted_text_has_no_escapes_no_controls_and_no_secrets(tmp_path, capsys) -> None:
    token = "hf_" + "AbCdEfGhIjKlMnOpQrStUv"
    line = f"\x1b[31;1m{POSTED['failure']['S1']}\x1b[0m \x07\x1b]0;title\x07 HF_TOKEN={token}\r"
    code, out, _ = diagnose(tmp_path, capsys, buried(line), args=("-v",))
    text = "\n".join(out)
    assert code == 1 and token not in text and "<redacted>" in text
    assert "\x1b" not in text and "\\x1b" not in text and "\x07" not in text and "title" not in text


@pytest.mark.parametrize("grep", [True, False], ids=["grep", "python"])
def test_lines_over_4_kib_are_cut_and_a_huge_line_streams_in_flat_memory(tmp_path, grep: bool) -> None:
    import tracemalloc

    log = tmp_path / "huge.log"
    with open(log, "wb") as fh:  # 48 MiB without a newline, then a failure line
        for _ in range(48):
            fh.write(b"x" * (1 << 20))
        fh.write(b"\n" + POSTED["failure"]["S17"].encode() + b"\n" + b"y" * 5000 + b" NV_ERR_NO_MEMORY\n")
    tracemalloc.start()
    scan = logscan.Matcher(TABLE).scan(str(log), REDACT, grep=grep)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert scan.error is None and scan.lines == 3 and scan.cut_lines == (0 if grep else 1)
    assert [(h.sig, h.line) for h in scan.hits] == [("S17", 2)]  # NV_ERR past 4 KiB: not read
    assert peak < 8 * logscan.BLOCK


def test_binary_junk_is_one_line_and_exit_2(tmp_path, capsys) -> None:
    junk = tmp_path / "core"
    junk.write_bytes(bytes(range(256)) * 400)
    code = cli.main(["diagnose", "--no-machine", str(junk)])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""  # refused before any check line (issue 30)
    assert err.splitlines() == ["spark-preflight: error: core: not a text log (32768 undecodable bytes in the first "
                                "65536: binary or another encoding?)"]  # fmt: skip
    nul = tmp_path / "nul.bin"
    nul.write_bytes(b"\0" * 4096 + POSTED["failure"]["S1"].encode())
    assert cli.main(["diagnose", "--no-machine", str(nul)]) == 2
    assert "not a text log (4096 NUL bytes in the first 4182 bytes: binary?)" in capsys.readouterr().err


@pytest.mark.parametrize("what", ["missing", "folder"])
def test_a_log_that_cannot_be_opened_is_one_line_and_exit_2(tmp_path, capsys, what: str) -> None:
    path = tmp_path / what
    if what == "folder":
        path.mkdir()
    code = cli.main(["diagnose", "--no-machine", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1
    assert ("is a folder" if what == "folder" else "cannot open (No such file or directory)") in err


def test_a_fifo_nobody_writes_is_given_up_after_the_timeout(tmp_path, capsys) -> None:
    import os
    import time

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    start = time.monotonic()
    code = cli.main(["diagnose", "--no-machine", "--timeout", "0.5", str(fifo)])
    took = time.monotonic() - start
    err = capsys.readouterr().err
    assert code == 2 and took < 5 and "no data in 0.5 s (a pipe or FIFO nobody writes?)" in err


@pytest.mark.parametrize("grep", [True, False], ids=["grep", "python"])
def test_a_log_that_grows_while_read_ends_at_its_size_when_opened(tmp_path, grep: bool) -> None:
    import subprocess
    import sys

    log = tmp_path / "growing.log"
    log.write_text(buried(POSTED["failure"]["S48"]))
    writer = subprocess.Popen([sys.executable, "-c", "import sys\nwith open(sys.argv[1], 'a') as f:\n"
                               "    while True: f.write('step loss 2.1\\n' * 1000); f.flush()", str(log)])  # fmt: skip
    try:
        while log.stat().st_size < 4 * logscan.BLOCK:
            pass
        scan = logscan.Matcher(TABLE).scan(str(log), REDACT, idle_s=0.5, grep=grep)
    finally:
        writer.kill()
        writer.wait()
    assert scan.error is None and [h.sig for h in scan.hits] == ["S48"]
    assert any("grew while read" in n for n in scan.notes)


#: journalctl -k at the second the service deactivated, as the 2026-08-28 postmortem quotes it
#: (public code file, id 62165934712); the systemd line in systemd's own format
XID_13 = "Aug 28 11:55:08 spark-0d93 kernel: NVRM: Xid (PCI:000f:01:00): 13,\n  Graphics SM Global Exception on (GPC 0, TPC 1, SM 0): Multiple Warp Errors"
CLEAN_STOP = "Aug 28 11:55:08 spark-0d93 systemd[1]: vllm-nemotron.service: Main process exited, code=exited, status=0/SUCCESS"


@pytest.mark.parametrize("stop_second", [None, "11:55:08", "11:55:20"])
def test_an_xid_at_the_second_a_service_stopped_cleanly_is_the_cause(tmp_path, capsys, stop_second) -> None:
    kern = tmp_path / "kern.log"
    kern.write_text(buried(XID_13, at=10))
    service = buried(CLEAN_STOP.replace("11:55:08", stop_second or "")) if stop_second else buried("started")
    code, out, _ = diagnose(tmp_path, capsys, service, args=("--kernel-log", str(kern)))
    g4 = next(ln for ln in out if ln.startswith("G4 "))
    if stop_second == "11:55:08":
        assert code == 1 and g4.startswith('G4 FAIL: kern.log:11: "Aug 28 11:55:08 spark-0d93 kernel: NVRM: Xid')
        assert out[-1] == "diagnosis: G4 (first failure at kern.log:11)"
    else:  # an Xid alone says the GPU faulted, not that it ended the run
        assert code == 0 and g4.startswith("G4 WARN: ") and out[-1].startswith("diagnosis: unknown")


def test_the_gates_read_the_machine_the_run_knows() -> None:
    from pytest_dgx_spark.diagnose import machine_facts
    from pytest_dgx_spark.model import Reading, Result

    g6 = Result("G6", Status.FAIL, "a vLLM server holds 104 GiB", readings=[Reading("other_gpu_processes", 1)])
    facts = machine_facts({"kernel": "7.0.0-1019-nvidia"}, {"G6": g6})
    assert facts.kernel_release == "7.0.0-1019-nvidia" and facts.other_gpu_process is True
    assert facts.cma_free_over_total is None and facts.high_order_blocks_empty is None  # not read
    # G1's driver stack (proc_meminfo_4.txt: CmaTotal 0 kB, CmaFree 940604 kB), G3's free 32 MiB
    # blocks (memory_fragmentation_1.txt: none), G9's CUDA floor (container_error_driver_1.txt)
    g1 = Result("G1", Status.FAIL, "kernel 7.0.0-1019-nvidia", readings=[
        Reading("kernel_release", "7.0.0-1019-nvidia"), Reading("cma_total", 0, "kB"), Reading("cma_free", 940604, "kB")])
    g3 = Result("G3", Status.FAIL, "fragmented", readings=[Reading("normal_free_blocks", 0)])
    g9 = Result("G9", Status.FAIL, "image newer", readings=[Reading("image_cuda", "13.2"), Reading("host_driver_cuda", "13.0")])
    facts = machine_facts({"kernel": "6.8.0-host"}, {"G1": g1, "G3": g3, "G9": g9})
    assert facts == MachineFacts(kernel_release="7.0.0-1019-nvidia", cma_free_over_total=True,
                                 high_order_blocks_empty=True, image_cuda_newer_than_driver=True,
                                 other_gpu_process=None)  # fmt: skip
    assert machine_facts({}, {}) == MachineFacts(
        kernel_release=None, cma_free_over_total=None, high_order_blocks_empty=None,
        image_cuda_newer_than_driver=None, other_gpu_process=None)  # fmt: skip


def test_each_reading_diagnose_reads_is_one_its_check_produces() -> None:
    """issue 31: diagnose reads other checks' readings through :mod:`pytest_dgx_spark.readings`;
    each name there is one its check really writes (the recorded finding corpus, every check's
    decision on it), so a rename in a check cannot leave a gate silently unread."""
    from pytest_dgx_spark import readings
    from pytest_dgx_spark.checks.kit import Params
    from pytest_dgx_spark.engine import check_module
    from pytest_dgx_spark.logtable import GATES

    corpus_file = Path(__file__).parent / "data" / "findings" / "corpus.json"
    corpus = json.loads(corpus_file.read_text(encoding="utf-8"))
    produced: dict[str, set[str]] = {}
    for entry in corpus.values():
        module = check_module(entry["check"])
        result = module.evaluate(module.FACTS.from_dict(entry["facts"]), Params.from_dict(entry["params"]))
        produced.setdefault(entry["check"], set()).update(r.name for r in result.readings)
    missing = [f"{r.check} {r.name}" for r in readings.ALL if r.name not in produced.get(r.check, set())]
    assert not missing, missing
    assert set(MachineFacts().gates()) == set(GATES)  # the machine answers every gate a signature may name


def test_vllm_free_memory_with_another_process_holding_it_is_g6_too(tmp_path) -> None:
    scan = scan_text(tmp_path, buried(POSTED["failure"]["S22"]))
    diag = decide([scan], TABLE, MachineFacts(other_gpu_process=True))
    assert diag.per_check["G6"][0].weight == "strong" and diag.per_check["G3"][0].weight == "strong"
