"""The source distribution stands alone: what the README links to is in it,
and its test suite collects and runs from it.

Built here the way ``python -m build`` builds it (setuptools' PEP 517
backend, in a child process, the wheel from the unpacked sdist), without
the network; a build that prints a packaging warning fails. These tests are
CI's packaging check: ``.ci/run`` runs them once, in its fresh lane, and
builds nothing itself.

The build runs in a private copy of the checkout's files, never in the
checkout: setuptools writes ``*.egg-info`` next to ``pyproject.toml``, and
two xdist workers building in one folder at once trip over each other's
half-written egg-info (and a build must not leave files in the checkout).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from conftest import PYTEST_ARGS

#: builds the sdist: once per CI run (.ci/run's fresh lane), not in every lane
pytestmark = pytest.mark.packaging

ROOT = Path(__file__).resolve().parent.parent
#: a packaging warning (setuptools' and build's words for a setting it ignores or will refuse)
WARNING = re.compile(r"^WARNING|would be ignored|SetuptoolsDeprecationWarning", re.MULTILINE)
#: a Markdown link or image to a file of the repository (not a URL, not an anchor)
LOCAL_LINK = re.compile(r"\]\((?!https?:|#|mailto:)([^)#\s]+)(?:#[^)]*)?\)")


#: what a copy of the checkout leaves out when git cannot list the files
#: (an unpacked sdist, a tarball of the tree): environments, caches, builds
UNTRACKED = (
    ".git",
    ".venv",
    "venv",
    ".ci-*",
    "__pycache__",
    "*.py[cod]",
    "*.egg-info",
    "build",
    "dist",
    ".*_cache",
)
#: the setuptools that reads ``license = "MIT"`` (PEP 639) in pyproject.toml
SETUPTOOLS_FLOOR = 77


def source_files(root: Path) -> list[str] | None:
    """The checkout's files as git sees them: tracked (as they are on disk)
    and untracked but not ignored (a test written and not yet committed).
    None where ``root`` is no git checkout or git is missing."""
    if shutil.which("git") is None or not (root / ".git").exists():
        return None
    proc = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if proc.returncode != 0:
        return None
    return [name for name in proc.stdout.split("\0") if name]


def copy_checkout(root: Path, dest: Path) -> Path:
    """A private copy of the files of ``root`` to build from (see the module
    docstring). Files git lists but the checkout deleted are left out."""
    names = source_files(root)
    if names is None:
        shutil.copytree(root, dest, ignore=shutil.ignore_patterns(*UNTRACKED), symlinks=True)
        return dest
    for name in names:
        source = root / name
        if not source.is_file():
            continue
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    return dest


def test_the_build_copy_holds_the_new_files_and_leaves_out_the_environment(tmp_path: Path) -> None:
    """The copy is what setuptools would read in the checkout: an untracked
    test is in it (the sdist of a working tree, not of the last commit), the
    venv and git's own folder are not."""
    (tmp_path / "src").mkdir()
    subprocess.run(["git", "init", "-q"], cwd=tmp_path / "src", check=True, timeout=60)
    (tmp_path / "src" / ".gitignore").write_text(".venv/\n")
    (tmp_path / "src" / "pyproject.toml").write_text("")
    (tmp_path / "src" / ".venv").mkdir()
    (tmp_path / "src" / ".venv" / "pyvenv.cfg").write_text("")
    copy = copy_checkout(tmp_path / "src", tmp_path / "copy")
    assert sorted(str(p.relative_to(copy)) for p in copy.rglob("*")) == [".gitignore", "pyproject.toml"]
    shutil.rmtree(tmp_path / "src" / ".git")
    copy = copy_checkout(tmp_path / "src", tmp_path / "copy-without-git")
    assert sorted(str(p.relative_to(copy)) for p in copy.rglob("*")) == [".gitignore", "pyproject.toml"]


def build(kind: str, tree: Path, out: Path) -> Path:
    """Build ``kind`` (``sdist`` or ``wheel``) of ``tree`` into ``out`` with setuptools' PEP 517
    backend in a child process, as ``python -m build`` does; the file built. A failed build or a
    packaging warning fails the test."""
    hook = f"import sys; from setuptools import build_meta; print(build_meta.build_{kind}(sys.argv[1]))"
    proc = subprocess.run(
        [sys.executable, "-c", hook, str(out)], cwd=tree, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    warned = WARNING.findall(proc.stdout + proc.stderr)
    assert not warned, proc.stdout + proc.stderr
    return out / proc.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def sdist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The unpacked sdist of this checkout, built from a private copy."""
    import setuptools

    major = int(setuptools.__version__.split(".")[0])
    assert major >= SETUPTOOLS_FLOOR, (
        f'setuptools {setuptools.__version__} cannot build this sdist: `license = "MIT"` needs'
        f" setuptools>={SETUPTOOLS_FLOOR} (pip install 'setuptools>={SETUPTOOLS_FLOOR}')"
    )
    out = tmp_path_factory.mktemp("sdist")
    tree = copy_checkout(ROOT, tmp_path_factory.mktemp("checkout") / "tree")
    with tarfile.open(build("sdist", tree, out)) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(out, filter="data")
        else:  # pragma: no cover - Python without the extraction filters
            tar.extractall(out)  # our own archive, just built
    (unpacked,) = [p for p in out.iterdir() if p.is_dir()]
    return unpacked


def test_every_local_link_of_the_readme_and_docs_resolves_in_the_sdist(sdist: Path) -> None:
    pages = [sdist / "README.md", *sorted((sdist / "docs").glob("*.md"))]
    assert len(pages) >= 4, pages  # README, CAPTURE, EVIDENCE, SEED
    dead = [
        f"{page.relative_to(sdist)} -> {target}"
        for page in pages
        for target in LOCAL_LINK.findall(page.read_text())
        if not (page.parent / target).exists()
    ]
    assert not dead, dead
    assert (sdist / "CHANGELOG.md").is_file() and (sdist / "LICENSE").is_file()


def test_the_sdists_test_suite_collects_and_a_replay_test_runs(sdist: Path) -> None:
    """The suite's helpers and data travel with it (conftest, doubles, data);
    the capture replays run from the sdist's own files: each capture replays
    to the lines its run printed (the rest of that module runs in the suite)."""
    assert not list(sdist.rglob("__pycache__")), "bytecode in the sdist"
    # one pytest: the whole suite collects (a broken helper or missing data file is a collection error)
    # and the capture replays run from the sdist's own files: every capture, and the census of them
    replays = "test_captures_replay and (replays_to_the_lines or five_captures or hold_what_their_runs_saw)"
    run = subprocess.run(
        [sys.executable, *PYTEST_ARGS, "-q", "-k", replays],
        cwd=sdist,
        capture_output=True,
        text=True,
        timeout=300,
    )
    counts = dict((k, int(n)) for n, k in re.findall(r"(\d+) (passed|deselected|error|errors|failed)", run.stdout))
    assert counts.get("passed", 0) >= 8 and counts.get("deselected", 0) > 1000, run.stdout[-800:]
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]


def test_the_wheel_built_from_the_sdist_builds_cleanly_and_carries_the_entry_points(
    sdist: Path, tmp_path: Path
) -> None:
    """What ``python -m build`` does second: a wheel from the unpacked sdist
    (a copy: the build writes egg-info and build/ beside the sources). Its
    console scripts and pytest's entry point are the ones users run, and the
    probe scripts and known-bad list travel as package data."""
    tree = tmp_path / "sdist"
    shutil.copytree(sdist, tree, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "dist"
    out.mkdir()
    with zipfile.ZipFile(build("wheel", tree, out)) as wheel:
        names = wheel.namelist()
        (points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        entry_points = wheel.read(points).decode()
    assert "[pytest11]\ndgx_spark = pytest_dgx_spark.plugin" in entry_points, entry_points
    for script in (
        "spark-preflight = pytest_dgx_spark.cli:main",
        "spark-slurm-prolog = pytest_dgx_spark.slurm:prolog",
    ):
        assert script in entry_points, entry_points
    assert "pytest_dgx_spark/probes/scripts/python_child.py" in names
    assert any(n.startswith("pytest_dgx_spark/data/") for n in names), names
    assert not [n for n in names if "__pycache__" in n or n.startswith("tests/")], names
