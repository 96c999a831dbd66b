"""The one parser per option kind (:data:`PARSERS`): a raw value from a flag or an ini key becomes the
typed value a check reads, or an :class:`OptionError` naming the option in one line. Only the
preflight loads it (through :mod:`.settings`)."""

from __future__ import annotations

import math
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_dgx_spark import catalog, outfile
from pytest_dgx_spark.options import Option
from pytest_dgx_spark.redact import REDACTED, scrub
from pytest_dgx_spark.safe_text import visible
from pytest_dgx_spark.thresholds import THRESHOLDS

#: ``scheme:/user:pass@``: a path option collapses a pasted URL's ``//`` before it is echoed
_PATH_USERINFO = re.compile(r"([a-zA-Z][a-zA-Z0-9+.\-]*:/+)[^/\s@:]*(:[^/\s@]*)?@")


class OptionError(ValueError):
    """A bad option value, in one line naming the option, scrubbed of secrets and terminal controls."""

    def __init__(self, message: object = "") -> None:
        text = _PATH_USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", str(message))
        super().__init__(visible(scrub(text)))


def given_as(opt: Option, source: str) -> str:
    """The option as the user spelled it: ``--spark-<name>``, ``--<name>`` or ``spark_preflight_<name> (ini)``."""
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
            raise OptionError(f"{where}: {part!r} is not a check id (expected {catalog.SPAN}, e.g. G1,G5)")
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
        return raw if isinstance(raw, bool) else truth(str(raw).strip())
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
    where = given_as(opt, source)
    try:
        return PARSERS[opt.kind](opt, raw, where, base)
    except OSError as exc:  # a path the system refuses to look at (ENAMETOOLONG, ELOOP, EACCES): one line
        shown = _shown(exc.filename) if exc.filename else "the path"
        raise OptionError(f"{where}: {shown}: {exc.strerror or exc}") from None


def _shown(text: Any, width: int = 80) -> str:
    """A path as a usage line quotes it: repr'd, cut to ``width`` characters."""
    text = str(text)
    return repr(text) if len(text) <= width else repr(text[: width - 1]) + "…"


def truth(text: str) -> bool:
    """pytest's ``_strtobool`` (its spellings, any case)."""
    low = text.lower()
    if low in ("y", "yes", "t", "true", "on", "1"):
        return True
    if low in ("n", "no", "f", "false", "off", "0"):
        return False
    raise ValueError(f"invalid truth value {text!r}")
