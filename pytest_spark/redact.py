"""Take secrets and personal names out of anything written to a file.

A capture (``--spark-capture``) is meant to be attached to a public issue,
so everything in it passes through :class:`Redactor` first:

* values of environment variables whose names say they are secret
  (``HF_TOKEN``, ``GITHUB_TOKEN``, ``*_PASSWORD``, ``*_API_KEY`` …), wherever
  those values appear;
* strings shaped like well-known tokens (GitHub, Hugging Face, OpenAI,
  Slack, AWS access keys, ``Bearer …``);
* credentials in URLs (``https://user:pass@host`` keeps the host);
* the values of secret-looking flags in command lines (``--api-key X``,
  ``--hf_token=X``);
* the user's name and home folder (``/home/alice`` → ``/home/<user>``).

Command lines (any list under a ``cmdline``/``argv`` key) are cut to the
program and its flags: positional arguments and the values of flags no
check reads are dropped.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

REDACTED = "<redacted>"
USER = "<user>"

SECRET_NAME = re.compile(
    r"(TOKEN|SECRET|PASSW(OR)?D|PASSPHRASE|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIAL|AUTH(?!OR)|COOKIE)",
    re.IGNORECASE,
)
TOKEN_SHAPES = re.compile(
    r"\b("
    r"gh[pousr]_[A-Za-z0-9]{16,}"
    r"|github_pat_[A-Za-z0-9_]{20,}"
    r"|hf_[A-Za-z0-9]{16,}"
    r"|sk-[A-Za-z0-9_\-]{16,}"
    r"|xox[abposr]-[A-Za-z0-9\-]{10,}"
    r"|AKIA[0-9A-Z]{16}"
    r"|nvapi-[A-Za-z0-9_\-]{16,}"
    r")\b"
)
BEARER = re.compile(r"(?i)\b(bearer|token|basic)\s+[A-Za-z0-9._~+/=\-]{8,}")
URL_USERINFO = re.compile(r"([a-zA-Z][a-zA-Z0-9+.\-]*://)[^/\s@:]*(:[^/\s@]*)?@")
SECRET_FLAG = re.compile(
    r"(?i)(--?[\w\-]*(?:token|secret|passw(?:or)?d|api[-_]?key|access[-_]?key|credential|auth)[\w\-]*)"
    r"(=|\s+)(\S+)"
)
HOME = re.compile(r"(/home/|/Users/)([^/\s:\"']+)")

#: flags whose values a check reads (G6's memory caps, G10's parallelism); the
#: values of every other flag are dropped from a command line
READ_FLAGS = frozenset(
    {
        "--gpu-memory-utilization",
        "--gpu_memory_utilization",
        "--mem-fraction-static",
        "--mem_fraction_static",
        "--tensor-parallel-size",
        "--tensor_parallel_size",
        "-tp",
        "--tp",
        "--tp-size",
        "--tp_size",
        "--pipeline-parallel-size",
        "--pipeline_parallel_size",
        "-pp",
        "--nnodes",
        "--nproc-per-node",
        "--nproc_per_node",
        "--num-nodes",
        "--num_nodes",
        "--world-size",
        "--world_size",
        "-m",
        "serve",
    }
)


def reduce_argv(argv: Iterable[Any]) -> list[str]:
    """The program (its base name), then only flags: ``--flag`` names, with
    values kept only for :data:`READ_FLAGS` (``--a=b`` forms too)."""
    args = [str(a) for a in argv]
    if not args:
        return []
    out = [os.path.basename(args[0])]
    i = 1
    while i < len(args):
        arg = args[i]
        name, eq, value = arg.partition("=")
        if arg.startswith("-") and len(arg) > 1:
            if name in READ_FLAGS:
                if eq:
                    out.append(f"{name}={value}")
                elif i + 1 < len(args):
                    out += [name, args[i + 1]]
                    i += 1
            else:
                out.append(name)
        elif i == 1 and arg in ("serve", "-m"):  # `vllm serve MODEL`: the verb, not the model
            out.append(arg)
        i += 1
    return out


class Redactor:
    """One redaction pass, built from the environment the run saw."""

    def __init__(self, env: Mapping[str, str] | None = None, *, user: str | None = None, home: str | None = None):
        env = dict(os.environ if env is None else env)
        self.secrets = sorted(
            {v for k, v in env.items() if SECRET_NAME.search(k) and isinstance(v, str) and len(v) >= 4},
            key=len,
            reverse=True,
        )
        self.user = user if user is not None else (env.get("USER") or env.get("LOGNAME") or "")
        self.home = home if home is not None else env.get("HOME", "")
        # compiled once: a capture passes thousands of strings through text()
        named = self.user and self.user != "root" and len(self.user) >= 3
        self._user = re.compile(rf"\b{re.escape(self.user)}\b") if named else None

    def text(self, value: str) -> str:
        for secret in self.secrets:
            if secret in value:
                value = value.replace(secret, REDACTED)
        value = URL_USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", value)
        value = TOKEN_SHAPES.sub(REDACTED, value)
        value = BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", value)
        value = SECRET_FLAG.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", value)
        if self.home and self.home not in ("/", "/root") and len(self.home) > 1:
            value = value.replace(self.home, f"/home/{USER}")
        value = HOME.sub(lambda m: f"{m.group(1)}{USER}", value)
        if self._user is not None:
            value = self._user.sub(USER, value)
        return value

    def __call__(self, value: Any, key: str = "") -> Any:
        """Redact a JSON-plain structure; returns a new one."""
        if isinstance(value, str):
            if key and SECRET_NAME.search(key) and value:
                return REDACTED
            return self.text(value)
        if isinstance(value, Mapping):
            return {self.text(str(k)): self(v, str(k)) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            if key in ("cmdline", "argv") and all(isinstance(v, str) for v in value):
                return [self.text(a) for a in reduce_argv(value)]
            return [self(v) for v in value]
        return value
