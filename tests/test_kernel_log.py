"""The kernel log probe: ``<root>/dev/kmsg`` without blocking, else ``journalctl -k -b``, else
``dmesg``; bounded in records, bytes and time; and the Xid / OOM-kill parsers.

Posted input (tests/data/gb10/, each with its ``# source:`` line): dmesg_xid_1.txt (Xid 119/120),
dmesg_xid_2.txt (Xid 13 as journalctl printed it), dmesg_xid_4.txt (Xid 13 Illegal Instruction),
dmesg_xid_5.txt (Xid 169), dmesg_oom_1.txt (a kernel OOM kill on a GB10). A plain file planted at
``dev/kmsg`` holds records in the kernel's ``pri,seq,usec,flags;text`` format; a FIFO there, an
unreadable one, garbage and a huge one end with a clear line; ``journalctl``/``dmesg`` doubles
first on PATH print the real formats.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_dgx_spark.capture import CaptureError, ReplayMachine
from pytest_dgx_spark.probes import kernel_log as kl
from pytest_dgx_spark.probes.machine import Machine

from conftest import PYTEST_ARGS
from doubles import gb10

GB10 = Path(__file__).parent / "data" / "gb10"


def posted(name: str, word: str) -> list[str]:
    """The lines of a posted file that hold ``word``, as the kernel logged them (a poster's
    ``[date]`` prefix or journalctl's ``host kernel:`` prefix taken off; a wrapped line joined)."""
    text = (GB10 / name).read_text()
    text = re.sub(r",\n\s+", ", ", text)  # dmesg_xid_2.txt: the author wrapped the line
    out = []
    for line in text.splitlines():
        if word in line and not line.startswith("#"):
            line = re.sub(r"^\[[^\]]*\]\s*", "", line.strip())
            line = re.sub(r"^.*? kernel: ", "", line)
            out.append(line)
    return out


XID_119_120 = posted("dmesg_xid_1.txt", "NVRM: Xid")
XID_13_VLLM = posted("dmesg_xid_2.txt", "NVRM: Xid")
XID_13_ILLEGAL = posted("dmesg_xid_4.txt", "NVRM: Xid")
XID_169 = posted("dmesg_xid_5.txt", "NVRM:")
OOM = posted("dmesg_oom_1.txt", "Out of memory")


def machine(root: Path, env: dict[str, str] | None = None, timeout: float = 5.0) -> Machine:
    return Machine(root=root, env=env if env is not None else dict(os.environ), timeout=timeout)


def plant(root: Path, text: str | bytes) -> Path:
    (root / "dev").mkdir(parents=True, exist_ok=True)
    path = root / "dev" / "kmsg"
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


# ---------------------------------------------------------------------- parsers on posted lines


def test_the_posted_lines_are_there() -> None:
    assert len(XID_119_120) == 2 and len(XID_13_VLLM) == 1 and len(XID_13_ILLEGAL) == 1
    assert len(XID_169) == 3 and len(OOM) == 1


def test_a_kmsg_record_parses_to_seq_seconds_and_text_and_drops_its_dictionary() -> None:
    raw = b"3,1234,5123456,-;" + XID_119_120[0].encode() + b"\n SUBSYSTEM=pci\n DEVICE=+pci:000f:01:00.0\n"
    assert kl.parse_kmsg_record(raw) == {"seq": 1234, "t": 5.123456, "text": XID_119_120[0]}
    assert kl.parse_kmsg_record(b"no record here") is None
    assert kl.parse_kmsg_record(b"6,1,2,c,more;text") == {"seq": 1, "t": 2e-06, "text": "text"}


def test_xids_from_the_gsp_crash_name_code_pid_process_and_message() -> None:
    """dmesg_xid_1.txt: ``Xid (PCI:000f:01:00): 119, pid=3849, name=KMS thread, Timeout after 45s …``."""
    recs = kl.records({"records": [{"seq": i, "t": float(i), "text": t} for i, t in enumerate(XID_119_120)]})
    found = kl.xids(recs)
    assert [(x.code, x.pid, x.name, x.pci) for x in found] == [
        (119, 3849, "KMS thread", "PCI:000f:01:00"),
        (120, 9111, "python", "PCI:000f:01:00"),
    ]
    assert found[0].message == "Timeout after 45s of waiting for RPC response from GPU0 GSP!"
    assert found[1].message == "GSP task exception: load access fault"
    assert [x.code for x in kl.latest_first(found)] == [120, 119]


def test_xids_without_a_process_keep_the_message() -> None:
    """dmesg_xid_2.txt and _4.txt print no pid/name; dmesg_xid_5.txt's 169 carries two hex words."""
    recs = [kl.KernelRecord(None, None, t) for t in XID_13_VLLM + XID_13_ILLEGAL + XID_169]
    found = kl.xids(recs)
    assert [(x.code, x.pid, x.name) for x in found] == [(13, None, None), (13, None, None), (169, None, None)]
    assert found[0].message.startswith("Graphics SM Global Exception on (GPC 0, TPC 1, SM 0): Multiple Warp Errors")
    assert found[1].message == "Graphics SM Warp Exception: Illegal Instruction Parameter"
    assert found[2].message == "fd8cd000 94000000"


def test_oom_kills_from_the_posted_gb10_line() -> None:
    """dmesg_oom_1.txt: ``Out of memory: Killed process 3742074 (lmcache) total-vm:81306880kB, anon-rss:1058560kB``."""
    found = kl.oom_kills([kl.KernelRecord(7, 1.5, OOM[0])])
    assert len(found) == 1
    kill = found[0]
    assert (kill.pid, kill.name, kill.anon_rss_kb, kill.total_vm_kb, kill.cgroup) == (3742074, "lmcache", 1058560, 81306880, False)
    cg = kl.oom_kills([kl.KernelRecord(None, None, "Memory cgroup out of memory: Killed process 12 (python3) total-vm:1kB, anon-rss:2kB")])
    assert cg[0].cgroup and cg[0].anon_rss_kb == 2


def test_odd_record_entries_are_skipped_not_raised() -> None:
    assert kl.records({"records": [None, {"text": 3}, {"seq": True, "t": "x", "text": "ok"}]}) == [kl.KernelRecord(None, None, "ok")]


# ---------------------------------------------------------------------- /dev/kmsg


def test_a_planted_kmsg_file_is_read_as_records(tmp_path: Path) -> None:
    plant(tmp_path, gb10.kmsg([gb10.GPU_FOUND, *XID_119_120]) + " SUBSYSTEM=pci\n")
    log = machine(tmp_path).kernel_log()
    assert log["source"] == "/dev/kmsg" and not log["problems"] and log["denied"] is None
    assert [r["seq"] for r in log["records"]] == [1, 2, 3]
    assert [x.code for x in kl.xids(kl.records(log))] == [119, 120]


def test_the_real_character_device_path_reads_to_its_end(tmp_path: Path) -> None:
    """A character device is read one record per ``read()`` until it has none: ``/dev/null``
    (a character device this machine has) answers end of file at once."""
    log = kl.read_kmsg("/dev/null", timeout=2.0)
    assert log["source"] == "/dev/kmsg" and log["records"] == []


def test_a_fifo_at_dev_kmsg_never_blocks_and_says_what_it_is(tmp_path: Path) -> None:
    (tmp_path / "dev").mkdir()
    os.mkfifo(tmp_path / "dev" / "kmsg")
    start = time.monotonic()
    log = machine(tmp_path, env={"PATH": str(tmp_path / "nothing")}).kernel_log()
    assert time.monotonic() - start < 3.0
    assert log["source"] is None
    assert "/dev/kmsg is not the kernel's device (a FIFO" in log["problems"][0], log["problems"]
    assert "journalctl: not found on PATH" in log["problems"][1]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file of mode 000: the EPERM case is the dmesg double's")
def test_an_unreadable_kmsg_says_how_to_allow_it(tmp_path: Path) -> None:
    path = plant(tmp_path, gb10.kmsg(XID_119_120))
    path.chmod(0)
    log = machine(tmp_path, env={"PATH": str(tmp_path / "nothing")}).kernel_log()
    assert log["source"] is None
    assert "sudo sysctl kernel.dmesg_restrict=0" in str(log["denied"]) and "systemd-journal" in str(log["denied"])


#: what the child below imports, as user nobody
#: nobody imports the package, and from the checkout asked for: where it cannot read that folder,
#: Python skips it on sys.path and may find an installed copy instead (a GPU image's editable install)
NOBODY_IMPORTS = (
    "import os, sys, pytest_dgx_spark.probes.kernel_log, pytest_dgx_spark.probes.commands\n"
    "got, want = os.path.realpath(pytest_dgx_spark.__file__), os.path.realpath(sys.argv[1])\n"
    "sys.exit(None if got.startswith(want + os.sep) else f'imports pytest_dgx_spark from {got}, not {want}')\n"
)


def nobody_import_problem(python: str, drop: Any, package: str) -> str:
    """Why user nobody cannot import the package from ``package`` with ``python`` ("" when it can):
    the interpreter may sit under root's home, the checkout in a folder of mode 0700 (a clone inside
    ``mktemp -d``), as the suite's other unprivileged tests check (suiteuser.import_problem)."""
    try:
        done = subprocess.run([python, "-c", NOBODY_IMPORTS, package], preexec_fn=drop, cwd="/", timeout=30,
                              capture_output=True, text=True, env={"PYTHONPATH": package, "PATH": os.defpath})  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{python}: {exc}"
    lines = done.stderr.strip().splitlines()
    return "" if done.returncode == 0 else f"{python}: {lines[-1] if lines else f'exit {done.returncode}'}"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to another user; the chmod 000 test covers a user")
def test_an_unreadable_kmsg_as_another_user_says_how_to_allow_it(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Root reads a file of mode 000, so the probe runs in a real child that dropped to ``nobody``:
    ``/dev/kmsg`` answers EACCES as it answers EPERM under ``kernel.dmesg_restrict=1``."""
    base = Path(tempfile.mkdtemp(prefix="kmsg-denied-"))
    try:
        base.chmod(0o755)
        path = plant(base, gb10.kmsg(XID_119_120))
        (base / "dev").chmod(0o755)
        path.chmod(0)
        code = (
            "import json, sys\n"
            "from pytest_dgx_spark.probes import kernel_log as kl\n"
            "from pytest_dgx_spark.probes.commands import run_command\n"
            "log = kl.read_kernel_log(sys.argv[1], lambda argv, s: run_command(argv, timeout=s, env={'PATH': '/nonexistent'}), timeout=5)\n"
            "print(json.dumps(log))\n"
        )
        package = str(Path(kl.__file__).resolve().parents[2])

        def drop() -> None:
            os.setgid(65534)
            os.setuid(65534)

        # this interpreter may sit under root's home, out of nobody's reach: the system's then
        pythons = dict.fromkeys((sys.executable, "/usr/bin/python3"))
        problems = {p: nobody_import_problem(p, drop, package) for p in pythons}
        python = next((p for p, why in problems.items() if not why), None)
        if python is None:
            pytest.skip(f"user nobody cannot import pytest_dgx_spark from {package}: {'; '.join(problems.values())}")
        done = subprocess.run([python, "-c", code, str(path)], capture_output=True, text=True, timeout=30,
                              env={"PYTHONPATH": package, "PATH": os.defpath}, preexec_fn=drop, cwd="/")
        assert done.returncode == 0, done.stderr
        log = json.loads(done.stdout)
        assert log["source"] is None
        assert log["denied"].startswith("the kernel log is not readable as this user (/dev/kmsg: Permission denied)")
        assert "`sudo sysctl kernel.dmesg_restrict=0`" in log["denied"]
    finally:
        path.chmod(0o600)
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to another user")
def test_in_a_clone_out_of_nobodys_reach_the_other_user_test_skips_saying_why(tmp_path: Path) -> None:
    """Issue 34 item 17: a clone inside a folder of mode 0700 (``mktemp -d``; pytest's own temp
    root is one): user nobody can start the interpreter but cannot import the package from there,
    so the test above skips, naming the reason, instead of failing on its child's ImportError."""
    root = Path(__file__).resolve().parent.parent
    clone = tmp_path / "clone"  # tmp_path's parents are 0700: out of nobody's reach
    junk = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    for folder in ("pytest_dgx_spark", "tests"):
        shutil.copytree(root / folder, clone / folder, ignore=junk)
    shutil.copy(root / "pyproject.toml", clone)
    env = {**os.environ, "PYTHONPATH": str(clone)}
    test = "tests/test_kernel_log.py::test_an_unreadable_kmsg_as_another_user_says_how_to_allow_it"
    done = subprocess.run([sys.executable, *PYTEST_ARGS, "-q", "-rs", test],
                          cwd=clone, env=env, capture_output=True, text=True, timeout=180)  # fmt: skip
    assert "1 skipped" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]
    assert f"user nobody cannot import pytest_dgx_spark from {clone}" in done.stdout, done.stdout[-3000:]


def test_garbage_in_kmsg_gives_no_record_and_no_traceback(tmp_path: Path) -> None:
    plant(tmp_path, os.urandom(200_000).replace(b"\n", b"x") + b"\n\xff\xfe;;,\n1,2,3\n")
    log = machine(tmp_path).kernel_log()
    assert log["source"] == "/dev/kmsg" and log["records"] == []


def test_a_huge_kmsg_keeps_the_latest_records_and_says_so(tmp_path: Path) -> None:
    lines = "".join(f"6,{i},{i * 1000},-;line {i}\n" for i in range(1, 250_001))
    path = plant(tmp_path, lines)
    log = kl.read_kmsg(str(path), limit=1000)
    assert [r["seq"] for r in log["records"]][-1] == 250_000 and len(log["records"]) == 1000
    assert log["cut"] == "250000 records; the latest 1000 kept"
    small = kl.read_kmsg(str(path), max_bytes=1 << 20)
    assert small["cut"] is not None and "bound on bytes" in small["cut"]
    assert 0 < len(small["records"]) < 250_000


def test_a_kmsg_read_stops_at_its_time_bound(tmp_path: Path) -> None:
    path = plant(tmp_path, "".join(f"6,{i},{i},-;x\n" for i in range(50_000)))
    log = kl.read_kmsg(str(path), timeout=0.0)
    assert log["cut"] == "stopped at the time bound; the records read so far are kept"


# ---------------------------------------------------------------------- journalctl and dmesg doubles


def tool(doubles: Any, name: str, body: str) -> None:
    doubles.tool(name, "#!/bin/sh\n" + body + "\n")


#: journalctl -k -b -o short-monotonic -r: newest first, a header, the host and "kernel:"
JOURNAL = "\n".join(
    [
        "-- Logs begin at Thu 2026-08-27 09:10:11 UTC, end at Fri 2026-08-28 11:55:09 UTC. --",
        f"[40508.228811] spark-0d93 kernel: {XID_13_VLLM[0]}",
        f"[   12.000001] spark-0d93 kernel: {gb10.GPU_FOUND}",
    ]
)
DMESG_DENIED = "dmesg: read kernel buffer failed: Operation not permitted"
JOURNAL_HINT = (
    "Hint: You are currently not seeing messages from other users and the system.\n"
    "      Users in groups 'adm', 'systemd-journal' can see all messages.\n"
    "      Pass -q to turn off this notice.\n-- No entries --"
)


def test_journalctl_is_read_when_there_is_no_kmsg(tmp_path: Path, doubles: Any) -> None:
    tool(doubles, "journalctl", f"cat <<'EOF'\n{JOURNAL}\nEOF")
    log = machine(tmp_path, env=doubles.env).kernel_log()
    assert log["source"] == "journalctl"
    assert log["problems"] == ["/dev/kmsg: No such file or directory"]
    assert [(r["t"], r["text"]) for r in log["records"]] == [(12.000001, gb10.GPU_FOUND), (40508.228811, XID_13_VLLM[0])]
    assert kl.xids(kl.records(log))[0].code == 13


def test_dmesg_is_read_when_journalctl_has_nothing(tmp_path: Path, doubles: Any) -> None:
    tool(doubles, "journalctl", "echo 'No journal files were found.' >&2; echo '-- No entries --'")
    tool(doubles, "dmesg", f"cat <<'EOF'\n[    5.123456] {XID_169[0]}\n[    5.223456] {XID_169[1]}\nEOF")
    log = machine(tmp_path, env=doubles.env).kernel_log()
    assert log["source"] == "dmesg" and [x.code for x in kl.xids(kl.records(log))] == [169]
    assert log["problems"][1] == "journalctl: no journal files were found"  # a container: no permission asked


def test_none_readable_as_this_user_says_so_and_how_to_allow_it(tmp_path: Path, doubles: Any) -> None:
    """kernel.dmesg_restrict=1: dmesg answers EPERM, journalctl shows a user only their own."""
    tool(doubles, "journalctl", f"cat <<'EOF'\n{JOURNAL_HINT}\nEOF")
    tool(doubles, "dmesg", f"echo '{DMESG_DENIED}' >&2; exit 1")
    log = machine(tmp_path, env=doubles.env).kernel_log()
    assert log["source"] is None
    denied = str(log["denied"])
    assert denied.startswith("the kernel log is not readable as this user (journalctl: Hint: You are currently")
    assert DMESG_DENIED in denied
    assert "`sudo sysctl kernel.dmesg_restrict=0`" in denied and "`adm` or `systemd-journal` group" in denied


def test_a_journalctl_that_hangs_is_killed_in_time(tmp_path: Path, doubles: Any) -> None:
    tool(doubles, "journalctl", "sleep 60")
    tool(doubles, "dmesg", f"echo '[    1.000000] {gb10.GPU_FOUND}'")
    start = time.monotonic()
    log = machine(tmp_path, env=doubles.env, timeout=1.0).kernel_log()
    assert time.monotonic() - start < 5.0
    assert log["source"] == "dmesg" and log["problems"][1].startswith("journalctl did not answer within")


def test_the_three_sources_share_one_time_budget(tmp_path: Path, doubles: Any) -> None:
    """journalctl and dmesg both hang: the read ends near one timeout, not two."""
    tool(doubles, "journalctl", "sleep 60")
    tool(doubles, "dmesg", "sleep 60")
    start = time.monotonic()
    log = machine(tmp_path, env=doubles.env, timeout=2.0).kernel_log()
    assert time.monotonic() - start < 2.0 + 0.5 + 2 * 2.5  # the runner's 2 s to reap each one
    assert log["source"] is None and log["denied"] is None
    assert re.fullmatch(r"journalctl did not answer within (2\.0|1\.9) s \(killed\)", log["problems"][1]), log["problems"]
    assert log["problems"][2] == "dmesg did not answer within 0.5 s (killed)"


def test_a_dmesg_of_millions_of_lines_is_cut_at_the_output_bound(tmp_path: Path, doubles: Any) -> None:
    tool(doubles, "journalctl", "exit 1")
    tool(doubles, "dmesg", "yes '[    1.000000] usb 1-1: new device' | head -n 3000000")
    log = machine(tmp_path, env=doubles.env, timeout=10.0).kernel_log()
    assert log["source"] == "dmesg"
    assert "printed more than 1 MiB on stdout (killed): the oldest" in str(log["cut"])
    assert 10_000 < len(log["records"]) <= kl.MAX_RECORDS


def test_the_machine_reads_the_log_once_per_run(tmp_path: Path) -> None:
    path = plant(tmp_path, gb10.kmsg([gb10.GPU_FOUND]))
    m = machine(tmp_path)
    first = m.kernel_log()
    path.write_text(gb10.kmsg(XID_119_120))
    assert m.kernel_log() == first


def test_a_replay_reads_no_kernel_log() -> None:
    with pytest.raises(CaptureError, match=r"a replay reads no machine \(asked for 'kernel_log'\)"):
        ReplayMachine({"checks": {}}).kernel_log()

