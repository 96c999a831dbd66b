"""Every sample output in the README comes from the command shown with it.

A sample is a fenced block whose first line is ``$ <command>``; the rest of
the block is what that command prints (stdout and stderr), run from the root
of a checkout. Each command replays a capture of ``tests/data/captures/``, so
it reads nothing of the machine that runs it and prints the same lines
anywhere. Only what honestly varies between runs is normalised: the seconds
pytest's last line reports. A sample shows the lines of the checks its
capture was made with; a check added later is not in it, so the command runs
with the catalog of the checks the sample shows (``tests/onlychecks.py``):
one more check leaves every sample as it is, word for word.

When the product's wording changes, regenerate the blocks (and read the diff):

    python tests/test_readme_samples.py --update

Without ``--update`` the script prints each sample that differs and exits 1.
"""

from __future__ import annotations

import difflib
import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import onlychecks
import pytest

from pytest_dgx_spark import catalog

import hermetic

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
CAPTURES = ROOT / "tests" / "data" / "captures"
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
#: a line only the product prints: a check's fixed-format line or the verdict
PRODUCT_LINE = re.compile(r"^(G\d+ (PASS|FAIL|WARN|SKIP|INFO): |verdict: )", re.MULTILINE)
#: the run time on pytest's last line (``1 failed, 6 passed in 1.75s``)
RUN_TIME = re.compile(r" in \d+(?:\.\d+)?s\b")
REPLAY = re.compile(r"--(?:spark-)?replay[= ](\S+)")
#: the ids a sample's lines name: ``G3 INFO: …``, ``G1, G2 not run: …``
LINE_IDS = re.compile(r"^((?:G\d+, )*G\d+)(?: (?:PASS|FAIL|WARN|SKIP|INFO):| (?:tests )?not run:)", re.MULTILINE)


@dataclass(frozen=True)
class Sample:
    command: str
    output: str
    start: int  # offset of the output in the README's text
    end: int


def samples(text: str) -> list[Sample]:
    """The README's blocks that start with ``$ <command>``, in order."""
    found = []
    for m in FENCE.finditer(text):
        body = m.group(1)
        if body.startswith("$ "):
            first, _, output = body.partition("\n")
            found.append(Sample(first[2:], output, m.start(1) + len(first) + 1, m.end(1)))
    return found


def argv(command: str) -> list[str]:
    """The command as this interpreter runs it: ``spark-preflight`` through its
    module, ``pytest`` loading only this plugin (the output of other installed
    plugins is theirs, not ours), writing no cache into the checkout, and
    without this suite's own ``tests/conftest.py`` (pytest loads it from the
    ``testpaths``; it reports on the machine's accounts, which other runs on a
    shared machine change)."""
    words = shlex.split(command)
    if words[0] == "spark-preflight":
        return [sys.executable, "-m", "pytest_dgx_spark", *words[1:]]
    if words[0] == "pytest":
        return [sys.executable, "-m", "pytest", "-p", "dgx_spark", "-p", "no:cacheprovider", "--noconftest", *words[1:]]
    raise ValueError(f"a README sample runs spark-preflight or pytest, not {words[0]!r}")


def shown_checks(output: str) -> list[str]:
    """The checks whose lines a sample shows, in the catalog's order."""
    named = {i for m in LINE_IDS.finditer(output) for i in m.group(1).split(", ")}
    return [i for i in catalog.IDS if i in named]


def run(command: str, checks: list[str] | None = None) -> str:
    """What ``command`` prints, run from the checkout's root (80 columns, no
    plugin autoload, none of the machine's launcher or GPU variables); with
    ``checks`` (some of the catalog's), as if only those checks existed."""
    env = hermetic.clean(os.environ)
    env["COLUMNS"] = "80"
    with tempfile.TemporaryDirectory(prefix="spark-checks-") as folder:
        line = argv(command)
        if checks and checks != list(catalog.IDS):
            line = onlychecks.argv(Path(folder), checks, line[2], *line[3:])  # [python, -m, module, ...]
        proc = subprocess.run(
            line,
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=120,
        )
    return proc.stdout


def normal(text: str) -> str:
    return "\n".join(RUN_TIME.sub(" in <t>s", line.rstrip()) for line in text.strip("\n").splitlines())


SAMPLES = samples(README.read_text())


def test_the_readme_has_samples_and_every_product_output_has_its_command() -> None:
    """A block that shows the product's lines without a ``$`` command is a
    sample nobody can reproduce (issue 24, item 11)."""
    assert len(SAMPLES) >= 3, SAMPLES
    for m in FENCE.finditer(README.read_text()):
        if PRODUCT_LINE.search(m.group(1)):
            assert m.group(1).startswith("$ "), f"sample without its command:\n{m.group(1)[:300]}"


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.command for s in SAMPLES])
def test_each_readme_sample_is_what_its_command_prints(sample: Sample) -> None:
    replays = REPLAY.findall(sample.command)
    assert replays, f"{sample.command}: a sample replays a capture, so it prints the same anywhere"
    for path in replays:
        assert (ROOT / path).resolve().parent == CAPTURES and (ROOT / path).is_file(), path
    got = normal(run(sample.command, shown_checks(sample.output)))
    want = normal(sample.output)
    assert got == want, (
        "the README's sample differs from what its command prints; after a change of wording, run "
        "`python tests/test_readme_samples.py --update` and read the diff:\n"
        + "\n".join(difflib.unified_diff(want.splitlines(), got.splitlines(), "README", "now", lineterm=""))
    )


def test_the_opening_sample_shows_the_playbook_line_its_capture_declared() -> None:
    """0.3.0 showed ``G8 PASS: no open issue names 'pytorch-fine-tune'`` from a
    plain ``spark-preflight``; the line needs a declared playbook, which this
    capture's options hold and the text beside the sample names."""
    import gzip
    import json

    first = SAMPLES[0]
    assert "G8 PASS: no open issue names 'pytorch-fine-tune'" in first.output
    (path,) = REPLAY.findall(first.command)
    with gzip.open(ROOT / path, "rt") as f:
        assert json.load(f)["options"]["playbook"] == "pytorch-fine-tune"
    assert "--playbook pytorch-fine-tune" in README.read_text()[: first.start]


def update() -> int:
    """Rewrite every sample's output with what its command prints now."""
    text = README.read_text()
    changed = 0
    for sample in reversed(samples(text)):  # from the end: earlier offsets stay valid
        output = run(sample.command, shown_checks(sample.output)).rstrip("\n") + "\n"
        if normal(output) != normal(sample.output):
            changed += 1
            print(f"updated: $ {sample.command}")
        text = text[: sample.start] + output + text[sample.end :]
    README.write_text(text)
    print(f"{changed} of {len(samples(text))} samples changed")
    return 0


def check() -> int:
    differ = 0
    for sample in samples(README.read_text()):
        got, want = normal(run(sample.command, shown_checks(sample.output))), normal(sample.output)
        if got != want:
            differ += 1
            print(f"$ {sample.command}")
            print("\n".join(difflib.unified_diff(want.splitlines(), got.splitlines(), "README", "now", lineterm="")))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(update() if sys.argv[1:] == ["--update"] else check())
