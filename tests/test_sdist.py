"""The source distribution stands alone: what the README links to is in it,
and its test suite collects and runs from it.

Built here the way ``python -m build`` builds it (setuptools' PEP 517
backend, in a child process, from this checkout), without the network:
``.ci/run`` builds it with ``build`` and fails on any warning, and so does
this test.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from conftest import PYTEST_ARGS

ROOT = Path(__file__).resolve().parent.parent
#: what .ci/run treats as a packaging warning
WARNING = re.compile(r"^WARNING|would be ignored|SetuptoolsDeprecationWarning", re.MULTILINE)
#: a Markdown link or image to a file of the repository (not a URL, not an anchor)
LOCAL_LINK = re.compile(r"\]\((?!https?:|#|mailto:)([^)#\s]+)(?:#[^)]*)?\)")


@pytest.fixture(scope="module")
def sdist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The unpacked sdist of this checkout."""
    out = tmp_path_factory.mktemp("sdist")
    build = "import sys; from setuptools import build_meta; print(build_meta.build_sdist(sys.argv[1]))"
    proc = subprocess.run(
        [sys.executable, "-c", build, str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    warned = WARNING.findall(proc.stdout + proc.stderr)
    assert not warned, proc.stdout + proc.stderr
    with tarfile.open(out / proc.stdout.strip().splitlines()[-1]) as tar:
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
    the capture replays run from the sdist's own files."""
    assert not list(sdist.rglob("__pycache__")), "bytecode in the sdist"
    collect = subprocess.run(
        [sys.executable, *PYTEST_ARGS, "--co", "-q"], cwd=sdist, capture_output=True, text=True, timeout=300
    )
    assert collect.returncode == 0, collect.stdout[-3000:] + collect.stderr[-2000:]
    assert re.search(r"^\d+ tests collected", collect.stdout, re.MULTILINE), collect.stdout[-500:]
    run = subprocess.run(
        [sys.executable, *PYTEST_ARGS, "-q", "tests/test_captures_replay.py"],
        cwd=sdist,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
