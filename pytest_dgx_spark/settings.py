"""Validated options: one :class:`Settings` per run, from pytest's or ``spark-preflight``'s flags
and the ini file; a bad value is an :class:`OptionError` naming the option. Only the preflight loads it.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shlex
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_dgx_spark import catalog, outfile
from pytest_dgx_spark.options import BY_NAME, OPTIONS, Option, bad_ini, ini_error
from pytest_dgx_spark.redact import REDACTED, scrub
from pytest_dgx_spark.safe_text import visible
from pytest_dgx_spark.thresholds import THRESHOLDS, defaults

#: ``scheme:/user:pass@``: a path option collapses a pasted URL's ``//`` before it is echoed
_PATH_USERINFO = re.compile(r"([a-zA-Z][a-zA-Z0-9+.\-]*:/+)[^/\s@:]*(:[^/\s@]*)?@")


class OptionError(ValueError):
    """A bad option value, in one line naming the option, scrubbed of secrets and terminal controls."""

    def __init__(self, message: object = "") -> None:
        text = _PATH_USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", str(message))
        super().__init__(visible(scrub(text)))


_DEFAULT: dict[str, Any] = {o.name: o.default for o in OPTIONS}


@dataclass(frozen=True)
class Settings:
    """One field per option (its ``dest`` without ``spark_``), each default the option table's."""

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
    xid_class: Mapping[str, str] = field(default_factory=lambda: dict(_DEFAULT["xid-class"]))
    github_url: str = _DEFAULT["github-url"]
    tp_across_nodes: str = _DEFAULT["tp-across-nodes"]
    precision: str | None = _DEFAULT["precision"]
    known_bad: tuple[Path, ...] = _DEFAULT["known-bad"]
    capture: Path | None = _DEFAULT["capture"]
    replay: Path | None = _DEFAULT["replay"]
    diagnose: tuple[Path, ...] = _DEFAULT["diagnose"]
    signatures: Path | None = _DEFAULT["signatures"]
    python: str | None = _DEFAULT["python"]
    prometheus_textfile: Path | None = _DEFAULT["prometheus-textfile"]
    gunzip_max_mib: float = _DEFAULT["gunzip-max-mib"]
    rootdir: Path = field(default_factory=Path.cwd)
    #: where ``github_url`` came from: "default", "ini" (the checkout's own config), "flag" or "cli";
    #: G8 sends ``GITHUB_TOKEN`` to another host only when the user gave it (issue 19, item 2)
    github_url_source: str = "default"

    @property
    def selected(self) -> tuple[str, ...]:
        """The checks enabled by ``--spark-only`` (all ten without it)."""
        return self.only or catalog.IDS

    def thresholds(self, profile: str) -> dict[str, float]:
        """Defaults for the resolved profile, with the user's overrides on top."""
        return {**defaults(profile), **self.threshold}

    def to_dict(self) -> dict[str, Any]:
        from pytest_dgx_spark.probes.http import redact_url  # lazy: http.client, for reports only

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
                value = redact_url(value)  # credentials in a URL must never reach a report
            out[opt.name] = value
        return out


def _where(opt: Option, source: str) -> str:
    return {"ini": f"{opt.ini} (ini)", "cli": opt.cli_flag}.get(source, opt.flag)


def _parse_float(opt: Option, raw: Any, where: str, base: Path) -> float:
    try:
        value = float(str(raw).strip())
    except ValueError:
        raise OptionError(f"{where}: expected a number, got {raw!r}") from None
    if not math.isfinite(value):
        raise OptionError(f"{where}: expected a finite number, got {raw!r}")
    low = opt.minimum
    if low is not None and (value <= low if opt.exclusive_min else value < low):
        raise OptionError(f"{where}: must be {'>' if opt.exclusive_min else '>='} {low:g}, got {raw!r}")
    if opt.maximum is not None and value > opt.maximum:
        raise OptionError(f"{where}: must be <= {opt.maximum:g}, got {raw!r}")
    return value


def _items(raw: Any) -> list[str]:
    """A value or a list of them, split at commas and blanks."""
    parts = raw if isinstance(raw, (list, tuple)) else [raw]
    return [p for part in parts for p in str(part).replace(",", " ").split()]


def _parse_ids(opt: Option, raw: Any, where: str, base: Path) -> tuple[str, ...]:
    ids: set[str] = set()
    for part in _items(raw):
        cid = catalog.normalize_id(part)
        if cid is None:
            raise OptionError(f"{where}: {part!r} is not a check id (expected G1..G10, e.g. G1,G5)")
        ids.add(cid)
    if not ids:
        raise OptionError(f"{where}: expected check ids such as G1,G5, got {raw!r}")
    return tuple(sorted(ids, key=lambda c: catalog.BY_ID[c].number))


def _parse_pairs(opt: Option, raw: Any, where: str, base: Path) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in _items(raw):
        name, sep, value = part.partition("=")
        if not sep:
            raise OptionError(f"{where}: expected NAME=VALUE, got {part!r}")
        if name not in THRESHOLDS:
            raise OptionError(f"{where}: unknown threshold {name!r} (known: {', '.join(sorted(THRESHOLDS))})")
        try:
            number = float(value)
        except ValueError:
            raise OptionError(f"{where}: {name} needs a number, got {value!r}") from None
        if not math.isfinite(number) or number < 0:
            raise OptionError(f"{where}: {name} must be a finite number >= 0, got {value!r}")
        out[name] = number
    return out


#: the classes ``--spark-xid-class`` puts an Xid code in (G4 decides hardware FAIL, application WARN)
XID_CLASS_NAMES = ("hardware", "application", "ignore")


def _parse_xid_classes(opt: Option, raw: Any, where: str, base: Path) -> dict[str, str]:
    """``119=hardware 43=ignore`` -> ``{"119": "hardware", "43": "ignore"}`` (string keys: JSON)."""
    out: dict[str, str] = {}
    for part in _items(raw):
        code, sep, klass = part.partition("=")
        if not sep or not code.strip().isdigit() or len(code.strip()) > 6:
            raise OptionError(f"{where}: expected CODE=CLASS with an Xid number, got {part!r}")
        if klass.strip().lower() not in XID_CLASS_NAMES:
            raise OptionError(f"{where}: Xid {code} class must be one of {', '.join(XID_CLASS_NAMES)}, got {klass!r}")
        out[str(int(code))] = klass.strip().lower()
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


def _parse_report_path(opt: Option, raw: Any, where: str, base: Path) -> Path:
    """A file to write: what the write would refuse is said before the run."""
    text, path = _given_path(raw, where, base)
    parent = path.parent
    if not parent.is_dir():
        raise OptionError(f"{where}: folder {str(parent)!r} does not exist")
    kind = outfile.not_a_file(path)
    if kind is not None:  # the report is renamed over the path: never over a device or FIFO
        raise OptionError(f"{where}: {text!r} is {kind}, not a regular file; give a file path")
    try:  # what the write would refuse (a planted symlink, another user's file), said before the run
        outfile.check(path)
    except outfile.Refused as exc:
        raise OptionError(f"{where}: {text!r} refused: {exc.strerror}") from None
    except OSError as exc:
        raise OptionError(f"{where}: {text!r} cannot be written: {exc.strerror or exc}") from None
    try:  # tried, not os.access(): that says yes to root on a read-only mount
        with tempfile.TemporaryFile(dir=parent):
            pass
    except OSError as exc:
        raise OptionError(f"{where}: folder {str(parent)!r} is not writable ({exc.strerror or exc})") from None
    if path.exists() and not os.access(path, os.W_OK):
        raise OptionError(f"{where}: {text!r} is not writable")
    return path


def _parse_input_file(opt: Option, raw: Any, where: str, base: Path) -> Path:
    text, path = _given_path(raw, where, base)
    if path.is_file():
        return path
    raise OptionError(f"{where}: {text!r} is not a file")


#: how long ``--python``'s interpreter may take to say it is one (a cold container filesystem is slow)
PYTHON_ANSWER_S = 30.0
_PYTHON_PROBE = 'import sys; print("spark-python %d.%d %s" % (sys.version_info[0], sys.version_info[1], sys.executable))'


def _parse_python(opt: Option, raw: Any, where: str, base: Path) -> str:
    """An interpreter to judge (G1, G2, G7, G9): a path, or a name found on ``PATH``; started once, bounded,
    so a path that is not a runnable Python 3.8+ is one line before the run. The path is kept as given,
    not resolved: a venv's ``bin/python`` is a symlink whose target knows nothing of the venv."""
    from pytest_dgx_spark.probes.commands import find_program, run_command  # lazy: only when given

    text = str(raw).strip()
    if text and os.sep not in text and not text.startswith("~"):
        found = find_program(text)
        if found is None:
            raise OptionError(f"{where}: {text!r} is not on PATH; give the interpreter's path")
        path = Path(found)
    else:
        text, path = _given_path(raw, where, base)
    if not path.exists():
        raise OptionError(f"{where}: {text!r} is not a runnable Python: no such file")
    if path.is_dir():
        raise OptionError(f"{where}: {text!r} is a folder, not a runnable Python (give .../bin/python)")
    if not os.access(path, os.X_OK):
        raise OptionError(f"{where}: {text!r} is not a runnable Python: not executable")
    ran = run_command([str(path), "-c", _PYTHON_PROBE], timeout=PYTHON_ANSWER_S)
    said = ran.stdout.strip().splitlines()[-1:] if ran.ok else []
    words = said[0].split() if said else []
    if not ran.ok or len(words) < 2 or words[0] != "spark-python":
        why = ran.describe() if not ran.ok else "it did not answer as Python does"
        raise OptionError(f"{where}: {text!r} is not a runnable Python: {visible(why)}")
    major, _, minor = words[1].partition(".")
    if (int(major), int(minor or 0)) < (3, 8):
        raise OptionError(f"{where}: {text!r} is Python {words[1]}; the package scan needs Python 3.8 or later")
    return str(path)


def _given_paths(raw: Any) -> list[Any]:
    """Each non-empty item of a repeatable path option (one value or a list)."""
    return [item for item in (raw if isinstance(raw, (list, tuple)) else [raw]) if str(item).strip()]


def _parse_config_paths(opt: Option, raw: Any, where: str, base: Path) -> tuple[Path, ...]:
    paths: list[Path] = []
    for text, path in (_given_path(item, where, base) for item in _given_paths(raw)):
        if not path.exists():
            raise OptionError(f"{where}: {text!r} does not exist")
        paths.append(path)
    return tuple(paths)


def _parse_known_bad(opt: Option, raw: Any, where: str, base: Path) -> tuple[Path, ...]:
    """Known-bad files (G1): each read and checked now, so a typo in one stops the run in one
    line naming the file and the entry, not a G1 that silently ignores it."""
    from pytest_dgx_spark.known_bad import KnownBadError, load  # lazy: only when the option is given

    paths: list[Path] = []
    for item in _given_paths(raw):
        paths.append(_parse_input_file(opt, item, where, base))
        try:
            load(paths[-1])
        except KnownBadError as exc:
            raise OptionError(f"{where}: {exc}") from None
    return tuple(paths)


def _parse_bool(opt: Option, raw: Any, where: str, base: Path) -> bool:
    try:
        return raw if isinstance(raw, bool) else _truth(str(raw).strip())
    except ValueError:
        raise OptionError(f"{where}: expected true or false, got {raw!r}") from None


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


def _parse_url(opt: Option, raw: Any, where: str, base: Path) -> str:
    from pytest_dgx_spark.probes.http import check_url  # lazy: http.client, only for a given URL

    text = _parse_str(opt, raw, where, base)
    why = check_url(text)
    if why:  # never the raw value: it may hold user:password@
        raise OptionError(f"{where}: {why}")
    return text


#: option kind -> the one parser of its values: (option, raw value, where, base folder) -> value
PARSERS: dict[str, Callable[[Option, Any, str, Path], Any]] = {
    "bool": _parse_bool,
    "float": _parse_float,
    "str": _parse_str,
    "name": lambda opt, raw, where, base: _parse_str(opt, raw, where, base).lower(),
    "url": _parse_url,
    "choice": _parse_choice,
    "ids": _parse_ids,
    "path": _parse_report_path,
    "paths": _parse_config_paths,
    "datafiles": _parse_known_bad,
    "infile": _parse_input_file,
    "python": _parse_python,
    "pairs": _parse_pairs,
    "xid-classes": _parse_xid_classes,
}


def parse_value(opt: Option, raw: Any, source: str, base: Path) -> Any:
    """Validate one raw value for ``opt``; a relative path is relative to ``base``."""
    where = _where(opt, source)
    try:
        return PARSERS[opt.kind](opt, raw, where, base)
    except OSError as exc:  # a path the system refuses to look at (ENAMETOOLONG, ELOOP, EACCES): one line
        shown = _shown(exc.filename) if exc.filename else "the path"
        raise OptionError(f"{where}: {shown}: {exc.strerror or exc}") from None


def _shown(text: Any, width: int = 80) -> str:
    """A path as a usage line quotes it: repr'd, cut to ``width`` characters."""
    text = str(text)
    return repr(text) if len(text) <= width else repr(text[: width - 1]) + "…"


def build_settings(lookup: Callable[[Option], tuple[Any, str] | None], *, base: Path, rootdir: Path | None = None) -> Settings:
    """Validate every given option; ``lookup(opt)``: ``(raw, "flag", "cli" or "ini")`` or ``None``."""
    root = rootdir or base
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for opt in OPTIONS:
        found = lookup(opt)
        if found is None:
            continue
        raw, source = found
        value = parse_value(opt, raw, source, root if source == "ini" else base)
        if source == "ini" and opt.kind == "path":
            _inside_rootdir(opt, raw, value, root)
        values[opt.dest[len("spark_") :]] = value
        sources[opt.name] = source
    if values.get("capture") and values.get("replay"):
        c, r = BY_NAME["capture"].flag, BY_NAME["replay"].flag
        raise OptionError(f"{c} and {r} together: a replay reads no machine to capture")
    _one_file_each(values, sources)
    if "github-url" in sources:
        values["github_url_source"] = sources["github-url"]
    return Settings(rootdir=root, **values)


def _inside_rootdir(opt: Option, raw: Any, path: Path, rootdir: Path) -> None:
    """A report or capture path from a config file stays in the project: a downloaded project's
    ``spark_preflight_report = "~/.bashrc"`` replaced the user's ``.bashrc`` (issue 19, item 2)."""
    root = os.path.realpath(rootdir)
    if os.path.commonpath([root, os.path.realpath(path.parent)]) != root:
        raise OptionError(
            f"{_where(opt, 'ini')}: {str(raw).strip()!r} is outside the project ({root}); a path from a "
            f"config file stays inside it: give {opt.flag} on the command line to write elsewhere"
        )


#: the options that each write a file of the run
_OUT_FILES = ("report", "capture", "prometheus-textfile")


def _one_file_each(values: Mapping[str, Any], sources: Mapping[str, str]) -> None:
    """``--report X --capture X`` silently lost the report (issue 19, item 11)."""
    given = [(n, values[n.replace("-", "_")]) for n in _OUT_FILES if values.get(n.replace("-", "_")) is not None]
    for i, (one, first) in enumerate(given):
        for other, second in given[i + 1 :]:
            same = os.path.abspath(first) == os.path.abspath(second)
            try:
                same = same or os.path.samefile(first, second)
            except OSError:  # not both there yet: the spelled paths decide
                pass
            if same:
                r, c = (_where(BY_NAME[n], sources[n]) for n in (one, other))
                raise OptionError(f"{r} and {c} name the same file ({first}): give each its own path")


def _from(opt: Option, given: Any, source: str, ini: Any) -> tuple[Any, str] | None:
    """A flag, else the ini value as pytest's ``getini`` gives it (an unset bool False, a value empty)."""
    if given is not None:
        return given, source
    if opt.kind == "bool":
        return (True, "ini") if ini else None
    return None if ini in (None, "", []) else (ini, "ini")


def settings_from_pytest(config: Any) -> Settings:
    """Flag > ini > default; raises :class:`OptionError`."""

    def lookup(opt: Option) -> tuple[Any, str] | None:
        given = config.getoption(opt.dest, None)
        if given is None and (bad := bad_ini(config, opt.ini)):  # the key named, not pytest's bare text
            raise OptionError(bad)
        return _from(opt, given, "flag", None if given is not None else config.getini(opt.ini))

    if bad := bad_ini(config, "spark_preflight_enabled"):  # with --spark-preflight given, still refuse it
        raise OptionError(bad)
    return build_settings(lookup, base=Path(config.invocation_params.dir), rootdir=Path(config.rootpath))


def settings_from_cli(ns: argparse.Namespace, ini: Mapping[str, Any], *, base: Path, rootdir: Path) -> Settings:
    """Flag > ini > default, ``ini`` holding what :func:`ini_value` read."""
    return build_settings(
        lambda opt: _from(opt, getattr(ns, opt.dest, None), "cli", ini.get(opt.ini)), base=base, rootdir=rootdir
    )


def _truth(text: str) -> bool:
    """pytest's ``_strtobool`` (its spellings, any case)."""
    low = text.lower()
    if low in ("y", "yes", "t", "true", "on", "1"):
        return True
    if low in ("n", "no", "f", "false", "off", "0"):
        return False
    raise ValueError(f"invalid truth value {text!r}")


def ini_value(opt: Option, value: Any, mode: str, inipath: Path | None) -> Any:
    """A ``spark_preflight_*`` value as pytest's ``getini`` converts it for the key's type: from text
    in "ini" mode, type-checked in "toml" mode (``pytest.toml``, ``[tool.pytest]``)."""
    kind = opt.ini_type
    try:
        if mode == "toml":
            expected = {"bool": (bool,), "float": (float, int), "string": (str,)}.get(kind, (list,))
            if not isinstance(value, expected) or (kind == "float" and isinstance(value, bool)):
                what = {"args": "a list for type 'args'", "linelist": "a list for type 'linelist'"}
                raise TypeError(f"{inipath}: config option '{opt.ini}' expects {what.get(kind, 'a ' + kind)}, "
                                f"got {type(value).__name__}: {value!r}")  # fmt: skip
            if isinstance(value, list) and not all(isinstance(v, str) for v in value):
                raise TypeError(f"{inipath}: config option '{opt.ini}' expects a list of strings")
            return value
        if kind == "bool":
            return _truth(str(value).strip())
        if kind == "float":
            return float(value) if isinstance(value, str) else value
        if kind == "args":
            return shlex.split(value) if isinstance(value, str) else value
        if kind == "linelist" and isinstance(value, str):
            return [line.strip() for line in value.split("\n") if line.strip()]
        return value
    except (TypeError, ValueError) as exc:
        raise OptionError(ini_error(opt.ini, exc)) from None
