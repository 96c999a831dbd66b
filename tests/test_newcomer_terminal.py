"""What a newcomer reads at the terminal (issue 34 items 1, 7, 8): pytest's ``-v`` shows each
check's details and readings as the README says; each gotcha's name is on screen without ``-v``
while the ``G<n> <STATUS>: <text>`` lines stay as tools parse them; no default line is wider than
the terminal, the CLI's included. The GB10 double plants the machine (G3: MemAvailable 112.8 of
121.7 GiB, so 100 GiB WARNs and 1000 GiB FAILs)."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from pytest_dgx_spark import catalog

from conftest import spark_cli as cli
from doubles.spark_scene import section

GLINE = re.compile(rf"^(?:{'|'.join(catalog.IDS)}) (?:PASS|FAIL|WARN|SKIP|INFO): \S")
README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


@pytest.fixture(autouse=True)
def _gb10(spark_env):
    return spark_env


def whole_section(outlines: list[str]) -> list[str]:
    """Every line of pytest's ``spark preflight`` section."""
    start = next(i for i, ln in enumerate(outlines) if re.match(r"^=+ spark preflight =+$", ln))
    end = next((i for i in range(start + 1, len(outlines)) if outlines[i].startswith("==")), len(outlines))
    return outlines[start + 1 : end]


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:randomly", "--spark-preflight", *args)


def test_pytest_v_shows_whole_lines_details_and_readings_as_the_readme_says(pytester: pytest.Pytester) -> None:
    """Item 1: ``pytest --spark-preflight -v  # whole lines, details and readings``; -v printed the
    whole lines only (details and readings came with -rA or JUnit)."""
    assert re.search(r"pytest --spark-preflight -v +# whole lines, details and readings", README)
    result = run(pytester, "--spark-only", "G3", "--spark-workload-gb", "100", "-v")
    lines = whole_section(result.outlines)
    g3 = next(i for i, ln in enumerate(lines) if ln.startswith("G3 WARN: "))
    assert "; fix: " in lines[g3] and not lines[g3].endswith("…")  # whole
    after = lines[g3 + 1 :]
    assert "  mem_available = 112.8 GiB" in after, lines  # a reading
    assert any(ln.startswith("  ") and " = " not in ln for ln in after), lines  # a detail
    assert lines[-1].startswith("verdict: ")
    default = whole_section(run(pytester, "--spark-only", "G3", "--spark-workload-gb", "100").outlines)
    assert not any(ln.startswith("  mem_available") for ln in default), default


def test_the_section_names_each_gotcha_and_keeps_the_line_format(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 7: ``G5 INFO: budget 160-190 GB/s…`` meant little to a newcomer; the section now starts
    with each check's name from the catalog, wrapped to the terminal, and the lines are unchanged."""
    monkeypatch.setenv("COLUMNS", "80")
    result = run(pytester, "--spark-workload-gb", "100")
    lines = whole_section(result.outlines)
    legend = lines[: next(i for i, ln in enumerate(lines) if GLINE.match(ln))]
    assert legend and legend[0].startswith("gotchas: G1 CUDA 12/13 ABI, G2 flash-attn and Unsloth"), lines
    assert all(len(ln) <= 80 for ln in legend), legend
    said = " ".join(ln.strip() for ln in legend)
    assert all(f"{c.id} {c.title}" in said for c in catalog.CHECKS), said
    assert [ln.split()[0] for ln in section(result.outlines)[: len(catalog.IDS)]] == list(catalog.IDS)
    assert not any(GLINE.match(ln) for ln in legend)  # a tool's parse of the G-lines sees none of it
    one = whole_section(run(pytester, "--spark-only", "G5").outlines)
    assert one[0] == "gotchas: G5 bandwidth budget" and one[1].startswith("G5 INFO: budget"), one
    quiet = whole_section(run(pytester, "--spark-only", "G5", "-q").outlines)
    assert not any(ln.startswith("gotchas:") for ln in quiet), quiet


def test_no_default_cli_line_is_wider_than_the_terminal(tmp_path: Path) -> None:
    """Item 8: at COLUMNS=80 the CLI printed ``G3 FAIL: workload 1000 GiB > this machine's total memory
    … (quantize…`` 104 columns wide: it cut its lines to 120 whatever the terminal."""
    env = {**os.environ, "COLUMNS": "80"}
    proc = cli("--only", "G1,G3,G4,G5,G8", "--offline", "--workload-gb", "1000", cwd=tmp_path, env=env)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    g3 = next(ln for ln in lines if ln.startswith("G3 FAIL: workload 1000 GiB"))
    assert "; fix: " in g3, g3
    assert all(len(ln) <= 80 for ln in lines), [ln for ln in lines if len(ln) > 80]
    assert any(ln.endswith("not run: deselected (--only G1,G3,G4,G5,G8)") for ln in lines), lines
    wide = cli("--only", "G3", "--workload-gb", "1000", cwd=tmp_path, env={**os.environ, "COLUMNS": "200"})
    assert len(wide.stdout.splitlines()[0]) > 80  # the terminal's width, not a fixed 80


def _at_a_terminal(*args: str, cwd: Path, columns: int) -> str:
    """``spark-preflight`` with its stdout on a real pseudo-terminal of ``columns`` columns."""
    main, tty = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env |= {"TERM": "dumb", "NO_COLOR": "1"}
    fcntl.ioctl(tty, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "pytest_dgx_spark.cli", *args], stdout=tty,
                            stderr=subprocess.DEVNULL, cwd=cwd, env=env)  # fmt: skip
    os.close(tty)
    out = b""
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    proc.wait(timeout=180)
    os.close(main)
    return out.decode("utf-8", "replace").replace("\r\n", "\n")


def test_the_cli_names_each_gotcha_at_a_terminal_and_not_in_a_pipe(tmp_path: Path) -> None:
    """Item 7 for the CLI: at a terminal the names come first; a pipe (a tool, ``| grep``) gets the
    lines alone, as before. Item 8: the terminal's own width, with no COLUMNS set."""
    shown = _at_a_terminal("--only", "G3,G5", "--workload-gb", "1000", cwd=tmp_path, columns=72).splitlines()
    assert shown[0] == "gotchas: G3 UMA headroom, G5 bandwidth budget", shown
    assert shown[1].startswith("G3 FAIL: workload 1000 GiB") and all(len(ln) <= 72 for ln in shown), shown
    piped = cli("--only", "G3,G5", "--workload-gb", "1000", cwd=tmp_path)
    assert piped.stdout.splitlines()[0].startswith("G3 FAIL: "), piped.stdout
