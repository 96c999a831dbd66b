"""Options: ini twins, CLI > ini, and a one-line UsageError naming the option."""

from __future__ import annotations

import os

import pytest

from pytest_dgx_spark import catalog, options, settings
from pytest_dgx_spark.settings import OptionError, Settings


@pytest.fixture(autouse=True)
def _gb10(spark_env):
    return spark_env


#: an id one past the last check's: no such check
NO_SUCH = f"G{catalog.CHECKS[-1].number + 1}"
BAD = [
    (["--spark-timeout", "-1"], "--spark-timeout: must be > 0, got '-1'"),
    (["--spark-timeout", "0"], "--spark-timeout: must be > 0, got '0'"),
    (["--spark-timeout", "nan"], "--spark-timeout: expected a finite number, got 'nan'"),
    (["--spark-thermal-seconds", "abc"], "--spark-thermal-seconds: expected a number, got 'abc'"),
    (["--spark-only", NO_SUCH], f"--spark-only: '{NO_SUCH}' is not a check id "
     f"(expected {catalog.SPAN}, e.g. G1,G5)"),
    (["--spark-only", ","], "--spark-only: expected check ids such as G1,G5, got ','"),
    (["--spark-profile", "dgx"], "--spark-profile: expected one of auto, gb10, generic, got 'dgx'"),
    (["--spark-workload-gb", "0"], "--spark-workload-gb: must be > 0, got '0'"),
    (["--spark-planned-bandwidth", "fast"], "--spark-planned-bandwidth: expected a number, got 'fast'"),
    (["--spark-threshold", "g6_cap_max"], "--spark-threshold: expected NAME=VALUE, got 'g6_cap_max'"),
    (["--spark-threshold", "nope=1"], "--spark-threshold: unknown threshold 'nope'"),
    (["--spark-threshold", "g6_cap_max=x"], "--spark-threshold: g6_cap_max needs a number, got 'x'"),
    (["--spark-report", "missing/dir/r.json"], "--spark-report: folder '*missing/dir' does not exist"),
    (["--spark-config", "nowhere.yaml"], "--spark-config: 'nowhere.yaml' does not exist"),
    (["--spark-github-url", "ftp://x"], "--spark-github-url: expected an http(s) URL, got 'ftp://x'"),
    (
        ["--spark-tp-across-nodes", "maybe"],
        "--spark-tp-across-nodes: expected one of fail, warn, got 'maybe'",
    ),
    (["--spark-precision", "fp4"], "--spark-precision: expected one of nvfp4, fp8, bf16, got 'fp4'"),
    (["--spark-xid-class", "13"], "--spark-xid-class: expected CODE=CLASS with an Xid number, got '13'"),
    (["--spark-xid-class", "13=fatal"], "--spark-xid-class: Xid 13 class must be one of hardware, application, ignore, got 'fatal'"),
]

#: a duration or size past any sane run (issue 11: ``--spark-thermal-seconds 1e12`` ran until killed)
TOO_BIG = [
    (["--spark-thermal-seconds", "1e12"], "--spark-thermal-seconds: must be <= 3600, got '1e12'"),
    (["--spark-timeout", "86400"], "--spark-timeout: must be <= 3600, got '86400'"),
    (["--spark-workload-gb", "1e9"], "--spark-workload-gb: must be <= 65536, got '1e9'"),
    (["--spark-planned-bandwidth", "1e7"], "--spark-planned-bandwidth: must be <= 100000, got '1e7'"),
]


@pytest.mark.parametrize(("args", "message"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_value_is_a_usage_error_naming_the_option(pytester: pytest.Pytester, args, message) -> None:
    result = pytester.runpytest("--spark-preflight", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "Traceback" not in err and "INTERNALERROR" not in err + result.stdout.str()
    result.stderr.fnmatch_lines([f"ERROR: {message}*"])


@pytest.mark.parametrize(("args", "message"), TOO_BIG, ids=[" ".join(a) for a, _ in TOO_BIG])
def test_too_big_value_is_a_usage_error_naming_the_option(pytester: pytest.Pytester, args, message) -> None:
    # G3 only: were the value accepted, this run would still end (with G4, never)
    result = pytester.runpytest("--spark-preflight", "--spark-only", "G3", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {message}"])


def test_every_duration_and_size_has_an_upper_bound() -> None:
    """Each number option has a maximum, and it is above its default."""
    for opt in options.OPTIONS:
        if opt.kind == "float":
            assert opt.maximum is not None, opt
            assert opt.default is None or opt.default <= opt.maximum, opt


def test_report_into_a_folder_that_is_a_file(pytester: pytest.Pytester) -> None:
    pytester.makefile(".txt", afile="x")
    result = pytester.runpytest("--spark-preflight", "--spark-report", "afile.txt/r.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --spark-report: folder '*afile.txt' does not exist"])


def test_bad_ini_value_names_the_ini_key(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nspark_preflight_timeout = soon\n")
    result = pytester.runpytest("--spark-preflight")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: spark_preflight_timeout (ini): expected a number, got 'soon'"])


def test_bad_values_are_ignored_without_the_flag(pytester: pytest.Pytester) -> None:
    """A plain run never pays for (or trips over) the preflight's settings."""
    pytester.makeini("[pytest]\nspark_preflight_timeout = soon\n")
    pytester.makepyfile(test_x="def test_x(): pass")
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)


def test_cli_beats_ini(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nspark_preflight_workload_gb = 500\nspark_preflight_only = G3\n")
    from_ini = pytester.runpytest("--spark-preflight")
    from_ini.assert_outcomes(failed=1, deselected=len(catalog.IDS) - 1)
    from_cli = pytester.runpytest("--spark-preflight", "--spark-workload-gb", "10")
    from_cli.assert_outcomes(passed=1, deselected=len(catalog.IDS) - 1)


def test_ini_bools_lists_and_thresholds(pytester: pytest.Pytester) -> None:
    pytester.makeini(
        "[pytest]\nspark_preflight_strict = true\nspark_preflight_only = G3\n"
        "spark_preflight_workload_gb = 100\nspark_preflight_threshold =\n    g3_margin_gb=20\n"
    )
    result = pytester.runpytest("--spark-preflight")
    # 100 GiB + 20 GiB margin > MemAvailable 112.8 GiB: FAIL (strict does not matter)
    result.assert_outcomes(failed=1, deselected=len(catalog.IDS) - 1)
    assert "workload 100 GiB + 20 GiB margin > MemAvailable 112.8 GiB" in result.stdout.str()


def test_report_header_lists_the_active_options(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(
        "--spark-preflight", "--spark-only", "G3", "--spark-strict", "--spark-timeout", "3"
    )
    result.stdout.fnmatch_lines(["spark preflight: profile auto, timeout 3 s, only G3, strict"])


def test_settings_defaults_and_thresholds() -> None:
    s = Settings()
    assert s.selected == catalog.IDS
    assert s.thresholds("gb10")["g5_decode_high_gbps"] == 190.0
    assert s.thresholds("generic")["g5_decode_high_gbps"] == 0.0
    custom = Settings(threshold={"g5_decode_high_gbps": 200.0})
    assert custom.thresholds("gb10")["g5_decode_high_gbps"] == 200.0


def test_every_default_comes_from_the_option_table() -> None:
    """One source of defaults: a Settings built from nothing holds each Option's
    default, and Settings has one field per option (plus rootdir, where github_url came from and a
    replayed capture's own checks)."""
    import dataclasses

    fields = {f.name for f in dataclasses.fields(Settings)} - {"rootdir", "github_url_source", "known"}
    assert fields == {o.attr for o in options.OPTIONS}
    plain = Settings()
    for opt in options.OPTIONS:
        assert getattr(plain, opt.attr) == opt.default, opt.name
    assert plain.timeout == 10.0 and plain.github_url == options.DEFAULT_GITHUB_URL
    assert Settings().threshold is not Settings().threshold  # no dict shared between runs


def test_a_decision_reads_option_defaults_from_the_table_too() -> None:
    """``Params.option`` falls back to the option table, not to a default the
    check passes (G10 passed its own ``"fail"`` for --spark-tp-across-nodes),
    and names only options a decision reads."""
    from pytest_dgx_spark.checks.kit import PARAM_OPTIONS, Params

    bare = Params()
    for name in PARAM_OPTIONS:
        assert bare.option(name) == options.BY_NAME[name.replace("_", "-")].default, name
    assert Params(options={"tp_across_nodes": "warn"}).option("tp_across_nodes") == "warn"
    with pytest.raises(KeyError, match="not an option a decision reads"):
        bare.option("thermal_seconds")  # what gather reads: a replay cannot change it


def test_each_kind_has_one_parser_and_every_default_passes_it(tmp_path) -> None:
    """Validation lives with the declaration: the option's kind picks its parser
    (settings.PARSERS), and a default that its own parser refuses cannot ship."""
    for opt in options.OPTIONS:
        assert opt.kind in settings.PARSERS, opt.name
        if opt.default not in (None, False, (), {}):
            assert settings.parse_value(opt, opt.default, "flag", tmp_path) == opt.default, opt.name
    playbook, url = options.BY_NAME["playbook"], options.BY_NAME["github-url"]
    assert settings.parse_value(playbook, " vLLM ", "flag", tmp_path) == "vllm"
    with pytest.raises(OptionError, match=r"^--spark-github-url: ") as bad:
        settings.parse_value(url, "ftp://user:secret@example.com", "flag", tmp_path)
    assert "secret" not in str(bad.value)


def test_options_never_import_settings() -> None:
    """The dependency is one way (settings -> options): the table module holds
    no lazy door back to settings."""
    assert not hasattr(options, "Settings")
    assert not hasattr(options, "OptionError")


def test_parse_ids_normalises_and_orders() -> None:
    opt = options.BY_NAME["only"]
    assert settings.parse_value(opt, "g5, G01 g10", "flag", os.getcwd()) == ("G1", "G5", "G10")
    with pytest.raises(OptionError, match="'G0' is not a check id"):
        settings.parse_value(opt, "G0", "flag", os.getcwd())


def test_report_into_a_read_only_folder_as_a_non_root_user(nonroot_run) -> None:
    folder = nonroot_run.base / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    proc = nonroot_run(["-m", "pytest_dgx_spark.cli", "--only", "G3", "--report", str(folder / "r.json")])
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"spark-preflight: error: --report: folder '{folder}' is not writable (Permission denied)"
    ]


def test_precision_option_and_its_ini_twin(pytester: pytest.Pytester) -> None:
    """``--spark-precision`` (G7) is a choice; the ini twin is ``spark_preflight_precision``;
    the value reaches the check's parameters (kit.PARAM_OPTIONS)."""
    from pytest_dgx_spark.checks.kit import Params

    opt = options.BY_NAME["precision"]
    assert settings.parse_value(opt, " NVFP4 ", "flag", os.getcwd()) == "nvfp4"
    assert Settings().precision is None
    params = Params.from_settings(Settings(precision="fp8"), "gb10")
    assert params.option("precision") == "fp8"
    pytester.makeini("[pytest]\nspark_preflight_precision = float4\n")
    result = pytester.runpytest("--spark-preflight")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: spark_preflight_precision (ini): expected one of nvfp4, fp8, bf16, got 'float4'*"]
    )


#: a throwaway option, declared the way docs/INTERNALS.md's recipe says: one attribute of ``Values``
DEMO_DECLARATION = '''    demo_level: float | None = declare(
        "float", "rules", "G3: a demo level for this test.", metavar="N", minimum=0.0, maximum=10.0,
        param=True, watch=True, cli_help="G3: a demo level, as spark-preflight says it.")
'''

#: what the copy of the package says of it, from its own modules (run with the copy first on sys.path)
DEMO_PROBE = '''
import sys
from pathlib import Path
import pytest_dgx_spark
from pytest_dgx_spark import cli, options, settings
from pytest_dgx_spark.checks.kit import Params
from pytest_dgx_spark.watch.args import build_parser as watch_parser

here = Path(sys.argv[1])
assert Path(pytest_dgx_spark.__file__).is_relative_to(here), pytest_dgx_spark.__file__
assert settings.Settings().demo_level is None and settings.Settings(demo_level=2.5).demo_level == 2.5
ns = cli.build_parser().parse_args(["--demo-level", "3"])
given = settings.settings_from_cli(ns, {}, base=here, rootdir=here)
from_ini = settings.settings_from_cli(cli.build_parser().parse_args([]), {"spark_preflight_demo_level": "4"},
                                      base=here, rootdir=here)
try:
    settings.settings_from_cli(cli.build_parser().parse_args(["--demo-level", "11"]), {}, base=here, rootdir=here)
except settings.OptionError as exc:
    refused = str(exc)
print("value", given.demo_level, from_ini.demo_level, given.to_dict()["demo-level"])
print("refused", refused)
print("param", Params.from_settings(given, "gb10").option("demo_level"), Params().option("demo_level"))
print("cli", " ".join(cli.build_parser().format_help().split()))
print("watch", " ".join(watch_parser().format_help().split()))
'''


def test_a_new_option_is_one_declaration(tmp_path) -> None:
    """Issue 31 item 4: an option added to ``options.Values`` alone, in a copy of the package, is a
    pytest flag and ini key, a CLI flag (listed, and in watch's help when declared so), a typed
    ``Settings`` attribute validated by its kind's parser, in the report's options, and a
    ``Params`` option when declared ``param=True``: no other file of the package names it."""
    import shutil
    import subprocess
    import sys

    from conftest import PYTEST_CHILD

    copy = tmp_path / "pkg"
    shutil.copytree(os.path.dirname(options.__file__), copy / "pytest_dgx_spark",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    table = copy / "pytest_dgx_spark" / "options.py"
    source = table.read_text()
    assert source.count("\n# fmt: on\n\n#: every option") == 1
    table.write_text(source.replace("\n# fmt: on\n\n#: every option", f"\n{DEMO_DECLARATION}# fmt: on\n\n"
                                    "#: every option"))  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(copy), "COLUMNS": "200", "PYTHONDONTWRITEBYTECODE": "1"}
    probe = subprocess.run([sys.executable, "-c", DEMO_PROBE, str(copy)], capture_output=True, text=True,
                           env=env, cwd=tmp_path, timeout=120)  # fmt: skip
    assert probe.returncode == 0, probe.stderr
    said = dict(line.split(" ", 1) for line in probe.stdout.splitlines())
    assert said["value"] == "3.0 4.0 3.0"
    assert said["refused"] == "--demo-level: must be <= 10, got '11'"
    assert said["param"] == "3.0 None"
    assert "--demo-level N G3: a demo level, as spark-preflight says it." in said["cli"]
    assert "--demo-level N G3: a demo level, as spark-preflight says it." in said["watch"]
    project = tmp_path / "project"
    project.mkdir()
    (project / "pytest.ini").write_text("[pytest]\nspark_preflight_demo_level = 12\n")
    helped = subprocess.run([*PYTEST_CHILD, "--help"], capture_output=True, text=True, env=env, cwd=project,
                            timeout=120)  # fmt: skip
    shown = " ".join(helped.stdout.split())
    assert "--spark-demo-level=N G3: a demo level for this test." in shown, helped.stderr
    assert "spark_preflight_demo_level (string): G3: a demo level for this test." not in shown
    assert "spark_preflight_demo_level (float): G3: a demo level for this test." in shown
    run = [*PYTEST_CHILD, "--spark-preflight", "--spark-only", "G3"]
    refused = subprocess.run(run, capture_output=True, text=True, env=env, cwd=project, timeout=120)
    assert refused.returncode == pytest.ExitCode.USAGE_ERROR
    assert "ERROR: spark_preflight_demo_level (ini): must be <= 10, got 12.0" in refused.stderr, refused.stderr


def test_the_sets_of_options_are_views_of_the_declarations() -> None:
    """What cli.py and Params read is derived from each Option's own facts: the sets the tables listed
    by hand before (issue 31 item 4) come out of the declarations unchanged."""
    from pytest_dgx_spark.checks.kit import PARAM_OPTIONS

    # the sets as listed by hand before, still in them (a new option may join a set by its declaration)
    gather_only = ("timeout", "offline", "intrusive", "thermal-seconds", "config", "drop-caches", "github-url",
                   "known-bad", "python")  # fmt: skip
    assert [n for n in options.GATHER_ONLY if n in gather_only] == list(gather_only)
    assert tuple(o.name for o in options.OPTIONS if o.gather_only) == options.GATHER_ONLY
    assert {"gate"} == options.PYTEST_ONLY
    assert set(PARAM_OPTIONS) >= {"intrusive", "offline", "planned_bandwidth", "playbook", "precision", "strict",
                                  "tp_across_nodes", "workload_gb", "xid_class"}  # fmt: skip
    assert set(PARAM_OPTIONS) == {o.name.replace("-", "_") for o in options.OPTIONS if o.param}
    assert [o.name for o in options.OPTIONS if options.cli_shown(o, "diagnose")] == [
        "report", "timeout", "replay", "signatures"]
    assert [o.name for o in options.OPTIONS if not options.cli_shown(o, "")] == ["gate", "diagnose", "signatures"]
    assert [o.name for o in options.OPTIONS if o.watch] == ["workload-gb", "threshold", "xid-class",
                                                           "prometheus-textfile"]  # fmt: skip
    with pytest.raises(ValueError, match="cli='everywhere'"):
        options.Option("bool", "run", "x", cli="everywhere")
