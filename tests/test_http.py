"""probes/http.py against a real server on 127.0.0.1: the token's route,
the size cap and the deadline, each injected for real. The token goes only
over https, so the tests that watch it arrive use the https twin of the
server (tests/tlsserver.py)."""

from __future__ import annotations

import base64
import json
import socket
import time

import pytest
from localserver import Answer, LocalServer
from tlsserver import Cert, TlsServer, tls_cert_fixture, tls_server_fixture  # noqa: F401 - tls_cert, tls_server

from pytest_dgx_spark.probes import http

TOKEN = "ghp_" + "T0kenForTests" * 3  # looks like a real one; must never come back
PATH = "/api/thing"


@pytest.fixture
def server():
    with LocalServer() as s:
        yield s


def other_loopback_server(cert: Cert) -> LocalServer:
    """A second https server on another loopback *host* (127.0.0.2), or skip."""
    try:
        return TlsServer(cert, "127.0.0.2")
    except OSError as exc:
        pytest.skip(f"cannot bind 127.0.0.2 here: {exc}")


def test_reads_the_body_and_sends_the_token_to_its_own_origin(tls_server: TlsServer) -> None:
    server = tls_server
    server.answers[PATH] = Answer(body=b'[{"number": 1}]', headers={"X-RateLimit-Remaining": "59"})
    answer = http.get(server.url + PATH, token=TOKEN, timeout=5)
    assert answer.ok, answer.error
    assert json.loads(answer.body or "") == [{"number": 1}]
    assert answer.headers["x-ratelimit-remaining"] == "59"
    assert answer.token == "sent"
    (seen,) = server.seen
    assert seen.headers["authorization"] == f"Bearer {TOKEN}"
    assert seen.headers["accept"] == "application/vnd.github+json"
    assert seen.headers["user-agent"].startswith("pytest-dgx-spark/")
    assert TOKEN not in json.dumps(answer.to_dict())


def test_no_token_no_authorization_header(server: LocalServer) -> None:
    server.answers[PATH] = Answer()
    answer = http.get(server.url + PATH, token=None, timeout=5)
    assert answer.ok and answer.token == "not set"
    assert "authorization" not in server.seen[0].headers


def test_token_is_not_forwarded_on_a_redirect_to_another_host(tls_server: TlsServer, tls_cert: Cert) -> None:
    server = tls_server
    with other_loopback_server(tls_cert) as elsewhere:
        elsewhere.answers[PATH] = Answer(body=b"[]")
        server.answers["/moved"] = Answer(status=302, body=b"", headers={"Location": elsewhere.url + PATH})
        answer = http.get(server.url + "/moved", token=TOKEN, timeout=5)
        assert answer.ok, answer.error
        assert answer.redirects == [elsewhere.url + PATH]
        assert server.seen[0].headers["authorization"] == f"Bearer {TOKEN}"
        assert "authorization" not in elsewhere.seen[0].headers


def test_token_follows_a_redirect_on_the_same_origin(tls_server: TlsServer) -> None:
    # GitHub answers 301 for a renamed repository, on the same host.
    server = tls_server
    server.answers["/old"] = Answer(status=301, body=b"", headers={"Location": PATH})
    server.answers[PATH] = Answer(body=b"[]")
    answer = http.get(server.url + "/old", token=TOKEN, timeout=5)
    assert answer.ok
    assert [s.headers.get("authorization") for s in server.seen] == [f"Bearer {TOKEN}"] * 2


def test_redirect_to_a_non_http_scheme_is_refused(server: LocalServer) -> None:
    server.answers[PATH] = Answer(status=302, body=b"", headers={"Location": "file:///etc/passwd"})
    answer = http.get(server.url + PATH, token=TOKEN, timeout=5)
    assert not answer.ok
    assert answer.status == 302
    assert "redirect was not followed" in (answer.error or "")
    assert "file:" in (answer.error or "")


def test_a_redirect_to_a_url_with_credentials_is_refused_in_one_line(server: LocalServer) -> None:
    """Issue 12.8's sibling: a server's ``Location: http://user:pass@host/``
    made urllib look up ``user:pass@127.0.0.1`` as a host name, so G8 said
    "offline: cannot resolve 127.0.0.1". Credentials a server hands out are
    not sent anywhere: the redirect is refused, saying why, without them."""
    server.answers[PATH] = Answer(
        status=302, body=b"", headers={"Location": f"http://evil:REDIRPW@127.0.0.1:{server.port}/x"}
    )
    server.answers["/x"] = Answer(body=b"[]")
    answer = http.get(server.url + PATH, timeout=5)
    assert not answer.ok and not answer.offline
    assert answer.error == (
        "127.0.0.1 answered HTTP 302 and the redirect was not followed "
        "(a redirect to a URL with credentials in it)"
    )
    assert [s.path for s in server.seen] == [PATH]


def test_redirect_loop_ends_with_a_reason(server: LocalServer) -> None:
    server.answers[PATH] = Answer(status=302, body=b"", headers={"Location": PATH + "?again"})
    answer = http.get(server.url + PATH, timeout=5)
    assert not answer.ok
    assert "redirect" in (answer.error or "")


def test_plain_http_to_a_non_local_host_does_not_carry_the_token() -> None:
    # .invalid never resolves (RFC 2606): the request fails, but the decision is made first.
    answer = http.get("http://spark-preflight.invalid/x", token=TOKEN, timeout=2)
    assert answer.token == http.TOKEN_OVER_HTTP
    assert answer.offline
    assert "cannot resolve spark-preflight.invalid" in (answer.error or "")


def test_connection_refused_is_offline() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    answer = http.get(f"http://127.0.0.1:{port}/x", timeout=2)
    assert answer.offline
    assert answer.error == "connection to 127.0.0.1 refused"


def test_announced_body_over_the_cap_is_not_read(server: LocalServer) -> None:
    server.answers[PATH] = Answer(stream=50 << 20, length=50 << 20)
    answer = http.get(server.url + PATH, timeout=5)
    assert answer.too_large and answer.body is None and answer.body_bytes == 0
    assert answer.error == "127.0.0.1 announced 50.0 MiB, over the 16 MiB cap; not read"


@pytest.mark.parametrize("digits", [40, 4000, 5000], ids=["40-digits", "4000-digits", "5000-digits"])
def test_an_absurd_content_length_is_over_the_cap_not_a_crash(
    server: LocalServer, monkeypatch: pytest.MonkeyPatch, digits: int
) -> None:
    """A sibling of issue 12.7 (header values are data): a Content-Length of
    4000 digits crashed the request thread (OverflowError: float division), so
    a traceback went to stderr and G8 said "no answer"; 5000 digits pass
    Python's int() limit (ValueError). Either is a body over the cap."""
    died: list[BaseException | None] = []
    monkeypatch.setattr("threading.excepthook", lambda args: died.append(args.exc_value))
    server.answers[PATH] = Answer(stream=1 << 20, headers={"Content-Length": "9" * digits})
    answer = http.get(server.url + PATH, timeout=5)
    assert died == []
    assert answer.too_large and answer.body is None and answer.status == 200
    assert answer.error == (
        f"127.0.0.1 announced more than 1 TB (a Content-Length of {digits} digits), over the 16 MiB cap; not read"
    )


def test_unannounced_body_stops_at_the_cap(server: LocalServer) -> None:
    server.answers[PATH] = Answer(stream=50 << 20)  # close-delimited, no Content-Length
    answer = http.get(server.url + PATH, timeout=10, max_bytes=4 << 20)
    assert answer.too_large and answer.body is None
    assert answer.body_bytes == 4 << 20
    assert "passed the 4 MiB cap" in (answer.error or "")


@pytest.mark.parametrize(
    "behaviour",
    [Answer(delay=10), Answer(silent=True), Answer(body=b"[" + b" " * 200 + b"]", trickle=0.2)],
    ids=["slow", "silent", "trickle"],
)
def test_the_whole_request_ends_at_the_deadline(server: LocalServer, behaviour: Answer) -> None:
    # "trickle" sends a byte every 0.2 s: each read is quick, so only a deadline
    # on the whole request (not urllib's per-read timeout) stops it.
    server.answers[PATH] = behaviour
    start = time.monotonic()
    answer = http.get(server.url + PATH, token=TOKEN, timeout=0.6)
    elapsed = time.monotonic() - start
    assert answer.timed_out and not answer.ok
    assert answer.error == "no complete answer from 127.0.0.1 within 0.6 s"
    assert elapsed < 3  # bounded: the deadline plus thread teardown, not the server's 10-40 s


def test_an_echoed_token_is_scrubbed(tls_server: TlsServer) -> None:
    server = tls_server
    server.answers[PATH] = Answer(status=401, body=b'{"message": "Bad credentials: {auth}"}', echo_auth=True)
    answer = http.get(server.url + PATH, token=TOKEN, timeout=5)
    assert answer.status == 401
    assert TOKEN not in json.dumps(answer.to_dict())
    assert "Bearer [GITHUB_TOKEN]" in (answer.body or "")


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://user:secret@ghe.example/api/v3", "https://ghe.example/api/v3"),
        ("https://ghe.example:8443/api/v3", "https://ghe.example:8443/api/v3"),
        ("http://tok@[::1]:99/x", "http://[::1]:99/x"),
        # malformed URLs are redacted too (issue 12.9: the usage error quoted them)
        ("http://u:SECRETPW@127.0.0.1:99999/x", "http://127.0.0.1:99999/x"),
        ("ftp://u:SECRETPW@host/x", "ftp://host/x"),
        ("http://u:p@ss:SECRETPW@host:port", "http://host:port"),
        # without a scheme urlsplit sees no host, and the userinfo stayed (the audit after issue 12)
        ("user:SECRETPW@host", "host"),
        ("user:SECRETPW@host:99999/x", "host:99999/x"),
        # query and fragment values: the base URL's query is no place for a token, but one is hidden
        (
            "http://u:SECRETPW@host:99999/path?token=SECRETQ&x&y=2#access_token=SECRETF",
            "http://host:99999/path?token=<redacted>&<redacted>&y=<redacted>#<redacted>",
        ),
        ("https://ghe.example/api/v3?access_token=SECRETQ", "https://ghe.example/api/v3?access_token=<redacted>"),
        ("http://[::1", "http://[::1"),
    ],
)
def test_redact_url_drops_credentials(url: str, shown: str) -> None:
    assert http.redact_url(url) == shown


def test_url_credentials_become_basic_auth_to_their_own_host(server: LocalServer) -> None:
    """Issue 12.8: urllib took ``user:pass@127.0.0.1`` for a host name; a token in the
    environment gives way to the URL's own credentials, and neither leaks into the answer."""
    server.answers["/x"] = Answer(body=b'{"echo": "{auth}"}', echo_auth=True)
    url = f"http://me%40corp:p%3Ass@127.0.0.1:{server.port}/x"
    answer = http.get(url, token="ghp_TokenNotForThisHost", timeout=5)
    assert answer.ok, answer.error
    assert server.seen[-1].headers["authorization"] == "Basic " + base64.b64encode(b"me@corp:p:ss").decode()
    assert (answer.credentials, answer.token) == ("sent", "not sent: the URL's own credentials are used")
    assert "p:ss" not in json.dumps(answer.to_dict()) and "ghp_" not in json.dumps(answer.to_dict())
    assert answer.url == f"http://127.0.0.1:{server.port}/x"


def test_proxies_come_from_the_machine_env_and_skip_loopback() -> None:
    env = {"HTTPS_PROXY": "http://proxy:3128", "no_proxy": "internal.example"}
    assert http._proxies(env, "api.github.com") == {"https": "http://proxy:3128"}
    assert http._proxies(env, "internal.example") == {}
    assert http._proxies(env, "127.0.0.1") == {}
    assert http._proxies(env, "ghe.internal.example") == {}  # a domain suffix, as curl reads it
    assert http._proxies({"https_proxy": "http://p:1", "NO_PROXY": "*"}, "api.github.com") == {}


def test_the_token_goes_only_over_https(server: LocalServer, tls_server: TlsServer) -> None:
    """GITHUB_TOKEN went as a Bearer token to any ``--spark-github-url``, plain
    ``http://127.0.0.1`` included: in clear text on the wire, readable by any
    local process listening there. Over http no Authorization header arrives
    (the answer says why); over https it does."""
    for s in (server, tls_server):
        s.answers[PATH] = Answer(body=b"[]")
    plain = http.get(server.url + PATH, token=TOKEN, timeout=5)
    assert plain.ok, plain.error
    assert plain.token == http.TOKEN_OVER_HTTP == "not sent: plain http (GITHUB_TOKEN goes only over https)"
    assert "authorization" not in server.seen[0].headers
    secure = http.get(tls_server.url + PATH, token=TOKEN, timeout=5)
    assert secure.ok and secure.token == "sent", secure.error
    assert tls_server.seen[0].headers["authorization"] == f"Bearer {TOKEN}"


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("user:SECRETPW@host", "expected an http(s) URL, got 'host'"),
        ("http://u:SECRETPW@host:99999/path?token=SECRETQ", "Port out of range 0-65535 in 'http://host:99999/path?token=<redacted>'"),
        (
            "https://api.github.com/?access_token=SECRETQ",
            "a base URL takes no query or fragment ('https://api.github.com/?access_token=<redacted>'); "
            "put a token in GITHUB_TOKEN",
        ),
        ("https://api.github.com/#SECRETF", "a base URL takes no query or fragment ('https://api.github.com/#<redacted>'); put a token in GITHUB_TOKEN"),
        ("https://api.github.com/?", None),
        ("https://ghe.example/api/v3/", None),
    ],
)
def test_check_url_never_quotes_a_secret(url: str, why: str | None) -> None:
    assert http.check_url(url) == why
