"""The kernel log since boot, read without blocking, and pure parsers of what it says.

GPU faults (``NVRM: Xid …``) and the kernel's OOM kills are written only to the kernel log: a vLLM
service killed by Xid 13 exits ``status=0/SUCCESS`` (tests/data/gb10/dmesg_xid_2.txt), an OOM kill of a
neighbour leaves a ``137`` and nothing else. The first readable source wins: ``<host root>/dev/kmsg``
(``O_NONBLOCK``: one record ``pri,seq,usec,flags;text`` per ``read()``, ``EAGAIN`` the end, ``EPIPE``
records overwritten; a regular file there is read line by line, a FIFO refused as procfs refuses it),
then ``journalctl -k -b``, then ``dmesg``; each bounded in records, bytes and time. Unreadable as this
user (``kernel.dmesg_restrict=1``: EPERM) the answer says how to allow it: no fault of the machine.
The answer is plain JSON (the store and xdist share it); :func:`records` types it.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import field
from typing import Any, TypedDict

from pytest_dgx_spark.checks.record import Record
from pytest_dgx_spark.datadef import define
from pytest_dgx_spark.outfile import kind_of
from pytest_dgx_spark.probes.commands import CommandResult
from pytest_dgx_spark.probes.memory_pressure import oom_kill_match

KMSG = "/dev/kmsg"
#: the latest records kept of a longer log (a box up for weeks logs millions)
MAX_RECORDS = 100_000
#: bytes read from one source at most (~1 KiB a record keeps the latest MAX_RECORDS)
MAX_BYTES = 64 << 20
#: one record's text is cut here (the kernel's own limit is 1 KiB; a planted file may have none)
MAX_TEXT = 4096
#: /dev/kmsg returns one record per read; a record is at most 8 KiB with its dictionary
_READ_SIZE = 16384
#: newest first (``-r``): when the output passes the runner's 1 MiB bound, the newest records are the ones kept
JOURNALCTL = ["journalctl", "-k", "-b", "--no-pager", "-o", "short-monotonic", "-r", "-n", str(MAX_RECORDS)]
DMESG = ["dmesg"]
ALLOW_KMSG = "allow it: `sudo sysctl kernel.dmesg_restrict=0`, or run as root"
ALLOW_JOURNAL = "or add the user to the `adm` or `systemd-journal` group for journalctl"

#: ``[    5.123456] text`` (dmesg) and ``[    5.123456] host kernel: text`` (journalctl short-monotonic)
_BRACKETED = re.compile(r"^\[\s*(\d+(?:\.\d+)?)\]\s?(.*)$")
_JOURNAL_KERNEL = re.compile(r"^\S+\s+kernel:\s?(.*)$")
#: what journalctl and dmesg print when this user may not read the log ("No journal files were found"
#: is a container without the host's journal: not a permission)
_DENIED_WORDS = ("operation not permitted", "permission denied", "not seeing messages from other users")


@define(frozen=True)
class KernelRecord:
    """One kernel log record: its sequence number (``/dev/kmsg`` only), seconds since boot, text."""

    seq: int | None
    seconds: float | None
    text: str


class KernelLog(TypedDict):
    """What :func:`read_kernel_log` found, as JSON. ``source`` is None when nothing was readable,
    ``denied`` then says how to allow it; ``problems``: why each earlier source was passed over;
    ``cut``: which bound ended the read (the records kept are the latest); ``seconds`` the read took."""

    source: str | None
    records: list[dict[str, Any]]
    problems: list[str]
    denied: str | None
    cut: str | None
    seconds: float


@define
class LogOutcome(Record):
    """How the read of a :class:`KernelLog` went, typed (:func:`outcome`); the records are :func:`records`."""

    source: str | None = None
    problems: list[str] = field(default_factory=list)
    denied: str | None = None
    cut: str | None = None


def outcome(log: Mapping[str, Any]) -> LogOutcome:
    """The log's source, the problems met, how to allow a denied read, and which bound cut it."""
    problems = log.get("problems")
    return LogOutcome(
        source=str(log["source"]) if log.get("source") else None,
        problems=[str(p) for p in problems] if isinstance(problems, list) else [],
        denied=str(log["denied"]) if log.get("denied") else None,
        cut=str(log["cut"]) if log.get("cut") else None,
    )


def _unread(problem: str, denied: str | None = None) -> KernelLog:
    return {"source": None, "records": [], "problems": [problem], "denied": denied, "cut": None, "seconds": 0.0}


def _read(source: str, found: list[dict[str, Any]], cut: str | None) -> KernelLog:
    return {"source": source, "records": found, "problems": [], "denied": None, "cut": cut, "seconds": 0.0}


def parse_kmsg_record(raw: bytes) -> dict[str, Any] | None:
    """``b"6,1234,5123456,-;NVRM: …\n SUBSYSTEM=pci\n"`` -> ``{"seq", "t", "text"}``; the
    continuation lines (the record's dictionary) are dropped; None for what is no record.
    Split, not a regular expression: a log of 100,000 records goes through here."""
    head, sep, text = raw.split(b"\n", 1)[0].partition(b";")
    fields = head.split(b",")
    if not sep or len(fields) < 4 or not all(f.isdigit() and len(f) <= 20 for f in fields[:3]):
        return None
    return {"seq": int(fields[1]), "t": round(int(fields[2]) / 1e6, 6),
            "text": text.decode("utf-8", errors="replace")[:MAX_TEXT]}


def parse_text_log(text: str) -> list[dict[str, Any]]:
    """``dmesg`` or ``journalctl -k -o short-monotonic`` output -> records; lines without a time skipped."""
    out: list[dict[str, Any]] = []
    for line in text.splitlines():
        if m := _BRACKETED.match(line.strip()):
            journal = _JOURNAL_KERNEL.match(m.group(2))
            out.append({"seq": None, "t": float(m.group(1)),
                        "text": (journal.group(1) if journal else m.group(2))[:MAX_TEXT]})
    return out


class _Bounded:
    """The latest ``limit`` records, and which bound (records, bytes, time) ended the read."""

    def __init__(self, limit: int, max_bytes: int, deadline: float) -> None:
        self.kept: deque[dict[str, Any]] = deque(maxlen=limit)
        self.limit, self.max_bytes, self.deadline = limit, max_bytes, deadline
        self.seen = self.bytes = 0
        self.cut: str | None = None

    def add(self, record: dict[str, Any] | None, size: int) -> bool:
        """Keep ``record``; False once a bound says stop."""
        self.bytes += size
        if record is not None:
            self.kept.append(record)
            self.seen += 1
        if self.bytes >= self.max_bytes:
            self.cut = f"stopped after {self.bytes >> 20} MiB (the bound on bytes); the records read so far are kept"
        elif time.monotonic() >= self.deadline:
            self.cut = "stopped at the time bound; the records read so far are kept"
        return self.cut is None

    def finish(self) -> str | None:
        if self.cut is None and self.seen > self.limit:
            self.cut = f"{self.seen} records; the latest {self.limit} kept"
        return self.cut


def read_kmsg(path: str, *, limit: int = MAX_RECORDS, max_bytes: int = MAX_BYTES, timeout: float = 10.0) -> KernelLog:
    """``/dev/kmsg`` (a character device: one record per read) or a regular file in its place."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        why = f"{KMSG}: {exc.strerror or exc}"
        return _unread(why, why if exc.errno in (errno.EPERM, errno.EACCES) else None)
    bound = _Bounded(limit, max_bytes, time.monotonic() + timeout)
    try:
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISCHR(mode) or stat.S_ISREG(mode)):
            return _unread(f"{KMSG} is not the kernel's device ({kind_of(mode)}): not read")
        problem = _read_device(fd, bound) if stat.S_ISCHR(mode) else _read_file(fd, bound)
    finally:
        os.close(fd)
    if problem is not None:
        return _unread(f"{KMSG}: {problem}", f"{KMSG}: {problem}" if problem.startswith("EPERM") else None)
    return _read(KMSG, list(bound.kept), bound.finish())


def _read_device(fd: int, bound: _Bounded) -> str | None:
    while True:
        try:
            raw = os.read(fd, _READ_SIZE)
        except BlockingIOError:  # EAGAIN: no record left
            return None
        except OSError as exc:
            if exc.errno == errno.EPIPE:  # records overwritten while we read: go on with the next
                continue
            if exc.errno in (errno.EPERM, errno.EACCES):
                return f"EPERM ({exc.strerror})"
            return f"read failed: {exc.strerror or exc}"
        if not raw or not bound.add(parse_kmsg_record(raw), len(raw)):
            return None


def _read_file(fd: int, bound: _Bounded) -> str | None:
    """A regular file of kmsg records, one a line (continuations start with a space)."""
    rest = b""
    while chunk := os.read(fd, 1 << 16):
        *lines, rest = (rest + chunk).split(b"\n")
        for line in lines:
            if not bound.add(None if line.startswith(b" ") else parse_kmsg_record(line), len(line) + 1):
                return None
        if len(rest) > MAX_TEXT * 4:  # a line without end: garbage, not a record
            bound.add(None, len(rest))
            rest = b""
    if rest and not rest.startswith(b" "):
        bound.add(parse_kmsg_record(rest), len(rest))
    return None


def _from_command(name: str, res: CommandResult, *, limit: int) -> KernelLog:
    text = (res.stdout + "\n" + res.stderr).lower()
    if res.error:
        return _unread(res.describe())
    found = parse_text_log(res.stdout)
    if not found and "no journal files" in text:
        return _unread(f"{name}: no journal files were found")
    if name == "journalctl":
        found.reverse()  # it printed newest first
    if res.overflow and found:  # the runner kept the first MiB: journalctl's newest, dmesg's oldest
        kept = "newest" if name == "journalctl" else "oldest"
        return _read(name, found[-limit:], f"{res.describe()}: the {kept} {len(found)} records kept")
    if res.timed_out or res.overflow or res.signal:
        return _unread(res.describe())
    if not found and any(w in text for w in _DENIED_WORDS):
        line = (res.stderr.strip() or res.stdout.strip()).splitlines()[0][:160]
        return _unread(f"{name}: {line}", f"{name}: {line}")
    if res.returncode != 0:
        line = (res.stderr.strip() or res.stdout.strip() or f"exited {res.returncode}").splitlines()[0][:160]
        return _unread(f"{name}: {line}")
    cut = f"{len(found)} records; the latest {limit} kept" if len(found) > limit else None
    return _read(name, found[-limit:], cut)


def read_kernel_log(
    kmsg_path: str, command: Callable[[Sequence[str], float], CommandResult], *, timeout: float = 10.0, limit: int = MAX_RECORDS
) -> KernelLog:
    """The first readable source, sharing ``timeout``; never raises. ``command``: a bounded run_command."""
    begun = time.monotonic()
    problems: list[str] = []
    denied: list[str] = []

    def left() -> float:  # the three sources share one time budget: the whole read is bounded by it
        return round(max(0.5, timeout - (time.monotonic() - begun)), 1)

    attempts: list[Callable[[], KernelLog]] = [
        lambda: read_kmsg(kmsg_path, limit=limit, timeout=timeout),
        lambda: _from_command("journalctl", command(JOURNALCTL, left()), limit=limit),
        lambda: _from_command("dmesg", command(DMESG, left()), limit=limit),
    ]
    for attempt in attempts:
        try:
            got = attempt()
        except OSError as exc:  # fstat of a vanished file and the like
            got = _unread(f"{KMSG}: {exc.strerror or exc}")
        if got.get("source"):
            return {**got, "problems": problems, "seconds": round(time.monotonic() - begun, 3)}
        problems += got.get("problems") or []
        if got.get("denied"):
            denied.append(str(got["denied"]))
    how = None
    if denied:
        how = f"the kernel log is not readable as this user ({'; '.join(denied)}); {ALLOW_KMSG}, {ALLOW_JOURNAL}"
    return {"source": None, "records": [], "problems": problems, "denied": how, "cut": None,
            "seconds": round(time.monotonic() - begun, 3)}


def records(log: Mapping[str, Any]) -> list[KernelRecord]:
    """The typed records of a :class:`KernelLog` (or of its JSON in a capture); odd entries skipped."""
    out: list[KernelRecord] = []
    for r in log.get("records") or []:
        if isinstance(r, Mapping) and isinstance(r.get("text"), str):
            seq, t = r.get("seq"), r.get("t")
            seq = seq if isinstance(seq, int) and not isinstance(seq, bool) else None
            t = float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else None
            out.append(KernelRecord(seq, t, r["text"]))
    return out


@define(frozen=True)
class Xid:
    """One ``NVRM: Xid (PCI:000f:01:00): 13, pid=…, name=…, …`` line."""

    code: int
    pci: str
    pid: int | None
    name: str | None
    message: str
    seq: int | None
    seconds: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "pci": self.pci, "pid": self.pid, "name": self.name, "message": self.message,
                "seq": self.seq, "t": self.seconds}


_XID = re.compile(r"NVRM: Xid \(([^)]*)\):\s*(\d{1,6})\b,?\s*(.*)$")
_XID_PID = re.compile(r"\bpid=(\d{1,10}|'?<unknown>'?)\s*,?\s*")
_XID_NAME = re.compile(r"\bname=([^,]*?)\s*(?:,\s*|$)")


def xids(recs: Iterable[KernelRecord]) -> list[Xid]:
    """Every Xid line, in log order (the process is named when the driver named it)."""
    out: list[Xid] = []
    for r in recs:
        m = _XID.search(r.text) if "Xid" in r.text else None  # the cheap test first: 100,000 records
        if m is None:
            continue
        rest, pid, name = m.group(3), None, None
        if pid_m := _XID_PID.search(rest):
            pid = int(pid_m.group(1)) if pid_m.group(1).isdigit() else None
            rest = rest[: pid_m.start()] + rest[pid_m.end():]
            if name_m := _XID_NAME.search(rest):
                name = name_m.group(1).strip() or None
                rest = rest[: name_m.start()] + rest[name_m.end():]
        out.append(Xid(int(m.group(2)), m.group(1).strip(), pid, name, rest.strip(" ,")[:300], r.seq, r.seconds))
    return out


@define(frozen=True)
class OomKill:
    """One ``Out of memory: Killed process 3742074 (lmcache) total-vm:…kB, anon-rss:…kB`` line."""

    pid: int
    name: str
    anon_rss_kb: int | None
    total_vm_kb: int | None
    cgroup: bool  # "Memory cgroup out of memory": a container's limit, not the whole box
    seq: int | None
    seconds: float | None


def oom_kills(recs: Iterable[KernelRecord]) -> list[OomKill]:
    """Every OOM kill the kernel logged, in log order (the line as G3 reads it: one pattern)."""
    return [OomKill(int(m.group("pid")), m.group("name"), int(anon) if (anon := m.group("anon")) else None,
                    int(vm) if (vm := m.group("vm")) else None, bool(m.group("cg")), r.seq, r.seconds)
            for r in recs if (m := oom_kill_match(r.text)) is not None]


def latest_first(items: Sequence[Xid]) -> Iterator[Xid]:
    """Newest first: by sequence number where the log has one, else by time, else by order."""
    keyed = sorted(enumerate(items), key=lambda p: (p[1].seq if p[1].seq is not None else -1,
                                                    p[1].seconds if p[1].seconds is not None else -1.0, p[0]))
    return (x for _, x in reversed(keyed))
