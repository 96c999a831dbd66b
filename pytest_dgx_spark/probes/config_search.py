"""The search for G10's configs under the rootdir: breadth first, bounded in depth, files, entries,
time and per folder; passing over what holds no job config (hidden and VCS folders, venvs, caches,
build output, test suites, run records, test reports, data folders, this package) and saying what
it passed over (:class:`Scan`), then each file found read (:func:`read_found`).
"""

from __future__ import annotations

import os
import re
import time
from collections import Counter, deque
from dataclasses import field
from itertools import islice
from pathlib import Path

from pytest_dgx_spark.datadef import define
from pytest_dgx_spark.probes.config_files import CONFIG_SUFFIXES, read_config
from pytest_dgx_spark.probes.config_values import MAX_BYTES, Source

SEARCH_DEPTH, SEARCH_FILES, SEARCH_ENTRIES = 5, 200, 20_000
#: one folder's budget inside the search's (a 30,000-file ``data/`` hid ``zz_jobs/train.yaml``):
#: entries looked at, config files taken, names listed to judge it
FOLDER_ENTRIES, FOLDER_FILES, FOLDER_LIST = 2_000, 100, 100_000
#: a folder of more files than this, most (DATA_SHARE) of one suffix, holds data
DATA_FOLDER_FILES, DATA_SHARE = 500, 0.8
PLACES = 5  # places named in a note, at most

#: build output and envs; test suites (their fixtures are not the job's); records of past runs
SKIP_DIRS = {"node_modules", "__pycache__", "site-packages", "dist-packages", "build", "dist", "venv",
             "tests", "test", "wandb", "mlruns", "outputs", "multirun", "lightning_logs", "checkpoints"}
#: a test run's own records: Allure results and report folders, allure-pytest's files anywhere
REPORT_DIRS = {"allure-results", "allure-report"}
REPORT_FILE = re.compile(r".+-(?:result|container)\.json|.+-attachment(?:\.[\w-]+)?", re.IGNORECASE)
#: this package's own folder (its data files are JSON): run from a checkout of pytest-dgx-spark, it lies
#: under the rootdir, and G10 read ``pytest_dgx_spark/data/known_bad.json`` as a config (issue 34 item 5)
PACKAGE_DIR = os.path.realpath(Path(__file__).resolve().parent.parent)
SKIP_FILES = {"package.json", "package-lock.json", "tsconfig.json", "tokenizer.json", "tokenizer_config.json",
              "vocab.json", "special_tokens_map.json", "generation_config.json"}  # fmt: skip



@define
class Scan:
    """What :func:`find_configs` found, and what it passed over (``*_places``: the first few, relative)."""

    root: str
    files: list[str] = field(default_factory=list)
    entries: int = 0
    unreadable: int = 0
    limit: str | None = None
    skipped_reports: int = 0  # test-report folders and files (:func:`report_output`)
    report_places: list[str] = field(default_factory=list)
    data_places: list[str] = field(default_factory=list)  # ``data/ (30000 files, 30000 .jpg)``
    data_dirs: int = 0
    data_configs: int = 0  # data folders of config-suffixed files, not read
    partial_places: list[str] = field(default_factory=list)  # folders cut at their own budget
    partial_dirs: int = 0
    links_out: int = 0  # symlinked files leading out of the root: never read
    link_places: list[str] = field(default_factory=list)

    def place(self, path: str, folder: bool = True) -> str:
        rel = os.path.relpath(path, self.root).replace(os.sep, "/")
        if not folder:
            return rel
        rel = rel.rstrip("/.") + "/"
        return "./" if rel == "/" else rel

    def note(self, places: list[str], text: str) -> None:
        if text not in places and len(places) < PLACES:
            places.append(text)

    def incomplete(self) -> str | None:
        """Why the search did not see every config under the root, or ``None``."""
        why = [self.limit] if self.limit else []
        if self.partial_dirs:
            why.append(f"{self.partial_dirs} folder(s) only partly read: {', '.join(self.partial_places)}")
        if self.data_configs:
            why.append(f"{self.data_configs} data folder(s) of config-like files not read")
        return "; ".join(why) or None


def report_output(path: str, is_dir: bool) -> bool:
    """A test run's own output: an Allure folder, pytest-html's ``assets`` (its ``style.css`` and
    the tests' extras), an allure-pytest file; hundreds of them filled the file cap (issue 11)."""
    name = os.path.basename(path)
    if is_dir:
        return name in REPORT_DIRS or (name == "assets" and os.path.isfile(os.path.join(path, "style.css")))
    return REPORT_FILE.fullmatch(name) is not None


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def data_folder(entries: list[os.DirEntry[str]]) -> tuple[str, str] | None:
    """``(what it holds, its main suffix)`` of a folder of data (a dataset, shards): more than
    :data:`DATA_FOLDER_FILES` files, :data:`DATA_SHARE` of one suffix; else ``None``."""
    files = [e for e in entries if not _is_dir(e)]
    if len(files) <= DATA_FOLDER_FILES:
        return None
    suffix, count = Counter(os.path.splitext(e.name)[1].lower() for e in files).most_common(1)[0]
    if count < DATA_SHARE * len(files):
        return None
    return f"{len(files)} files, {count} {suffix or 'without a suffix'}", suffix


@define
class _Search:
    scan: Scan
    real_root: str
    max_depth: int
    max_files: int
    max_entries: int
    deadline: float | None
    folder_entries: int
    folder_files: int

    def listing(self, folder: str) -> tuple[list[os.DirEntry[str]], bool] | None:
        """The folder's entries by name (at most :data:`FOLDER_LIST`) and whether there were more."""
        try:
            with os.scandir(folder) as it:
                entries = list(islice(it, FOLDER_LIST + 1))
        except OSError:
            self.scan.unreadable += 1
            return None
        return sorted(entries[:FOLDER_LIST], key=lambda e: e.name), len(entries) > FOLDER_LIST

    def leaves_root(self, entry: os.DirEntry[str]) -> bool:
        """A symlinked file leading outside the root (``job.yaml -> /root/secret.yaml``)."""
        try:
            if not entry.is_symlink():
                return False
        except OSError:
            return True
        return os.path.commonpath([self.real_root, os.path.realpath(entry.path)]) != self.real_root

    def skipped_dir(self, entry: os.DirEntry[str], depth: int) -> bool:
        name = entry.name
        venv = os.path.join(entry.path, "pyvenv.cfg")
        return (name.startswith(".") or name in SKIP_DIRS or name.endswith(".egg-info")
                or depth + 1 > self.max_depth or os.path.exists(venv)
                or (name == os.path.basename(PACKAGE_DIR) and os.path.realpath(entry.path) == PACKAGE_DIR))  # fmt: skip

    def folder(self, folder: str, depth: int, entries: list[os.DirEntry[str]], listed_more: bool, queue: deque[tuple[str, int]]) -> bool:
        """One folder's entries, within its budget; True when the whole search stops."""
        scan, taken, more = self.scan, 0, listed_more or len(entries) > self.folder_entries
        for entry in entries[: self.folder_entries]:
            if self.spent():
                return True
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                scan.unreadable += 1
                continue
            if not self.config(entry, folder, depth, is_dir, queue):
                continue
            if taken >= self.folder_files:  # the folder's share taken; its subfolders still searched
                more = True
                continue
            scan.files.append(entry.path)
            taken += 1
            if len(scan.files) >= self.max_files:
                scan.limit = f"stopped at {self.max_files} config files"
                return True
        if more:
            scan.partial_dirs += 1
            scan.note(scan.partial_places, f"{scan.place(folder)} ({len(entries)}{'+' if listed_more else ''} entries)")
        return False

    def spent(self) -> bool:
        """One more entry looked at: true (and the search's ``limit`` said) when that is past its
        budget of entries or time."""
        scan = self.scan
        scan.entries += 1
        if scan.entries > self.max_entries:
            scan.limit = f"stopped after {self.max_entries} entries"
            return True
        if self.deadline is not None and time.monotonic() > self.deadline:
            scan.limit = "stopped at the time limit"
            return True
        return False

    def config(self, entry: os.DirEntry[str], folder: str, depth: int, is_dir: bool,
               queue: deque[tuple[str, int]]) -> bool:  # fmt: skip
        """Whether ``entry`` is a config file to read; a test report, a folder to search, a link
        leading out of the root is counted or queued here."""
        scan = self.scan
        if report_output(entry.path, is_dir):
            scan.skipped_reports += 1
            scan.note(scan.report_places, scan.place(entry.path if is_dir else folder))
        elif is_dir:
            if not self.skipped_dir(entry, depth):
                queue.append((entry.path, depth + 1))
        elif not _config_name(entry.name):
            pass
        elif self.leaves_root(entry):
            scan.links_out += 1
            scan.note(scan.link_places, scan.place(entry.path, folder=False))
        else:
            return True
        return False


def _config_name(name: str) -> bool:
    """A file name a config may have: not hidden, not a known non-config, a config suffix."""
    if name.startswith(".") or name in SKIP_FILES:
        return False
    return os.path.splitext(name)[1].lower() in CONFIG_SUFFIXES


def find_configs(
    root: Path, *, max_depth: int = SEARCH_DEPTH, max_files: int = SEARCH_FILES,
    max_entries: int = SEARCH_ENTRIES, deadline: float | None = None, folder_entries: int = FOLDER_ENTRIES,
    folder_files: int = FOLDER_FILES,
) -> Scan:
    """YAML/JSON/TOML files under ``root``, breadth first, skipping hidden and VCS folders, venvs
    (``pyvenv.cfg``), caches, build output, test suites, run records, test reports, data
    folders and this package's own folder, each folder within its own budget. Symlinked folders are not followed, symlinked
    files only when they stay under ``root``. :meth:`Scan.incomplete` says what was not seen."""
    scan = Scan(root=str(root))
    search = _Search(scan, os.path.realpath(root), max_depth, max_files, max_entries, deadline, folder_entries, folder_files)
    queue: deque[tuple[str, int]] = deque([(str(root), 0)])
    while queue:
        folder, depth = queue.popleft()
        listed = search.listing(folder)
        if listed is None:
            continue
        data = data_folder(listed[0]) if depth > 0 else None
        if data is not None:
            scan.data_dirs += 1
            scan.data_configs += data[1] in CONFIG_SUFFIXES
            if len(scan.data_places) < PLACES:
                scan.data_places.append(f"{scan.place(folder)} ({data[0]})")
        elif search.folder(folder, depth, *listed, queue):
            break
    return scan


def read_found(root: Path, scan: Scan, *, deadline: float | None = None, max_bytes: int = MAX_BYTES) -> tuple[list[Source], list[str]]:
    """Parse the files :func:`find_configs` listed; ``(sources, notes)``."""
    sources: list[Source] = []
    notes: list[str] = []
    too_big = 0
    for index, path in enumerate(scan.files):
        if deadline is not None and time.monotonic() > deadline:
            notes.append(f"time limit: {len(scan.files) - index} of {len(scan.files)} found configs not read")
            break
        try:
            name = os.path.relpath(path, root)
        except ValueError:
            name = path
        src = read_config(Path(path), name, "found", max_bytes=max_bytes)
        if src.error and "limit for a config" in src.error:
            too_big += 1
        else:
            sources.append(src)
    if too_big:
        notes.append(f"{too_big} found file(s) over {max_bytes / 1e6:.1f} MB not read (data, not configs)")
    return sources, notes + _passed_over(scan)


def _passed_over(scan: Scan) -> list[str]:
    """What the search passed over and why: test reports, data folders, links out of the project."""
    notes = []
    if scan.skipped_reports:
        notes.append(f"test reports not read as configs (Allure, pytest-html): {', '.join(scan.report_places)}")
    if scan.data_dirs:
        notes.append(f"data folders not searched (they hold data, not configs): {', '.join(scan.data_places)}")
    if scan.links_out:
        notes.append(f"{scan.links_out} symlink(s) leading out of the project not followed: {', '.join(scan.link_places)}")
    return notes
