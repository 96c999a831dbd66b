"""Capture and replay: a run recorded to one file is decided again anywhere.

The capture is made on the GB10 double (``spark_env``: fake NVML, torch and
nvidia-smi that answer as a Spark); the replay runs with an empty PATH, no
doubles and no network, so anything it read of the machine would change
its lines.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_dgx_spark import capture, catalog
from pytest_dgx_spark.redact import REDACTED, Redactor, reduce_argv

from conftest import PYTEST_CHILD

GLINE_PREFIXES = tuple(f"{i} " for i in catalog.IDS)


@pytest.fixture(autouse=True)
def _gb10(spark_env):
    return spark_env


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_dgx_spark.cli", "-v", *args],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=cwd,
        env=env,
    )


def replay_note(stderr: str, capture: Path) -> bool:
    """stderr holds only the note that the lines are a replay's (issue 24, item 7):
    stdout stays the captured run's own lines."""
    note = rf"spark-preflight: note: replay of {re.escape(capture.name)} \(captured \S+, host .+\): this machine was not read"
    return len(stderr.splitlines()) == 1 and re.fullmatch(note, stderr.strip()) is not None


def bare_env() -> dict[str, str]:
    """No PATH, no doubles, no proxy: a replay must need none of them."""
    keep = {"PYTHONPATH": os.environ.get("PYTHONPATH", ""), "HOME": os.environ.get("HOME", "/")}
    return {**keep, "PATH": "", "SPARK_PREFLIGHT_HOST_ROOT": "/nonexistent-host-root"}


def lines(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [ln for ln in proc.stdout.splitlines() if ln.startswith((*GLINE_PREFIXES, "verdict:"))]


def make_capture(tmp_path: Path, *args: str, name: str = "spark.json.gz") -> tuple[Path, list[str], int]:
    target = tmp_path / name
    proc = cli("--offline", "--capture", str(target), *args, cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stderr
    assert target.is_file(), proc.stderr
    return target, lines(proc), proc.returncode


def test_replay_anywhere_gives_the_same_lines_and_exit(tmp_path: Path) -> None:
    target, original, code = make_capture(tmp_path)
    assert len(original) == len(catalog.IDS) + 1
    replay = cli("--replay", str(target), cwd=tmp_path, env=bare_env())
    assert replay_note(replay.stderr, target), replay.stderr
    assert lines(replay) == original
    assert replay.returncode == code


def test_capture_is_gzip_json_with_schema_facts_and_raw_answers(tmp_path: Path) -> None:
    target, _, _ = make_capture(tmp_path)
    raw = target.read_bytes()
    assert raw[:2] == b"\x1f\x8b"
    doc = json.loads(gzip.decompress(raw))
    assert doc["schema"] == capture.SCHEMA and doc["schema_version"] == capture.VERSION
    assert doc["tool"]["name"] == "pytest-dgx-spark"
    assert doc["host"]["gpu"] == "NVIDIA GB10"
    assert doc["profile"] == "gb10"
    assert set(doc["checks"]) == set(catalog.IDS)
    assert "MemTotal" in doc["checks"]["G3"]["facts"]["meminfo"]
    # raw probe answers: NVML's snapshot and /proc/meminfo as read
    assert doc["probes"]["nvml"]["devices"][0]["name"] == "NVIDIA GB10"
    assert doc["probes"]["meminfo"]["fields"]["MemTotal"] > 0
    assert "processes" not in doc["probes"]  # every command line on the box: left out
    assert doc["params"]["thresholds"]["g3_margin_gb"] == 0.0


def test_plain_json_when_the_name_has_no_gz(tmp_path: Path) -> None:
    target, _, _ = make_capture(tmp_path, "--only", "G3", name="spark.json")
    doc = json.loads(target.read_text())
    assert list(doc["checks"]) == ["G3"]


def test_changed_thresholds_give_the_new_verdict(tmp_path: Path) -> None:
    target, original, _ = make_capture(tmp_path, "--only", "G3", "--workload-gb", "10")
    assert original[0].startswith("G3 PASS"), original
    tighter = cli("--replay", str(target), "--threshold", "g3_margin_gb=100000", cwd=tmp_path, env=bare_env())
    assert lines(tighter)[0].startswith("G3 FAIL"), tighter.stdout
    assert "100000 GiB margin" in lines(tighter)[0]
    assert tighter.returncode == 1
    # the captured options stay: the workload declared at capture time is still judged
    same = cli("--replay", str(target), cwd=tmp_path, env=bare_env())
    assert lines(same) == original


def test_replay_only_and_profile(tmp_path: Path) -> None:
    target, original, _ = make_capture(tmp_path)
    only = cli("--replay", str(target), "--only", "G3,G5", cwd=tmp_path, env=bare_env())
    assert [ln.split()[0] for ln in lines(only)[:-1]] == ["G3", "G5"]
    assert lines(only)[0] == original[2]
    generic = cli("--replay", str(target), "--profile", "generic", "--json", cwd=tmp_path, env=bare_env())
    block = json.loads(generic.stdout)
    assert block["profile"] == "generic"


def test_pytest_replay_writes_junit_and_env_report(tmp_path: Path, pytester: pytest.Pytester) -> None:
    target, original, _ = make_capture(tmp_path)
    junit = tmp_path / "junit.xml"
    report = tmp_path / "env-report.json"
    proc = subprocess.run(
        [
            *PYTEST_CHILD,
            "--spark-preflight",
            f"--spark-replay={target}",
            f"--junitxml={junit}",
            f"--spark-report={report}",
            "-rA",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=pytester.path,
        env=bare_env(),
    )
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    doc = json.loads(report.read_text())
    n = len(catalog.IDS)
    assert doc["lines"] == original[:n]
    assert doc["verdict"] == original[n].split()[1]
    assert doc["host"]["gpu"] == "NVIDIA GB10"
    xml = junit.read_text()
    assert xml.count("<testcase ") == n
    assert 'name="spark.verdict"' in xml


MINIMAL = {"schema": capture.SCHEMA, "schema_version": capture.VERSION, "checks": {}}


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"not json at all", "not JSON"),
        (json.dumps({"schema": "something-else"}).encode(), "not a pytest-dgx-spark capture"),
        (
            json.dumps({"schema": capture.SCHEMA, "schema_version": 99, "tool": {"version": "9.0"}, "checks": {}}).encode(),
            "capture schema 99 (written by pytest-dgx-spark 9.0) is newer",
        ),
        (json.dumps({"schema": capture.SCHEMA, "schema_version": 0, "checks": {}}).encode(), "is older than"),
        (json.dumps({"schema": capture.SCHEMA, "schema_version": "1", "checks": {}}).encode(), "not a number"),
        (b"\x1f\x8b\x08\x00garbage", "not a readable gzip file"),
        # hand-edited tables: were an "internal error", or every check "crashed" asking for a bug report
        (json.dumps({**MINIMAL, "options": [1]}).encode(), "capture's \"options\" is not a table (a list)"),
        (json.dumps({**MINIMAL, "host": "h"}).encode(), "capture's \"host\" is not a table (a str)"),
        (json.dumps({**MINIMAL, "params": {"options": [1, 2]}}).encode(), "\"params.options\" is not a table"),
        (
            json.dumps({**MINIMAL, "options": {"threshold": {"g3_margin_gb": "abc"}}}).encode(),
            "capture's options.threshold['g3_margin_gb'] is not a number ('abc')",
        ),
        # nested past Python's recursion limit: was "internal error (RecursionError …)"
        (b"[" * 100_000 + b"]" * 100_000, "not JSON (maximum recursion depth exceeded"),
    ],
)
def test_a_capture_that_cannot_replay_says_why_in_one_line(tmp_path: Path, content: bytes, why: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    proc = cli("--replay", str(bad), cwd=tmp_path, env=bare_env())
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and why in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_gzip_bomb_is_refused_at_the_cap_under_a_memory_limit(tmp_path: Path) -> None:
    """A sibling of issue 12.3 (a stream read without a cap): the capture's
    gzip was decompressed whole. 6 MB of gzip made 6 GiB (18.9 GB of RSS,
    killed after a minute; "internal error (MemoryError)" under ``ulimit
    -v``). Here 1 GiB of whitespace before a valid capture, as 17 gzip
    members (1 MB), read under a 2 GiB address-space limit: refused at the
    cap, in one line, quickly."""
    import resource
    import time

    pad = gzip.compress(b" " * (64 << 20), compresslevel=9)
    doc = gzip.compress(json.dumps({"schema": capture.SCHEMA, "schema_version": 1, "checks": {}}).encode())
    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(pad * 16 + doc)
    assert bomb.stat().st_size < 2 << 20

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_dgx_spark.cli", "--replay", str(bomb)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=bare_env(),
        preexec_fn=limit,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (
        f"spark-preflight: error: {bomb}: more than {capture.MAX_BYTES >> 20} MiB of JSON once decompressed "
        "(a capture is well under 1 MiB); not read\n"
    )
    assert time.monotonic() - start < 30


def test_pytest_refuses_a_bad_capture_with_one_line(tmp_path: Path, pytester: pytest.Pytester) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    result = pytester.runpytest_subprocess("--spark-preflight", f"--spark-replay={bad}")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*not a pytest-dgx-spark capture*"])
    assert "Traceback" not in result.stderr.str()


def test_capture_and_replay_together_are_refused(tmp_path: Path) -> None:
    target, _, _ = make_capture(tmp_path, "--only", "G3", name="a.json")
    proc = cli("--replay", str(target), "--capture", str(tmp_path / "b.json"), cwd=tmp_path)
    assert proc.returncode == 2
    assert "a replay reads no machine to capture" in proc.stderr


def test_a_check_entry_that_cannot_be_read_is_that_checks_skip(tmp_path: Path) -> None:
    """One bad entry costs that check, said as what it is: it was "not in the
    capture" (a list) or "the check itself crashed (KeyError)" (a result
    without its id), with a bug-report fix."""
    doc = {**MINIMAL, "checks": {"G3": [1], "G5": {"result": {"status": "NOPE"}}}}
    bad = tmp_path / "entries.json"
    bad.write_text(json.dumps(doc))
    proc = cli("--replay", str(bad), "--only", "G3,G5", cwd=tmp_path, env=bare_env())
    assert lines(proc)[:2] == [
        "G3 SKIP: the capture's G3 entry is not a table: nothing to decide",
        "G5 SKIP: the capture's G5 result cannot be read (KeyError: 'id')",
    ], proc.stdout + proc.stderr
    assert "crashed" not in proc.stdout and proc.returncode == 0


def test_a_recorded_crash_replays_as_the_same_fail(tmp_path: Path) -> None:
    target, _, _ = make_capture(tmp_path, "--only", "G3", name="c.json")
    doc = json.loads(target.read_text())
    doc["checks"]["G3"] = {"error": "RuntimeError: boom at g03_uma_headroom.py:1"}
    target.write_text(json.dumps(doc))
    proc = cli("--replay", str(target), cwd=tmp_path, env=bare_env())
    assert lines(proc)[0].startswith("G3 FAIL: the check itself crashed (RuntimeError: boom")


# ----------------------------------------------------------------------------- redaction


SECRETS = {
    "env": "hf_" + "EnvSecretValue0123456789",
    "flag": "SECRET123flagvalue",
    "url": "UrlPassw0rdSecret",
    "config": "ConfigSecretToken987",
    "github": "ghp_" + "GithubShapedToken0123456789",
}


def test_redactor_removes_every_kind_of_secret() -> None:
    red = Redactor({"HF_TOKEN": SECRETS["env"], "MY_SERVICE_PASSWORD": "pw-4567", "USER": "alice", "HOME": "/home/alice"})
    doc = {
        "environment": {"HF_TOKEN": SECRETS["env"], "PATH": "/home/alice/.local/bin:/usr/bin"},
        "cmdline": ["/home/alice/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--api-key", SECRETS["flag"], "--gpu-memory-utilization", "0.9", "/models/x"],
        "text": f"vllm serve m --hf_token={SECRETS['flag']} at https://bob:{SECRETS['url']}@host/x by alice",
        "note": f"token {SECRETS['github']} and pw-4567 in /Users/carol/x",
        "api_key": "anything-here",
        "author": "kept as is",
    }
    out = json.dumps(red(doc))
    for secret in (*SECRETS.values(), "pw-4567", "alice", "carol", "bob:"):
        assert secret not in out, secret
    clean = red(doc)
    # the module run by -m names the program (G6 classifies by it): kept
    assert clean["cmdline"] == [
        "python",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--api-key",
        "--gpu-memory-utilization",
        "0.9",
    ]
    assert clean["api_key"] == REDACTED
    assert clean["author"] == "kept as is"
    assert "https://<redacted>@host/x" in clean["text"]
    assert clean["environment"]["PATH"] == "/home/<user>/.local/bin:/usr/bin"


def test_reduce_argv_keeps_program_and_read_flags_only() -> None:
    argv = ["/usr/bin/python3", "-m", "sglang.launch_server", "--model", "/data/secret-model", "--mem-fraction-static=0.4", "--tp", "2", "--api-key=k"]
    assert reduce_argv(argv) == [
        "python3",
        "-m",
        "sglang.launch_server",
        "--model",
        "--mem-fraction-static=0.4",
        "--tp",
        "2",
        "--api-key",
    ]
    assert reduce_argv(["vllm", "serve", "org/model", "--gpu-memory-utilization", "0.5"]) == [
        "vllm",
        "serve",
        "--gpu-memory-utilization",
        "0.5",
    ]


def test_planted_secrets_never_reach_the_capture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Secrets in the environment, a process's argv, a config file and a URL."""
    monkeypatch.setenv("HF_TOKEN", SECRETS["env"])
    monkeypatch.setenv("GITHUB_TOKEN", SECRETS["github"])
    (tmp_path / "train.yaml").write_text(
        f"hf_token: {SECRETS['config']}\nurl: https://u:{SECRETS['url']}@example.invalid/x\ntensor_parallel_size: 2\n"
    )
    server = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "vllm", "serve", "--api-key", SECRETS["flag"]],
    )
    try:
        target = tmp_path / "s.json"
        proc = cli(
            "--capture",
            str(target),
            "--offline",
            f"--github-url=http://user:{SECRETS['url']}@127.0.0.1:9",
            cwd=tmp_path,
        )
        assert target.is_file(), proc.stderr
    finally:
        server.kill()
        server.wait(timeout=10)
    text = target.read_text()
    for name, secret in SECRETS.items():
        assert secret not in text, name
        assert secret not in proc.stdout + proc.stderr, name


@pytest.mark.parametrize("name", ["spark.json.gz", "spark.json"])
def test_pytest_capture_writes_a_file_the_cli_replays_to_the_same_lines(
    tmp_path: Path, pytester: pytest.Pytester, name: str
) -> None:
    """``pytest --spark-preflight --spark-capture PATH``: the plugin's capture
    (gzip when the name ends in ``.gz``) replays in ``spark-preflight --replay``
    to the lines and verdict the pytest run reported."""
    target = tmp_path / name
    report = tmp_path / "env-report.json"
    proc = subprocess.run(
        [*PYTEST_CHILD, "--spark-preflight", "--spark-offline", f"--spark-capture={target}", f"--spark-report={report}"],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,  # not pytester's HOME: the capture writes the home folder as /home/<user>
    )
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    raw = target.read_bytes()
    assert (raw[:2] == b"\x1f\x8b") is name.endswith(".gz")
    doc = json.loads(gzip.decompress(raw) if name.endswith(".gz") else raw)
    assert doc["schema"] == capture.SCHEMA and set(doc["checks"]) == set(catalog.IDS)
    printed = lines(proc)  # the pytest run's terminal lines: ten short G-lines and the verdict
    assert len(printed) == len(catalog.IDS) + 1 and printed[-1].startswith("verdict: "), proc.stdout
    short = subprocess.run(
        [sys.executable, "-m", "pytest_dgx_spark.cli", "--replay", str(target)],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
        env=bare_env(),
    )
    assert replay_note(short.stderr, target) and lines(short) == printed, short.stderr
    full = cli("--replay", str(target), cwd=tmp_path, env=bare_env())  # -v: the whole lines
    assert lines(full)[: len(catalog.IDS)] == json.loads(report.read_text())["lines"]


# ----------------------------------------------------------------- every source, every output

USER = "alicesmith"
PLANTED = {
    "env token": "hf_" + "PlantedEnvToken0123456789",
    "env api key": "WandbPlainKeyValue4242",
    "env password": "DbPassw0rdPlanted77",
    "argv --api-key": "ArgvApiKeyPlanted11",
    "argv --hf_token=": "ArgvHfTokenPlanted22",
    "argv --hf-token": "ArgvHfTokenPlanted33",
    "title token": "hf_" + "TitleTokenPlanted0123456789",
    "title --api-key": "TitleApiKeyPlanted44",
    "config hf_token": "ConfigHfTokenPlanted55",
    "config url password": "ConfigUrlPassPlanted66",
    "config access_token": "ConfigQueryTokenPlanted77",
    "config argv --api-key": "ConfigArgvKeyPlanted88",
    "option url password": "OptionUrlPassPlanted99",
    "issue --hf_token=": "IssueFlagTokenPlanted10",
    "issue access_token": "IssueQueryTokenPlanted11",
}


def _start(argv: list[str], word: str) -> subprocess.Popen[bytes]:
    """A real process; returns once its /proc cmdline shows ``word``."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 10
    while word not in Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode(errors="replace"):
        assert time.monotonic() < deadline, f"pid {proc.pid} never showed {word!r}"
        time.sleep(0.02)
    return proc


def _plant_sources(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment, and configs under the rootdir (``home``)."""
    for name in ("USER", "LOGNAME"):
        monkeypatch.setenv(name, USER)
    monkeypatch.setenv("HF_TOKEN", PLANTED["env token"])
    monkeypatch.setenv("WANDB_API_KEY", PLANTED["env api key"])
    monkeypatch.setenv("MY_DB_PASSWORD", PLANTED["env password"])
    (home / "train.yaml").write_text(
        f"hf_token: {PLANTED['config hf_token']}\n"
        f"hub: https://{USER}:{PLANTED['config url password']}@hub.example/m?access_token={PLANTED['config access_token']}\n"
        f"output_dir: /home/{USER}/runs\ntensor_parallel_size: 2\n"
    )
    (home / "serve.yaml").write_text(
        f"args: [vllm, serve, org/m, --tensor-parallel-size, '2', --api-key, {PLANTED['config argv --api-key']}]\n"
    )


def _issue() -> bytes:
    """An open playbook issue whose title quotes a command line with secrets
    (people paste theirs), one of them only known as an environment value."""
    title = f"vLLM fails: --hf_token={PLANTED['issue --hf_token=']} with {PLANTED['env api key']}"
    url = f"https://github.com/NVIDIA/dgx-spark-playbooks/issues/7?access_token={PLANTED['issue access_token']}"
    issue = {"number": 7, "title": title, "body": "", "created_at": "2026-01-01T00:00:00Z", "html_url": url}
    return json.dumps([issue]).encode()


def test_secrets_planted_in_every_source_reach_no_output(
    pytester: pytest.Pytester, spark_env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 9's redaction, end to end on the GB10 double. Secrets in the
    environment; in the command line of a real fake vLLM (``--api-key``,
    ``--hf_token=``, ``--hf-token``) and of a process whose title (``exec
    -a``) starts with a token, both holding GPU memory per NVML; in configs
    under the rootdir (a token, ``user:pass@`` and ``?access_token=`` in a
    URL, a server's argv); in ``--spark-github-url``'s userinfo; in the issue
    G8 reads (a secret flag, the environment's own secret, ``?access_token=``);
    the user's name and home folder in paths. All ten checks, run by pytest
    (terminal, ``-v -rA``, JUnit, env report, capture, JSON report) and by the
    CLI (plain, ``-v``, ``--json``, ``--report``): no secret in any output;
    the capture names no user and no home folder either, and replays to the
    pytest run's lines."""
    from every_output import every_output, leaks
    from localserver import ISSUES_PATH, Answer, LocalServer

    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash is needed for exec -a (a process title)")
    home = pytester.path  # pytester's HOME, and the rootdir
    _plant_sources(home, monkeypatch)
    (home / "bin").mkdir()
    (home / "bin" / "vllm").write_text("import time\ntime.sleep(120)\n")
    argv = [sys.executable, str(home / "bin" / "vllm"), "serve", "org/private-model"]
    argv += ["--api-key", PLANTED["argv --api-key"], f"--hf_token={PLANTED['argv --hf_token=']}"]
    argv += ["--hf-token", PLANTED["argv --hf-token"], "--gpu-memory-utilization", "0.9"]
    title = f"{PLANTED['title token']} serve --api-key {PLANTED['title --api-key']}"
    started = [_start(argv, "serve")]
    try:
        started.append(_start([bash, "-c", 'exec -a "$0" sleep 120', title], "TitleApiKey"))
        for proc in started:
            os.symlink(f"/proc/{proc.pid}", spark_env.root / "proc" / str(proc.pid))
        spark_env.nvml_scenario["devices"][0]["compute_procs"] = [
            {"pid": proc.pid, "used_bytes": 20 << 30} for proc in started
        ]
        spark_env.doubles.nvml(spark_env.nvml_scenario)
        with LocalServer() as github:
            github.answers[ISSUES_PATH] = Answer(body=_issue())
            url = github.url.replace("http://", f"http://{USER}:{PLANTED['option url password']}@")
            outputs = every_output(pytester, ["--spark-preflight", f"--spark-github-url={url}"], ["--github-url", url])
    finally:
        for proc in started:
            proc.kill()
            proc.wait(timeout=10)
    # every source was read: G6 names the vLLM, the configs are in G10's facts, G8 quotes the issue
    assert f"pid {started[0].pid} vLLM" in outputs["pytest -v"], outputs["pytest -v"][-3000:]
    assert f"pid {started[1].pid}" in outputs["pytest -v"]
    assert "train.yaml" in outputs["capture.json"] and "serve.yaml" in outputs["capture.json"]
    assert "#7 vLLM fails: --hf_token=<redacted> with <redacted>" in outputs["cli -v"]
    assert leaks(outputs, *PLANTED.values()) == []
    capture_text = outputs["capture.json"]
    assert USER not in capture_text and str(home) not in capture_text
    assert '"root": "/home/<user>"' in capture_text  # G10's rootdir, the home folder: there, and replaced
    replayed = cli("--replay", str(home / "capture.json"), cwd=home, env=bare_env())
    assert lines(replayed)[: len(catalog.IDS)] == json.loads(outputs["env-report.json"])["lines"]
    assert [p for p in PLANTED.values() if p in replayed.stdout + replayed.stderr] == []


def test_a_capture_of_some_checks_under_strict_replays_to_the_same_verdict(
    tmp_path: Path, pytester: pytest.Pytester
) -> None:
    """``--only G3 --strict`` with a WARN: blocked, exit 1. The CLI's replay
    said ready-with-warnings and exit 0 (the captured --strict was dropped),
    pytest's replay added nine SKIPs ("not in the capture") for the checks the
    run had not selected. Both now decide what the captured run decided."""
    target, original, code = make_capture(tmp_path, "--only", "G3", "--workload-gb", "100", "--strict", name="s.json")
    assert original[0].startswith("G3 WARN: workload 100 GiB fits MemAvailable"), original
    others = len(catalog.IDS) - 1
    assert original[-1] == f"verdict: blocked (G3 WARN under --strict; 1 WARN, {others} not run)"
    assert code == 1
    replay = cli("--replay", str(target), cwd=tmp_path, env=bare_env())
    assert (lines(replay), replay.returncode) == (original, code)
    proc = subprocess.run(
        [*PYTEST_CHILD, "--spark-preflight", f"--spark-replay={target}", "-v"],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=pytester.path,
        env=bare_env(),
    )
    section = proc.stdout.split(" spark preflight ", 1)[-1]  # the terminal summary, not the FAILURES body
    assert [ln for ln in section.splitlines() if ln.startswith((*GLINE_PREFIXES, "verdict:"))] == original
    others = len(catalog.IDS) - 1
    assert f"{others} deselected" in proc.stdout and "SKIP" not in section and proc.returncode == 1
