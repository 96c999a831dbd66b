"""G8's one GitHub request and its answer, as records: the issue list parsed once here (pull requests
and entries that are no issue counted, each body cut to :data:`BODY_CHARS`), the HTTP answer without
its body (:mod:`pytest_dgx_spark.probes.http` makes the request), and the rate limit's reset time.

The answer travels as JSON (the machine's store shares it between checks and xdist workers, a
capture replays it): :func:`fetch` returns plain data, :class:`Fetched` rebuilds it in ``gather``.
"""

from __future__ import annotations

import json
import time
from dataclasses import field
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pytest_dgx_spark.checks.record import Record
from pytest_dgx_spark.datadef import define
from pytest_dgx_spark.model import one_line
from pytest_dgx_spark.probes import http

REPO = "NVIDIA/dgx-spark-playbooks"
QUERY = "state=open&per_page=100"
#: characters of each body kept for matching (GitHub allows 65536)
BODY_CHARS = 20_000
#: a rate limit reset before 2008-01-01 (before GitHub served anything) or after the year 3000
#: is not a time GitHub would send
MIN_EPOCH, MAX_EPOCH = 1_199_145_600.0, 32_503_680_000.0
#: an issue's text fields, kept as strings ("" when GitHub sent something else)
TEXTS = ("title", "body", "created_at", "html_url")


def issues_url(base: str) -> str:
    """The issue list under ``base`` (``https://ghe.example/api/v3``)."""
    parts = urlsplit(base)
    query = "&".join(q for q in (parts.query, QUERY) if q)
    return urlunsplit((parts.scheme, parts.netloc,
                       f"{parts.path.rstrip('/')}/repos/{REPO}/issues", query, ""))


@define
class Issue(Record):
    """One open issue, as kept: its body cut to :data:`BODY_CHARS`."""

    number: int = 0
    title: str = ""
    body: str = ""
    created_at: str = ""
    html_url: str = ""


@define
class IssueList(Record):
    """GitHub's issue list: the issues, the pull requests dropped, the entries that were no issue,
    or why the answer is not an issue list."""

    issues: list[Issue] = field(default_factory=list)
    pull_requests: int = 0
    not_issues: int = 0
    error: str | None = None


@define
class GitHubAnswer(Record):
    """The HTTP answer without its body (:class:`pytest_dgx_spark.probes.http.HttpAnswer`'s fields),
    with GitHub's error ``message``; ``token``: whether GITHUB_TOKEN was sent (or why not)."""

    url: str = ""
    status: int | None = None
    reason: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    body_bytes: int = 0
    error: str | None = None
    offline: bool = False  # the network could not be reached at all (DNS, refused, unreachable)
    timed_out: bool = False
    too_large: bool = False
    token: str = "not set"
    credentials: str = "none"
    redirects: list[str] = field(default_factory=list)
    duration_s: float | None = None  # None: not measured
    message: str = ""

    def header(self, name: str) -> str | None:
        """A response header by its lower-case name, None when GitHub did not send it."""
        return self.headers.get(name)

    @property
    def rate_limited(self) -> bool:
        exhausted = self.header("x-ratelimit-remaining") == "0" or self.header("retry-after") is not None
        return self.status == 429 or (self.status == 403 and (exhausted or "rate limit" in self.message.lower()))


@define
class Fetched(IssueList):
    """What :func:`fetch` returned, rebuilt: the answer, when, and the parsed list."""

    answer: GitHubAnswer = field(default_factory=GitHubAnswer)
    fetched_at: float = 0.0
    message: str = ""  # GitHub's error message, when it answered with an error


def _message(data: Any) -> Any:
    """The ``message`` of a JSON object (GitHub's error answers carry one), else None."""
    return data.get("message") if isinstance(data, dict) else None


def parse_issues(text: str | None) -> IssueList:
    """GitHub's issue list as :class:`IssueList`; an answer that is no list says why (``error``)."""
    if text is None or not text.strip():
        return IssueList(error="the answer was empty")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # repr escapes once; one_line finds nothing left to escape
        return IssueList(error=f"the answer is not JSON (starts {one_line(repr(text[:60]))})")
    if not isinstance(data, list):
        message = _message(data)
        said = f" with message {one_line(repr(message[:120]))}" if isinstance(message, str) else ""
        return IssueList(error=f"expected a JSON list of issues, got a {type(data).__name__}{said}")
    out = IssueList()
    for item in data:
        if not isinstance(item, dict) or not isinstance(item.get("number"), int):
            out.not_issues += 1
        elif "pull_request" in item:
            out.pull_requests += 1
        else:
            s = {k: v if isinstance(v := item.get(k), str) else "" for k in TEXTS}
            out.issues.append(Issue(item["number"], one_line(s["title"]), s["body"][:BODY_CHARS], s["created_at"],
                                    s["html_url"]))
    if data and not out.issues and out.not_issues:
        out.error = f"none of the {len(data)} entries looks like a GitHub issue"
    return out


def as_int(value: Any) -> int | None:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def rate_limit_reset(answer: GitHubAnswer, fetched_at: float) -> float | None:
    """When the limit resets (epoch seconds): ``X-RateLimit-Reset``, else ``Retry-After``."""
    reset, retry = as_int(answer.header("x-ratelimit-reset")), answer.header("retry-after")
    if reset is not None and reset > 0:
        when = float(reset) if reset <= MAX_EPOCH else -1.0  # never float() of a 400-digit header
    elif retry is None:
        return None
    elif (seconds := as_int(retry)) is not None:
        if seconds < 0 or seconds > MAX_EPOCH:
            return None
        when = fetched_at + seconds
    else:
        try:
            when = parsedate_to_datetime(retry).timestamp()
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
    return when if MIN_EPOCH <= when <= MAX_EPOCH else None


def render_reset(reset: float, fetched_at: float) -> str:
    """``2026-07-24 14:05 UTC (in 37 min)``; ``""`` for a time no calendar holds."""
    try:
        when = datetime.fromtimestamp(reset, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):
        return ""
    left = reset - fetched_at
    if left <= 0:
        return when
    rel = f"{left:.0f} s" if left < 90 else f"{left / 60:.0f} min" if left < 5400 else f"{left / 3600:.1f} h"
    return f"{when} (in {rel})"


def error_message(body: str | None) -> str:
    """GitHub's ``{"message": ...}`` from an error body, if any."""
    try:
        data = json.loads(body[:65536]) if body else None
    except (ValueError, RecursionError):
        return ""
    message = _message(data)
    return one_line(message)[:160] if isinstance(message, str) else ""


def fetch(url: str, token: str | None, timeout: float, env: dict[str, str]) -> dict[str, Any]:
    """The one request of the run, parsed; JSON-ready (no body, no token): :class:`Fetched`'s data."""
    fetched_at = time.time()
    answer = http.get(url, token=token, timeout=timeout, env=env)
    body, answer.body = answer.body, None
    out: dict[str, Any] = {"answer": answer.to_dict(), "fetched_at": fetched_at}
    return {**out, **parse_issues(body).to_dict()} if answer.ok else {**out, "message": error_message(body)}
