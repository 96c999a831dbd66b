"""Slurm recipes (issue 33 item 3): ``spark-slurm-prolog`` for ``Prolog=`` and ``spark-slurm-health``
for ``HealthCheckProgram=`` in ``slurm.conf`` (docs/SLURM.md).

Slurm runs both by path, with no arguments and an environment of its own (no ``PATH``; the prolog
gets ``SLURM_*``, the health check ``SLURMD_NODENAME``), so each runs the preflight as a child of
this interpreter (``python -m pytest_dgx_spark --json --offline``) under one time budget, with
extra flags read from a file (``/etc/spark-preflight/slurm.args``).

- The prolog calls no Slurm command: it exits 1 on a FAIL (slurmd drains the node, reason
  "Prolog error", and requeues the job held) and leaves a note in the state folder naming the
  finding, so the health check can take that drain over.
- The health check drains the node with a reason that starts ``spark-preflight:`` and names the
  failing check, its status and finding codes; it resumes a node only when the drain is its own (that
  prefix, or Slurm's "Prolog error" with the prolog's note beside it), as LBNL NHC does. A node an
  admin drained for another reason is left alone.
- A preflight that could not run (bad flags, a timeout, a crash) drains nothing unless
  ``--drain-on-error`` is given: a broken tool must not empty a healthy cluster.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import field
from pathlib import Path
from typing import Any

from pytest_dgx_spark import outfile
from pytest_dgx_spark.datadef import define

#: every drain reason this tool writes starts so; a drain without it is someone else's
PREFIX = "spark-preflight:"
#: the reason slurmd gives a node whose prolog failed (slurmctld: "Prolog error")
PROLOG_REASON = "Prolog error"
ARGS_FILE = "/etc/spark-preflight/slurm.args"
ARGS_FILE_ENV = "SPARK_PREFLIGHT_SLURM_ARGS"  # another args file
STATE_DIR = "/run/spark-preflight"
STATE_DIR_ENV = "SPARK_PREFLIGHT_SLURM_STATE"  # another folder for the prolog's note
#: the checks of the node itself that a job cannot fix: memory headroom and fragmentation (G3), GPU
#: faults, Xid and clocks (G4), GPU memory held by processes left behind (G6). The job's own Python
#: is not the prolog's (root's), so G1/G2/G7/G9 are for the job script or ``--python``.
PROLOG_CHECKS = "G3,G4,G6"
#: the health check also runs while jobs run: G6 would count the job itself, G3 its memory
HEALTH_CHECKS = "G4"
#: seconds the whole preflight may take (README: measured well under this; slurm.conf's
#: PrologEpilogTimeout should be longer)
BUDGET_S = 30.0
#: what Slurm's daemons pass as PATH: nothing, so nvidia-smi would not be found
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SCONTROL_TIMEOUT_S = 20.0
MAX_REASON = 200


@define
class Outcome:
    """What the preflight said: its exit code, the lines behind a blocked verdict, or why it
    could not run (``error``)."""

    code: int
    failing: list[str] = field(default_factory=list)
    error: str = ""

    @property
    def failed(self) -> bool:
        return self.code == 1 and not self.error

    def reason(self) -> str:
        """The drain reason: ``spark-preflight: G4 FAIL G4.xid-hardware; G6 FAIL …``."""
        text = f"{PREFIX} " + ("; ".join(self.failing) if self.failed else f"could not run: {self.error}")
        return text if len(text) <= MAX_REASON else text[: MAX_REASON - 1] + "…"


def _finding(result: dict[str, Any]) -> str:
    """``G4 FAIL G4.xid-hardware`` (the codes behind the status), or with no code yet the headline."""
    codes = [str(c) for c in result.get("codes") or [] if c]
    head = f"{result.get('id')} {result.get('status')}"
    if codes:
        return f"{head} {','.join(codes)}"
    return f"{head} ({str(result.get('headline') or result.get('summary') or '')[:80]})"


def run_preflight(flags: Sequence[str], budget: float, env: dict[str, str] | None = None) -> Outcome:
    """The preflight in a child (its own process group, killed at the budget): never hangs."""
    argv = [sys.executable, "-m", "pytest_dgx_spark", "--json", "--offline", "--color", "no", *flags]
    try:
        child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 start_new_session=True, env=env, cwd="/")  # fmt: skip
    except OSError as exc:
        return Outcome(2, error=f"cannot start {sys.executable}: {exc.strerror or exc}")
    try:
        out, err = child.communicate(timeout=budget)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except OSError:
            pass
        child.communicate()
        return Outcome(2, error=f"the preflight took more than {budget:g} s (--budget)")
    if child.returncode not in (0, 1):
        why = err.strip().splitlines()[-1:] or [f"exit {child.returncode}"]
        return Outcome(child.returncode, error=why[0][:150])
    try:
        block = json.loads(out)
        results = [r for r in block["results"] if isinstance(r, dict)]
    except (ValueError, KeyError, TypeError):
        return Outcome(2, error=f"unreadable output (exit {child.returncode})")
    if child.returncode == 0:
        return Outcome(0)
    failing = [_finding(r) for r in results if r.get("status") == "FAIL"]
    if not failing:  # blocked without a FAIL: a WARN under --strict
        failing = [_finding(r) for r in results if r.get("status") == "WARN"]
    return Outcome(1, failing=failing or ["blocked"])


def _parser(prog: str, what: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description=f"{what} Other flags go to spark-preflight; flags are also read from "
        f"${ARGS_FILE_ENV} (default {ARGS_FILE}), which slurm.conf cannot pass.",
    )
    parser.add_argument("--budget", type=float, default=BUDGET_S, metavar="SECONDS",
                        help=f"seconds the whole preflight may take (default {BUDGET_S:g})")  # fmt: skip
    parser.add_argument("--drain-on-error", action="store_true",
                        help="drain also when the preflight could not run (default: on a FAIL)")  # fmt: skip
    return parser


def _args(argv: Sequence[str] | None) -> list[str]:
    """The args file's flags, then the command line's (the later wins)."""
    path = Path(os.environ.get(ARGS_FILE_ENV) or ARGS_FILE)
    try:
        extra = shlex.split(path.read_text(), comments=True)
    except FileNotFoundError:
        extra = []
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        say(f"cannot read {path}: {exc}")
        extra = []
    return [*extra, *(sys.argv[1:] if argv is None else argv)]


def say(text: str) -> None:
    """One line on stderr (``spark-preflight: <text>``, escaped), which slurmd puts in its log."""
    from pytest_dgx_spark.cli import say_error  # the one writer to a terminal or log

    say_error(text)


def _shown(outcome: Outcome) -> str:
    """The drain reason without its prefix, after ``say``'s own ``spark-preflight:``."""
    return outcome.reason().removeprefix(PREFIX).strip()


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("PATH", DEFAULT_PATH)
    return env


def _state_file() -> Path:
    return Path(os.environ.get(STATE_DIR_ENV) or STATE_DIR) / "prolog-failed"


# --------------------------------------------------------------------------- the prolog


def prolog(argv: Sequence[str] | None = None) -> int:
    """``Prolog=``: exit 1 on a FAIL (slurmd drains the node and requeues the job held), else 0.
    Calls no Slurm command."""
    what = f"Slurm Prolog: the quick, non-intrusive preflight of this node ({PROLOG_CHECKS}); 1 on a FAIL."
    ns, flags = _parser("spark-slurm-prolog", what).parse_known_args(_args(argv))
    outcome = run_preflight(["--only", PROLOG_CHECKS, *flags], ns.budget, _env())
    note = _state_file()
    if outcome.code == 0:
        note.unlink(missing_ok=True)
        return 0
    say(f"prolog: {_shown(outcome)}")
    if outcome.failed or ns.drain_on_error:
        try:
            note.parent.mkdir(parents=True, exist_ok=True)
            outfile.write_bytes(note, (outcome.reason() + "\n").encode("utf-8"))  # no planted link followed
        except OSError as exc:
            say(f"cannot leave the note for the health check in {note}: {exc.strerror or exc}")
        return 1
    return 0


# --------------------------------------------------------------------------- the health check


def _scontrol(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=SCONTROL_TIMEOUT_S,
                          env=_env())  # fmt: skip


def node_state(node: str) -> tuple[str, str]:
    """``(State, Reason)`` of ``scontrol show node -o`` (the reason without its ``[user@time]``)."""
    shown = _scontrol("show", "node", node, "-o")
    if shown.returncode != 0:
        raise OSError(f"scontrol show node {node}: {(shown.stderr or shown.stdout).strip()[:150]}")
    state = re.search(r"\bState=(\S+)", shown.stdout)
    reason = re.search(r"\bReason=(.*?)(?: \[[^\]]*\])?\s*$", shown.stdout.strip())
    return (state.group(1) if state else ""), (reason.group(1).strip() if reason else "")


def decide(outcome: Outcome, state: str, reason: str, drain_on_error: bool, prolog_note: bool) -> str:
    """What the health check does: ``drain``, ``resume`` or ``leave`` (pure: tested on its own).

    Ours is a drain whose reason starts with :data:`PREFIX`, or Slurm's prolog drain when our prolog
    left its note; any other drain (an admin's) is left alone, whatever the preflight says."""
    drained = "DRAIN" in state.upper()  # IDLE+DRAIN, MIXED+DRAIN (draining), DRAINED
    ours = reason.startswith(PREFIX) or (reason.startswith(PROLOG_REASON) and prolog_note)
    bad = outcome.failed or (drain_on_error and outcome.code != 0)
    if drained and not ours:
        return "leave"
    if bad:
        return "leave" if drained and reason == outcome.reason() else "drain"
    if outcome.code == 0 and drained:
        return "resume"
    return "leave"


def health(argv: Sequence[str] | None = None) -> int:
    """``HealthCheckProgram=``: drain this node on a FAIL, resume it when its own drain is over."""
    what = (f"Slurm HealthCheckProgram: drain this node when a check of it ({HEALTH_CHECKS}) FAILs, "
            "resume it when the check passes again.")  # fmt: skip
    ns, flags = _parser("spark-slurm-health", what).parse_known_args(_args(argv))
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    outcome = run_preflight(["--only", HEALTH_CHECKS, *flags], ns.budget, _env())
    note = _state_file()
    try:
        state, reason = node_state(node)
        action = decide(outcome, state, reason, ns.drain_on_error, note.exists())
        if action == "drain":
            done = _scontrol("update", f"nodename={node}", "state=drain", f"reason={outcome.reason()}")
        elif action == "resume":
            done = _scontrol("update", f"nodename={node}", "state=resume")
        else:
            if outcome.code not in (0, 1) or outcome.error:
                say(f"health check: {_shown(outcome)} (not drained: --drain-on-error drains then)")
            return 1 if action == "leave" and outcome.code != 0 else 0
    except (OSError, subprocess.SubprocessError) as exc:
        say(f"health check: cannot ask Slurm about node {node}: {exc}")
        return 2
    if done.returncode != 0:
        say(f"health check: scontrol update {node} ({action}): {(done.stderr or done.stdout).strip()[:150]}")
        return 2
    say(f"health check: node {node}: {action}" + (f" ({_shown(outcome)})" if action == "drain" else ""))
    note.unlink(missing_ok=True)  # the drain is now named as ours, or over
    return 1 if action == "drain" else 0


if __name__ == "__main__":  # python -m pytest_dgx_spark.slurm prolog|health [flags]
    entry = {"prolog": prolog, "health": health}.get(sys.argv[1] if len(sys.argv) > 1 else "")
    if entry is None:
        say("usage: python -m pytest_dgx_spark.slurm prolog|health [flags]")
        sys.exit(2)
    sys.exit(entry(sys.argv[2:]))
