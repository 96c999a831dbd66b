"""Capture a run to one file (``--spark-capture``), and read it back for a replay.

For each check, the facts its ``gather`` recorded (or why it crashed) and its result, every raw
probe answer, the host and the options, profile and thresholds in force, all redacted. A replay
decides the checks again with the pure ``evaluate``, touching no machine. JSON, gzipped as ``.gz``.
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_dgx_spark import __version__, catalog, outfile
from pytest_dgx_spark.model import SHORT_WIDTH, Result, Status
from pytest_dgx_spark.probes.store import MemoryStore
from pytest_dgx_spark.redact import Redactor
from pytest_dgx_spark.safe_text import plus_more, visible

SCHEMA = "pytest_spark.capture"
VERSION = 1
#: oldest capture schema this version still replays
OLDEST = 1
#: store keys that are not raw probe answers (the engine's own bookkeeping)
_NOT_PROBES = ("facts:", "result:")
#: raw answers left out: the process table holds every command line on the box (G6's facts keep what
#: G6 read, cut to programs and flags); the kernel log up to 100,000 lines (G4's facts keep its Xids)
_LEFT_OUT = ("processes", "kernel_log")


class CaptureError(Exception):
    """A capture that cannot be read or replayed; the message is one line."""


def build(*, results: Iterable[Any], store_items: Mapping[str, Any], host: Mapping[str, Any], profile: str,
          options: Mapping[str, Any], params: Mapping[str, Any]) -> dict[str, Any]:
    """The capture document (not yet redacted)."""
    by_id = {r.check_id: r for r in results}
    checks = {cid: {**(store_items.get(f"facts:{cid}") or {}), "result": r.to_dict()}
              for cid, r in by_id.items()}
    probes = {k: v for k, v in sorted(store_items.items())
              if not k.startswith(_NOT_PROBES) and k not in _LEFT_OUT}
    return {"schema": SCHEMA, "schema_version": VERSION,
            "tool": {"name": "pytest-dgx-spark", "version": __version__},
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "host": dict(host), "profile": profile,
            "options": dict(options), "params": dict(params), "checks": checks, "probes": probes}


def encode(document: Mapping[str, Any], path: Path, env: Mapping[str, str] | None = None) -> bytes:
    """Redacted JSON bytes, gzip-compressed when ``path`` ends in ``.gz``."""
    raw = (json.dumps(Redactor(env)(dict(document)), indent=1, default=str) + "\n").encode("utf-8")
    return gzip.compress(raw, compresslevel=6, mtime=0) if str(path).endswith(".gz") else raw


def write(path: Path, document: Mapping[str, Any], env: Mapping[str, str] | None = None) -> None:
    outfile.write_bytes(Path(path), encode(document, path, env))


#: the most JSON a capture may hold, compressed or not (real ones are well under 1 MiB)
MAX_BYTES = 64 << 20


def load(path: str | Path) -> dict[str, Any]:
    """Read and check a capture; :class:`CaptureError` says why not, in one line.
    At most :data:`MAX_BYTES` are read and decompressed (a gzip bomb stops there)."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise CaptureError(f"cannot read {path}: {exc.strerror or exc}") from None
    if raw[:2] == b"\x1f\x8b" and len(raw) <= MAX_BYTES:
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(raw)) as unpacked:
                raw = unpacked.read(MAX_BYTES + 1)
        except (OSError, EOFError, ValueError) as exc:
            raise CaptureError(f"{path}: not a readable gzip file ({exc})") from None
    if len(raw) > MAX_BYTES:
        raise CaptureError(f"{path}: more than {MAX_BYTES >> 20} MiB of JSON once decompressed "
                           "(a capture is well under 1 MiB); not read")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CaptureError(f"{path}: not JSON ({(str(exc) or type(exc).__name__).splitlines()[0]})") from None
    return check(doc, str(path))


def check(doc: Any, where: str = "capture") -> dict[str, Any]:
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise CaptureError(f"{where}: not a pytest-dgx-spark capture (no \"schema\": \"{SCHEMA}\")")
    version = doc.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise CaptureError(f"{where}: capture schema version missing or not a number ({version!r})")
    if version > VERSION:
        made_by = (doc.get("tool") or {}).get("version", "?")
        raise CaptureError(f"{where}: capture schema {version} (written by pytest-dgx-spark {made_by}) is "
                           f"newer than this pytest-dgx-spark {__version__} reads (up to {VERSION}); "
                           "upgrade to replay it")
    if version < OLDEST:
        raise CaptureError(f"{where}: capture schema {version} is older than this version replays "
                           f"(from {OLDEST}); capture the run again")
    if not isinstance(doc.get("checks"), dict):
        raise CaptureError(f"{where}: capture has no \"checks\" table")
    _check_tables(doc, where)
    return doc


def _check_tables(doc: Mapping[str, Any], where: str) -> None:
    """The tables a replay reads have the shape it reads: a hand-edited capture is refused naming the key."""

    def table(value: Any, key: str) -> Mapping[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise CaptureError(f"{where}: capture's \"{key}\" is not a table (a {type(value).__name__})")
        return value

    for key in ("tool", "host", "options", "params"):
        table(doc.get(key), key)
    overrides = table((doc.get("options") or {}).get("threshold"), "options.threshold")
    params = doc.get("params") or {}
    thresholds = table(params.get("thresholds"), "params.thresholds")
    table(params.get("options"), "params.options")
    for key, numbers in (("options.threshold", overrides), ("params.thresholds", thresholds)):
        bad = next((name for name, value in numbers.items()
                    if isinstance(value, bool) or not isinstance(value, (int, float))), None)
        if bad is not None:
            raise CaptureError(f"{where}: capture's {key}[{bad!r}] is not a number ({numbers[bad]!r})")


def replay_settings(settings: Any, doc: Mapping[str, Any]) -> Any:
    """The replay's own options, plus what the captured run chose that decides its
    verdict: its checks (without ``--only``) and ``--strict`` (a replay may add it).
    A captured run without ``--only`` ran every check it had: a check it does not hold
    is newer than it, no part of that run, and left out of the replay (not "not run")."""
    held = tuple(c for c in catalog.IDS if c in (doc.get("checks") or {}))
    options = doc.get("options") or {}
    strict = bool(settings.strict or options.get("strict"))
    if not options.get("only") and held:
        return dataclasses.replace(settings, known=held, strict=strict)
    only = settings.only or (held if set(held) != set(catalog.IDS) else ())
    return dataclasses.replace(settings, only=only, strict=strict)


def facts_mismatch(check_id: str, kind: type, facts: Mapping[str, Any], doc: Mapping[str, Any],
                   ) -> Result | None:
    """That check's SKIP when the capture's facts do not have exactly the fields of this version's
    ``Facts``: another version wrote them, and a missing field's default would change the verdict
    silently. A field named in ``ADDED`` or ``NOT_CAPTURED`` may be missing: its default is "not read"."""
    fields = [f.name for f in dataclasses.fields(kind)]
    added = {**getattr(kind, "ADDED", {}), **getattr(kind, "NOT_CAPTURED", {})}
    missing = [name for name in fields if name not in facts and name not in added]
    unknown = [str(name) for name in facts if name not in fields]
    if not missing and not unknown:
        return None
    made_by = (doc.get("tool") or {}).get("version", "?")
    origin = f"(schema {doc.get('schema_version', '?')}, written by {made_by})"
    again = "capture again with this version"

    def what(short: bool) -> str:
        parts = [f"lack {_names(missing, short)}"] if missing else []
        parts += [f"have unknown {_names(unknown, short)}"] if unknown else []
        return " and ".join(parts)

    summary = f"capture's {check_id} facts {what(False)} {origin}; {again}"
    headline = f"capture's {check_id} facts {what(True)}; {again}"
    fits = len(f"{check_id} SKIP: {summary}") <= SHORT_WIDTH
    details = [f"missing fact: {name}" for name in missing] + [f"unknown fact: {name}" for name in unknown]
    return Result(check_id, Status.SKIP, summary, details=details, headline="" if fits else headline)


def _names(names: Sequence[str], short: bool) -> str:
    """``'a', 'b', 'c'`` (all of them), or for the short line ``'a' (+2 more)``."""
    quoted = [f"'{name}'" for name in names]
    return plus_more(quoted[0], len(quoted)) if short else ", ".join(quoted)


class ReplayMachine:
    """The machine of a replay: the captured host identity and each check's captured facts (in its
    store, as a live run keeps them, for G4's chart and a multi-node report's nodes). Any probe a
    replay tries to run is a bug: it raises instead of reading this host."""

    def __init__(self, document: Mapping[str, Any]) -> None:
        self.document = document
        self.store = MemoryStore()
        for cid, entry in (document.get("checks") or {}).items():
            if isinstance(entry, Mapping) and isinstance(entry.get("facts"), Mapping):
                kept = {"facts": entry["facts"]}
                self.store.get_or_compute(f"facts:{cid}", lambda: kept)  # noqa: B023 - called at once
        self.env: dict[str, str] = {}
        self.timeout = 0.0

    def identity(self) -> dict[str, Any]:
        """The captured host, its strings escaped: a capture is a file anyone can edit, and its
        hostname reached JUnit properties and reports with raw U+202E, U+2028 and NEL."""
        host = self.document.get("host")
        return {visible(str(k)): visible(v) if isinstance(v, str) else v
                for k, v in (host.items() if isinstance(host, Mapping) else ())}  # fmt: skip

    def __getattr__(self, name: str) -> Any:
        raise CaptureError(f"a replay reads no machine (asked for {name!r})")
