"""The run ``spark-preflight`` and its subcommands set up: the project's pytest configuration (found as
pytest finds it, :mod:`.inifiles`), the settings from it and the flags, and the engine on this machine
or on a capture's."""

from __future__ import annotations

import argparse
import difflib
from pathlib import Path
from typing import Any

from pytest_dgx_spark import options
from pytest_dgx_spark.cli_output import say_error


class ConfigError(Exception):
    """The project's pytest configuration could not be read."""


def project_config(cwd: Path, inifile: str | None, rootdir: str | None) -> tuple[Path, dict[str, Any], list[str]]:
    """``(rootdir, spark_preflight_* values, notes)`` found by pytest's documented discovery
    (:mod:`.inifiles`), so both read the same file by the same rules; the values converted as its
    ``getini`` converts them."""
    from pytest_dgx_spark import inifiles  # lazy: not for --help
    from pytest_dgx_spark.settings import ini_value  # lazy: the preflight's validation, not --help's

    try:
        setup = inifiles.locate(cwd, inifile=inifile, rootdir=rootdir)
    except inifiles.ConfigError as exc:
        raise ConfigError(str(exc).strip().splitlines()[0]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the pytest configuration: {exc}") from None
    values: dict[str, Any] = {}
    notes: list[str] = []
    known = {o.ini: o for o in options.OPTIONS}
    for key, (value, mode) in setup.values.items():
        if key in known:
            values[key] = ini_value(known[key], value, mode, setup.inipath)
        elif key.startswith("spark_preflight") and key != "spark_preflight_enabled":
            near = difflib.get_close_matches(key, known, 1)
            notes.append(f"unknown config option: {key} in {setup.inipath}"
                         + (f" (did you mean {near[0]}?)" if near else ""))  # fmt: skip
    return setup.rootdir, values, notes


class Stop(Exception):
    """A reason not to run, said in one line (exit 2)."""


def settings_for(ns: argparse.Namespace) -> Any:
    """The run's settings, from the project's pytest configuration and the flags."""
    from pytest_dgx_spark.settings import OptionError, settings_from_cli  # lazy: the preflight machinery

    pytest_only = [o.cli_flag for o in options.OPTIONS if o.name in options.PYTEST_ONLY and getattr(ns, o.dest)]
    if pytest_only:
        raise Stop(f"{', '.join(pytest_only)} is a pytest option (it skips pytest tests when a check "
                    "FAILs); spark-preflight has no tests to skip: its exit code is 1 on a FAIL")  # fmt: skip
    try:
        cwd = Path.cwd()
    except OSError as exc:  # the shell's folder was deleted under it
        raise Stop(f"the current folder is gone ({exc.strerror or exc}: deleted under this shell?); cd into one") from None
    try:
        rootdir, ini, notes = project_config(cwd, ns.config_file, ns.rootdir)
        settings = settings_from_cli(ns, ini, base=cwd, rootdir=rootdir)
    except (ConfigError, OptionError) as exc:
        raise Stop(str(exc)) from None
    for note in notes:
        say_error(f"warning: {note}")
    return settings


def engine_for(ns: argparse.Namespace, settings: Any) -> Any:
    """The engine on this machine, or on a capture's (``--replay``: its checks and --strict)."""
    from pytest_dgx_spark import capture  # lazy: the preflight machinery
    from pytest_dgx_spark.engine import Engine  # lazy: as above
    from pytest_dgx_spark.probes.machine import Machine  # lazy: as above

    if (path := settings.replay) is None:
        return Engine(settings, Machine(timeout=settings.timeout, judged=settings.python))
    given = [o.cli_flag for o in options.OPTIONS if o.name in options.GATHER_ONLY and getattr(ns, o.dest) is not None]
    if given:
        say_error(f"note: {', '.join(given)} {'has' if len(given) == 1 else 'have'} no effect on a replay: "
                  "the capture's facts were gathered by the run that made it")  # fmt: skip
    try:
        replay = capture.load(path)
    except capture.CaptureError as exc:
        raise Stop(str(exc)) from None
    settings = capture.replay_settings(settings, replay)
    cap = replay.get("host") or {}
    # stdout stays the captured run's own lines; that they are a replay's is said beside them
    say_error(f"note: replay of {path.name} (captured {replay.get('created_at', '?')}, host "
              f"{cap.get('hostname', '?')}, {cap.get('gpu') or 'no GPU'}): this machine was not read")
    return Engine(settings, capture.ReplayMachine(replay), replay=replay)
