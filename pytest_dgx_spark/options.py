"""One table of options, registered as pytest options with ini twins (``--spark-<name>`` /
``spark_preflight_<name>``) and as ``spark-preflight`` flags (``--<name>``). Every pytest run
imports it, so it holds only the table and the registration: :mod:`.settings` validates values."""

from __future__ import annotations

import argparse
from types import MappingProxyType
from typing import Any

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


class Option:
    """One option. ``kind`` picks its parser (``settings.PARSERS``): bool,
    float, str, name, url, choice, ids, path, infile, python, paths, datafiles, pairs or xid-classes;
    ``maximum`` refuses a duration or size past any sane run in one line."""

    __slots__ = ("choices", "cli_flag", "default", "dest", "exclusive_min", "flag", "group", "help", "ini",
                 "ini_type", "kind", "maximum", "metavar", "minimum", "name")  # fmt: skip

    def __init__(self, name: str, kind: str, group: str, help: str, metavar: str | None = None,
                 default: Any = None, choices: tuple[str, ...] = (), minimum: float | None = None,
                 exclusive_min: bool = False, maximum: float | None = None) -> None:  # fmt: skip
        self.name, self.kind, self.group, self.help, self.metavar = name, kind, group, help, metavar
        self.default = EMPTY.get(kind) if default is None else default
        self.choices, self.minimum, self.exclusive_min, self.maximum = choices, minimum, exclusive_min, maximum
        self.flag, self.cli_flag = f"--spark-{name}", f"--{name}"
        self.ini_type = INI_TYPES.get(kind, "string")
        self.dest, self.ini = "spark_" + name.replace("-", "_"), "spark_preflight_" + name.replace("-", "_")

    def __repr__(self) -> str:
        return f"Option({self.name!r}, {self.kind!r})"


#: the CLI's help groups, in order (``--help``)
GROUPS = {"run": "what to check", "rules": "what counts as bad", "probe": "how the machine is probed",
          "files": "output and files"}  # fmt: skip

# fmt: off
OPTIONS: tuple[Option, ...] = (
    Option("strict", "bool", "run", "WARN fails the test and blocks the verdict."),
    Option("gate", "bool", "run", "skip every non-preflight test with 'spark preflight G<n> failed' when a "
           "check FAILs."),
    Option("report", "path", "files", "write env-report.json (the seed's schema plus readings, host, timings) "
           "to PATH.", metavar="PATH"),
    Option("only", "ids", "run", "run only these checks, e.g. G1,G5.", metavar="IDS"),
    Option("profile", "choice", "run", "thresholds: GB10's when the GPU is GB10 (auto) or forced (gb10); "
           "generic derives them from the GPU found.", default="auto", choices=("auto", "gb10", "generic")),
    Option("timeout", "float", "probe", "seconds every probe of the machine may take (default 10, at most "
           "3600).", metavar="SECONDS", default=10.0, minimum=0.0, exclusive_min=True, maximum=MAX_SECONDS),
    Option("offline", "bool", "probe", "G8: do not contact GitHub (SKIP)."),
    Option("intrusive", "bool", "probe", "allow probes that load the machine: G5's bandwidth copy, G10's "
           "network all-reduce."),
    Option("thermal-seconds", "float", "probe", "G4: how long to sample temperature, power and clocks, in "
           "seconds (default 1, at most 3600).", metavar="N", default=1.0, minimum=0.0, maximum=MAX_SECONDS),
    Option("workload-gb", "float", "run", "G3: memory the planned workload needs, in GiB (free -g units).",
           metavar="N", minimum=0.0, exclusive_min=True, maximum=MAX_WORKLOAD_GIB),
    Option("planned-bandwidth", "float", "run", "G5: memory bandwidth the plan assumes, in GB/s.",
           metavar="GBPS", minimum=0.0, exclusive_min=True, maximum=MAX_BANDWIDTH_GBPS),
    Option("playbook", "name", "run", "G8: the dgx-spark-playbooks playbook being followed (e.g. unsloth, "
           "vllm, nccl).", metavar="NAME"),
    Option("config", "paths", "run", "G10: a training/serving config to inspect (repeatable).",
           metavar="PATH"),
    Option("drop-caches", "bool", "probe", "G3: as root, sync and drop the page cache before reading "
           "headroom (never implied)."),
    Option("threshold", "pairs", "rules", "override a threshold, NAME=VALUE (repeatable); "
           "`spark-preflight --help-thresholds` lists the names.", metavar="NAME=VALUE"),
    Option("xid-class", "xid-classes", "rules", "G4: put Xid codes in a class, CODE=hardware|application|ignore "
           "(repeatable): hardware FAILs, application WARNs naming the process, ignore leaves it listed only.",
           metavar="CODE=CLASS"),
    Option("github-url", "url", "probe", "G8: GitHub REST base URL (a mirror or GitHub Enterprise; default "
           f"{DEFAULT_GITHUB_URL}).", metavar="URL", default=DEFAULT_GITHUB_URL),
    Option("tp-across-nodes", "choice", "rules", "G10: status for tensor parallelism across nodes (default "
           "fail; NVIDIA's own inference playbooks run TP=2 over two Sparks).", default="fail",
           choices=("fail", "warn")),
    Option("precision", "choice", "run", "G7: the precision the run trains or serves in (nvfp4, fp8 or "
           "bf16); nvfp4 asks G7 to find kernels built for sm_121a/sm_120f, fp8 and bf16 leave installed "
           "NVFP4 kernels unjudged.", choices=("nvfp4", "fp8", "bf16")),
    Option("known-bad", "datafiles", "rules", "G1: a JSON file of known-bad kernels, drivers or module flavours "
           "to add to the shipped list (repeatable; docs/REFERENCE.md gives the format).", metavar="PATH"),
    Option("capture", "path", "files", "write what the checks saw (facts, raw probe answers, options; "
           "secrets and user names redacted) to PATH, gzip when it ends in .gz; attach it to a bug report.",
           metavar="PATH"),
    Option("replay", "infile", "files", "decide the checks again from a capture file, reading nothing of "
           "this machine.", metavar="PATH"),
    Option("diagnose", "paths", "files", "a failed run's log (repeatable; .gz read as gzip): each check also "
           "reads it, a FAIL quotes the line that shows its gotcha, and a diagnosis line follows the verdict.",
           metavar="LOG"),
    Option("python", "python", "run", "G1, G2, G7, G9: judge the packages of this Python interpreter and run "
           "the torch child with it (the job's venv, a conda env, a container's python reached through a path).",
           metavar="PATH"),
    Option("prometheus-textfile", "path", "files", "write the run (a status per check, findings with codes, "
           "readings, verdict) in node_exporter's textfile-collector format to PATH, replaced atomically.",
           metavar="PATH"),
    Option("signatures", "infile", "files", "a JSON file of more failure-log signatures (pattern, gotcha, "
           "weight, fix, source) for the logs --spark-diagnose reads.", metavar="PATH"),
    Option("gunzip-max-mib", "float", "files", "diagnose: read at most N MiB of a .gz log's decompressed text "
           f"(default {DEFAULT_GUNZIP_MIB:g}, at most {MAX_GUNZIP_MIB:g}): a small file can expand to GiBs; "
           "the output says where it stopped.", metavar="N", default=DEFAULT_GUNZIP_MIB, minimum=0.0,
           exclusive_min=True, maximum=MAX_GUNZIP_MIB),
)
# fmt: on

BY_NAME: dict[str, Option] = {o.name: o for o in OPTIONS}

#: options that change only what is gathered: a replay's facts were gathered already
GATHER_ONLY = ("timeout", "offline", "intrusive", "thermal-seconds", "config", "drop-caches", "github-url", "known-bad",
               "python")


def add_pytest_options(parser: Any) -> None:
    """Register ``--spark-*`` options and ``spark_preflight_*`` ini keys: numbers are "float" keys and
    ids "args" keys, since a pyproject.toml number or list would warn as a "string" key's value."""
    group = parser.getgroup("dgx-spark", "DGX Spark preflight (pytest-dgx-spark)")
    group.addoption("--spark-preflight", action="store_true", default=None, dest="spark_preflight",
                    help="collect and run the ten DGX Spark preflight checks G1..G10.")  # fmt: skip
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


#: the CLI's own help where the pytest text does not fit a ``spark-preflight`` user
CLI_HELP: dict[str, str] = {
    "strict": "a WARN counts as a failure: the verdict is blocked and the exit code 1.",
    "report": "also write env-report.json (the seed's schema plus readings, host, timings) to PATH.",
    "only": "run only these checks, comma-separated, e.g. G1,G5 (default: all ten).",
    "profile": "thresholds: auto (default) uses GB10's on a GB10 and derives the rest from the GPU "
    "found; gb10 or generic forces one.",
    "offline": "G8: do not contact GitHub (G8 then SKIPs: playbook issues not checked).",
    "config": "G10: a training/serving config to inspect (repeatable); named configs replace the "
    "search of the project folder.",
    "threshold": "override a threshold, NAME=VALUE (repeatable); --help-thresholds lists the names.",
    "tp-across-nodes": "G10: status for tensor parallelism across nodes: fail (default) or warn "
    "(NVIDIA's own inference playbooks run TP=2 over two Sparks).",
    "diagnose": "a log to read with the checks: use the diagnose subcommand (spark-preflight diagnose LOG); "
    "here it adds a log to diagnose's.",
    "signatures": "diagnose: a JSON file of more failure-log signatures, tried before the built-in ones.",
    "precision": "G7: the precision the run trains or serves in; nvfp4 asks G7 to find kernels built "
    "for sm_121a/sm_120f, fp8 and bf16 leave installed NVFP4 kernels unjudged.",
}

#: pytest-only options: the CLI refuses them with one line
PYTEST_ONLY = frozenset({"gate"})
#: options that read logs: the CLI offers them under ``spark-preflight diagnose`` only (the preflight
#: parses them to refuse them in one line); ``--diagnose LOG`` is diagnose's positional LOG there
DIAGNOSE_ONLY = frozenset({"diagnose", "signatures"})
#: the options ``spark-preflight diagnose --help`` lists beside its own (the rest are accepted, for the
#: live checks, and listed by ``spark-preflight --help``)
DIAGNOSE_SHOWN = frozenset({"signatures", "replay", "timeout", "report"})


def cli_shown(opt: Option, command: str) -> bool:
    """Whether ``spark-preflight [command] --help`` lists ``opt`` (``command``: "" or "diagnose")."""
    if opt.name in PYTEST_ONLY:
        return False
    return opt.name in DIAGNOSE_SHOWN if command == "diagnose" else opt.name not in DIAGNOSE_ONLY


def add_cli_options(parser: argparse.ArgumentParser, command: str = "",
                    into: argparse._ArgumentGroup | None = None) -> dict[str, argparse._ArgumentGroup]:  # fmt: skip
    """The same options for ``spark-preflight`` as ``--<name>``, in their help groups (returned), or all
    in ``into``; ``--spark-<name>`` too, unlisted, so a flag quoted in a check's line works as written.
    Options ``command`` does not list (:func:`cli_shown`) are parsed but hidden: the CLI refuses a
    pytest-only one by name, and diagnose's live checks take every other."""
    groups = {key: into or parser.add_argument_group(title) for key, title in GROUPS.items()}
    for opt in OPTIONS:
        text = CLI_HELP.get(opt.name, opt.help) if cli_shown(opt, command) else argparse.SUPPRESS
        kw: dict[str, Any] = {"action": "store_true"}
        if opt.kind in REPEATABLE:
            kw = {"action": "append", "metavar": opt.metavar}
        elif opt.kind != "bool":
            kw = {"metavar": choices_metavar(opt) or opt.metavar or opt.name.upper()}
        for flag, shown in ((opt.cli_flag, text), (opt.flag, argparse.SUPPRESS)):
            groups[opt.group].add_argument(flag, default=None, dest=opt.dest, help=shown, **kw)
    return groups


# fmt: off
#: ``spark-preflight watch``'s own flags (CLI only: a pytest run has the ``spark_sampler`` fixture);
#: ``--workload-gb`` and ``--threshold`` are the table's above
WATCH_OPTIONS: tuple[Option, ...] = (
    Option("interval", "float", "watch", "seconds between samples (default 5, at most 3600).", metavar="SECONDS",
           default=5.0, minimum=0.0, exclusive_min=True, maximum=MAX_SECONDS),
    Option("pid", "str", "watch", "watch a job already running, until it ends, instead of starting COMMAND.",
           metavar="PID"),
    Option("timeline", "path", "watch", "write one JSON line per sample and per event to PATH, each flushed "
           "as written (redacted as a capture is); spark-preflight diagnose reads it.", metavar="PATH"),
    Option("stall-seconds", "float", "watch", "the job's GPU idle this long after it was busy is a stall event "
           "(default 600).", metavar="SECONDS", default=600.0, minimum=0.0, exclusive_min=True, maximum=86400.0),
    Option("no-diagnose", "bool", "watch", "when the job fails, do not run the post-mortem diagnosis."),
)
# fmt: on
WATCH_SHARED = ("workload-gb", "threshold", "xid-class", "prometheus-textfile")


def add_watch_options(parser: argparse.ArgumentParser) -> None:
    """``spark-preflight watch``'s flags: its own, then the shared ones it reads, as ``--<name>``."""
    group = parser.add_argument_group("watch")
    for opt in (*WATCH_OPTIONS, *(BY_NAME[n] for n in WATCH_SHARED)):
        kw: dict[str, Any] = {"action": "store_true"} if opt.kind == "bool" else {
            "action": "append" if opt.kind in REPEATABLE else "store", "metavar": opt.metavar}
        group.add_argument(opt.cli_flag, default=None, dest=opt.dest, help=CLI_HELP.get(opt.name, opt.help), **kw)
