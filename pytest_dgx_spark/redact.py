"""Take secrets and personal names out of anything written to a file.

A capture is meant for a public issue, so all of it passes :class:`Redactor`: secret-named variables'
values, token shapes, credentials in URLs, secret flags, query parameters and keys, the user's name
and home folder; command lines are cut to the program and its flags. The same pass without the
personal names (:func:`outgoing`) is the last line of defence over every result a run reports.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

REDACTED = "<redacted>"
USER = "<user>"

SECRET_NAME = re.compile(r"(TOKEN(?!IZER)|SECRET|PASSW(OR)?D|PASSPHRASE|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY"
                         r"|CREDENTIAL|AUTH(?!OR)|COOKIE)", re.IGNORECASE)
#: GitHub, Hugging Face, OpenAI, Slack, AWS and NVIDIA tokens
TOKEN_SHAPES = re.compile(r"\b(gh[pousr]_[A-Za-z0-9]{16,}|github_pat_[A-Za-z0-9_]{20,}|hf_[A-Za-z0-9]{16,}"
                          r"|sk-[A-Za-z0-9_\-]{16,}|xox[abposr]-[A-Za-z0-9\-]{10,}|AKIA[0-9A-Z]{16}"
                          r"|nvapi-[A-Za-z0-9_\-]{16,})\b")
#: an Authorization value; the value must hold a digit, so prose ("basic operations") stays
BEARER = re.compile(r"(?i)\b(bearer|token|basic)\s+(?=[A-Za-z._~+/=\-]*\d)[A-Za-z0-9._~+/=\-]{8,}")
URL_USERINFO = re.compile(r"([a-zA-Z][a-zA-Z0-9+.\-]*://)[^/\s@:]*(:[^/\s@]*)?@")
#: a flag that names a secret, then its value; the flag starts a word ("non-authoritative" is prose)
SECRET_FLAG = re.compile(r"(?i)(?<![\w\-])(--?[\w\-]*(?:token|secret|passw(?:or)?d|api[-_]?key|access[-_]?key"
                         r"|credential|auth)[\w\-]*)(=|\s+)(\"[^\"]*\"|'[^']*'|[^\s,;\"']+)")
#: a query parameter that carries a secret (``?access_token=…``, ``&sig=…``, ``?key=…``)
SECRET_QUERY = re.compile(r"(?i)([?&;][\w.\-]*(?:token|secret|passw(?:or)?d|key|credential|auth|sig|signature"
                          r"|session)[\w.\-]*=)([^&;#\s\"'<>]+)")
#: values of secret-named variables that are settings, not secrets (``TOKENIZERS_PARALLELISM``
#: aside, ``HF_HUB_DISABLE_IMPLICIT_TOKEN=true``): replacing them would blank out every "true"
NOT_SECRET_VALUES = frozenset({"true", "false", "yes", "no", "on", "off", "none", "null", "auto", "enabled",
                               "disabled"})
#: what this tool itself writes under a secret-named key about the secret (G8's ``token``):
#: a description, not the secret; redacted, a replay read "github_token = <redacted>"
ABOUT_A_SECRET = re.compile(r"(?i)(not set|unset|set|sent|not sent: .*)")
HOME = re.compile(r"(/home/|/Users/)([^/\s:\"']+)")

#: flags whose values a check reads (G6's memory caps, G10's parallelism); other flags' values are dropped
READ_FLAGS = frozenset({
    "--gpu-memory-utilization", "--gpu_memory_utilization", "--mem-fraction-static", "--mem_fraction_static",
    "--tensor-parallel-size", "--tensor_parallel_size", "-tp", "--tp", "--tp-size", "--tp_size",
    "--pipeline-parallel-size", "--pipeline_parallel_size", "-pp", "--nnodes", "--nproc-per-node",
    "--nproc_per_node", "--num-nodes", "--num_nodes", "--world-size", "--world_size", "-m", "serve",
})


def split_title(argv: Iterable[Any]) -> list[str]:
    """``argv`` with a process title in argv[0] (``setproctitle``, ``exec -a``:
    a whole command line, secrets included, with no NUL) split into words."""
    args = [str(a) for a in argv]
    if args and any(c.isspace() for c in args[0]):
        return (args[0].split() or [""]) + args[1:]
    return args


def program_word(text: str) -> str:
    """What may be shown of a program's name: its first word's base name, scrubbed."""
    words = str(text).split()
    return scrub(os.path.basename(words[0]) if words else "")[:80]


def reduce_argv(argv: Iterable[Any]) -> list[str]:
    """The program (its base name), then only flags: ``--flag`` names, with
    values kept only for :data:`READ_FLAGS` (``--a=b`` forms too)."""
    args = split_title(argv)
    out = [program_word(args[0])] if args else []
    words = iter(enumerate(args[1:], 1))
    for i, arg in words:
        name, eq, value = arg.partition("=")
        if i == 1 and arg == "serve":  # `vllm serve MODEL`: the verb, not the model
            out.append(arg)
        elif not arg.startswith("-") or arg == "-":
            continue
        elif name not in READ_FLAGS:
            out.append(name)
        elif eq:
            out.append(f"{name}={value}")
        elif (following := next(words, None)) is not None:
            out += [name, following[1]]
    return out


def scrub(value: str) -> str:
    """Secrets recognisable by their shape alone (tokens, URL credentials, secret flags and query values)."""
    value = URL_USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", value)
    value = TOKEN_SHAPES.sub(REDACTED, value)
    value = BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", value)
    value = SECRET_FLAG.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", value)
    return SECRET_QUERY.sub(lambda m: f"{m.group(1)}{REDACTED}", value)


def _is_secret_value(name: str, value: Any) -> bool:
    """A secret-named variable's value that is not short or settings-like (prose is full of those)."""
    if not (SECRET_NAME.search(name) and isinstance(value, str) and len(value) >= 4):
        return False
    return value.strip().lower() not in NOT_SECRET_VALUES and not value.strip().isdigit()


def _says_about(value: str) -> bool:
    return value.strip().lower() in NOT_SECRET_VALUES or ABOUT_A_SECRET.fullmatch(value.strip()) is not None


#: top folders of the system itself: a HOME in one (``HOME=/usr`` for a service account) is not a
#: personal folder, and rewriting it turned every ``/usr/lib/…`` of a capture into ``/home/<user>/lib/…``
SYSTEM_TOPS = frozenset({"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "proc", "sys", "dev",
                         "run", "boot"})


def personal_home(home: str) -> bool:
    """Whether ``HOME`` is a user's own folder (absolute, two levels deep, not root's, not the system's)."""
    parts = [p for p in home.split("/") if p]
    own = home.startswith("/") and len(parts) >= 2 and home.rstrip("/") != "/root"
    return own and parts[0] not in SYSTEM_TOPS


class Redactor:
    """One redaction pass, built from the environment the run saw; ``personal=False``
    keeps user and home folder names (a report on the user's own terminal)."""

    def __init__(self, env: Mapping[str, str] | None = None, *, user: str | None = None,
                 home: str | None = None, personal: bool = True):
        env = dict(os.environ if env is None else env)
        self.secrets = sorted({v for k, v in env.items() if _is_secret_value(k, v)}, key=len, reverse=True)
        self.user = user if user is not None else (env.get("USER") or env.get("LOGNAME") or "")
        self.home = home if home is not None else env.get("HOME", "")
        self.personal = personal
        # compiled once: a capture passes thousands of strings through text()
        named = personal and self.user and self.user != "root" and len(self.user) >= 3
        self._user = re.compile(rf"\b{re.escape(self.user)}\b") if named else None
        home = self.home.rstrip("/")
        # the home folder as a whole path component: /home/al never rewrites /home/alice
        self._home = re.compile(rf"{re.escape(home)}(?![^/\s:\"'])") if personal_home(home) else None

    def text(self, value: str) -> str:
        for secret in self.secrets:
            value = value.replace(secret, REDACTED)
        value = scrub(value)
        if not self.personal:
            return value
        if self._home is not None:
            value = self._home.sub(f"/home/{USER}", value)
        value = HOME.sub(lambda m: f"{m.group(1)}{USER}", value)
        if self._user is not None:
            value = self._user.sub(USER, value)
        return value

    def __call__(self, value: Any, key: str = "") -> Any:
        """Redact a JSON-plain structure; returns a new one."""
        if isinstance(value, str):
            if key and SECRET_NAME.search(key) and value and not _says_about(value):
                return REDACTED
            return self.text(value)
        if isinstance(value, Mapping):
            return {self.text(str(k)): self(v, str(k)) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            if key in ("cmdline", "argv") and all(isinstance(v, str) for v in value):
                return [self.text(a) for a in reduce_argv(value)]
            return [self(v) for v in value]
        return value


def outgoing(env: Mapping[str, str] | None = None) -> Redactor:
    """The last line of defence over what a run reports: secrets only."""
    return Redactor(env, personal=False)
