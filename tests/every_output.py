"""Every place a run writes text, for tests that grep them all for a secret.

One call runs the preflight the ways a user or a CI job reads it: pytest's
default terminal, ``-v -rA`` with JUnit XML (``<system-out>`` on), the env
report, the capture and pytest-json-report (when installed); then the
``spark-preflight`` CLI plain, ``-v`` and ``--json`` with ``--report``. Each
run is a real child process with this test's environment.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import spark_cli


def _has_json_report() -> bool:
    try:
        import pytest_jsonreport  # noqa: F401
    except ImportError:
        return False
    return True


def every_output(pytester: pytest.Pytester, pytest_args: list[str], cli_args: list[str]) -> dict[str, str]:
    """``{where: text}`` of every output of one pytest and one CLI configuration."""
    out: dict[str, str] = {}
    base = ["-p", "no:randomly", "-p", "no:cacheprovider", *pytest_args]
    quiet = pytester.runpytest_subprocess(*base)
    out["pytest"] = quiet.stdout.str() + quiet.stderr.str()
    json_report = ["--json-report", "--json-report-file=report.json"] if _has_json_report() else []
    loud = pytester.runpytest_subprocess(
        *base,
        "-v",
        "-rA",
        "--junitxml=junit.xml",
        "-o",
        "junit_logging=system-out",
        "--spark-report=env-report.json",
        "--spark-capture=capture.json",
        *json_report,
    )
    out["pytest -v"] = loud.stdout.str() + loud.stderr.str()
    files = ["junit.xml", "env-report.json", "capture.json", *(["report.json"] if json_report else [])]
    for name in files:
        path = Path(pytester.path, name)
        out[name] = path.read_text() if path.is_file() else ""
        assert out[name], f"{name} was not written:\n{out['pytest -v']}"
    for extra in ([], ["-v"], ["--json"]):
        proc = spark_cli(*cli_args, *extra, "--report=cli-report.json", cwd=pytester.path)
        out[" ".join(["cli", *extra])] = proc.stdout + proc.stderr
        out[" ".join(["cli report", *extra])] = Path(pytester.path, "cli-report.json").read_text()
    return out


def leaks(outputs: dict[str, str], *secrets: str) -> list[str]:
    """``"secret in where"`` for each secret found anywhere (empty: none leaked)."""
    return [f"{s!r} in {where}" for where, text in outputs.items() for s in secrets if s in text]
