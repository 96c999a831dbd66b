"""Without --spark-preflight the plugin imports nothing heavy and collects nothing;
``spark-preflight`` imports nothing of pytest.

What a run imports is read in a subprocess, because this very test process
has long since imported everything. A functional test, not a timed one: the
timings are in ``benchmarks/bench_speed.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_dgx_spark import catalog

from conftest import autoload_only

#: the plugin's modules a plain run loads: the hook module and the small tables it registers (the
#: options, the catalog, whose check specs are data files it reads in the ``checks`` package's
#: folder: no check package is imported)
PLAIN_MODULES = {
    "pytest_dgx_spark",
    "pytest_dgx_spark.checks",
    "pytest_dgx_spark.plugin",
    "pytest_dgx_spark.options",
    "pytest_dgx_spark.catalog",
    "pytest_dgx_spark.hooks",
}

RECORDER = """
import json, sys

def pytest_unconfigure(config):
    with open("modules.json", "w") as fh:
        json.dump(sorted(sys.modules), fh)
"""


@pytest.mark.parametrize("extra", [[], ["-p", "no:dgx_spark"]], ids=["installed", "disabled"])
def test_plain_run_imports_nothing_heavy(pytester: pytest.Pytester, extra: list[str]) -> None:
    pytester.makeconftest(RECORDER)
    pytester.makepyfile(test_x="def test_x(): pass")
    result = pytester.runpytest_subprocess(*extra)
    result.assert_outcomes(passed=1)
    modules = json.loads((pytester.path / "modules.json").read_text())
    loaded = [
        m
        for m in modules
        if m.split(".")[0] in ("pynvml", "psutil", "torch", "yaml", "elftools")
        or m.startswith(
            ("pytest_dgx_spark.session", "pytest_dgx_spark.engine", "pytest_dgx_spark.probes")
        )
        or m.startswith("pytest_dgx_spark.checks.")
    ]
    assert loaded == []
    if not extra:
        assert "pytest_dgx_spark.plugin" in modules, "the plugin itself is loaded (and registers its options)"
    # issue 10: nothing beyond the registration module and the small tables it
    # registers (the sampler fixture's module, the settings: on use)
    ours = {m for m in modules if m.split(".")[0] == "pytest_dgx_spark"}
    assert "pytest_dgx_spark.sampler" not in ours, "the spark_sampler fixture loads its module on first use"
    assert "pytest_dgx_spark.settings" not in ours
    # the preflight's configure step (and the --spark-* flag checks) load only when asked for
    assert "pytest_dgx_spark.configure" not in ours
    assert ours <= PLAIN_MODULES, sorted(ours - PLAIN_MODULES)


def test_with_the_flag_the_machinery_loads(pytester: pytest.Pytester, spark_env) -> None:
    pytester.makeconftest(RECORDER)
    result = pytester.runpytest_subprocess("--spark-preflight", "--spark-only", "G3")
    result.assert_outcomes(passed=1, deselected=len(catalog.IDS) - 1)
    modules = json.loads((pytester.path / "modules.json").read_text())
    assert "pytest_dgx_spark.engine" in modules
    # NVML and torch run in child processes: never imported into pytest itself
    assert "pynvml" not in modules and "torch" not in modules


def _imported_by(argv: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run ``python -X importtime ARGV`` and return what the process imported."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", *argv], cwd=cwd, capture_output=True, text=True, timeout=120
    )
    names = {
        line.rsplit("|", 1)[1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:") and line.count("|") == 2
    }
    return proc, names


CAPTURE = Path(__file__).parent / "data" / "captures" / "h200-vllm.json.gz"


@pytest.mark.parametrize(
    "args",
    [["--help"], ["--offline"], ["--only", "G3"], ["--replay", str(CAPTURE)]],
    ids=["help", "run", "only-G3", "replay"],
)
def test_the_cli_imports_nothing_of_pytest(tmp_path: Path, spark_env, args: list[str]) -> None:
    """``spark-preflight`` finds and reads the project's configuration by
    pytest's documented discovery with public parsers (``iniconfig``, pytest's
    own INI reader, and ``tomllib``; issue 31 item 6: it called pytest's private
    ``_pytest.config.findpaths``), so it imports nothing of pytest (no
    ``pytest`` package, collection, runner, fixtures or plugins) whether it
    runs all ten checks, one, or a replay; ``--help`` reads no configuration."""
    proc, names = _imported_by(["-m", "pytest_dgx_spark.cli", *args], tmp_path)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    assert "pytest_dgx_spark.options" in names, "importtime lists what the CLI imported"
    ours = {n for n in names if n.split(".")[0] in ("pytest", "_pytest", "pluggy")}
    assert ours == set(), sorted(ours)
    if args == ["--help"]:
        assert "iniconfig" not in names and "pytest_dgx_spark.inifiles" not in names
        return
    last = "G3 " if args[0] == "--only" else "G10 "
    assert last in proc.stdout and "pytest_dgx_spark.engine" in names
    assert "pytest_dgx_spark.inifiles" in names and "iniconfig" in names


LOADERS = """
import json, sys

def pytest_unconfigure(config):
    with open("loaders.json", "w") as fh:
        json.dump({m: type(sys.modules[m].__loader__).__name__ for m in sys.modules
                   if m.split(".")[0] == "pytest_dgx_spark"}, fh)
"""


def test_what_pytest_rewrites_on_a_plain_run_stays_small(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As installed from a wheel (the package on sys.path), pytest marks all of
    ``pytest_dgx_spark`` for assertion rewriting and loads the entry point
    through its rewriter (issue 21: no hand-written loader around it); under
    PYTHONDONTWRITEBYTECODE it parses every module it loads again on each run.
    A plain run loads only the hook module and the small tables it registers."""
    import shutil

    import pytest_dgx_spark

    site = pytester.path / "site"
    shutil.copytree(Path(pytest_dgx_spark.__file__).parent, site / "pytest_dgx_spark")
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD")  # loaded as pytest loads an installed plugin
    pytester.makeconftest(LOADERS)
    pytester.makepyfile(test_x="def test_x(): pass")
    result = pytester.runpytest_subprocess(*autoload_only("dgx_spark"))
    result.assert_outcomes(passed=1)
    loaders = json.loads((pytester.path / "loaders.json").read_text())
    assert set(loaders) == PLAIN_MODULES, loaders
    package = site / "pytest_dgx_spark"
    named = [package.joinpath(*m.split(".")[1:]) for m in PLAIN_MODULES]
    parsed = [path / "__init__.py" if path.is_dir() else path.with_suffix(".py") for path in named]
    lines = sum(len(path.read_text().splitlines()) for path in parsed)
    # the tables a plain run reads, not the checks (the check specs are data files, not parsed by pytest)
    assert lines <= 700, f"a plain run parses {lines} lines of this plugin"

