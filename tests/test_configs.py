"""probes/configs.py: configs and command lines read by value, and every
kind of bad input bounded (issue 5: invalid, huge, binary, deeply nested)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from pytest_dgx_spark.probes import configs as c

from conftest import DATA
from doubles.procs import running

G10 = DATA / "g10"


def findings(path: Path) -> list[tuple[str, object, str]]:
    src = c.read_config(path, path.name, "given")
    assert src.error is None, src.error
    return [(f.what, f.value, f.key) for f in src.findings]


# --------------------------------------------------------------------------- real-shaped configs


def test_nvidia_fsdp_config_is_read_by_value() -> None:
    got = findings(G10 / "nvidia_config_finetuning.yaml")
    assert ("strategy", "FSDP", "distributed_type") in got
    assert ("nodes", 2, "num_machines") in got
    assert ("tp", 1, "parallelism_config.parallelism_config_tp_size") in got
    assert [f for f in got if f[0] == "tp"] == [("tp", 1, "parallelism_config.parallelism_config_tp_size")]


def test_nvidia_template_with_placeholders_is_invalid_yaml_with_the_line() -> None:
    src = c.read_config(G10 / "nvidia_config_finetuning.template.yaml", "t.yaml", "given")
    assert src.findings == []
    assert src.error is not None
    assert src.error == (
        "invalid YAML: ScannerError: mapping values are not allowed in this context at line 16, column 24"
    )


def test_vllm_playbook_command() -> None:
    assert findings(G10 / "vllm_two_sparks.sh") == [
        ("tp", 2, "--tensor-parallel-size"),
        ("backend", "ray", "--distributed-executor-backend"),
    ]


def test_deepspeed_autotp_json() -> None:
    assert findings(G10 / "deepspeed_autotp.json") == [("tp", 2, "tensor_parallel.autotp_size")]


def test_nemo_yaml_counts_trainer_nodes_not_graph_vertices() -> None:
    got = findings(G10 / "nemo_two_nodes_tp2.yaml")
    assert ("nodes", 2, "trainer.num_nodes") in got
    assert ("tp", 2, "model.tensor_model_parallel_size") in got
    assert ("pp", 1, "model.pipeline_model_parallel_size") in got
    assert not [f for f in got if f[2] == "data.num_nodes"]


def test_torchtitan_toml() -> None:
    got = findings(G10 / "torchtitan_tp2.toml")
    assert ("tp", 2, "parallelism.tensor_parallel_degree") in got
    assert ("pp", 1, "parallelism.pipeline_parallel_degree") in got


def test_compose_exec_form_command_and_environment_list() -> None:
    got = findings(G10 / "compose_sglang.yaml")
    assert ("tp", 2, "services.sglang.command: --tp") in got
    assert ("nodes", 2, "services.sglang.command: --nnodes") in got
    assert ("tp", 1, "services.sglang.environment: VLLM_TENSOR_PARALLEL_SIZE") in got


def test_two_document_k8s_manifest_with_env_name_value() -> None:
    got = findings(G10 / "k8s_vllm_tp1.yaml")
    assert ("tp", 1, "spec.template.spec.containers[0].args: --tensor-parallel-size") in got
    assert ("tp", 1, "spec.template.spec.containers[0].env[0][VLLM_TENSOR_PARALLEL_SIZE]") in got


def test_python_api_call() -> None:
    assert findings(G10 / "serve_tp2.py") == [("tp", 2, "line 3: tensor_parallel_size")]


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("vllm serve m -tp=4 --headless", [("tp", 4), ("headless", True)]),
        ("vllm serve m --tensor-parallel-size=1", [("tp", 1)]),
        ("python -m sglang.launch_server --tp-size 2 --pp-size 1", [("tp", 2), ("pp", 1)]),
        ("trtllm-serve m --tp_size 2 --ep_size 1", [("tp", 2)]),
        ("torchrun --nnodes 1:2 --nproc-per-node 1 train.py", [("nodes", 2)]),
        ("torchrun --nnodes=2 train.py --tensor-model-parallel-size 2", [("nodes", 2), ("tp", 2)]),
        (
            "accelerate launch --num_machines 2 --use_fsdp --parallelism_config_tp_size 1 t.py",
            [("nodes", 2), ("strategy", "FSDP"), ("tp", 1)],
        ),
        (
            "python train.py trainer.num_nodes=2 ++model.tensor_model_parallel_size=2",
            [("nodes", 2), ("tp", 2)],
        ),
        (
            "python cli.py fit --trainer.num_nodes=2 --trainer.strategy fsdp",
            [("nodes", 2), ("strategy", "fsdp")],
        ),
        ("VLLM_TENSOR_PARALLEL_SIZE=2 python serve.py", [("tp", 2)]),
        ("#SBATCH --nodes=2-4", [("nodes", 4)]),
        ("srun -N 2 python train.py", [("nodes", 2)]),
        ("python train.py -N 2", []),  # -N means nodes only to srun/sbatch
        ("deepspeed --num_nodes 2 train.py", [("nodes", 2)]),
        ("vllm serve m --tensor-parallel-size ${TP}", [("tp", None)]),
        ("git log --tp 3 --oneline", [("tp", 3)]),  # parsed; only launchers' lines reach here
    ],
)
def test_command_lines(command: str, expected: list[tuple[str, object]]) -> None:
    assert [(f.what, f.value) for f in c.parse_command_text(command)] == expected


def test_continuations_and_comments() -> None:
    text = "# --tensor-parallel-size 8 in a comment does not count\nvllm serve m \\\n  --tensor-parallel-size 2\n"
    assert [(f.what, f.value) for f in c.parse_command_text(text)] == [("tp", 2)]


def test_tp_plan_and_strings_that_are_not_commands(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("tp_plan: auto\ndescription: we tried --tp 8 once\nnote: http://example/tp\n")
    got = findings(path)
    assert ("tp_plan", "auto", "tp_plan") in got
    # a free-text mention is parsed like a command: the value is what counts
    assert ("tp", 8, "description: --tp") in got


def test_bare_tp_key_is_not_tensor_parallelism(tmp_path: Path) -> None:
    path = tmp_path / "metrics.json"
    path.write_text('{"tp": 153, "fp": 12, "precision": 0.93}')
    assert findings(path) == []


# --------------------------------------------------------------------------- bad input: a reason, bounded


def test_invalid_json_toml_python(tmp_path: Path) -> None:
    cases = {
        "a.json": ('{"tensor_parallel_size": 2,', "invalid JSON: JSONDecodeError"),
        "a.toml": ("[x\ny = 1", "invalid TOML: TOMLDecodeError"),
        "a.py": ("def (:\n", "invalid Python: SyntaxError"),
        "a.yaml": ("a: [1, 2\n", "invalid YAML: ParserError"),
    }
    for name, (text, reason) in cases.items():
        (tmp_path / name).write_text(text)
        src = c.read_config(tmp_path / name, name, "given")
        assert src.error is not None and src.error.startswith(reason), (name, src.error)


def test_huge_file_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    with open(path, "wb") as fh:
        fh.truncate(10 * 1000 * 1000)  # 10 MB (sparse: costs no disk)
    start = time.monotonic()
    src = c.read_config(path, "huge.yaml", "given")
    assert src.error == "10.0 MB, over the 1.0 MB limit for a config: not read"
    assert time.monotonic() - start < 0.5


def test_binary_and_non_utf8(tmp_path: Path) -> None:
    (tmp_path / "bin.yaml").write_bytes(b"\x7fELF\x02\x01\x00\x00" + os.urandom(512))
    (tmp_path / "latin1.yaml").write_bytes("tp_size: 2 # caf\xe9".encode("latin-1"))
    assert c.read_config(tmp_path / "bin.yaml", "b", "given").error == "binary, not a text config"
    assert c.read_config(tmp_path / "latin1.yaml", "l", "given").error == "not UTF-8 text (byte 16): not read"


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("deep.json", "[" * 200_000 + "]" * 200_000),
        ("deep.yaml", "[" * 100_000 + "]" * 100_000),
        ("deep.toml", "a = " + "[" * 100_000 + "]" * 100_000),
        ("deep_map.yaml", "".join(f"{' ' * i}k{i}:\n" for i in range(300)) + " " * 300 + "tp_size: 2\n"),
    ],
)
def test_deep_nesting_is_a_reason_not_a_crash(tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    start = time.monotonic()
    src = c.read_config(path, name, "given")
    elapsed = time.monotonic() - start
    assert src.error or src.notes, "a reason must be given"
    reason = src.error or src.notes[0]
    # "JSON nested too deeply to parse: not read", libyaml's "exceeded maximum nesting depth",
    # or the walk's "nested deeper than 64 levels" (which version says it depends on the parser)
    assert "nest" in reason, reason
    assert not src.findings  # the TP buried 300 levels down is past the walk's depth limit
    assert elapsed < 5


def test_billion_laughs_is_walked_once_per_node(tmp_path: Path) -> None:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, 10):
        refs = ", ".join([f"*a{i - 1}"] * 10)
        lines.append(f"a{i}: &a{i} [{refs}]")
    lines.append("tp_size: 2")
    path = tmp_path / "laughs.yaml"
    path.write_text("\n".join(lines) + "\n")
    start = time.monotonic()
    src = c.read_config(path, "laughs.yaml", "given")
    assert [(f.what, f.value) for f in src.findings] == [("tp", 2)]
    assert time.monotonic() - start < 2  # 10**10 leaves if expanded; each list is visited once


def test_fifo_and_folder_are_not_opened(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)  # opening it would block forever: nobody writes
    src = c.read_config(fifo, "pipe.yaml", "given")
    assert src.error == "not a regular file (a FIFO, device or folder is never read)"
    assert c.read_config(Path("/dev/zero"), "zero", "given").error.startswith("not a regular file")


def test_unreadable_file(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads files without read permission")
    path = tmp_path / "secret.yaml"
    path.write_text("tp_size: 2\n")
    path.chmod(0)
    assert c.read_config(path, "s", "given").error == "cannot read: Permission denied"


# --------------------------------------------------------------------------- finding configs


def test_search_skips_vcs_venvs_tests_and_records(tmp_path: Path) -> None:
    layout = {
        "train.yaml": "num_machines: 2\n",
        "configs/a/b/deep.yml": "tp_size: 1\n",
        "configs/a/b/c/d/e/too_deep.yaml": "tp_size: 8\n",
        ".git/config.yaml": "tp_size: 8\n",
        ".hidden/x.yaml": "tp_size: 8\n",
        "myenv/pyvenv.cfg": "home = /usr\n",
        "myenv/lib/x.yaml": "tp_size: 8\n",
        "node_modules/p/x.json": '{"tp_size": 8}',
        "tests/data/fixture.yaml": "tp_size: 8\n",
        "wandb/run-1/files/config.yaml": "tp_size: 8\n",
        "pkg.egg-info/x.toml": "tp_size = 8\n",
        "tokenizer.json": '{"tp_size": 8}',
        "README.md": "--tensor-parallel-size 8",
    }
    for rel, text in layout.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (tmp_path / "loop").symlink_to(tmp_path, target_is_directory=True)
    scan = c.find_configs(tmp_path)
    rel = sorted(os.path.relpath(p, tmp_path) for p in scan.files)
    assert rel == ["configs/a/b/deep.yml", "train.yaml"]
    assert scan.limit is None


def test_search_stops_at_its_limits(tmp_path: Path) -> None:
    for i in range(30):
        (tmp_path / f"c{i:02}.json").write_text("{}")
    scan = c.find_configs(tmp_path, max_files=10)
    assert len(scan.files) == 10 and scan.limit == "stopped at 10 config files"
    scan = c.find_configs(tmp_path, max_entries=5)
    assert scan.limit == "stopped after 5 entries"
    scan = c.find_configs(tmp_path, deadline=time.monotonic() - 1)
    assert scan.limit == "stopped at the time limit" and scan.files == []


def test_search_skips_test_report_output(tmp_path: Path) -> None:
    """allure-pytest writes ``<uuid>-result.json``/``-container.json``/``-attachment.*``
    (under --alluredir, any folder name), ``allure generate`` an ``allure-report`` folder:
    a run's records, not configs. Skipped before the file cap is counted, and said."""
    uid = "0b3f8a52-6c1e-4d7a-9f0e-{:012d}"
    layout = {
        **{f"allure-results/{uid.format(i)}-result.json": '{"tp_size": 8}' for i in range(5)},
        f"out/al/{uid.format(7)}-container.json": '{"children": []}',
        f"out/al/{uid.format(8)}-attachment.json": '{"tensor_parallel_size": 8}',
        f"out/al/{uid.format(9)}-attachment.yaml": "tp_size: 8\n",
        "allure-report/data/test-cases/x.json": '{"tp_size": 8}',
        "allure-report/widgets/summary.json": "{}",
        "reports/assets/style.css": "body {}",
        "reports/assets/test_a.py__test_one_0_0.json": '{"tp_size": 8}',
        "web/assets/site.yaml": "title: x\n",  # an assets folder that is not pytest-html's
        "serve/serve.yaml": "tensor_parallel_size: 2\n",
    }
    for rel, text in layout.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    scan = c.find_configs(tmp_path, max_files=3)
    assert [os.path.relpath(p, tmp_path) for p in scan.files] == ["serve/serve.yaml", "web/assets/site.yaml"]
    assert scan.limit is None
    assert scan.skipped_reports == 6  # three folders, three files
    _, notes = c.read_found(tmp_path, scan)
    assert notes == [
        "test reports not read as configs (Allure, pytest-html): allure-report/, allure-results/, "
        "reports/assets/, out/al/"
    ]


def test_read_found_counts_oversized_files(tmp_path: Path) -> None:
    (tmp_path / "big.json").write_text("[" + "1," * 600_000 + "1]")
    (tmp_path / "ok.json").write_text('{"tp_size": 2}')
    sources, notes = c.read_found(tmp_path, c.find_configs(tmp_path))
    assert [s.name for s in sources] == ["ok.json"]
    assert notes == ["1 found file(s) over 1.0 MB not read (data, not configs)"]


# --------------------------------------------------------------------------- processes


def test_a_real_process_command_line_is_read() -> None:
    argv = [
        sys.executable,
        "-c",
        "import time; time.sleep(30)",
        "serve",
        "--tensor-parallel-size",
        "2",
        "--headless",
    ]
    from pytest_dgx_spark.probes.processes import list_processes

    with running(argv) as proc:
        sources = c.process_sources(list_processes()["processes"], own_pid=os.getpid())
    mine = [s for s in sources if s.name.startswith(f"pid {proc.pid} ")]
    assert len(mine) == 1
    assert mine[0].kind == "process"
    assert [(f.what, f.value) for f in mine[0].findings] == [("tp", 2), ("headless", True)]
