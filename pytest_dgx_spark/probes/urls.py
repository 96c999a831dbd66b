"""URLs as G8 handles them: shown only redacted (no ``user:password@``, no query or fragment
values), checked once with a one-line reason, their credentials split off to go as basic auth,
and compared by origin (scheme, host, port) and by whether they reach this machine.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import unquote, urlsplit, urlunsplit

REDACTED = "<redacted>"


def redact_url(url: str) -> str:
    """A URL as it may be shown: no ``user:password@``, no query or fragment values. Works on any
    text, however malformed (``user:pw@host`` has no host for :func:`urlsplit`): a URL is
    redacted before it is validated, so an error quoting it never carries a secret."""
    text = str(url)
    scheme, sep, rest = text.partition("://")
    head, rest = (scheme + sep, rest) if sep else ("", text)
    cut = min([i for i in (rest.find(c) for c in "/?#") if i >= 0] or [len(rest)])
    hostport = rest[:cut].rpartition("@")[2]
    path, hash_, fragment = rest[cut:].partition("#")
    path, question, query = path.partition("?")
    if question:
        pairs = [p.partition("=") for p in query.split("&")]
        query = "&".join(f"{k}={REDACTED}" if eq else (REDACTED if k else "") for k, eq, _ in pairs)
    return f"{head}{hostport}{path}{question}{query}{hash_}{REDACTED if fragment else ''}"


def credentials(url: str) -> tuple[str, tuple[str, str] | None]:
    """``(url without user:password@, (user, password) or None)``: they go as basic auth
    (urllib would take ``user:pass@127.0.0.1`` for a host name)."""
    parts = urlsplit(url)
    userinfo, at, hostport = parts.netloc.rpartition("@")
    if not at or not userinfo:
        return url, None
    user, _, password = userinfo.partition(":")
    bare = urlunsplit((parts.scheme, hostport, parts.path, parts.query, parts.fragment))
    return bare, (unquote(user), unquote(password))


def check_url(text: str) -> str | None:
    """Why ``text`` is not a usable http(s) base URL (None: it is); quotes it only redacted."""
    try:
        parts = urlsplit(text)
        port = parts.port  # 99999 is a reason here, not a crash later
    except ValueError as exc:
        return f"{exc} in {redact_url(text)!r}"
    if parts.scheme not in ("http", "https"):
        return f"expected an http(s) URL, got {redact_url(text)!r}"
    if not parts.hostname:
        return f"no host in {redact_url(text)!r}"
    if port == 0:
        return f"port 0 in {redact_url(text)!r}"
    if parts.query or parts.fragment:  # it would travel into every request line, log and redirect
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
