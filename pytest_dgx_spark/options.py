"""The option table: :class:`Values` declares every option once, as an annotated attribute (its
type, for mypy and :class:`~pytest_dgx_spark.settings.Settings`) holding an :class:`Option` (every
other fact about it), registered as pytest options with ini twins (``--spark-<name>`` /
``spark_preflight_<name>``) and as ``spark-preflight`` flags (``--<name>``). Every pytest run imports
it, so it holds only the table and the registration: :mod:`.parsers` validates values and
:mod:`.settings` holds them."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ParamSpec

from pytest_dgx_spark import catalog

if TYPE_CHECKING:  # pragma: no cover - mypy sees Values as the dataclass values_dataclass() makes it
    from dataclasses import dataclass as lazy_dataclass
    from pathlib import Path
else:

    def lazy_dataclass(**_: Any) -> Callable[[type], type]:
        return lambda cls: cls


DEFAULT_GITHUB_URL = "https://api.github.com"
#: upper bounds: past any real run, short of one that never ends
MAX_SECONDS = 3600.0
MAX_WORKLOAD_GIB = 65536.0  # 64 TiB: more than any one machine G3 could judge
MAX_BANDWIDTH_GBPS = 100000.0  # some 20x the fastest GPU memory shipping
MAX_GUNZIP_MIB = 1048576.0  # 1 TiB of text: no log; a limit the user raises on purpose
#: diagnose reads this much of a .gz log's text: a log of ~20M lines, some 20 s; a bomb stops here
DEFAULT_GUNZIP_MIB = 2048.0

#: the value of an option not given, by kind (unless the Option says otherwise)
EMPTY: dict[str, Any] = {"bool": False, "ids": (), "paths": (), "datafiles": (), "pairs": MappingProxyType({}),
                         "xid-classes": MappingProxyType({})}
#: option kind -> the pytest ini type of its ``spark_preflight_*`` key
INI_TYPES = {"bool": "bool", "float": "float", "ids": "args", "paths": "linelist", "datafiles": "linelist",
             "pairs": "linelist", "xid-classes": "linelist"}
#: kinds given once per value (``--spark-config=A --spark-config=B``)
REPEATABLE = ("paths", "datafiles", "pairs", "xid-classes")
#: ``Option.cli`` -> the ``spark-preflight`` commands whose ``--help`` lists the option ("": the preflight).
#: Every option but a "pytest-only" one is parsed by both (the CLI refuses that one by name, and the
#: preflight a "diagnose" one: it reads logs); "hidden" is parsed, never listed (diagnose's LOG)
CLI_LISTED: dict[str, tuple[str, ...]] = {"preflight": ("",), "preflight+diagnose": ("", "diagnose"),
                                          "diagnose": ("diagnose",), "hidden": (), "pytest-only": ()}


class Option:
    """Every fact about one option. ``kind`` picks its parser (``parsers.PARSERS``): bool,
    float, str, name, url, choice, ids, path, infile, python, paths, datafiles, pairs or xid-classes;
    ``maximum`` refuses a duration or size past any sane run in one line. ``cli_help``: the
    ``spark-preflight`` help where the pytest text does not fit; ``cli``: a :data:`CLI_LISTED` key;
    ``gather_only``: it changes only what is gathered (a replay's facts were gathered already);
    ``param``: a check's ``evaluate`` reads it (``Params.option``); ``watch``: ``spark-preflight watch``
    takes it too. ``name`` is the attribute's in :class:`Values` (``-`` for ``_``)."""

    __slots__ = ("attr", "choices", "cli", "cli_flag", "cli_help", "default", "dest", "exclusive_min", "flag",
                 "gather_only", "group", "help", "ini", "ini_type", "kind", "maximum", "metavar", "minimum",
                 "name", "param", "watch")  # fmt: skip

    def __init__(self, kind: str, group: str, help: str, metavar: str | None = None, default: Any = None,
                 choices: tuple[str, ...] = (), minimum: float | None = None, exclusive_min: bool = False,
                 maximum: float | None = None, *, name: str = "", cli_help: str | None = None,
                 cli: str = "preflight", gather_only: bool = False, param: bool = False,
                 watch: bool = False) -> None:  # fmt: skip
        if cli not in CLI_LISTED:
            raise ValueError(f"Option cli={cli!r}: one of {', '.join(CLI_LISTED)}")
        self.kind, self.group, self.help, self.metavar, self.choices = kind, group, help, metavar, choices
        self.default = EMPTY.get(kind) if default is None else default
        self.minimum, self.exclusive_min, self.maximum = minimum, exclusive_min, maximum
        self.cli_help, self.cli, self.gather_only = cli_help, cli, gather_only
        self.param, self.watch = param, watch
        self.ini_type = INI_TYPES.get(kind, "string")
        self.named(name)

    def named(self, name: str) -> Option:
        """Its name and every spelling derived from it: ``attr`` (a ``Settings`` attribute), the flags,
        the argparse ``dest`` and the ini key."""
        self.name, self.attr = name, name.replace("-", "_")
        self.flag, self.cli_flag = f"--spark-{name}", f"--{name}"
        self.dest, self.ini = "spark_" + self.attr, "spark_preflight_" + self.attr
        return self

    @property
    def cli_text(self) -> str:
        """Its help in ``spark-preflight --help``."""
        return self.cli_help or self.help

    def __repr__(self) -> str:
        return f"Option({self.name!r}, {self.kind!r})"


_P = ParamSpec("_P")


def _as_field(option: Callable[_P, Option]) -> Callable[_P, Any]:
    def declare(*args: _P.args, **kwargs: _P.kwargs) -> Any:
        """One option, declared as a field of :class:`Values` (a mapping's default a new dict per run)."""
        opt = option(*args, **kwargs)
        if isinstance(opt.default, Mapping):
            return dataclasses.field(default_factory=dict, metadata={"option": opt})
        return dataclasses.field(default=opt.default, metadata={"option": opt})

    return declare


#: ``declare(kind, group, help, ...)``: :class:`Option`'s arguments, in a :class:`Values` attribute
declare = _as_field(Option)

#: the CLI's help groups, in order (``--help``)
GROUPS = {"run": "what to check", "rules": "what counts as bad", "probe": "how the machine is probed",
          "files": "output and files"}  # fmt: skip


# fmt: off
@lazy_dataclass(frozen=True)
class Values:
    """The option table: one attribute per option, in ``--help`` order; its annotation is the type of
    its parsed value, its :func:`declare` every other fact. Adding an option is adding one here (then
    reading it, in a check, and testing it): pytest's flag and ini key, the CLI's flag, ``Settings``,
    a replay's note and ``Params`` all follow from the declaration."""

    strict: bool = declare(
        "bool", "run", "WARN fails the test and blocks the verdict.", param=True,
        cli_help="a WARN counts as a failure: the verdict is blocked and the exit code 1.")
    gate: bool = declare(
        "bool", "run", "skip every non-preflight test with 'spark preflight G<n> failed' when a check FAILs.",
        cli="pytest-only")
    report: Path | None = declare(
        "path", "files", "write env-report.json (the seed's schema plus readings, host, timings) to PATH.",
        metavar="PATH", cli="preflight+diagnose",
        cli_help="also write env-report.json (the seed's schema plus readings, host, timings) to PATH.")
    only: tuple[str, ...] = declare(
        "ids", "run", "run only these checks, e.g. G1,G5.", metavar="IDS",
        cli_help=f"run only these checks, comma-separated, e.g. G1,G5 (default: all {catalog.HOW_MANY}).")
    profile: str = declare(
        "choice", "run", "thresholds: GB10's when the GPU is GB10 (auto) or forced (gb10); generic derives "
        "them from the GPU found.", default="auto", choices=("auto", "gb10", "generic"),
        cli_help="thresholds: auto (default) uses GB10's on a GB10 and derives the rest from the GPU found; "
        "gb10 or generic forces one.")
    timeout: float = declare(
        "float", "probe", "seconds every probe of the machine may take (default 10, at most 3600).",
        metavar="SECONDS", default=10.0, minimum=0.0, exclusive_min=True, maximum=MAX_SECONDS,
        cli="preflight+diagnose", gather_only=True)
    offline: bool = declare(
        "bool", "probe", "G8: do not contact GitHub (SKIP).", gather_only=True, param=True,
        cli_help="G8: do not contact GitHub (G8 then SKIPs: playbook issues not checked).")
    intrusive: bool = declare(
        "bool", "probe", "allow probes that load the machine: G5's bandwidth copy, G10's network all-reduce.",
        gather_only=True, param=True)
    thermal_seconds: float = declare(
        "float", "probe", "G4: how long to sample temperature, power and clocks, in seconds (default 1, at "
        "most 3600).", metavar="N", default=1.0, minimum=0.0, maximum=MAX_SECONDS, gather_only=True)
    workload_gb: float | None = declare(
        "float", "run", "G3: memory the planned workload needs, in GiB (free -g units).", metavar="N",
        minimum=0.0, exclusive_min=True, maximum=MAX_WORKLOAD_GIB, param=True, watch=True)
    planned_bandwidth: float | None = declare(
        "float", "run", "G5: memory bandwidth the plan assumes, in GB/s.", metavar="GBPS", minimum=0.0,
        exclusive_min=True, maximum=MAX_BANDWIDTH_GBPS, param=True)
    playbook: str | None = declare(
        "name", "run", "G8: the dgx-spark-playbooks playbook being followed (e.g. unsloth, vllm, nccl).",
        metavar="NAME", param=True)
    config: tuple[Path, ...] = declare(
        "paths", "run", "G10: a training/serving config to inspect (repeatable).", metavar="PATH",
        gather_only=True,
        cli_help="G10: a training/serving config to inspect (repeatable); named configs replace the search "
        "of the project folder.")
    drop_caches: bool = declare(
        "bool", "probe", "G3: as root, sync and drop the page cache before reading headroom (never implied).",
        gather_only=True)
    threshold: Mapping[str, float] = declare(
        "pairs", "rules", "override a threshold, NAME=VALUE (repeatable); `spark-preflight "
        "--help-thresholds` lists the names.", metavar="NAME=VALUE", watch=True,
        cli_help="override a threshold, NAME=VALUE (repeatable); --help-thresholds lists the names.")
    xid_class: Mapping[str, str] = declare(
        "xid-classes", "rules", "G4: put Xid codes in a class, CODE=hardware|application|ignore "
        "(repeatable): hardware FAILs, application WARNs naming the process, ignore leaves it listed only.",
        metavar="CODE=CLASS", param=True, watch=True)
    github_url: str = declare(
        "url", "probe", "G8: GitHub REST base URL (a mirror or GitHub Enterprise; default "
        f"{DEFAULT_GITHUB_URL}).", metavar="URL", default=DEFAULT_GITHUB_URL, gather_only=True)
    tp_across_nodes: str = declare(
        "choice", "rules", "G10: status for tensor parallelism across nodes (default fail; NVIDIA's own "
        "inference playbooks run TP=2 over two Sparks).", default="fail", choices=("fail", "warn"),
        param=True,
        cli_help="G10: status for tensor parallelism across nodes: fail (default) or warn (NVIDIA's own "
        "inference playbooks run TP=2 over two Sparks).")
    precision: str | None = declare(
        "choice", "run", "G7: the precision the run trains or serves in (nvfp4, fp8 or bf16); nvfp4 asks G7 "
        "to find kernels built for sm_121a/sm_120f, fp8 and bf16 leave installed NVFP4 kernels unjudged.",
        choices=("nvfp4", "fp8", "bf16"), param=True,
        cli_help="G7: the precision the run trains or serves in; nvfp4 asks G7 to find kernels built for "
        "sm_121a/sm_120f, fp8 and bf16 leave installed NVFP4 kernels unjudged.")
    known_bad: tuple[Path, ...] = declare(
        "datafiles", "rules", "G1: a JSON file of known-bad kernels, drivers or module flavours to add to "
        "the shipped list (repeatable; docs/REFERENCE.md gives the format).", metavar="PATH",
        gather_only=True)
    capture: Path | None = declare(
        "path", "files", "write what the checks saw (facts, raw probe answers, options; secrets and user "
        "names redacted) to PATH, gzip when it ends in .gz; attach it to a bug report.", metavar="PATH")
    replay: Path | None = declare(
        "infile", "files", "decide the checks again from a capture file, reading nothing of this machine.",
        metavar="PATH", cli="preflight+diagnose")
    diagnose: tuple[Path, ...] = declare(
        "paths", "files", "a failed run's log (repeatable; .gz read as gzip): each check also reads it, a "
        "FAIL quotes the line that shows its gotcha, and a diagnosis line follows the verdict.",
        metavar="LOG", cli="hidden")
    python: str | None = declare(
        "python", "run", "G1, G2, G7, G9: judge the packages of this Python interpreter and run the torch "
        "child with it (the job's venv, a conda env, a container's python reached through a path).",
        metavar="PATH", gather_only=True)
    prometheus_textfile: Path | None = declare(
        "path", "files", "write the run (a status per check, findings with codes, readings, verdict) in "
        "node_exporter's textfile-collector format to PATH, replaced atomically.", metavar="PATH",
        watch=True)
    signatures: Path | None = declare(
        "infile", "files", "a JSON file of more failure-log signatures (pattern, gotcha, weight, fix, "
        "source) for the logs --spark-diagnose reads.", metavar="PATH", cli="diagnose",
        cli_help="diagnose: a JSON file of more failure-log signatures, tried before the built-in ones.")
    gunzip_max_mib: float = declare(
        "float", "files", "diagnose: read at most N MiB of a .gz log's decompressed text (default "
        f"{DEFAULT_GUNZIP_MIB:g}, at most {MAX_GUNZIP_MIB:g}): a small file can expand to GiBs; the output "
        "says where it stopped.", metavar="N", default=DEFAULT_GUNZIP_MIB, minimum=0.0, exclusive_min=True,
        maximum=MAX_GUNZIP_MIB)
# fmt: on

#: every option, in ``--help`` order: each named after its attribute
OPTIONS: tuple[Option, ...] = tuple(
    field.metadata["option"].named(attr.replace("_", "-"))
    for attr, field in vars(Values).items()
    if isinstance(field, dataclasses.Field)
)
BY_NAME: dict[str, Option] = {o.name: o for o in OPTIONS}

#: views of the table (what cli.py reads): options that change only what is gathered, pytest-only ones
GATHER_ONLY = tuple(o.name for o in OPTIONS if o.gather_only)
PYTEST_ONLY = frozenset(o.name for o in OPTIONS if o.cli == "pytest-only")


def values_dataclass() -> type[Values]:
    """:class:`Values` as the frozen dataclass mypy sees, made so on the first call (settings.py's): the
    ms it takes would otherwise be paid by every pytest run, which imports this module."""
    if not dataclasses.is_dataclass(Values):
        from pytest_dgx_spark.datadef import define

        define(frozen=True)(Values)
    return Values


def add_pytest_options(parser: Any) -> None:
    """Register ``--spark-*`` options and ``spark_preflight_*`` ini keys: numbers are "float" keys and
    ids "args" keys, since a pyproject.toml number or list would warn as a "string" key's value."""
    group = parser.getgroup("dgx-spark", "DGX Spark preflight (pytest-dgx-spark)")
    group.addoption("--spark-preflight", action="store_true", default=None, dest="spark_preflight",
                    help=f"collect and run the {catalog.HOW_MANY} DGX Spark preflight checks {catalog.SPAN}.")  # fmt: skip
    parser.addini("spark_preflight_enabled", "run the DGX Spark preflight checks as if --spark-preflight "
                  "was given", type="bool", default=False)  # fmt: skip
    for opt in OPTIONS:
        kw: dict[str, Any] = {"action": "store_true"} if opt.kind == "bool" else {
            "action": "append" if opt.kind in REPEATABLE else "store",
            "metavar": choices_metavar(opt) or opt.metavar or opt.name.upper(),
        }  # fmt: skip
        group.addoption(opt.flag, default=None, dest=opt.dest, help=opt.help, **kw)
        lines = " (one per line)" if opt.ini_type == "linelist" else ""
        default = {"bool": False, "linelist": [], "string": ""}.get(opt.ini_type)
        parser.addini(opt.ini, opt.help + lines, type=opt.ini_type, default=default)


def choices_metavar(opt: Option) -> str | None:
    """``{auto,gb10,generic}``: a choice option's values, shown in ``--help`` where its value goes
    (pytest's and the CLI's; the values are checked by :mod:`.settings`, in its own words)."""
    return "{" + ",".join(opt.choices) + "}" if opt.choices else None


def preflight_enabled(config: Any) -> bool:
    if config.getoption("spark_preflight", None):
        return True
    return bad_ini(config, "spark_preflight_enabled") is None and bool(config.getini("spark_preflight_enabled"))


def ini_error(name: str, exc: Exception) -> str:
    """``exc`` from reading ini key ``name`` as one line naming the key (pytest's own does not)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    for prefix, expected in (("invalid truth value ", "true or false"),
                             ("could not convert string to float: ", "a number")):  # fmt: skip
        if text.startswith(prefix):
            return f"{name} (ini): expected {expected}, got {text.removeprefix(prefix)}"
    return f"{name} (ini): {text}"


def bad_ini(config: Any, name: str) -> str | None:
    """One line naming ``name`` when pytest cannot read its ini value, else ``None``."""
    try:
        config.getini(name)
    except Exception as exc:  # any unreadable value is the user's, reported by name
        return ini_error(name, exc)
    return None


def cli_shown(opt: Option, command: str) -> bool:
    """Whether ``spark-preflight [command] --help`` lists ``opt`` (``command``: "" or "diagnose")."""
    return command in CLI_LISTED[opt.cli]


def add_cli_options(parser: argparse.ArgumentParser, command: str = "",
                    into: argparse._ArgumentGroup | None = None) -> dict[str, argparse._ArgumentGroup]:  # fmt: skip
    """The same options for ``spark-preflight`` as ``--<name>``, in their help groups (returned), or all
    in ``into``; ``--spark-<name>`` too, unlisted, so a flag quoted in a check's line works as written.
    Options ``command`` does not list (:func:`cli_shown`) are parsed but hidden: the CLI refuses a
    pytest-only one by name, and diagnose's live checks take every other."""
    groups = {key: into or parser.add_argument_group(title) for key, title in GROUPS.items()}
    for opt in OPTIONS:
        text = opt.cli_text if cli_shown(opt, command) else argparse.SUPPRESS
        kw: dict[str, Any] = {"action": "store_true"}
        if opt.kind in REPEATABLE:
            kw = {"action": "append", "metavar": opt.metavar}
        elif opt.kind != "bool":
            kw = {"metavar": choices_metavar(opt) or opt.metavar or opt.name.upper()}
        for flag, shown in ((opt.cli_flag, text), (opt.flag, argparse.SUPPRESS)):
            groups[opt.group].add_argument(flag, default=None, dest=opt.dest, help=shown, **kw)
    return groups


# fmt: off
#: ``spark-preflight watch``'s own flags (CLI only: a pytest run has the ``spark_sampler`` fixture); the
#: table's options declared ``watch=True`` follow them
WATCH_OPTIONS: tuple[Option, ...] = (
    Option("float", "watch", "seconds between samples (default 5, at most 3600).", metavar="SECONDS",
           default=5.0, minimum=0.0, exclusive_min=True, maximum=MAX_SECONDS, name="interval"),
    Option("str", "watch", "watch a job already running, until it ends, instead of starting COMMAND.",
           metavar="PID", name="pid"),
    Option("path", "watch", "write one JSON line per sample and per event to PATH, each flushed as written "
           "(redacted as a capture is); spark-preflight diagnose reads it.", metavar="PATH", name="timeline"),
    Option("float", "watch", "the job's GPU idle this long after it was busy is a stall event (default 600).",
           metavar="SECONDS", default=600.0, minimum=0.0, exclusive_min=True, maximum=86400.0,
           name="stall-seconds"),
    Option("bool", "watch", "when the job fails, do not run the post-mortem diagnosis.", name="no-diagnose"),
)
# fmt: on


def add_watch_options(parser: argparse.ArgumentParser) -> None:
    """``spark-preflight watch``'s flags: its own, then the shared ones it reads, as ``--<name>``."""
    group = parser.add_argument_group("watch")
    for opt in (*WATCH_OPTIONS, *(o for o in OPTIONS if o.watch)):
        kw: dict[str, Any] = {"action": "store_true"} if opt.kind == "bool" else {
            "action": "append" if opt.kind in REPEATABLE else "store", "metavar": opt.metavar}
        group.add_argument(opt.cli_flag, default=None, dest=opt.dest, help=opt.cli_text, **kw)
