"""G4's decision (pure): a driver that does not answer FAILs, no GPU SKIPs (unless the kernel log says
why: a GSP/hardware Xid FAILs), else the sample series, the counters, the Xids and the low-power rule."""

from __future__ import annotations

import re

from pytest_dgx_spark import thermal
from pytest_dgx_spark.checks.g04_thermal import figures, stages
from pytest_dgx_spark.checks.g04_thermal.facts import Facts, answered
from pytest_dgx_spark.checks.g04_thermal.findings import DRIVER_FIX, DRIVER_SHORT
from pytest_dgx_spark.checks.g04_thermal.low_power import low_power_stage
from pytest_dgx_spark.checks.g04_thermal.xid import xid_stage
from pytest_dgx_spark.checks.kit import Findings, Params
from pytest_dgx_spark.model import Reading, Result, Status


def evaluate(facts: Facts, params: Params) -> Result:
    """Decide G4 from a sample series and the clock-event counters (pure)."""
    early = _unreachable(facts)
    if early is not None:
        return _with_xids(early, facts, params)
    series = thermal.summarise(facts.samples)
    static = {d.index: d for d in facts.devices}
    out = Findings("G4")
    out.note(*facts.notes)
    per_gpu: list[Reading] = []
    ceilings: list[float] = []
    for index, s in series.items():
        per_gpu += stages.gpu_stage(s, figures.device_of(static, index), len(series) > 1, params, out, ceilings)
    counters = stages.counters_stage(facts, params, out)
    driver_lost = bool(out.problems or facts.broken)
    xid = xid_stage(facts, params, out)  # first: a GSP/hardware fault may be what holds the clocks down
    low_power = low_power_stage(facts, params, out)
    # the result's readings; G4's chart data (an attachment) is built from the same facts: the sample
    # series is ``facts.samples`` (``thermal.Sample`` records; ``plain(facts.samples)`` is its JSON)
    out.readings.extend(figures.readings(facts, series, static, ceilings) + counters + per_gpu + low_power + xid)
    # count and duration stay out of the line (they jitter; the readings carry them)
    how = "one snapshot" if facts.seconds <= 0 else f"sampled {facts.seconds:g} s"
    if driver_lost:
        if facts.broken:
            out.fail(facts.broken, DRIVER_FIX, "GPU/driver stopped answering", DRIVER_SHORT,
                     code="G4.driver-not-answering")
        result = out.result(Status.INFO)
        result.summary = "GPU/driver stopped answering: " + result.summary
    else:
        overview, headline = figures.overview(series, static, facts, how)
        result = out.result(Status.INFO, overview, headline=headline)
        if not out.warnings and not out.problems:
            return result
        result.summary += f" ({how}, {facts.source})"
    result.headline, result.short_fix = out.first_short()
    return result


def _unreachable(facts: Facts) -> Result | None:
    """FAIL for a driver that does not answer, SKIP for no GPU or a resource limit, else None."""

    def stop(status: Status, summary: str, headline: str, fix: str = "", short_fix: str = "", *, code: str) -> Result:
        return Result("G4", status, summary, fix, details=facts.notes, headline=headline, short_fix=short_fix,
                      codes=[code])

    if facts.limited:
        return stop(Status.SKIP, f"not checked: {facts.missing}; raise the limit (ulimit -u / -v) and run "
                    "again", "not checked (resource limit)", code="G4.resource-limit")
    if facts.hung:
        return stop(Status.FAIL, f"driver not answering: {facts.hung}", "GPU driver not answering",
                    DRIVER_FIX, DRIVER_SHORT, code="G4.driver-not-answering")
    if facts.missing:
        names = re.findall(r"\(([A-Za-z]+)\)", facts.missing)  # the error name, else the start
        return stop(Status.SKIP, f"no NVIDIA GPU: {facts.missing}",
                    f"no NVIDIA GPU ({names[0] if names else facts.missing[:40]})", code="G4.no-gpu")
    if not answered(facts):
        why = facts.broken or "no GPU answered a sample"
        return stop(Status.FAIL, f"GPU/driver not answering: {why}", "GPU/driver not answering", DRIVER_FIX,
                    DRIVER_SHORT, code="G4.driver-not-answering")
    return None


def _with_xids(early: Result, facts: Facts, params: Params) -> Result:
    """The kernel log's Xids; with no GPU to sample, a GSP/hardware one (169 on GB10) is why: FAIL."""
    out = Findings("G4")
    xid_stage(facts, params, out)
    early.details = [*early.details, *out.details]
    if early.status is Status.SKIP and out.problems and not facts.limited:
        text, fix = out.problems[0]
        head, short = out.short.get(text, (text, fix))
        early.status, early.summary = Status.FAIL, f"{early.summary}; {text}"
        early.fix, early.headline, early.short_fix = fix, head, short
        early.codes = out.codes_of()
    return early
