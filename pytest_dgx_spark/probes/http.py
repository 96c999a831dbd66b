"""One bounded HTTP GET through the standard library (G8's GitHub lookup).

``GITHUB_TOKEN`` goes only over https, as an *unredirected* header re-added only on a redirect
to the same origin; every string leaving here has it scrubbed (a server may echo it), and a URL
is shown only through :func:`redact_url`. ``urlopen(timeout=)`` bounds each socket operation,
not the request (a trickling server, a hanging DNS lookup), so the request runs in a daemon
thread whose sockets are shut down at the deadline. The body is read up to a cap; a
``Content-Length`` over it is refused unread.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import asdict, field
from typing import Any
from urllib.parse import urlsplit

from pytest_dgx_spark import __version__
from pytest_dgx_spark.datadef import define
from pytest_dgx_spark.probes.urls import REDACTED, check_url, credentials, is_loopback, origin, redact_url

__all__ = [
    "REDACTED", "TOKEN_OVER_HTTP", "HttpAnswer", "check_url", "credentials", "describe_oserror", "get",
    "is_loopback", "origin", "redact_url", "scrub",
]  # fmt: skip

MIB = 1 << 20
MAX_BODY = 16 * MIB  # GitHub's 100 issues with 64 KiB bodies stay well under it
MAX_REDIRECTS = 5
CHUNK = 64 * 1024
#: response headers worth keeping (rate limits, pagination, type)
KEEP_HEADERS = (
    "content-type", "content-length", "link", "retry-after", "x-ratelimit-limit", "x-ratelimit-remaining",
    "x-ratelimit-reset", "x-ratelimit-resource", "x-github-request-id",
)
HEADERS = {
    "Accept": "application/vnd.github+json", "Accept-Encoding": "identity",
    "User-Agent": f"pytest-dgx-spark/{__version__}", "X-GitHub-Api-Version": "2022-11-28",
}
SCRUBBED = "[GITHUB_TOKEN]"
#: the answer's ``token`` when GITHUB_TOKEN was set but the URL is plain http
TOKEN_OVER_HTTP = "not sent: plain http (GITHUB_TOKEN goes only over https)"
#: a Content-Length longer than this (1 TB and up) is said in digits, never turned into a number
_LENGTH_DIGITS = 12


@define
class HttpAnswer:
    """What one GET produced. ``error`` is one line when there is no usable answer."""

    url: str
    status: int | None = None
    reason: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    body: str | None = None
    body_bytes: int = 0
    error: str | None = None
    offline: bool = False  # the network could not be reached at all (DNS, refused, unreachable)
    timed_out: bool = False
    too_large: bool = False
    token: str = "not set"  # "sent" | "not set" | "not sent: <why>"
    credentials: str = "none"  # basic auth from the URL: "sent" | "none" | "not sent: <why>"
    redirects: list[str] = field(default_factory=list)
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None and self.status is not None and 200 <= self.status < 300

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def scrub(text: str, secret: str | None) -> str:
    """Remove ``secret`` from ``text`` (a server may echo the header back)."""
    return text.replace(secret, SCRUBBED) if secret and text else text


def _proxies(env: Mapping[str, str], host: str) -> dict[str, str]:
    """Proxies from the machine's environment (not this process's), never for loopback;
    ``no_proxy`` as curl reads it (``*``, exact hosts, domain suffixes)."""
    if is_loopback(host):
        return {}
    proxies = {k.lower()[: -len("_proxy")]: v for k, v in env.items() if k.lower().endswith("_proxy") and v}
    for entry in proxies.pop("no", "").replace(" ", ",").split(","):
        entry = entry.strip().lower().lstrip(".")
        if entry == "*" or (entry and (host == entry or host.endswith("." + entry))):
            return {}
    return {k: v for k, v in proxies.items() if k in ("http", "https")}


def _first_line(text: str, limit: int = 200) -> str:
    return next((line.strip()[:limit] for line in text.splitlines() if line.strip()), "")


def describe_oserror(exc: BaseException, host: str) -> tuple[str, bool]:
    """``(one line, offline?)`` for a network failure, without the URL's secrets."""
    reason: Any = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, socket.gaierror):
        return f"cannot resolve {host} ({reason.strerror or reason})", True
    if isinstance(reason, ConnectionRefusedError):
        return f"connection to {host} refused", True
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return f"{host} did not answer in time", False
    if isinstance(reason, ssl.SSLError):
        return f"TLS error talking to {host}: {reason.reason or reason}", False
    if isinstance(reason, OSError) and reason.errno in (101, 113, 110, 99):  # unreachable, timed out
        return f"{host} unreachable ({reason.strerror})", True
    if isinstance(reason, OSError):
        return f"network error talking to {host}: {reason.strerror or reason}", False
    return f"network error talking to {host}: {_first_line(str(reason)) or type(reason).__name__}", False


class _Tracker:
    """Sockets opened for one request, so a deadline can shut them down (waking a blocked ``recv``)."""

    def __init__(self) -> None:
        self._socks: list[Any] = []
        self._lock = threading.Lock()
        self.aborted = False

    def add(self, sock: Any) -> None:
        with self._lock:
            if self.aborted:
                _shutdown(sock)
            self._socks.append(sock)

    def abort(self) -> None:
        with self._lock:
            self.aborted = True
            socks = list(self._socks)
        for sock in socks:
            _shutdown(sock)

    def handlers(self, context: ssl.SSLContext) -> list[urllib.request.BaseHandler]:
        """urllib's http and https handlers, with connections that register their sockets here."""
        tracker = self

        class Http(http.client.HTTPConnection):
            def connect(self) -> None:
                super().connect()
                tracker.add(self.sock)

        class Https(http.client.HTTPSConnection):
            def connect(self) -> None:
                super().connect()
                tracker.add(self.sock)

        class HttpHandler(urllib.request.HTTPHandler):
            def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
                return self.do_open(Http, req)

        class HttpsHandler(urllib.request.HTTPSHandler):
            def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
                return self.do_open(Https, req, context=context)

        return [HttpHandler(), HttpsHandler(context=context)]


def _shutdown(sock: Any) -> None:
    with contextlib.suppress(OSError, ValueError, AttributeError):
        sock.shutdown(socket.SHUT_RDWR)


class _Redirects(urllib.request.HTTPRedirectHandler):
    """Follow http(s) redirects only; re-add the token only on the same origin."""

    max_redirections = MAX_REDIRECTS

    def __init__(self, token_header: tuple[str, str] | None, token_origin: tuple[str, str, int | None]):
        super().__init__()
        self.token_header, self.token_origin = token_header, token_origin
        self.hops: list[str] = []
        self.refused: str | None = None

    def redirect_request(
        self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any, newurl: str
    ) -> urllib.request.Request | None:
        parts = urlsplit(newurl)
        if parts.scheme not in ("http", "https"):
            self.refused = f"a redirect to a {parts.scheme}: URL"
            return None  # urllib then raises HTTPError(code): an answer we do not use
        if "@" in parts.netloc:  # credentials a server hands out are sent nowhere
            self.refused = "a redirect to a URL with credentials in it"
            return None
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is None:
            return None
        self.hops.append(redact_url(newurl))
        if self.token_header and origin(newurl) == self.token_origin:
            new.add_unredirected_header(*self.token_header)
        return new


def get(
    url: str, *, token: str | None = None, timeout: float = 10.0, max_bytes: int = MAX_BODY,
    env: Mapping[str, str] | None = None,
) -> HttpAnswer:
    """GET ``url`` within ``timeout`` seconds in all; never raises. ``token`` goes as a Bearer
    header to ``url``'s own origin over https only; ``user:pass@`` goes as basic auth instead,
    over https or to a loopback host."""
    shown = redact_url(url)
    start = time.monotonic()
    try:
        url, basic = credentials(url)
        scheme, host, port = origin(url)
    except ValueError as exc:
        return HttpAnswer(url=shown, error=f"bad URL: {exc}")
    if scheme not in ("http", "https") or not host:
        return HttpAnswer(url=shown, error=f"not an http(s) URL: {shown}")
    answer, tracker, box = HttpAnswer(url=shown), _Tracker(), dict[str, HttpAnswer]()
    https, local = scheme == "https", is_loopback(host)
    token_header, secrets = _authorization(answer, token, basic, https=https, local=local)
    redirects = _Redirects(token_header, (scheme, host, port))
    request = urllib.request.Request(url, headers=HEADERS, method="GET")
    if token_header:
        request.add_unredirected_header(*token_header)
    base = HttpAnswer(url=shown, token=answer.token, credentials=answer.credentials)
    args = (_proxies(env or {}, host), request, redirects, host, timeout, max_bytes, tracker, base, box)
    worker = threading.Thread(target=_fetch, args=args, name="spark-preflight-http", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        tracker.abort()
        worker.join(0.5)
        answer.timed_out, answer.error = True, f"no complete answer from {host} within {timeout:g} s"
    else:
        answer = box.get("answer", answer)
        if answer.error is None and answer.status is None:
            answer.error = f"no answer from {host}"
    answer.duration_s = round(time.monotonic() - start, 4)
    for secret in secrets:
        _scrub_answer(answer, secret)
    return answer


def _scrub_answer(answer: HttpAnswer, secret: str) -> None:
    """``secret`` out of every string of ``answer`` a server wrote (it may echo the header back)."""
    answer.error = scrub(answer.error, secret) if answer.error else answer.error
    answer.reason = scrub(answer.reason, secret)
    answer.body = scrub(answer.body, secret) if answer.body is not None else None
    answer.headers = {k: scrub(v, secret) for k, v in answer.headers.items()}


def _authorization(
    answer: HttpAnswer, token: str | None, basic: tuple[str, str] | None, *, https: bool, local: bool
) -> tuple[tuple[str, str] | None, list[str]]:
    """The one ``Authorization`` header (or None) and the secrets to scrub. The URL's own
    credentials win over ``GITHUB_TOKEN`` and go over https or to a loopback host; the token
    (from the environment, not the URL typed) goes over https only: a plain-http "mirror" on
    127.0.0.1 is whatever local process holds that port."""
    secrets = [s for s in (token, *(basic or ())) if s]
    if basic is not None:
        raw = base64.b64encode(f"{basic[0]}:{basic[1]}".encode()).decode("ascii")
        secrets.append(raw)
        if token:
            answer.token = "not sent: the URL's own credentials are used"
        if not (https or local):
            answer.credentials = "not sent: plain http to a non-local host"
            return None, secrets
        answer.credentials = "sent"
        return ("Authorization", f"Basic {raw}"), secrets
    if not token:
        return None, secrets
    if not https:
        answer.token = TOKEN_OVER_HTTP
        return None, secrets
    answer.token = "sent"
    return ("Authorization", f"Bearer {token}"), secrets


def _fetch(
    proxies: dict[str, str], request: urllib.request.Request, redirects: _Redirects, host: str,
    timeout: float, max_bytes: int, tracker: _Tracker, answer: HttpAnswer, box: dict[str, HttpAnswer],
) -> None:
    """The request, in the worker thread; its answer lands in ``box``."""
    resp: Any = None
    try:
        handlers = tracker.handlers(ssl.create_default_context())
        opener = urllib.request.build_opener(urllib.request.ProxyHandler(proxies), *handlers, redirects)
        try:
            # each socket operation may take a little longer than the whole request: get()'s
            # deadline ends it first and says so, not a racing socket timeout
            resp = opener.open(request, timeout=timeout + 1.0)
        except urllib.error.HTTPError as err:
            resp = err  # 4xx/5xx: still an answer, with headers and a body
        _read_answer(answer, resp, redirects, host, max_bytes, tracker)
    except Exception as exc:  # a server's answer must never end this thread with a traceback
        if isinstance(exc, urllib.error.URLError) or (isinstance(exc, OSError) and not tracker.aborted):
            answer.error, answer.offline = describe_oserror(exc, host)
        elif tracker.aborted and isinstance(exc, (OSError, http.client.HTTPException, ValueError)):
            answer.error, answer.timed_out = f"no complete answer from {host} within {timeout:g} s", True
        else:
            answer.error = f"bad answer from {host}: {type(exc).__name__}: {_first_line(str(exc))}"
    finally:
        if resp is not None:
            with contextlib.suppress(Exception):
                resp.close()
    box["answer"] = answer


def _read_answer(
    answer: HttpAnswer, resp: Any, redirects: _Redirects, host: str, max_bytes: int, tracker: _Tracker
) -> None:
    """Fill ``answer`` from an opened response (a 4xx/5xx too): status, kept headers, and the
    body unless it is a refused redirect or over the cap."""
    length = _status_line(answer, resp)
    answer.redirects = list(redirects.hops)
    if answer.status is not None and 300 <= answer.status < 400:
        answer.error = _not_followed(answer, redirects, host)
    elif length.isdigit() and (len(length) > _LENGTH_DIGITS or int(length) > max_bytes):
        answer.too_large = True
        answer.error = f"{host} announced {_size(length)}, over the {max_bytes / MIB:g} MiB cap; not read"
    else:
        raw, too_large = _read_capped(resp, max_bytes, tracker)
        answer.body_bytes = len(raw)
        if too_large:
            answer.too_large = True
            answer.error = f"the answer from {host} passed the {max_bytes / MIB:g} MiB cap; stopped reading"
        else:
            answer.body = raw.decode("utf-8", errors="replace")


def _status_line(answer: HttpAnswer, resp: Any) -> str:
    """``answer``'s status, reason and kept headers from a response; its Content-Length as sent."""
    raw_headers = getattr(resp, "headers", None)
    answer.status = int(getattr(resp, "status", None) or getattr(resp, "code", 0) or 0) or None
    answer.reason = str(getattr(resp, "reason", "") or "")[:200]
    if raw_headers is None:
        return ""
    answer.headers = {n: str(v)[:500] for n in KEEP_HEADERS if (v := raw_headers.get(n)) is not None}
    return str(raw_headers.get("content-length", "")).strip()


def _not_followed(answer: HttpAnswer, redirects: _Redirects, host: str) -> str:
    """Why a 3xx answer is the last one: a redirect refused here or by urllib, or too many."""
    why = redirects.refused or f"more than {MAX_REDIRECTS} redirects, or no Location"
    if "not allowed" in answer.reason:  # urllib's own refusal (file:, data: ...)
        why = answer.reason
    return f"{host} answered HTTP {answer.status} and the redirect was not followed ({why})"


def _size(length: str) -> str:
    """An announced Content-Length as said. A header is data: thousands of digits pass int()'s
    limit, so a long one is over by its length and never turned into a number."""
    if len(length) > _LENGTH_DIGITS:
        return f"more than 1 TB (a Content-Length of {len(length)} digits)"
    return f"{int(length) / MIB:.1f} MiB"


def _read_capped(resp: Any, max_bytes: int, tracker: _Tracker) -> tuple[bytes, bool]:
    """At most ``max_bytes`` of the body (one chunk more to notice more); ``(data, too_large)``."""
    chunks: list[bytes] = []
    total = 0
    read = getattr(resp, "read1", None) or resp.read
    while not tracker.aborted and total <= max_bytes and (chunk := read(CHUNK)):
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)[:max_bytes], total > max_bytes
