"""One table of options, registered twice: as pytest options with ini twins
(``--spark-<name>`` / ``spark_preflight_<name>``) and as ``spark-preflight``
CLI flags (``--<name>``).

This module is imported on every pytest run (for ``pytest_addoption``), so it
holds only the table and the registration, and imports nothing of this
package. The table is the one source of every option's default and kind;
:mod:`pytest_dgx_spark.settings` (loaded only when the preflight runs) validates a
value by its option's kind and builds :class:`~pytest_dgx_spark.settings.Settings`,
whose defaults come from here. The dependency is one way: settings imports
options, never the reverse.
"""

from __future__ import annotations

import argparse
from types import MappingProxyType
from typing import Any

PROFILES = ("auto", "gb10", "generic")
TP_SEVERITIES = ("fail", "warn")
PRECISIONS = ("nvfp4", "fp8", "bf16")
DEFAULT_GITHUB_URL = "https://api.github.com"
#: upper bounds of the number options: far past any real run, short of one
#: that never ends (a probe timeout or G4 sample of an hour is already long)
MAX_SECONDS = 3600.0
#: 64 TiB: more memory than any single machine G3 could judge
MAX_WORKLOAD_GIB = 65536.0
#: 100 TB/s: some 20x the fastest GPU memory shipping (H200: 4.8 TB/s)
MAX_BANDWIDTH_GBPS = 100000.0

#: the value an option has when it is not given, by kind (unless the Option says otherwise)
EMPTY: dict[str, Any] = {"bool": False, "ids": (), "paths": (), "pairs": MappingProxyType({})}


class Option:
    """One option: its kind, help, default and bounds. A plain class, not a
    dataclass: this module is imported by every pytest run.

    ``kind`` picks the parser that validates a given value
    (``settings.PARSERS``); ``default`` is the value when none is given (the
    kind's empty value from :data:`EMPTY` when left out) and passes that parser.
    ``maximum`` bounds a number from above: a duration or size past any sane
    run (``--spark-thermal-seconds 1e12`` would sample until killed) is refused
    in one line instead."""

    __slots__ = ("choices", "default", "exclusive_min", "help", "kind", "maximum", "metavar", "minimum", "name")

    def __init__(
        self,
        name: str,
        kind: str,
        help: str,
        metavar: str | None = None,
        default: Any = None,
        choices: tuple[str, ...] = (),
        minimum: float | None = None,
        exclusive_min: bool = False,
        maximum: float | None = None,
    ) -> None:
        self.name = name  # "thermal-seconds"
        self.kind = kind  # bool | float | str | name | url | choice | ids | path | infile | paths | pairs
        self.help = help
        self.metavar = metavar
        self.default = EMPTY.get(kind) if default is None else default
        self.choices = choices
        self.minimum = minimum
        self.exclusive_min = exclusive_min
        self.maximum = maximum

    @property
    def flag(self) -> str:
        return f"--spark-{self.name}"

    @property
    def cli_flag(self) -> str:
        return f"--{self.name}"

    @property
    def dest(self) -> str:
        return "spark_" + self.name.replace("-", "_")

    @property
    def ini(self) -> str:
        return "spark_preflight_" + self.name.replace("-", "_")

    def __repr__(self) -> str:
        return f"Option({self.name!r}, {self.kind!r})"


OPTIONS: tuple[Option, ...] = (
    Option("strict", "bool", "WARN fails the test and blocks the verdict."),
    Option(
        "gate",
        "bool",
        "skip every non-preflight test with 'spark preflight G<n> failed' when a check FAILs.",
    ),
    Option(
        "report",
        "path",
        "write env-report.json (the seed's schema plus readings, host, timings) to PATH.",
        metavar="PATH",
    ),
    Option("only", "ids", "run only these checks, e.g. G1,G5.", metavar="IDS"),
    Option(
        "profile",
        "choice",
        "thresholds: GB10's when the GPU is GB10 (auto) or forced (gb10); "
        "generic derives them from the GPU found.",
        default="auto",
        choices=PROFILES,
    ),
    Option(
        "timeout",
        "float",
        "seconds every probe of the machine may take (default 10, at most 3600).",
        metavar="SECONDS",
        default=10.0,
        minimum=0.0,
        exclusive_min=True,
        maximum=MAX_SECONDS,
    ),
    Option("offline", "bool", "G8: do not contact GitHub (SKIP)."),
    Option(
        "intrusive",
        "bool",
        "allow probes that load the machine: G5's bandwidth copy, G10's network all-reduce.",
    ),
    Option(
        "thermal-seconds",
        "float",
        "G4: how long to sample temperature, power and clocks, in seconds (default 1, at most 3600).",
        metavar="N",
        default=1.0,
        minimum=0.0,
        maximum=MAX_SECONDS,
    ),
    Option(
        "workload-gb",
        "float",
        "G3: memory the planned workload needs, in GiB (free -g units).",
        metavar="N",
        minimum=0.0,
        exclusive_min=True,
        maximum=MAX_WORKLOAD_GIB,
    ),
    Option(
        "planned-bandwidth",
        "float",
        "G5: memory bandwidth the plan assumes, in GB/s.",
        metavar="GBPS",
        minimum=0.0,
        exclusive_min=True,
        maximum=MAX_BANDWIDTH_GBPS,
    ),
    Option(
        "playbook",
        "name",
        "G8: the dgx-spark-playbooks playbook being followed (e.g. unsloth, vllm, nccl).",
        metavar="NAME",
    ),
    Option(
        "config",
        "paths",
        "G10: a training/serving config to inspect (repeatable).",
        metavar="PATH",
    ),
    Option(
        "drop-caches",
        "bool",
        "G3: as root, sync and drop the page cache before reading headroom (never implied).",
    ),
    Option(
        "threshold",
        "pairs",
        "override a threshold, NAME=VALUE (repeatable); `spark-preflight --help` lists the names.",
        metavar="NAME=VALUE",
    ),
    Option(
        "github-url",
        "url",
        f"G8: GitHub REST base URL (a mirror or GitHub Enterprise; default {DEFAULT_GITHUB_URL}).",
        metavar="URL",
        default=DEFAULT_GITHUB_URL,
    ),
    Option(
        "tp-across-nodes",
        "choice",
        "G10: status for tensor parallelism across nodes (default fail; NVIDIA's own "
        "inference playbooks run TP=2 over two Sparks).",
        default="fail",
        choices=TP_SEVERITIES,
    ),
    Option(
        "precision",
        "choice",
        "G7: the precision the run trains or serves in (nvfp4, fp8 or bf16); nvfp4 asks G7 "
        "to find kernels built for sm_121a/sm_120f, fp8 and bf16 leave installed NVFP4 kernels unjudged.",
        choices=PRECISIONS,
    ),
    Option(
        "capture",
        "path",
        "write what the checks saw (facts, raw probe answers, options; secrets and user names "
        "redacted) to PATH, gzip when it ends in .gz; attach it to a bug report.",
        metavar="PATH",
    ),
    Option(
        "replay",
        "infile",
        "decide the checks again from a capture file, reading nothing of this machine.",
        metavar="PATH",
    ),
)

BY_NAME: dict[str, Option] = {o.name: o for o in OPTIONS}

#: options that change only what the checks gather from the machine; a replay
#: decides from facts gathered already, so they cannot change its lines
GATHER_ONLY = ("timeout", "offline", "intrusive", "thermal-seconds", "config", "drop-caches", "github-url")


def replay_ignores(given: list[str]) -> str | None:
    """One line naming the gathering options given to a replay (``given``:
    option names, spelled as the user typed them), else ``None``."""
    if not given:
        return None
    verb = "has" if len(given) == 1 else "have"
    return (
        f"{', '.join(given)} {verb} no effect on a replay: "
        "the capture's facts were gathered by the run that made it"
    )


# --------------------------------------------------------------------------- pytest


def add_pytest_options(parser: Any) -> None:
    """Register ``--spark-*`` options and ``spark_preflight_*`` ini keys."""
    group = parser.getgroup("dgx-spark", "DGX Spark preflight (pytest-dgx-spark)")
    group.addoption(
        "--spark-preflight",
        action="store_true",
        default=None,
        dest="spark_preflight",
        help="collect and run the ten DGX Spark preflight checks G1..G10.",
    )
    parser.addini(
        "spark_preflight_enabled",
        "run the DGX Spark preflight checks as if --spark-preflight was given",
        type="bool",
        default=False,
    )
    for opt in OPTIONS:
        if opt.kind == "bool":
            group.addoption(opt.flag, action="store_true", default=None, dest=opt.dest, help=opt.help)
            parser.addini(opt.ini, opt.help, type="bool", default=False)
        elif opt.kind in ("paths", "pairs"):
            group.addoption(
                opt.flag,
                action="append",
                default=None,
                dest=opt.dest,
                metavar=opt.metavar,
                help=opt.help,
            )
            parser.addini(opt.ini, opt.help + " (one per line)", type="linelist", default=[])
        else:
            group.addoption(
                opt.flag,
                action="store",
                default=None,
                dest=opt.dest,
                metavar=opt.metavar or opt.name.upper(),
                help=opt.help,
            )
            _add_value_ini(parser, opt)


def _add_value_ini(parser: Any, opt: Option) -> None:
    """A value key. pyproject.toml holds numbers and lists as such
    (``spark_preflight_timeout = 5``, ``spark_preflight_only = ["G1"]``); a
    "string" key warns about them on pytest 9 (an error from pytest 10), so
    numbers are "float" keys and ids "args" keys where this pytest has them."""
    kind = {"float": "float", "ids": "args"}.get(opt.kind)
    if kind is not None:
        try:
            parser.addini(opt.ini, opt.help, type=kind, default=None)
            return
        except (AssertionError, ValueError, TypeError):  # a pytest without this ini type
            pass
    parser.addini(opt.ini, opt.help, type="string", default="")


def preflight_enabled(config: Any) -> bool:
    if config.getoption("spark_preflight", None):
        return True
    return bad_ini(config, "spark_preflight_enabled") is None and bool(config.getini("spark_preflight_enabled"))


def bad_ini(config: Any, name: str) -> str | None:
    """One line naming ``name`` when pytest cannot read its ini value (``maybe``
    for a bool), else ``None``. pytest's own message ("invalid truth value
    'maybe'") does not say which key; pytest 9 raises UsageError, older ValueError."""
    try:
        config.getini(name)
    except Exception as exc:  # any unreadable value is the user's, reported by name
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        for prefix, expected in (
            ("invalid truth value ", "true or false"),
            ("could not convert string to float: ", "a number"),
        ):
            if text.startswith(prefix):
                return f"{name} (ini): expected {expected}, got {text.removeprefix(prefix)}"
        return f"{name} (ini): {text}"
    return None


# --------------------------------------------------------------------------- CLI


#: the CLI's own help where the pytest text does not fit a ``spark-preflight``
#: user (no tests to fail or skip, choices listed); the rest is shared
CLI_HELP: dict[str, str] = {
    "strict": "a WARN counts as a failure: the verdict is blocked and the exit code 1.",
    "report": "also write env-report.json (the seed's schema plus readings, host, timings) to PATH.",
    "only": "run only these checks, comma-separated, e.g. G1,G5 (default: all ten).",
    "profile": "thresholds: auto (default) uses GB10's on a GB10 and derives the rest from the GPU "
    "found; gb10 or generic forces one.",
    "offline": "G8: do not contact GitHub (G8 then SKIPs: playbook issues not checked).",
    "config": "G10: a training/serving config to inspect (repeatable); named configs replace the "
    "search of the project folder.",
    "threshold": "override a threshold, NAME=VALUE (repeatable); the names are listed below.",
    "tp-across-nodes": "G10: status for tensor parallelism across nodes: fail (default) or warn "
    "(NVIDIA's own inference playbooks run TP=2 over two Sparks).",
    "precision": "G7: the precision the run trains or serves in; nvfp4 asks G7 to find kernels built "
    "for sm_121a/sm_120f, fp8 and bf16 leave installed NVFP4 kernels unjudged.",
}

#: pytest-only options: the CLI refuses them with one line (see cli.py)
PYTEST_ONLY = frozenset({"gate"})


def add_cli_options(parser: argparse.ArgumentParser) -> None:
    """The same options for ``spark-preflight``, spelled ``--<name>``
    (``--spark-<name>`` is accepted too, so a flag quoted in a check's line
    works as written). Pytest-only options are parsed but hidden, so the CLI
    can refuse them by name."""
    for opt in OPTIONS:
        text = argparse.SUPPRESS if opt.name in PYTEST_ONLY else CLI_HELP.get(opt.name, opt.help)
        for flag, shown in ((opt.cli_flag, text), (opt.flag, argparse.SUPPRESS)):
            _add_cli_flag(parser, opt, flag, shown)


def _add_cli_flag(parser: argparse.ArgumentParser, opt: Option, flag: str, text: str) -> None:
    """One spelling of an option; the ``--spark-`` twin is accepted, not listed."""
    if opt.kind == "bool":
        parser.add_argument(flag, action="store_true", default=None, dest=opt.dest, help=text)
    elif opt.kind in ("paths", "pairs"):
        parser.add_argument(flag, action="append", default=None, dest=opt.dest, metavar=opt.metavar, help=text)
    else:
        choices = "{" + ",".join(opt.choices) + "}" if opt.choices else None
        metavar = choices or opt.metavar or opt.name.upper()
        parser.add_argument(flag, default=None, dest=opt.dest, metavar=metavar, help=text)
