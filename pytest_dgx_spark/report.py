"""Renderings of a set of results, shared by the plugin and the CLI:
the ``env-report.json`` document, JUnit suite properties, the JSON run block.
"""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from pytest_dgx_spark import __version__, catalog, launch
from pytest_dgx_spark.model import SCHEMA, Result, Verdict, verdict, verdict_line


def ordered(results: Iterable[Result]) -> list[Result]:
    by_id = {r.check_id: r for r in results}
    return [by_id[c] for c in catalog.IDS if c in by_id]


def run_verdict(
    results: Iterable[Result], *, strict: bool, not_run: Mapping[str, str] | None = None
) -> Verdict:
    """The verdict over the checks that ran; a check that did not run (its
    test deselected, a collection error) verified nothing, so the run is at
    best ``ready-with-warnings`` (the seed's rule for checks that could not run)."""
    v = verdict(results, strict=strict)
    if not_run and v is Verdict.READY:
        return Verdict.READY_WITH_WARNINGS
    return v


def verdict_text(
    results: list[Result], *, strict: bool, not_run: Mapping[str, str] | None = None
) -> str:
    """The terminal's verdict line, counting the checks that did not run:
    ``verdict: ready-with-warnings (1 INFO, 9 not run)``."""
    line = verdict_line(results, strict=strict)
    if not not_run:
        return line
    _, sep, tail = line.partition(" (")
    tally = tail[:-1] + ", " if sep else ""
    return f"verdict: {run_verdict(results, strict=strict, not_run=not_run).value} ({tally}{len(not_run)} not run)"


def checks_entry(results: Iterable[Result], not_run: Mapping[str, str] | None = None) -> dict[str, str]:
    """env-report's ``checks``: each check's seed value, and ``"not run: …"``
    for an enabled check that did not run, in G1..G10 order."""
    values = {r.check_id: r.seed_value() for r in results}
    values.update(not_run_values(not_run))
    return {cid: values[cid] for cid in catalog.IDS if cid in values}


def not_run_values(not_run: Mapping[str, str] | None) -> dict[str, str]:
    """``{check: "not run: why"}``: a check that did not run, as env-report and the JSON block say it."""
    return {cid: f"not run: {why}" for cid, why in (not_run or {}).items()}


def platform_name(host: Mapping[str, Any] | None) -> str:
    """The seed's ``platform`` key: ``dgx-spark`` on GB10."""
    if not host:
        return "unknown"
    if host.get("gb10"):
        return "dgx-spark"
    if host.get("gpu"):
        return "other-nvidia"
    return "no-nvidia-gpu"


def headroom_gb(results: Iterable[Result]) -> float | None:
    for r in results:
        if r.check_id == "G3":
            reading = r.reading("mem_available")
            if reading is not None and isinstance(reading.value, (int, float)):
                return reading.value
    return None


def run_block(
    results: Iterable[Result],
    *,
    strict: bool,
    host: Mapping[str, Any] | None,
    settings: Mapping[str, Any] | None = None,
    profile: str | None = None,
    not_run: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The versioned block for pytest-json-report and ``spark-preflight --json``."""
    rs = ordered(results)
    block = {
        "schema": SCHEMA,
        "tool": {"name": "pytest-dgx-spark", "version": __version__},
        "verdict": run_verdict(rs, strict=strict, not_run=not_run).value,
        "strict": strict,
        "profile": profile,
        "host": dict(host or {}),
        "results": [r.to_dict() for r in rs],
        "lines": [r.line() for r in rs],
        "options": dict(settings or {}),
    }
    if not_run:
        block["not_run"] = not_run_values(not_run)
    return block


def env_report(
    results: Iterable[Result],
    *,
    strict: bool,
    host: Mapping[str, Any] | None,
    workload_gb: float | None = None,
    settings: Mapping[str, Any] | None = None,
    profile: str | None = None,
    not_run: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """``env-report.json`` in the seed's schema (platform, checks, headroom_gb,
    verdict) plus our own keys (schema, readings, host, timings, lines).
    ``not_run``: enabled checks that did not run, with why (see :func:`run_verdict`)."""
    rs = ordered(results)
    v = run_verdict(rs, strict=strict, not_run=not_run)
    headroom = headroom_gb(rs)
    if workload_gb is not None and headroom is not None and headroom < workload_gb:
        v = Verdict.BLOCKED
    return {
        "platform": platform_name(host),
        "checks": checks_entry(rs, not_run),
        "headroom_gb": headroom,
        "verdict": v.value,
        "schema": SCHEMA,
        "tool": {"name": "pytest-dgx-spark", "version": __version__},
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "profile": profile,
        "strict": strict,
        "workload_gb": workload_gb,
        "host": dict(host or {}),
        "lines": [r.line() for r in rs],
        "fixes": {r.check_id: r.fix for r in rs if r.fix},
        "readings": {r.check_id: {x.name: x.to_dict() for x in r.readings} for r in rs},
        "details": {r.check_id: list(r.details) for r in rs if r.details},
        "timings": {r.check_id: round(r.duration_s, 4) for r in rs},
        "options": dict(settings or {}),
    }


def per_rank_path(path: Path, env: Mapping[str, str]) -> Path:
    """Under torchrun (or srun) every rank runs the preflight; only rank 0 writes
    ``PATH``, rank N writes ``<stem>.rankN<suffix>`` beside it, so no rank
    overwrites another (a shared home folder on a Slurm cluster is the rule)."""
    rank = launch.rank(env)
    if rank == 0:
        return Path(path)
    path = Path(path)
    return path.with_name(f"{path.stem}.rank{rank}{path.suffix}")


def not_a_file(path: Path) -> str | None:
    """What sits at ``path`` when it is neither a regular file nor nothing
    (``"a character device"``), else ``None``. Symlinks are followed."""
    try:
        mode = os.stat(path).st_mode
    except OSError:  # nothing there (or no way there: the write says why)
        return None
    if stat.S_ISREG(mode):
        return None
    from pytest_dgx_spark.outfile import kind_of

    return kind_of(mode)


def write_json(path: Path, document: Mapping[str, Any]) -> None:
    """Write a JSON report atomically: a reader never sees half a report."""
    write_bytes(path, (json.dumps(document, indent=2, default=str) + "\n").encode("utf-8"))


def write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically, never through a symlink, never
    over another user's file in a shared folder: :func:`pytest_dgx_spark.outfile.write_bytes`,
    the one writer of every file this tool makes. A refused path raises
    :class:`~pytest_dgx_spark.outfile.Refused` (an :class:`OSError`) saying why."""
    from pytest_dgx_spark import outfile

    outfile.write_bytes(path, data)


def fleet_nodes(store_items: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every rank's fingerprint, when G10 compared the nodes of a multi-node job."""
    facts = (store_items.get("facts:G10") or {}).get("facts") or {}
    exchanged = facts.get("fleet") or {}
    return [dict(fp) for fp in exchanged.get("fingerprints") or [] if isinstance(fp, Mapping)]


def nodes_section(fingerprints: list[dict[str, Any]], results: Iterable[Result]) -> dict[str, Any]:
    """The merged env-report's ``nodes``: one entry per rank (its fingerprint and
    statuses), and the cross-node findings G10 made from them."""
    g10 = next((r for r in results if r.check_id == "G10"), None)
    return {
        "nodes": {str(fp.get("rank", i)): fp for i, fp in enumerate(fingerprints)},
        "cross_node": {
            "status": g10.status.value if g10 else None,
            "line": g10.line() if g10 else None,
            "details": list(g10.details) if g10 else [],
        },
    }


def node_properties(fingerprints: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """``spark.node<k>.*`` suite properties: each rank's identity and statuses."""
    props: list[tuple[str, str]] = []
    for i, fp in enumerate(fingerprints):
        k = fp.get("rank", i)
        for key in ("hostname", "gpu", "driver", "cuda_driver", "torch", "nccl_torch", "mtu"):
            if fp.get(key) is not None:
                props.append((f"spark.node{k}.{key}", str(fp[key])))
        for cid, status in sorted(
            (fp.get("statuses") or {}).items(),
            key=lambda kv: catalog.BY_ID.get(kv[0], catalog.CHECKS[0]).number,
        ):
            props.append((f"spark.node{k}.{cid}", str(status)))
    return props


def suite_properties(
    results: Iterable[Result],
    *,
    strict: bool,
    host: Mapping[str, Any] | None,
    not_run: Mapping[str, str] | None = None,
) -> list[tuple[str, str]]:
    """``<testsuite><properties>``: verdict, host identity, per-check data."""
    rs = ordered(results)
    props: list[tuple[str, str]] = [
        ("spark.schema", SCHEMA),
        ("spark.version", __version__),
        ("spark.verdict", run_verdict(rs, strict=strict, not_run=not_run).value),
    ]
    for key, value in (host or {}).items():
        if value is not None:
            props.append((f"spark.host.{key}", str(value)))
    for r in rs:
        props.append((f"spark.{r.check_id}.status", r.status.value))
        props.append((f"spark.{r.check_id}.summary", r.text))
        for reading in r.readings:
            props.append((f"spark.{r.check_id}.{reading.name}", reading.render()))
    return props


def case_properties(result: Result) -> list[tuple[str, str]]:
    """Per-testcase properties for ``junit_family=xunit1``/``legacy`` (Jenkins)."""
    props = [
        ("spark.id", result.check_id),
        ("spark.status", result.status.value),
        ("spark.summary", result.text),
    ]
    props += [(f"spark.reading.{r.name}", r.render()) for r in result.readings]
    return props


# --------------------------------------------------------------------------- the run's files


def write_run_files(
    settings: Any,
    results: list[Result],
    *,
    host: Mapping[str, Any],
    profile: str,
    store_items: Callable[[], Mapping[str, Any]],
    env: Mapping[str, str],
    not_run: Mapping[str, str] | None = None,
) -> list[str]:
    """Write ``--spark-report`` and ``--spark-capture``, the one writer of
    both for the plugin and the CLI. Returns one line per file: where it was
    written, or why it could not be (``"cannot write …"``)."""
    notes: list[str] = []
    capture_path = getattr(settings, "capture", None)
    if settings.report is None and capture_path is None:
        return notes
    items = store_items()  # once: under xdist it reads every answer file of the run
    if settings.report is not None:
        doc = env_report(
            results,
            strict=settings.strict,
            host=host,
            workload_gb=settings.workload_gb,
            settings=settings.to_dict(),
            profile=profile,
            not_run=not_run,
        )
        fingerprints = fleet_nodes(items)
        if fingerprints and launch.rank(env) == 0:  # rank 0 writes the merged report
            doc.update(nodes_section(fingerprints, results))
        target = per_rank_path(settings.report, env)
        notes.append(_write(target, "env report", lambda p: write_json(p, doc)))
        notes.extend(g4_chart_note(target, items))
    if capture_path is not None:
        from pytest_dgx_spark import capture
        from pytest_dgx_spark.checks.kit import Params

        document = capture.build(
            results=results,
            store_items=items,
            host=host,
            profile=profile,
            options=settings.to_dict(),
            params=Params.from_settings(settings, profile).to_dict(),
        )
        target = per_rank_path(capture_path, env)
        notes.append(_write(target, "capture", lambda p: capture.write(p, document, env)))
    return notes


def g4_chart_note(report: Path, store_items: Mapping[str, Any]) -> list[str]:
    """G4's thermal chart beside the env report (``env-report.thermal-g4.svg``):
    one line, where it went or why not; none when G4 took no series."""
    stored = store_items.get("facts:G4")
    facts = stored.get("facts") if isinstance(stored, Mapping) else None
    if not isinstance(facts, Mapping):
        return []
    from pytest_dgx_spark import chart

    data = chart.from_facts(facts)
    if data is None:
        return []
    return [chart.write(chart.beside(report, "thermal-g4"), data)]


def _write(target: Path, what: str, write: Callable[[Path], None]) -> str:
    """One line: where the file went, or why not (``cannot write …``). A
    file a failed write left behind is an earlier run's: removed, so that
    nothing reads its verdict as this run's (issue 19, item 11)."""
    from pytest_dgx_spark import outfile

    try:
        write(target)
    except outfile.Refused as exc:  # a link or another user's file: theirs, left alone
        return f"cannot write {target}: {exc.strerror}"
    except OSError as exc:
        return f"cannot write {target}: {exc.strerror or exc}{outfile.discard_stale(target)}"
    return f"{what} written to {target}"
