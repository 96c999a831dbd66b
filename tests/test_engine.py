"""The engine: one torch child, the other checks meanwhile, nothing left behind."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pytest_dgx_spark import catalog
from pytest_dgx_spark.engine import Engine, check_module
from pytest_dgx_spark.model import Status
from pytest_dgx_spark.probes.commands import kill_running
from pytest_dgx_spark.probes.machine import Machine
from pytest_dgx_spark.settings import Settings


def log_times(path: Path) -> list[float]:
    return [float(line.split()[-1]) for line in path.read_text().splitlines()]


def cli(spark_env: Any, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``spark-preflight ARGS`` on the GB10 double, which must exit 0."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_dgx_spark.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=spark_env.doubles.env,
        cwd=cwd,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_other_checks_run_while_the_torch_child_imports(tmp_path: Path, spark_env) -> None:
    """The torch double takes 2 s to import; G4's NVML sample must start
    inside that window, not after it (the prefetch overlaps them)."""
    spark_env.doubles.torch(dict(spark_env.torch_scenario, hang={"where": "import", "seconds": 2.0}))
    spark_env.doubles.extra["SPARK_PREFLIGHT_HOST_ROOT"] = str(spark_env.root)
    cli(spark_env, tmp_path, "--only", "G1,G4", "--thermal-seconds", "0.3", "--timeout", "5")
    (torch_start,) = log_times(spark_env.torch_log)
    nvml_inits = log_times(spark_env.nvml_log)
    assert len(nvml_inits) == 2  # the snapshot and G4's sample
    assert max(nvml_inits) < torch_start + 2.0, "G4 sampled while torch was still importing"


def test_without_background_work_checks_run_in_order(spark_env) -> None:
    engine = Engine(Settings(only=("G1", "G4"), thermal_seconds=0.2), Machine(), background=False)
    engine.prefetch()
    assert not spark_env.torch_log.exists(), "no background torch child when background=False"
    assert [r.check_id for r in engine.run_many()] == ["G1", "G4"]


def test_close_kills_probes_still_running(tmp_path: Path) -> None:
    """A run that stops early (-x, Ctrl-C) leaves no probe process behind."""
    import threading

    from pytest_dgx_spark.probes.commands import run_command

    script = tmp_path / "slow.sh"
    script.write_text("#!/bin/sh\nsleep 60\n")
    script.chmod(0o755)
    box: dict[str, object] = {}
    worker = threading.Thread(target=lambda: box.setdefault("r", run_command([str(script)], timeout=60)))
    worker.start()
    time.sleep(0.5)
    assert kill_running() == 1
    worker.join(10)
    result = box["r"]
    assert result.signal == "SIGKILL"  # type: ignore[attr-defined]
    assert kill_running() == 0


def test_a_check_that_raises_is_its_own_fail_not_an_exception(monkeypatch, spark_env) -> None:
    # the module the engine runs: after an in-process pytester run dropped it
    # from sys.modules, `from pytest_dgx_spark.checks.g09_container import check as g09_container` would
    # still hand back the old module object, and the engine would import anew
    g09_container = check_module("G9")

    def boom(ctx):
        raise KeyError("planted")

    monkeypatch.setattr(g09_container, "gather", boom)
    result = Engine(Settings(only=("G9",)), Machine()).run("G9")
    assert result.status is Status.FAIL
    assert result.summary.startswith("the check itself crashed (KeyError: 'planted' at test_engine.py:")


def test_without_a_gpu_torch_is_read_not_imported(tmp_path: Path, doubles: Any) -> None:
    """No NVIDIA device node and no NVML library: nothing here can run a CUDA
    kernel, so the torch child reads torch/version.py instead of importing torch
    (issue 10: a run without a GPU costs < 1 s). The torch here raises if imported."""
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text("raise SystemExit('torch was imported')\n")
    (site / "torch" / "version.py").write_text(
        "from typing import Optional\n__version__ = '2.13.0+cpu'\ncuda: Optional[str] = None\n"
    )
    env = doubles.nvml({"init_error": "LibraryNotFound"}).env
    env["PYTHONPATH"] = os.pathsep.join([str(site), env["PYTHONPATH"]])
    root = tmp_path / "root"
    (root / "proc").mkdir(parents=True)
    machine = Machine(root=root, env=env, timeout=5)
    engine = Engine(Settings(offline=True), machine, ["G1"], background=False)
    child = engine.torch()
    assert child.ok, child.describe()
    assert child.steps == ["read torch's version"]
    assert child.data["torch_version"] == "2.13.0+cpu" and child.data["torch_cuda"] is None
    # with a device node, the same machine imports torch (and this torch says so)
    (root / "dev").mkdir()
    (root / "dev" / "nvidia0").write_text("")
    again = Engine(Settings(offline=True), Machine(root=root, env=env, timeout=5), ["G1"], background=False)
    assert "import torch" in again.torch().steps


def _g1_through_cli(spark_env: Any, tmp_path: Path, device_node: bool) -> tuple[str, float, float]:
    """``--only G1 -v`` on the GB10 double whose NVML init takes 2.5 s; the G1
    lines, when NVML was first initialised and when torch was imported."""
    for log in (spark_env.torch_log, spark_env.nvml_log):
        log.unlink(missing_ok=True)
    node = spark_env.root / "dev" / "nvidia0"
    if device_node:
        node.parent.mkdir(exist_ok=True)
        node.write_text("")
    else:
        node.unlink(missing_ok=True)
    spark_env.doubles.nvml(dict(spark_env.nvml_scenario, hang={"where": "nvmlInit", "seconds": 2.5}))
    proc = cli(spark_env, tmp_path, "--only", "G1", "--timeout", "10", "-v")
    (torch_start,) = log_times(spark_env.torch_log)
    return proc.stdout, min(log_times(spark_env.nvml_log)), torch_start


def test_with_a_gpu_device_node_torch_imports_while_nvml_is_read(tmp_path: Path, spark_env) -> None:
    """On a GPU machine the torch child starts before its request is built
    (the request waits for NVML and the extension scan): its import overlaps
    them, and the answer is the same as when it waited."""
    early, nvml_at, torch_at = _g1_through_cli(spark_env, tmp_path, device_node=True)
    assert torch_at < nvml_at + 2.0, "torch was imported while NVML was still initialising"
    waited, nvml_at, torch_at = _g1_through_cli(spark_env, tmp_path, device_node=False)
    assert torch_at >= nvml_at + 2.4, "without a device node torch waits for NVML's answer"
    line = next(ln for ln in early.splitlines() if ln.startswith("G1 "))
    assert line.startswith("G1 PASS: torch 2.11.0+cu130")
    assert line == next(ln for ln in waited.splitlines() if ln.startswith("G1 "))
    (steps,) = [ln for ln in early.splitlines() if "torch child: import torch" in ln]
    assert ", wait for the request " in steps  # where the early child's seconds went, honestly
    assert "wait for the request" not in waited


def test_an_early_torch_child_never_asked_for_is_killed_by_close(tmp_path: Path, spark_env) -> None:
    root = spark_env.root
    (root / "dev").mkdir(exist_ok=True)
    (root / "dev" / "nvidiactl").write_text("")
    spark_env.doubles.torch(dict(spark_env.torch_scenario, hang={"where": "import", "seconds": 300}))
    machine = Machine(env=spark_env.doubles.env, timeout=5)
    assert machine.has_gpu_device_node()
    assert machine.start_torch_early() is True
    assert machine.start_torch_early() is False  # one per run
    spawned = machine._early["torch"]
    engine = Engine(Settings(only=("G1",)), machine, background=False)
    assert engine.close() >= 1
    from doubles.procs import group_gone

    assert group_gone(spawned.proc.pid, wait=2)
    assert machine.drop_early() == 0


def test_close_ends_the_prefetch_threads_and_starts_nothing_more(spark_env) -> None:
    """A run stopped early (-x) while the torch child imports and G4 samples:
    close() kills both probes, waits for the prefetch threads, and the checks
    after G4 never start (a thread left running after the session imports
    modules under a later in-process pytester run)."""
    import threading

    spark_env.doubles.torch(dict(spark_env.torch_scenario, hang={"where": "import", "seconds": 60}))
    engine = Engine(Settings(only=("G1", "G3", "G4", "G6"), thermal_seconds=60, timeout=60), Machine())
    engine.prefetch()
    def both_running() -> bool:  # the torch double logs its import, NVML each init (snapshot, G4's sampler)
        return spark_env.count(spark_env.torch_log) >= 1 and spark_env.count(spark_env.nvml_log) >= 2

    deadline = time.monotonic() + 30
    while not (both_running() and engine.machine.store.peek("result:G3")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert both_running(), "the torch child and G4's sampler never started"
    start = time.monotonic()
    assert engine.close() >= 2
    assert time.monotonic() - start < 6
    assert [t.name for t in threading.enumerate() if t.name.startswith("spark-prefetch")] == []
    assert engine.machine.store.peek("result:G3") is not None
    assert engine.machine.store.peek("result:G6") is None  # started nothing after close
    assert kill_running() == 0


def test_a_probe_started_while_close_waits_is_killed_at_once(tmp_path: Path, spark_env) -> None:
    """Issue 12.5, the race behind it: a prefetch thread between two probes
    when the signal came started the next one after close() had killed the
    running ones, and close() waited its whole 5 s for that thread before
    killing again (a SIGTERM ended the CLI after 7 s, not 2; a SIGKILL from a
    CI runner in that window orphaned the probe). close() now keeps killing
    while it waits, so the late probe dies at once and close() returns."""
    import threading

    from pytest_dgx_spark.probes.commands import run_command

    from doubles.procs import group_gone

    script = tmp_path / "late.sh"
    pid_file = tmp_path / "late.pid"
    script.write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 60\n")
    script.chmod(0o755)
    engine = Engine(Settings(only=("G3",)), Machine())
    box: dict[str, object] = {}

    def late_probe() -> None:
        engine._closed.wait(10)  # the run is ending: this thread had one more probe to start
        box["r"] = run_command([str(script)], timeout=60)

    thread = threading.Thread(target=late_probe, name="spark-prefetch-late", daemon=True)
    engine._threads = [thread]
    thread.start()
    start = time.monotonic()
    engine.close(wait=5.0)
    took = time.monotonic() - start
    assert not thread.is_alive() and took < 2.0, took
    assert box["r"].signal == "SIGKILL"  # type: ignore[attr-defined]
    assert group_gone(int(pid_file.read_text()), wait=2)


SPY = """
import json, sys, threading
late = []
class Spy:  # notes a module of ours first asked for by any thread but the main one
    def find_spec(self, name, path=None, target=None):
        if name.startswith("pytest_dgx_spark") and threading.current_thread() is not threading.main_thread():
            late.append([name, threading.current_thread().name])
sys.meta_path.insert(0, Spy())
from pytest_dgx_spark.engine import Engine
from pytest_dgx_spark.probes.machine import Machine
from pytest_dgx_spark.settings import Settings
engine = Engine(Settings(thermal_seconds=0.2, offline=True), Machine())
engine.prefetch()
ids = [r.check_id for r in engine.run_many()]
engine.close()
print(json.dumps({"ids": ids, "late": late, "threads": [t.name for t in engine._threads]}))
"""


def test_no_prefetch_thread_imports_a_module_of_ours(spark_env) -> None:
    """In a fresh interpreter, on the GB10 double: while the main thread still imports the checks that do
    not read torch, the torch child's thread already runs; neither it nor the later threads import a
    module of ours (pytest parses each as it is imported, and two threads parsing at once break CPython
    3.11), so every check and probe module is first asked for by the main thread."""
    import json

    ran = subprocess.run([sys.executable, "-c", SPY], capture_output=True, text=True, timeout=120, check=False)
    assert ran.returncode == 0, ran.stderr[-2000:]
    seen = json.loads(ran.stdout.strip().splitlines()[-1])
    assert seen["ids"] == list(catalog.IDS)
    assert "spark-prefetch-torch" in seen["threads"]
    assert seen["late"] == []


def test_the_prefetch_threads_import_nothing_of_ours_first(monkeypatch, spark_env) -> None:
    """Each check module is first imported by the thread that calls prefetch(),
    never by a prefetch thread: pytest rewrites our modules with ast.parse as
    they are imported, and two threads parsing at once break CPython 3.11
    (seen as G1 failing with "AST constructor recursion depth mismatch")."""
    import threading

    from pytest_dgx_spark import engine as engine_module

    first: dict[str, str] = {}
    real = engine_module.check_module

    def spy(check_id: str):
        first.setdefault(check_id, threading.current_thread().name)
        return real(check_id)

    monkeypatch.setattr(engine_module, "check_module", spy)
    engine = Engine(Settings(only=("G1", "G3", "G4", "G6", "G9"), thermal_seconds=0.2), Machine())
    engine.prefetch()
    results = engine.run_many()
    engine.close()
    assert [r.check_id for r in results] == ["G1", "G3", "G4", "G6", "G9"]
    assert first == dict.fromkeys(["G1", "G3", "G4", "G6", "G9"], threading.current_thread().name)


def test_the_collector_skips_the_heap_only_while_the_checks_run(monkeypatch, spark_env) -> None:
    """run_many freezes what the process holds (gc.freeze) while the checks run, and unfreezes it
    after; a process that froze objects itself keeps its own freeze."""
    import gc

    from pytest_dgx_spark import engine as engine_module

    during: list[int] = []
    real = engine_module.check_module

    def spy(check_id: str):
        during.append(gc.get_freeze_count())
        return real(check_id)

    monkeypatch.setattr(engine_module, "check_module", spy)
    before = gc.get_freeze_count()  # another plugin of this process may have frozen its own objects
    results = Engine(Settings(only=("G3", "G9")), Machine(), background=False).run_many()
    assert [r.check_id for r in results] == ["G3", "G9"]
    assert during and (min(during) > 0 if before == 0 else set(during) == {before})
    assert gc.get_freeze_count() == before

    gc.freeze()  # the process's own: neither added to nor undone
    try:
        mine = gc.get_freeze_count()
        with engine_module.collector_skips_what_exists():
            assert gc.get_freeze_count() == mine
        assert gc.get_freeze_count() == mine
    finally:
        gc.unfreeze()
