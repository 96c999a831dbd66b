"""``spark-preflight`` reads the project's configuration as ``pytest --spark-preflight``
does (issue 21, step 5), and says what pytest says (issue 24, item 7).

The CLI re-implemented pytest's discovery and drifted: with a ``pytest.toml``
limiting the run to G3, pytest ran G3 and the CLI all ten. It now asks the
installed pytest's own discovery; each file kind below is read by both, and
both run the same checks with the same options and thresholds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_dgx_spark.options import BY_NAME

from conftest import PYTEST_CHILD
from conftest import spark_cli as cli

#: G3 only, a 100 GiB workload and a 20 GiB margin: 120 > MemAvailable 112.8 GiB, a FAIL quoting both
INI_LINES = "spark_preflight_only = G3\nspark_preflight_workload_gb = 100\nspark_preflight_threshold =\n    g3_margin_gb=20\n"
TOML_NATIVE = 'spark_preflight_only = ["G3"]\nspark_preflight_workload_gb = 100\nspark_preflight_threshold = ["g3_margin_gb=20"]\n'
TOML_INI = 'spark_preflight_only = "G3"\nspark_preflight_workload_gb = 100\nspark_preflight_threshold = ["g3_margin_gb=20"]\n'

KINDS = {
    "pytest.toml": ("pytest.toml", f"[pytest]\n{TOML_NATIVE}"),
    ".pytest.toml": (".pytest.toml", f"[pytest]\n{TOML_NATIVE}"),
    "pytest.ini": ("pytest.ini", f"[pytest]\n{INI_LINES}"),
    ".pytest.ini": (".pytest.ini", f"[pytest]\n{INI_LINES}"),
    "pyproject ini_options": ("pyproject.toml", f"[tool.pytest.ini_options]\n{TOML_INI}"),
    "pyproject native": ("pyproject.toml", f"[tool.pytest]\n{TOML_NATIVE}"),
    "tox.ini": ("tox.ini", f"[pytest]\n{INI_LINES}"),
    "setup.cfg": ("setup.cfg", f"[tool:pytest]\n{INI_LINES}"),
}


@pytest.fixture(autouse=True)
def _gb10(spark_env):
    return spark_env


def _same_run(pytester: pytest.Pytester, *extra: str) -> tuple[dict, dict]:
    """``(the CLI's --json, pytest's env-report)`` of one project, as run from ``sub/``."""
    sub = pytester.path / "sub"
    sub.mkdir(exist_ok=True)
    by_cli = cli("--json", *extra, cwd=sub)
    assert by_cli.returncode in (0, 1), by_cli.stderr
    ran = subprocess.run(
        [*PYTEST_CHILD, "--spark-preflight", "--spark-report", str(pytester.path / "r.json"), *(f"--spark-{a[2:]}" if a[2:] in BY_NAME else a
                                                            for a in extra)],
        cwd=sub, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert ran.returncode in (0, 1), ran.stdout + ran.stderr
    return json.loads(by_cli.stdout), json.loads((pytester.path / "r.json").read_text())


def ran(by_pytest: dict, by_cli: dict) -> list[str]:
    """The checks pytest's env-report says ran; the rest are "not run", as the CLI says of them too."""
    done = [cid for cid, value in by_pytest["checks"].items() if not value.startswith("not run")]
    assert sorted(by_cli.get("not_run", {})) == sorted(set(by_pytest["checks"]) - set(done))
    return done


@pytest.mark.parametrize("kind", list(KINDS))
def test_each_config_file_kind_gives_the_same_checks_and_thresholds(pytester: pytest.Pytester, kind: str) -> None:
    name, text = KINDS[kind]
    (pytester.path / name).write_text(text)
    by_cli, by_pytest = _same_run(pytester)
    assert [r["id"] for r in by_cli["results"]] == ran(by_pytest, by_cli) == ["G3"]
    for key in ("only", "workload-gb", "threshold"):
        assert by_cli["options"][key] == by_pytest["options"][key], key
    assert by_cli["options"]["threshold"] == {"g3_margin_gb": 20.0}
    assert by_cli["lines"] == by_pytest["lines"]
    assert "workload 100 GiB + 20 GiB margin > MemAvailable" in by_cli["lines"][0]


def test_the_first_file_of_pytests_order_wins_and_an_empty_pytest_toml_counts(pytester: pytest.Pytester) -> None:
    """pytest.toml before pytest.ini, even without a ``[pytest]`` table."""
    (pytester.path / "pytest.ini").write_text(f"[pytest]\n{INI_LINES}")
    (pytester.path / "pytest.toml").write_text("")
    by_cli, by_pytest = _same_run(pytester, "--only", "G3,G9")
    assert [r["id"] for r in by_cli["results"]] == ran(by_pytest, by_cli) == ["G3", "G9"]
    assert by_cli["options"]["threshold"] == by_pytest["options"]["threshold"] == {}


def test_config_file_and_rootdir_as_pytest_reads_them(pytester: pytest.Pytester, tmp_path: Path) -> None:
    """``-c FILE`` reads that file; ``--rootdir`` is where ini paths stay, not where the file is looked for."""
    (pytester.path / "pytest.ini").write_text("[pytest]\nspark_preflight_only = G9\n")
    other = tmp_path / "other.ini"
    other.write_text(f"[pytest]\n{INI_LINES}")
    by_cli, by_pytest = _same_run(pytester, "-c", str(other))
    assert [r["id"] for r in by_cli["results"]] == ran(by_pytest, by_cli) == ["G3"]
    elsewhere = tmp_path / "root"
    elsewhere.mkdir()
    by_cli, by_pytest = _same_run(pytester, "--rootdir", str(elsewhere))
    assert [r["id"] for r in by_cli["results"]] == ran(by_pytest, by_cli) == ["G9"]


@pytest.mark.parametrize(
    ("name", "text"),
    [("pytest.toml", '[pytest]\nspark_preflight_only = "G3"\n'), ("pytest.ini", "[pytest]\nspark_preflight_timeout = soon\n")],
    ids=["toml-type", "ini-number"],
)
def test_a_bad_value_stops_both_naming_the_key(pytester: pytest.Pytester, name: str, text: str) -> None:
    (pytester.path / name).write_text(text)
    by_cli = cli("--offline", cwd=pytester.path)
    ran = pytester.runpytest_subprocess("-p", "no:randomly", "--spark-preflight")
    assert (by_cli.returncode, ran.ret) == (2, pytest.ExitCode.USAGE_ERROR)
    (line,) = by_cli.stderr.splitlines()
    assert line.replace("spark-preflight: error: ", "ERROR: ") in ran.errlines


# --------------------------------------------------------------------------- issue 24, item 7


def test_a_rootdir_that_is_not_there_exits_2_in_one_line(tmp_path: Path) -> None:
    proc = cli("--rootdir", str(tmp_path / "nonexistent"), "--only", "G3", cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr.splitlines() == [
        f"spark-preflight: error: Directory '{tmp_path / 'nonexistent'}' not found. Check your '--rootdir' option."
    ]


def test_a_misspelt_key_is_named_in_one_warning(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\nspark_preflight_tiemout = 3\nspark_preflight_only = G3\n")
    proc = cli(cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.startswith("G3 ")
    assert proc.stderr.splitlines() == [
        f"spark-preflight: warning: unknown config option: spark_preflight_tiemout in {tmp_path / 'pytest.ini'} "
        "(did you mean spark_preflight_timeout?)"
    ]


def test_abbreviations_are_refused_as_pytest_refuses_them(tmp_path: Path) -> None:
    proc = cli("--only", "G3", "--workload", "5", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == ["spark-preflight: error: unrecognized arguments: --workload 5"]


def test_report_and_capture_say_where_they_went(tmp_path: Path) -> None:
    proc = cli("--only", "G3", "--report", "r.json", "--capture", "c.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[1].endswith(" not run: deselected (--only G3)") and lines[2].startswith("verdict: ")
    assert lines[3:] == [f"env report written to {tmp_path / 'r.json'}", f"capture written to {tmp_path / 'c.json'}"]
    as_json = cli("--only", "G3", "--report", "r.json", "--json", cwd=tmp_path)
    assert json.loads(as_json.stdout)["results"][0]["id"] == "G3"
    assert as_json.stderr.splitlines() == [f"spark-preflight: env report written to {tmp_path / 'r.json'}"]


def test_a_replay_says_it_is_one(tmp_path: Path) -> None:
    """Beside the lines (stdout stays the captured run's own): which capture, when, which host."""
    capture = Path(__file__).resolve().parent / "data" / "captures" / "h200-healthy.json.gz"
    proc = cli("--replay", str(capture), "--only", "G3", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.startswith("G3 "), proc.stderr
    assert proc.stderr.splitlines() == [
        "spark-preflight: note: replay of h200-healthy.json.gz (captured 2026-12-01T05:03:58+0000, host vm, "
        "NVIDIA H200): this machine was not read"
    ]


# --------------------------------------------------------------------------- issue 24, item 9: colour


@pytest.mark.parametrize(
    ("env", "flag", "coloured"),
    [
        ({}, [], False),  # a pipe: no colour
        ({"FORCE_COLOR": "1"}, [], True),
        ({"FORCE_COLOR": "1", "NO_COLOR": "1"}, [], False),
        ({"PY_COLORS": "1", "NO_COLOR": "1"}, [], True),
        ({"PY_COLORS": "0", "FORCE_COLOR": "1"}, [], False),
        ({"NO_COLOR": "1"}, ["--color", "yes"], True),
        ({"FORCE_COLOR": "1"}, ["--color", "no"], False),
    ],
)
def test_colour_follows_pytests_rules(tmp_path: Path, env: dict[str, str], flag: list[str], coloured: bool) -> None:
    base = {k: v for k, v in os.environ.items() if k not in ("PY_COLORS", "NO_COLOR", "FORCE_COLOR")}
    proc = cli("--only", "G3", "--workload-gb", "500", *flag, cwd=tmp_path, env={**base, **env})
    assert proc.returncode == 1
    assert ("\x1b[31;1mG3 FAIL" in proc.stdout) is coloured, proc.stdout
    assert ("\x1b[" in proc.stdout) is coloured
    assert ("\x1b[31;1mverdict: blocked" in proc.stdout) is coloured


def test_colour_on_a_terminal(tmp_path: Path) -> None:
    """A tty gets colour, as pytest's terminal writer gives it (TERM not dumb)."""
    import pty

    env = {k: v for k, v in os.environ.items() if k not in ("PY_COLORS", "NO_COLOR", "FORCE_COLOR")}
    for term, coloured in (("xterm", True), ("dumb", False)):
        leader, follower = pty.openpty()
        with subprocess.Popen([sys.executable, "-m", "pytest_dgx_spark.cli", "--only", "G3"], cwd=tmp_path,
                              stdout=follower, stderr=subprocess.DEVNULL, env={**env, "TERM": term}) as proc:
            os.close(follower)
            out = b""
            while True:
                try:
                    chunk = os.read(leader, 4096)
                except OSError:  # the child closed the terminal
                    break
                if not chunk:
                    break
                out += chunk
            proc.wait(timeout=120)
        os.close(leader)
        assert (b"\x1b[36mG3 INFO" in out) is coloured, (term, out)
