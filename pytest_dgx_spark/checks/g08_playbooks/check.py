"""G8 — stale playbooks: does an open issue name the playbook you follow?

NVIDIA's DGX Spark playbooks drift (a tag disappears, a pin breaks Unsloth) and their issues
have no labels, so G8 asks whether an open issue names my playbook in its title or body: one
GET per run (shared through the machine's store), pull requests dropped. Anything that stops
the lookup (``--spark-offline``, no network, a rate limit, an answer that is no issue list) is
a SKIP with the reason: advice, never a blocker, so G8 never FAILs.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any, TypedDict
from urllib.parse import urlsplit, urlunsplit

from pytest_dgx_spark.checks.kit import CheckContext, FactsBase, Findings, Params, first_n, shortened
from pytest_dgx_spark.model import Result, Status, one_line
from pytest_dgx_spark.probes import http

REPO = "NVIDIA/dgx-spark-playbooks"
QUERY = "state=open&per_page=100"
#: characters of each body kept for matching (GitHub allows 65536)
BODY_CHARS = 20_000
TITLE_CHARS = 90
SHOWN_IN_SUMMARY = 3
SHOWN_IN_DETAILS = 20
#: other spellings of a playbook name seen in issue titles
ALIASES: dict[str, tuple[str, ...]] = {"trt-llm": ("tensorrt-llm",), "tensorrt-llm": ("trt-llm",)}
#: the one host a config file may send ``GITHUB_TOKEN`` to
GITHUB_API_HOST = "api.github.com"
#: a rate limit reset before 2008-01-01 (before GitHub served anything) or after the year 3000
#: is not a time GitHub would send
MIN_EPOCH, MAX_EPOCH = 1_199_145_600.0, 32_503_680_000.0
NOT_CHECKED = "playbook issues not checked"
#: what a rate limit says about the token: sent, or withheld over plain http (else: set it)
TOKEN_WORDS = {"sent": "even with GITHUB_TOKEN",
               http.TOKEN_OVER_HTTP: "GITHUB_TOKEN is set but goes only over https"}
#: an issue's text fields, kept as strings ("" when GitHub sent something else)
TEXTS = ("title", "body", "created_at", "html_url")


def issues_url(base: str) -> str:
    """The issue list under ``base`` (``https://ghe.example/api/v3``)."""
    parts = urlsplit(base)
    query = "&".join(q for q in (parts.query, QUERY) if q)
    return urlunsplit((parts.scheme, parts.netloc,
                       f"{parts.path.rstrip('/')}/repos/{REPO}/issues", query, ""))


class Issue(TypedDict):
    """One open issue, as kept: its body cut to :data:`BODY_CHARS`."""

    number: int
    title: str
    body: str
    created_at: str
    html_url: str


@dataclass
class Facts(FactsBase):
    """What the one GitHub request gave: plain data, so a capture replays it."""

    playbook: str | None = None
    offline_flag: bool = False
    source: str = ""
    #: the HTTP answer without its body (see probes/http.py)
    answer: dict[str, Any] = field(default_factory=dict)
    issues: list[Issue] = field(default_factory=list)
    pull_requests: int = 0
    not_issues: int = 0
    parse_error: str | None = None
    more_pages: bool = False
    fetched_at: float = 0.0


FACTS = Facts


def parse_issues(text: str | None) -> dict[str, Any]:
    """GitHub's issue list -> ``{"issues", "pull_requests", "not_issues", "error"}``."""
    out: dict[str, Any] = {"issues": [], "pull_requests": 0, "not_issues": 0, "error": None}
    if text is None or not text.strip():
        return {**out, "error": "the answer was empty"}
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # repr escapes once; one_line finds nothing left to escape
        return {**out, "error": f"the answer is not JSON (starts {one_line(repr(text[:60]))})"}
    if not isinstance(data, list):
        message = data.get("message") if isinstance(data, dict) else None
        said = f" with message {one_line(repr(message[:120]))}" if isinstance(message, str) else ""
        return {**out, "error": f"expected a JSON list of issues, got a {type(data).__name__}{said}"}
    for item in data:
        if not isinstance(item, dict) or not isinstance(item.get("number"), int):
            out["not_issues"] += 1
        elif "pull_request" in item:
            out["pull_requests"] += 1
        else:
            s = {k: v if isinstance(v := item.get(k), str) else "" for k in TEXTS}
            out["issues"].append({"number": item["number"], **s, "title": one_line(s["title"]),
                                  "body": s["body"][:BODY_CHARS]})
    if data and not out["issues"] and out["not_issues"]:
        out["error"] = f"none of the {len(data)} entries looks like a GitHub issue"
    return out


def normalize_playbook(name: str) -> str:
    """``nvidia/playbook-vLLM/`` -> ``vllm``: the folder name users copy."""
    text = name.strip().strip("/").lower().rsplit("/", 1)[-1]
    return text.removeprefix("playbook-") or name.strip().lower()


def playbook_pattern(name: str) -> re.Pattern[str]:
    """A word-ish, case-insensitive pattern for a playbook name."""
    names = (name, *ALIASES.get(name, ()))
    alternatives = [r"[-_\s]*".join(re.escape(p) for p in re.split(r"[-_\s/]+", n) if p) for n in names]
    return re.compile(r"(?<![a-z0-9])(?:" + "|".join(alternatives) + r")(?![a-z0-9])", re.IGNORECASE)


def matching(issues: list[Issue], name: str) -> list[tuple[Issue, str]]:
    """Issues whose title or body names the playbook, with where it matched."""
    pattern = playbook_pattern(name)
    return [(i, "title" if pattern.search(i.get("title") or "") else "body") for i in issues
            if pattern.search(i.get("title") or "") or pattern.search(i.get("body") or "")]


def newest_first(issues: list[Issue]) -> list[Issue]:
    return sorted(issues, key=lambda i: (i.get("created_at") or "", i.get("number") or 0), reverse=True)


def short(issue: Issue) -> str:
    title = issue.get("title") or "(no title)"
    if len(title) > TITLE_CHARS:
        title = title[: TITLE_CHARS - 1].rstrip() + "…"
    return f"#{issue.get('number')} {title}"


def _int(value: Any) -> int | None:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def rate_limit_reset(headers: dict[str, str], fetched_at: float) -> float | None:
    """When the limit resets (epoch seconds): ``X-RateLimit-Reset``, else ``Retry-After``."""
    reset, retry = _int(headers.get("x-ratelimit-reset")), headers.get("retry-after")
    if reset is not None and reset > 0:
        when = float(reset) if reset <= MAX_EPOCH else -1.0  # never float() of a 400-digit header
    elif retry is None:
        return None
    elif (seconds := _int(retry)) is not None:
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


def is_rate_limited(status: int | None, headers: dict[str, str], message: str) -> bool:
    exhausted = headers.get("x-ratelimit-remaining") == "0" or "retry-after" in headers
    return status == 429 or (status == 403 and (exhausted or "rate limit" in message.lower()))


def error_message(body: str | None) -> str:
    """GitHub's ``{"message": ...}`` from an error body, if any."""
    try:
        data = json.loads(body[:65536]) if body else None
    except (ValueError, RecursionError):
        return ""
    if isinstance(data, dict) and isinstance(data.get("message"), str):
        return one_line(data["message"])[:160]
    return ""


def fetch(url: str, token: str | None, timeout: float, env: dict[str, str]) -> dict[str, Any]:
    """The one request of the run, parsed; JSON-ready (no body, no token)."""
    fetched_at = time.time()
    answer = http.get(url, token=token, timeout=timeout, env=env)
    body, answer.body = answer.body, None
    out: dict[str, Any] = {"answer": answer.to_dict(), "fetched_at": fetched_at}
    return {**out, **parse_issues(body)} if answer.ok else {**out, "message": error_message(body)}


def token_withheld(github_url: str, source: str) -> str | None:
    """Why ``GITHUB_TOKEN`` is not sent: the URL came from a config file (the checkout's own
    sent it to ``https://attacker.example``, issue 19 item 2) and names a host other than
    GitHub's. A mirror or GitHub Enterprise takes ``--spark-github-url``: the user's word."""
    if source != "ini":
        return None
    _, host, _ = http.origin(http.credentials(github_url)[0])
    if host == GITHUB_API_HOST:
        return None
    return (f"not sent: the config file's github_url names {host}, not {GITHUB_API_HOST}; "
            "give --spark-github-url on the command line to send it there")


def gather(ctx: CheckContext) -> Facts:
    s = ctx.settings
    url = issues_url(s.github_url)
    playbook, source = normalize_playbook(s.playbook) if s.playbook else None, http.redact_url(s.github_url)
    if s.offline:
        return Facts(playbook=playbook, offline_flag=True, source=source)
    token = ctx.machine.env.get("GITHUB_TOKEN") or None
    withheld = token_withheld(s.github_url, getattr(s, "github_url_source", "default")) if token else None
    got = ctx.machine.store.get_or_compute(
        f"github:issues:{http.redact_url(url)}",
        lambda: fetch(url, None if withheld else token, s.timeout, ctx.machine.env),
    )
    answer = {**(got.get("answer") or {}), **({"token": withheld} if withheld else {})}
    answer["message"] = got.get("message", "")
    return Facts(
        playbook=playbook, source=source, answer=answer, issues=list(got.get("issues") or []),
        pull_requests=int(got.get("pull_requests") or 0), not_issues=int(got.get("not_issues") or 0),
        parse_error=got.get("error"), fetched_at=float(got.get("fetched_at") or 0.0),
        more_pages='rel="next"' in (answer.get("headers") or {}).get("link", ""),
    )


def _rate_limited(f: Facts) -> str:
    a, headers = f.answer, f.answer.get("headers") or {}
    reset = rate_limit_reset(headers, f.fetched_at)
    shown = render_reset(reset, f.fetched_at) if reset else ""
    unknown = headers.get("x-ratelimit-reset") or headers.get("retry-after")  # out of any calendar: data
    until = f" until {shown}" if shown else " (reset time unknown)" if unknown else ""
    words = TOKEN_WORDS.get(a.get("token", ""), "set GITHUB_TOKEN for a higher limit")
    return f"rate-limited by GitHub (HTTP {a.get('status')}){until}; {words}"


def _unauthorized(a: dict[str, Any], message: str) -> str:
    if a.get("credentials") != "sent" and a.get("token") != "sent":
        said = f" ({message})" if message else ""
        return f"GitHub answered HTTP 401{said} to a request without credentials"
    who = "the URL's credentials" if a.get("credentials") == "sent" else "GITHUB_TOKEN"
    return f"GitHub rejected {who} (HTTP 401{': ' + message if message else ''})"


def _skip_reason(f: Facts, limited: bool, redirect: bool, failed: bool) -> str | None:
    a, status, message = f.answer, f.answer.get("status"), f.answer.get("message") or ""
    if a.get("offline"):  # no network, which the user did not ask for: the line says what failed
        return f"{a.get('error')}; {NOT_CHECKED}"
    if a.get("timed_out"):
        return f"GitHub lookup gave up: {a.get('error')} (--spark-timeout)"
    if a.get("too_large"):
        return f"GitHub's answer is not the issue list expected: {a.get('error')}"
    if limited:
        return _rate_limited(f)
    if status == 401:
        return _unauthorized(a, message)
    if status == 404:
        return f"{REPO} not found at {f.source} (HTTP 404); check --spark-github-url"
    if redirect or (a.get("error") and not failed):
        return f"GitHub lookup failed: {a.get('error')}"  # a redirect refused, and why
    if failed:
        text = f": {message}" if message else (f" {a.get('reason')}" if a.get("reason") else "")
        return f"GitHub answered HTTP {status}{text}; {NOT_CHECKED}"
    if f.parse_error:
        return f"GitHub's answer is not the issue list expected: {f.parse_error}"
    return None if a else "GitHub lookup did not run"


def _skip(f: Facts) -> tuple[str, str] | None:
    """``(reason, headline)`` of a SKIP (the headline the reason in a few words), or None."""
    a, status = f.answer, f.answer.get("status")
    limited = is_rate_limited(status, a.get("headers") or {}, a.get("message") or "")
    redirect = status is not None and 300 <= status < 400 and bool(a.get("error"))
    failed = status is not None and not 200 <= status < 300
    reason = _skip_reason(f, limited, redirect, failed)
    if reason is None:
        return None
    if a.get("offline"):  # "cannot resolve api.github.com", not "offline" (--spark-offline's word)
        return reason, f"{str(a.get('error')).split(' (')[0]}: {NOT_CHECKED}"
    if a.get("timed_out"):
        return reason, f"GitHub did not answer in time: {NOT_CHECKED}"
    if limited:
        return reason, f"rate-limited by GitHub (HTTP {status}): {NOT_CHECKED}"
    if redirect:
        return reason, f"redirect not followed (HTTP {status}): {NOT_CHECKED}"
    words = f"GitHub answered HTTP {status}" if failed else "GitHub's answer unusable"
    return reason, f"{words}: {NOT_CHECKED}"


def _readings(f: Facts, out: Findings) -> None:
    a = f.answer
    out.read("source", f.source)
    if a.get("status") is not None:
        out.read("http_status", a.get("status"))
    remaining = _int((a.get("headers") or {}).get("x-ratelimit-remaining"))
    if remaining is not None:
        out.read("rate_limit_remaining", remaining)
    out.read("github_token", a.get("token", "not set"))
    if a.get("token") == http.TOKEN_OVER_HTTP:
        out.note(f"GITHUB_TOKEN was not sent: {f.source} is plain http, and the token goes only over https")
    if a.get("credentials", "none") != "none":
        out.read("url_credentials", a.get("credentials"))
    if a.get("duration_s") is not None:
        out.read("fetch_time", a.get("duration_s"), "s")


def _no_playbook(f: Facts, out: Findings, count: str, scope: str) -> Result:
    newest = newest_first(f.issues)
    if not newest:
        return out.result(Status.INFO, f"no open issues in {REPO}{scope}",
                          headline=f"no open issues in {REPO}")
    out.note(*(f"{short(i)} {i.get('html_url', '')}".strip() for i in newest[:SHOWN_IN_DETAILS]))
    shown = "; ".join(short(i) for i in newest[:SHOWN_IN_SUMMARY])
    return out.result(
        Status.INFO,
        f"{count} open issues in {REPO}; newest: {shown}; name your playbook with --spark-playbook",
        headline=f"{count} open playbook issues; name your playbook to match it", ok_code="G8.no-playbook",
    )


def _matches(f: Facts, out: Findings, count: str, scope: str) -> Result:
    playbook = f.playbook or ""
    hits = matching(newest_first(f.issues), playbook)
    out.read("playbook", playbook)
    out.read("matching_issues", len(hits))
    if not hits:
        return out.result(
            Status.PASS, f"no open issue in {REPO} names '{playbook}' ({count} open issues checked{scope})",
            headline=f"no open issue names '{playbook}' ({count} checked)",
        )
    named = [f"{short(i)} (named in the {where}) {i.get('html_url', '')}".strip() for i, where in hits]
    out.note(*shortened(named, SHOWN_IN_DETAILS))
    noun = "issue names" if len(hits) == 1 else "issues name"
    numbers = first_n([f"#{i.get('number')}" for i, _ in hits], SHOWN_IN_SUMMARY, sep=", ")
    out.warn(
        f"{len(hits)} open {noun} the '{playbook}' playbook in {REPO}: "
        + first_n([short(i) for i, _ in hits], SHOWN_IN_SUMMARY),
        f"read {'it' if len(hits) == 1 else 'them'} before following the {playbook} playbook verbatim "
        "(look for a workaround or a pinned version in the thread)", code="G8.playbook-issues",
    )
    return out.result(headline=f"{len(hits)} open {noun} the '{playbook}' playbook ({numbers})",
                      short_fix=f"read {numbers} before following it")


def evaluate(facts: Facts, params: Params) -> Result:
    """Decide G8 from the parsed issue list (pure: no network here); never a FAIL."""
    if facts.offline_flag:  # the user's own --spark-offline: a SKIP by choice, not a warning
        summary = "offline: GitHub not contacted, playbook issues not checked"
        return Result("G8", Status.SKIP, summary, headline=f"offline: {NOT_CHECKED}", by_choice=True,
                      codes=["G8.offline"])
    out = Findings("G8")
    _readings(facts, out)
    skip = _skip(facts)
    if skip:
        return out.result(Status.SKIP, skip[0], headline=skip[1],
                          ok_code="G8.offline" if facts.answer.get("offline") else "G8.github-unavailable")
    out.read("open_issues", len(facts.issues))
    out.read("pull_requests_dropped", facts.pull_requests)
    if facts.not_issues:
        out.note(f"{facts.not_issues} entries of the answer were not issues and were ignored")
    if facts.more_pages:
        out.note("only the first page (100 items) was read: one request per run")
    count = f"{len(facts.issues)}{'+' if facts.more_pages else ''}"
    scope = " (GitHub has more pages; the newest 100 were checked)" if facts.more_pages else ""
    return (_matches if facts.playbook else _no_playbook)(facts, out, count, scope)
