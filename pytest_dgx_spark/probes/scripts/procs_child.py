# Process-table child: G6's and G10's scan of /proc/<pid>/{stat,cmdline}.
#
# Reading another process's cmdline takes its memory lock in the kernel: a process stuck there
# holding it (a CUDA job wedged in the driver) blocks the read forever, in uninterruptible sleep,
# so each pid is its own step and the parent's watchdog gives up and names it. Files are opened
# O_NONBLOCK and read only when fstat says they are regular (a FIFO, socket or device planted under
# SPARK_PREFLIGHT_HOST_ROOT is refused); a pid that cannot be read is skipped and counted. The
# owner (uid) is the owner of /proc/<pid>/stat, as ps reads it; the session comes from stat.
# The command-line budget is shared fairly: the GPU's own pids ("first") are read first with the
# whole per-process limit, every other pid gets at most its share of what is left, so early huge
# command lines cannot hide a later server's flags; a line cut by its share, or a pid left without
# one, counts in cut_by_budget. Standard library only: it runs in whichever interpreter the parent uses.
import errno as _errno
import stat as _stat_mod

_CMDLINE_LIMIT = 16384  # one command line, cut (a pid's cmdline can be ~2 MiB)
_CMDLINE_BUDGET = 24 << 20  # all lines together (the parent allows 40 MiB of stdout)
_MIN_SHARE = 64  # a smaller share reads nothing useful: listed without a command line
_NAMED_UNREADABLE = 5
_KINDS = {_stat_mod.S_IFIFO: "a FIFO", _stat_mod.S_IFSOCK: "a socket", _stat_mod.S_IFDIR: "a directory",
          _stat_mod.S_IFCHR: "a character device", _stat_mod.S_IFBLK: "a block device"}


def _read_regular(path, limit):
    """(bytes, owner uid) of a regular file, at most ``limit`` bytes."""
    fd = _os.open(path, _os.O_RDONLY | getattr(_os, "O_NONBLOCK", 0) | getattr(_os, "O_CLOEXEC", 0))
    try:
        st = _os.fstat(fd)
        if not _stat_mod.S_ISREG(st.st_mode):
            kind = _KINDS.get(_stat_mod.S_IFMT(st.st_mode), "not a regular file")
            raise OSError(_errno.EINVAL, "not a regular file (%s)" % kind)
        chunks, left = [], limit
        while left > 0:
            chunk = _os.read(fd, min(left, 65536))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks), st.st_uid
    finally:
        _os.close(fd)


def _pid_stat(path):
    """(ppid, name, rss pages, session, uid): the name sits in parentheses and may
    itself hold spaces and parentheses, so cut at the last ')'."""
    raw, uid = _read_regular(path, 4096)
    head, _, tail = raw.decode("utf-8", "replace").rpartition(")")
    fields = tail.split()
    if not head or len(fields) < 2:
        raise ValueError("malformed stat")
    rss = int(fields[21]) if len(fields) > 21 and fields[21].lstrip("-").isdigit() else None
    sid = int(fields[3]) if len(fields) > 3 and fields[3].lstrip("-").isdigit() else None
    return int(fields[1]), head.partition("(")[2], rss, sid, uid


def _why(exc):
    if isinstance(exc, OSError):
        return exc.strerror or str(exc) or type(exc).__name__
    return "unparsable stat (%s)" % type(exc).__name__


def _cmdline(path, share):
    """(argv, cut by the budget)."""
    raw, _ = _read_regular(path, share + 1)
    cut = len(raw) > share and share < _CMDLINE_LIMIT
    raw = raw[:share]
    return ([a.decode("utf-8", "replace") for a in raw.rstrip(b"\0").split(b"\0")] if raw else []), cut


def _order(asked, pids):
    """(the GPU's own pids that exist, every pid with those first)."""
    present = set(pids)
    first = list(dict.fromkeys(p for p in asked if isinstance(p, int) and p in present))
    return first, first + [pid for pid in pids if pid not in set(first)]


def main():
    cfg = config()
    proc = _os.path.join(cfg.get("root") or "/", "proc")
    begin("list " + proc)
    try:
        pids = sorted(int(e.name) for e in _os.scandir(proc) if e.name.isdigit())
    except OSError as exc:
        data(error="cannot list processes: %s" % (exc.strerror or exc))
        done()
        return
    first, order = _order(cfg.get("first") or [], pids)
    firsts = set(first)
    page = _os.sysconf("SC_PAGE_SIZE") if hasattr(_os, "sysconf") else 4096
    unreadable, budget, cut = [], _CMDLINE_BUDGET, 0
    for n, pid in enumerate(order):
        base = _os.path.join(proc, str(pid))
        begin("read /proc/%d/stat" % pid)
        try:
            ppid, name, rss, sid, uid = _pid_stat(_os.path.join(base, "stat"))
        except (OSError, ValueError, IndexError) as exc:
            unreadable.append("pid %d: %s" % (pid, _why(exc)))
            continue
        cmdline = []
        share = _CMDLINE_LIMIT if pid in firsts else min(_CMDLINE_LIMIT, budget // max(len(order) - n, 1))
        share = min(share, max(budget, 0))
        if share >= _MIN_SHARE:
            begin("read /proc/%d/cmdline" % pid)
            try:
                cmdline, short = _cmdline(_os.path.join(base, "cmdline"), share)
                cut += short
                budget -= len(_json.dumps(cmdline))  # what it costs on stdout, escapes included
            except OSError as exc:  # listed without it: NVML may still name its memory
                unreadable.append("pid %d cmdline: %s" % (pid, _why(exc)))
        else:
            cut += 1
            unreadable.append("pid %d cmdline: past the scan's %d MiB budget" % (pid, _CMDLINE_BUDGET >> 20))
        event({"pid": pid, "ppid": ppid, "name": name, "cmdline": cmdline, "uid": uid, "sid": sid,
               "rss_bytes": rss * page if rss is not None else None})
    data(error=None if pids else "cannot list processes: no process in /proc",
         unreadable=len(unreadable), unreadable_examples=unreadable[:_NAMED_UNREADABLE],
         cut_by_budget=cut, budget_mib=_CMDLINE_BUDGET >> 20, first=len(first))
    done()
