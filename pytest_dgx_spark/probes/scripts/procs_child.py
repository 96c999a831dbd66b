# Process-table child: G6's and G10's scan of /proc/<pid>/{stat,cmdline}.
#
# Why a child: reading another process's cmdline takes that process's memory
# lock in the kernel, and a process stuck in the kernel holding it (a CUDA
# job wedged in the NVIDIA driver, the failure a preflight exists to catch)
# blocks the read forever, in uninterruptible sleep: no timeout, no signal
# ends it. In a child, the parent's step watchdog gives up on it and names
# the pid; the pytest process never blocks. Each pid is its own step.
#
# Every file is opened O_NONBLOCK and read only when fstat says it is a
# regular file: a FIFO, socket or device planted where a pid's stat or
# cmdline should be (a crafted tree under SPARK_PREFLIGHT_HOST_ROOT) is
# refused at once. A pid that cannot be read (a symlink loop, a process that
# exited mid-scan, a denied file) is skipped and counted, never fatal.
#
# The command-line budget is shared fairly: the GPU's own pids (NVML's list,
# "first" in the request) are read first, each up to the per-process limit;
# every other pid gets at most its share of what is left (budget / pids left),
# so processes with huge command lines started early cannot use up the budget
# and hide a later server's flags. A line cut short by its share, or a pid
# left without one, is counted (cut_by_budget): the scan is then incomplete.
# Standard library only: it runs in whichever interpreter the parent uses.
import errno as _errno
import stat as _stat_mod

_CMDLINE_LIMIT = 16384  # one command line, cut (a pid's cmdline can be ~2 MiB)
# all command lines together, as printed (the parent allows 40 MiB of stdout,
# probes/processes.py): 1,500 processes each with a full 16 KiB line still fit
_CMDLINE_BUDGET = 24 << 20
_MIN_SHARE = 64  # a share smaller than this reads nothing useful: the pid is listed without a command line
_NAMED_UNREADABLE = 5


_KINDS = {
    _stat_mod.S_IFIFO: "a FIFO",
    _stat_mod.S_IFSOCK: "a socket",
    _stat_mod.S_IFCHR: "a character device",
    _stat_mod.S_IFBLK: "a block device",
    _stat_mod.S_IFDIR: "a directory",
}


def _read_regular(path, limit):
    flags = _os.O_RDONLY | getattr(_os, "O_NONBLOCK", 0) | getattr(_os, "O_CLOEXEC", 0)
    fd = _os.open(path, flags)
    try:
        mode = _os.fstat(fd).st_mode
        if not _stat_mod.S_ISREG(mode):
            kind = _KINDS.get(_stat_mod.S_IFMT(mode), "not a regular file")
            raise OSError(_errno.EINVAL, "not a regular file (%s)" % kind)
        chunks, left = [], limit
        while left > 0:
            chunk = _os.read(fd, min(left, 65536))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        _os.close(fd)


def _pid_stat(path):
    """(ppid, name, rss pages): the name sits in parentheses and may itself
    hold spaces and parentheses, so cut at the last ')'."""
    text = _read_regular(path, 4096).decode("utf-8", "replace")
    head, _, tail = text.rpartition(")")
    fields = tail.split()
    if not head or len(fields) < 2:
        raise ValueError("malformed stat")
    rss = int(fields[21]) if len(fields) > 21 and fields[21].lstrip("-").isdigit() else None
    return int(fields[1]), head.partition("(")[2], rss


def _why(exc):
    if isinstance(exc, OSError):
        return exc.strerror or str(exc) or type(exc).__name__
    return "unparsable stat (%s)" % type(exc).__name__


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
    present = set(pids)
    first = []
    for pid in cfg.get("first") or []:
        if isinstance(pid, int) and pid in present and pid not in first:
            first.append(pid)
    firsts = set(first)
    order = first + [pid for pid in pids if pid not in firsts]
    page = _os.sysconf("SC_PAGE_SIZE") if hasattr(_os, "sysconf") else 4096
    unreadable, budget, listed, cut = [], _CMDLINE_BUDGET, 0, 0
    for n, pid in enumerate(order):
        base = _os.path.join(proc, str(pid))
        begin("read /proc/%d/stat" % pid)
        try:
            ppid, name, rss = _pid_stat(_os.path.join(base, "stat"))
        except (OSError, ValueError, IndexError) as exc:
            unreadable.append("pid %d: %s" % (pid, _why(exc)))
            continue
        cmdline = []
        # the GPU's own pids: the whole per-process limit; the others: a fair share
        share = _CMDLINE_LIMIT if pid in firsts else min(_CMDLINE_LIMIT, budget // max(len(order) - n, 1))
        share = min(share, max(budget, 0))
        if share >= _MIN_SHARE:
            begin("read /proc/%d/cmdline" % pid)
            try:
                raw = _read_regular(_os.path.join(base, "cmdline"), share + 1)
                if len(raw) > share:
                    raw = raw[:share]
                    if share < _CMDLINE_LIMIT:  # cut by the budget, not by the usual limit
                        cut += 1
                cmdline = [a.decode("utf-8", "replace") for a in raw.rstrip(b"\0").split(b"\0")] if raw else []
                budget -= len(_json.dumps(cmdline))  # what it costs on stdout, escapes included
            except OSError as exc:  # listed without it: NVML may still name its memory
                unreadable.append("pid %d cmdline: %s" % (pid, _why(exc)))
        else:
            cut += 1
            unreadable.append("pid %d cmdline: past the scan's %d MiB budget" % (pid, _CMDLINE_BUDGET >> 20))
        event({"pid": pid, "ppid": ppid, "name": name, "cmdline": cmdline,
               "rss_bytes": rss * page if rss is not None else None})
        listed += 1
    data(error=None if (listed or pids) else "cannot list processes: no process in /proc",
         unreadable=len(unreadable), unreadable_examples=unreadable[:_NAMED_UNREADABLE],
         cut_by_budget=cut, budget_mib=_CMDLINE_BUDGET >> 20, first=len(first))
    done()
