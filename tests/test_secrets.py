"""The redaction pass every report goes through (pytest_dgx_spark/redact.py).

Captures always went through :class:`Redactor`; since the audit after issue
12 every result does too (:func:`redact.outgoing`, in the engine), so the
pass now runs over prose a user reads. These tests hold both sides: what
must go (tokens, secret flags and query values, a process title's secrets)
and what must stay (prose that merely looks like a flag, settings values of
variables whose names contain TOKEN). The end-to-end greps live beside the
checks that carry the secrets: tests/test_g06_contention.py (a process
title) and tests/test_g08_playbooks.py (URLs, GITHUB_TOKEN, issue titles);
tests/test_capture.py plants one in every source at once (environment,
command lines, configs, URLs, an issue, the home folder) and greps every
output of all ten checks.
"""

from __future__ import annotations

import pytest

from pytest_dgx_spark.redact import REDACTED, Redactor, outgoing, reduce_argv, scrub


@pytest.mark.parametrize(
    ("text", "clean"),
    [
        ("curl https://h/x?access_token=SECRETQ&page=2", f"curl https://h/x?access_token={REDACTED}&page=2"),
        ("GET /a?sig=SECRETSIG;token=SECRETQ", f"GET /a?sig={REDACTED};token={REDACTED}"),
        ("run --api-key SECRET456, then", f"run --api-key {REDACTED}, then"),  # the comma is CSV's
        ('run --token "two words"', f"run --token {REDACTED}"),
        ("Authorization: token 0123abcd4567ef", f"Authorization: token {REDACTED}"),
        ("github_pat_" + "A1" * 15 + " and sk-" + "x" * 20, f"{REDACTED} and {REDACTED}"),
    ],
)
def test_secrets_recognisable_by_shape_are_scrubbed(text: str, clean: str) -> None:
    assert scrub(text) == clean


@pytest.mark.parametrize(
    "prose",
    [
        "a non-authoritative answer from the resolver",
        "basic operations still work",
        "the token embeddings are fine",
        "--gpu-memory-utilization 0.9 --tensor-parallel-size 2",
        "https://github.com/NVIDIA/dgx-spark-playbooks/issues/57",
    ],
)
def test_prose_that_looks_like_a_secret_stays(prose: str) -> None:
    """Before results went through the pass, only captures did; a flag-ish
    word inside prose ("non-authoritative") or "basic <word>" read as a
    secret and was blanked."""
    assert outgoing({})(prose) == prose


def test_settings_of_secret_named_variables_are_not_hunted() -> None:
    """``TOKENIZERS_PARALLELISM=false`` (set in most training environments)
    made every "false" a secret; boolean-ish, numeric and short values are
    settings. A real secret value still goes, and ``outgoing`` keeps names."""
    env = {
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_DISABLE_IMPLICIT_TOKEN": "true",
        "MAX_TOKENS": "4096",
        "MY_SERVICE_PASSWORD": "Pl41nW0rdValue",
        "USER": "alice",
        "HOME": "/home/alice",
    }
    text = "false true 4096 Pl41nW0rdValue /home/alice/x by alice"
    assert outgoing(env)(text) == f"false true 4096 {REDACTED} /home/alice/x by alice"
    assert Redactor(env)(text) == f"false true 4096 {REDACTED} /home/<user>/x by <user>"


def test_a_title_in_argv0_is_split_in_a_capture_too() -> None:
    """A capture reduces every ``cmdline``; ``exec -a`` put the whole command
    line in argv[0], which was kept as the program's base name."""
    argv = ["python -m vllm.entrypoints.openai.api_server --model x --api-key SECRET456", "900"]
    assert reduce_argv(argv) == ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "--api-key"]
    assert reduce_argv(["hf_" + "ProgramSlotSecret0123456789", "900"]) == [REDACTED]
    assert Redactor({})({"cmdline": argv}) == {"cmdline": reduce_argv(argv)}


def test_g10_reads_the_flags_of_a_title_and_names_only_its_program() -> None:
    """G10's process scan read ``exec -a``'s title as one word: the flags in
    it were missed, and without a comm name the title itself was the name."""
    from pytest_dgx_spark.probes.configs import process_sources

    title = "vllm serve org/m --tensor-parallel-size 2 --api-key SECRET456"
    (source,) = process_sources([{"pid": 5, "name": "", "cmdline": [title, "900"]}])
    data = source.to_dict()
    assert data["name"] == "pid 5 (vllm)"
    assert [(f["key"], f["value"]) for f in data["findings"]] == [("--tensor-parallel-size", 2)]
    assert "SECRET456" not in str(data)


def test_an_unknown_cli_option_is_echoed_without_its_secret(tmp_path) -> None:
    """argparse quotes unrecognised arguments back: ``spark-preflight --token
    ghp_…`` (a flag the CLI does not have) printed the token to the terminal."""
    from conftest import spark_cli

    token = "ghp_" + "UnknownOptionSecret0123456789"
    proc = spark_cli("--only", "G9", "--token", token, "--api-key=SECRET456", cwd=tmp_path)
    assert proc.returncode == 2
    (line,) = proc.stderr.splitlines()
    assert line == f"spark-preflight: error: unrecognized arguments: --token {REDACTED} --api-key={REDACTED}"
