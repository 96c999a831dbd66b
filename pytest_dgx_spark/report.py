"""Renderings of a set of results, shared by the plugin and the CLI: the ``env-report.json``
document, JUnit suite properties, the JSON run block, and the one writer of ``--spark-report``
and ``--spark-capture``."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from pytest_dgx_spark import __version__, attachments, capture, catalog, launch, outfile
from pytest_dgx_spark.checks.kit import Params
from pytest_dgx_spark.model import SCHEMA, Result, Verdict, verdict, verdict_line
from pytest_dgx_spark.safe_text import visible

#: the verdict over the checks that ran, a check that did not run counting as a warning
run_verdict = verdict
#: the terminal's verdict line: ``verdict: ready-with-warnings (1 INFO, 9 not run)``
verdict_text = verdict_line

TOOL = {"name": "pytest-dgx-spark", "version": __version__}


def ordered(results: Iterable[Result]) -> list[Result]:
    by_id = {r.check_id: r for r in results}
    return [by_id[c] for c in catalog.IDS if c in by_id]


def not_run_values(not_run: Mapping[str, str] | None) -> dict[str, str]:
    """``{check: "not run: why"}``: a check that did not run, as env-report and the JSON block say it."""
    return {cid: f"not run: {why}" for cid, why in (not_run or {}).items()}


def platform_name(host: Mapping[str, Any] | None) -> str:
    """The seed's ``platform`` key: ``dgx-spark`` on GB10."""
    if not host:
        return "unknown"
    return "dgx-spark" if host.get("gb10") else "other-nvidia" if host.get("gpu") else "no-nvidia-gpu"


def profile_label(profile: str, host: Mapping[str, Any] | None) -> str:
    """The profile the run judged by: the one given, else the host's (``auto`` before one is known)."""
    if profile != "auto":
        return profile
    return ("gb10" if host.get("gb10") else "generic") if host else "auto"


def headroom_gb(results: Iterable[Result]) -> float | None:
    found = (r.reading("mem_available") for r in results if r.check_id == "G3")
    return next((x.value for x in found if x is not None and isinstance(x.value, (int, float))), None)


def run_block(results: Iterable[Result], *, strict: bool, host: Mapping[str, Any] | None,
              settings: Mapping[str, Any] | None = None, profile: str | None = None,
              not_run: Mapping[str, str] | None = None, extra: Mapping[str, Any] | None = None,
              ) -> dict[str, Any]:
    """The versioned block for pytest-json-report and ``spark-preflight --json``
    (``extra``: keys of a diagnose run, ``diagnosis``)."""
    rs = ordered(results)
    block = {"schema": SCHEMA, "tool": TOOL, "verdict": verdict(rs, strict=strict, not_run=not_run).value,
             "strict": strict, "profile": profile, "host": dict(host or {}),
             "results": [r.to_dict() for r in rs], "lines": [r.line() for r in rs],
             "options": dict(settings or {})}
    if not_run:
        block["not_run"] = not_run_values(not_run)
    return block | dict(extra or {})


def env_report(results: Iterable[Result], *, strict: bool, host: Mapping[str, Any] | None,
               workload_gb: float | None = None, settings: Mapping[str, Any] | None = None,
               profile: str | None = None, not_run: Mapping[str, str] | None = None,
               extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``env-report.json`` in the seed's schema (platform, checks, headroom_gb, verdict) plus our own keys
    (``extra``: a diagnose run's ``diagnosis``); blocked when the headroom is short of ``workload_gb``."""
    rs = ordered(results)
    v = verdict(rs, strict=strict, not_run=not_run)
    headroom = headroom_gb(rs)
    if workload_gb is not None and headroom is not None and headroom < workload_gb:
        v = Verdict.BLOCKED
    values = {r.check_id: r.seed_value() for r in rs} | not_run_values(not_run)  # seed values, one per check
    return {**(extra or {}), "platform": platform_name(host),
            "checks": {cid: values[cid] for cid in catalog.IDS if cid in values},
            "headroom_gb": headroom, "verdict": v.value, "schema": SCHEMA, "tool": TOOL,
            "generated_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "profile": profile, "strict": strict,
            "workload_gb": workload_gb, "host": dict(host or {}), "lines": [r.line() for r in rs],
            "fixes": {r.check_id: r.fix for r in rs if r.fix},
            "codes": {r.check_id: list(r.codes) for r in rs if r.codes},
            "readings": {r.check_id: {x.name: x.to_dict() for x in r.readings} for r in rs},
            "details": {r.check_id: list(r.details) for r in rs if r.details},
            "timings": {r.check_id: round(r.duration_s, 4) for r in rs}, "options": dict(settings or {})}


def per_rank_path(path: Path, env: Mapping[str, str]) -> Path:
    """Rank 0 (or a run outside torchrun/srun) writes ``PATH``; rank N writes
    ``<stem>.rankN<suffix>`` beside it, so no rank overwrites another."""
    rank, path = launch.rank(env), Path(path)
    return path if rank == 0 else path.with_name(f"{path.stem}.rank{rank}{path.suffix}")


def write_json(path: Path, document: Mapping[str, Any]) -> None:
    outfile.write_bytes(path, (json.dumps(document, indent=2, default=str) + "\n").encode("utf-8"))


def fleet_nodes(results: Iterable[Result]) -> list[dict[str, Any]]:
    """Every rank's fingerprint, when a check compared the nodes of a multi-node job (its ``nodes``
    attachment)."""
    return attachments.fingerprints(results)[1]


def nodes_section(results: Iterable[Result]) -> dict[str, Any]:
    """The merged env-report's ``nodes`` (each rank's fingerprint) and the cross-node findings of the
    check that compared them (``{}``: no check did)."""
    by, fingerprints = attachments.fingerprints(results)
    if by is None:
        return {}
    cross = {"status": by.status.value, "line": by.line(), "details": list(by.details)}
    return {"nodes": {str(fp.get("rank", i)): fp for i, fp in enumerate(fingerprints)}, "cross_node": cross}


def node_properties(fingerprints: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """``spark.node<k>.*`` suite properties: each rank's identity and statuses."""
    props: list[tuple[str, str]] = []
    for i, fp in enumerate(fingerprints):
        k = fp.get("rank", i)
        keys = ("hostname", "gpu", "driver", "cuda_driver", "torch", "nccl_torch", "mtu")
        props += [(f"spark.node{k}.{key}", str(fp[key])) for key in keys if fp.get(key) is not None]
        statuses = dict(fp.get("statuses") or {})
        for cid in sorted(statuses, key=lambda c: catalog.BY_ID.get(c, catalog.CHECKS[0]).number):
            props.append((f"spark.node{k}.{cid}", str(statuses[cid])))
    return props


def suite_properties(results: Iterable[Result], *, strict: bool, host: Mapping[str, Any] | None,
                     not_run: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """``<testsuite><properties>``: verdict, host identity, per-check data."""
    rs = ordered(results)
    props = [("spark.schema", SCHEMA), ("spark.version", __version__),
             ("spark.verdict", verdict(rs, strict=strict, not_run=not_run).value)]
    props += [(f"spark.host.{visible(key)}", visible(value)) for key, value in (host or {}).items()
              if value is not None]  # fmt: skip
    for r in rs:
        props += [(f"spark.{r.check_id}.status", r.status.value), (f"spark.{r.check_id}.summary", r.text)]
        props += [(f"spark.{r.check_id}.codes", ",".join(r.codes))] if r.codes else []
        props += [(f"spark.{r.check_id}.{x.name}", x.render()) for x in r.readings]
    return props


def case_properties(result: Result) -> list[tuple[str, str]]:
    """Per-testcase properties for ``junit_family=xunit1``/``legacy`` (Jenkins)."""
    props = [("spark.id", result.check_id), ("spark.status", result.status.value),
             ("spark.summary", result.text)]
    props += [("spark.codes", ",".join(result.codes))] if result.codes else []
    return props + [(f"spark.reading.{r.name}", r.render()) for r in result.readings]


def write_run_files(settings: Any, results: list[Result], *, host: Mapping[str, Any], profile: str,
                    store_items: Callable[[], Mapping[str, Any]], env: Mapping[str, str],
                    not_run: Mapping[str, str] | None = None, extra: Mapping[str, Any] | None = None,
                    started: float | None = None, duration: float | None = None,
                    ) -> list[str]:
    """Write ``--spark-report`` (with the results' charts beside it), ``--spark-capture`` and
    ``--spark-prometheus-textfile`` for the plugin and the CLI. One line per file: where it went, or
    ``cannot write …``. ``started``: the run's start (epoch seconds), ``duration``: its seconds."""
    notes: list[str] = []
    capture_path = getattr(settings, "capture", None)
    textfile = getattr(settings, "prometheus_textfile", None)
    # one file per node (node_exporter refuses two files with the same series): its first local rank's
    if textfile is not None and launch.torchrun_env(env).get("LOCAL_RANK", "0").strip() in ("0", ""):
        from pytest_dgx_spark import prometheus  # lazy: only with --spark-prometheus-textfile

        took = prometheus.run_duration(results) if duration is None else duration
        when = time.time() - took if started is None else started
        v = verdict(results, strict=settings.strict, not_run=not_run)
        notes.append(_write(Path(textfile), "Prometheus textfile", lambda p: prometheus.write_textfile(
            p, results, v, when, took, not_run=not_run, python=getattr(settings, "python", None))))
    if settings.report is None and capture_path is None:
        return notes
    if settings.report is not None:
        doc = env_report(results, strict=settings.strict, host=host, workload_gb=settings.workload_gb,
                         settings=settings.to_dict(), profile=profile, not_run=not_run, extra=extra)
        if launch.rank(env) == 0:  # rank 0 writes the merged report
            doc.update(nodes_section(results))
        target = per_rank_path(settings.report, env)
        notes.append(_write(target, "env report", lambda p: write_json(p, doc)))
        notes += charts_beside(target, results)
    if capture_path is not None:
        params = Params.from_settings(settings, profile).to_dict()
        items = store_items()  # once: under xdist it reads every answer file of the run
        document = capture.build(results=results, store_items=items, host=host, profile=profile,
                                 options=settings.to_dict(), params=params)
        target = per_rank_path(capture_path, env)
        notes.append(_write(target, "capture", lambda p: capture.write(p, document, env)))
    return notes


def charts_beside(target: Path, results: Iterable[Result]) -> list[str]:
    """Each ``chart`` attachment written beside the report as ``<stem>.<name>.svg``, one note each
    (nothing for a series with nothing to draw)."""
    notes = []
    for _, found in attachments.attached(results, attachments.CHART):
        from pytest_dgx_spark import chart  # lazy: chart code loads only when a chart is asked for

        data = chart.from_attachment(found)
        if data is not None:
            notes.append(chart.write(chart.beside(target, found.name or found.title), data))
    return notes


def _write(target: Path, what: str, write: Callable[[Path], None]) -> str:
    """One line: where the file went, or why not. A file a failed write left there is an
    earlier run's: removed, so nothing reads its verdict as this run's."""
    try:
        write(target)
    except outfile.Refused as exc:  # a link or another user's file: theirs, left alone
        return f"cannot write {target}: {exc.strerror}"
    except OSError as exc:
        return f"cannot write {target}: {exc.strerror or exc}{outfile.discard_stale(target)}"
    return f"{what} written to {target}"
