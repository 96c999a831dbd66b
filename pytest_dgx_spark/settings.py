"""Validated options: one :class:`Settings` per run, from pytest's or ``spark-preflight``'s flags
and the ini file; a bad value is an :class:`OptionError` naming the option (:mod:`.parsers` holds one
parser per kind). Only the preflight loads it.
"""

from __future__ import annotations

import argparse
import os
import shlex
from collections.abc import Callable, Mapping
from dataclasses import field
from pathlib import Path
from typing import Any

from pytest_dgx_spark import catalog, options
from pytest_dgx_spark.datadef import define
from pytest_dgx_spark.options import BY_NAME, OPTIONS, Option, bad_ini, ini_error
from pytest_dgx_spark.parsers import PARSERS, OptionError, given_as, parse_value, truth
from pytest_dgx_spark.thresholds import defaults

__all__ = ["PARSERS", "OptionError", "Settings", "build_settings", "ini_value", "parse_value",
           "settings_from_cli", "settings_from_pytest"]  # fmt: skip


options.values_dataclass()  # Values is a dataclass only once the preflight needs one (see there)


@define(frozen=True)
class Settings(options.Values):
    """The run's options: one typed attribute per :class:`~pytest_dgx_spark.options.Values` declaration
    (``settings.workload_gb``), each default the table's, plus the project folder and where ``github_url``
    came from."""

    rootdir: Path = field(default_factory=Path.cwd)
    #: where ``github_url`` came from: "default", "ini" (the checkout's own config), "flag" or "cli";
    #: G8 sends ``GITHUB_TOKEN`` to another host only when the user gave it (issue 19, item 2)
    github_url_source: str = "default"
    #: the checks of this run: every check (empty), or a replayed capture's own when its run had no
    #: ``--only``: a check newer than the capture was no part of the run a replay decides again
    known: tuple[str, ...] = ()

    @property
    def universe(self) -> tuple[str, ...]:
        """The checks this run has: the catalog's, or a replayed capture's (:attr:`known`)."""
        return self.known or catalog.IDS

    @property
    def selected(self) -> tuple[str, ...]:
        """The checks enabled by ``--spark-only`` (all of this run's without it)."""
        return self.only or self.universe

    def thresholds(self, profile: str) -> dict[str, float]:
        """Defaults for the resolved profile, with the user's overrides on top."""
        return {**defaults(profile), **self.threshold}

    def to_dict(self) -> dict[str, Any]:
        from pytest_dgx_spark.probes.http import redact_url  # lazy: http.client, for reports only

        out: dict[str, Any] = {}
        for opt in OPTIONS:
            value = getattr(self, opt.attr)
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
        values[opt.attr] = value
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
            f"{given_as(opt, 'ini')}: {str(raw).strip()!r} is outside the project ({root}); a path from a "
            f"config file stays inside it: give {opt.flag} on the command line to write elsewhere"
        )


def _one_file_each(values: Mapping[str, Any], sources: Mapping[str, str]) -> None:
    """``--report X --capture X`` silently lost the report (issue 19, item 11): each option of kind
    "path" (a file the run writes) needs its own file."""
    given = [(o.name, values[o.attr]) for o in OPTIONS if o.kind == "path" and values.get(o.attr) is not None]
    for i, (one, first) in enumerate(given):
        for other, second in given[i + 1 :]:
            same = os.path.abspath(first) == os.path.abspath(second)
            try:
                same = same or os.path.samefile(first, second)
            except OSError:  # not both there yet: the spelled paths decide
                pass
            if same:
                r, c = (given_as(BY_NAME[n], sources[n]) for n in (one, other))
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
            return truth(str(value).strip())
        if kind == "float":
            return float(value) if isinstance(value, str) else value
        if kind == "args":
            return shlex.split(value) if isinstance(value, str) else value
        if kind == "linelist" and isinstance(value, str):
            return [line.strip() for line in value.split("\n") if line.strip()]
        return value
    except (TypeError, ValueError) as exc:
        raise OptionError(ini_error(opt.ini, exc)) from None
