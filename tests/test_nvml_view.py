"""The NVML child's snapshot typed once (``probes/nvml.py``), the raw stream readings the sampler and
the watch fold (``thermal.Sample.loose``), the kernel log's outcome (``kernel_log.outcome``), and G5's
copy answer of another shape: each on recorded output or on the shape that breaks it."""

from __future__ import annotations

import json
from pathlib import Path

from pytest_dgx_spark import thermal
from pytest_dgx_spark.checks.g05_bandwidth import check as g5
from pytest_dgx_spark.probes import kernel_log, nvml
from pytest_dgx_spark.probes.child import ChildResult

H200 = Path(__file__).parent / "data" / "h200-cu130"


def test_a_recorded_h200_snapshot_and_series_type_field_by_field() -> None:
    """tests/data/h200-cu130/nvml_sample_load.json: an H200 under a bf16 load (recorded on the GPU machine)."""
    doc = json.loads((H200 / "nvml_sample_load.json").read_text())
    nv = nvml.view(doc["nvml"])
    assert nv.ok and not nv.hung and nv.limited is None
    (dev,) = nv.devices
    raw = doc["nvml"]["devices"][0]
    assert (dev.name, dev.power_limit_mw, dev.mem_bus_width_bits) == ("NVIDIA H200", 700000, 6016)
    assert dev.memory is not None and dev.memory.total == raw["memory"]["total"]
    assert dev.procs("compute") == [nvml.NvmlProc(p["pid"], p["used_bytes"]) for p in raw["compute_procs"]]
    series = nvml.view(doc["sample"])
    assert len(series.samples) == len(doc["sample"]["samples"])
    first = series.samples[0].gpus[0]
    assert (first.temperature_c, first.power_usage_mw, first.clock_event_reasons) == (60, 690702, 4)
    assert isinstance(first.temperature_c, int)  # an int stays an int in what a capture records


def test_a_device_of_another_shape_is_kept_as_one_that_read_nothing() -> None:
    nv = nvml.view({"ok": True, "devices": [{"index": 0, "name": "NVIDIA GB10", "memory": "lots"},
                                            {"index": 1, "name": "NVIDIA GB10"}]})
    broken, fine = nv.devices
    assert broken.index == 0 and broken.name is None and broken.errors["device"].name == "Unparseable"
    assert broken.errors["device"].message == "memory: expected a table or null, got str 'lots'"
    assert fine.name == "NVIDIA GB10" and fine.errors == {}


def test_an_unreadable_snapshot_says_so_instead_of_answering() -> None:
    nv = nvml.view({"ok": "yes"})
    assert not nv.ok and nv.reason is not None and nv.reason.startswith("NVML answer unreadable: ok:")


def test_a_raw_stream_sample_reads_what_is_not_a_number_as_not_read() -> None:
    raw = {"t": 1.5, "gpus": [{"index": 0, "temperature_c": "hot", "power_usage_mw": True, "clock_sm_mhz": 2405,
                               "errors": {"tlimit_c": {"name": "NotSupported"}, "bad": "text"}}, "not a gpu"]}
    sample = thermal.Sample.loose(raw)
    (gpu,) = sample.gpus
    assert (sample.t, gpu.temperature_c, gpu.power_usage_mw, gpu.clock_sm_mhz) == (1.5, None, None, 2405)
    assert gpu.errors == {"tlimit_c": thermal.NvmlError("NotSupported", "")}
    series: dict[int, thermal.GpuSeries] = {}
    thermal.add_sample(series, raw)  # the sampler's and the watch's way in: the same fold
    assert series[0].clock_sm.max == 2405 and series[0].temperature.n == 0


def test_the_kernel_log_outcome_types_a_denied_and_a_cut_read() -> None:
    denied = kernel_log.outcome({"source": None, "records": [], "problems": ["dmesg: Operation not permitted"],
                                 "denied": "not readable as this user", "cut": None, "seconds": 0.1})
    assert (denied.source, denied.problems, denied.denied) == (None, ["dmesg: Operation not permitted"],
                                                               "not readable as this user")
    cut = kernel_log.outcome({"source": "/dev/kmsg", "records": [], "problems": "odd", "cut": "stopped"})
    assert (cut.source, cut.problems, cut.denied, cut.cut) == ("/dev/kmsg", [], None, "stopped")


def test_g5_copy_answer_of_another_shape_is_why_there_is_no_number() -> None:
    facts = g5.Facts(intrusive=True)
    g5._probe_outcome(ChildResult(data={"bandwidth": {"gbps": "fast"}}, finished=True, returncode=0), facts)
    assert facts.measurement is None
    assert facts.probe_problem is not None and facts.probe_problem.startswith("copy probe answer unreadable (gbps:")
    ok = g5.Facts(intrusive=True)
    answer = {"engine": "torch", "gbps": 218.4, "samples_gbps": [218.4] * 7, "buffer_bytes": 1 << 30, "iters": 3,
              "samples": 7, "wall_s": 0.4, "gpu_ms": 12.5}
    g5._probe_outcome(ChildResult(data={"bandwidth": answer}, finished=True, returncode=0), ok)
    assert ok.measurement == g5.Measurement(**answer)
