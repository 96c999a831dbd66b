"""Validated options: one :class:`Settings` per run, built from pytest's
command line and ini file, or from ``spark-preflight``'s flags and the
project's pytest configuration. Every bad value becomes an
:class:`OptionError` whose one-line message names the option.

Defaults come from the option table (``Option.default`` in
:mod:`pytest_dgx_spark.options`); :data:`PARSERS` maps each option kind to the one
function that validates its values.

Loaded only when the preflight runs (plain pytest runs never import it).
"""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_dgx_spark import catalog
from pytest_dgx_spark.options import BY_NAME, OPTIONS, Option, bad_ini
from pytest_dgx_spark.thresholds import THRESHOLDS, defaults

#: ``scheme:/user:pass@`` with one slash or more: a path option collapses a
#: pasted URL's ``//`` (``…/https:/u:pw@host``) before it is echoed
_PATH_USERINFO = re.compile(r"([a-zA-Z][a-zA-Z0-9+.\-]*:/+)[^/\s@:]*(:[^/\s@]*)?@")


class OptionError(ValueError):
    """A bad option value; the message names the option and is one line.

    The message echoes the value, so it is scrubbed of what looks like a
    secret (URL credentials, tokens, secret flags and query values): a URL
    with a password pasted into any option, not only ``--github-url``, must
    not come back in the usage line. It is one line on a terminal too: a
    control or newline in an ini value is escaped, never acted on."""

    def __init__(self, message: object = "") -> None:
        from pytest_dgx_spark.redact import REDACTED, scrub
        from pytest_dgx_spark.safe_text import visible

        text = _PATH_USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", str(message))
        super().__init__(visible(scrub(text)))


#: option name -> its default, read from the table (the one source)
_DEFAULT: dict[str, Any] = {o.name: o.default for o in OPTIONS}


@dataclass(frozen=True)
class Settings:
    """Validated options for one run, shared by the plugin and the CLI.

    One field per option, named like its ``dest`` without ``spark_``; every
    default is the option table's (tests/test_options.py holds them equal)."""

    strict: bool = _DEFAULT["strict"]
    gate: bool = _DEFAULT["gate"]
    report: Path | None = _DEFAULT["report"]
    only: tuple[str, ...] = _DEFAULT["only"]
    profile: str = _DEFAULT["profile"]
    timeout: float = _DEFAULT["timeout"]
    offline: bool = _DEFAULT["offline"]
    intrusive: bool = _DEFAULT["intrusive"]
    thermal_seconds: float = _DEFAULT["thermal-seconds"]
    workload_gb: float | None = _DEFAULT["workload-gb"]
    planned_bandwidth: float | None = _DEFAULT["planned-bandwidth"]
    playbook: str | None = _DEFAULT["playbook"]
    config: tuple[Path, ...] = _DEFAULT["config"]
    drop_caches: bool = _DEFAULT["drop-caches"]
    threshold: Mapping[str, float] = field(default_factory=lambda: dict(_DEFAULT["threshold"]))
    github_url: str = _DEFAULT["github-url"]
    tp_across_nodes: str = _DEFAULT["tp-across-nodes"]
    precision: str | None = _DEFAULT["precision"]
    capture: Path | None = _DEFAULT["capture"]
    replay: Path | None = _DEFAULT["replay"]
    rootdir: Path = field(default_factory=Path.cwd)
    #: where ``github_url`` came from: ``"default"``, ``"ini"`` (a config
    #: file: the checkout's own) or the command line (``"flag"``, ``"cli"``);
    #: G8 sends ``GITHUB_TOKEN`` to a host other than GitHub's only when the
    #: user gave it (issue 19, item 2)
    github_url_source: str = "default"

    @property
    def selected(self) -> tuple[str, ...]:
        """The checks enabled by ``--spark-only`` (all ten without it)."""
        return self.only or catalog.IDS

    def thresholds(self, profile: str) -> dict[str, float]:
        """Defaults for the resolved profile, with the user's overrides on top."""
        values = defaults(profile)
        values.update(self.threshold)
        return values

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for opt in OPTIONS:
            value = getattr(self, opt.dest[len("spark_") :])
            if isinstance(value, Path):
                value = str(value)
            elif isinstance(value, tuple):
                value = [str(v) for v in value]
            elif isinstance(value, Mapping):
                value = dict(value)
            if opt.name == "github-url" and isinstance(value, str):
                from pytest_dgx_spark.probes.http import redact_url

                value = redact_url(value)  # credentials in a URL must never reach a report
            out[opt.name] = value
        return out


# --------------------------------------------------------------------------- parsing


def _where(opt: Option, source: str) -> str:
    if source == "ini":
        return f"{opt.ini} (ini)"
    if source == "cli":
        return opt.cli_flag
    return opt.flag


def _parse_float(opt: Option, raw: Any, where: str) -> float:
    try:
        value = float(str(raw).strip())
    except ValueError:
        raise OptionError(f"{where}: expected a number, got {raw!r}") from None
    if math.isnan(value) or math.isinf(value):
        raise OptionError(f"{where}: expected a finite number, got {raw!r}")
    if opt.minimum is not None:
        if opt.exclusive_min and value <= opt.minimum:
            raise OptionError(f"{where}: must be > {opt.minimum:g}, got {raw!r}")
        if not opt.exclusive_min and value < opt.minimum:
            raise OptionError(f"{where}: must be >= {opt.minimum:g}, got {raw!r}")
    if opt.maximum is not None and value > opt.maximum:
        raise OptionError(f"{where}: must be <= {opt.maximum:g}, got {raw!r}")
    return value


def _split_list(raw: Any) -> list[str]:
    if isinstance(raw, (list, tuple)):
        parts: list[str] = []
        for item in raw:
            parts.extend(_split_list(item))
        return parts
    return [p.strip() for p in str(raw).replace(",", " ").split() if p.strip()]


def _parse_ids(raw: Any, where: str) -> tuple[str, ...]:
    ids: list[str] = []
    for part in _split_list(raw):
        cid = catalog.normalize_id(part)
        if cid is None:
            raise OptionError(f"{where}: {part!r} is not a check id (expected G1..G10, e.g. G1,G5)")
        if cid not in ids:
            ids.append(cid)
    if not ids:
        raise OptionError(f"{where}: expected check ids such as G1,G5, got {raw!r}")
    return tuple(sorted(ids, key=lambda c: catalog.BY_ID[c].number))


def _parse_pairs(raw: Any, where: str) -> dict[str, float]:
    out: dict[str, float] = {}
    items = raw if isinstance(raw, (list, tuple)) else [raw]
    for item in items:
        for part in str(item).replace(",", " ").split():
            name, sep, value = part.partition("=")
            name = name.strip()
            if not sep:
                raise OptionError(f"{where}: expected NAME=VALUE, got {part!r}")
            if name not in THRESHOLDS:
                known = ", ".join(sorted(THRESHOLDS))
                raise OptionError(f"{where}: unknown threshold {name!r} (known: {known})")
            try:
                number = float(value)
            except ValueError:
                raise OptionError(f"{where}: {name} needs a number, got {value!r}") from None
            if math.isnan(number) or math.isinf(number) or number < 0:
                raise OptionError(f"{where}: {name} must be a finite number >= 0, got {value!r}")
            out[name] = number
    return out


def _given_path(raw: Any, where: str, base: Path) -> tuple[str, Path]:
    """``(the text as given, its path)``: ``~`` expanded, relative to ``base``."""
    text = str(raw).strip()
    if not text:
        raise OptionError(f"{where}: expected a file path")
    if "\0" in text:  # os.stat() would raise ValueError: no file name holds one
        raise OptionError(f"{where}: {_shown(text)} holds a NUL byte; no file name can")
    path = Path(os.path.expanduser(text))
    return text, path if path.is_absolute() else base / path


def _parse_report_path(raw: Any, where: str, base: Path) -> Path:
    text, path = _given_path(raw, where, base)
    parent = path.parent
    if not parent.is_dir():
        raise OptionError(f"{where}: folder {str(parent)!r} does not exist")
    from pytest_dgx_spark import outfile

    kind = outfile.not_a_file(path)
    if kind is not None:  # the report is renamed over the path: never over a device or FIFO
        raise OptionError(f"{where}: {text!r} is {kind}, not a regular file; give a file path")
    try:  # what the write would refuse (a planted symlink, another user's file), said before the run
        outfile.check(path)
    except outfile.Refused as exc:
        raise OptionError(f"{where}: {text!r} refused: {exc.strerror}") from None
    except OSError as exc:
        raise OptionError(f"{where}: {text!r} cannot be written: {exc.strerror or exc}") from None
    # Try it: os.access() says yes to root on a read-only mount.
    import tempfile  # here, not at the top: only a --report pays for it

    try:
        with tempfile.TemporaryFile(dir=parent):
            pass
    except OSError as exc:
        raise OptionError(
            f"{where}: folder {str(parent)!r} is not writable ({exc.strerror or exc})"
        ) from None
    if path.exists() and not os.access(path, os.W_OK):
        raise OptionError(f"{where}: {text!r} is not writable")
    return path


def _parse_input_file(raw: Any, where: str, base: Path) -> Path:
    text, path = _given_path(raw, where, base)
    if not path.is_file():
        raise OptionError(f"{where}: {text!r} is not a file")
    return path


def _parse_config_paths(raw: Any, where: str, base: Path) -> tuple[Path, ...]:
    paths: list[Path] = []
    items = raw if isinstance(raw, (list, tuple)) else [raw]
    for item in items:
        if not str(item).strip():
            continue
        text, path = _given_path(item, where, base)
        if not path.exists():
            raise OptionError(f"{where}: {text!r} does not exist")
        paths.append(path)
    return tuple(paths)


def _parse_bool(opt: Option, raw: Any, where: str, base: Path) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("1", "true", "yes", "on", "y", "t"):  # pytest's own spellings too
        return True
    if text in ("0", "false", "no", "off", "n", "f"):
        return False
    raise OptionError(f"{where}: expected true or false, got {raw!r}")


def _parse_choice(opt: Option, raw: Any, where: str, base: Path) -> str:
    text = str(raw).strip().lower()
    if text not in opt.choices:
        raise OptionError(f"{where}: expected one of {', '.join(opt.choices)}, got {raw!r}")
    return text


def _parse_str(opt: Option, raw: Any, where: str, base: Path) -> str:
    text = str(raw).strip()
    if not text:
        raise OptionError(f"{where}: expected a value")
    return text


def _parse_name(opt: Option, raw: Any, where: str, base: Path) -> str:
    """A name matched without regard to case (a playbook)."""
    return _parse_str(opt, raw, where, base).lower()


def _parse_url(opt: Option, raw: Any, where: str, base: Path) -> str:
    text = _parse_str(opt, raw, where, base)
    from pytest_dgx_spark.probes.http import check_url

    why = check_url(text)
    if why:  # never the raw value: it may hold user:password@
        raise OptionError(f"{where}: {why}")
    return text


#: option kind -> the one parser of its values: (option, raw value, where, base folder) -> value
PARSERS: dict[str, Callable[[Option, Any, str, Path], Any]] = {
    "bool": _parse_bool,
    "float": lambda opt, raw, where, base: _parse_float(opt, raw, where),
    "str": _parse_str,
    "name": _parse_name,
    "url": _parse_url,
    "choice": _parse_choice,
    "ids": lambda opt, raw, where, base: _parse_ids(raw, where),
    "path": lambda opt, raw, where, base: _parse_report_path(raw, where, base),
    "paths": lambda opt, raw, where, base: _parse_config_paths(raw, where, base),
    "infile": lambda opt, raw, where, base: _parse_input_file(raw, where, base),
    "pairs": lambda opt, raw, where, base: _parse_pairs(raw, where),
}


def parse_value(opt: Option, raw: Any, source: str, base: Path) -> Any:
    """Validate one raw value (from argparse or ini) for ``opt``, by its kind.

    Relative paths are relative to ``base``: the invocation folder for a flag,
    the rootdir (where the ini file is) for an ini value.
    """
    where = _where(opt, source)
    try:
        return PARSERS[opt.kind](opt, raw, where, base)
    except OSError as exc:  # a path the system refuses to look at (ENAMETOOLONG, ELOOP, EACCES): one line
        shown = _shown(exc.filename) if exc.filename else "the path"
        raise OptionError(f"{where}: {shown}: {exc.strerror or exc}") from None


def _shown(text: Any, width: int = 80) -> str:
    """A given path as a usage line quotes it: repr'd, cut to ``width``
    characters (a 300-character name is the point of the error, not its text)."""
    text = str(text)
    return repr(text) if len(text) <= width else repr(text[: width - 1]) + "…"


def build_settings(
    lookup: Callable[[Option], tuple[Any, str] | None],
    *,
    base: Path,
    rootdir: Path | None = None,
) -> Settings:
    """Build :class:`Settings`; ``lookup(opt)`` returns ``(raw, source)`` or ``None``
    for "not given" (source is ``"flag"``, ``"cli"`` or ``"ini"``)."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for opt in OPTIONS:
        found = lookup(opt)
        if found is None:
            continue
        raw, source = found
        where = (rootdir or base) if source == "ini" else base
        value = parse_value(opt, raw, source, where)
        if source == "ini" and opt.kind == "path":
            _inside_rootdir(opt, raw, value, rootdir or base)
        values[opt.dest[len("spark_") :]] = value
        sources[opt.name] = source
    if "threshold" in values:
        values["threshold"] = dict(values["threshold"])
    if values.get("capture") and values.get("replay"):
        raise OptionError(
            f"{BY_NAME['capture'].flag} and {BY_NAME['replay'].flag} together: a replay reads no machine to capture"
        )
    _one_file_each(values, sources)
    if "github-url" in sources:
        values["github_url_source"] = sources["github-url"]
    return Settings(rootdir=rootdir or base, **values)


def _inside_rootdir(opt: Option, raw: Any, path: Path, rootdir: Path) -> None:
    """A report or capture path from a config file stays in the project.

    The config is the checkout's own: a downloaded project's
    ``spark_preflight_report = "~/.bashrc"`` replaced the user's ``.bashrc``
    with a report quoting names the project chose (issue 19, item 2). The
    folder is compared with symlinks resolved; a path elsewhere takes the
    command line, which is the user's."""
    root = os.path.realpath(rootdir)
    folder = os.path.realpath(path.parent)
    if os.path.commonpath([root, folder]) != root:
        raise OptionError(
            f"{_where(opt, 'ini')}: {str(raw).strip()!r} is outside the project ({root}); a path from a "
            f"config file stays inside it: give {opt.flag} on the command line to write elsewhere"
        )


def _one_file_each(values: Mapping[str, Any], sources: Mapping[str, str]) -> None:
    """``--report X --capture X``: the capture was written last and the
    report silently lost (issue 19, item 11); refused in one line."""
    report, capture = values.get("report"), values.get("capture")
    if report is None or capture is None:
        return
    same = os.path.abspath(report) == os.path.abspath(capture)
    try:
        same = same or os.path.samefile(report, capture)
    except OSError:  # not both there yet: the spelled paths decide
        pass
    if same:
        r, c = (_where(BY_NAME[n], sources[n]) for n in ("report", "capture"))
        raise OptionError(f"{r} and {c} name the same file ({report}): give each its own path")


def settings_from_pytest(config: Any) -> Settings:
    """CLI > ini > default; raises :class:`OptionError`."""
    base = Path(config.invocation_params.dir)

    def lookup(opt: Option) -> tuple[Any, str] | None:
        cli = config.getoption(opt.dest, None)
        if cli is not None:
            return cli, "flag"
        bad = bad_ini(config, opt.ini)  # pytest's own parsing of a bad ini value, with the key named
        if bad:
            raise OptionError(bad)
        ini = config.getini(opt.ini)
        if opt.kind == "bool":
            return (True, "ini") if ini else None
        if ini in (None, "", []):
            return None
        return ini, "ini"

    bad = bad_ini(config, "spark_preflight_enabled")  # with --spark-preflight given, still refuse it
    if bad:
        raise OptionError(bad)
    return build_settings(lookup, base=base, rootdir=Path(config.rootpath))


def settings_from_cli(
    ns: argparse.Namespace, ini: Mapping[str, Any], *, base: Path, rootdir: Path
) -> Settings:
    """CLI flags > ini values (read from the project's pytest config) > defaults."""

    def lookup(opt: Option) -> tuple[Any, str] | None:
        cli = getattr(ns, opt.dest, None)
        if cli is not None:
            return cli, "cli"
        raw = ini.get(opt.ini)
        if raw is None or raw == []:
            return None
        if isinstance(raw, str) and not raw.strip() and opt.kind not in ("bool", "float"):
            return None  # an empty text, list or path key is unset, as pytest reads it
        # an empty bool or number key is refused, as pytest's own parsing refuses it
        if opt.kind in ("paths", "pairs") and isinstance(raw, str):
            raw = [line for line in raw.splitlines() if line.strip()]
        return raw, "ini"

    return build_settings(lookup, base=base, rootdir=rootdir)

