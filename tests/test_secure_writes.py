"""Every file this tool writes refuses a planted symlink (issue 19, item 1).

Run as root, as CI is: a second, unprivileged user (``nobody``, in a forked
child that drops to its uid; no user is created) plants symlinks and files
in a world-writable sticky folder like ``/tmp``, and the report, the capture,
the charts and Allure's ``environment.properties`` are aimed there. Before
the fix ``write_bytes`` resolved the link (``os.path.realpath``) and replaced
the target: a root-only 0600 file became a 0644 report, and a dangling link
made a new file in a root-only folder.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pytest_dgx_spark import allure_report, chart, outfile, report

from conftest import PYTEST_CHILD, named_plugins

NOBODY = 65534
CLI = "import sys\nfrom pytest_dgx_spark.cli import main\nsys.exit(main())\n"
SECRET = b"root-only: ghp_notreallyasecret\n"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: a second user plants the links")


def as_nobody(action: Callable[[], None]) -> None:
    """Run ``action`` in a forked child with nobody's uid and gid."""
    pid = os.fork()
    if pid == 0:  # the child: never back into pytest
        code = 1
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            action()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the unprivileged user could not plant its file"


@pytest.fixture
def shared() -> Iterator[Path]:
    """A world-writable sticky folder (mode 1777, owned by root), like /tmp."""
    folder = Path(tempfile.mkdtemp(prefix="spark-shared-", dir="/tmp"))
    folder.chmod(0o1777)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def private(tmp_path: Path) -> Path:
    """A root-only folder holding a root-only 0600 file, ``secret``."""
    folder = tmp_path / "root-only"
    folder.mkdir(mode=0o700)
    (folder / "secret").write_bytes(SECRET)
    (folder / "secret").chmod(0o600)
    return folder


def plant_link(link: Path, target: Path) -> None:
    as_nobody(lambda: os.symlink(target, link))
    assert link.lstat().st_uid == NOBODY


def assert_untouched(private: Path) -> None:
    secret = private / "secret"
    assert secret.read_bytes() == SECRET
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600 and secret.stat().st_uid == 0
    assert sorted(p.name for p in private.iterdir()) == ["secret"]


def run_cli(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CLI, "--only", "G9", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={**os.environ, **env},
    )


def run_pytest(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PYTEST_CHILD, *named_plugins(tuple(args)), "--spark-preflight", "--spark-only=G9", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


def one_error_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


# --------------------------------------------------------------------------- the writer itself


@pytest.mark.parametrize("target", ["secret", "new.json"], ids=["to-a-0600-file", "dangling-into-root-only"])
def test_a_link_another_user_planted_is_never_written_through(shared: Path, private: Path, target: str) -> None:
    link = shared / "env-report.json"
    plant_link(link, private / target)
    for write in (
        lambda: report.write_json(link, {"verdict": "ready"}),
        lambda: outfile.write_bytes(link, b"x"),
    ):
        with pytest.raises(outfile.Refused, match="a symlink is there") as err:
            write()
        assert "\n" not in str(err.value)
    assert_untouched(private)
    assert link.is_symlink() and sorted(p.name for p in shared.iterdir()) == ["env-report.json"]


def test_a_linked_folder_another_user_planted_is_not_followed(shared: Path, private: Path) -> None:
    """``/tmp/out -> /root/…`` and ``--spark-report /tmp/out/env-report.json``:
    the file would land in the root-only folder."""
    plant_link(shared / "out", private)
    with pytest.raises(outfile.Refused, match=r"out is a symlink of another user \(uid 65534\)"):
        report.write_json(shared / "out" / "env-report.json", {})
    assert_untouched(private)


def test_another_users_file_in_a_shared_folder_is_not_replaced(shared: Path) -> None:
    theirs = shared / "env-report.json"
    as_nobody(lambda: theirs.write_text("theirs\n"))
    with pytest.raises(outfile.Refused, match=r"a file of another user \(uid 65534\) in a folder others can write"):
        report.write_json(theirs, {})
    assert theirs.read_text() == "theirs\n" and theirs.stat().st_uid == NOBODY


def test_our_own_file_in_a_shared_folder_is_replaced_and_keeps_its_mode(shared: Path) -> None:
    ours = shared / "env-report.json"
    ours.write_text("old\n")
    ours.chmod(0o600)
    report.write_json(ours, {"verdict": "ready"})
    assert '"ready"' in ours.read_text()
    assert stat.S_IMODE(ours.stat().st_mode) == 0o600 and not ours.is_symlink()
    assert sorted(p.name for p in shared.iterdir()) == ["env-report.json"]  # no temporary file left


def test_a_replaced_file_keeps_its_owner_and_mode_a_new_one_gets_the_umask(tmp_path: Path) -> None:
    folder = tmp_path / "reports"
    folder.mkdir(mode=0o755)
    kept = folder / "env-report.json"
    kept.write_text("old\n")
    os.chown(kept, NOBODY, NOBODY)
    kept.chmod(0o640)
    report.write_json(kept, {"verdict": "ready"})
    st = kept.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (NOBODY, NOBODY, 0o640)
    old = os.umask(0o027)
    try:
        report.write_json(folder / "new.json", {})
    finally:
        os.umask(old)
    assert stat.S_IMODE((folder / "new.json").stat().st_mode) == 0o640 & ~0o027


def test_the_chart_capture_and_allure_writers_refuse_the_link_too(shared: Path, private: Path) -> None:
    from pytest_dgx_spark import capture

    data = chart.ChartData(title="G4", traces=[chart.Trace(0, "GPU 0", [0.0, 1.0], [50.0, 51.0], [90.0, 91.0], [900.0, 910.0])])
    link = shared / "env-report.thermal-g4.svg"
    plant_link(link, private / "secret")
    note = chart.write(link, data)
    assert note.startswith(f"could not write {link}: a symlink is there"), note
    capture_link = shared / "capture.json"
    plant_link(capture_link, private / "new.json")
    with pytest.raises(outfile.Refused):
        capture.write(capture_link, {"schema": "x"}, {})
    allure = shared / "allure"
    allure.mkdir()
    allure.chmod(0o1777)
    plant_link(allure / "environment.properties", private / "secret")
    with pytest.raises(outfile.Refused):  # neither read (its lines were kept) nor written
        allure_report.write_environment(allure, {"spark.verdict": "ready"})
    assert_untouched(private)


# --------------------------------------------------------------------------- through the CLI and pytest


@pytest.mark.parametrize("flag", ["report", "capture"])
def test_cli_and_pytest_refuse_a_planted_link_in_one_line(
    shared: Path, private: Path, tmp_path: Path, flag: str
) -> None:
    link = shared / f"{flag}.json"
    plant_link(link, private / "secret")
    ran = run_cli([f"--{flag}", str(link)], tmp_path)
    assert ran.returncode == 2, ran.stderr
    line = one_error_line(ran.stderr)
    assert line.startswith(f"spark-preflight: error: --{flag}: {str(link)!r} refused: a symlink is there"), line
    done = run_pytest([f"--spark-{flag}={link}"], tmp_path)
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
    assert one_error_line(done.stderr).startswith(f"ERROR: --spark-{flag}: {str(link)!r} refused: a symlink")
    assert_untouched(private)


def test_a_rank_path_the_option_check_never_saw_is_refused_at_the_write(
    shared: Path, private: Path, tmp_path: Path
) -> None:
    """Rank 1 writes ``env.rank1.json``: a link planted there is refused by
    the writer itself, one line and exit 2."""
    plant_link(shared / "env.rank1.json", private / "new.json")
    ran = run_cli(["--report", str(shared / "env.json")], tmp_path, RANK="1")
    assert ran.returncode == 2, ran.stderr
    assert one_error_line(ran.stderr).startswith(
        f"spark-preflight: error: cannot write {shared / 'env.rank1.json'}: a symlink is there"
    )
    assert_untouched(private)


@pytest.mark.parametrize(
    ("flag", "name", "target"),
    [("--junitxml", "junit.xml", "secret"), ("--html", "report.html", "new.html"), ("--alluredir", "allure", "")],
)
def test_other_plugins_outputs_aimed_by_another_user_stop_a_preflight_run(
    shared: Path, private: Path, tmp_path: Path, flag: str, name: str, target: str
) -> None:
    """JUnit, pytest-html and allure-pytest write their own files, through a
    link; a preflight run checks their paths first and stops in one line."""
    link = shared / name
    plant_link(link, private / target if target else private)
    done = run_pytest([f"{flag}={link}"], tmp_path)
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
    line = one_error_line(done.stderr)
    assert line.startswith(f"ERROR: {flag}: {str(link)!r} refused: "), line
    assert "uid 65534" in line
    assert_untouched(private)
