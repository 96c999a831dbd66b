"""The project's pytest configuration, found and read as pytest documents it ("Initialization:
determining rootdir and configfile", https://docs.pytest.org/en/stable/reference/customize.html), with
public parsers: ``iniconfig`` (pytest's own INI reader, a dependency of it) and ``tomllib``/``tomli``.
``spark-preflight`` reads its ``spark_preflight_*`` keys here, and the plugin checks here whether
``--spark-config PATH`` moved pytest's rootdir; tests/test_inifiles.py holds the answers to pytest's.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import field
from pathlib import Path
from typing import Any

import iniconfig

from pytest_dgx_spark.datadef import define

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

#: a key's value and how pytest parses it: "ini" (text, or a list from TOML) or "toml" (native types)
Values = dict[str, tuple[Any, str]]


class ConfigError(Exception):
    """The configuration cannot be read; the message is pytest's for the same file."""


@define(frozen=True)
class Setup:
    """What pytest would find: its rootdir, its configfile (``None``: none) and that file's keys."""

    rootdir: Path
    inipath: Path | None = None
    values: Values = field(default_factory=dict)


def _ini(path: Path) -> iniconfig.IniConfig:
    try:
        return iniconfig.IniConfig(str(path))
    except iniconfig.ParseError as exc:
        raise ConfigError(str(exc)) from None


def _toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        from pytest_dgx_spark.probes.configs import parse_error  # lazy: only for a broken file

        raise ConfigError(f"{path}: invalid TOML ({parse_error(exc)})") from None


def _section(ini: iniconfig.IniConfig, name: str) -> Values | None:
    return {k: (v, "ini") for k, v in ini[name].items()} if name in ini else None


def _root_table(path: Path, doc: dict[str, Any]) -> Values | None:
    """``[pytest]`` of a TOML file, native types; keys outside any table are pytest's usage error."""
    if "pytest" in doc:
        return {k: (v, "toml") for k, v in doc["pytest"].items()}
    top = [key for key, value in doc.items() if not isinstance(value, dict)]
    if top:
        raise ConfigError(f"{path}: pytest configuration must be under a [pytest] table (found top-level "
                          f"options: {', '.join(top)})")  # fmt: skip
    return None


def _tool_tables(path: Path, doc: dict[str, Any]) -> Values | None:
    """``[tool.pytest]`` (native types) or ``[tool.pytest.ini_options]`` (values as text), not both."""
    tool = doc.get("tool", {}).get("pytest", {})
    native = {k: v for k, v in tool.items() if k != "ini_options"}
    ini = tool.get("ini_options")
    if native and ini:
        raise ConfigError(f"{path}: Cannot use both [tool.pytest] (native TOML types) and "
                          "[tool.pytest.ini_options] (string-based INI format) simultaneously.")  # fmt: skip
    if native:
        return {k: (v, "toml") for k, v in native.items()}
    if ini is not None:
        return {k: (v if isinstance(v, list) else str(v), "ini") for k, v in ini.items()}
    return None


def _toml_file(path: Path) -> Values | None:
    return _root_table(path, _toml(path)) or {}  # the configfile even when empty


def _ini_file(path: Path) -> Values | None:
    return _section(_ini(path), "pytest") or {}  # the configfile even when empty


def _tox_ini(path: Path) -> Values | None:
    return _section(_ini(path), "pytest")


def _setup_cfg(path: Path) -> Values | None:
    ini = _ini(path)
    if "tool:pytest" not in ini and "pytest" in ini:
        raise ConfigError("[pytest] section in setup.cfg files is no longer supported, change to [tool:pytest] instead.")
    return _section(ini, "tool:pytest")


def _pyproject(path: Path) -> Values | None:
    return _tool_tables(path, _toml(path))


def _any_toml(path: Path) -> Values | None:
    """A TOML file given with ``-c``: ``[pytest]`` as pytest.toml's, or pyproject.toml's tables."""
    doc = _toml(path)
    found = _tool_tables(path, doc)
    if found is None:
        return _root_table(path, doc)
    if "pytest" in doc:
        raise ConfigError(f"{path}: Cannot use both [pytest] and [tool.pytest]/[tool.pytest.ini_options] in "
                          "the same file.")  # fmt: skip
    return found


#: the files pytest looks for in each folder, in its order, and how each is read (``None``: no config)
BY_NAME: dict[str, Callable[[Path], Values | None]] = {
    "pytest.toml": _toml_file, ".pytest.toml": _toml_file, "pytest.ini": _ini_file,
    ".pytest.ini": _ini_file, "pyproject.toml": _pyproject, "tox.ini": _tox_ini, "setup.cfg": _setup_cfg,
}  # fmt: skip
#: a ``-c`` file of another name, by its suffix
BY_SUFFIX: dict[str, Callable[[Path], Values | None]] = {".ini": _tox_ini, ".cfg": _setup_cfg, ".toml": _any_toml}


def _locate(folders: Iterable[Path]) -> Setup | None:
    """The first configfile in each folder and up; a pyproject.toml without pytest's tables only when
    nothing else is found."""
    pyproject: Path | None = None
    for folder in folders:
        for base in (folder, *folder.parents):
            for name, read in BY_NAME.items():
                path = base / name
                if not path.is_file():
                    continue
                pyproject = pyproject or (path if name == "pyproject.toml" else None)
                values = read(path)
                if values is not None:
                    return Setup(base, path, values)
    return Setup(pyproject.parent, pyproject) if pyproject is not None else None


def _ancestor(here: Path, paths: Sequence[Path]) -> Path:
    """The common ancestor of the paths that exist (their folder for a file), else ``here``."""
    found = [p for p in paths if p.exists()]
    if not found:
        return here
    common = Path(os.path.commonpath([str(p) for p in found]))
    return common.parent if common.is_file() else common


def _given(inifile: str, here: Path, dirs: Sequence[Path]) -> Setup:
    path = Path(os.path.abspath(inifile))
    if not path.exists():
        raise ConfigError(f"Config file '{path}' not found. Check your '-c/--config-file' option.")
    if path.is_dir():
        raise ConfigError(f"Config file '{path}' is a directory. Check your '-c/--config-file' option.")
    read = BY_NAME.get(path.name) or BY_SUFFIX.get(path.suffix)
    if read is None and path.is_file():
        raise ConfigError(f"Config file '{path}' has an unsupported format. Supported extensions are: "
                          f"{', '.join(sorted(BY_SUFFIX))}.")  # fmt: skip
    values = (read(path) if read is not None else None) or {}
    if path.is_file():
        return Setup(path.parent, path, values)
    root = _ancestor(here, dirs)  # /dev/null: no configuration, and no say on the rootdir
    return Setup(here if root == Path(root.anchor) else root, path, values)


def locate(here: Path, args: Sequence[str] = (), inifile: str | None = None, rootdir: str | None = None) -> Setup:
    """pytest's rootdir and configfile for a run from ``here`` with these positional ``args``, ``-c``
    and ``--rootdir`` (the documented algorithm, step by step); raises :class:`ConfigError`."""
    paths = [Path(os.path.abspath(here / str(a).split("::")[0])) for a in args if not str(a).startswith("-")]
    dirs = [p if p.is_dir() else p.parent for p in paths if p.exists()]
    if inifile:
        setup = _given(inifile, here, dirs)
    else:
        ancestor = _ancestor(here, dirs)
        found = _locate([ancestor])
        if found is None and rootdir is None:
            setup_py = next((d for d in (ancestor, *ancestor.parents) if (d / "setup.py").is_file()), None)
            if setup_py is not None:
                found = Setup(setup_py)
            elif dirs != [ancestor]:
                found = _locate(dirs)
            if found is None:
                root = _ancestor(here, [here, ancestor])
                found = Setup(ancestor if root == Path(root.anchor) else root)
        setup = found or Setup(ancestor)
    if rootdir:
        root = Path(os.path.abspath(os.path.expandvars(rootdir)))
        if not root.is_dir():
            raise ConfigError(f"Directory '{root}' not found. Check your '--rootdir' option.")
        setup = Setup(root, setup.inipath, setup.values)
    return setup
