"""Terminal escape injection (issue 19, item 9), for real.

Check lines quote names other people choose: a process name (any local user
can ``exec -a $'\\x1b[2Jvllm'``), the name of a config file in a downloaded
checkout, a GitHub issue title, an ini value. Before, each reached the
terminal raw: ``\\x1b[2J`` cleared the screen, and a newline in a name
started a line ``verdict: ready`` of its own in a CI log. Each test plants
one such name, runs the real ``pytest --spark-preflight`` and the real
``spark-preflight`` in child processes (colour off: ``--color=no`` and
``NO_COLOR``, so an ESC in the output can only be ours), and asserts that no
control character reaches any output, that no forged line begins with
``verdict:``, and that the JUnit XML still parses.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from localserver import ISSUES_PATH, Answer, LocalServer

from pytest_dgx_spark.safe_text import fit, visible, visible_lines

from conftest import spark_cli

#: what a terminal acts on: C0 controls but tab and newline, DEL, C1, the line and
#: paragraph separators, bidi overrides and isolates, lone surrogates
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")
#: what a planted name tries to print as a line of its own
FORGED = "verdict: ready (forged)"
#: clear the screen, a carriage return, the forged line, a bidi override, an 8-bit CSI
PAYLOAD = f"\x1b[2J\r\n{FORGED}\u202e\x9b31m\u2028"


def raw_controls(outputs: dict[str, str]) -> list[str]:
    """``where: char`` for each control character found in any output."""
    return [f"{where}: {m.group(0)!r}" for where, text in outputs.items() for m in RAW.finditer(text)]


def forged_lines(outputs: dict[str, str]) -> list[str]:
    """Lines that begin with the forged verdict (after any indent)."""
    return [f"{where}: {line!r}" for where, text in outputs.items() for line in text.splitlines()
            if line.lstrip().startswith(FORGED)]


@pytest.fixture
def no_colour(monkeypatch: pytest.MonkeyPatch) -> None:
    """No colour codes of pytest's own in any output (they are ESC too)."""
    monkeypatch.setenv("NO_COLOR", "1")
    for var in ("PY_COLORS", "FORCE_COLOR"):
        monkeypatch.delenv(var, raising=False)


def assert_safe(outputs: dict[str, str]) -> None:
    assert raw_controls(outputs) == []
    assert forged_lines(outputs) == []
    if "junit.xml" in outputs:
        ET.fromstring(outputs["junit.xml"])  # well-formed


# ---------------------------------------------------------------------- the boundary itself


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("vllm", "vllm"),
        ("\x1b[2Jvllm", "\\x1b[2Jvllm"),
        ("a\rb\x00c\x7f", "a\\rb\\x00c\\x7f"),
        ("\x9b31m\x85", "\\x9b31m\\x85"),
        ("x\u202ey\u2066z\u200f", "x\\u202ey\\u2066z\\u200f"),
        ("line\u2028sep\u2029", "line\\u2028sep\\u2029"),
        ("bad\udcff.json", "bad\\udcff.json"),
        ("caf\u00e9 \u2026 \u4e2d \U0001f600", "caf\u00e9 \u2026 \u4e2d \U0001f600"),  # printable: kept
        ("a\\x1b", "a\\x1b"),  # a backslash stays: escaping twice changes nothing
    ],
)
def test_visible_escapes_what_a_terminal_acts_on(text: str, shown: str) -> None:
    assert visible(text) == shown
    assert visible(visible(text)) == shown
    assert RAW.search(visible(text)) is None


def test_visible_lines_keeps_only_our_newlines() -> None:
    assert visible_lines("G1 PASS: x\n  a = \x1b[8m\r") == "G1 PASS: x\n  a = \\x1b[8m\\r"


@pytest.mark.parametrize(
    ("encoding", "shown"),
    [
        ("utf-8", "G8 WARN: #7 a long title\u2026 \u2014 caf\u00e9 \u4e2d"),
        ("ascii", "G8 WARN: #7 a long title... - caf\\xe9 \\u4e2d"),
        ("latin-1", "G8 WARN: #7 a long title... - caf\u00e9 \\u4e2d"),
    ],
)
def test_fit_spells_a_line_the_terminal_can_encode(encoding: str, shown: str) -> None:
    assert fit("G8 WARN: #7 a long title\u2026 \u2014 caf\u00e9 \u4e2d", encoding) == shown


def test_a_result_holds_no_control_whatever_a_check_quoted() -> None:
    """Every text of a Result passes model.one_line, readings through
    render: the terminal, JUnit, env-report and the JSON block read these."""
    from pytest_dgx_spark.model import Reading, Result, Status

    r = Result("G6", Status.FAIL, f"pid 7 {PAYLOAD}vllm", fix=PAYLOAD, details=[PAYLOAD],
               readings=[Reading("name", PAYLOAD)], headline=PAYLOAD, short_fix=PAYLOAD)
    for text in (r.line(), r.short_line(), r.report_text(), json.dumps(r.to_dict(), ensure_ascii=False)):
        assert RAW.search(text) is None, text
    assert not any(line.lstrip().startswith(FORGED) for line in r.report_text().splitlines())
    again = type(r).from_dict(json.loads(json.dumps(r.to_dict())))
    assert again.report_text() == r.report_text()  # a JSON round trip (xdist, capture) escapes nothing twice


# ---------------------------------------------------------------------- a process name


@pytest.fixture
def titled_process(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A real process whose argv[0] (its name in /proc and in ps) is the payload."""
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash is needed for exec -a")
    title = f"{PAYLOAD}vllm serve org/m --gpu-memory-utilization 0.9"
    proc = subprocess.Popen([bash, "-c", 'exec -a "$0" sleep 900', title], cwd=tmp_path,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 5
        while b"\x1b[2J" not in Path(f"/proc/{proc.pid}/cmdline").read_bytes():
            assert time.monotonic() < deadline, "the child never exec'd"
            time.sleep(0.02)
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=5)


def test_a_process_named_with_escapes_reaches_no_output(
    pytester: pytest.Pytester, spark_env: Any, monkeypatch: pytest.MonkeyPatch, titled_process: Any,
    no_colour: None,
) -> None:
    """A real child started with ``exec -a $'\\x1b[2J\\r\\nverdict: ready…vllm'``,
    holding 40 GiB of the GPU per NVML and listed by nvidia-smi under that
    name: G6 names it in every output, escaped."""
    pid = titled_process.pid
    (spark_env.root / "proc" / "1").mkdir(parents=True, exist_ok=True)
    (spark_env.root / "proc" / "1" / "stat").write_text("1 (init) S 0 1 1 0 -1 0" + " 0" * 40 + "\n")
    (spark_env.root / "proc" / "1" / "cmdline").write_bytes(b"/sbin/init\0")
    os.symlink(f"/proc/{pid}", spark_env.root / "proc" / str(pid))
    spark_env.nvml_scenario["devices"][0]["compute_procs"] = [{"pid": pid, "used_bytes": 40 << 30}]
    spark_env.doubles.nvml(spark_env.nvml_scenario)
    spark_env.doubles.apply(monkeypatch)
    from every_output import every_output

    outputs = every_output(pytester, ["--color=no", "--spark-preflight", "--spark-only", "G6"], ["--only", "G6"])
    assert f"pid {pid}" in outputs["pytest -v"] and f"pid {pid}" in outputs["cli -v"], outputs["cli -v"]
    assert "\\x1b[2J" in outputs["pytest -v"] + outputs["cli -v"]  # the name is shown, escaped
    assert_safe(outputs)


# ---------------------------------------------------------------------- config file names


def test_config_file_names_with_escapes_reach_no_output(
    pytester: pytest.Pytester, spark_env: Any, quiet_root: Path, monkeypatch: pytest.MonkeyPatch,
    no_colour: None,
) -> None:
    """A checkout's own config files, named with the payload and with bytes
    that are not UTF-8 (a lone surrogate once read): G10 FAILs on the TP=2
    over 2 nodes they hold and quotes their names, escaped, in the default
    output too."""
    monkeypatch.setenv("SPARK_PREFLIGHT_HOST_ROOT", str(quiet_root))
    job = json.dumps({"tensor_parallel_size": 2, "num_nodes": 2})
    (pytester.path / f"train{PAYLOAD}.json").write_text(job)
    Path(os.fsdecode(os.fsencode(pytester.path) + b"/bad\xff\x9b2J.yaml")).write_text("tensor_parallel_size: 2\nnum_nodes: 2\n")
    pytester.makeini("[pytest]\n")
    from every_output import every_output

    outputs = every_output(pytester, ["--color=no", "--spark-preflight", "--spark-only", "G10"], ["--only", "G10"])
    assert "G10 FAIL" in outputs["pytest"] and "G10 FAIL" in outputs["cli"], outputs["cli"]
    for where in ("pytest", "cli"):  # the default line names one of them, escaped
        assert "bad\\udcff\\udc9b2J" in outputs[where] or "train\\x1b[2J" in outputs[where], outputs[where]
    for where in ("pytest -v", "cli -v"):
        assert "bad\\udcff\\udc9b2J.yaml" in outputs[where] and "train\\x1b[2J" in outputs[where]
    assert_safe(outputs)


# ---------------------------------------------------------------------- an issue title


@pytest.fixture
def server() -> Iterator[LocalServer]:
    with LocalServer() as s:
        yield s


def titled_issue(server: LocalServer, title: str) -> None:
    issue = {"number": 7, "title": title, "body": "", "created_at": "2026-01-01T00:00:00Z",
             "html_url": "https://github.com/NVIDIA/dgx-spark-playbooks/issues/7"}
    server.answers[ISSUES_PATH] = Answer(body=json.dumps([issue]).encode())


def test_an_issue_title_with_escapes_reaches_no_output(
    pytester: pytest.Pytester, server: LocalServer, monkeypatch: pytest.MonkeyPatch, no_colour: None
) -> None:
    """G8 quotes issue titles: anyone can open an issue. A lone surrogate
    (``\\ud800`` in GitHub's JSON) came through ``-v`` as a UnicodeEncodeError."""
    titled_issue(server, f"vLLM: crash {PAYLOAD} \ud800 end")
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    from every_output import every_output

    outputs = every_output(
        pytester,
        ["--color=no", "--spark-preflight", "--spark-only", "G8", f"--spark-github-url={server.url}",
         "--spark-playbook=vllm"],
        ["--only", "G8", "--github-url", server.url, "--playbook", "vllm"],
    )
    for where in ("pytest -v", "cli -v"):
        assert "#7 vLLM: crash \\x1b[2J verdict: ready (forged)\\u202e" in outputs[where], outputs[where]
        assert "\\ud800 end" in outputs[where]
        assert "Traceback" not in outputs[where] and "internal error" not in outputs[where]
    assert_safe(outputs)


# ---------------------------------------------------------------------- an ini value


def test_an_ini_value_with_escapes_reaches_no_terminal(
    pytester: pytest.Pytester, spark_env: Any, no_colour: None
) -> None:
    """``spark_preflight_report`` from the checkout's pyproject.toml is quoted
    in the line that says where the report went; a bad key's value in the
    usage error. Neither is acted on by the terminal."""
    name = "r\\u001b[2J\\r\\nverdict: ready (forged)\\u202e.json"
    pytester.makepyprojecttoml(f'[tool.pytest.ini_options]\nspark_preflight_report = "{name}"\n')
    outputs = {}
    run = pytester.runpytest_subprocess("--color=no", "-p", "no:randomly", "--spark-preflight", "--spark-only", "G9")
    outputs["pytest"] = run.stdout.str() + run.stderr.str()
    cli = spark_cli("--only", "G9", "--offline", "-v", cwd=pytester.path)
    outputs["cli"] = cli.stdout + cli.stderr
    assert any(p.name.startswith("r\x1b[2J") for p in pytester.path.iterdir())  # written where it was asked
    assert "report written to" in outputs["pytest"] and "\\x1b[2J" in outputs["pytest"], outputs["pytest"]
    pytester.makepyprojecttoml('[tool.pytest.ini_options]\nspark_preflight_profile = "gb10\\u001b[2J\\nverdict: ready (forged)"\n')
    bad = pytester.runpytest_subprocess("--color=no", "-p", "no:randomly", "--spark-preflight")
    outputs["pytest usage"] = bad.stdout.str() + bad.stderr.str()
    cli = spark_cli("--only", "G9", "--offline", cwd=pytester.path)
    outputs["cli usage"] = cli.stdout + cli.stderr
    assert bad.ret == pytest.ExitCode.USAGE_ERROR and cli.returncode == 2
    assert "spark_preflight_profile" in outputs["pytest usage"] and "spark_preflight_profile" in outputs["cli usage"]
    assert_safe(outputs)


# ---------------------------------------------------------------------- one boundary


def _terminal_writes() -> list[str]:
    """``module:function: call`` for each write to a terminal in pytest_dgx_spark
    that does not go through the boundary: ``print()``, ``write_line()``,
    ``sys.stdout/stderr.write()`` outside the writers made for it, and a
    ``pytest.UsageError`` whose message is not ``visible(...)``. Probe
    scripts print JSON to a pipe, not to a terminal: they are left out."""
    import ast

    import pytest_dgx_spark

    package = Path(pytest_dgx_spark.__file__).parent
    # codes.main: the developers' table generator, writing only the registry's own constant text
    writers = {("safe_text", "write_line"), ("cli_output", "say"), ("cli_output", "say_error"), ("codes", "main")}
    found = []
    for path in sorted(package.rglob("*.py")):
        if "scripts" in path.relative_to(package).parts:
            continue
        module = path.stem
        tree = ast.parse(path.read_text())
        for func in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            if (module, func.name) in writers:
                continue
            for call in (n for n in ast.walk(func) if isinstance(n, ast.Call)):
                text = ast.unparse(call.func)
                bad = text == "print" or text.endswith(".write_line") or text in ("sys.stdout.write", "sys.stderr.write")
                if text.endswith("UsageError") and call.args:
                    arg = call.args[0]
                    bad = not (isinstance(arg, ast.Call) and ast.unparse(arg.func) == "visible")
                if bad:
                    found.append(f"{module}:{func.name}: {ast.unparse(call)[:80]}")
    return sorted(set(found))


def test_every_terminal_write_goes_through_the_boundary() -> None:
    """So that no new output path can skip the escaping."""
    assert _terminal_writes() == []
