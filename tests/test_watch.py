"""``spark-preflight watch``: a real wrapped child, the NVML double, a planted host root and a kernel
log that grows while the job runs. The rules are tested on planted samples; the end-to-end tests
drive each event kind through the real command and read its stderr and timeline."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_dgx_spark.probes.machine import ROOT_ENV
from pytest_dgx_spark.watch import rules

from doubles import gb10

INTERVAL = 0.2
SWTHERMAL, SWPOWERCAP = 0x20, 0x4
XID_79 = "NVRM: Xid (PCI:000f:01:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
OOM = (
    "Out of memory: Killed process 3742074 (lmcache) total-vm:81306880kB, anon-rss:1058560kB, "
    "file-rss:21412kB, shmem-rss:428kB, UID:0 pgtables:28484kB oom_score_adj:0"
)  # dmesg_oom_1.txt
CUDA12 = "OSError: libcudart.so.12: cannot open shared object file: No such file or directory"


# --------------------------------------------------------------------------- the rules, on planted samples


def gpu(mask: int = 0, clock: int = 2522, mw: int = 95000, util: int = 99, temp: int = 60) -> dict[str, Any]:
    return {
        "index": 0,
        "clock_event_reasons": mask,
        "clock_sm_mhz": clock,
        "power_usage_mw": mw,
        "utilization_gpu": util,
        "temperature_c": temp,
    }


def steps(w: rules.Watcher, samples: list[dict[str, Any]]) -> list[list[rules.Event]]:
    return [w.step(rules.WatchSample.from_dict({"t": float(i), "job_pids": [100], **s}))
            for i, s in enumerate(samples)]


def test_a_clock_event_is_one_event_while_it_lasts_and_one_when_it_clears() -> None:
    w = rules.Watcher(rules.Params())
    out = steps(
        w,
        [
            {"gpus": [gpu()]},
            {"gpus": [gpu(SWTHERMAL, clock=1100, mw=60000)]},
            {"gpus": [gpu(SWTHERMAL, clock=900)]},
            {"gpus": [gpu(SWTHERMAL)]},
            {"gpus": [gpu()]},  # one sample without it: a flicker, not yet cleared
            {"gpus": [gpu(SWTHERMAL)]},
            {"gpus": [gpu()]},
            {"gpus": [gpu()]},
        ],
    )
    assert [len(o) for o in out] == [0, 1, 0, 0, 0, 0, 0, 1]
    start, clear = out[1][0], out[7][0]
    assert (start.code, start.state, start.status) == ("G4.clock-event", "start", "WARN")
    assert (
        "SwThermalSlowdown" in start.text
        and "SM 2522 → 1100 MHz" in start.text
        and "power 95 → 60 W" in start.text
    )
    assert (clear.state, clear.since) == ("clear", 1.0)
    assert "after 6.0 s" in clear.text and "SM down to 900 MHz" in clear.text


def test_swpowercap_is_info_and_heat_is_warn() -> None:
    w = rules.Watcher(rules.Params())
    (e,) = steps(w, [{"gpus": [gpu(SWPOWERCAP)]}])[0]
    assert (e.code, e.status) == ("G4.clock-event", "INFO")


def test_clocks_stuck_low_under_load_needs_several_samples() -> None:
    w = rules.Watcher(rules.Params())
    low = {"gpus": [gpu(clock=800, mw=20000, util=95)]}
    out = steps(w, [low] * rules.LOW_CLOCK_SAMPLES + [low, {"gpus": [gpu()]}])
    assert [len(o) for o in out] == [0] * (rules.LOW_CLOCK_SAMPLES - 1) + [1, 0, 1]
    assert out[rules.LOW_CLOCK_SAMPLES - 1][0].code == "G4.clocks-low"


def test_a_new_process_is_an_event_the_jobs_own_is_not() -> None:
    w = rules.Watcher(rules.Params())
    mine = {"pid": 100, "gpu": 0, "used_bytes": 1 << 30, "cmd": "python train.py"}
    other = {
        "pid": 4242,
        "gpu": 0,
        "used_bytes": 8 << 30,
        "cmd": "vllm serve m --gpu-memory-utilization 0.05",
    }
    out = steps(
        w,
        [
            {"procs": [mine]},
            {"procs": [mine, other], "mem_total_kb": 100 * rules.GIB_KB},
            {"procs": [mine, other], "mem_total_kb": 100 * rules.GIB_KB},
            {"procs": [mine]},
        ],
    )
    assert out[0] == [] and out[2] == []
    w2 = rules.Watcher(rules.Params())
    (e,) = steps(w2, [{"procs": [other], "unseen_pids": [4242]}])[0]
    assert e.text.endswith("(no such pid in this PID namespace: NVML may name host pids in a container)")
    codes = sorted((e.code, e.state) for e in out[1])
    assert codes == [("G6.new-process", "start"), ("G6.over-cap", "start")]  # 8 GiB > 0.05 x 100 GiB
    assert "pid 4242" in out[1][0].text and "cap 0.05" in out[1][0].text
    assert out[1][0].text.endswith(
        ": vllm serve --gpu-memory-utilization 0.05"
    )  # the model name is not shown
    assert sorted((e.code, e.state) for e in out[3]) == [
        ("G6.new-process", "clear"),
        ("G6.over-cap", "clear"),
    ]


def test_a_sample_is_checked_once_where_it_is_built_and_written_back_key_for_key() -> None:
    """What the NVML child and the host reader hand over is typed in ``WatchSample.from_dict``: a value
    of the wrong shape is dropped there (no rule guards a read); ``to_record`` gives the timeline's keys
    in its order, the host's only when it answered, ``unseen_pids`` only when processes were read."""
    record = {"t": 1.5, "gpu": "ok", "gpus": [gpu(), "garbage"], "procs": [{"pid": 7}, 3],
              "job_running": True, "problems": [], "job_pids": [100, "101", True], "unseen_pids": [7],
              "mem_available_kb": 5, "mem_total_kb": "lots", "xids": [{"code": 79}, None], "ooms": "none",
              "free_blocks": 9}
    s = rules.WatchSample.from_dict(record)
    assert s.gpus == [gpu()] and s.procs == [{"pid": 7}] and s.job_pids == [100]
    host = (s.mem_available_kb, s.mem_total_kb, s.xids, s.ooms, s.free_blocks)
    assert host == (5, None, [{"code": 79}], [], 9)
    assert list(s.to_record()) == list(record)
    bare = rules.WatchSample.from_dict({"t": "soon", "gpus": None, "job_pids": [100]})
    assert (bare.t, bare.gpu, bare.job_running, bare.host, bare.xids) == (0.0, "ok", True, None, [])
    assert list(bare.to_record()) == ["t", "gpu", "gpus", "procs", "job_running", "problems", "job_pids"]


def test_memory_and_fragmentation_start_and_clear() -> None:
    w = rules.Watcher(rules.Params(workload_gb=100, blocks_min=200))
    gib = rules.GIB_KB
    out = steps(
        w,
        [
            {"mem_available_kb": 50 * gib, "free_blocks": 500},
            {"mem_available_kb": 5 * gib, "free_blocks": 10},
            {"mem_available_kb": 4 * gib, "free_blocks": 0},
            {"mem_available_kb": 50 * gib, "free_blocks": 900},
        ],
    )
    assert sorted(e.code for e in out[1]) == ["G3.fragmented", "G3.memavailable-low"] and out[2] == []
    assert sorted((e.code, e.state) for e in out[3]) == [
        ("G3.fragmented", "clear"),
        ("G3.memavailable-low", "clear"),
    ]


def test_without_a_workload_memavailable_is_not_judged() -> None:
    w = rules.Watcher(rules.Params())
    assert steps(w, [{"mem_available_kb": 1}]) == [[]]


def test_an_xid_put_in_the_ignore_class_is_no_event() -> None:
    w = rules.Watcher(rules.Params(xid_classes={"79": "ignore", "13": "hardware"}))
    (only,) = steps(w, [{"xids": [{"code": 79, "pci": "x", "seq": 1}, {"code": 13, "pci": "x", "seq": 2}]}])[
        0
    ]
    assert (only.code, only.status) == ("G4.xid-hardware", "FAIL") and "Xid 13" in only.text


def test_xids_by_class_and_oom_kills_are_instants() -> None:
    w = rules.Watcher(rules.Params())
    ((hw, app, oom),) = steps(
        w,
        [
            {
                "xids": [
                    {"code": 79, "pci": "PCI:000f:01:00", "seq": 1},
                    {"code": 13, "pci": "PCI:000f:01:00", "pid": 9, "name": "python", "seq": 2},
                ],
                "ooms": [{"pid": 100, "name": "python", "anon_rss_kb": 2 * rules.GIB_KB}],
            }
        ],
    )
    assert (hw.code, hw.status, hw.state) == ("G4.xid-hardware", "FAIL", "once")
    assert "reset" in hw.fix  # Xid 79's own fix
    assert (app.code, app.status) == ("G4.xid-application", "WARN")
    assert (oom.code, oom.status) == ("G3.oom-kill", "FAIL") and "the job's own" in oom.text


def test_a_gpu_idle_after_busy_is_a_stall_and_busy_again_clears_it() -> None:
    w = rules.Watcher(rules.Params(stall_s=2.0))
    out = steps(
        w,
        [
            {"gpus": [gpu(util=0)]},
            {"gpus": [gpu(util=0)]},
            {"gpus": [gpu(util=0)]},  # never busy: no stall
            {"gpus": [gpu(util=90)]},
            {"gpus": [gpu(util=0)]},
            {"gpus": [gpu(util=0)]},
            {"gpus": [gpu(util=1)]},
            {"gpus": [gpu(util=2)]},
            {"gpus": [gpu(util=80)]},
        ],
    )
    assert [[e.code for e in o] for o in out] == [
        [],
        [],
        [],
        [],
        [],
        [],
        ["G6.job-stalled"],
        [],
        ["G6.job-stalled"],
    ]
    assert out[8][0].state == "clear"


def test_a_silent_driver_is_an_event_and_the_summary_counts() -> None:
    w = rules.Watcher(rules.Params())
    out = steps(
        w, [{"gpu": "ok"}, {"gpu": "no answer for 12 s"}, {"gpu": "no answer for 17 s"}, {"gpu": "ok"}]
    )
    assert [[(e.code, e.state) for e in o] for o in out] == [
        [],
        [("G4.no-answer", "start")],
        [],
        [("G4.no-answer", "clear")],
    ]
    assert w.summary(3725) == "1 event in 1 h 2 m: G4.no-answer"
    assert rules.Watcher(rules.Params()).summary(22320) == "no event in 6 h 12 m"
    assert rules.line(out[1][0]).startswith(
        "+00:00:01 G4 WARN [G4.no-answer] NVML: no answer for 12 s — fix: "
    )


# --------------------------------------------------------------------------- the command, end to end


def plant_root(root: Path, kmsg: str = gb10.HEALTHY_KMSG, buddy: str | None = None) -> Path:
    files = {"proc/meminfo": gb10.meminfo(), **gb10.memory_files(), "dev/kmsg": kmsg}
    if buddy is not None:
        files["proc/buddyinfo"] = buddy
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


@pytest.fixture
def box(tmp_path: Path, doubles: Any) -> dict[str, Any]:
    """A GB10 double at rest (NVML and host root); ``env`` for the watcher."""
    root = plant_root(tmp_path / "root")
    env = {**doubles.nvml(gb10.nvml()).env, ROOT_ENV: str(root)}
    return {"root": root, "env": env, "doubles": doubles, "tmp": tmp_path}


def watch_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "pytest_dgx_spark", "watch", *args]


def run_watch(
    env: dict[str, str], *args: str, timeout: float = 60, **kw: Any
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(watch_argv(*args), env=env, capture_output=True, timeout=timeout, **kw)


def timeline(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def wait_samples(path: Path, n: int, limit: float = 30.0) -> None:
    """Until the watcher wrote ``n`` samples: it reads the box, its kernel log is open."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and (
        not path.exists() or path.read_bytes().count(b'"type":"sample"') < n
    ):
        time.sleep(0.02)


def events(records: list[dict[str, Any]], code: str | None = None) -> list[dict[str, Any]]:
    return [r for r in records if r["type"] == "event" and (code is None or r["code"] == code)]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([], "no COMMAND"),
        (["--interval", "0", "--", "true"], "--interval: expected a number above 0, got '0'"),
        (["--interval", "soon", "--", "true"], "--interval: expected a number, got 'soon'"),
        (["--pid", "abc"], "--pid: expected a process id"),
        (["--pid", "4194000"], "no such process"),
        (["--", "./no-such-program"], "cannot start ./no-such-program: No such file or directory"),
        (["--pid", "1", "--", "true"], "either --pid PID or -- COMMAND"),
        (["--threshold", "g3_nope=1", "--", "true"], "no threshold named 'g3_nope'"),
        (["--workload-gb", "-3", "--", "true"], "--workload-gb: expected a number above 0"),
        (["--timeline", "/proc/no/such/t.jsonl", "--", "true"], "--timeline /proc/no/such/t.jsonl: "),
        (["--xid-class", "79=harmless", "--", "true"], "--xid-class: Xid 79 class must be one of"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(box: dict[str, Any], args: list[str], says: str) -> None:
    r = run_watch(box["env"], *args, cwd=box["tmp"])
    assert r.returncode == 2
    lines = r.stderr.decode().splitlines()
    assert len(lines) == 1 and says in lines[0] and lines[0].startswith("spark-preflight watch: error: ")


def test_another_users_pid_is_refused(box: dict[str, Any]) -> None:
    """--pid of a process this user may not signal: one line, exit 2. As root, the watcher runs as
    nobody (uid 65534) and is given this test's own pid."""
    target = "1" if os.geteuid() != 0 else str(os.getpid())
    kw: dict[str, Any] = {"user": 65534, "group": 65534, "cwd": "/"} if os.geteuid() == 0 else {}
    try:
        r = run_watch(box["env"], "--pid", target, **kw)
    except PermissionError as exc:
        pytest.skip(f"nobody cannot run this interpreter: {exc}")
    if os.geteuid() == 0 and b"No module named" in r.stderr:
        pytest.skip("nobody cannot read this checkout")
    assert r.returncode == 2
    assert r.stderr.decode().splitlines() == [
        f"spark-preflight watch: error: --pid {target}: another user's "
        "process, not readable as this user (run as its owner or root)"
    ]


def test_output_passes_through_byte_for_byte(box: dict[str, Any]) -> None:
    """Binary, no final newline, 8 MiB from stdout and stderr each: the same bytes as without the watcher."""
    script = (
        "import os,sys\n"
        "blob = bytes(range(256)) * 32768\n"
        "sys.stdout.buffer.write(b'\\x00\\xff no newline'); sys.stdout.buffer.flush()\n"
        "sys.stderr.buffer.write(blob); sys.stdout.buffer.write(blob); sys.stdout.buffer.write(b'end')\n"
    )
    plain = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    r = run_watch(box["env"], "--interval", "0.5", "--", sys.executable, "-c", script)
    assert r.returncode == 0
    assert r.stdout == plain.stdout and len(r.stdout) == 8 * (1 << 20) + 3 + 13
    watcher_lines = [ln for ln in r.stderr.split(b"\n") if ln.startswith(b"spark-preflight watch: ")]
    assert r.stderr.startswith(plain.stderr)  # the job's stderr first and whole, our summary after
    assert (
        len(watcher_lines) == 1
    )  # the summary; the job's stderr ended without a newline: ours starts a line
    assert r.stderr[len(plain.stderr) :].startswith(b"\nspark-preflight watch: the job exited 0 after ")


def test_stdin_passes_through(box: dict[str, Any]) -> None:
    r = run_watch(
        box["env"],
        "--interval",
        "0.5",
        "--",
        sys.executable,
        "-c",
        "import sys; sys.stdout.write(sys.stdin.read().upper())",
        input=b"to the job",
    )
    assert (r.returncode, r.stdout) == (0, b"TO THE JOB")


def test_a_closed_stdout_downstream_stops_the_job_as_without_the_watcher(box: dict[str, Any]) -> None:
    """``watch -- yes | head -1``: yes meets SIGPIPE, the watcher exits 141 like yes alone."""
    shell = (
        f'{" ".join(watch_argv("--interval", "0.5", "--", "yes"))} | head -1; echo "rc=${{PIPESTATUS[0]}}"'
    )
    r = subprocess.run(["bash", "-c", shell], env=box["env"], capture_output=True, timeout=60)
    assert r.stdout == b"y\nrc=141\n"
    assert b"killed by SIGPIPE" in r.stderr


@pytest.mark.parametrize(("job", "code"), [("exit 7", 7), ("kill -KILL $$", 128 + 9), ("exit 0", 0)])
def test_the_exit_code_is_the_jobs(box: dict[str, Any], job: str, code: int) -> None:
    r = run_watch(box["env"], "--interval", "0.5", "--no-diagnose", "--", "sh", "-c", job)
    assert r.returncode == code


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_signals_sent_to_the_watcher_reach_the_job(box: dict[str, Any], sig: signal.Signals) -> None:
    """The job traps the signal, says so and exits 42: the watcher forwarded it and exits 42."""
    name = sig.name.removeprefix("SIG")
    job = f"trap 'echo got {name}; exit 42' {name}; echo ready; while :; do sleep 0.05; done"
    proc = subprocess.Popen(
        watch_argv("--interval", "0.5", "--no-diagnose", "--", "bash", "-c", job),
        env=box["env"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"ready\n"
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=30)
    assert (proc.returncode, out) == (42, f"got {name}\n".encode())


def test_a_job_killed_by_a_forwarded_signal_exits_128_plus_n(box: dict[str, Any]) -> None:
    proc = subprocess.Popen(
        watch_argv("--interval", "0.5", "--no-diagnose", "--", "sh", "-c", "echo ready; exec sleep 30"),
        env=box["env"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 143 and b"killed by SIGTERM (the watcher forwarded SIGTERM)" in err


def test_a_sigkilled_watcher_leaves_a_timeline_whose_every_line_parses(box: dict[str, Any]) -> None:
    path = box["tmp"] / "t.jsonl"
    proc = subprocess.Popen(
        watch_argv("--interval", "0.02", "--timeline", str(path), "--", "sleep", "30"),
        env=box["env"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (not path.exists() or path.read_bytes().count(b'"sample"') < 20):
        time.sleep(0.05)
    proc.kill()
    proc.wait(timeout=10)
    raw = path.read_bytes()
    assert raw.endswith(b"\n")
    records = [json.loads(line) for line in raw.splitlines()]
    assert records[0]["type"] == "watch" and sum(r["type"] == "sample" for r in records) >= 20
    with contextlib.suppress(ProcessLookupError):
        os.kill(records[0]["pid"], signal.SIGKILL)  # the job the killed watcher left, by the pid it recorded


def test_a_clock_event_appears_once_with_its_cause_and_clears_when_it_goes(box: dict[str, Any]) -> None:
    """The NVML double answers one planted sample per tick: SwThermalSlowdown from the 4th to the 7th."""
    samples = [
        {
            "clock_event_reasons": SWTHERMAL if 3 <= i < 7 else 0,
            "clock_sm_mhz": 1100 if 3 <= i < 7 else 2522,
            "power_usage_mw": 60000 if 3 <= i < 7 else 95000,
            "utilization_gpu": 99,
        }
        for i in range(40)
    ]
    env = {**box["doubles"].nvml(gb10.nvml(device={"samples": samples})).env, ROOT_ENV: str(box["root"])}
    path = box["tmp"] / "t.jsonl"
    r = run_watch(env, "--interval", str(INTERVAL), "--timeline", str(path), "--", "sleep", "3")
    assert r.returncode == 0
    records = timeline(path)
    found = events(records, "G4.clock-event")
    assert [e["state"] for e in found] == ["start", "clear"]
    order = [
        ("event" if x["type"] == "event" else _mask(x)) for x in records if x["type"] in ("event", "sample")
    ]
    hot = order.index(SWTHERMAL)
    assert order[hot - 1] == "event"  # raised on the tick that read the cause (events precede their sample)
    cool = next(i for i in range(hot, len(order)) if order[i] == 0)
    assert order[cool + 1] == "event" and order[cool + 2] == 0  # cleared on the second tick without it
    err = r.stderr.decode()
    assert (
        err.count("[G4.clock-event] clock-event reason SwThermalSlowdown active on GPU 0: SM 2522 → 1100 MHz")
        == 1
    )
    assert err.count("[G4.clock-event] cleared: ") == 1
    assert "; 1 event in " in err  # the summary counts the condition once


def _mask(sample: dict[str, Any]) -> Any:
    gpus = sample.get("gpus") or []
    return gpus[0].get("clock_event_reasons") if gpus else None


def test_a_new_gpu_process_appears_and_goes(box: dict[str, Any]) -> None:
    other = [{"pid": 4242, "used_bytes": 3 << 30}]
    samples = [{"compute_procs": other if 4 <= i < 8 else []} for i in range(40)]
    env = {**box["doubles"].nvml(gb10.nvml(device={"samples": samples})).env, ROOT_ENV: str(box["root"])}
    path = box["tmp"] / "t.jsonl"
    r = run_watch(env, "--interval", str(INTERVAL), "--timeline", str(path), "--", "sleep", "3")
    found = events(timeline(path), "G6.new-process")
    assert r.returncode == 0 and [e["state"] for e in found] == ["start", "clear"]
    assert "new GPU process pid 4242 on GPU 0 (3.0 GiB" in found[0]["text"]
    assert "GPU process pid 4242 gone" in found[1]["text"]


def test_memory_events_follow_the_planted_files(box: dict[str, Any]) -> None:
    """MemAvailable and the free 32 MiB blocks change while the job runs: start, then clear."""
    root, path = box["root"], box["tmp"] / "t.jsonl"
    proc = subprocess.Popen(
        watch_argv(
            "--interval", str(INTERVAL), "--workload-gb", "100", "--timeline", str(path), "--", "sleep", "5"
        ),
        env=box["env"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    wait_samples(path, 2)
    (root / "proc/meminfo").write_text(gb10.meminfo(free_gib=2.0, cache_gib=0.5))
    (root / "proc/buddyinfo").write_text(gb10.buddyinfo_fragmented_4k())
    changed = time.time()
    time.sleep(1.0)
    (root / "proc/meminfo").write_text(gb10.meminfo())
    (root / "proc/buddyinfo").write_text(gb10.buddyinfo())
    restored = time.time()
    proc.communicate(timeout=60)
    records = timeline(path)
    for code in ("G3.memavailable-low", "G3.fragmented"):
        found = events(records, code)
        assert [e["state"] for e in found] == ["start", "clear"], code
        assert found[0]["wall"] - changed <= 2 * INTERVAL + 0.5  # scheduling slack of a loaded CI box
        assert found[1]["wall"] - restored <= 2 * INTERVAL + 0.5
    assert "FAIL" in {e["status"] for e in events(records, "G3.fragmented")}  # no 32 MiB block at all


def test_a_failure_after_a_planted_xid_is_diagnosed_g4_with_the_events_time(box: dict[str, Any]) -> None:
    """The kernel log grows while the job runs (an Xid 79, which no log signature names); the job
    then fails."""
    kmsg, path = box["root"] / "dev/kmsg", box["tmp"] / "t.jsonl"
    proc = subprocess.Popen(
        watch_argv(
            "--interval",
            str(INTERVAL),
            "--timeline",
            str(path),
            "--",
            "sh",
            "-c",
            "sleep 3; echo 'RuntimeError: CUDA error: unspecified launch failure' >&2; exit 1",
        ),
        env=box["env"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    wait_samples(path, 2)
    with kmsg.open("a") as fh:
        fh.write(gb10.kmsg([XID_79], first_seq=100, first_usec=900_000_000))
    logged = time.time()
    _, err = proc.communicate(timeout=60)
    text = err.decode()
    assert proc.returncode == 1
    records = timeline(path)
    (xid,) = events(records, "G4.xid-hardware")
    assert xid["status"] == "FAIL" and xid["wall"] - logged <= 2 * INTERVAL + 0.5
    assert "Xid 79" in xid["text"]
    clock = time.strftime("%H:%M:%S", time.localtime(xid["wall"]))
    assert "diagnosis: G4" in text
    evidence = [ln for ln in text.splitlines() if "evidence: G4:" in ln]
    assert evidence and f"from {clock}" in evidence[0] and "then the job died at " in evidence[0]
    end = records[-1]
    assert end["type"] == "end" and end["returncode"] == 1
    assert [r["line"] for r in records if r["type"] == "kernel"] == [XID_79]
    assert [r["line"] for r in records if r["type"] == "output"] == [
        "RuntimeError: CUDA error: unspecified launch failure"
    ]


def test_a_new_oom_kill_in_the_kernel_log_is_an_event_and_diagnose_reads_the_timeline(
    box: dict[str, Any],
) -> None:
    kmsg, path = box["root"] / "dev/kmsg", box["tmp"] / "t.jsonl"
    proc = subprocess.Popen(
        watch_argv(
            "--interval",
            str(INTERVAL),
            "--timeline",
            str(path),
            "--no-diagnose",
            "--",
            "sh",
            "-c",
            "sleep 3; exit 137",
        ),
        env=box["env"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    wait_samples(path, 2)
    with kmsg.open("a") as fh:
        fh.write(gb10.kmsg([OOM], first_seq=200, first_usec=950_000_000))
    logged = time.time()
    proc.communicate(timeout=60)
    records = timeline(path)
    (oom,) = events(records, "G3.oom-kill")
    assert (
        oom["status"] == "WARN"
        and "pid 3742074 (lmcache)" in oom["text"]
        and oom["wall"] - logged <= 2 * INTERVAL + 0.5
    )
    # diagnose reads the timeline as it reads any log: the kernel's own line is in its end record
    d = subprocess.run(
        [sys.executable, "-m", "pytest_dgx_spark", "diagnose", "--no-machine", str(path)],
        env=box["env"],
        capture_output=True,
        timeout=60,
    )
    assert d.returncode == 1 and b"diagnosis: G3" in d.stdout


def test_a_cuda12_import_error_is_diagnosed_g1(box: dict[str, Any]) -> None:
    r = run_watch(box["env"], "--interval", str(INTERVAL), "--", "sh", "-c", f"echo '{CUDA12}' >&2; exit 1")
    text = r.stderr.decode()
    assert r.returncode == 1 and "diagnosis: G1 (first failure at job-output.log:1)" in text


def test_no_diagnose_leaves_the_post_mortem_out(box: dict[str, Any]) -> None:
    r = run_watch(
        box["env"],
        "--interval",
        str(INTERVAL),
        "--no-diagnose",
        "--",
        "sh",
        "-c",
        f"echo '{CUDA12}' >&2; exit 1",
    )
    assert r.returncode == 1 and b"diagnosis" not in r.stderr


def test_a_job_that_ends_well_gets_a_summary_and_exit_0(box: dict[str, Any]) -> None:
    r = run_watch(box["env"], "--interval", str(INTERVAL), "--", "sh", "-c", "echo fine")
    assert (r.returncode, r.stdout) == (0, b"fine\n")
    assert b"spark-preflight watch: the job exited 0 after " in r.stderr and b"; no event in " in r.stderr
    assert b"post-mortem" not in r.stderr


def test_a_wedged_driver_makes_samples_say_no_answer_and_the_watch_goes_on(box: dict[str, Any]) -> None:
    env = {
        **box["doubles"].nvml(gb10.nvml(hang={"where": "nvmlDeviceGetTemperature", "seconds": 600})).env,
        ROOT_ENV: str(box["root"]),
    }
    path = box["tmp"] / "t.jsonl"
    r = run_watch(env, "--interval", str(INTERVAL), "--timeline", str(path), "--", "sleep", "4")
    assert r.returncode == 0
    samples = [x for x in timeline(path) if x["type"] == "sample"]
    assert len(samples) >= 8 and any(s["gpu"].startswith("no answer") for s in samples)
    assert all(s["mem_available_kb"] for s in samples)  # the host is still read
    assert events(timeline(path), "G4.no-answer")


def test_pid_mode_watches_until_the_process_ends(box: dict[str, Any]) -> None:
    job = subprocess.Popen(["sleep", "1.5"])
    try:
        r = run_watch(box["env"], "--interval", str(INTERVAL), "--pid", str(job.pid))
    finally:
        job.wait(timeout=10)
    assert r.returncode == 0 and f"pid {job.pid} ended after".encode() in r.stderr


def test_clocks_stuck_low_and_a_stalled_job_start_and_clear(box: dict[str, Any]) -> None:
    """Planted per tick: busy, then busy at a low clock and power (N5), then idle (a stall after
    --stall-seconds), then busy again."""

    def at(i: int) -> dict[str, Any]:
        if i < 3:
            return {"utilization_gpu": 99, "clock_sm_mhz": 2522, "power_usage_mw": 95000}
        if i < 8:
            return {"utilization_gpu": 95, "clock_sm_mhz": 800, "power_usage_mw": 20000}
        return {"utilization_gpu": 0 if i < 18 else 99, "clock_sm_mhz": 2522, "power_usage_mw": 15000}

    samples = [{**at(i), "clock_event_reasons": 0} for i in range(60)]
    env = {**box["doubles"].nvml(gb10.nvml(device={"samples": samples})).env, ROOT_ENV: str(box["root"])}
    path = box["tmp"] / "t.jsonl"
    r = run_watch(
        env,
        "--interval",
        str(INTERVAL),
        "--stall-seconds",
        "0.5",
        "--timeline",
        str(path),
        "--",
        "sleep",
        "6",
    )
    records = timeline(path)
    low = events(records, "G4.clocks-low")
    stall = events(records, "G6.job-stalled")
    assert r.returncode == 0
    assert [e["state"] for e in low] == ["start", "clear"] and "SM 800 MHz and 20 W" in low[0]["text"]
    assert [e["state"] for e in stall] == ["start", "clear"] and "busy again" in stall[1]["text"]
    utils = [
        (x["gpus"] or [{}])[0].get("utilization_gpu") for x in records if x["type"] == "sample" and x["gpus"]
    ]
    assert utils.count(0) >= 3  # the stall came while the planted idle lasted, not at the end


def test_flat_power_while_the_temperature_climbs_is_an_event() -> None:
    """The seed's pattern on a GB10 (g4_flat_power_w 100): 60 W held while the chip heats 60 → 75 C."""
    w = rules.Watcher(rules.Params(flat_power_w=100.0, flat_band=0.15, flat_rise_c=5.0, idle_w=20.0))
    heating = [{"gpus": [gpu(mw=60000, util=99, temp=60 + i)]} for i in range(16)]
    cool = [{"gpus": [gpu(mw=140000, util=99, temp=75)]}] * rules.FLAT_WINDOW
    out = steps(w, heating + cool)
    started = [(i, e) for i, o in enumerate(out) for e in o if e.code == "G4.flat-power"]
    assert [e.state for _, e in started] == ["start", "clear"]
    assert "power flat at 60-60 W (<= 100 W) while the temperature rose" in started[0][1].text
    idle = rules.Watcher(rules.Params(flat_power_w=100.0, idle_w=20.0))
    assert not any(steps(idle, [{"gpus": [gpu(mw=11000, util=0, temp=40 + i)]} for i in range(16)]))


def test_a_signal_ends_a_pid_watch_and_leaves_the_process_alone(box: dict[str, Any]) -> None:
    job = subprocess.Popen(["sleep", "30"])
    try:
        path = box["tmp"] / "t.jsonl"
        watcher = subprocess.Popen(
            watch_argv("--interval", str(INTERVAL), "--timeline", str(path), "--pid", str(job.pid)),
            env=box["env"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        wait_samples(path, 2)
        watcher.send_signal(signal.SIGINT)
        _, err = watcher.communicate(timeout=30)
        assert watcher.returncode == 130 and b"stopped by SIGINT" in err
        assert job.poll() is None  # not ours to stop
        assert timeline(path)[-1]["type"] == "end"
    finally:
        job.kill()
        job.wait(timeout=10)


def test_the_post_mortem_quotes_a_power_cap_before_the_failure_with_its_times(box: dict[str, Any]) -> None:
    """The issue's example: "G4: SwPowerCap from 02:14:10, SM 2522 → 1100 MHz, then the job died
    at 02:31:55"."""
    samples = [
        {
            "clock_event_reasons": SWPOWERCAP if 2 <= i < 5 else 0,
            "clock_sm_mhz": 1100 if 2 <= i < 5 else 2522,
            "power_usage_mw": 95000,
            "utilization_gpu": 99,
        }
        for i in range(60)
    ]
    env = {**box["doubles"].nvml(gb10.nvml(device={"samples": samples})).env, ROOT_ENV: str(box["root"])}
    path = box["tmp"] / "t.jsonl"
    r = run_watch(
        env, "--interval", str(INTERVAL), "--timeline", str(path), "--", "sh", "-c", "sleep 3; exit 1"
    )
    assert r.returncode == 1
    start, clear = events(timeline(path), "G4.clock-event")
    clock = [time.strftime("%H:%M:%S", time.localtime(e["wall"])) for e in (start, clear)]
    (line,) = [ln for ln in r.stderr.decode().splitlines() if "evidence: G4:" in ln]
    assert "clock-event reason SwPowerCap active on GPU 0: SM 2522 → 1100 MHz" in line
    assert f" from {clock[0]} (+00:00:0" in line and f" until {clock[1]}, then the job died at " in line
    assert "diagnosis: unknown" in r.stderr.decode()  # an INFO power cap is evidence, not the cause


def test_the_timeline_is_written_by_the_safe_writer(box: dict[str, Any]) -> None:
    """A symlink planted where the timeline goes is refused before the job starts (nothing written
    through it); a regular file of an earlier run is replaced."""
    target = box["tmp"] / "victim"
    target.write_text("keep")
    link = box["tmp"] / "t.jsonl"
    link.symlink_to(target)
    r = run_watch(box["env"], "--timeline", str(link), "--", "sh", "-c", "echo ran")
    assert r.returncode == 2 and r.stdout == b"" and b"a symlink is there" in r.stderr
    assert target.read_text() == "keep"
    link.unlink()
    link.write_text("an earlier run's\n")
    r = run_watch(box["env"], "--interval", str(INTERVAL), "--timeline", str(link), "--", "true")
    assert r.returncode == 0 and timeline(link)[0]["type"] == "watch"


def test_a_terminals_ctrl_c_reaches_the_job_once(box: dict[str, Any]) -> None:
    """Under a terminal, ^C signals the whole foreground group (the watcher and the job): the watcher
    does not send it a second time (torch's second ^C kills without cleanup)."""
    import fcntl
    import pty
    import termios

    master, slave = pty.openpty()
    job = ("import signal, time\nn = [0]\nsignal.signal(signal.SIGINT, lambda *a: n.__setitem__(0, n[0] + 1))\n"
           "print('ready', flush=True)\ntime.sleep(2)\nprint('got', n[0], flush=True)\n")  # fmt: skip

    def controlling_tty() -> None:  # after setsid (start_new_session): the pty becomes our terminal
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen(watch_argv("--interval", "0.5", "--no-diagnose", "--", sys.executable, "-c", job),
                            env=box["env"], stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
                            preexec_fn=controlling_tty)  # fmt: skip
    os.close(slave)
    seen = b""
    try:
        deadline = time.monotonic() + 30
        while b"ready" not in seen and time.monotonic() < deadline:
            seen += os.read(master, 4096)
        os.write(master, b"\x03")  # the terminal's interrupt character
        while proc.poll() is None or b"got" not in seen:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the last writer closed the pty
                break
            if not chunk:
                break
            seen += chunk
        proc.wait(timeout=30)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert b"got 1" in seen and proc.returncode == 0


def test_the_timeline_is_redacted_as_a_capture_is(box: dict[str, Any]) -> None:
    """A secret in the environment, one shaped like a token in the output and one in the command line
    stay out of the timeline; the post-mortem still runs."""
    env = {**box["env"], "WANDB_API_KEY": "plain-secret-value-123"}
    token = "hf_" + "A1b2C3d4E5f6G7h8J9k0"
    path = box["tmp"] / "t.jsonl"
    job = f"echo 'key plain-secret-value-123 token {token}'; exit 2"
    r = run_watch(
        env, "--interval", str(INTERVAL), "--timeline", str(path), "--", "sh", "-c", job, "--token", token
    )
    raw = path.read_text()
    assert r.returncode == 2 and r.stdout.decode().count(token) == 1  # the job's own output is untouched
    assert "plain-secret-value-123" not in raw and token not in raw
    assert any(x["type"] == "output" for x in timeline(path))


def test_the_prometheus_textfile_is_refreshed_every_sample(box: dict[str, Any]) -> None:
    """Issue 33: under watch, ``--prometheus-textfile`` is rewritten each sample. Before the planted
    Xid 79 the watched checks read pass; after it G4 reads fail with its code, the other checks are
    ``not_run`` with why, and every file written parses with prometheus_client's parser."""
    from prometheus_client.parser import text_string_to_metric_families

    kmsg, path, prom = box["root"] / "dev/kmsg", box["tmp"] / "t.jsonl", box["tmp"] / "spark.prom"

    def samples() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        text = prom.read_text()
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for fam in text_string_to_metric_families(text) for s in fam.samples}  # fmt: skip

    proc = subprocess.Popen(
        watch_argv("--interval", str(INTERVAL), "--timeline", str(path), "--prometheus-textfile", str(prom),
                   "--no-diagnose", "--", "sleep", "4"),
        env=box["env"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    wait_samples(path, 2)
    before = samples()
    g4_before = {dict(k[1])["status"]: v for k, v in before.items()
                 if k[0] == "spark_preflight_check_status" and dict(k[1])["check"] == "G4"}  # fmt: skip
    assert g4_before["pass"] == 1 and g4_before["fail"] == 0, g4_before
    (info,) = [dict(k[1]) for k in before if k[0] == "spark_preflight_build_info"]
    assert info["mode"] == "watch", info
    with kmsg.open("a") as fh:
        fh.write(gb10.kmsg([XID_79], first_seq=100, first_usec=900_000_000))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()
    after = samples()
    g4 = {dict(k[1])["status"]: v for k, v in after.items()
          if k[0] == "spark_preflight_check_status" and dict(k[1])["check"] == "G4"}  # fmt: skip
    assert g4["fail"] == 1 and g4["pass"] == 0, g4
    assert after[("spark_preflight_finding", (("check", "G4"), ("code", "G4.xid-hardware"), ("status", "fail")))] == 1
    reasons = {dict(k[1])["check"]: dict(k[1])["reason"] for k in after if k[0] == "spark_preflight_check_reason"}
    assert reasons["G1"] == "not watched: watch samples G3, G4 and G6" and "G4" not in reasons
    assert after[("spark_preflight_verdict", (("verdict", "blocked"),))] == 1

