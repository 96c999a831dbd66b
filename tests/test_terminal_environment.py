"""Environment problems are one clear line, never an "internal error" (issue 19, item 10).

Each test runs the real ``spark-preflight`` (or pytest) in a child process in
the environment that broke it: stdout closed (``>&-``), an ASCII or latin-1
terminal, a lone surrogate in a config or an issue title, a 300-character
file name or a NUL byte in a path option, a deleted working folder. Before,
each ended in ``internal error`` (exit 2, the verdict lost) or a pytest
INTERNALERROR traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from localserver import ISSUES_PATH, Answer, LocalServer

from pytest_dgx_spark import catalog

from conftest import PYTEST_CHILD, spark_cli

#: the checks a run of one check leaves out, and an id one past the last check's (no such check)
OTHERS, NO_SUCH = len(catalog.IDS) - 1, f"G{catalog.CHECKS[-1].number + 1}"

#: a title GitHub may well hold: long (cut with "…"), a dash, an accent, CJK
TITLE = "vLLM serve crashes on GB10 \u2014 caf\u00e9 \u4e2d " + "after the driver update " * 6


@pytest.fixture
def server() -> Iterator[LocalServer]:
    with LocalServer() as s:
        issue = {"number": 7, "title": TITLE, "body": "", "created_at": "2026-01-01T00:00:00Z",
                 "html_url": "https://github.com/NVIDIA/dgx-spark-playbooks/issues/7"}
        s.answers[ISSUES_PATH] = Answer(body=json.dumps([issue]).encode())
        yield s


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_TOKEN", "PYTHONIOENCODING")}
    env["SPARK_PREFLIGHT_HOST_ROOT"] = "/nonexistent-host-root"  # nothing of this machine decides
    return {**env, **extra}


def _two_gpus(folder: Path) -> dict[str, str]:
    """The variables of a GB10 NVML double with two GPUs (whatever GPUs this machine has)."""
    from conftest import Doubles
    from doubles import gb10

    folder.mkdir(parents=True, exist_ok=True)
    two = gb10.nvml()
    two["devices"] = [two["devices"][0], {**two["devices"][0], "uuid": "GPU-second", "pci_bus_id": "00000000:02:00.0"}]
    env = Doubles(folder).nvml(two).env
    return {k: env[k] for k in ("SPARK_FAKE_NVML", "PYTHONPATH")}


def _cli_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "pytest_dgx_spark.cli", *args]


def assert_no_crash(text: str) -> None:
    for word in ("Traceback", "internal error", "INTERNALERROR", "UnicodeEncodeError"):
        assert word not in text, text


# ---------------------------------------------------------------------- stdout closed


def test_cli_with_stdout_closed_says_the_verdict_on_stderr(tmp_path: Path) -> None:
    """``spark-preflight >&-`` exited 2 with ``'NoneType' object has no
    attribute 'flush'``. Now the checks run, the report is written, stderr
    says the verdict in one line and the exit code is the verdict's."""
    done = subprocess.run(
        ["sh", "-c", 'exec "$@" >&-', "sh", *_cli_argv("--only", "G9", "--offline", "--report", "r.json")],
        capture_output=True, text=True, cwd=tmp_path, env=_env(), timeout=120,
    )
    assert done.returncode == 0, done.stderr  # G9 WARNs here: ready-with-warnings
    assert_no_crash(done.stderr)
    assert done.stderr.splitlines() == ["spark-preflight: stdout is closed: no check line printed; "
                                        f"verdict: ready-with-warnings (1 WARN, {OTHERS} not run)"]
    assert json.loads((tmp_path / "r.json").read_text())["verdict"] == "ready-with-warnings"


# ---------------------------------------------------------------------- stderr closed


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--bogus"], "spark-preflight: error: unrecognized arguments: --bogus"),
        (["--timeout", "abc"], "spark-preflight: error: --timeout: expected a number, got 'abc'"),
        (["--only", NO_SUCH], f"spark-preflight: error: --only: '{NO_SUCH}' is not a check id"),
        (["diagnose", "--offline", "missing.log"], "spark-preflight: error: missing.log: cannot open"),
    ],
    ids=["unknown-option", "bad-number", "bad-check", "diagnose-missing-log"],
)
def test_cli_usage_error_with_stderr_closed_is_said_on_stdout(tmp_path: Path, args: list[str], said: str) -> None:
    """Issue 34 item 14: ``spark-preflight --bogus 2>&-`` exited 2 and said nothing anywhere. With
    stderr gone, the one error line goes to stdout: an exit 2 is never silent."""
    done = subprocess.run(["sh", "-c", 'exec "$@" 2>&-', "sh", *_cli_argv(*args)],
                          capture_output=True, text=True, cwd=tmp_path, env=_env(), timeout=120)
    assert done.returncode == 2, done.stdout
    assert done.stderr == ""
    assert_no_crash(done.stdout)
    lines = done.stdout.splitlines()  # diagnose prints its lines first
    assert lines and lines[-1].startswith(said) and (len(lines) == 1 or args[0] == "diagnose"), lines
    assert sum("error:" in line for line in lines) == 1


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--spark-timeout=abc"], "ERROR: --spark-timeout: expected a number, got 'abc'"),
        (["--spark-bogus"], "*error: unrecognized arguments: --spark-bogus"),
    ],
    ids=["bad-number", "unknown-option"],
)
def test_pytest_usage_error_with_stderr_closed_is_said_on_stdout(
    pytester: pytest.Pytester, args: list[str], said: str
) -> None:
    """The plugin's usage errors (pytest's ``UsageError``) with ``2>&-``: pytest's writer falls
    back to stdout; this keeps it so (exit 4, the reason on stdout)."""
    argv = [*PYTEST_CHILD, "--spark-preflight", *args]
    done = subprocess.run(["sh", "-c", 'exec "$@" 2>&-', "sh", *argv],
                          capture_output=True, text=True, cwd=pytester.path, env=_env(), timeout=120)
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout
    assert done.stderr == ""
    assert_no_crash(done.stdout)
    pytest.LineMatcher(done.stdout.splitlines()).fnmatch_lines([said])


# ---------------------------------------------------------------------- a terminal that is not UTF-8


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_cli_on_a_terminal_that_is_not_utf8_prints_every_line(
    tmp_path: Path, server: LocalServer, encoding: str
) -> None:
    """Any "…" (a cut title, a shortened line) raised UnicodeEncodeError: no
    line and exit 2. Now "…" is "...", the rest escaped, every line printed."""
    args = ("--only", "G8", "--github-url", server.url, "--playbook", "vllm")
    for extra in ([], ["-v"]):
        done = subprocess.run(_cli_argv(*args, *extra), capture_output=True, cwd=tmp_path, timeout=120,
                              env=_env(PYTHONIOENCODING=encoding))
        out = done.stdout.decode(encoding)
        assert done.returncode == 0, out + done.stderr.decode(encoding, "replace")
        assert_no_crash(out)
        assert out.startswith("G8 WARN: 1 open issue") and f"(1 WARN, {OTHERS} not run)" in out
        if extra:  # -v quotes the title: cut with "…", a dash, an accent and CJK in it
            assert "#7 vLLM serve crashes on GB10 - caf" in out and "..." in out, out
            assert ("caf\u00e9" if encoding == "latin-1" else "caf\\xe9") in out and "\\u4e2d" in out


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_pytest_on_a_terminal_that_is_not_utf8_keeps_the_lines_readable(
    pytester: pytest.Pytester, server: LocalServer, encoding: str
) -> None:
    """pytest's own fallback escaped a whole unencodable line (``\\u2026``);
    the section's lines now spell "…" as "..."."""
    pytester.makeini("[pytest]\n")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "dgx_spark", "-p", "no:cacheprovider", "--color=no", "-v",
         "--spark-preflight", "--spark-only", "G8", f"--spark-github-url={server.url}", "--spark-playbook=vllm"],
        capture_output=True, cwd=pytester.path, env=_env(PYTHONIOENCODING=encoding), timeout=120,
    )
    out = run.stdout.decode(encoding)
    assert run.returncode == 0, out
    section = out.split("spark preflight ===", 1)[1]
    assert "G8 WARN: 1 open issue" in section and "#7 vLLM serve crashes on GB10 - caf" in section, section
    assert "..." in section
    assert "\\u2026" not in section and "\\u2014" not in section
    assert f"verdict: ready-with-warnings (1 WARN, {OTHERS} not run)" in section


# ---------------------------------------------------------------------- lone surrogates


def test_a_lone_surrogate_in_a_config_is_escaped_not_a_crash(tmp_path: Path) -> None:
    """A config key ``"\\ud800"`` (valid JSON, no UTF-8 terminal can print
    it) in G10's ``-v`` details ended the run in ``UnicodeEncodeError``."""
    (tmp_path / "job.json").write_text('{"\\ud800": {"tensor_parallel_size": 2}}')
    env = _env(**_two_gpus(tmp_path / "doubles"))  # TP 2 fits: exit 0 on a one-GPU machine too
    for extra in ([], ["-v"], ["--json"]):
        done = spark_cli("--only", "G10", *extra, cwd=tmp_path, env=env)
        assert done.returncode == 0, done.stderr
        assert_no_crash(done.stdout + done.stderr)
        assert "\\ud800" in done.stdout or not extra


def test_a_lone_surrogate_in_an_issue_title_is_escaped_not_a_crash(tmp_path: Path, server: LocalServer) -> None:
    issue = {"number": 8, "title": "vLLM \ud800 breaks", "body": "", "created_at": "2026-01-01T00:00:00Z",
             "html_url": "https://github.com/NVIDIA/dgx-spark-playbooks/issues/8"}
    server.answers[ISSUES_PATH] = Answer(body=json.dumps([issue]).encode())
    done = spark_cli("--only", "G8", "-v", "--github-url", server.url, "--playbook", "vllm", cwd=tmp_path, env=_env())
    assert done.returncode == 0, done.stderr
    assert_no_crash(done.stdout + done.stderr)
    assert "#8 vLLM \\ud800 breaks" in done.stdout


# ---------------------------------------------------------------------- path options the system refuses


LONG = "a" * 300 + ".json"


@pytest.mark.parametrize("name", ["report", "capture", "config", "replay"])
def test_a_300_character_file_name_is_one_usage_line(pytester: pytest.Pytester, name: str) -> None:
    """ENAMETOOLONG from os.stat() was an "internal error" in the CLI and a
    pytest INTERNALERROR traceback."""
    cli = spark_cli("--only", "G9", "--offline", f"--{name}", LONG, cwd=pytester.path, env=_env())
    assert cli.returncode == 2
    (line,) = cli.stderr.splitlines()
    assert line.startswith(f"spark-preflight: error: --{name}: ") and line.endswith("File name too long"), line
    run = pytester.runpytest_subprocess("-p", "no:randomly", "--spark-preflight", "--spark-only", "G9",
                                        f"--spark-{name}={LONG}")
    text = run.stdout.str() + run.stderr.str()
    assert run.ret == pytest.ExitCode.USAGE_ERROR, text
    assert_no_crash(text)
    assert f"ERROR: --spark-{name}: " in text and "File name too long" in text


@pytest.mark.parametrize("key", ["report", "capture", "config", "replay"])
def test_a_nul_byte_in_a_path_from_the_ini_is_one_usage_line(pytester: pytest.Pytester, key: str) -> None:
    """A NUL byte (``"\\u0000"`` in pyproject.toml; no argv holds one) raised
    ValueError: embedded null byte."""
    value = '["r\\u0000.json"]' if key == "config" else '"r\\u0000.json"'
    pytester.makepyprojecttoml(f"[tool.pytest.ini_options]\nspark_preflight_{key} = {value}\n")
    cli = spark_cli("--only", "G9", "--offline", cwd=pytester.path, env=_env())
    assert cli.returncode == 2
    assert cli.stderr.splitlines() == [
        f"spark-preflight: error: spark_preflight_{key} (ini): 'r\\x00.json' holds a NUL byte; no file name can"
    ]
    run = pytester.runpytest_subprocess("-p", "no:randomly", "--spark-preflight", "--spark-only", "G9")
    text = run.stdout.str() + run.stderr.str()
    assert run.ret == pytest.ExitCode.USAGE_ERROR, text
    assert_no_crash(text)
    assert f"ERROR: spark_preflight_{key} (ini): 'r\\x00.json' holds a NUL byte" in text


# ---------------------------------------------------------------------- a deleted working folder


@pytest.mark.parametrize("extra", [[], ["--rootdir", "/"]])
def test_cli_in_a_deleted_folder_is_one_line(tmp_path: Path, extra: list[str]) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    done = subprocess.run(
        ["sh", "-c", 'cd "$1" && rmdir "$1" && shift && exec "$@"', "sh", str(gone),
         *_cli_argv("--only", "G9", "--offline", *extra)],
        capture_output=True, text=True, env=_env(), timeout=120,
    )
    assert done.returncode == 2
    assert_no_crash(done.stderr)
    (line,) = done.stderr.splitlines()
    assert line.startswith("spark-preflight: error: the current folder is gone"), line
