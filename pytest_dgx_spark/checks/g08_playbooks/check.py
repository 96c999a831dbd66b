"""G8 — stale playbooks: does an open issue name the playbook you follow?

NVIDIA's DGX Spark playbooks drift (a tag disappears, a pin breaks Unsloth) and their issues
have no labels, so G8 asks whether an open issue names my playbook in its title or body: one
GET per run (shared through the machine's store), pull requests dropped. Anything that stops
the lookup (``--spark-offline``, no network, a rate limit, an answer that is no issue list) is
a SKIP with the reason: advice, never a blocker, so G8 never FAILs.
"""

from __future__ import annotations

import re
from dataclasses import field

from pytest_dgx_spark.checks.g08_playbooks.github import (
    REPO,
    Fetched,
    GitHubAnswer,
    Issue,
    as_int,
    fetch,
    issues_url,
    parse_issues,
    rate_limit_reset,
    render_reset,
)
from pytest_dgx_spark.checks.kit import CheckContext, FactsBase, Findings, Params, first_n, shortened
from pytest_dgx_spark.datadef import define
from pytest_dgx_spark.model import Result, Status
from pytest_dgx_spark.probes import http

#: what tests and tools name through the façade
__all__ = ["FACTS", "Facts", "GitHubAnswer", "Issue", "evaluate", "gather", "issues_url", "parse_issues"]

TITLE_CHARS = 90
SHOWN_IN_SUMMARY = 3
SHOWN_IN_DETAILS = 20
#: other spellings of a playbook name seen in issue titles
ALIASES: dict[str, tuple[str, ...]] = {"trt-llm": ("tensorrt-llm",), "tensorrt-llm": ("trt-llm",)}
#: the one host a config file may send ``GITHUB_TOKEN`` to
GITHUB_API_HOST = "api.github.com"
NOT_CHECKED = "playbook issues not checked"
#: what a rate limit says about the token: sent, or withheld over plain http (else: set it)
TOKEN_WORDS = {"sent": "even with GITHUB_TOKEN",
               http.TOKEN_OVER_HTTP: "GITHUB_TOKEN is set but goes only over https"}


@define
class Facts(FactsBase):
    """What the one GitHub request gave: plain data, so a capture replays it."""

    playbook: str | None = None
    offline_flag: bool = False
    source: str = ""
    #: the HTTP answer without its body (see probes/http.py); None: no request was made
    answer: GitHubAnswer | None = None
    issues: list[Issue] = field(default_factory=list)
    pull_requests: int = 0
    not_issues: int = 0
    parse_error: str | None = None
    more_pages: bool = False
    fetched_at: float = 0.0


FACTS = Facts


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
    return [(i, "title" if pattern.search(i.title) else "body") for i in issues
            if pattern.search(i.title) or pattern.search(i.body)]


def newest_first(issues: list[Issue]) -> list[Issue]:
    return sorted(issues, key=lambda i: (i.created_at, i.number), reverse=True)


def short(issue: Issue) -> str:
    title = issue.title or "(no title)"
    if len(title) > TITLE_CHARS:
        title = title[: TITLE_CHARS - 1].rstrip() + "…"
    return f"#{issue.number} {title}"


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
    got = Fetched.from_dict(ctx.machine.store.get_or_compute(
        f"github:issues:{http.redact_url(url)}",
        lambda: fetch(url, None if withheld else token, s.timeout, ctx.machine.env),
    ))
    answer = got.answer
    answer.token, answer.message = withheld or answer.token, got.message
    return Facts(
        playbook=playbook, source=source, answer=answer, issues=got.issues, pull_requests=got.pull_requests,
        not_issues=got.not_issues, parse_error=got.error, fetched_at=got.fetched_at,
        more_pages='rel="next"' in (answer.header("link") or ""),
    )


def _rate_limited(f: Facts, a: GitHubAnswer) -> str:
    reset = rate_limit_reset(a, f.fetched_at)
    shown = render_reset(reset, f.fetched_at) if reset else ""
    unknown = a.header("x-ratelimit-reset") or a.header("retry-after")  # out of any calendar: data
    until = f" until {shown}" if shown else " (reset time unknown)" if unknown else ""
    words = TOKEN_WORDS.get(a.token, "set GITHUB_TOKEN for a higher limit")
    return f"rate-limited by GitHub (HTTP {a.status}){until}; {words}"


def _unauthorized(a: GitHubAnswer) -> str:
    message = a.message
    if a.credentials != "sent" and a.token != "sent":
        said = f" ({message})" if message else ""
        return f"GitHub answered HTTP 401{said} to a request without credentials"
    who = "the URL's credentials" if a.credentials == "sent" else "GITHUB_TOKEN"
    return f"GitHub rejected {who} (HTTP 401{': ' + message if message else ''})"


def _skip_reason(f: Facts, a: GitHubAnswer, redirect: bool, failed: bool) -> str | None:
    status, message = a.status, a.message
    if a.offline:  # no network, which the user did not ask for: the line says what failed
        return f"{a.error}; {NOT_CHECKED}"
    if a.timed_out:
        return f"GitHub lookup gave up: {a.error} (--spark-timeout)"
    if a.too_large:
        return f"GitHub's answer is not the issue list expected: {a.error}"
    if a.rate_limited:
        return _rate_limited(f, a)
    if status == 401:
        return _unauthorized(a)
    if status == 404:
        return f"{REPO} not found at {f.source} (HTTP 404); check --spark-github-url"
    if redirect or (a.error and not failed):
        return f"GitHub lookup failed: {a.error}"  # a redirect refused, and why
    if failed:
        text = f": {message}" if message else (f" {a.reason}" if a.reason else "")
        return f"GitHub answered HTTP {status}{text}; {NOT_CHECKED}"
    if f.parse_error:
        return f"GitHub's answer is not the issue list expected: {f.parse_error}"
    return None if f.answer is not None else "GitHub lookup did not run"


def _skip(f: Facts, a: GitHubAnswer) -> tuple[str, str] | None:
    """``(reason, headline)`` of a SKIP (the headline the reason in a few words), or None."""
    status = a.status
    redirect = status is not None and 300 <= status < 400 and bool(a.error)
    failed = status is not None and not 200 <= status < 300
    reason = _skip_reason(f, a, redirect, failed)
    if reason is None:
        return None
    if a.offline:  # "cannot resolve api.github.com", not "offline" (--spark-offline's word)
        return reason, f"{str(a.error).split(' (')[0]}: {NOT_CHECKED}"
    if a.timed_out:
        return reason, f"GitHub did not answer in time: {NOT_CHECKED}"
    if a.rate_limited:
        return reason, f"rate-limited by GitHub (HTTP {status}): {NOT_CHECKED}"
    if redirect:
        return reason, f"redirect not followed (HTTP {status}): {NOT_CHECKED}"
    words = f"GitHub answered HTTP {status}" if failed else "GitHub's answer unusable"
    return reason, f"{words}: {NOT_CHECKED}"


def _readings(f: Facts, a: GitHubAnswer, out: Findings) -> None:
    out.read("source", f.source)
    if a.status is not None:
        out.read("http_status", a.status)
    remaining = as_int(a.header("x-ratelimit-remaining"))
    if remaining is not None:
        out.read("rate_limit_remaining", remaining)
    out.read("github_token", a.token)
    if a.token == http.TOKEN_OVER_HTTP:
        out.note(f"GITHUB_TOKEN was not sent: {f.source} is plain http, and the token goes only over https")
    if a.credentials != "none":
        out.read("url_credentials", a.credentials)
    if a.duration_s is not None:
        out.read("fetch_time", a.duration_s, "s")


def _no_playbook(f: Facts, out: Findings, count: str, scope: str) -> Result:
    newest = newest_first(f.issues)
    if not newest:
        return out.result(Status.INFO, f"no open issues in {REPO}{scope}",
                          headline=f"no open issues in {REPO}")
    out.note(*(f"{short(i)} {i.html_url}".strip() for i in newest[:SHOWN_IN_DETAILS]))
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
    named = [f"{short(i)} (named in the {where}) {i.html_url}".strip() for i, where in hits]
    out.note(*shortened(named, SHOWN_IN_DETAILS))
    noun = "issue names" if len(hits) == 1 else "issues name"
    numbers = first_n([f"#{i.number}" for i, _ in hits], SHOWN_IN_SUMMARY, sep=", ")
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
    answer = facts.answer or GitHubAnswer()  # None: no request was made (the SKIP says so)
    _readings(facts, answer, out)
    skip = _skip(facts, answer)
    if skip:
        return out.result(Status.SKIP, skip[0], headline=skip[1],
                          ok_code="G8.offline" if answer.offline else "G8.github-unavailable")
    out.read("open_issues", len(facts.issues))
    out.read("pull_requests_dropped", facts.pull_requests)
    if facts.not_issues:
        out.note(f"{facts.not_issues} entries of the answer were not issues and were ignored")
    if facts.more_pages:
        out.note("only the first page (100 items) was read: one request per run")
    count = f"{len(facts.issues)}{'+' if facts.more_pages else ''}"
    scope = " (GitHub has more pages; the newest 100 were checked)" if facts.more_pages else ""
    return (_matches if facts.playbook else _no_playbook)(facts, out, count, scope)
