"""The probe runners: commands and Python children that hang, crash or babble."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from pytest_dgx_spark.probes import child as child_module
from pytest_dgx_spark.probes.child import run_python
from pytest_dgx_spark.probes.commands import MAX_OUTPUT, CommandResult, run_command
from pytest_dgx_spark.probes.store import MemoryStore

from doubles.procs import group_gone, live_members


def test_command_that_hangs_is_killed_with_its_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    script = tmp_path / "hang.sh"
    script.write_text(f"#!/bin/sh\nsleep 300 &\necho $$ $! > {pidfile}\nwait\n")
    script.chmod(0o755)
    start = time.monotonic()
    result = run_command([str(script)], timeout=1.0)
    elapsed = time.monotonic() - start
    assert result.timed_out and not result.ok
    assert elapsed < 4
    assert result.describe() == "hang.sh did not answer within 1.0 s (killed)"
    shell_pid, sleeper_pid = map(int, pidfile.read_text().split())
    time.sleep(0.2)
    assert group_gone(shell_pid, wait=0), "the shell and the sleep it started are both gone"
    assert sleeper_pid not in live_members(shell_pid)


def test_command_not_found_and_nonzero_exit() -> None:
    missing = run_command(["no-such-tool-xyz"], timeout=1, env={"PATH": "/nonexistent"})
    assert missing.error == "not found on PATH"
    assert missing.describe() == "no-such-tool-xyz: not found on PATH"
    failing = run_command(["sh", "-c", "echo 'NVIDIA-SMI has failed' >&2; exit 9"], timeout=5)
    assert failing.returncode == 9
    assert failing.describe() == "sh exited 9: NVIDIA-SMI has failed"


def test_command_killed_by_signal() -> None:
    result = run_command(["sh", "-c", "kill -SEGV $$"], timeout=5)
    assert result.signal == "SIGSEGV"
    assert result.describe() == "sh was killed by SIGSEGV"


CHILD_PROLOGUE = "import json, os, signal, sys, time\ndef emit(o): print(json.dumps(o), flush=True)\n"


def child(body: str, **kwargs):
    return run_python(CHILD_PROLOGUE + body, **kwargs)


def test_child_that_finishes() -> None:
    result = child('emit({"begin": "a"}); emit({"data": {"x": 1}}); emit({"done": True})', step_timeout=5)
    assert result.ok and result.data == {"x": 1} and result.steps == ["a"]


def test_child_hang_is_killed_and_named_by_step() -> None:
    start = time.monotonic()
    result = child(
        'emit({"begin": "import torch"}); emit({"data": {"pgid": os.getpgid(0)}}); time.sleep(300)',
        step_timeout=0.5,
    )
    assert time.monotonic() - start < 4
    assert result.timed_out and not result.ok
    assert (
        result.describe("torch child")
        == "torch child made no progress for 0.5 s during 'import torch' (hung; killed)"
    )
    time.sleep(0.2)
    assert group_gone(result.data["pgid"], wait=0)


def test_progress_extends_the_deadline() -> None:
    body = 'for i in range(6):\n    emit({"begin": f"step {i}"}); time.sleep(0.3)\nemit({"done": True})'
    result = child(body, step_timeout=0.6)
    assert result.ok and len(result.steps) == 6


def test_scale_gives_a_slow_step_more_time() -> None:
    body = 'emit({"begin": "import torch", "scale": 4}); time.sleep(1.0); emit({"done": True})'
    assert child(body, step_timeout=0.5).ok
    assert child(body.replace('"scale": 4', '"scale": 1'), step_timeout=0.5).timed_out


@pytest.mark.parametrize("sig", ["SIGSEGV", "SIGABRT", "SIGKILL"])
def test_child_killed_by_a_signal(sig: str) -> None:
    result = child(f'emit({{"begin": "tiny kernel"}}); os.kill(os.getpid(), signal.{sig})', step_timeout=5)
    assert result.signal == sig
    assert result.describe("torch child") == f"torch child was killed by {sig} during 'tiny kernel'"


def test_garbage_and_half_lines_are_counted_not_fatal() -> None:
    body = 'print("Unsloth: banner text", flush=True); emit({"data": {"a": 1}}); sys.stdout.write("{\\"data\\": {\\"b"); sys.stdout.flush()'
    result = child(body, step_timeout=5)
    assert result.data == {"a": 1}
    assert result.garbage == 2
    assert result.garbage_sample[0] == "Unsloth: banner text"
    assert not result.ok
    assert result.describe() == "probe child stopped before finishing (output incomplete)"


def test_child_exit_code_and_stderr_tail() -> None:
    result = child(
        'sys.stderr.write("ImportError: libcudart.so.12: cannot open shared object file\\n"); sys.exit(3)',
        step_timeout=5,
    )
    assert result.returncode == 3
    assert (
        result.describe("torch child")
        == "torch child exited 3: ImportError: libcudart.so.12: cannot open shared object file"
    )


def test_child_that_closes_stdout_but_lingers_is_hung() -> None:
    result = child("os.close(1); time.sleep(300)", step_timeout=0.5)
    assert result.timed_out


def test_python_that_cannot_start() -> None:
    result = run_python("pass", step_timeout=1, python="/nonexistent/python")
    assert result.error and "could not start" in result.describe()


@pytest.mark.parametrize(
    ("script", "stream"),
    [("exec yes", "stdout"), ("exec tr '\\000' x < /dev/zero", "stdout"), ("exec yes >&2", "stderr")],
    ids=["yes", "one-endless-line", "stderr"],
)
def test_command_printing_without_end_is_killed_at_the_cap(tmp_path: Path, script: str, stream: str) -> None:
    """The cap holds while reading: killed at MAX_OUTPUT (not at the timeout,
    with gigabytes kept), its whole group gone, the result saying why."""
    exe = tmp_path / "nvidia-smi"
    exe.write_text(f"#!/bin/sh\necho $$ > {tmp_path / 'pid'}\n{script}\n")
    exe.chmod(0o755)
    start = time.monotonic()
    result = run_command([str(exe)], timeout=30)
    assert time.monotonic() - start < 10
    assert result.overflow == stream and not result.ok and not result.timed_out
    assert len(getattr(result, stream)) == MAX_OUTPUT
    assert result.describe() == f"nvidia-smi printed more than 1 MiB on {stream} (killed)"
    assert group_gone(int((tmp_path / "pid").read_text()))
    assert CommandResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result


def test_command_output_just_under_the_cap_is_kept_whole() -> None:
    result = run_command(["sh", "-c", f"head -c {MAX_OUTPUT} /dev/zero | tr '\\000' y"], timeout=10)
    assert result.ok and result.overflow is None and len(result.stdout) == MAX_OUTPUT


def test_child_printing_one_endless_line_is_killed_at_the_line_cap() -> None:
    start = time.monotonic()
    result = child('emit({"begin": "import pynvml"})\nwhile True: sys.stdout.write("x" * 65536)', step_timeout=30)
    assert time.monotonic() - start < 10
    assert result.overflow == "a line over 1 MiB" and not result.ok and result.signal is None
    assert result.describe("NVML child") == (
        "NVML child printed a line over 1 MiB on stdout during 'import pynvml' (killed)"
    )


def test_child_printing_endless_progress_is_killed_at_the_total_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """Valid protocol lines reset the step deadline; the byte cap still ends it."""
    monkeypatch.setattr(child_module, "MAX_STDOUT", 1 << 20)
    start = time.monotonic()
    result = child('while True: emit({"data": {"x": "y" * 1000}})', step_timeout=30)
    assert time.monotonic() - start < 20
    assert result.overflow == "more than 1 MiB"
    assert result.describe() == "probe child printed more than 1 MiB on stdout (killed)"


def test_child_printing_endless_garbage_is_bounded_by_its_step_timeout() -> None:
    # paced at ~100 KB/s: garbage never resets the step deadline, and the 16 MiB
    # cap (which an unpaced loop reaches in under a second on a fast box) is not what ends it
    start = time.monotonic()
    result = child('while True: print("not json " * 10, flush=True); time.sleep(0.001)', step_timeout=1)
    assert time.monotonic() - start < 5
    assert result.timed_out and result.garbage > 0 and len(result.garbage_sample) == 3


def test_memory_store_computes_once_across_threads() -> None:
    """The preflight's threads (the prefetch, an item) ask for the same probe: it runs once."""
    import threading

    store = MemoryStore()
    calls: list[int] = []

    def compute():
        calls.append(1)
        time.sleep(0.3)
        return {"answer": 42}

    threads = [threading.Thread(target=lambda: store.get_or_compute("probe:nvml", compute)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert calls == [1] and store.peek("probe:nvml") == {"answer": 42}


def test_memory_store_roundtrips_through_json() -> None:
    store = MemoryStore()
    value = store.get_or_compute("k", lambda: {"t": (1, 2), "p": Path("/x")})
    assert value == {"t": [1, 2], "p": "/x"}
    assert store.get_or_compute("k", lambda: pytest.fail("computed twice")) == value
    assert json.dumps(value)
    assert sys.version_info >= (3, 10)


# --------------------------------------------------------------------------- children started early


EARLY = """
begin("slow part", scale=1)
time.sleep(float(config()["sleep"]))
begin("wait for the request")
req = request()
data(request=req, pid=os.getpid())
done()
"""


def early_source() -> str:
    return child_module.script_source(main="") + "\nimport time, os\n" + EARLY


def test_a_child_started_early_gets_its_request_on_stdin_and_keeps_its_step_times() -> None:
    """The torch child is started before its request is known: it does its
    slow part unwatched, the request comes on stdin when it is followed, and
    the seconds of its steps are its own (the "t" it sends), not when we read them."""
    spawned = child_module.spawn_python(early_source(), args=[json.dumps({"sleep": 0.4})], stdin=True)
    assert isinstance(spawned, child_module.Spawned)
    time.sleep(1.2)  # the parent is busy elsewhere; the child (started, slept 0.4 s) waits on stdin
    got = child_module.follow(spawned, step_timeout=5, stdin_data=json.dumps({"load": ["a.so"]}))
    assert got.ok, got.describe()
    assert got.data["request"] == {"load": ["a.so"]}
    assert got.steps == ["slow part", "wait for the request"]
    assert 0.35 <= got.step_seconds["slow part"] < 0.7  # read 0.4 s late, it still counts its own 0.4 s
    # 1.2 s less its 0.4 s and its own start (0.13 s seen on a loaded 16-core box)
    assert got.step_seconds["wait for the request"] >= 0.3
    assert got.duration_s >= 1.15  # from its start (1.2 s before the answer), not from when it was followed


def test_a_child_hung_before_it_was_followed_is_judged_from_when_its_step_began() -> None:
    """An early child stuck in its slow part (a torch import that hangs) has
    used its allowance while nobody watched: following it kills it at once."""
    spawned = child_module.spawn_python(early_source(), args=[json.dumps({"sleep": 300})], stdin=True)
    assert isinstance(spawned, child_module.Spawned)
    time.sleep(1.2)
    start = time.monotonic()
    got = child_module.follow(spawned, step_timeout=1.0, stdin_data="{}")
    assert got.timed_out and got.step == "slow part"
    assert time.monotonic() - start < 0.8  # not another full second of allowance
    assert group_gone(spawned.proc.pid, wait=2)


def test_an_early_child_nobody_asks_for_is_killed_with_its_group() -> None:
    spawned = child_module.spawn_python(early_source(), args=[json.dumps({"sleep": 300})], stdin=True)
    assert isinstance(spawned, child_module.Spawned)
    time.sleep(0.3)
    child_module.abandon(spawned)
    assert group_gone(spawned.proc.pid, wait=2)


def test_an_early_child_whose_stdin_closes_empty_leaves_without_doing_anything() -> None:
    spawned = child_module.spawn_python(early_source(), args=[json.dumps({"sleep": 0})], stdin=True)
    assert isinstance(spawned, child_module.Spawned)
    got = child_module.follow(spawned, step_timeout=5, stdin_data="")
    assert got.returncode == 0 and not got.finished
    assert "request" not in got.data  # it left before answering anything
