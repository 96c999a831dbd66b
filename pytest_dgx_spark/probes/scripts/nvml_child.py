# NVML probe child: a static snapshot of every GPU, a timed sample series ("sample"), or a series
# until stdin closes ("stream", the background sampler). Every NVML call goes through _call(), so
# NotSupported (GB10 memory, power limit), GpuIsLost and friends are recorded, never a traceback.
import select as _select

_PROCS = {
    "compute": ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses"),
    "graphics": ("nvmlDeviceGetGraphicsRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses"),
}
_REASONS_FN = ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")
# key -> (NVML function, the NVML constant passed after the handle and its value when absent)
_READINGS = {
    "name": ("nvmlDeviceGetName", None), "uuid": ("nvmlDeviceGetUUID", None),
    "power_usage_mw": ("nvmlDeviceGetPowerUsage", None),
    "power_limit_mw": ("nvmlDeviceGetEnforcedPowerLimit", None),
    "temperature_c": ("nvmlDeviceGetTemperature", ("NVML_TEMPERATURE_GPU", 0)),
    "clock_sm_mhz": ("nvmlDeviceGetClockInfo", ("NVML_CLOCK_SM", 1)),
    "clock_mem_mhz": ("nvmlDeviceGetClockInfo", ("NVML_CLOCK_MEM", 2)),
    "max_clock_mem_mhz": ("nvmlDeviceGetMaxClockInfo", ("NVML_CLOCK_MEM", 2)),
    "max_clock_sm_mhz": ("nvmlDeviceGetMaxClockInfo", ("NVML_CLOCK_SM", 1)),
}
_SAMPLE_STATIC = ("name", "power_limit_mw", "max_clock_sm_mhz")  # what does not change during a sample
# clock-event counters (microseconds since the driver loaded) by NVML field id, named as
# nvidia-smi's clocks_event_reasons_counters.*; older bindings lack 269-271's names (NVML-COUNTERS.md)
COUNTER_FIELDS = ((74, "sw_power_cap"), (76, "sync_boost"), (269, "sw_thermal_slowdown"),
                  (270, "hw_thermal_slowdown"), (271, "hw_power_brake_slowdown"))
# nvmlValueType_t -> the c_nvmlValue_t member holding the value (counters are 3: ullVal)
_VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def _err_name(exc):
    name = type(exc).__name__
    if name.startswith("NVMLError_"):
        return name[len("NVMLError_"):]
    value = getattr(exc, "value", None)
    return "NVMLError(%s)" % value if value is not None else name


def _call(errors, key, fn, *args):
    if fn is None:
        errors[key] = {"name": "FunctionNotFound", "message": "not in this nvidia-ml-py"}
        return None
    try:
        value = fn(*args)
    except Exception as exc:  # pynvml raises NVMLError subclasses; anything else is recorded too
        errors[key] = {"name": _err_name(exc), "message": str(exc)[:200]}
        return None
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _fn(nv, *names):
    return next((getattr(nv, n) for n in names if getattr(nv, n, None) is not None), None)


def _read(nv, h, keys, out):
    """``out`` with each reading of ``keys`` (``_READINGS``) added; failures in ``out["errors"]``."""
    errors = out.setdefault("errors", {})
    for key in keys:
        name, const = _READINGS[key]
        extra = (getattr(nv, const[0], const[1]),) if const else ()
        out[key] = _call(errors, key, getattr(nv, name), h, *extra)
    return out


def _procs(nv, errors, key, handle, names):
    raw = _call(errors, key, _fn(nv, *names), handle)
    if raw is None:
        return None
    out = []
    for p in raw:
        used = getattr(p, "usedGpuMemory", None)
        if used is not None and used >= 2 ** 63:  # NVML_VALUE_NOT_AVAILABLE is (unsigned long long)-1
            used = None
        out.append({"pid": int(getattr(p, "pid", -1)), "used_bytes": used})
    return out


def _device_static(nv, i):
    errors = {}
    dev = {"index": i, "errors": errors}
    h = _call(errors, "handle", nv.nvmlDeviceGetHandleByIndex, i)
    if h is None:
        return dev
    _read(nv, h, ("name", "uuid"), dev)
    pci = _call(errors, "pci", nv.nvmlDeviceGetPciInfo, h)
    if pci is not None:
        bus = getattr(pci, "busId", None) or getattr(pci, "busIdLegacy", None)
        dev["pci_bus_id"] = bus.decode() if isinstance(bus, bytes) else bus
    cc = _call(errors, "capability", nv.nvmlDeviceGetCudaComputeCapability, h)
    dev["capability"] = list(cc) if cc is not None else None
    mem = _call(errors, "memory", nv.nvmlDeviceGetMemoryInfo, h)
    dev["memory"] = {"total": int(mem.total), "free": int(mem.free), "used": int(mem.used)} if mem is not None else None
    _read(nv, h, tuple(_READINGS)[2:], dev)  # the rest of the readings, in their order
    width = _fn(nv, "nvmlDeviceGetMemoryBusWidth")
    dev["mem_bus_width_bits"] = _call(errors, "mem_bus_width_bits", width, h) if width else None
    reasons = _fn(nv, *_REASONS_FN)
    dev["clock_event_reasons"] = _call(errors, "clock_event_reasons", reasons, h) if reasons else None
    for kind, names in _PROCS.items():
        dev[kind + "_procs"] = _procs(nv, errors, kind + "_procs", h, names)
    return dev


def _counters(nv, i, h):
    """One GPU's clock-event counters: ``{"index", "us": {name: int}, "errors"}``; each field
    carries its own nvmlReturn (one can be NOT_SUPPORTED while the others answer)."""
    errors = {}
    out = {"index": i, "us": {}, "errors": errors}
    values = _call(errors, "all", _fn(nv, "nvmlDeviceGetFieldValues"), h, [fid for fid, _ in COUNTER_FIELDS])
    for (fid, name), v in zip(COUNTER_FIELDS, values or ()):
        ret = getattr(v, "nvmlReturn", 0)
        if ret:
            err = _err_name(nv.NVMLError(ret)) if hasattr(nv, "NVMLError") else "NVMLError(%s)" % ret
            errors[name] = {"name": err, "message": "field %d" % fid}
            continue
        value = getattr(getattr(v, "value", None), _VALUE_MEMBERS.get(getattr(v, "valueType", 3), "ullVal"), None)
        out["us"][name] = int(value) if value is not None else None
    if values is not None and not errors:
        del out["errors"]
    return out


def _sample(nv, handles, t0, lost):
    """One reading of every GPU. A GPU that answered GpuIsLost is not asked again (it cannot come
    back without a reset); later samples carry a ``lost`` placeholder, so the series says when."""
    out = {"t": round(_time.monotonic() - t0, 4), "gpus": []}
    reasons = _fn(nv, *_REASONS_FN)
    margin = _fn(nv, "nvmlDeviceGetMarginTemperature")
    util = _fn(nv, "nvmlDeviceGetUtilizationRates")
    for i, h in handles:
        if i in lost:
            out["gpus"].append({"index": i, "lost": True})
            continue
        errors = {}
        s = _read(nv, h, ("temperature_c", "power_usage_mw", "clock_sm_mhz"), {"index": i, "errors": errors})
        s["clock_event_reasons"] = _call(errors, "clock_event_reasons", reasons, h) if reasons else None
        if util is not None:  # G4's low-power rule gates on load; NotSupported is only an absent reading
            u_err = {}
            rates = _call(u_err, "utilization_gpu", util, h)
            s["utilization_gpu"] = getattr(rates, "gpu", None)
            errors.update({k: e for k, e in u_err.items() if e.get("name") not in ("NotSupported", "FunctionNotFound")})
        if margin is not None:  # "GPU T.Limit Temp": degrees left before the slowdown limit
            s["tlimit_c"] = _call(errors, "tlimit_c", margin, h)
        if any(e.get("name") == "GpuIsLost" for e in errors.values()):
            lost.add(i)
        if not errors:
            del s["errors"]
        out["gpus"].append(s)
    return out


def _cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as fh:
            raw = fh.read(4096)
    except OSError:
        return None
    return raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")[:300]


def _gpu_procs(nv, handles, lost, seen_cmd):
    """NVML processes of every GPU (G6's list during a long test); a command line the first time only."""
    procs = []
    for i, h in handles:
        if i in lost:
            continue
        for kind, names in _PROCS.items():
            for p in _procs(nv, {}, kind, h, names) or []:
                p["gpu"], p["type"] = i, kind
                if p["pid"] not in seen_cmd:
                    seen_cmd.add(p["pid"])
                    p["cmd"] = _cmdline(p["pid"])
                procs.append(p)
    return procs


def _stdin_closed(timeout):
    """Wait up to ``timeout`` s; True once the parent closed our stdin (stop)."""
    try:
        ready, _, _ = _select.select([_sys.stdin], [], [], timeout)
    except (OSError, ValueError):
        _time.sleep(timeout)
        return False
    try:
        return bool(ready) and _sys.stdin.buffer.read1(65536) == b""
    except (OSError, ValueError):
        return True


def _series(nv, cfg, count, stream):
    """``sample``: every ``interval`` for ``seconds``; ``stream``: until stdin closes or ``max_seconds``."""
    handles = [(i, h) for i in range(count) if (h := _call({}, "handle", nv.nvmlDeviceGetHandleByIndex, i)) is not None]
    data(sample_devices=[_read(nv, h, _SAMPLE_STATIC, {"index": i, "errors": {}}) for i, h in handles])
    if not stream:
        begin("counters before")
    data(counters_before=[_counters(nv, i, h) for i, h in handles])
    begin("streaming" if stream else "sampling", scale=1)
    lost = set()
    t0 = _time.monotonic()
    n = _loop(nv, cfg, handles, lost, t0, stream)
    taken = round(_time.monotonic() - t0, 4)
    if not stream:
        begin("counters after")
    data(counters_after=[_counters(nv, i, h) for i, h in handles if i not in lost])
    data(samples=n, seconds=taken)


def _loop(nv, cfg, handles, lost, t0, stream):
    """The samples, each an event; how many. A stream lists the GPU processes every ``procs_every`` s."""
    interval = max(float(cfg.get("interval", 1.0 if stream else 0.1)), 0.01)
    procs_every = float(cfg.get("procs_every", 5.0)) if stream else -1.0
    seen_cmd, next_procs, n = set(), 0.0, 0
    while True:
        s = _sample(nv, handles, t0, lost)
        if procs_every >= 0 and s["t"] >= next_procs:
            s["procs"] = _gpu_procs(nv, handles, lost, seen_cmd)
            next_procs = s["t"] + procs_every
        event(s)
        n += 1
        elapsed = _time.monotonic() - t0
        if stream and (elapsed >= float(cfg.get("max_seconds", 86400.0)) or _stdin_closed(interval)):
            return n
        if not stream:
            if elapsed >= float(cfg.get("seconds", 1.0)) or len(lost) == len(handles):
                return n
            _time.sleep(interval)


def main():
    cfg = config()
    begin("import pynvml")
    try:
        import pynvml as nv
    except Exception as exc:
        data(import_error=error_text(exc))
        done()
        return
    data(pynvml_file=getattr(nv, "__file__", None))
    begin("nvmlInit")
    try:
        nv.nvmlInit()
    except Exception as exc:
        data(init_error={"name": _err_name(exc), "message": str(exc)[:200]})
        done()
        return
    try:
        errors = {}
        count = _call(errors, "device_count", nv.nvmlDeviceGetCount) or 0
        cuda = _fn(nv, "nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion")
        data(driver_version=_call(errors, "driver_version", nv.nvmlSystemGetDriverVersion),
             nvml_version=_call(errors, "nvml_version", nv.nvmlSystemGetNVMLVersion),
             cuda_driver_version=_call(errors, "cuda_driver_version", cuda), device_count=count,
             system_errors=errors)
        if cfg.get("mode") in ("sample", "stream"):
            _series(nv, cfg, count, cfg.get("mode") == "stream")
        else:
            devices = []
            for i in range(count):
                begin("device %d" % i)
                devices.append(_device_static(nv, i))
            data(devices=devices)
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:
            pass
    done()
