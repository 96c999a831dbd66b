"""``spark-preflight diagnose`` on hostile input (issue 30, item 5), each for real: a user
signature file a checkout names, a downloaded log folder's file names, a capture's strings, a
gzip bomb, a log that cannot be read. Every case runs the real command in a child process
with a timeout (a hang is a failure, not a stuck suite) or pytest through ``pytester``.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_dgx_spark import catalog, logengine, logscan

DATA = Path(__file__).parent / "data" / "diagnose"
POSTED = json.loads((DATA / "posted_lines.json").read_text(encoding="utf-8"))
FILLER = (DATA / "healthy_nccl_init.txt").read_text(encoding="utf-8")
#: what a terminal acts on (tests/test_terminal_injection.py's list)
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")
FORGED = "verdict: ready"
#: a gotcha id past the last check: no signature may name it
NO_CHECK = f"G{len(catalog.IDS) + 1}"
#: run the CLI with RE2 hidden (``--no-re2`` below): the fallback every install without it takes
NO_RE2 = ("import sys\nfrom pytest_dgx_spark import cli, logengine\nlogengine.re2 = None\n"
          "sys.exit(cli.main(sys.argv[1:]))\n")


def spark(*args: str, cwd: Path, re2: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The real ``spark-preflight`` in a child; ``re2=False``: as an install without google-re2 runs it."""
    argv = [sys.executable, "-m", "pytest_dgx_spark.cli"] if re2 else [sys.executable, "-c", NO_RE2]
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.run([*argv, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env,
                          check=False)  # fmt: skip


def user_file(tmp_path: Path, *entries: dict[str, object]) -> Path:
    path = tmp_path / "mine.json"
    base = {"weight": "strong", "fix": "fix it", "source": "our runbook"}
    path.write_text(json.dumps({"signatures": [{**base, **e} for e in entries]}))
    return path


ENGINES = pytest.mark.parametrize("re2", [True, False], ids=["re2", "python-re"])


def has_re2() -> bool:
    return logengine.re2 is not None


# --------------------------------------------------------------------------- 1. a catastrophic pattern


@ENGINES
def test_a_catastrophic_user_pattern_cannot_hang_diagnose(tmp_path: Path, re2: bool) -> None:
    """``(a+)+$`` on 40 ``a``s and a ``!`` backtracks some 2^40 steps in Python's ``re``: before,
    diagnose never ended. With RE2 it runs in linear time; without, its search has a time budget and
    the file is refused in one line naming the file and the signature."""
    if re2 and not has_re2():
        pytest.skip("google-re2 is not installed here: the linear-time engine cannot be tried")
    (tmp_path / "train.log").write_text("starting\n" + "a" * 40 + "!\n" + POSTED["failure"]["S1"] + "\n")
    sigs = user_file(tmp_path, {"id": "U1", "pattern": "(a+)+$", "gotcha": "G8"})
    start = time.monotonic()
    proc = spark("diagnose", "--no-machine", "--signatures", str(sigs), "train.log", cwd=tmp_path, re2=re2)
    assert time.monotonic() - start < 30
    if re2:  # no match, and the built-in S1 line still decides
        assert proc.returncode == 1, proc.stderr
        assert proc.stdout.splitlines()[-1] == "diagnosis: G1 (first failure at train.log:3)"
    else:
        assert proc.returncode == 2 and proc.stdout == "", proc.stdout
        assert proc.stderr.count("\n") == 1 and "mine.json: signatures[0] (U1): pattern" in proc.stderr
        assert "train.log:2" in proc.stderr and "google-re2" in proc.stderr, proc.stderr


# --------------------------------------------------------------------------- 2. each pattern its own meaning


@ENGINES
def test_each_user_pattern_keeps_its_own_anchors_flags_and_groups(tmp_path: Path, re2: bool) -> None:
    """Patterns without a ``literal`` were joined into one filter over 1 MiB blocks: ``^`` held only at a
    block's start, ``\\1`` named another pattern's group, ``(?i)`` and a group name used twice stopped
    the run with an internal error. Each is matched alone, line by line, now."""
    if re2 and not has_re2():
        pytest.skip("google-re2 is not installed here")
    sigs = user_file(
        tmp_path,
        {"id": "U1", "pattern": "^FATAL shard", "gotcha": "G8"},
        {"id": "U2", "pattern": r"(?P<who>rank\d+) lost", "gotcha": "G10", "weight": "medium"},
        {"id": "U3", "pattern": r"(?i)(?P<who>loader) stalled", "gotcha": "G5", "weight": "medium"},
        {"id": "U4", "pattern": r"(\w+)=\1 twice", "gotcha": "G6", "weight": "medium"},
    )
    lines = ["job start", "FATAL shard 3 missing", "rank7 lost", "LOADER Stalled", "abc=abc twice", "done"]
    (tmp_path / "train.log").write_text("\n".join(lines) + "\n")
    proc = spark("diagnose", "--no-machine", "--signatures", str(sigs), "train.log", cwd=tmp_path, re2=re2)
    assert proc.returncode == 1 and "internal error" not in proc.stderr, proc.stderr
    out = proc.stdout
    assert out.splitlines()[-1] == "diagnosis: G8 (first failure at train.log:2)", out
    for gotcha, at in (("G10", "train.log:3"), ("G5", "train.log:4"), ("G6", "train.log:5")):
        assert re.search(rf"^{gotcha} WARN: {at}:", out, re.M), out


def test_no_literal_patterns_do_not_change_what_the_built_in_ones_find(tmp_path: Path) -> None:
    """With a pattern that has no literal, every line is a candidate: the built-in hits stay the same."""
    text = FILLER + POSTED["failure"]["S1"] + "\n" + FILLER
    log = tmp_path / "train.log"
    log.write_text(text)
    sigs = user_file(tmp_path, {"id": "U1", "pattern": "^never here$", "gotcha": "G8"})
    plain = logscan.Matcher(logscan.load_table()).scan(str(log), logscan.outgoing({}))
    mixed = logscan.Matcher(logscan.load_table(sigs)).scan(str(log), logscan.outgoing({}))
    assert plain.hits and (plain.lines, plain.hits, plain.counts) == (mixed.lines, mixed.hits, mixed.counts)


# --------------------------------------------------------------------------- 3. a name that forges a line


def test_a_log_name_with_a_newline_forges_no_line(tmp_path: Path) -> None:
    name = "rank1\nverdict: ready\n\u202ex.log"
    (tmp_path / name).write_text(FILLER + POSTED["failure"]["S1"] + "\n")
    proc = spark("diagnose", "--no-machine", "-v", name, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    every = proc.stdout + proc.stderr
    assert [ln for ln in every.splitlines() if ln.lstrip().startswith(FORGED)] == [], every
    assert RAW.findall(every) == [], every
    assert "diagnosis: G1 (first failure at rank1\\nverdict: ready\\n\\u202ex.log:" in proc.stdout
    as_json = spark("diagnose", "--no-machine", "--json", name, cwd=tmp_path)
    block = json.loads(as_json.stdout)["diagnosis"]
    assert "\n" not in block["at"] and "\n" not in block["files"][0]["name"] + block["files"][0]["path"]


def test_a_log_name_with_a_newline_forges_no_junit_or_html_line(pytester: pytest.Pytester, spark_env) -> None:
    name = "rank1\nverdict: ready\n\u2028x.log"
    (pytester.path / name).write_text(FILLER + POSTED["failure"]["S1"] + "\n")
    result = pytester.runpytest("-p", "no:randomly", "--spark-offline", "--spark-preflight",
                                f"--spark-diagnose={name}", "--junitxml=r.xml", "--spark-report=env.json",
                                "--html=r.html", "--self-contained-html")  # fmt: skip
    junit = (pytester.path / "r.xml").read_text()
    html = (pytester.path / "r.html").read_text()
    assert "rank1\\nverdict: ready\\n\\u2028x.log:" in html  # the G1 line quotes the log, escaped
    ET.fromstring(junit)
    props = {p.get("name"): p.get("value") or "" for p in ET.fromstring(junit).iter("property")}
    assert "\\nverdict: ready" in props["spark.diagnosis"], props["spark.diagnosis"]
    for text in (*props.values(), (pytester.path / "env.json").read_text(), result.stdout.str(), html):
        assert RAW.findall(text.replace("\n", "")) == [] and "\nverdict: ready" not in text, text


# --------------------------------------------------------------------------- 4. a capture's strings


def test_a_replayed_hostname_reaches_junit_escaped(pytester: pytest.Pytester) -> None:
    from pytest_dgx_spark import capture

    doc = capture.load(Path(__file__).parent / "data" / "captures" / "h200-healthy.json.gz")
    doc["host"]["hostname"] = "spark\u202e1\u2028verdict: ready\x85x"
    (pytester.path / "cap.json").write_text(json.dumps(doc))
    pytester.runpytest_subprocess("-p", "no:randomly", "--spark-preflight", "--spark-replay=cap.json",
                                  "--junitxml=r.xml", "--spark-report=env.json")  # fmt: skip
    junit = (pytester.path / "r.xml").read_text(encoding="utf-8")
    props = {p.get("name"): p.get("value") or "" for p in ET.fromstring(junit).iter("property")}
    assert props["spark.host.hostname"] == "spark\\u202e1\\u2028verdict: ready\\x85x"
    assert RAW.findall(junit.replace("\n", "")) == []
    report = json.loads((pytester.path / "env.json").read_text())
    assert report["host"]["hostname"] == "spark\\u202e1\\u2028verdict: ready\\x85x"


# --------------------------------------------------------------------------- 5. fields validated, one line


@pytest.mark.parametrize(
    ("change", "reason"),
    [({"ungated_gotcha": NO_CHECK}, f"'ungated_gotcha' must be one of {catalog.SPAN}, got '{NO_CHECK}'"),
     ({"gated_weight": ["strong"]}, "'gated_weight' must be strong, medium or weak"),
     ({"same_second": ["EXIT0"]}, "'same_second' must be a string"),
     ({"row": {"n": 1}}, "'row' must be a string"),
     ({"means": ["x"]}, "'means' must be a string"),
     ({"source": 7}, "'source' must be a string"),
     ({"id": ["U1"]}, "'id' must be a non-empty string"),
     ({"literal": "bad\u0000thing"}, "'literal' must be a string or a list of non-empty strings, without")],
)  # fmt: skip
def test_every_signature_field_is_checked_where_it_is_read(tmp_path: Path, change: dict, reason: str) -> None:
    entry = {"id": "U1", "pattern": "bad thing", "gotcha": "G3", "weight": "weak",
             "gate": ["kernel_7_0_0_1019"], "gated_weight": "strong", **change}  # fmt: skip
    sigs = user_file(tmp_path, entry)
    (tmp_path / "train.log").write_text("bad thing\n")
    proc = spark("diagnose", "--no-machine", "--signatures", str(sigs), "train.log", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1 and "mine.json: signatures[0]" in proc.stderr
    assert reason in proc.stderr


@pytest.mark.parametrize("flag", ["--signatures", "--known-bad"])
def test_deeply_nested_json_is_one_line_naming_the_file(tmp_path: Path, flag: str) -> None:
    (tmp_path / "deep.json").write_text("[" * 200_000 + "]" * 200_000)
    (tmp_path / "train.log").write_text("hello\n")
    args = ["diagnose", "--no-machine", flag, "deep.json", "train.log"] if flag == "--signatures" else [
        "--only", "G1", flag, "deep.json"]  # fmt: skip
    proc = spark(*args, cwd=tmp_path)
    assert proc.returncode == 2 and "internal error" not in proc.stderr and "Recursion" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and "deep.json" in proc.stderr, proc.stderr
    assert "nested" in proc.stderr


# --------------------------------------------------------------------------- 6. a gzip bomb


LINE = b"step 100 loss 1.234 lr 3e-4 tokens/s 10234\n"


def bomb(path: Path, mib: int, tail: str = "") -> None:
    """``mib`` MiB of a healthy line, gzip'd (a few KiB), then ``tail``: a small gzip bomb."""
    with gzip.open(path, "wb", compresslevel=9) as fh:
        chunk = LINE * ((1 << 20) // len(LINE))
        for _ in range(mib):
            fh.write(chunk)
        fh.write(tail.encode())


def test_a_gzip_log_stops_at_its_decompressed_limit_and_says_so(tmp_path: Path) -> None:
    bomb(tmp_path / "rank0.log.gz", 8, POSTED["failure"]["S1"] + "\n")
    assert (tmp_path / "rank0.log.gz").stat().st_size < 64 << 10
    proc = spark("diagnose", "--no-machine", "--gunzip-max-mib", "2", "rank0.log.gz", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr  # the failure line lies past the limit: not read
    lines = -(-(2 << 20) // len(LINE))  # the lines begun in 2 MiB
    unknown = f"diagnosis: unknown — no known failure in {lines:,} lines (1 file)"
    assert proc.stdout.splitlines()[-1] == unknown
    assert proc.stderr == ("spark-preflight: note: rank0.log.gz: stopped at 2 MiB of decompressed text "
                           f"(--gunzip-max-mib), after line {lines:,}: the rest was not read\n")  # fmt: skip
    whole = spark("diagnose", "--no-machine", "--gunzip-max-mib", "16", "rank0.log.gz", cwd=tmp_path)
    assert whole.returncode == 1 and "note:" not in whole.stderr


def test_the_limit_has_a_sane_default_and_refuses_nonsense(tmp_path: Path) -> None:
    from pytest_dgx_spark.options import BY_NAME

    assert 256 <= BY_NAME["gunzip-max-mib"].default <= 16384
    (tmp_path / "x.log").write_text("x\n")
    for bad in ("0", "-1", "lots"):
        proc = spark("diagnose", "--no-machine", "--gunzip-max-mib", bad, "x.log", cwd=tmp_path)
        assert proc.returncode == 2 and proc.stdout == "", (bad, proc.stdout)
        assert "--gunzip-max-mib" in proc.stderr, (bad, proc.stderr)


def test_the_pytest_form_and_its_ini_twin_limit_the_log(pytester: pytest.Pytester, spark_env) -> None:
    bomb(pytester.path / "rank0.log.gz", 4, POSTED["failure"]["S1"] + "\n")
    pytester.makeini("[pytest]\nspark_preflight_gunzip_max_mib = 1\n")
    result = pytester.runpytest("-p", "no:randomly", "--spark-offline", "--spark-preflight",
                                "--spark-diagnose=rank0.log.gz")  # fmt: skip
    result.stdout.fnmatch_lines(["*diagnosis: unknown*", "note: rank0.log.gz: stopped at 1 MiB of "
                                 "decompressed text (--spark-gunzip-max-mib), after line 24,386: *"])  # fmt: skip
    big = pytester.runpytest("-p", "no:randomly", "--spark-offline", "--spark-preflight",
                             "--spark-diagnose=rank0.log.gz", "--spark-gunzip-max-mib=8")  # fmt: skip
    big.stdout.fnmatch_lines(["diagnosis: G1 (first failure at rank0.log.gz:*)"])


# --------------------------------------------------------------------------- 7. an unreadable log


def cut_gzip(path: Path) -> None:
    data = gzip.compress((FILLER * 50).encode())
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize("what", ["missing", "folder", "binary", "cut.gz"])
def test_an_unreadable_log_is_refused_before_any_check_line(tmp_path: Path, what: str) -> None:
    good = tmp_path / "good.log"
    good.write_text(FILLER)
    bad = tmp_path / what
    if what == "folder":
        bad.mkdir()
    elif what == "binary":
        bad.write_bytes(bytes(range(256)) * 400)
    elif what == "cut.gz":
        cut_gzip(bad)
    proc = spark("diagnose", "--no-machine", "good.log", what, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"spark-preflight: error: {what}:"), proc.stderr


@pytest.mark.parametrize("what", ["folder", "cut.gz"])
def test_pytest_refuses_an_unreadable_log_at_start(pytester: pytest.Pytester, spark_env, what: str) -> None:
    (pytester.path / "logs").mkdir()
    if what == "cut.gz":
        cut_gzip(pytester.path / "logs" / "cut.gz")
    pytester.makepyfile(test_marker="def test_ran(tmp_path):\n    open('ran', 'w').close()\n")
    folder = what == "folder"
    target = "logs" if folder else "logs/cut.gz"
    shown = "logs: is a folder" if folder else "cut.gz: not a readable gzip"
    result = pytester.runpytest("-p", "no:randomly", "--spark-offline", "--spark-preflight",
                                f"--spark-diagnose={target}")  # fmt: skip
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert not (pytester.path / "ran").exists()
    errors = [ln for ln in result.stderr.lines if "ERROR" in ln]
    assert len(errors) == 1 and f"--spark-diagnose: {shown}" in errors[0], result.stderr.lines


# --------------------------------------------------------------------------- speed: without grep on PATH


@pytest.mark.parametrize("re2", [True, False], ids=["re2", "python-re"])
def test_without_grep_on_path_the_filter_child_finds_the_same_lines(tmp_path, monkeypatch, re2: bool) -> None:
    """Where ``grep`` is not on PATH, ``python -m pytest_dgx_spark.logscan --filter`` plays its part
    (in a child, on another core): the same lines, numbers and counts as grep and as this process."""
    if re2 and not has_re2():
        pytest.skip("google-re2 is not installed here")
    if not re2:
        monkeypatch.setattr(logengine, "re2", None)
    text = (FILLER + POSTED["failure"]["S1"] + "\n" + "x" * 5000 + " NV_ERR_NO_MEMORY\n") * 3 + "no newline"
    log = tmp_path / "train.log"
    log.write_text(text)
    matcher = logscan.Matcher(logscan.load_table())
    redact = logscan.outgoing({})
    with_grep = matcher.scan(str(log), redact)
    alone = matcher.scan(str(log), redact, grep=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no grep here
    assert logscan.commands.find_program("grep") is None
    child = matcher.scan(str(log), redact)
    assert child.error is None and child.hits and any(h.sig == "S1" for h in child.hits)
    for other in (with_grep, alone):
        assert (child.lines, child.hits, child.counts) == (other.lines, other.hits, other.counts)


def test_a_filter_child_that_dies_is_an_error_not_a_silent_unknown(tmp_path: Path, monkeypatch) -> None:
    """If the child could not do its work (here: it cannot import the package), the scan says so."""
    log = tmp_path / "train.log"
    log.write_text(POSTED["failure"]["S1"] + "\n")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(logscan, "PACKAGE_ROOT", str(tmp_path))
    monkeypatch.setattr(logscan.sys, "executable", "/bin/false")
    scan = logscan.Matcher(logscan.load_table()).scan(str(log), logscan.outgoing({}))
    assert scan.error is not None and "the line filter" in scan.error and "exited 1" in scan.error


def test_a_log_cut_off_with_its_host_is_read_and_says_so(tmp_path: Path) -> None:
    """NVIDIA/dgx-spark-playbooks #97, #116: a host lost mid-run leaves an output file whose tail is NUL bytes. That is
    evidence, not a binary: the text is read (its CUDA-12 line still names G1) and a note says the file
    was cut off; a file of NULs alone is still refused."""
    cut = tmp_path / "train.log"
    cut.write_bytes((FILLER + "ImportError: libcudart.so.12: cannot open shared object file\n").encode()
                    + b"\0" * 8192)  # fmt: skip
    proc = spark("diagnose", "--no-machine", "train.log", cwd=tmp_path)
    assert proc.returncode == 1 and "diagnosis: G1" in proc.stdout, proc.stdout + proc.stderr
    assert "ends in 8,192 NUL bytes" in proc.stderr and "journalctl -k -b -1" in proc.stderr, proc.stderr
    (tmp_path / "nul.log").write_bytes(b"\0" * 4096)
    refused = spark("diagnose", "--no-machine", "nul.log", cwd=tmp_path)
    assert refused.returncode == 2 and refused.stdout == "", refused.stdout
    assert "only NUL bytes" in refused.stderr, refused.stderr
