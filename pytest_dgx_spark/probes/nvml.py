"""The NVML child's answer as records: what :meth:`Machine.nvml` / :meth:`Machine.nvml_sample` return
is plain JSON (the store, captures and xdist workers share it); :func:`view` types it once, so a check
reads ``nv.devices[0].memory.free``, not a ``.get`` chain.

A device the child wrote in another shape (a binding of another version) is kept as a device that read
nothing, its ``errors`` saying why; a sample reading that is not a number reads as not read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Any

from pytest_dgx_spark.checks.record import FactsError, Record
from pytest_dgx_spark.datadef import define
from pytest_dgx_spark.thermal import CounterSet, NvmlError, Sample


@define
class NvmlMemory(Record):
    total: int | None = None
    free: int | None = None
    used: int | None = None


@define
class NvmlProc(Record):
    """One process on a GPU's list: its pid and the memory NVML says it uses (None: no figure)."""

    pid: int | None = None
    used_bytes: int | None = None


@define
class NvmlDevice(Record):
    """One GPU of the snapshot (None: not read; ``errors`` says why by field)."""

    index: int = 0
    name: str | None = None
    memory: NvmlMemory | None = None
    capability: list[int] | None = None
    power_limit_mw: int | float | None = None
    max_clock_sm_mhz: int | float | None = None
    max_clock_mem_mhz: int | None = None
    mem_bus_width_bits: int | None = None
    compute_procs: list[NvmlProc] | None = None
    graphics_procs: list[NvmlProc] | None = None
    errors: dict[str, NvmlError] = field(default_factory=dict)

    def procs(self, kind: str) -> list[NvmlProc] | None:
        """``compute`` or ``graphics`` processes; None when NVML did not list them."""
        return self.compute_procs if kind == "compute" else self.graphics_procs


@define
class Nvml(Record):
    """A snapshot (:func:`machine.nvml_snapshot`): ``ok``, else ``reason`` and what kind of not-ok."""

    ok: bool = False
    reason: str | None = None
    hung: bool = False
    limited: str | None = None  # a resource limit of this box stopped the child
    missing: bool = False  # no NVML here (library, driver or binding absent)
    no_gpu: bool = False
    duration_s: float | None = None
    devices: list[NvmlDevice] = field(default_factory=list)
    #: the series of :meth:`Machine.nvml_sample` and the clock-event counters around it
    samples: list[Sample] = field(default_factory=list)
    counters_before: list[CounterSet] = field(default_factory=list)
    counters_after: list[CounterSet] = field(default_factory=list)


_SCALARS = ("ok", "reason", "hung", "limited", "missing", "no_gpu", "duration_s")


def _device(raw: Any, position: int) -> NvmlDevice:
    try:
        return NvmlDevice.from_dict(raw)
    except FactsError as exc:
        return NvmlDevice(index=position, errors={"device": NvmlError("Unparseable", str(exc)[:200])})


def _counters(raw: Any) -> list[CounterSet]:
    out = []
    for c in raw if isinstance(raw, list) else []:
        try:
            out.append(CounterSet.from_dict(c))
        except FactsError:
            continue  # a GPU whose counters came in another shape: not read
    return out


def view(snapshot: Mapping[str, Any]) -> Nvml:
    """The snapshot's JSON typed (see the module's docstring for what another shape becomes)."""
    s = dict(snapshot)
    devices, samples, before, after = (s.get(k) for k in ("devices", "samples", "counters_before", "counters_after"))
    keep = {k: v for k in _SCALARS if (v := s.get(k)) is not None}
    try:
        nv = Nvml.from_dict(keep)
    except FactsError as exc:
        return Nvml(reason=f"NVML answer unreadable: {exc}")
    nv.devices = [_device(d, i) for i, d in enumerate(devices if isinstance(devices, list) else [])]
    nv.samples = [Sample.loose(x) for x in (samples if isinstance(samples, list) else []) if isinstance(x, Mapping)]
    nv.counters_before, nv.counters_after = _counters(before), _counters(after)
    return nv
