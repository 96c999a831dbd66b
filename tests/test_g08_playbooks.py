"""G8 — open issues of NVIDIA/dgx-spark-playbooks, against a real HTTP server
on 127.0.0.1 serving recorded-shape answers (tests/data/github). GITHUB_TOKEN
goes only over https, so the tests about the token use the server's https
twin (tests/tlsserver.py)."""

from __future__ import annotations

import html
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from localserver import ISSUES_PATH, Answer, LocalServer
from tlsserver import TlsServer, tls_cert_fixture, tls_server_fixture  # noqa: F401 - tls_cert, tls_server

from pytest_dgx_spark.checks.g08_playbooks import check as g8
from pytest_dgx_spark.checks.kit import Params
from pytest_dgx_spark.engine import Engine
from pytest_dgx_spark.model import Result, Status
from pytest_dgx_spark.probes.machine import Machine
from pytest_dgx_spark.settings import Settings

from conftest import DATA

GITHUB = DATA / "github"
ISSUES = (GITHUB / "issues_open.json").read_bytes()
RATE_LIMITED = (GITHUB / "rate_limited_403.json").read_bytes()
TOKEN = "ghp_" + "SecretForG8Tests0123456789"
#: 2026-07-24 14:05:09 UTC
RESET = 1784901909


@pytest.fixture
def server():
    with LocalServer() as s:
        yield s


def run_g8(server: LocalServer, token: str | None = TOKEN, **settings: object) -> tuple[Machine, object]:
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_TOKEN"}
    if token:
        env["GITHUB_TOKEN"] = token
    machine = Machine(env=env)
    opts = {"github_url": server.url, "timeout": 5.0, **settings}
    return machine, Engine(Settings(**opts), machine).run("G8")  # type: ignore[arg-type]


def ev(facts: g8.Facts) -> Result:
    """evaluate() as the engine calls it: on the facts after their JSON round trip."""
    again = g8.Facts.from_dict(json.loads(json.dumps(facts.to_dict())))
    result = g8.evaluate(again, Params())
    assert result.to_dict() == g8.evaluate(facts, Params()).to_dict()
    assert result.headline and len(result.short_line()) <= 120
    if result.status is Status.WARN:
        assert result.short_fix
    return result


def facts_from(body: bytes, playbook: str | None = None, **answer: object) -> g8.Facts:
    """Facts as gather() builds them, from a recorded body (no network)."""
    parsed = g8.parse_issues(body.decode())
    a = {"status": 200, "headers": {}, "token": "not set", "url": "https://api.github.com", **answer}
    return g8.Facts(
        playbook=playbook,
        source="https://api.github.com",
        answer=g8.GitHubAnswer.from_dict(a),
        issues=parsed.issues,
        pull_requests=parsed.pull_requests,
        not_issues=parsed.not_issues,
        parse_error=parsed.error,
        fetched_at=RESET - 37 * 60,
    )


# --------------------------------------------------------------------------- evaluate() on recorded input


def test_recorded_list_drops_pull_requests() -> None:
    parsed = g8.parse_issues(ISSUES.decode())
    assert parsed.error is None
    assert parsed.pull_requests == 2  # #90 and #31 carry a pull_request key
    assert sorted(i.number for i in parsed.issues) == [2, 4, 9, 15, 26, 46, 57, 68, 79]


def test_unsloth_warns_with_title_and_body_matches_newest_first() -> None:
    r = ev(facts_from(ISSUES, "unsloth"))
    assert (r.status, r.codes) == (Status.WARN, ["G8.playbook-issues"])
    assert r.summary == (
        "2 open issues name the 'unsloth' playbook in NVIDIA/dgx-spark-playbooks: "
        "#57 AttributeError: 'Parameter' object has no attribute 'compress_statistics' when running Un…; "
        "#15 Unsolth playbook issues (with PR to correct it)"
    )
    assert r.fix.startswith("read them before following the unsloth playbook verbatim")
    assert r.details[0].endswith(
        "(named in the title) https://github.com/NVIDIA/dgx-spark-playbooks/issues/57"
    )
    assert "(named in the body)" in r.details[1] and "#15" in r.details[1]
    assert r.reading("matching_issues").value == 2
    assert r.reading("open_issues").value == 9
    assert r.reading("pull_requests_dropped").value == 2


def test_one_vllm_issue_is_listed() -> None:
    r = ev(facts_from(ISSUES, "vllm"))
    assert (r.status, r.codes) == (Status.WARN, ["G8.playbook-issues"])
    assert r.summary.startswith(
        "1 open issue names the 'vllm' playbook in NVIDIA/dgx-spark-playbooks: #79 vLLM"
    )
    assert r.fix.startswith("read it before")


def test_a_playbook_no_issue_names_passes() -> None:
    r = ev(facts_from(ISSUES, "nccl"))
    assert (r.status, r.codes) == (Status.PASS, [])
    assert r.summary == "no open issue in NVIDIA/dgx-spark-playbooks names 'nccl' (9 open issues checked)"


def test_no_playbook_is_info_with_count_and_newest_three() -> None:
    r = ev(facts_from(ISSUES))
    assert (r.status, r.codes) == (Status.INFO, ["G8.no-playbook"])
    assert r.summary.startswith("9 open issues in NVIDIA/dgx-spark-playbooks; newest: #79 vLLM 26.02-py3")
    assert "; #68 SGLang: Mismatch" in r.summary and "; #57 AttributeError" in r.summary
    assert "#46" not in r.summary
    assert r.summary.endswith("name your playbook with --spark-playbook")


def test_more_pages_are_said_not_hidden() -> None:
    f = facts_from(ISSUES, "nccl", headers={"link": '<https://api.github.com/x?page=2>; rel="next"'})
    f.more_pages = True
    r = ev(f)
    assert "9+ open issues checked (GitHub has more pages; the newest 100 were checked)" in r.summary


@pytest.mark.parametrize(
    ("name", "text", "hit"),
    [
        ("vllm", "vLLM 26.02-py3: slow", True),
        ("nim", "NIM on Spark - docker", True),
        ("nim", "animation broken", False),
        ("trt-llm", "TensorRT-LLM fails to build", True),
        ("trt-llm", "trtllm-serve crashes", True),
        ("pytorch-fine-tune", "the PyTorch fine tune playbook", True),
        ("unsloth", "unsloth_zoo import error", True),
        ("vllm", "myvllm-fork", False),
        ("nccl", "NCCL v2.28.9-1 build", True),
        ("sglang", "sglang-router", True),
    ],
)
def test_playbook_names_match_word_ish(name: str, text: str, hit: bool) -> None:
    assert bool(g8.playbook_pattern(name).search(text)) is hit


@pytest.mark.parametrize(
    ("given", "normal"),
    [("vLLM", "vllm"), ("nvidia/unsloth/", "unsloth"), ("playbook-nccl", "nccl"), ("trt-llm", "trt-llm")],
)
def test_playbook_name_is_normalized(given: str, normal: str) -> None:
    assert g8.normalize_playbook(given) == normal


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (
            b"<html>Service Unavailable</html>",
            "the answer is not JSON (starts '<html>Service Unavailable</html>')",
        ),
        (b'{"message": "Moved"}', "expected a JSON list of issues, got a dict with message 'Moved'"),
        (b'"just a string"', "expected a JSON list of issues, got a str"),
        (b"[1, 2, {}]", "none of the 3 entries looks like a GitHub issue"),
        (b"", "the answer was empty"),
        (b"[" * 100_000 + b"]" * 100_000, "the answer is not JSON (starts '" + "[" * 60 + "')"),
    ],
    ids=["html", "object", "string", "not-issues", "empty", "deep"],
)
def test_unexpected_json_is_a_skip_with_the_reason(body: bytes, reason: str) -> None:
    r = ev(facts_from(body, "unsloth"))
    assert (r.status, r.codes) == (Status.SKIP, ["G8.github-unavailable"])
    assert r.summary == f"GitHub's answer is not the issue list expected: {reason}"


def test_empty_list_is_info_no_open_issues() -> None:
    r = ev(facts_from(b"[]"))
    assert (r.status, r.summary) == (Status.INFO, "no open issues in NVIDIA/dgx-spark-playbooks")


def test_rate_limit_reset_is_rendered_as_a_time() -> None:
    f = facts_from(
        RATE_LIMITED,
        "vllm",
        status=403,
        headers={"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(RESET)},
    )
    r = ev(f)
    assert (r.status, r.codes) == (Status.SKIP, ["G8.github-unavailable"])
    assert r.summary == (
        "rate-limited by GitHub (HTTP 403) until 2026-07-24 14:05:09 UTC (in 37 min); "
        "set GITHUB_TOKEN for a higher limit"
    )
    assert r.reading("rate_limit_remaining").value == 0


@pytest.mark.parametrize(
    ("retry_after", "until"),
    [
        ("45", "2026-07-24 13:28:54 UTC (in 45 s)"),
        ("Fri, 24 Jul 2026 15:00:00 GMT", "2026-07-24 15:00:00 UTC (in 1.5 h)"),
    ],
)
def test_429_retry_after_seconds_or_date(retry_after: str, until: str) -> None:
    f = facts_from(b"", status=429, headers={"retry-after": retry_after}, token="sent")
    r = ev(f)
    assert r.summary == f"rate-limited by GitHub (HTTP 429) until {until}; even with GITHUB_TOKEN"


def test_offline_flag_skips_before_any_request(server: LocalServer) -> None:
    server.answers[ISSUES_PATH] = Answer(body=ISSUES)
    _, r = run_g8(server, offline=True)
    # issue 11: a CLI user has no --spark-offline; the reason says offline plainly
    assert (r.status, r.summary) == (
        Status.SKIP,
        "offline: GitHub not contacted, playbook issues not checked",
    )
    assert "--spark" not in r.short_line()
    assert server.seen == []


# --------------------------------------------------------------------------- gather() through Machine, real server


def test_recorded_answer_over_https_warns_and_sends_the_token(tls_server: TlsServer) -> None:
    server = tls_server
    server.answers[ISSUES_PATH] = Answer(body=ISSUES, headers={"X-RateLimit-Remaining": "4999"})
    _, r = run_g8(server, playbook="unsloth")
    assert r.codes == ["G8.playbook-issues"], r.line()
    assert r.reading("matching_issues").value == 2
    assert r.reading("rate_limit_remaining").value == 4999
    assert r.reading("github_token").value == "sent"
    (seen,) = server.requests_to()
    assert seen.path == ISSUES_PATH + "?state=open&per_page=100"
    assert seen.headers["authorization"] == f"Bearer {TOKEN}"
    assert TOKEN not in json.dumps(r.to_dict())


def test_one_request_per_run(server: LocalServer) -> None:
    server.answers[ISSUES_PATH] = Answer(body=ISSUES)
    machine, first = run_g8(server, playbook="vllm")
    # a second engine on the same machine (what the CLI's report and the gate do) asks again
    again = Engine(Settings(github_url=server.url, playbook="vllm"), machine).run("G8")
    # even a fresh gather and evaluation (the engine keeps both per run) reuses the one answer
    machine.store._values.pop("result:G8")
    machine.store._values.pop("facts:G8")
    third = Engine(Settings(github_url=server.url), machine).run("G8")
    assert first.codes == again.codes == ["G8.playbook-issues"]
    assert third.codes == ["G8.no-playbook"]
    assert len(server.requests_to()) == 1


def test_github_enterprise_base_path(server: LocalServer) -> None:
    server.answers["/api/v3" + ISSUES_PATH] = Answer(body=ISSUES)
    _, r = run_g8(server, token=None, github_url=server.url + "/api/v3/", playbook="nccl")
    assert (r.status, r.codes) == (Status.PASS, [])
    assert r.reading("github_token").value == "not set"
    assert "authorization" not in server.seen[0].headers


FAULTS = {
    "403-rate-limit": (
        Answer(
            status=403,
            body=RATE_LIMITED,
            headers={"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(RESET)},
        ),
        # the token is set, and withheld: this server is plain http
        "rate-limited by GitHub (HTTP 403) until 2026-07-24 14:05:09 UTC; GITHUB_TOKEN is set but goes only over https",
    ),
    "429": (
        Answer(
            status=429,
            body=b'{"message": "too many"}',
            headers={"Retry-After": "Fri, 24 Jul 2026 15:00:00 GMT"},
        ),
        "rate-limited by GitHub (HTTP 429) until 2026-07-24 15:00:00 UTC; GITHUB_TOKEN is set but goes only over https",
    ),
    "403-forbidden": (
        Answer(status=403, body=b'{"message": "Resource not accessible by personal access token"}'),
        "GitHub answered HTTP 403: Resource not accessible by personal access token; playbook issues not checked",
    ),
    "401": (
        Answer(status=401, body=b'{"message": "Bad credentials"}'),
        "GitHub answered HTTP 401 (Bad credentials) to a request without credentials",
    ),
    "404": (
        Answer(status=404, body=b'{"message": "Not Found"}'),
        "NVIDIA/dgx-spark-playbooks not found at {url} (HTTP 404); check --spark-github-url",
    ),
    "500": (
        Answer(status=500, body=b"oops"),
        "GitHub answered HTTP 500 Internal Server Error; playbook issues not checked",
    ),
    "502-json": (
        Answer(status=502, body=b'{"message": "Server Error"}'),
        "GitHub answered HTTP 502: Server Error; playbook issues not checked",
    ),
    "garbage": (
        Answer(body=b"\x00\xff garbage \x89PNG"),
        "GitHub's answer is not the issue list expected: the answer is not JSON (starts '\\x00\ufffd garbage \ufffdPNG')",
    ),
    "not-a-list": (
        Answer(body=b'{"issues": []}'),
        "GitHub's answer is not the issue list expected: expected a JSON list of issues, got a dict",
    ),
    "50MB-announced": (
        Answer(stream=50 << 20, length=50 << 20),
        "GitHub's answer is not the issue list expected: 127.0.0.1 announced 50.0 MiB, over the 16 MiB cap; not read",
    ),
    "50MB-streamed": (
        Answer(stream=50 << 20),
        "GitHub's answer is not the issue list expected: the answer from 127.0.0.1 passed the 16 MiB cap; stopped reading",
    ),
    "slow": (
        Answer(delay=20, body=ISSUES),
        "GitHub lookup gave up: no complete answer from 127.0.0.1 within 0.8 s (--spark-timeout)",
    ),
    "silent": (
        Answer(silent=True),
        "GitHub lookup gave up: no complete answer from 127.0.0.1 within 0.8 s (--spark-timeout)",
    ),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_faults_skip_with_the_reason_in_bounded_time(server: LocalServer, fault: str) -> None:
    answer, expected = FAULTS[fault]
    server.answers[ISSUES_PATH] = answer
    start = time.monotonic()
    _, r = run_g8(server, playbook="unsloth", timeout=0.8)
    elapsed = time.monotonic() - start
    assert r.status is Status.SKIP and r.code in ("G8.github-unavailable", "G8.offline")
    assert r.summary == expected.format(url=server.url)
    assert TOKEN not in json.dumps(r.to_dict())
    assert elapsed < 5  # the timeout is 0.8 s; the server would hold on for 20-30 s


def test_nothing_listening_is_offline() -> None:
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    machine = Machine(env={"PATH": os.environ.get("PATH", "")})
    r = Engine(Settings(github_url=f"http://127.0.0.1:{port}", playbook="vllm"), machine).run("G8")
    assert (r.status, r.codes, r.summary) == (
        Status.SKIP,
        ["G8.offline"],
        "connection to 127.0.0.1 refused; playbook issues not checked",
    )
    assert r.short_line() == "G8 SKIP: connection to 127.0.0.1 refused: playbook issues not checked"
    assert not r.by_choice


def test_a_name_that_does_not_resolve_says_so_not_offline() -> None:
    """Issue 34 item 4: without --offline a DNS failure read ``SKIP: offline: playbook issues not
    checked``, the words of a chosen --offline; ``.invalid`` never resolves (RFC 2606)."""
    machine = Machine(env={"PATH": os.environ.get("PATH", "")})
    settings = Settings(github_url="https://api.github.invalid", playbook="vllm", timeout=5.0)
    r = Engine(settings, machine).run("G8")
    assert r.codes == ["G8.offline"] and not r.by_choice, r.to_dict()
    assert r.short_line().startswith("G8 SKIP: cannot resolve api.github.invalid: playbook issues not checked")
    assert r.summary.startswith("cannot resolve api.github.invalid (") and "offline" not in r.summary
    fresh = Machine(env={"PATH": os.environ.get("PATH", "")})
    chosen = Engine(Settings(offline=True, playbook="vllm"), fresh).run("G8")
    assert chosen.by_choice and chosen.short_line() == "G8 SKIP: offline: playbook issues not checked"


# --------------------------------------------------------------------------- the token never leaks


def echo_token_answer() -> Answer:
    """A hostile mirror: echoes the Authorization header in the body and a header."""
    return Answer(
        status=403,
        body=b'{"message": "API rate limit exceeded for {auth}"}',
        headers={"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(RESET)},
        echo_auth=True,
    )


@pytest.mark.parametrize("served", ["issues", "echo"])
def test_token_never_appears_in_any_pytest_output(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tls_server: TlsServer, served: str
) -> None:
    server = tls_server
    server.answers[ISSUES_PATH] = Answer(body=ISSUES) if served == "issues" else echo_token_answer()
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    pytester.makeini("[pytest]\nlog_level = DEBUG\n")
    json_report = ["--json-report", "--json-report-file=r.json"] if _has_json_report() else []
    result = pytester.runpytest(
        "--spark-preflight",
        "--spark-only",
        "G8",
        "--spark-github-url",
        server.url,
        "--spark-playbook",
        "unsloth",
        "--spark-report",
        "env-report.json",
        "--junitxml=junit.xml",
        "-o",
        "junit_logging=system-out",
        "-p",
        "no:randomly",
        "-v",
        "-rA",
        *json_report,
    )
    text = "\n".join(result.outlines + result.errlines)
    assert ("G8 WARN: 2 open issues name" if served == "issues" else "G8 SKIP: rate-limited") in text
    assert server.requests_to()[0].headers["authorization"] == f"Bearer {TOKEN}"
    assert TOKEN not in text
    files = ["env-report.json", "junit.xml"] + (["r.json"] if json_report else [])
    for name in files:
        content = (pytester.path / name).read_text()
        assert "G8" in content
        assert TOKEN not in content, name


def test_token_never_appears_in_cli_output(tmp_path: Path, tls_server: TlsServer) -> None:
    server = tls_server
    server.answers[ISSUES_PATH] = echo_token_answer()
    env = dict(os.environ, GITHUB_TOKEN=TOKEN)
    outputs = []
    for extra in ([], ["--json"]):
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest_dgx_spark.cli",
                "--only",
                "G8",
                "-v",
                "--github-url",
                server.url,
                "--report",
                "r.json",
                *extra,
            ],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=60,
        )
        outputs += [proc.stdout, proc.stderr, (tmp_path / "r.json").read_text()]
    assert "G8 SKIP: rate-limited by GitHub (HTTP 403) until 2026-07-24 14:05:09 UTC" in outputs[0]
    assert all(TOKEN not in out for out in outputs)
    assert len(server.requests_to()) == 2  # one per run


def _has_json_report() -> bool:
    try:
        import pytest_jsonreport  # noqa: F401
    except ImportError:
        return False
    return True


def test_one_request_under_xdist(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, server: LocalServer
) -> None:
    pytest.importorskip("xdist")
    server.answers[ISSUES_PATH] = Answer(body=ISSUES)
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    result = pytester.runpytest(
        "-v",
        "--spark-preflight",
        "--spark-only",
        "G8,G10",
        "--spark-github-url",
        server.url,
        "--spark-playbook",
        "vllm",
        "-n",
        "2",
        "-p",
        "no:randomly",
    )
    result.stdout.fnmatch_lines(
        ["G8 WARN: 1 open issue names the 'vllm' playbook in NVIDIA/dgx-spark-playbooks: #79 *"]
    )
    assert len(server.requests_to()) == 1


# --------------------------------------------------------------------------- issue 12, items 7-9


@pytest.mark.parametrize(
    "headers",
    [
        {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "9" * 400},
        {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "99999999999999999999"},
        {"Retry-After": "1" + "0" * 30},
        {"Retry-After": "Fri, 24 Jul 99999 15:00:00 GMT"},
        # siblings: a Retry-After past float's range, negative, or a date long gone
        {"Retry-After": "9" * 400},
        {"Retry-After": "-30"},
        {"Retry-After": "Mon, 01 Jan 0001 00:00:00 GMT"},
        {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "5"},
    ],
    ids=[
        "reset-400-digits",
        "reset-1e20",
        "retry-after-1e30",
        "retry-after-bad-date",
        "retry-after-400-digits",
        "retry-after-negative",
        "retry-after-year-1",
        "reset-1970",
    ],
)
def test_an_out_of_range_reset_is_unknown_not_a_crash(server: LocalServer, headers: dict[str, str]) -> None:
    """Issue 12.7: a 403 with a huge X-RateLimit-Reset crashed G8 (OverflowError)."""
    server.answers[ISSUES_PATH] = Answer(status=403, body=RATE_LIMITED, headers=headers)
    _, r = run_g8(server, playbook="vllm")
    assert r.codes == ["G8.github-unavailable"], r.line()
    assert r.summary.startswith("rate-limited by GitHub (HTTP 403) (reset time unknown); ")
    assert "crashed" not in r.summary


@pytest.mark.parametrize(
    ("location", "why"),
    [
        ("http://evil:REDIRPW@127.0.0.1:{port}/x", "a redirect to a URL with credentials in it"),
        ("ftp://mirror.example/x", "a redirect to a ftp: URL"),
    ],
    ids=["credentials", "ftp"],
)
def test_a_refused_redirect_says_why_not_offline(server: LocalServer, location: str, why: str) -> None:
    """A redirect G8 does not follow is named with its reason (it said "offline:
    cannot resolve 127.0.0.1" for credentials, "HTTP 302 Found" for ftp:)."""
    server.answers[ISSUES_PATH] = Answer(
        status=302, body=b"", headers={"Location": location.format(port=server.port)}
    )
    _, r = run_g8(server, token=None, playbook="vllm")
    assert r.codes == ["G8.github-unavailable"]
    assert r.summary == (
        f"GitHub lookup failed: 127.0.0.1 answered HTTP 302 and the redirect was not followed ({why})"
    )
    assert "REDIRPW" not in json.dumps(r.to_dict())


def test_huge_reset_through_the_cli(tmp_path: Path, server: LocalServer) -> None:
    server.answers[ISSUES_PATH] = Answer(
        status=403, body=RATE_LIMITED, headers={"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "9" * 40}
    )
    proc = _cli(tmp_path, "--github-url", server.url)
    assert proc.returncode == 0, proc.stderr
    assert "G8 SKIP: rate-limited by GitHub (HTTP 403) (reset time unknown)" in proc.stdout


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_TOKEN"}
    return subprocess.run(
        [sys.executable, "-m", "pytest_dgx_spark.cli", "--only", "G8", "-v", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=60,
    )


def test_url_credentials_go_as_basic_auth_to_the_host(
    tmp_path: Path, server: LocalServer, pytester: pytest.Pytester
) -> None:
    """Issue 12.8: http://user:pass@127.0.0.1:PORT was never requested ("cannot resolve 127.0.0.1")."""
    import base64

    server.answers[ISSUES_PATH] = Answer(body=ISSUES)
    url = f"http://mirror:S3cretPW@127.0.0.1:{server.port}"
    expected = "Basic " + base64.b64encode(b"mirror:S3cretPW").decode()
    _, r = run_g8(server, token=None, github_url=url, playbook="vllm")
    assert r.codes == ["G8.playbook-issues"], r.line()
    assert r.reading("url_credentials").value == "sent"
    assert server.requests_to()[-1].headers["authorization"] == expected
    assert "S3cretPW" not in json.dumps(r.to_dict())
    proc = _cli(tmp_path, "--github-url", url, "--playbook", "vllm", "--report", "r.json")
    assert "G8 WARN: 1 open issue names the 'vllm' playbook" in proc.stdout, proc.stdout + proc.stderr
    assert "S3cretPW" not in proc.stdout + proc.stderr + (tmp_path / "r.json").read_text()
    result = pytester.runpytest(
        "--spark-preflight", "--spark-only", "G8", f"--spark-github-url={url}", "--spark-playbook=vllm", "-v"
    )
    text = "\n".join(result.outlines + result.errlines)
    assert "G8 WARN: 1 open issue names the 'vllm' playbook" in text
    assert "S3cretPW" not in text
    assert len(server.requests_to()) == 3
    assert all(s.headers["authorization"] == expected for s in server.requests_to())


def test_url_credentials_are_not_sent_in_clear_to_a_remote_host() -> None:
    from pytest_dgx_spark.probes import http

    answer = http.get("http://u:pw@192.0.2.1:9/x", timeout=0.3)
    assert answer.credentials == "not sent: plain http to a non-local host"
    assert "pw" not in json.dumps(answer.to_dict())


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("ftp://user:SECRETPW@example.com/x", "expected an http(s) URL, got 'ftp://example.com/x'"),
        ("http://user:SECRETPW@127.0.0.1:99999", "Port out of range 0-65535 in 'http://127.0.0.1:99999'"),
        ("http://user:SECRETPW@127.0.0.1:port", "in 'http://127.0.0.1:port'"),
        ("https://user:SECRETPW@", "no host in 'https://'"),
        # the audit after issue 12: no scheme (urlsplit saw no host, so the password stayed),
        # a query token behind a bad port, a token in the query of a good URL
        ("user:SECRETPW@host", "expected an http(s) URL, got 'host'"),
        (
            "http://u:SECRETPW@127.0.0.1:99999/path?token=SECRETQ",
            "Port out of range 0-65535 in 'http://127.0.0.1:99999/path?token=<redacted>'",
        ),
        (
            "https://api.github.com/?access_token=SECRETQ",
            "a base URL takes no query or fragment ('https://api.github.com/?access_token=<redacted>'); "
            "put a token in GITHUB_TOKEN",
        ),
    ],
)
def test_a_bad_github_url_is_one_line_without_its_password(
    tmp_path: Path, pytester: pytest.Pytester, url: str, reason: str
) -> None:
    """Issue 12.9: the usage error echoed the password, and port 99999 was an 'internal error'."""
    proc = _cli(tmp_path, "--github-url", url)
    assert proc.returncode == 2
    assert proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith("spark-preflight: error: --github-url: ") and reason in line
    assert "SECRET" not in line and "internal error" not in line
    result = pytester.runpytest("--spark-preflight", f"--spark-github-url={url}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    text = "\n".join(result.outlines + result.errlines)
    assert "--spark-github-url: " in text and reason in text
    assert "SECRET" not in text
    assert "Traceback" not in text


# --------------------------------------------------------------------------- the audit after issue 12


def test_github_token_is_withheld_over_plain_http_and_every_output_says_so(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, server: LocalServer
) -> None:
    """GITHUB_TOKEN went as a Bearer token to any ``--spark-github-url``, plain
    ``http://127.0.0.1`` included. Now no Authorization header arrives over
    http, G8's details say the token was withheld and why, and the token is
    in no output."""
    from every_output import every_output, leaks

    server.answers[ISSUES_PATH] = Answer(body=ISSUES)
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    outputs = every_output(
        pytester,
        ["--spark-preflight", "--spark-only", "G8", f"--spark-github-url={server.url}", "--spark-playbook=vllm"],
        ["--only", "G8", "--github-url", server.url, "--playbook", "vllm"],
    )
    assert len(server.requests_to()) == 5  # one per run: two of pytest, three of the CLI
    assert all("authorization" not in seen.headers for seen in server.seen)
    note = f"GITHUB_TOKEN was not sent: {server.url} is plain http, and the token goes only over https"
    for where in ("cli -v", "junit.xml", "env-report.json", "cli report", "capture.json"):
        assert note in outputs[where], where
    assert "github_token = not sent: plain http (GITHUB_TOKEN goes only over https)" in outputs["cli -v"]
    assert leaks(outputs, TOKEN) == []


def test_over_https_the_token_goes_and_the_reasons_say_so(tls_server: TlsServer) -> None:
    """The FAULTS above run over plain http, where the token stays home; over
    https it goes, and a rate limit or a 401 names it."""
    for fault, expected in (
        ("403-rate-limit", "rate-limited by GitHub (HTTP 403) until 2026-07-24 14:05:09 UTC; even with GITHUB_TOKEN"),
        ("401", "GitHub rejected GITHUB_TOKEN (HTTP 401: Bad credentials)"),
    ):
        tls_server.answers[ISSUES_PATH] = FAULTS[fault][0]
        _, r = run_g8(tls_server, playbook="vllm")
        assert (r.summary, r.reading("github_token").value) == (expected, "sent")


def test_a_query_in_the_base_url_is_joined_and_never_shown(server: LocalServer) -> None:
    """Settings built in Python skip the option check: the request path was
    ``/?access_token=SECRETQ/repos/...`` and G8's ``source`` reading (hence
    the env report) carried the token. The query now follows the path, and
    only its redacted form is shown."""
    assert g8.issues_url("https://ghe.example/api/v3/?x=1") == (
        "https://ghe.example/api/v3/repos/NVIDIA/dgx-spark-playbooks/issues?x=1&state=open&per_page=100"
    )
    server.answers[ISSUES_PATH] = Answer(body=ISSUES)
    _, r = run_g8(server, token=None, github_url=server.url + "/?access_token=SECRETQ", playbook="nccl")
    assert (r.status, r.codes) == (Status.PASS, []), r.line()
    (seen,) = server.requests_to()
    assert seen.path == ISSUES_PATH + "?access_token=SECRETQ&state=open&per_page=100"
    assert r.reading("source").value == server.url + "/?access_token=<redacted>"
    assert "SECRETQ" not in json.dumps(r.to_dict())


def test_a_secret_quoted_in_an_issue_title_reaches_no_output(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, server: LocalServer
) -> None:
    """The last line of defence: G8 quotes issue titles, and people paste
    their command lines into them. Token-shaped strings, secret flags and the
    value of a secret variable of this environment are redacted in every
    output, while the rest of the title stays."""
    from every_output import every_output, leaks

    monkeypatch.setenv("MY_SERVICE_PASSWORD", "Pl41nW0rdValue")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")  # a setting: "false" stays readable
    title = "vLLM: --api-key SECRET999 hf_AbCdEf0123456789XYZ Pl41nW0rdValue, false alarm?"
    issue = {
        "number": 7,
        "title": title,
        "body": "",
        "created_at": "2026-01-01T00:00:00Z",
        "html_url": "https://github.com/NVIDIA/dgx-spark-playbooks/issues/7?token=SECRETQ",
    }
    server.answers[ISSUES_PATH] = Answer(body=json.dumps([issue]).encode())
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    outputs = every_output(
        pytester,
        ["--spark-preflight", "--spark-only", "G8", f"--spark-github-url={server.url}", "--spark-playbook=vllm"],
        ["--only", "G8", "--github-url", server.url, "--playbook", "vllm"],
    )
    shown = "#7 vLLM: --api-key <redacted> <redacted> <redacted>, false alarm?"
    for where in ("pytest -v", "cli -v", "env-report.json", "cli report"):
        assert shown in outputs[where], where
    assert html.escape(shown, quote=False) in outputs["junit.xml"]
    assert leaks(outputs, "SECRET999", "hf_AbCdEf0123456789XYZ", "Pl41nW0rdValue", "SECRETQ") == []


@pytest.mark.parametrize(
    "message",
    [
        "API rate limit exceeded for 203.0.113.7.",
        "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.",
    ],
)
def test_a_403_that_says_rate_limit_without_the_headers_is_a_rate_limit(server: LocalServer, message: str) -> None:
    """GitHub's secondary limits answer 403 with the words in the body and no
    X-RateLimit-Remaining: 0 or Retry-After. Through the real local server it
    is still a rate limit, with no reset time made up, and it says how to
    raise the limit (no token was set)."""
    server.answers[ISSUES_PATH] = Answer(status=403, body=json.dumps({"message": message}).encode())
    _, r = run_g8(server, token=None)
    assert r.codes == ["G8.github-unavailable"], r.line()
    assert r.summary == "rate-limited by GitHub (HTTP 403); set GITHUB_TOKEN for a higher limit"
    assert r.headline == "rate-limited by GitHub (HTTP 403): playbook issues not checked"
