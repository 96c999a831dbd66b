#!/usr/bin/env python3
"""Issue 10's speed targets, measured side by side in one run, with a table of met / NOT met.

Every figure is a median of interleaved runs (each round runs every command
once, the order rotating, so drift hits every command alike), and every
ratio is against a baseline measured in the same run:

1. ``spark-preflight`` (ten checks, quick tier) vs the seed's ``preflight.sh``
   (five checks; ``--seed PATH``, run with ``bash`` where it lies) —
   target ≤ 0.7× on a warm machine, ≤ 1.0× on one started fresh for the run
   (say ``--fresh``). ``--cold`` measures the fresh case repeatably: as root,
   the page cache is dropped before every timed run of either command, so
   each pays what a freshly started machine makes the first run pay (torch's
   libraries read from disk), alternating, medians of ``--runs``;
2. ``pytest --spark-preflight`` vs ``spark-preflight`` — within 0.3 s; also
   with the plugin loaded early (``pytest -p dgx_spark --spark-preflight``),
   which starts the torch child before pytest loads its other plugins;
3. ``pytest --spark-preflight`` beyond an empty pytest run (pytest's own
   start) — < 1 s on a machine without a GPU (CPU torch installed or not);
4. a plain one-test ``pytest``, plugin installed vs ``-p no:dgx_spark``, with
   bytecode written and with ``PYTHONDONTWRITEBYTECODE=1`` (common in
   container images: pytest then re-rewrites the plugin's modules on every
   run) — ≤ 1.02× each, judged on both the ratio of the medians and the
   median of back-to-back pairs' ratios (a pair shares the load of the
   moment; wall and CPU time both shown).
   ``--plain-alone-runs N`` adds the same with the environment's other pytest
   plugins off, whose imports and threads make a plain run on a GPU image
   vary by ±15 %.
5. ``--against REF`` (a git ref of this repository, or a folder holding such
   a tree, as ``git archive REF`` unpacks it): this checkout against
   that tree, installed the same way, in the same run. Both trees'
   ``spark-preflight`` and ``pytest --spark-preflight`` join the rotating
   rounds, then ``--against-runs`` back-to-back pairs of each: the median of
   the pairs' differences and ratios, and in how many pairs this tree was
   faster — "no worse than before on the same machine in one run" (issue 31).
   With ``--instructions`` (valgrind on PATH), also each tree's instruction
   count of a plain one-test run, of the same with ``-p no:dgx_spark`` and of
   ``pytest --spark-preflight`` (the pytest process only, not its probe
   children), under ``valgrind --tool=cachegrind``: deterministic where a
   2-core machine's wall times vary by more than the few ms compared (a
   plain run's count repeats to the instruction; a preflight run's within
   ~0.01 %).

The plugin is measured as users get it: installed from a wheel build of this
checkout into a scratch folder put first on ``PYTHONPATH`` (an editable
install hides the assertion-rewrite cost: pytest cannot find its package to
mark it). ``--install env`` measures the environment as it is instead.
Every tool runs with this interpreter (its folder first on PATH, so the
seed's ``python3`` is this ``python``), in an empty folder.

Usage:
  python benchmarks/bench_speed.py [--seed PATH] [--runs 7] [--plain-runs 21]
      [--plain-alone-runs N] [--offline] [--fresh] [--cold] [--install wheel|env] [--thermal-seconds S] [--timeout S]
      [--against REF] [--against-runs 21] [--instructions]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: pytest without the user's cache, plugin order or randomisation: the same work every run
PYTEST = ("-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly")


class Command:
    """One command line, the environment it runs in, and its timings."""

    def __init__(
        self, name: str, argv: Sequence[str], env: dict[str, str], cwd: Path, ok: tuple[int, ...] = (0,)
    ) -> None:
        self.name, self.argv, self.env, self.cwd, self.ok = name, list(argv), env, cwd, ok
        self.times: list[float] = []
        self.cpu: list[float] = []  # user + system seconds of the command and its children

    def run(self, *, record: bool = True) -> None:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        proc = subprocess.run(
            self.argv, cwd=self.cwd, env=self.env, capture_output=True, text=True, timeout=900
        )
        elapsed = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        if proc.returncode not in self.ok:
            raise SystemExit(
                f"bench_speed: {self.name}: {' '.join(self.argv)} exited {proc.returncode}:\n"
                f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
            )
        if record:
            self.times.append(elapsed)
            self.cpu.append(cpu)

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def cpu_median(self) -> float:
        return statistics.median(self.cpu)

    def row(self) -> str:
        sd = statistics.pstdev(self.times) if len(self.times) > 1 else 0.0
        return (
            f"  {self.name:<52} median {self.median * 1000:8.1f} ms  min {min(self.times) * 1000:8.1f}"
            f"  sd {sd * 1000:6.1f}  cpu {self.cpu_median * 1000:8.1f} ms  n={len(self.times)}"
        )


def drop_page_cache() -> None:
    """``sync; echo 3 > /proc/sys/vm/drop_caches`` (root): the next command
    reads every file it opens from disk, as on a machine just started."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as fh:
        fh.write("3\n")


def cold_rounds(commands: Sequence[Command], runs: int) -> None:
    """``runs`` alternating rounds, the page cache dropped before every run."""
    for i in range(runs):
        for cmd in commands if i % 2 == 0 else list(reversed(commands)):
            drop_page_cache()
            cmd.run()


def rounds(commands: Sequence[Command], runs: int) -> None:
    """One untimed warm-up each (page cache, .pyc files), then ``runs`` rotating rounds."""
    for cmd in commands:
        cmd.run(record=False)
    for i in range(runs):
        k = i % len(commands)
        for cmd in [*commands[k:], *commands[:k]]:
            cmd.run()


def paired(on: Command, off: Command, runs: int) -> tuple[float, float]:
    """Run ``on`` and ``off`` back to back ``runs`` times (the order alternating)
    and return the medians of the per-pair ratios, wall and CPU time: a pair
    shares the machine's load of the moment, which on a shared machine moves
    far more between rounds than the 2% this measures."""
    on.run(record=False)
    off.run(record=False)
    for i in range(runs):
        for cmd in (on, off) if i % 2 == 0 else (off, on):
            cmd.run()
    wall = statistics.median(a / b for a, b in zip(on.times, off.times, strict=True))
    cpu = statistics.median(a / b for a, b in zip(on.cpu, off.cpu, strict=True))
    return wall, cpu


LOADERS = """
import json, sys

def pytest_unconfigure(config):
    mods = {m: sys.modules[m] for m in sys.modules if m.split(".")[0] == "pytest_dgx_spark"}
    print("SPARK-LOADERS " + json.dumps({m: [type(v.__loader__).__name__, v.__file__] for m, v in mods.items()}))
"""


def rewrite_cost(env: dict[str, str], folder: Path) -> tuple[list[str], float]:
    """The plugin modules a plain run loads through pytest's assertion rewriter,
    and what rewriting them costs (best of 20): under PYTHONDONTWRITEBYTECODE
    pytest pays it on every run. Steady where the timed runs are not."""
    import ast

    try:
        from _pytest.assertion.rewrite import rewrite_asserts
    except ImportError:  # pragma: no cover - another pytest: parse and compile only
        rewrite_asserts = None  # type: ignore[assignment]
    folder.mkdir()
    (folder / "conftest.py").write_text(LOADERS)
    (folder / "test_one.py").write_text("def test_one():\n    pass\n")
    proc = subprocess.run(
        [sys.executable, *PYTEST, "-s", "-p", "no:xdist"], cwd=folder, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("SPARK-LOADERS ")), None)
    if line is None:
        return [], 0.0
    import json

    rewritten = {
        m: f for m, (loader, f) in json.loads(line[14:]).items() if loader == "AssertionRewritingHook"
    }
    total = 0.0
    for path in rewritten.values():
        source = Path(path).read_bytes()
        best = float("inf")
        for _ in range(20):
            start = time.perf_counter()
            tree = ast.parse(source, filename=path)
            if rewrite_asserts is not None:
                rewrite_asserts(tree, source, path, None)
            compile(tree, path, "exec", dont_inherit=True)
            best = min(best, time.perf_counter() - start)
        total += best
    return sorted(rewritten), total


def wheel_install(dest: Path, root: Path = REPO) -> str | None:
    """Install the checkout at ``root`` as a wheel would be, into ``dest``; None, or why not.

    Built from a copy of the package's files, so that setuptools' build/ and
    egg-info folders (whose stale files a later build would pick up) are not
    left in the checkout."""
    src = dest.parent / f"src-{dest.name}"
    src.mkdir()
    for item in root.iterdir():
        if item.name == "pytest_dgx_spark":
            shutil.copytree(item, src / item.name, ignore=shutil.ignore_patterns("__pycache__"))
        elif item.is_file() and (
            item.suffix in (".toml", ".cfg", ".in", ".md") or item.name.startswith("LICENSE")
        ):
            shutil.copy2(item, src / item.name)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
         "--target", str(dest), str(src)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if proc.returncode != 0 or not (dest / "pytest_dgx_spark" / "plugin.py").is_file():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return f"pip install --target failed ({tail[0]})"
    return None


def tree_of(ref: str, dest: Path) -> str | None:
    """The files of this repository at git ref ``ref``, unpacked into ``dest``; None, or why not."""
    dest.mkdir()
    try:
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", "--format=tar", ref], capture_output=True, timeout=120
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"git archive {ref}: {exc}"
    if archive.returncode != 0:
        return f"git archive {ref}: {archive.stderr.decode(errors='replace').strip()[-200:]}"
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, filter="data")
        else:  # pragma: no cover - Python without the extraction filters
            tar.extractall(dest)  # this repository's own archive
    return None


#: cachegrind's total: ``==123== I   refs:      1,295,861,349``
IREFS = re.compile(r"I\s+refs:\s+([\d,]+)")


def instructions(cmd: Command, timeout: float = 900.0) -> int | None:
    """The instructions ``cmd`` executes under ``valgrind --tool=cachegrind`` (its own process, not
    its children), the second of two runs (the first writes what a warm run reads); None if it
    failed. Hash seeds are fixed: set and dict order then repeat from run to run."""
    argv = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null", *cmd.argv]
    found = None
    for _ in range(2):
        try:
            proc = subprocess.run(
                argv, env={**cmd.env, "PYTHONHASHSEED": "0"}, cwd=cmd.cwd, capture_output=True, text=True,
                timeout=timeout,
            )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired):
            return None
        match = IREFS.search(proc.stderr)
        found = int(match.group(1).replace(",", "")) if match and proc.returncode in cmd.ok else None
    return found


def instruction_rows(pairs: Sequence[tuple[Command, Command]], ref: str) -> list[tuple[str, str, str, str]]:
    """One row per command: this tree's instruction count against ``ref``'s."""
    rows = []
    for new, old in pairs:
        a, b = instructions(new), instructions(old)
        if a is None or b is None:
            rows.append((f"{new.name}: instructions, this tree vs {ref}", "not measured (valgrind failed)", "—", "—"))
            continue
        rows.append((
            f"{new.name}: instructions, this tree vs {ref}",
            f"{a / 1e6:,.1f}M / {b / 1e6:,.1f}M = {a / b:.4f}× ({(a - b) / 1e6:+,.1f}M)",
            "≤ 1.00×", verdict(a <= b),
        ))  # fmt: skip
    return rows


def pair_rows(new: Command, old: Command, ratio: float, ref: str) -> tuple[str, str, str, str]:
    """One command of this tree against the same of ``ref``, from back-to-back pairs (``ratio``:
    :func:`paired`'s median of the pairs' wall-time ratios)."""
    diffs = [a - b for a, b in zip(new.times, old.times, strict=True)]
    faster = sum(d < 0 for d in diffs)
    return (
        f"{new.name.removesuffix(', paired')}: this tree vs {ref}",
        f"{statistics.median(diffs) * 1000:+.0f} ms, {ratio:.3f}×; faster in {faster} of {len(diffs)}",
        "≤ 1.00× (paired)", verdict(ratio <= 1.0),
    )


def other_plugins() -> list[str]:
    """The names of this environment's pytest11 entry points other than ours (for ``-p no:NAME``)."""
    from importlib.metadata import entry_points

    return sorted({ep.name for ep in entry_points(group="pytest11") if ep.name != "dgx_spark"})


def plain_rows(cmds: Sequence[Command], ratios: Sequence[tuple[float, float]], scope: str) -> list[tuple[str, ...]]:
    """The plain-run rows: medians, their ratio, and the paired ratio (wall and CPU)."""
    rows: list[tuple[str, ...]] = []
    for (on, off), label, (wall, cpu) in zip(
        (cmds[0:2], cmds[2:4]), ("bytecode written", "PYTHONDONTWRITEBYTECODE=1"), ratios, strict=False
    ):  # no ratios (and no rows) when the plain runs were not measured
        by_median = on.median / off.median
        rows.append((
            f"plain one-test pytest, plugin vs -p no:dgx_spark ({label}{scope})",
            f"{on.median * 1000:.0f} / {off.median * 1000:.0f} ms = {by_median:.3f}×; paired {wall:.3f}×",
            "≤ 1.02×", verdict(max(wall, by_median) <= 1.02),
        ))  # fmt: skip
        rows.append((
            "  the same in CPU time (user + system)",
            f"{on.cpu_median * 1000:.0f} / {off.cpu_median * 1000:.0f} ms = {on.cpu_median / off.cpu_median:.3f}×;"
            f" paired {cpu:.3f}×", "≤ 1.02×", verdict(max(cpu, on.cpu_median / off.cpu_median) <= 1.02),
        ))  # fmt: skip
    return rows


def has_gpu() -> bool:
    """An NVIDIA device node: the "< 1 s without a GPU" target does not apply."""
    return any(Path(p).exists() for p in ("/dev/nvidiactl", "/dev/nvidia0"))


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seed", type=Path, default=None, help="the seed skill's preflight.sh (baseline of 1.)"
    )
    parser.add_argument("--runs", type=int, default=7, help="rounds of the preflight commands (≥ 5)")
    parser.add_argument(
        "--plain-runs", type=int, default=21, help="pairs of plain pytest runs per mode (≥ 5)"
    )
    parser.add_argument(
        "--plain-alone-runs", type=int, default=0,
        help="pairs of plain runs with the other pytest plugins off, per mode (0: none)",
    )  # fmt: skip
    parser.add_argument("--offline", action="store_true", help="spark-preflight --offline (G8 asks no one)")
    parser.add_argument(
        "--fresh", action="store_true", help="the machine was started for this run (1.: ≤ 1.0×)"
    )
    parser.add_argument(
        "--cold", action="store_true",
        help="as root: also time spark-preflight and the seed with the page cache dropped before each run",
    )  # fmt: skip
    parser.add_argument("--install", choices=("wheel", "env"), default="wheel", help="see the docstring")
    parser.add_argument(
        "--thermal-seconds", type=float, default=None, help="G4's sample (default: the tool's)"
    )
    parser.add_argument("--timeout", type=float, default=None, help="--timeout / --spark-timeout")
    parser.add_argument(
        "--against", metavar="REF", default=None, help="also this git ref's tree, or a folder holding one (5.)"
    )
    parser.add_argument("--against-runs", type=int, default=21, help="pairs per command against REF (≥ 5)")
    parser.add_argument(
        "--instructions", action="store_true",
        help="with --against: also both trees' instruction counts under valgrind (5.)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.runs < 5 or args.plain_runs < 5 or args.against_runs < 5:
        parser.error("medians of at least 5 runs: --runs, --plain-runs and --against-runs must be ≥ 5")
    if args.instructions and (args.against is None or shutil.which("valgrind") is None):
        parser.error("--instructions needs --against REF and valgrind on PATH")
    if args.against is not None and args.install != "wheel":
        parser.error("--against compares two wheel installs: leave --install at wheel")
    if args.seed is not None and not args.seed.is_file():
        parser.error(f"--seed {args.seed}: no such file")
    if args.cold and (args.seed is None or os.geteuid() != 0):
        parser.error("--cold needs --seed and root (it drops the page cache)")

    scratch = Path(tempfile.mkdtemp(prefix="bench-speed-"))
    try:
        return measure(args, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def measure(args: argparse.Namespace, scratch: Path) -> int:
    py = sys.executable
    env = dict(os.environ)
    for var in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "SPARK_PREFLIGHT_HOST_ROOT", "PYTHONDONTWRITEBYTECODE"):
        env.pop(var, None)
    env["PATH"] = os.pathsep.join([str(Path(py).parent), env.get("PATH", os.defpath)])
    install = "the environment as it is"
    if args.install == "wheel":
        why = wheel_install(scratch / "site")
        if why is None:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(scratch / "site"), env.get("PYTHONPATH")]))
            install = "a wheel build of this checkout (pip install --target, first on PYTHONPATH)"
        else:
            install = f"the environment as it is: {why}"
    against_env = None
    if args.against is not None:
        if not (scratch / "site").is_dir() or "PYTHONPATH" not in env:
            raise SystemExit(f"bench_speed: --against {args.against}: this checkout did not install ({install})")
        if Path(args.against).is_dir():  # a tree unpacked already (a machine without the repository's history)
            why = wheel_install(scratch / "site-ref", Path(args.against).resolve())
        else:
            why = tree_of(args.against, scratch / "ref") or wheel_install(scratch / "site-ref", scratch / "ref")
        if why is not None:
            raise SystemExit(f"bench_speed: --against {args.against}: {why}")
        ref_path = env["PYTHONPATH"].replace(str(scratch / "site"), str(scratch / "site-ref"), 1)
        against_env = dict(env, PYTHONPATH=ref_path)
        install += f"; against {args.against}, the same way"
    nobyte = {**env, "PYTHONDONTWRITEBYTECODE": "1"}
    if "PYTHONPATH" in env and (scratch / "site").is_dir():
        # its own copy, made before any run: the runs with bytecode write pytest's
        # rewritten .pyc files, which a PYTHONDONTWRITEBYTECODE image never has
        shutil.copytree(scratch / "site", scratch / "site-nobyte")
        nobyte["PYTHONPATH"] = env["PYTHONPATH"].replace(
            str(scratch / "site"), str(scratch / "site-nobyte"), 1
        )
    empty, project = scratch / "empty", scratch / "project"
    empty.mkdir()
    project.mkdir()
    (project / "test_one.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")

    extra = ["--offline"] if args.offline else []
    if args.thermal_seconds is not None:
        extra += ["--thermal-seconds", str(args.thermal_seconds)]
    if args.timeout is not None:
        extra += ["--timeout", str(args.timeout)]
    cli = Command("spark-preflight", [py, "-m", "pytest_dgx_spark.cli", *extra], env, empty, ok=(0, 1))
    plug = Command(
        "pytest --spark-preflight",
        [py, *PYTEST, "--spark-preflight", *(f"--spark-{a[2:]}" if a.startswith("--") else a for a in extra)],
        env, empty, ok=(0, 1),
    )  # fmt: skip
    # the same with the plugin loaded early (pytest's -p loads it before the
    # entry points of every other plugin: the torch child starts sooner)
    plug_early = Command(
        "pytest -p dgx_spark --spark-preflight",
        [py, *PYTEST, "-p", "dgx_spark", *plug.argv[len(PYTEST) + 1 :]],
        env, empty, ok=(0, 1),
    )  # fmt: skip
    bare = Command("pytest (empty folder, exit 5)", [py, *PYTEST], env, empty, ok=(5,))
    # the same two with every other pytest plugin of this environment turned
    # off: what is left of the gap is this plugin's own cost, not the image's
    # (on the H200 image hypothesis, jaxtyping, benchmark, cov, … make an
    # empty pytest run take seconds, about half of it after the last test)
    others = [a for name in other_plugins() if f"no:{name}" not in PYTEST for a in ("-p", f"no:{name}")]
    plug_alone = Command(
        "pytest --spark-preflight, other plugins off",
        [py, *PYTEST, *others, *plug.argv[len(PYTEST) + 1 :]], env, empty, ok=(0, 1),
    )  # fmt: skip
    bare_alone = Command("pytest (empty folder), other plugins off", [py, *PYTEST, *others], env, empty, ok=(5,))
    slow = [cli, plug, plug_early, bare, plug_alone, bare_alone]
    # REF's two commands join the rotating rounds; the pairs use their own copies of both trees' commands
    against: list[tuple[Command, Command]] = []
    if against_env is not None:
        slow += [Command(f"{c.name} ({args.against})", c.argv, against_env, c.cwd, c.ok) for c in (cli, plug)]
        against = [
            (Command(f"{c.name}, paired", c.argv, c.env, c.cwd, c.ok),
             Command(f"{c.name} ({args.against}), paired", c.argv, against_env, c.cwd, c.ok))
            for c in (cli, plug)
        ]  # fmt: skip
    seed = None
    if args.seed is not None:
        seed = Command("seed preflight.sh", ["bash", str(args.seed.resolve())], env, empty)
        slow.insert(1, seed)
    torch_ref = None
    if importlib.util.find_spec("torch") is not None:
        torch_ref = Command('python -c "import torch" (reference)', [py, "-c", "import torch"], env, empty)
        slow.append(torch_ref)
    plain = [
        Command("plain pytest, plugin installed", [py, *PYTEST], env, project),
        Command("plain pytest, -p no:dgx_spark", [py, *PYTEST, "-p", "no:dgx_spark"], env, project),
        Command("plain pytest, plugin, PYTHONDONTWRITEBYTECODE=1", [py, *PYTEST], nobyte, project),
        Command("plain pytest, -p no:dgx_spark, PYTHONDONTWRITEBYTECODE=1", [py, *PYTEST, "-p", "no:dgx_spark"],
                nobyte, project),
    ]  # fmt: skip
    # the same four with the image's other plugins off: their threads and imports
    # make a plain run vary by ±15 % on the H200 image, far more than the 2 % judged
    alone = [
        Command(f"{c.name}, other plugins off", [*c.argv[: len(PYTEST) + 1], *others, *c.argv[len(PYTEST) + 1 :]],
                c.env, c.cwd)
        for c in plain
    ] if args.plain_alone_runs else []  # fmt: skip

    uname = os.uname()
    print(f"bench_speed {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(
        f"machine: {uname.nodename}, {uname.machine}, {os.cpu_count()} cpus, GPU: {'yes' if has_gpu() else 'no'}"
    )
    print(f"python {sys.version.split()[0]} at {py}; torch importable: {torch_ref is not None}")
    print(f"plugin: {install}")
    print(f"seed: {args.seed if args.seed else 'not given (--seed PATH): target 1 not measured'}")

    cold = []
    if args.cold and seed is not None:
        cold = [Command(f"{c.name}, cold page cache", c.argv, c.env, c.cwd, c.ok) for c in (cli, seed)]
        cold_rounds(cold, args.runs)
    rewritten, rewrite_s = rewrite_cost(nobyte, scratch / "loaders")
    rounds(slow, args.runs)
    ratios = [paired(plain[0], plain[1], args.plain_runs), paired(plain[2], plain[3], args.plain_runs)]
    against_pairs = [(new, old, paired(new, old, args.against_runs)[0]) for new, old in against]
    alone_ratios = (
        [paired(alone[0], alone[1], args.plain_alone_runs), paired(alone[2], alone[3], args.plain_alone_runs)]
        if alone
        else []
    )
    print(
        f"\npreflight commands ({args.runs} rotating rounds) and plain runs ({args.plain_runs} alternating pairs):"
    )
    for cmd in [*cold, *slow, *plain, *alone]:
        print(cmd.row())
    if against:
        print(f"\nthis tree and {args.against} ({args.against_runs} back-to-back pairs each):")
        for new, old in against:
            print(new.row())
            print(old.row())

    rows: list[tuple[str, str, str, str]] = []
    if seed is not None:
        ratio = cli.median / seed.median
        limit = 1.0 if args.fresh else 0.7
        rows.append((
            f"spark-preflight vs seed preflight.sh ({'fresh machine' if args.fresh else 'warm'})",
            f"{cli.median:.2f} s / {seed.median:.2f} s = {ratio:.2f}×", f"≤ {limit:.1f}×", verdict(ratio <= limit),
        ))  # fmt: skip
    else:
        rows.append(("spark-preflight vs seed preflight.sh", "not measured (no --seed)", "≤ 0.7×", "—"))
    if cold:
        ratio = cold[0].median / cold[1].median
        rows.append((
            "spark-preflight vs seed, page cache dropped before each run (fresh machine)",
            f"{cold[0].median:.2f} s / {cold[1].median:.2f} s = {ratio:.2f}×", "≤ 1.0×", verdict(ratio <= 1.0),
        ))  # fmt: skip
    gap = plug.median - cli.median
    rows.append(
        (
            "pytest --spark-preflight vs spark-preflight",
            f"{gap:+.2f} s",
            "within 0.3 s",
            verdict(abs(gap) <= 0.3),
        )
    )
    early_gap = plug_early.median - cli.median
    rows.append((
        "  the same with the plugin loaded early (-p dgx_spark)", f"{early_gap:+.2f} s", "within 0.3 s",
        verdict(abs(early_gap) <= 0.3),
    ))  # fmt: skip
    alone_gap = plug_alone.median - cli.median
    rows.append((
        f"  the same with the {len(others) // 2} other pytest plugins off (this plugin's own cost)",
        f"{alone_gap:+.2f} s", "within 0.3 s", verdict(abs(alone_gap) <= 0.3),
    ))  # fmt: skip
    rows.append((
        "  for reference: an empty pytest run, with / without the other plugins",
        f"{bare.median:.2f} s / {bare_alone.median:.2f} s", "—", "info",
    ))  # fmt: skip
    beyond = plug.median - bare.median
    rows.append((
        "pytest --spark-preflight beyond pytest's start", f"{beyond:.2f} s", "< 1 s without a GPU",
        "n/a (GPU machine)" if has_gpu() else verdict(beyond < 1.0),
    ))  # fmt: skip
    rows += plain_rows(plain, ratios, "")
    rows += plain_rows(alone, alone_ratios, f", the {len(others) // 2} other plugins off")
    rows.append((
        "pytest's assertion rewrite of our modules, per plain run",
        f"{rewrite_s * 1000:.1f} ms ({', '.join(m.split('.')[-1] for m in rewritten) or 'none'})",
        "—", "info (PYTHONDONTWRITEBYTECODE=1)",
    ))  # fmt: skip
    rows += [pair_rows(new, old, ratio, args.against) for new, old, ratio in against_pairs]
    if args.instructions and against_env is not None:
        counted = [plain[0], plain[1], plug]
        rows += instruction_rows([(c, Command(c.name, c.argv, against_env, c.cwd, c.ok)) for c in counted], args.against)
    width = max(len(r[0]) for r in rows)
    print(f"\n{'target':<{width}}  {'measured':<34}  {'target':<20}  result")
    for name, measured, target, result in rows:
        print(f"{name:<{width}}  {measured:<34}  {target:<20}  {result}")
    if torch_ref is not None:
        print(
            f"\nfor reference: one bare `import torch` (start to exit) {torch_ref.median:.2f} s; "
            f"spark-preflight {cli.median - torch_ref.median:+.2f} s beyond it"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
