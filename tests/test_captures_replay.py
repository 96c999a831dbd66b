"""Recorded captures replay here, with no GPU, no network and an empty PATH,
to the lines their runs printed; under an audit hook (tests/no_machine.py)
a replay, by the CLI or by pytest, is seen to open no file of the machine, run
no program, make no connection and load no library.

``h200-*.json.gz`` were made on an NVIDIA H200 (driver 580, torch 2.11.0+cu130)
by ``benchmarks/gpu_captures.sh``; each ``.lines`` file is what that run
printed there, exit code included (``h200-cu12.lines``' G1 line is that
finding in this version's words: the default line now names the library not
found and the fix; the G10 lines name the config read, ``pyproject.toml``,
where they said "1 config(s) read"). ``gb10-public-healthy.json.gz`` is a capture
of the GB10 double, whose answers are what DGX Spark owners posted (its
``built_from`` key lists the files; ``make_gb10_public.py`` rebuilds it).
"""

from __future__ import annotations

import gzip
import itertools
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onlychecks
import pytest

from pytest_dgx_spark import capture, catalog

CAPTURES = Path(__file__).resolve().parent / "data" / "captures"
NAMES = sorted(p.name.removesuffix(".json.gz") for p in CAPTURES.glob("*.json.gz"))


def replay_note(stderr: str, capture: Path) -> bool:
    """stderr holds only the note that the lines are a replay's (issue 24, item 7):
    stdout stays the captured run's own lines."""
    note = rf"spark-preflight: note: replay of {re.escape(capture.name)} \(captured \S+, host .+\): this machine was not read"
    said = [ln for ln in stderr.splitlines() if not re.match(r"spark-preflight: \S.* written to ", ln)]
    return len(said) == 1 and re.fullmatch(note, said[0]) is not None


def child_home(tmp_path: Path) -> str:
    """An empty home under pytest's temp root for a child that must find nothing of ours there
    (a home of ``/nonexistent``, run as root, had matplotlib create ``/nonexistent/.cache`` and
    ``.config``: issue 34 item 10)."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return str(home)


def its_checks(path: Path) -> list[str]:
    """The checks of the version that made a capture of every check (``only`` empty): those it
    holds. A check added since was not there to capture, so its replay is that version's set."""
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    held = list(doc.get("checks") or {})
    return held if not doc.get("options", {}).get("only") and held else list(catalog.IDS)


def replay(path: Path, *args: str, home: Path) -> tuple[str, int]:
    env = {"PATH": "", "HOME": child_home(home), "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    env["SPARK_PREFLIGHT_HOST_ROOT"] = "/nonexistent-host-root"
    command = [sys.executable, "-m", "pytest_dgx_spark.cli", "--replay", str(path), *args]
    checks = its_checks(Path(path))
    if checks != list(catalog.IDS):
        command = onlychecks.argv(home / "its-checks", checks, *command[2:])
    proc = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert replay_note(proc.stderr, Path(path)), proc.stderr
    return proc.stdout, proc.returncode


def test_there_are_five_captures() -> None:
    assert NAMES == ["gb10-public-healthy", "h100-field", "h200-cu12", "h200-healthy", "h200-load", "h200-vllm"]


@pytest.mark.parametrize("name", NAMES)
def test_a_capture_replays_to_the_lines_its_run_printed(name: str, tmp_path: Path) -> None:
    out, code = replay(CAPTURES / f"{name}.json.gz", home=tmp_path)
    assert out + f"exit {code}\n" == (CAPTURES / f"{name}.lines").read_text()


NO_MACHINE = Path(__file__).resolve().parent / "no_machine.py"


def untouched(tmp_path: Path, mode: str, *args: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Run ``spark-preflight`` (``cli``) or pytest under tests/no_machine.py's
    audit hook, with no PATH, no home, no plugin of the environment but ours
    and an empty machine root; return the run and what it touched."""
    root, cwd, log = tmp_path / "empty-root", tmp_path / "run", tmp_path / "touched.json"
    root.mkdir(exist_ok=True)
    cwd.mkdir(exist_ok=True)
    env = {"PATH": "", "HOME": child_home(tmp_path), "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    env |= {"SPARK_PREFLIGHT_HOST_ROOT": str(root), "NO_MACHINE_LOG": str(log), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    env["COLUMNS"] = "120"  # pytest's section cuts lines to the terminal's width; the .lines files are 120 wide
    # matplotlib (G4's chart from the captured samples) builds its font list on first use with
    # fc-list and a walk of the system's fonts: the drawing library's cache, warmed here without
    # the audit, as any machine that drew once has it (a fresh CI machine did not: issue ci)
    env["MPLCONFIGDIR"] = str(tmp_path / "mplconfig")
    replayed = [a.split("=", 1)[-1] for a in args if a.startswith("--spark-replay=")]
    replayed += [b for a, b in itertools.pairwise(args) if a == "--replay"]
    checks = its_checks(Path(replayed[0])) if replayed else list(catalog.IDS)
    if checks != list(catalog.IDS):
        env["NO_MACHINE_CHECKS"] = ",".join(checks)
    warm = "import importlib.util as u\nif u.find_spec('matplotlib'): import matplotlib.font_manager"
    subprocess.run([sys.executable, "-c", warm], env=env, timeout=120, check=True, capture_output=True)
    proc = subprocess.run(
        [sys.executable, str(NO_MACHINE), mode, *args], capture_output=True, text=True, timeout=120, env=env, cwd=cwd
    )
    return proc, json.loads(log.read_text())


@pytest.mark.parametrize("name", NAMES)
def test_a_replay_touches_nothing_of_the_machine(tmp_path: Path, name: str) -> None:
    """No file outside Python and the capture, no program, no socket, no
    shared library (NVML), no /proc listing: and still the run's lines."""
    proc, touched = untouched(tmp_path, "cli", "--replay", str(CAPTURES / f"{name}.json.gz"))
    assert touched == []
    assert replay_note(proc.stderr, CAPTURES / f"{name}.json.gz"), proc.stderr
    assert proc.stdout + f"exit {proc.returncode}\n" == (CAPTURES / f"{name}.lines").read_text()


def test_a_pytest_replay_touches_nothing_and_writes_junit_and_the_env_report(tmp_path: Path) -> None:
    capture_path = CAPTURES / "h200-vllm.json.gz"
    proc, touched = untouched(
        tmp_path, "pytest", "-p", "dgx_spark", "-p", "no:cacheprovider", "--spark-preflight",
        f"--spark-replay={capture_path}", "--junitxml=junit.xml", "--spark-report=env-report.json",
    )  # fmt: skip
    assert touched == []
    expected = (CAPTURES / "h200-vllm.lines").read_text().splitlines()
    section = proc.stdout.split("spark preflight ==", 1)[-1]  # the section's lines, not the FAILURES body
    printed = [ln for ln in section.splitlines() if re.match(r"(G\d+ [A-Z]+: |verdict: )", ln)]
    assert printed == expected[:-1] and proc.returncode == 1, proc.stdout
    report = json.loads((tmp_path / "run" / "env-report.json").read_text())
    assert report["verdict"] == "blocked" and [ln.split(":")[0] for ln in report["lines"]][5] == "G6 FAIL"
    assert report["host"]["gpu"] == "NVIDIA H200"  # the captured machine, not this one
    junit = (tmp_path / "run" / "junit.xml").read_text()
    assert junit.count("<testcase ") == len(its_checks(capture_path)) and junit.count("<failure ") == 1


def test_a_pytest_replay_decides_with_the_replays_thresholds_and_profile(tmp_path: Path) -> None:
    """``--spark-threshold`` and ``--spark-profile`` on a pytest replay: the
    H200's vLLM at cap 0.9 is a WARN once g6_cap_max is 0.95, and the env
    report says the new verdict; G5 decides on GB10's budget."""
    proc, touched = untouched(
        tmp_path, "pytest", "-p", "dgx_spark", "-p", "no:cacheprovider", "--spark-preflight",
        f"--spark-replay={CAPTURES / 'h200-vllm.json.gz'}", "--spark-only=G5,G6", "--spark-threshold=g6_cap_max=0.95",
        "--spark-profile=gb10", "--spark-report=env-report.json",
    )  # fmt: skip
    assert touched == [] and proc.returncode == 0, proc.stdout
    assert "G6 WARN: pid 581 vLLM 8.6 GiB NVML: cap 0.9 <= 0.95" in proc.stdout
    report = json.loads((tmp_path / "run" / "env-report.json").read_text())
    assert report["verdict"] == "ready-with-warnings" and report["profile"] == "gb10"
    assert "160-190 GB/s" in report["lines"][0], report["lines"]


def test_the_audit_hook_sees_a_run_that_reads_the_machine(tmp_path: Path) -> None:
    """The same hook on a run that is not a replay: it records G3 reading the
    machine root's /proc/meminfo (so an empty record above means something)."""
    (tmp_path / "empty-root" / "proc").mkdir(parents=True)
    (tmp_path / "empty-root" / "proc" / "meminfo").write_text("MemTotal: 1000 kB\nMemAvailable: 900 kB\n")
    _, touched = untouched(tmp_path, "cli", "--only", "G3")
    assert f"open {tmp_path / 'empty-root' / 'proc' / 'meminfo'}" in touched


def test_h200_captures_hold_what_their_runs_saw() -> None:
    docs = {n: capture.load(CAPTURES / f"{n}.json.gz") for n in NAMES if n.startswith("h200")}
    for doc in docs.values():
        assert doc["host"]["gpu"] == "NVIDIA H200" and doc["host"]["driver"].startswith("580.")
        assert doc["probes"]["nvml"]["devices"][0]["capability"] == [9, 0]
    # the fake vLLM held GPU memory and was found, its --api-key value redacted
    vllm = json.dumps(docs["h200-vllm"])
    assert "NOT-A-REAL-KEY" not in vllm
    g6 = docs["h200-vllm"]["checks"]["G6"]["result"]
    assert g6["status"] == "FAIL" and "vLLM" in g6["summary"]
    # the cu12 module's missing libcudart.so.12 is in G1's facts
    assert "libcudart.so.12" in json.dumps(docs["h200-cu12"]["checks"]["G1"]["facts"])
    # under load the sampled power is in the hundreds of watts
    assert docs["h200-load"]["checks"]["G4"]["result"]["readings"]["power_max"]["value"] > 300


def test_the_gb10_capture_names_its_sources_and_reads_ready(tmp_path: Path) -> None:
    doc = json.loads(gzip.decompress((CAPTURES / "gb10-public-healthy.json.gz").read_bytes()))
    assert doc["host"]["gpu"] == "NVIDIA GB10" and doc["profile"] == "gb10"
    # the host is a Spark's as posted (torch_arch_list_2.txt's uname), not the machine that built it
    spark = {"arch": "aarch64", "kernel": "6.17.0-1021-nvidia", "hostname": "not recorded", "os": "not recorded"}
    assert {k: doc["host"][k] for k in spark} == spark
    assert doc["probes"]["identity"] == doc["host"]
    # each source is named as the public capture it is, with where it was posted
    gb10 = CAPTURES.parent / "gb10"
    public = [e for e in doc["built_from"] if e["file"].startswith("gb10-public/")]
    assert len(public) == 8 and len(doc["built_from"]) == 9
    for entry in public:
        copy = gb10 / entry["file"].removeprefix("gb10-public/")
        header = copy.read_text().splitlines()[0]  # the copy's "# source: ..." line
        repo = re.match(r"https://github\.com/([\w.-]+/[\w.-]+)", entry["source"])
        assert (repo.group(1) if repo else "repository path was not recorded") in header, entry
    assert (CAPTURES.parent / doc["built_from"][0]["file"].removeprefix("tests/data/")).is_file()
    assert "shared/" not in json.dumps(doc["built_from"]) and "not a real Spark" in doc["note"]
    out, code = replay(CAPTURES / "gb10-public-healthy.json.gz", home=tmp_path)
    assert out.splitlines()[-1] == "verdict: ready (7 PASS, 3 INFO)" and code == 0


def test_other_thresholds_change_a_recorded_verdict(tmp_path: Path) -> None:
    """The H200 under load drew ~690 W: with a GB10-style 'hot' threshold at 50 C
    G4 warns from the same recorded samples."""
    out, _ = replay(CAPTURES / "h200-load.json.gz", "--only", "G4", "--threshold", "g4_hot_c=50", home=tmp_path)
    assert out.startswith("G4 WARN"), out


#: for each check, a fact whose absence changed the line before replays checked
#: the facts' fields: G3 crashed ("report this to pytest-dgx-spark"), G9 went
#: PASS to WARN, G7 to SKIP "no NVIDIA GPU", G4 and G5 lost their readings
DROPPED = {
    "G1": "scan",
    "G2": "fa",
    "G3": "meminfo",
    "G4": "devices",
    "G5": "bus_width_bits",
    "G6": "gpu_totals",
    "G7": "devices",
    "G8": "offline_flag",
    "G9": "dockerenv",
    "G10": "sources",
}


def edited(tmp_path: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    doc = capture.load(CAPTURES / "h200-healthy.json.gz")
    change(doc)
    target = tmp_path / "edited.json"
    target.write_text(json.dumps(doc))
    return target


def test_facts_missing_a_field_skip_that_check_and_say_so(tmp_path: Path) -> None:
    """A capture whose facts lack a field this version reads: each check says
    which one and why, instead of a crash report or a silently changed verdict."""

    def drop(doc: dict[str, Any]) -> None:
        for cid, key in DROPPED.items():
            del doc["checks"][cid]["facts"][key]

    out, code = replay(edited(tmp_path, drop), home=tmp_path)
    g_lines = out.splitlines()[: len(DROPPED)]
    for cid, line in zip(DROPPED, g_lines, strict=True):
        assert line.startswith(
            f"{cid} SKIP: capture's {cid} facts lack '{DROPPED[cid]}' (schema 1, written by 0.1.0)"
        ), line
        assert line.endswith("capture again with this version"), line
    assert "crashed" not in out and "report" not in out
    assert out.splitlines()[-1] == "verdict: ready-with-warnings (G1, G2, G3, G4, and 6 more skipped; 10 SKIP)" and code == 0


def test_facts_with_an_unknown_field_skip_that_check_and_say_so(tmp_path: Path) -> None:
    def add(doc: dict[str, Any]) -> None:
        doc["checks"]["G9"]["facts"]["from_the_future"] = True

    out, _ = replay(edited(tmp_path, add), "--only", "G9,G3", home=tmp_path)
    assert out.splitlines()[:2] == [
        "G3 INFO: MemAvailable 125.4 of 125.8 GiB; no workload declared",
        "G9 SKIP: capture's G9 facts have unknown 'from_the_future' (schema 1, written by 0.1.0);"
        " capture again with this version",
    ]


def test_facts_this_version_cannot_decide_skip_that_check_and_say_so(tmp_path: Path) -> None:
    """Facts of the right fields but the wrong shape (a capture edited by hand)
    made evaluate raise: "the check itself crashed ... report it to
    pytest-dgx-spark". It is that check's SKIP asking for a new capture, naming
    the field the typed facts refused (issue 31); the other checks decide as recorded."""

    def garble(doc: dict[str, Any]) -> None:
        doc["checks"]["G1"]["facts"]["scan"] = "not a scan"

    out, code = replay(edited(tmp_path, garble), "--only", "G1,G3", home=tmp_path)
    assert out.splitlines()[:2] == [
        "G1 SKIP: capture's G1 facts cannot be decided (FactsError); capture again",
        "G3 INFO: MemAvailable 125.4 of 125.8 GiB; no workload declared",
    ]
    assert "crashed" not in out and code == 0
    verbose, _ = replay(edited(tmp_path, garble), "--only", "G1", "-v", home=tmp_path)
    assert "(FactsError: scan: expected a table, got str 'not a scan'" in verbose
    assert "written by 0.1.0); capture again with this version" in verbose


def test_a_run_whose_evaluate_crashed_replays_as_that_crash(tmp_path: Path) -> None:
    """When the captured run's own result was the crash, the replay says what
    the run said: the same FAIL (a replay is how such a bug is reproduced)."""

    def crash_recorded(doc: dict[str, Any]) -> None:
        from pytest_dgx_spark.engine import crashed

        doc["checks"]["G1"]["facts"]["scan"] = "not a scan"
        doc["checks"]["G1"]["result"] = crashed("G1", "FactsError: scan: expected a table, got str").to_dict()

    out, code = replay(edited(tmp_path, crash_recorded), "--only", "G1", home=tmp_path)
    assert out.startswith("G1 FAIL: the check itself crashed (FactsError), so nothing was verified") and code == 1


def test_a_replay_says_what_the_run_said_and_draws_its_g4_chart(tmp_path: Path, matplotlib_loaded: None) -> None:
    """Issue 24 item 8: G8's ``github_token`` reads ``not set`` in the replay as
    in the run (the redactor had taken the word for a secret), and G4's chart
    is drawn from the captured samples beside the report, as the live run's was."""
    name = CAPTURES / "gb10-public-healthy.json.gz"
    recorded = capture.load(name)["checks"]["G8"]["result"]["readings"]["github_token"]["value"]
    out, code = replay(name, "--json", f"--report={tmp_path / 'env-report.json'}", home=tmp_path)
    g8 = next(r for r in json.loads(out)["results"] if r["id"] == "G8")
    assert code == 0
    assert g8["readings"]["github_token"]["value"] == recorded == "not set"
    assert "url_credentials" not in g8["readings"]
    chart = tmp_path / "env-report.thermal-g4.svg"
    samples = capture.load(name)["checks"]["G4"]["facts"]["samples"]
    assert len(samples) >= 2 and chart.read_bytes().startswith(b"<?xml")


def test_a_capture_keeps_what_the_run_wrote_about_a_token() -> None:
    """A capture's G8 answer says ``not set``/``sent``/``not sent: …`` about the
    token: words of this tool, kept; a value under a secret-named key is not."""
    from pytest_dgx_spark.redact import REDACTED, Redactor

    answer = {"token": "not set", "credentials": "none", "api_token": "s3cr3t-v4lue"}
    assert Redactor({})({"answer": answer})["answer"] == {"token": "not set", "credentials": "none",
                                                          "api_token": REDACTED}
    sent = {"token": "sent", "credentials": "not sent: plain http (GITHUB_TOKEN goes only over https)"}
    assert Redactor({})(sent) == sent


def test_the_field_readings_recorded_on_a_real_gpu_are_decided_again(tmp_path: Path) -> None:
    """h100-field: the live run of 2026-12-05 on a lent H100 (driver 580.159.04, Triton 3.6.0)
    with issue 22's readings. The replay decides them again from the capture: the loaded open
    module (G1), the buddy blocks and the cgroup limit (G3, not judged off a Spark), 358 kernel
    log records from /dev/kmsg without an Xid (G4), Triton 3.6.0 compiling for sm_121a (G7,
    listed under the SKIP), the image's CUDA 13.0 within the driver's (G9)."""
    proc, touched = untouched(tmp_path, "cli", "--replay", str(CAPTURES / "h100-field.json.gz"), "--json")
    assert touched == [] and proc.returncode == 0, proc.stderr
    block = json.loads(proc.stdout)
    got = {r["id"]: {k: v["value"] for k, v in r["readings"].items()} for r in block["results"]}
    assert got["G1"]["nvidia_module"] == "580.159.04 (open)" and got["G1"]["kernel_release"].endswith("-gpu")
    assert (got["G3"]["normal_free_blocks"], got["G3"]["page_size"], got["G3"]["oom_kills"]) == (44, 4, 0)
    assert (got["G4"]["kernel_log_source"], got["G4"]["xid_events"]) == ("/dev/kmsg", 0)
    assert got["G7"]["triton_sm121_compile"] == "ok"
    assert (got["G9"]["image_cuda"], got["G9"]["host_driver_cuda"]) == ("13.0", "13.0")
    assert block["verdict"] == "ready-with-warnings"


def test_a_replay_says_each_findings_code(tmp_path: Path) -> None:
    """Issue 31: a replay decides the codes again from the facts (``--json`` and ``-v`` carry them);
    a check recorded without facts keeps its recorded result's codes; a recorded crash replays with
    its code."""
    vllm = CAPTURES / "h200-vllm.json.gz"
    out, code = replay(vllm, "--json", home=tmp_path)
    by_id = {r["id"]: r for r in json.loads(out)["results"]}
    assert code == 1 and by_id["G6"]["status"] == "FAIL" and by_id["G6"]["codes"] == ["G6.uncapped-process"]
    assert by_id["G8"]["codes"] == ["G8.offline"] and by_id["G7"]["codes"] == ["G7.not-sm121"]
    assert by_id["G1"]["codes"] == []  # a PASS states no finding
    verbose, _ = replay(vllm, "--only", "G6", "-v", home=tmp_path)
    assert verbose.splitlines()[:2] == [
        next(ln for ln in verbose.splitlines() if ln.startswith("G6 FAIL: ")), "  code: G6.uncapped-process"
    ]

    def result_only(doc: dict[str, Any]) -> None:
        recorded = doc["checks"]["G3"]["result"]
        doc["checks"]["G3"] = {"result": {**recorded, "status": "WARN", "codes": ["G3.oom-kills"]}}

    out, _ = replay(edited(tmp_path, result_only), "--only", "G3", "--json", home=tmp_path)
    assert json.loads(out)["results"][0]["codes"] == ["G3.oom-kills"]  # what the run recorded, kept

    def crash_recorded(doc: dict[str, Any]) -> None:
        from pytest_dgx_spark.engine import crashed

        doc["checks"]["G1"]["facts"]["scan"] = "not a scan"
        doc["checks"]["G1"]["result"] = crashed("G1", "AttributeError: 'str' object has no attribute 'get'").to_dict()

    out, _ = replay(edited(tmp_path, crash_recorded), "--only", "G1", "--json", home=tmp_path)
    assert json.loads(out)["results"][0]["codes"] == ["G1.check-crashed"]


def older_capture(tmp_path: Path, only: list[str] | None = None) -> tuple[Path, str]:
    """h200-healthy as a version without its last check would have written it, and that check
    (``only``: the captured run's ``--only``)."""
    raw = (CAPTURES / "h200-healthy.json.gz").read_bytes()
    doc = json.loads(gzip.decompress(raw))
    newest = list(doc["checks"])[-1]
    del doc["checks"][newest]
    doc.setdefault("options", {})["only"] = only or []
    tmp_path.mkdir(exist_ok=True)
    path = tmp_path / "older.json"
    path.write_text(json.dumps(doc))
    return path, newest


def test_a_check_newer_than_the_capture_is_no_part_of_its_replay(tmp_path: Path, pytester: pytest.Pytester) -> None:
    """A capture whose run had no --only holds every check its version had: a check added since was
    no part of that run, so its replay neither lists it as "not run" nor counts it in the verdict."""
    env = {"PATH": "", "HOME": child_home(tmp_path), "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    env["SPARK_PREFLIGHT_HOST_ROOT"] = "/nonexistent-host-root"
    cli = [sys.executable, "-m", "pytest_dgx_spark.cli", "--replay"]
    path, newest = older_capture(tmp_path)
    older = subprocess.run([*cli, str(path)], capture_output=True, text=True, timeout=120, env=env)
    assert f"{newest} " not in older.stdout and "not run" not in older.stdout, older.stdout
    assert older.stdout.splitlines()[-1].startswith("verdict: ready"), older.stdout
    # a captured run that left it out with --only: its replay says so, as that run did
    kept = [c for c in catalog.IDS if c != newest and c in json.loads(path.read_text())["checks"]]
    chosen_path, _ = older_capture(tmp_path / "only", kept)
    chosen = subprocess.run([*cli, str(chosen_path)], capture_output=True, text=True, timeout=120, env=env)
    said = [ln for ln in chosen.stdout.splitlines() if " not run: " in ln]
    assert len(said) == 1 and newest in said[0].split(" not run: ")[0].split(", "), chosen.stdout
    assert said[0].endswith(f"not run: deselected (--only {','.join(kept)})"), said
    run = pytester.runpytest_subprocess("-p", "no:randomly", "--spark-preflight", f"--spark-replay={path}")
    text = run.stdout.str()
    assert f"::{newest}" not in text and "deselected" not in text and "not run" not in text, text
