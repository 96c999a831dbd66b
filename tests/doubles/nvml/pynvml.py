"""A test double of ``pynvml`` (nvidia-ml-py) for machines without a GPU.

It sits where the real module sits — first on the probe child's
``PYTHONPATH`` — and speaks the real interface: it loads the installed
nvidia-ml-py under another name and re-exports everything (constants, the
``NVMLError`` classes), then replaces the functions the plugin calls with
answers read from a JSON scenario (``SPARK_FAKE_NVML`` = path). An error is
raised exactly as the real binding raises it: ``NVMLError(code)``, which
nvidia-ml-py turns into ``NVMLError_NotSupported`` and friends.

Scenario keys (all optional):
  init_error: "LibraryNotFound" | "DriverNotLoaded" | ...
  hang: {"where": "<function name>", "seconds": 60}
  crash: {"where": "<function name>", "signal": "SIGSEGV"}
  log: path of a file that gets one line per nvmlInit (to count probes)
  driver_version, nvml_version, cuda_driver_version (int, 13000)
  devices: [{name, uuid, pci_bus_id, capability [12, 1], memory ({total,free,used} |
            "NotSupported"), power_usage_mw, power_limit_mw, temperature_c,
            clock_sm_mhz, clock_mem_mhz, max_clock_mem_mhz, max_clock_sm_mhz,
            mem_bus_width_bits, clock_event_reasons, compute_procs [{pid, used_bytes}],
            graphics_procs, samples [{temperature_c, power_usage_mw, clock_sm_mhz,
            clock_event_reasons, tlimit_c, utilization_gpu, compute_procs}], utilization_gpu (%), lost_after (GpuIsLost after N sample reads),
            tlimit_c (the "GPU T.Limit Temp" margin, C),
            counters {sw_power_cap, sync_boost, sw_thermal_slowdown, hw_thermal_slowdown,
                      hw_power_brake_slowdown: microseconds, or a list read one per call
                      (before, after), or an error name per field}}]
Any value may be an error name string ("NotSupported", "GpuIsLost", "Unknown").
"""

import importlib.util as _ilu
import json as _json
import os as _os
import signal as _signal
import sys as _sys
import time as _time


def _load_real():
    here = _os.path.dirname(_os.path.abspath(__file__))
    for entry in _sys.path:
        folder = _os.path.abspath(entry or ".")
        if folder == here:
            continue
        candidate = _os.path.join(folder, "pynvml.py")
        if _os.path.isfile(candidate):
            spec = _ilu.spec_from_file_location("_real_pynvml", candidate)
            module = _ilu.module_from_spec(spec)
            _sys.modules["_real_pynvml"] = module
            spec.loader.exec_module(module)
            return module
    raise ImportError("the pynvml test double needs nvidia-ml-py installed")


_real = _load_real()
globals().update({k: v for k, v in vars(_real).items() if not k.startswith("__")})

_ERRORS = {
    "".join(part.capitalize() for part in name[len("NVML_ERROR_") :].lower().split("_")): code
    for name, code in vars(_real).items()
    if name.startswith("NVML_ERROR_") and isinstance(code, int)
}
_ERRORS.update(
    {"GpuIsLost": _real.NVML_ERROR_GPU_IS_LOST, "LibraryNotFound": _real.NVML_ERROR_LIBRARY_NOT_FOUND}
)

with open(_os.environ["SPARK_FAKE_NVML"], encoding="utf-8") as _fh:
    _S = _json.load(_fh)

_initialised = False
_sample_reads = {}


class _Struct:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def _raise(name):
    raise _real.NVMLError(_ERRORS.get(name, _real.NVML_ERROR_UNKNOWN))


def _maybe_fault(where):
    hang = _S.get("hang") or {}
    if hang.get("where") == where:
        _time.sleep(float(hang.get("seconds", 3600)))
    crash = _S.get("crash") or {}
    if crash.get("where") == where:
        _os.kill(_os.getpid(), getattr(_signal, crash.get("signal", "SIGSEGV")))


def _value(value):
    if isinstance(value, str) and value in _ERRORS:
        _raise(value)
    return value


def _need_init():
    if not _initialised:
        _raise("Uninitialized")


def _dev(handle):
    return _S["devices"][handle]


def _field(handle, key, where):
    _need_init()
    _maybe_fault(where)
    dev = _dev(handle)
    if key not in dev:
        _raise("NotSupported")
    return _value(dev[key])


def nvmlInit(*args, **kwargs):
    global _initialised
    if _S.get("log"):  # lets a test count how often NVML was initialised
        with open(_S["log"], "a", encoding="utf-8") as fh:
            fh.write(f"nvmlInit {_os.getpid()} {_time.time():.3f}\n")
    _maybe_fault("nvmlInit")
    if _S.get("init_error"):
        _raise(_S["init_error"])
    _initialised = True


nvmlInitWithFlags = nvmlInit


def nvmlShutdown():
    global _initialised
    _initialised = False


def nvmlSystemGetDriverVersion():
    _need_init()
    return _value(_S.get("driver_version", "580.95.05"))


def nvmlSystemGetNVMLVersion():
    _need_init()
    return _value(_S.get("nvml_version", "13.580.95.05"))


def nvmlSystemGetCudaDriverVersion_v2():
    _need_init()
    return _value(_S.get("cuda_driver_version", 13000))


nvmlSystemGetCudaDriverVersion = nvmlSystemGetCudaDriverVersion_v2


def nvmlDeviceGetCount():
    _need_init()
    _maybe_fault("nvmlDeviceGetCount")
    return len(_S.get("devices") or [])


def nvmlDeviceGetHandleByIndex(index):
    _need_init()
    if index >= len(_S.get("devices") or []):
        _raise("InvalidArgument")
    return index


def nvmlDeviceGetName(h):
    return _field(h, "name", "nvmlDeviceGetName")


def nvmlDeviceGetUUID(h):
    return _dev(h).get("uuid", f"GPU-{h:08d}-fake")


def nvmlDeviceGetPciInfo(h):
    _need_init()
    return _Struct(busId=_dev(h).get("pci_bus_id", "00000000:01:00.0"))


def nvmlDeviceGetCudaComputeCapability(h):
    return tuple(_field(h, "capability", "nvmlDeviceGetCudaComputeCapability"))


def nvmlDeviceGetMemoryInfo(h, *args):
    mem = _field(h, "memory", "nvmlDeviceGetMemoryInfo")
    return _Struct(total=mem["total"], free=mem["free"], used=mem["used"])


nvmlDeviceGetMemoryInfo_v2 = nvmlDeviceGetMemoryInfo


def _sampled(h, key, where):
    _need_init()
    _maybe_fault(where)
    dev = _dev(h)
    samples = dev.get("samples")
    if not samples:
        return _field(h, key, where)
    n = _sample_reads.get((h, key), 0)
    _sample_reads[(h, key)] = n + 1
    lost_after = dev.get("lost_after")
    if lost_after is not None and n >= lost_after:
        _raise("GpuIsLost")
    sample = samples[min(n, len(samples) - 1)]
    if key not in sample:
        return _field(h, key, where)
    return _value(sample[key])


def nvmlDeviceGetTemperature(h, sensor=0):
    return _sampled(h, "temperature_c", "nvmlDeviceGetTemperature")


def nvmlDeviceGetUtilizationRates(h):
    """``c_nvmlUtilization_t`` (``.gpu``, ``.memory`` in %) from ``utilization_gpu``; NotSupported without it."""
    rates = _real.c_nvmlUtilization_t()
    rates.gpu = _sampled(h, "utilization_gpu", "nvmlDeviceGetUtilizationRates")
    rates.memory = 0
    return rates


def nvmlDeviceGetPowerUsage(h):
    return _sampled(h, "power_usage_mw", "nvmlDeviceGetPowerUsage")


def nvmlDeviceGetEnforcedPowerLimit(h):
    return _field(h, "power_limit_mw", "nvmlDeviceGetEnforcedPowerLimit")


def nvmlDeviceGetClockInfo(h, clock):
    if clock == _real.NVML_CLOCK_SM:
        return _sampled(h, "clock_sm_mhz", "nvmlDeviceGetClockInfo")
    return _field(h, "clock_mem_mhz", "nvmlDeviceGetClockInfo")


def nvmlDeviceGetMaxClockInfo(h, clock):
    key = "max_clock_sm_mhz" if clock == _real.NVML_CLOCK_SM else "max_clock_mem_mhz"
    return _field(h, key, "nvmlDeviceGetMaxClockInfo")


def nvmlDeviceGetMemoryBusWidth(h):
    return _field(h, "mem_bus_width_bits", "nvmlDeviceGetMemoryBusWidth")


def nvmlDeviceGetCurrentClocksEventReasons(h):
    return _sampled(h, "clock_event_reasons", "nvmlDeviceGetCurrentClocksEventReasons")


nvmlDeviceGetCurrentClocksThrottleReasons = nvmlDeviceGetCurrentClocksEventReasons


def _procs(h, key):
    _need_init()
    dev = _dev(h)
    raw = dev.get(key, [])
    samples = dev.get("samples")
    if samples:  # a sample may carry its own process list (a process that comes and goes)
        n = max([c for (hh, _), c in _sample_reads.items() if hh == h] or [1]) - 1
        sample = samples[min(n, len(samples) - 1)]
        raw = sample.get(key, raw)
    raw = _value(raw)
    return [_Struct(pid=p["pid"], usedGpuMemory=p.get("used_bytes")) for p in raw]


def nvmlDeviceGetComputeRunningProcesses(h):
    return _procs(h, "compute_procs")


def nvmlDeviceGetGraphicsRunningProcesses(h):
    return _procs(h, "graphics_procs")


nvmlDeviceGetComputeRunningProcesses_v3 = nvmlDeviceGetComputeRunningProcesses
nvmlDeviceGetGraphicsRunningProcesses_v3 = nvmlDeviceGetGraphicsRunningProcesses


def nvmlDeviceGetMarginTemperature(h):
    return _sampled(h, "tlimit_c", "nvmlDeviceGetMarginTemperature")


#: field id -> counter name (pynvml's NVML_FI_DEV_CLOCKS_EVENT_REASON_* ids)
_COUNTER_IDS = {74: "sw_power_cap", 76: "sync_boost", 269: "sw_thermal_slowdown",
                270: "hw_thermal_slowdown", 271: "hw_power_brake_slowdown"}
_counter_reads = {}


def nvmlDeviceGetFieldValues(h, fieldIds):
    """Answer as the real call does: an array of ``c_nvmlFieldValue_t``, each
    with its own ``nvmlReturn`` (a field the scenario lacks is NOT_SUPPORTED).
    A counter given as a list answers its items in turn, one per call."""
    _need_init()
    _maybe_fault("nvmlDeviceGetFieldValues")
    counters = _dev(h).get("counters")
    if counters is None:
        _raise("NotSupported")
    if isinstance(counters, str):
        _raise(counters)
    n = _counter_reads.get(h, 0)
    _counter_reads[h] = n + 1
    values = (_real.c_nvmlFieldValue_t * len(fieldIds))()
    for i, fid in enumerate(fieldIds):
        values[i].fieldId = fid
        raw = counters.get(_COUNTER_IDS.get(fid, ""), "NotSupported")
        if isinstance(raw, list):
            raw = raw[min(n, len(raw) - 1)]
        if isinstance(raw, str):
            values[i].nvmlReturn = _ERRORS.get(raw, _real.NVML_ERROR_UNKNOWN)
            continue
        values[i].nvmlReturn = 0
        values[i].valueType = _real.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
        values[i].value.ullVal = int(raw)
    return values
