"""Shared fixtures: recorded H200 output, a fake machine root, and test
doubles of ``pynvml`` and ``torch`` that the probe children import instead
of the real ones (this machine has no GPU)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from pytest_dgx_spark.checks.g10_multinode.check import LAUNCHER_ENV as G10_LAUNCHER_ENV
from pytest_dgx_spark.checks.g10_multinode.check import TP_ENV as G10_TP_ENV

TESTS = Path(__file__).parent
DATA = TESTS / "data"
H200 = DATA / "h200-cu130"
DOUBLES = TESTS / "doubles"
sys.path.insert(0, str(TESTS))

import hermetic  # noqa: E402  (tests/ is on sys.path from here)

#: pytest run as a child by a test: without the user's cache or pytest-randomly's
#: order, so every run does the same work in the same order; with plugin
#: autoload off (the autouse ``hermetic_env``), the plugin under test is named
PYTEST_ARGS = ("-m", "pytest", "-p", "dgx_spark", "-p", "no:cacheprovider", "-p", "no:randomly")
PYTEST_CHILD = (sys.executable, *PYTEST_ARGS)

#: the plugins a pytest run a test starts needs for the options it passes
#: (entry-point names): with autoload off, nothing else of the environment loads
PLUGIN_OF_OPTION: dict[str, tuple[str, ...]] = {
    "-n": ("xdist",),
    "--numprocesses": ("xdist",),
    "--dist": ("xdist",),
    # pytest-html loads its fixtures and pytest-metadata (its environment table) as plugins
    "--html": ("metadata", "html", "html_fixtures"),
    "--self-contained-html": ("metadata", "html", "html_fixtures"),
    "--alluredir": ("allure_pytest",),
    "--json-report": ("metadata", "pytest_jsonreport"),
    "--reruns": ("rerunfailures",),
    "--only-rerun": ("rerunfailures",),
    "--randomly-seed": ("randomly",),
}
#: the report plugins named outright, for a test of a run where they are loaded but unused
REPORT_PLUGINS = ("-p", "metadata", "-p", "html", "-p", "html_fixtures", "-p", "allure_pytest")


def named_plugins(args: tuple[Any, ...]) -> list[str]:
    """``-p`` options for dgx_spark (unless the run blocks it, ``-p no:dgx_spark``)
    and for each plugin whose option ``args`` use, before ``args``. None when
    the test turned autoload back on (a test of what autoload does)."""
    if not os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        return []
    text = [str(a) for a in args]
    blocked = {t.removeprefix("no:") for t in text if t.startswith("no:")}
    named = {text[i + 1] for i, t in enumerate(text[:-1]) if t == "-p"}
    wanted = ["dgx_spark"]
    for t in text:
        option = t.split("=", 1)[0]
        if option.startswith("--json-report"):
            option = "--json-report"
        if t.startswith("-n") and t[2:].isdigit():  # -n2
            option = "-n"
        for plugin in PLUGIN_OF_OPTION.get(option, ()):
            if plugin not in wanted:
                wanted.append(plugin)
    out: list[str] = []
    for plugin in wanted:
        if plugin not in blocked and plugin not in named:
            out += ["-p", plugin]
    return out


def autoload_only(*names: str) -> list[str]:
    """``-p no:<name>`` for every installed pytest plugin but ``names``: for a
    test of what plugin autoload itself does (it also unsets
    ``PYTEST_DISABLE_PLUGIN_AUTOLOAD``), the rest of the environment blocked."""
    from importlib.metadata import entry_points

    others = sorted({ep.name for ep in entry_points(group="pytest11")} - set(names))
    return [arg for name in others for arg in ("-p", f"no:{name}")]


@pytest.fixture(scope="session")
def tool_shadows(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the PATH folders without the machine's GPU tools are linked (one per session and xdist worker)."""
    return tmp_path_factory.getbasetemp() / "spark-tool-shadows"


@pytest.fixture(autouse=True)
def hermetic_env(monkeypatch: pytest.MonkeyPatch, tool_shadows: Path) -> None:
    """No test inherits the machine's launcher, CUDA, NCCL, container, proxy
    or token variables (``tests/hermetic.py`` lists them, ``test_hermetic.py``
    holds the list to the code), and every pytest run a test starts loads
    only the plugins it names (``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1``). The
    machine's ``nvidia-smi`` (and other GPU tools) are off PATH: a test that
    wants one plants it first on PATH (``Doubles.tool``, the scenes)."""
    monkeypatch.setenv("PATH", hermetic.tool_free_path(os.environ.get("PATH", os.defpath), tool_shadows))
    for name in list(os.environ):
        if hermetic.scrubbed(name):
            monkeypatch.delenv(name)
    for name, value in hermetic.SET.items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def pytester(pytester: pytest.Pytester) -> pytest.Pytester:
    """pytest's ``pytester``, whose runs name their plugins (:func:`named_plugins`):
    with autoload off, an ML image's pytest-benchmark or pytest-cov stays out."""
    inline, subprocess_run = pytester.inline_run, pytester.runpytest_subprocess

    def inline_run(*args: Any, **kwargs: Any) -> Any:
        return inline(*named_plugins(args), *args, **kwargs)

    def runpytest_subprocess(*args: Any, **kwargs: Any) -> Any:
        return subprocess_run(*named_plugins(args), *args, **kwargs)

    pytester.inline_run = inline_run  # type: ignore[method-assign]
    pytester.runpytest_subprocess = runpytest_subprocess  # type: ignore[method-assign]
    return pytester


class Doubles:
    """Builds the environment a probe child runs in, with doubles first on
    PYTHONPATH (``nvml(...)``, ``torch(...)``) and fake tools first on PATH."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.pythonpath: list[str] = []
        self.path: list[str] = []
        self.extra: dict[str, str] = {}

    def _scenario(self, name: str, scenario: Mapping[str, Any]) -> str:
        path = self.folder / f"{name}.json"
        path.write_text(json.dumps(scenario))
        return str(path)

    def nvml(self, scenario: Mapping[str, Any]) -> Doubles:
        self.extra["SPARK_FAKE_NVML"] = self._scenario("nvml", scenario)
        if str(DOUBLES / "nvml") not in self.pythonpath:
            self.pythonpath.insert(0, str(DOUBLES / "nvml"))
        return self

    def torch(self, scenario: Mapping[str, Any]) -> Doubles:
        self.extra["SPARK_FAKE_TORCH"] = self._scenario("torch", scenario)
        if str(DOUBLES / "torch") not in self.pythonpath:
            self.pythonpath.insert(0, str(DOUBLES / "torch"))
        return self

    def tool(self, name: str, script: str) -> Path:
        """Put an executable ``name`` (a shell script) first on PATH."""
        bindir = self.folder / "bin"
        bindir.mkdir(exist_ok=True)
        exe = bindir / name
        exe.write_text(script)
        exe.chmod(0o755)
        if str(bindir) not in self.path:
            self.path.insert(0, str(bindir))
        return exe

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.extra)
        if self.pythonpath:
            env["PYTHONPATH"] = os.pathsep.join([*self.pythonpath, env.get("PYTHONPATH", "")]).rstrip(
                os.pathsep
            )
        if self.path:
            env["PATH"] = os.pathsep.join([*self.path, env.get("PATH", "")])
        return env

    def apply(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Export into this process's environment (for pytester/CLI runs)."""
        for key, value in self.env.items():
            if os.environ.get(key) != value:
                monkeypatch.setenv(key, value)


#: a machine environment whose checked Python has only the package folders a
#: test plants on its PYTHONPATH, none of this interpreter's (probes/machine.py)
ONLY_PLANTED = {"SPARK_PREFLIGHT_PYTHON_PATH": ""}


@pytest.fixture
def user_tests(pytester: pytest.Pytester) -> None:
    """Two user tests beside the checks (what the gate and node-id tests select among)."""
    pytester.makepyfile(test_train="def test_train_one_step(): pass\ndef test_eval(): pass")


@pytest.fixture
def doubles(tmp_path: Path) -> Doubles:
    folder = tmp_path / "doubles"
    folder.mkdir()
    return Doubles(folder)


@pytest.fixture
def h200() -> Path:
    """Recorded output of a real NVIDIA H200 (driver 580, CUDA 13.0, torch 2.11+cu130)."""
    return H200


def make_root(base: Path, files: Mapping[str, str | bytes]) -> Path:
    """A fake machine root: ``{"proc/meminfo": text, ".dockerenv": ""}``."""
    base.mkdir(parents=True, exist_ok=True)
    for rel, content in files.items():
        path = base / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return base


@pytest.fixture
def fake_root(tmp_path: Path):
    def build(files: Mapping[str, str | bytes]) -> Path:
        return make_root(tmp_path / "root", files)

    return build


class SparkEnv:
    """A whole GB10 double exported into the environment, for pytester and CLI
    runs: a fake machine root (``SPARK_PREFLIGHT_HOST_ROOT``) holding
    ``/proc/meminfo`` of a 121.7 GiB Spark, and the pynvml/torch doubles on
    the probe children's PYTHONPATH, and no package folder of this
    interpreter's (``SPARK_PREFLIGHT_PYTHON_PATH`` empty: G1 and G9 scan only
    what a test plants on PYTHONPATH, not an ML image's torchvision or
    torchaudio). ``nvml_log``/``torch_log`` count how often each probe really ran."""

    def __init__(self, tmp_path: Path, doubles: Doubles) -> None:
        from doubles import gb10

        self.gb10 = gb10
        self.root = make_root(
            tmp_path / "spark-root",
            {"proc/meminfo": gb10.meminfo(), "proc/1/cgroup": "0::/\n", ".dockerenv": "", **gb10.stack_files(), **gb10.memory_files()},
        )
        self.nvml_log = tmp_path / "nvml.log"
        self.torch_log = tmp_path / "torch.log"
        self.doubles = doubles
        self.nvml_scenario = gb10.nvml(log=str(self.nvml_log))
        self.torch_scenario = gb10.torch(log=str(self.torch_log))

    def apply(self, monkeypatch: pytest.MonkeyPatch) -> SparkEnv:
        self.doubles.nvml(self.nvml_scenario).torch(self.torch_scenario)
        self.doubles.extra["SPARK_PREFLIGHT_HOST_ROOT"] = str(self.root)
        self.doubles.extra["SPARK_PREFLIGHT_PYTHON_PATH"] = ""
        self.doubles.apply(monkeypatch)
        return self

    def count(self, log: Path) -> int:
        return len(log.read_text().splitlines()) if log.exists() else 0


#: launcher and serving variables of a CI host that must not leak into a test
#: run: the ones G10 reads (taken from G10 itself), the token G8 sends, and the
#: hints of a Ray/vLLM cluster (the autouse ``hermetic_env`` removes them and
#: more; a test that builds an environment of its own drops these from it)
LAUNCHER_ENV = ("GITHUB_TOKEN", *G10_LAUNCHER_ENV, *G10_TP_ENV, "VLLM_HOST_IP", "RAY_ADDRESS", "SLURM_NTASKS")


@pytest.fixture
def spark_env(tmp_path: Path, doubles: Doubles, monkeypatch: pytest.MonkeyPatch) -> SparkEnv:
    """The GB10 double, exported (see :class:`SparkEnv`); the host's own
    variables are already gone (``hermetic_env``)."""
    return SparkEnv(tmp_path, doubles).apply(monkeypatch)


#: ``nonroot_run``: a child as the machine's own unprivileged user, ``nobody`` (no account is
#: made or removed): suiteuser.py
pytest_plugins = ("suiteuser",)


def spark_cli(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> Any:  # subprocess.CompletedProcess[str]
    """``spark-preflight`` in a child process (``python -m pytest_dgx_spark.cli``),
    with a timeout: a CLI that hung would stop this test, not the suite."""
    import subprocess

    return subprocess.run(
        [sys.executable, "-m", "pytest_dgx_spark.cli", *args],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=cwd,
        env=env,
    )


def isolated_path() -> list[str]:
    """This interpreter's ``sys.path`` without its package folders."""
    return [p for p in sys.path if not p.rstrip(os.sep).endswith(("site-packages", "dist-packages"))]


@pytest.fixture
def isolated(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checked environment is the test's fake site-packages only: this
    interpreter's own site-packages leave sys.path (and so Machine.python_path)."""
    monkeypatch.setattr(sys, "path", isolated_path())


@pytest.fixture
def scene(tmp_path: Path) -> Iterator[Any]:
    """A GB10 in a Docker container (``doubles.spark_scene.Scene``): the marker
    file and PID 1's cgroup, no site-packages of its own (G1 scans nothing).
    Its probes are stopped at the end. A test module that needs another
    machine overrides this fixture (requesting ``scene`` itself to build on it)."""
    from doubles.spark_scene import Scene  # it imports this conftest

    s = Scene(tmp_path / "spark")
    s.files({".dockerenv": "", "proc/1/cgroup": "0::/\n"})
    yield s
    s.stop()


@pytest.fixture(scope="session")
def quiet_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A machine root whose ``/proc`` lists one process: init, and nothing else.

    This box's process table is not a test's to control: other xdist workers
    plant fake servers (``--tensor-parallel-size 2 --nnodes 2``) that G10
    rightly judges. A test that runs G10 on the real machine and is not about
    processes points ``SPARK_PREFLIGHT_HOST_ROOT`` here (CI once failed when
    one of those servers was alive during a two-rank test). An empty ``/proc``
    would read as "cannot list processes", so init is there.
    """
    return make_root(tmp_path_factory.mktemp("quiet"), QUIET_PROC)


#: ``/proc`` files of a machine running init and nothing else (see :func:`quiet_root`)
QUIET_PROC = {
    "proc/1/stat": "1 (init) S 0 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 10 40542208 2308" + " 0" * 20 + "\n",
    "proc/1/cmdline": "/sbin/init\0",
}


@pytest.fixture(scope="session")
def kit(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Real ELF files built once with gcc: stub CUDA runtimes and extension
    modules linked against them (tests/doubles/elfkit.py)."""
    from doubles import elfkit

    if not elfkit.gcc_available() or elfkit.python_headers() is None:
        pytest.skip("gcc and Python.h are needed to build real ELF files")
    return elfkit.session_kit(tmp_path_factory.getbasetemp())


def _draw_one_chart() -> bool:
    """Draw one chart in this process before any in-process pytester run can:
    pytester drops the modules a run imported, and matplotlib/numpy cannot be
    imported a second time in one process (their classes would no longer match,
    "Single argument to subplot must be a three-digit integer, not GridSpec").
    Done when this conftest is imported, so it precedes every test of every
    xdist worker, whatever order they run in."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    from pytest_dgx_spark import chart

    data = chart.from_samples([{"t": 0, "gpus": [{"temperature_c": 1}]}, {"t": 1, "gpus": [{"temperature_c": 2}]}],
                              title="warm-up")
    for fmt in ("svg", "png"):
        chart.render(data, fmt)
    return True


MATPLOTLIB = _draw_one_chart()


@pytest.fixture(scope="session")
def matplotlib_loaded() -> None:
    """matplotlib, imported and used once before any test (see :func:`_draw_one_chart`)."""
    if not MATPLOTLIB:
        pytest.skip("matplotlib is not installed")
