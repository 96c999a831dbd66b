"""Every install command the README, the docs and the CI examples show works
for someone who has this repository (issue 24, item 5).

pytest-dgx-spark is not on PyPI: ``pip install "pytest-dgx-spark[json]"``
answers ``No matching distribution``. So each command that installs it uses
one of three forms, and no other:

- a path to the checkout (``pip install "./pytest-dgx-spark[json]"``,
  ``pip install -e .``);
- a wheel built from it (``pip wheel ./pytest-dgx-spark --no-deps -w dist``,
  then ``pip install dist/pytest_dgx_spark-*.whl``);
- a ``git+https://`` direct reference to the repository pyproject.toml names.

The path and wheel forms of the README run here as written, each in a new
virtual environment that sees nothing of this one, and the installed plugin
then runs a replay through its console script and through pytest's entry
point. The project itself comes only from the checkout; its dependencies
(pytest, nvidia-ml-py, …) come from the package index pip is configured with,
as they would for a user (PyPI, a mirror). Where pip reaches no index, that
test skips and says so rather than pretending. The git form cannot be fetched
in a test: it is checked to be a well-formed requirement pointing at the
project's URL.
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest
import yaml
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from test_sdist import copy_checkout

import hermetic

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10: tomli is a dependency there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
CAPTURE = ROOT / "tests" / "data" / "captures" / "gb10-public-healthy.json.gz"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
HOMEPAGE = PROJECT["urls"]["Homepage"]
NAME = canonicalize_name(PROJECT["name"])
#: the folder ``git clone <Homepage>`` makes
CLONE = HOMEPAGE.rstrip("/").rsplit("/", 1)[1]
#: packages of others a page may tell you to install, all on PyPI
OTHERS = {"pytest-xdist", "torch"}
#: pip options that take a value
VALUED = {"--index-url", "-i", "--extra-index-url", "-c", "--constraint", "-r", "--requirement"}
DIRECT = re.compile(r"pytest-dgx-spark(?:\[[\w,]+\])? @ [^\"'\s`,]+")


def pages() -> dict[str, str]:
    """Every page and example a user copies install lines from, with the
    GitLab example's variables expanded as the runner expands them (the
    README and docs/REPORTS.md show that job too)."""
    files = [README, ROOT / "SECURITY.md", *sorted((ROOT / "docs").glob("*.md"))]
    files += [ROOT / "conftest_examples" / ".gitlab-ci.yml", ROOT / "conftest_examples" / "Jenkinsfile"]
    texts = {str(p.relative_to(ROOT)): p.read_text() for p in files}
    variables = yaml.safe_load(texts["conftest_examples/.gitlab-ci.yml"]).get("variables") or {}
    for page, text in texts.items():
        for name, value in variables.items():
            text = text.replace(f"${{{name}}}", value).replace(f"${name}", value)
        texts[page] = text
    return texts


def install_commands() -> list[tuple[str, list[str]]]:
    """(page, arguments after ``pip install``) for every ``pip install`` line."""
    found = []
    for page, text in pages().items():
        for line in text.splitlines():
            for m in re.finditer(r"pip install (.+)", line):
                rest = re.split(r" && |`| #|\|", m.group(1))[0].strip().rstrip("'")
                if rest:
                    found.append((page, shlex.split(rest)))
    return found


def requirement_args(args: list[str]) -> list[str]:
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in VALUED:
            skip = True
        elif arg == "-e" or arg.startswith("-"):
            continue
        else:
            out.append(arg)
    return out


def form(arg: str) -> str:
    """How ``arg`` installs: ``path``, ``wheel``, ``git`` or ``index`` (another
    project's name); an assertion names what cannot work."""
    if "://" not in arg and " @ " not in arg and (arg.startswith((".", "/")) or "/" in arg):
        path = re.sub(r"\[[\w,]+\]$", "", arg)
        if path.endswith(".whl"):
            assert path == "dist/pytest_dgx_spark-*.whl", f"{arg}: the wheel pip wheel -w dist writes"
            return "wheel"
        assert path in (".", f"./{CLONE}"), f"{arg}: not the checkout (. or ./{CLONE})"
        return "path"
    try:
        req = Requirement(arg)
    except InvalidRequirement as e:
        raise AssertionError(f"{arg!r} is not a requirement pip reads: {e}") from None
    if canonicalize_name(req.name) != NAME:
        assert canonicalize_name(req.name) in OTHERS, f"{arg}: an unexpected package"
        return "index"
    assert req.url, f"{arg}: {NAME} is not on PyPI; install from a path, a wheel or the git URL"
    return git_form(arg)


def git_form(arg: str) -> str:
    req = Requirement(arg)
    assert req.url is not None and req.url.startswith("git+https://"), arg
    url = req.url[len("git+") :]
    assert url == HOMEPAGE or url.startswith(HOMEPAGE + "@"), f"{req.url} is not the project's {HOMEPAGE}"
    assert set(req.extras) <= set(PROJECT["optional-dependencies"]), req.extras
    return "git"


def first(pattern: str, text: str) -> str:
    """The first group of ``pattern``'s first match in ``text`` (which must have one)."""
    m = re.search(pattern, text, re.DOTALL)
    assert m, f"no {pattern!r}"
    return m.group(1)


COMMANDS = install_commands()


def test_every_install_command_uses_a_form_that_exists() -> None:
    forms: dict[str, list[str]] = {}
    for page, args in COMMANDS:
        for arg in requirement_args(args):
            forms.setdefault(form(arg), []).append(f"{page}: {arg}")
    # the README shows all three forms, and each CI example installs a form that exists
    readme = {f for f, uses in forms.items() for use in uses if use.startswith("README.md:")}
    assert {"path", "wheel", "git"} <= readme, forms
    assert any(u.startswith("conftest_examples/.gitlab-ci.yml") for u in forms.get("git", [])), forms
    assert any(u.startswith("conftest_examples/Jenkinsfile") for u in forms.get("git", [])), forms


def test_a_bare_name_from_pypi_is_refused() -> None:
    """The check above can fail: 0.3.0's line is caught."""
    with pytest.raises(AssertionError, match="not on PyPI"):
        form("pytest-dgx-spark[json]")
    with pytest.raises(AssertionError, match="is not the project's"):
        form("pytest-dgx-spark @ git+https://github.com/someone-else/pytest-dgx-spark")


def test_the_requirement_lines_for_your_own_project_point_at_the_project() -> None:
    """The requirements lines and the pyproject dependency the README shows
    are PEP 508 direct references to the project's repository, and the README
    says ``-n auto`` needs pytest-xdist."""
    text = README.read_text()
    lines = DIRECT.findall(text)
    assert len(lines) >= 3, lines  # the pip line, the requirements line, the pyproject line
    for line in lines:
        git_form(line)
    toml_block = first(r"```toml\n(.*?)```", text)
    deps = tomllib.loads(toml_block)["project"]["optional-dependencies"]["test"]
    assert {canonicalize_name(Requirement(d).name) for d in deps} == {NAME, "pytest-xdist"}
    assert "pytest-xdist" in text.split("## The two commands")[0] and "-n auto" in text


def run(argv: list[str] | str, cwd: Path, env: dict[str, str], timeout: int = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=cwd, env=env, shell=isinstance(argv, str), capture_output=True, text=True, timeout=timeout
    )


def clean_venv(path: Path) -> dict[str, str]:
    """A new virtual environment with its own pip and no access to this one's
    packages; the environment to run its commands in."""
    venv.EnvBuilder(with_pip=True, clear=True).create(path)
    env = hermetic.clean(os.environ)
    for name in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PYTEST_DISABLE_PLUGIN_AUTOLOAD", "PYTEST_ADDOPTS"):
        env.pop(name, None)
    env["PATH"] = f"{path / 'bin'}{os.pathsep}{env.get('PATH', os.defpath)}"
    env["VIRTUAL_ENV"] = str(path)
    return env


def readme_install_lines() -> list[str]:
    """The ``pip`` lines of the README's install block, in order."""
    block = first(r"## Install\n.*?```bash\n(.*?)```", README.read_text())
    return [line.split(" #")[0].strip() for line in block.splitlines() if line.startswith("pip ")]


def assert_installed_plugin_runs(env: dict[str, str], where: Path) -> None:
    """The console script and pytest's entry point of the installed package
    (not this checkout's) run a replay."""
    project = where / "project"
    project.mkdir(parents=True)
    cli = run(["spark-preflight", "--replay", str(CAPTURE)], project, env, timeout=120)
    assert cli.returncode == 0 and "verdict: ready" in cli.stdout, cli.stdout + cli.stderr
    origin = run(["python", "-c", "import pytest_dgx_spark; print(pytest_dgx_spark.__file__)"], project, env)
    assert str(ROOT) not in origin.stdout, f"the checkout's package, not the installed one: {origin.stdout}"
    plugin = run(
        ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "--spark-preflight", f"--spark-replay={CAPTURE}", "spark_preflight"],
        project,
        env,
        timeout=120,
    )
    assert plugin.returncode == 0 and "10 passed" in plugin.stdout, plugin.stdout[-2000:] + plugin.stderr[-2000:]


@pytest.mark.packaging  # builds a wheel into new venvs: once per CI run (.ci/run's fresh lane)
def test_the_readme_path_and_wheel_installs_work_in_a_clean_venv(tmp_path: Path) -> None:
    """The README's install block, run as written from the folder the clone is
    in (the ``git clone`` itself is a copy of this checkout's files)."""
    lines = readme_install_lines()
    path_line, wheel_build, wheel_install = (
        next(line for line in lines if "./" + CLONE + "[" in line and line.startswith("pip install")),
        next(line for line in lines if line.startswith("pip wheel")),
        next(line for line in lines if ".whl" in line),
    )
    copy_checkout(ROOT, tmp_path / CLONE)
    env = clean_venv(tmp_path / "venv-path")
    probe = run(["pip", "install", "--dry-run", "--no-deps", "pytest>=9"], tmp_path, env, timeout=180)
    if probe.returncode != 0:
        pytest.skip(f"pip reaches no package index for the dependencies here: {probe.stderr.strip()[-300:]}")

    installed = run(path_line, tmp_path, env)
    assert installed.returncode == 0, installed.stdout[-2000:] + installed.stderr[-2000:]
    assert run(["python", "-c", "import pytest_jsonreport"], tmp_path, env).returncode == 0, "the [json] extra"
    assert_installed_plugin_runs(env, tmp_path / "from-path")

    built = run(wheel_build, tmp_path, env)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    assert glob.glob(str(tmp_path / "dist" / "pytest_dgx_spark-*.whl")), list((tmp_path / "dist").iterdir())
    env = clean_venv(tmp_path / "venv-wheel")
    installed = run(wheel_install, tmp_path, env)
    assert installed.returncode == 0, installed.stdout[-2000:] + installed.stderr[-2000:]
    assert_installed_plugin_runs(env, tmp_path / "from-wheel")
    # the other console scripts and the module entry point start from the wheel's files
    for argv in (["spark-slurm-prolog", "--help"], ["spark-slurm-health", "--help"], ["python", "-m", "pytest_dgx_spark", "--help"]):
        started = run(argv, tmp_path, env, timeout=120)
        assert started.returncode == 0 and "usage:" in started.stdout, (argv, started.stdout + started.stderr)
    # the known-bad list is package data: the wheel carries it (G1 reads it in every run)
    shipped = run(["python", "-c", "from pytest_dgx_spark import known_bad; print(len(known_bad.shipped()))"], tmp_path, env)
    assert shipped.returncode == 0 and int(shipped.stdout) >= 5, shipped.stdout + shipped.stderr
    shutil.rmtree(tmp_path / CLONE)

