"""G10's config search: bounded per folder, never out of the project, and
its parser errors never quote the file (issue 19, items 5 and 8).

- A 30,000-file ``data/`` folder spent the search's 20,000-entry budget
  (or its 200-file cap, when the data is JSON), so ``zz_jobs/train.yaml``
  (TP 2 over 2 nodes) was never read and G10 PASSed "single node". Now each
  folder has its own budget, a folder holding data is skipped for what it
  holds, and a search that did not finish is at most INFO, never "no config
  found".
- The search read a symlinked ``job.yaml`` wherever it pointed; with
  PyYAML built without libyaml a parser error quoted the line (of a
  root-only file) into the terminal, env-report and the capture.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_dgx_spark.probes import configs as c
from pytest_dgx_spark.probes import multinode as mn

from conftest import LAUNCHER_ENV

CLI = "import sys\nfrom pytest_dgx_spark.cli import main\nsys.exit(main())\n"
JOB = "tensor_parallel_size: 2\nnum_machines: 2\ndistributed_type: FSDP\n"
SECRET = "root-password-line-Hunter2"


def g10(root: Path, *extra: str) -> tuple[dict, subprocess.CompletedProcess[str]]:
    """G10 through ``spark-preflight --json`` over ``root``, without the
    launcher variables of the box running the tests."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_ENV and not k.startswith("SLURM_")}
    ran = subprocess.run(
        [sys.executable, "-c", CLI, "--only", "G10", "--json", "--rootdir", str(root), *extra],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=root,
        env=env,
    )
    assert ran.returncode in (0, 1), ran.stderr
    return json.loads(ran.stdout)["results"][0], ran


def many_files(folder: Path, count: int, suffixes: tuple[str, ...]) -> None:
    folder.mkdir(parents=True)
    for i in range(count):
        fd = os.open(folder / f"{i:05}{suffixes[i % len(suffixes)]}", os.O_CREAT | os.O_WRONLY, 0o644)
        os.close(fd)


# --------------------------------------------------------------------------- item 5


@pytest.mark.parametrize("suffix", [".jpg", ".json"], ids=["images", "per-sample-json"])
def test_a_big_data_folder_no_longer_hides_the_job_config(tmp_path: Path, suffix: str) -> None:
    root = tmp_path / "project"
    many_files(root / "data", 30_000, (suffix,))
    (root / "zz_jobs").mkdir()
    (root / "zz_jobs" / "train.yaml").write_text(JOB)
    result, _ = g10(root)
    assert result["status"] == "FAIL", result["summary"]
    assert "zz_jobs/train.yaml" in json.dumps(result)
    found = mn.discover(root, (), 10.0)
    assert any("data folders not searched" in n and "data/ (30000 files, 30000 " in n for n in found.notes)
    # data of a config suffix was not read: said, and "nothing multi-node" would have been INFO
    assert (found.incomplete is not None) == (suffix == ".json")


def test_an_incomplete_search_is_at_most_info_and_never_nothing_found(tmp_path: Path) -> None:
    """2,500 files of mixed kinds in one folder: past its own budget (2,000
    entries), so the search did not see all of it."""
    root = tmp_path / "project"
    many_files(root / "mixed", 2_500, (".txt", ".csv", ".md", ".log", ".sh"))
    result, _ = g10(root)
    assert result["status"] == "INFO", result["summary"]
    assert "config search incomplete (1 folder(s) only partly read: mixed/ (2500 entries))" in result["summary"]
    assert "no config found" not in json.dumps(result)


def test_a_folder_spends_only_its_own_budget(tmp_path: Path) -> None:
    many_files(tmp_path / "a_lot", 50, (".txt",))
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "job.yaml").write_text(JOB)
    scan = c.find_configs(tmp_path, max_entries=30, folder_entries=10)
    assert [os.path.relpath(p, tmp_path) for p in scan.files] == ["b/job.yaml"]
    assert scan.partial_places == ["a_lot/ (50 entries)"] and scan.limit is None
    assert scan.incomplete() == "1 folder(s) only partly read: a_lot/ (50 entries)"


# --------------------------------------------------------------------------- item 8


def test_a_symlink_out_of_the_project_is_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o700)
    (outside / "secret.yaml").write_text(f"{JOB}# {SECRET}\n")
    (outside / "secret.yaml").chmod(0o600)
    root = tmp_path / "project"
    (root / "configs").mkdir(parents=True)
    (root / "configs" / "real.yaml").write_text("tensor_parallel_size: 1\n")
    (root / "job.yaml").symlink_to(outside / "secret.yaml")
    (root / "alias.yaml").symlink_to(root / "configs" / "real.yaml")  # inside: read
    scan = c.find_configs(root)
    assert sorted(os.path.relpath(p, root) for p in scan.files) == ["alias.yaml", "configs/real.yaml"]
    assert (scan.links_out, scan.link_places) == (1, ["job.yaml"])
    result, ran = g10(root, "-v")
    assert result["status"] != "FAIL", result["summary"]
    assert "1 symlink(s) leading out of the project not followed: job.yaml" in json.dumps(result)
    assert SECRET not in ran.stdout + ran.stderr


@pytest.mark.parametrize("libyaml", [True, False], ids=["libyaml", "pure-python-yaml"])
@pytest.mark.parametrize(
    "text",
    [
        f"ok: 1\nkey: {SECRET}: 2\n",
        f"ok: 1\n\t{SECRET}: 1\n",
        f"a: *{SECRET}\n",
        f"a: [1, 2\nb: '{SECRET}\n",
    ],
    ids=["mapping", "tab", "alias", "unclosed"],
)
def test_a_yaml_error_says_where_never_what(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, libyaml: bool, text: str
) -> None:
    yaml = pytest.importorskip("yaml")
    if not libyaml:  # PyYAML built without libyaml: its marks quote the line
        monkeypatch.delattr(yaml, "CSafeLoader", raising=False)
    elif not getattr(yaml, "__with_libyaml__", False):
        pytest.skip("this PyYAML has no libyaml")
    path = tmp_path / "job.yaml"
    path.write_text(text)
    error = c.read_config(path, "job.yaml", "found").error
    assert error and error.startswith("invalid YAML: "), error
    assert SECRET not in error and SECRET[:8] not in error, error
    assert " at line " in error and ", column " in error, error


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("a.json", f'{{"a": 1, {SECRET}}}'),
        ("a.toml", f"[{SECRET}]\nx = 1\n[{SECRET}]\nx = 2\n"),
        ("a.py", f"x = '{SECRET}\n"),
    ],
)
def test_json_toml_and_python_errors_say_where_never_what(tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    error = c.read_config(path, name, "found").error
    assert error and error.startswith("invalid "), error
    assert SECRET not in error and "line " in error, error
