"""One bounded HTTP GET through the standard library (G8's GitHub lookup).

Why not ``requests``: one GET a run does not justify a dependency, and
``urllib`` lets us control the three things that matter here:

* **the secret.** ``GITHUB_TOKEN`` goes out as an *unredirected* header, so
  urllib never copies it onto a redirect; our redirect handler adds it back
  only when the redirect stays on the same scheme, host and port. It goes
  only over https: over plain ``http://`` (a loopback host too: any local
  process may listen there) it stays home, and the answer says so. It never
  enters an answer, an error text or a log: every string leaving this module
  has the token scrubbed, even one a server echoed back. A URL is shown only
  through :func:`redact_url` (no userinfo, no query or fragment values).
* **time.** ``urlopen(timeout=)`` bounds each socket operation, not the
  request: a server that trickles one byte a second, or a DNS lookup that
  hangs, would outlive it. The request runs in a daemon thread; at the
  deadline the caller stops waiting and the sockets are shut down, which
  wakes a blocked ``recv``.
* **size.** The body is read in chunks up to a cap; a ``Content-Length``
  over the cap is refused before a byte of it is read.

The answer is a plain dict (:class:`HttpAnswer`), so the machine's store can
share it between xdist workers.
"""

from __future__ import annotations

import base64
import http.client
import ipaddress
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from pytest_dgx_spark import __version__

#: the most of a body we read; GitHub's 100 issues with 64 KiB bodies stay well under it
MIB = 1 << 20
MAX_BODY = 16 * MIB
MAX_REDIRECTS = 5
CHUNK = 64 * 1024
#: response headers worth keeping (rate limits, pagination, type)
KEEP_HEADERS = (
    "content-type",
    "content-length",
    "link",
    "retry-after",
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
    "x-ratelimit-resource",
    "x-github-request-id",
)
SCRUBBED = "[GITHUB_TOKEN]"
REDACTED = "<redacted>"
#: the answer's ``token`` when GITHUB_TOKEN was set but the URL is plain http
TOKEN_OVER_HTTP = "not sent: plain http (GITHUB_TOKEN goes only over https)"


@dataclass
class HttpAnswer:
    """What one GET produced. ``error`` is one line when there is no usable answer."""

    url: str
    status: int | None = None
    reason: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    body: str | None = None
    body_bytes: int = 0
    error: str | None = None
    #: the network could not be reached at all (DNS, refused, unreachable)
    offline: bool = False
    timed_out: bool = False
    too_large: bool = False
    token: str = "not set"  # "sent" | "not set" | "not sent: <why>"
    #: basic-auth credentials from the URL: "sent" | "none" | "not sent: <why>"
    credentials: str = "none"
    redirects: list[str] = field(default_factory=list)
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None and self.status is not None and 200 <= self.status < 300

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HttpAnswer:
        return cls(**dict(data))


# --------------------------------------------------------------------------- helpers


def _split_netloc(netloc: str) -> tuple[str, str]:
    """``(userinfo, host[:port])`` of a netloc, without validating the port."""
    userinfo, at, hostport = netloc.rpartition("@")
    return (userinfo if at else ""), hostport


def redact_url(url: str) -> str:
    """A URL as it may be shown: no ``user:password@``, no query or fragment values.

    Works on any text, however malformed (a port of 99999, a bad scheme, no
    scheme at all: ``user:pw@host``, where :func:`urlsplit` sees no host and
    would keep the password): a URL is redacted before it is validated, so
    an error message that quotes it never carries a secret. Query values
    (``?access_token=…``) and the fragment are secrets as often as not.
    """
    text = str(url)
    scheme, sep, rest = text.partition("://")
    head = scheme + sep if sep else ""
    if not sep:
        rest = text
    cut = min([i for i in (rest.find(c) for c in "/?#") if i >= 0] or [len(rest)])
    hostport = rest[:cut].rpartition("@")[2]
    path, hash_, fragment = rest[cut:].partition("#")
    path, question, query = path.partition("?")
    if question:
        pairs = [p.partition("=") for p in query.split("&")]
        query = "&".join(f"{k}={REDACTED}" if eq else (REDACTED if k else "") for k, eq, _ in pairs)
    return f"{head}{hostport}{path}{question}{query}{hash_}{REDACTED if fragment else ''}"


def credentials(url: str) -> tuple[str, tuple[str, str] | None]:
    """``(url without user:password@, (user, password) or None)``.

    urllib would take ``user:pass@127.0.0.1`` for a host name ("cannot
    resolve"); the credentials go out as HTTP basic auth instead (see
    :func:`get`)."""
    parts = urlsplit(url)
    userinfo, hostport = _split_netloc(parts.netloc)
    if not userinfo:
        return url, None
    user, _, password = userinfo.partition(":")
    bare = urlunsplit((parts.scheme, hostport, parts.path, parts.query, parts.fragment))
    return bare, (unquote(user), unquote(password))


def check_url(text: str) -> str | None:
    """Why ``text`` is not a usable http(s) base URL (None: it is).

    Parses the port here, so 99999 is a reason and not a crash later; the
    reason quotes the URL only through :func:`redact_url`."""
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        return f"{exc} in {redact_url(text)!r}"
    if parts.scheme not in ("http", "https"):
        return f"expected an http(s) URL, got {redact_url(text)!r}"
    if not parts.hostname:
        return f"no host in {redact_url(text)!r}"
    if port == 0:
        return f"port 0 in {redact_url(text)!r}"
    if parts.query or parts.fragment:
        # a query would have to be kept through the path join and into every
        # request line, proxy log and redirect; GitHub took no token there since 2021
        return f"a base URL takes no query or fragment ({redact_url(text)!r}); put a token in GITHUB_TOKEN"
    return None


def origin(url: str) -> tuple[str, str, int | None]:
    """``(scheme, host, port)`` with the scheme's default port filled in."""
    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, (parts.hostname or "").lower(), port


def is_loopback(host: str) -> bool:
    if host in ("localhost", "localhost.localdomain") or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def scrub(text: str, secret: str | None) -> str:
    """Remove ``secret`` from ``text`` (a server may echo the header back)."""
    if secret and text:
        return text.replace(secret, SCRUBBED)
    return text


def _proxies(env: Mapping[str, str], host: str) -> dict[str, str]:
    """Proxies from the machine's environment (not this process's), never for loopback."""
    if is_loopback(host):
        return {}
    proxies: dict[str, str] = {}
    for key, value in env.items():
        low = key.lower()
        if low.endswith("_proxy") and value:
            proxies[low[: -len("_proxy")]] = value
    no_proxy = proxies.pop("no", None)
    if no_proxy and _bypassed(host, no_proxy):
        return {}
    return {k: v for k, v in proxies.items() if k in ("http", "https")}


def _bypassed(host: str, no_proxy: str) -> bool:
    """``no_proxy`` as curl reads it: ``*``, exact hosts and domain suffixes."""
    for entry in no_proxy.replace(" ", ",").split(","):
        entry = entry.strip().lower().lstrip(".")
        if entry == "*" or (entry and (host == entry or host.endswith("." + entry))):
            return True
    return False


def _first_line(text: str, limit: int = 200) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:limit]
    return ""


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


# --------------------------------------------------------------------------- urllib plumbing


class _Tracker:
    """Sockets opened for one request, so a deadline can shut them down."""

    def __init__(self) -> None:
        self._socks: list[socket.socket] = []
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


def _shutdown(sock: Any) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except (OSError, ValueError, AttributeError):
        pass


def _tracked(base: type[http.client.HTTPConnection], tracker: _Tracker) -> type[http.client.HTTPConnection]:
    class Tracked(base):  # type: ignore[valid-type, misc]
        def connect(self) -> None:
            super().connect()
            tracker.add(self.sock)

    return Tracked


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, tracker: _Tracker) -> None:
        super().__init__()
        self._conn = _tracked(http.client.HTTPConnection, tracker)

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(self._conn, req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, tracker: _Tracker, context: ssl.SSLContext) -> None:
        super().__init__(context=context)
        self._ctx = context
        self._conn = _tracked(http.client.HTTPSConnection, tracker)

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(self._conn, req, context=self._ctx)


class _Redirects(urllib.request.HTTPRedirectHandler):
    """Follow http(s) redirects only; re-add the token only on the same origin."""

    max_redirections = MAX_REDIRECTS

    def __init__(self, token_header: tuple[str, str] | None, token_origin: tuple[str, str, int | None]):
        super().__init__()
        self.token_header = token_header
        self.token_origin = token_origin
        self.hops: list[str] = []
        self.refused: str | None = None

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: Any,
        code: int,
        msg: str,
        headers: Any,
        newurl: str,
    ) -> urllib.request.Request | None:
        parts = urlsplit(newurl)
        if parts.scheme not in ("http", "https"):
            self.refused = f"a redirect to a {parts.scheme}: URL"
            return None  # urllib then raises HTTPError(code): an answer we do not use
        if "@" in parts.netloc:  # urllib would take "user:pass@host" for a host name
            self.refused = "a redirect to a URL with credentials in it"
            return None  # credentials a server hands out are sent nowhere
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is None:
            return None
        self.hops.append(redact_url(newurl))
        if self.token_header and origin(newurl) == self.token_origin:
            new.add_unredirected_header(*self.token_header)
        return new


def _read_capped(resp: Any, max_bytes: int, tracker: _Tracker) -> tuple[bytes, bool]:
    """Read at most ``max_bytes`` (+1 to notice more); ``(data, too_large)``."""
    chunks: list[bytes] = []
    total = 0
    read = getattr(resp, "read1", None) or resp.read
    while not tracker.aborted:
        chunk = read(CHUNK)
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
        if total > max_bytes:
            return b"".join(chunks)[:max_bytes], True
    return b"".join(chunks), False


#: a Content-Length longer than this (1 TB and up) is said in digits, never turned into a number
_LENGTH_DIGITS = 12


def _announced_over(length: str, max_bytes: int) -> bool:
    """Whether a Content-Length says more than ``max_bytes``. A header is data:
    thousands of digits pass Python's int() limit (ValueError) or a float's
    range (OverflowError), so a long one is over the cap by its length alone."""
    if not length.isdigit():
        return False
    return len(length) > _LENGTH_DIGITS or int(length) > max_bytes


def _size_text(length: str) -> str:
    if len(length) > _LENGTH_DIGITS:
        return f"more than 1 TB (a Content-Length of {len(length)} digits)"
    return f"{int(length) / MIB:.1f} MiB"


def _keep_headers(headers: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    if headers is None:
        return out
    for name in KEEP_HEADERS:
        value = headers.get(name)
        if value is not None:
            out[name] = str(value)[:500]
    return out


# --------------------------------------------------------------------------- the GET


def get(
    url: str,
    *,
    token: str | None = None,
    timeout: float = 10.0,
    max_bytes: int = MAX_BODY,
    env: Mapping[str, str] | None = None,
    accept: str = "application/vnd.github+json",
    extra_headers: Mapping[str, str] | None = None,
) -> HttpAnswer:
    """GET ``url`` within ``timeout`` seconds in all; never raises.

    ``token`` (if any) goes in ``Authorization: Bearer`` to ``url``'s own
    origin only, and only over https; ``user:pass@`` in the URL goes as
    ``Authorization: Basic`` instead, over https or to a loopback host.
    """
    shown = redact_url(url)
    start = time.monotonic()
    try:
        url, basic = credentials(url)
        scheme, host, port = origin(url)
    except ValueError as exc:
        return HttpAnswer(url=shown, error=f"bad URL: {exc}")
    if scheme not in ("http", "https") or not host:
        return HttpAnswer(url=shown, error=f"not an http(s) URL: {shown}")

    answer = HttpAnswer(url=shown)
    token_header, secrets = _authorization(answer, token, basic, https=scheme == "https", local=is_loopback(host))
    tracker = _Tracker()
    box: dict[str, HttpAnswer] = {}
    worker = threading.Thread(
        target=_fetch,
        args=(url, host, token_header, (scheme, host, port), timeout, max_bytes, env or {}, accept),
        kwargs={"extra_headers": extra_headers, "tracker": tracker, "box": box, "base": answer},
        name="spark-preflight-http",
        daemon=True,
    )
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        tracker.abort()
        worker.join(0.5)
        answer.timed_out = True
        answer.error = f"no complete answer from {host} within {timeout:g} s"
        answer.status = None
        answer.body = None
    else:
        answer = box.get("answer", answer)
        if answer.error is None and answer.status is None:
            answer.error = f"no answer from {host}"
    answer.duration_s = round(time.monotonic() - start, 4)
    for secret in secrets:
        answer.error = scrub(answer.error, secret) if answer.error else answer.error
        answer.reason = scrub(answer.reason, secret)
        if answer.body is not None:
            answer.body = scrub(answer.body, secret)
        answer.headers = {k: scrub(v, secret) for k, v in answer.headers.items()}
    return answer


def _authorization(
    answer: HttpAnswer, token: str | None, basic: tuple[str, str] | None, *, https: bool, local: bool
) -> tuple[tuple[str, str] | None, list[str]]:
    """The one ``Authorization`` header (or None) and the secrets to scrub.

    Credentials in the URL (``http://user:pass@mirror``) are the user's
    choice for that host and win over ``GITHUB_TOKEN``; they go over https
    or to a loopback host, never in clear text across a network.
    ``GITHUB_TOKEN`` comes from the environment, not from the URL the user
    typed, so it goes only over https: a plain-http "mirror" on 127.0.0.1 is
    whatever local process holds that port.
    """
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
    url: str,
    host: str,
    token_header: tuple[str, str] | None,
    token_origin: tuple[str, str, int | None],
    timeout: float,
    max_bytes: int,
    env: Mapping[str, str],
    accept: str,
    *,
    extra_headers: Mapping[str, str] | None,
    tracker: _Tracker,
    box: dict[str, HttpAnswer],
    base: HttpAnswer,
) -> None:
    answer = HttpAnswer(url=base.url, token=base.token, credentials=base.credentials)
    redirects = _Redirects(token_header, token_origin)
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler(_proxies(env, host)),
        _HTTPHandler(tracker),
        _HTTPSHandler(tracker, ssl.create_default_context()),
        redirects,
    )
    headers = {
        "Accept": accept,
        "Accept-Encoding": "identity",
        "User-Agent": f"pytest-dgx-spark/{__version__}",
        "X-GitHub-Api-Version": "2022-11-28",
    }
    headers.update(extra_headers or {})
    req = urllib.request.Request(url, headers=headers, method="GET")
    if token_header:
        req.add_unredirected_header(*token_header)
    resp: Any = None
    try:
        try:
            # each socket operation may take a little longer than the whole request: the
            # deadline in get() ends it first and says so, not a racing socket timeout
            resp = opener.open(req, timeout=timeout + 1.0)
        except urllib.error.HTTPError as err:
            resp = err  # 4xx/5xx: still an answer, with headers and a body
        _read_answer(answer, resp, redirects, host, max_bytes, tracker)
    except urllib.error.URLError as exc:
        answer.error, answer.offline = describe_oserror(exc, host)
    except (OSError, http.client.HTTPException, ValueError) as exc:
        if tracker.aborted:
            answer.error = f"no complete answer from {host} within {timeout:g} s"
            answer.timed_out = True
        elif isinstance(exc, OSError):
            answer.error, answer.offline = describe_oserror(exc, host)
        else:
            answer.error = f"bad answer from {host}: {type(exc).__name__}: {_first_line(str(exc))}"
    except Exception as exc:  # a server's answer must never end this thread with a traceback
        answer.error = f"bad answer from {host}: {type(exc).__name__}: {_first_line(str(exc))}"
    finally:
        if resp is not None:
            try:
                resp.close()
            except Exception:
                pass
    box["answer"] = answer


def _read_answer(
    answer: HttpAnswer, resp: Any, redirects: _Redirects, host: str, max_bytes: int, tracker: _Tracker
) -> None:
    """Fill ``answer`` from an opened response (a 4xx/5xx too): status,
    kept headers, and the body unless it is a refused redirect or over the cap."""
    answer.status = int(getattr(resp, "status", None) or getattr(resp, "code", 0) or 0) or None
    answer.reason = str(getattr(resp, "reason", "") or "")[:200]
    answer.headers = _keep_headers(getattr(resp, "headers", None))
    answer.redirects = list(redirects.hops)
    raw_headers = getattr(resp, "headers", None)
    length = str(raw_headers.get("content-length", "") if raw_headers is not None else "").strip()
    if answer.status is not None and 300 <= answer.status < 400:
        why = redirects.refused or f"more than {MAX_REDIRECTS} redirects, or no Location"
        if "not allowed" in answer.reason:  # urllib's own refusal (file:, data: ...)
            why = answer.reason
        answer.error = f"{host} answered HTTP {answer.status} and the redirect was not followed ({why})"
    elif _announced_over(length, max_bytes):
        answer.too_large = True
        answer.error = f"{host} announced {_size_text(length)}, over the {max_bytes / MIB:g} MiB cap; not read"
    else:
        raw, too_large = _read_capped(resp, max_bytes, tracker)
        answer.body_bytes = len(raw)
        if too_large:
            answer.too_large = True
            answer.error = (
                f"the answer from {host} passed the {max_bytes / MIB:g} MiB cap; stopped reading"
            )
        else:
            answer.body = raw.decode("utf-8", errors="replace")
