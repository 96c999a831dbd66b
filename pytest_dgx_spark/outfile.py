"""The one writer of every file this tool makes, safe in a folder other users can write.

Run as root in ``/tmp`` or a shared CI workspace, a plain write follows a symlink another user
planted (issue 19). So the folder is reached one component at a time, following only a symlink of
ours or root's or one in a folder only we can write; the file is made ``O_EXCL|O_NOFOLLOW`` beside
the path, never over a link, a non-regular file or another user's file in a folder others can
write, takes the replaced file's mode and owner and is renamed over it. A refused path raises
:class:`Refused` (an :class:`OSError`) whose ``strerror`` says why in one line.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

#: followed symlinks before giving up (the kernel's own limit)
MAX_LINKS = 40

_KINDS = {stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device", stat.S_IFIFO: "a FIFO",
          stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a directory"}
_DIR_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW


class Refused(OSError):
    """A path this tool will not write: ``strerror`` says why in one line."""

    def __init__(self, path: str | os.PathLike[str], why: str) -> None:
        super().__init__(errno.EPERM, why, str(path))


def kind_of(mode: int) -> str:
    """``"a FIFO"``, ``"a directory"`` …: what a non-regular file is."""
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def not_a_file(path: str | os.PathLike[str]) -> str | None:
    """What sits at ``path`` (symlinks followed) when it is neither a regular file nor nothing."""
    try:
        mode = os.stat(path).st_mode
    except OSError:  # nothing there (or no way there: the write says why)
        return None
    return None if stat.S_ISREG(mode) else kind_of(mode)


def others_can_write(st: os.stat_result) -> bool:
    """Whether a user other than us (or root) can change the folder ``st`` describes."""
    return bool(st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)) or st.st_uid not in (os.geteuid(), 0)


def _where(st: os.stat_result) -> str:
    sticky = "sticky, " if st.st_mode & stat.S_ISVTX else ""
    return f"a folder others can write ({sticky}mode {stat.S_IMODE(st.st_mode):04o}, owner uid {st.st_uid})"


def _trusted_link(link: os.stat_result, folder: os.stat_result) -> bool:
    """A symlink we may follow: ours or root's, or in a folder only we can write."""
    return link.st_uid in (os.geteuid(), 0) or not others_can_write(folder)


def open_folder(folder: str | os.PathLike[str]) -> int:
    """A descriptor of ``folder``, reached without following a symlink another
    user could have planted (:class:`Refused`); OSError when it is not there."""
    parts = [p for p in os.path.abspath(folder).split("/") if p]
    fd = os.open("/", _DIR_FLAGS)
    shown = "/"
    links = 0
    try:
        while parts:
            name = parts.pop(0)
            if name == ".":
                continue
            st = os.lstat(name, dir_fd=fd)
            if not stat.S_ISLNK(st.st_mode):
                nxt = os.open(name, _DIR_FLAGS, dir_fd=fd)  # a link swapped in meanwhile: ELOOP/ENOTDIR
                os.close(fd)
                fd, shown = nxt, os.path.join(shown, name)
                continue
            links += 1
            if links > MAX_LINKS:
                raise OSError(errno.ELOOP, "too many levels of symbolic links", str(folder))
            here = os.fstat(fd)
            if not _trusted_link(st, here):
                where = os.path.join(shown, name)
                raise Refused(folder, f"{where} is a symlink of another user (uid {st.st_uid}) in "
                                      f"{_where(here)}; not followed")
            target = os.readlink(name, dir_fd=fd)
            parts[:0] = [p for p in target.split("/") if p]
            if target.startswith("/"):
                os.close(fd)
                fd, shown = os.open("/", _DIR_FLAGS), "/"
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def _folder_of(path: str | os.PathLike[str]) -> Iterator[tuple[Path, str, int]]:
    """``(full path, file name, descriptor of its folder)``, the descriptor closed after."""
    full = Path(os.path.abspath(path))
    if not full.name or str(path).endswith("/"):
        raise OSError(errno.EISDIR, "a folder, not a file path", str(path))
    fd = open_folder(full.parent)
    try:
        yield full, full.name, fd
    finally:
        os.close(fd)


def _foreign_file(path: Path, st: os.stat_result, dir_fd: int) -> None:
    here = os.fstat(dir_fd)
    if st.st_uid != os.geteuid() and others_can_write(here):
        raise Refused(path, f"a file of another user (uid {st.st_uid}) in {_where(here)}; not replaced")


def _existing(path: Path, name: str, dir_fd: int) -> os.stat_result | None:
    """What is at the final path (never followed): refused unless a regular file this run may replace."""
    try:
        st = os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        raise Refused(path, f"a symlink is there (owner uid {st.st_uid}); nothing is written through a link")
    if not stat.S_ISREG(st.st_mode):
        raise Refused(path, f"{kind_of(st.st_mode)}, not a regular file; nothing was written")
    _foreign_file(path, st, dir_fd)
    return st


def check(path: str | os.PathLike[str]) -> None:
    """Raise what :func:`write_bytes` would refuse ``path`` for, writing nothing (checked before the run)."""
    with _folder_of(path) as (full, name, fd):
        _existing(full, name, fd)


def check_foreign(path: str | os.PathLike[str], *, folder: bool = False) -> None:
    """:class:`Refused` for a path another plugin writes (``--html``, ``--junitxml``; ``folder``:
    ``--alluredir``) that another user could have aimed: a planted symlink on the way or at the end,
    or their file in a folder others can write. A path not there yet is fine."""
    full = Path(os.path.abspath(path))
    try:
        fd = open_folder(full if folder else full.parent)
    except Refused:
        raise
    except OSError:  # not there (yet): nothing planted on the way that exists
        return
    try:
        st = None if folder else os.lstat(full.name, dir_fd=fd)
        here = os.fstat(fd)
        if st is not None and stat.S_ISLNK(st.st_mode) and not _trusted_link(st, here):
            raise Refused(full, f"a symlink of another user (uid {st.st_uid}) is there, in {_where(here)}")
        if st is not None and stat.S_ISREG(st.st_mode):
            _foreign_file(full, st, fd)
    except FileNotFoundError:
        return
    finally:
        os.close(fd)


def write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` by the rules of the module docstring."""
    with _folder_of(path) as (full, name, fd):
        old = _existing(full, name, fd)
        tmp, out = _create_temp(name, fd)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(out, view) :]
                _take_over(out, old)
            finally:
                os.close(out)
            os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=fd)
            raise


def open_stream(path: str | os.PathLike[str]) -> int:
    """A descriptor to append records to ``path`` as they come (the watcher's timeline), made by the
    rules of :func:`write_bytes`: an empty file created beside the path and renamed over it, so each
    record written after is on disk at once and a killed writer leaves every whole line it wrote."""
    with _folder_of(path) as (full, name, fd):
        old = _existing(full, name, fd)
        tmp, out = _create_temp(name, fd)
        try:
            _take_over(out, old)
            os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
        except BaseException:
            os.close(out)
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=fd)
            raise
        return out


def _create_temp(name: str, dir_fd: int) -> tuple[str, int]:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(100):
        tmp = f".{name[:200]}-{secrets.token_hex(6)}"
        with contextlib.suppress(FileExistsError):
            return tmp, os.open(tmp, flags, 0o600, dir_fd=dir_fd)
    raise OSError(errno.EEXIST, "no free temporary name", name)


def _take_over(fd: int, old: os.stat_result | None) -> None:
    """The replaced file's owner and permission bits (never set-id bits), or what
    ``open()`` would have made (a CI uploader running as another user reads it)."""
    if old is None:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        return
    if (old.st_uid, old.st_gid) != (os.geteuid(), os.getegid()):
        with contextlib.suppress(PermissionError):  # not root: the file becomes ours, as any rewrite's
            os.fchown(fd, old.st_uid, old.st_gid)
    os.fchmod(fd, stat.S_IMODE(old.st_mode) & 0o777)


def discard_stale(path: str | os.PathLike[str]) -> str:
    """Remove the earlier run's file a failed write left at ``path`` (CI would read its verdict as
    this run's) and say so for a ``cannot write`` line; only a regular file of ours goes."""
    with contextlib.ExitStack() as stack:
        try:
            _, name, fd = stack.enter_context(_folder_of(path))
        except OSError:
            return ""  # no folder to hold a stale file
        try:
            st = os.lstat(name, dir_fd=fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                return "; what is there is not this run's and was left as it is"
            os.unlink(name, dir_fd=fd)
            return "; the file there from an earlier run was removed"
        except FileNotFoundError:
            return ""
        except OSError as exc:
            return f"; the file there is from an earlier run and could not be removed ({exc.strerror or exc})"


def read_existing(path: str | os.PathLike[str], limit: int) -> bytes | None:
    """The file at ``path`` (at most ``limit`` bytes), ``None`` when there is none;
    by the write's rules, so a link to a root-only file is never read."""
    with _folder_of(path) as (full, name, fd):
        if _existing(full, name, fd) is None:
            return None
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
        src = os.open(name, flags, dir_fd=fd)
        try:
            if not stat.S_ISREG(os.fstat(src).st_mode):
                raise Refused(full, "not a regular file; nothing was read")
            chunks: list[bytes] = []
            while limit > 0 and (chunk := os.read(src, min(limit, 65536))):
                chunks.append(chunk)
                limit -= len(chunk)
            return b"".join(chunks)
        finally:
            os.close(src)
