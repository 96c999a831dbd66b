# NVML probe child: a static snapshot of every GPU, or a timed sample series.
# Every NVML call goes through _call(), so NotSupported (GB10 memory, power
# limit), GpuIsLost and friends become recorded errors, never a traceback.
import time as _time


def _err_name(exc):
    name = type(exc).__name__
    if name.startswith("NVMLError_"):
        return name[len("NVMLError_"):]
    value = getattr(exc, "value", None)
    return "NVMLError(%s)" % value if value is not None else name


def _call(errors, key, fn, *args):
    try:
        value = fn(*args)
    except Exception as exc:  # pynvml raises NVMLError subclasses; anything else is recorded too
        errors[key] = {"name": _err_name(exc), "message": str(exc)[:200]}
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return value


def _fn(nv, *names):
    for name in names:
        fn = getattr(nv, name, None)
        if fn is not None:
            return fn
    return None


def _procs(nv, errors, key, handle, *names):
    fn = _fn(nv, *names)
    if fn is None:
        errors[key] = {"name": "FunctionNotFound", "message": "not in this nvidia-ml-py"}
        return None
    raw = _call(errors, key, fn, handle)
    if raw is None:
        return None
    out = []
    for p in raw:
        used = getattr(p, "usedGpuMemory", None)
        # NVML_VALUE_NOT_AVAILABLE is (unsigned long long)-1
        if used is not None and used >= 2 ** 63:
            used = None
        out.append({"pid": int(getattr(p, "pid", -1)), "used_bytes": used})
    return out


def _device_static(nv, i):
    errors = {}
    dev = {"index": i, "errors": errors}
    h = _call(errors, "handle", nv.nvmlDeviceGetHandleByIndex, i)
    if h is None:
        return dev
    dev["name"] = _call(errors, "name", nv.nvmlDeviceGetName, h)
    dev["uuid"] = _call(errors, "uuid", nv.nvmlDeviceGetUUID, h)
    pci = _call(errors, "pci", nv.nvmlDeviceGetPciInfo, h)
    if pci is not None:
        bus = getattr(pci, "busId", None) or getattr(pci, "busIdLegacy", None)
        dev["pci_bus_id"] = bus.decode() if isinstance(bus, bytes) else bus
    cc = _call(errors, "capability", nv.nvmlDeviceGetCudaComputeCapability, h)
    dev["capability"] = list(cc) if cc is not None else None
    mem = _call(errors, "memory", nv.nvmlDeviceGetMemoryInfo, h)
    dev["memory"] = (
        {"total": int(mem.total), "free": int(mem.free), "used": int(mem.used)} if mem is not None else None
    )
    dev["power_usage_mw"] = _call(errors, "power_usage_mw", nv.nvmlDeviceGetPowerUsage, h)
    dev["power_limit_mw"] = _call(errors, "power_limit_mw", nv.nvmlDeviceGetEnforcedPowerLimit, h)
    dev["temperature_c"] = _call(
        errors, "temperature_c", nv.nvmlDeviceGetTemperature, h, getattr(nv, "NVML_TEMPERATURE_GPU", 0)
    )
    dev["clock_sm_mhz"] = _call(errors, "clock_sm_mhz", nv.nvmlDeviceGetClockInfo, h, getattr(nv, "NVML_CLOCK_SM", 1))
    dev["clock_mem_mhz"] = _call(errors, "clock_mem_mhz", nv.nvmlDeviceGetClockInfo, h, getattr(nv, "NVML_CLOCK_MEM", 2))
    dev["max_clock_mem_mhz"] = _call(
        errors, "max_clock_mem_mhz", nv.nvmlDeviceGetMaxClockInfo, h, getattr(nv, "NVML_CLOCK_MEM", 2)
    )
    dev["max_clock_sm_mhz"] = _call(
        errors, "max_clock_sm_mhz", nv.nvmlDeviceGetMaxClockInfo, h, getattr(nv, "NVML_CLOCK_SM", 1)
    )
    width = _fn(nv, "nvmlDeviceGetMemoryBusWidth")
    dev["mem_bus_width_bits"] = _call(errors, "mem_bus_width_bits", width, h) if width else None
    reasons = _fn(nv, "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")
    dev["clock_event_reasons"] = _call(errors, "clock_event_reasons", reasons, h) if reasons else None
    dev["compute_procs"] = _procs(
        nv, errors, "compute_procs", h,
        "nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses",
    )
    dev["graphics_procs"] = _procs(
        nv, errors, "graphics_procs", h,
        "nvmlDeviceGetGraphicsRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses",
    )
    return dev


_REASONS_FN = ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")


def _sample_static(nv, i, h):
    """What does not change during a sample: name, enforced limit, top SM clock."""
    errors = {}
    dev = {"index": i, "errors": errors}
    dev["name"] = _call(errors, "name", nv.nvmlDeviceGetName, h)
    dev["power_limit_mw"] = _call(errors, "power_limit_mw", nv.nvmlDeviceGetEnforcedPowerLimit, h)
    dev["max_clock_sm_mhz"] = _call(
        errors, "max_clock_sm_mhz", nv.nvmlDeviceGetMaxClockInfo, h, getattr(nv, "NVML_CLOCK_SM", 1)
    )
    return dev


#: clock-event counters (microseconds since the driver loaded) by NVML field id;
#: the names are nvidia-smi's ``clocks_event_reasons_counters.*`` suffixes. Older
#: bindings lack the 269-271 names, so the numbers are used (NVML-COUNTERS.md).
COUNTER_FIELDS = (
    (74, "sw_power_cap"),
    (76, "sync_boost"),
    (269, "sw_thermal_slowdown"),
    (270, "hw_thermal_slowdown"),
    (271, "hw_power_brake_slowdown"),
)


#: nvmlValueType_t -> the c_nvmlValue_t member holding the value (counters are 3: ullVal)
_VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def _counters(nv, i, h):
    """One GPU's clock-event counters: ``{"index", "us": {name: int}, "errors"}``.

    Each field carries its own ``nvmlReturn`` (one can be NOT_SUPPORTED while
    the others answer), so each is checked on its own."""
    errors = {}
    out = {"index": i, "us": {}, "errors": errors}
    fn = _fn(nv, "nvmlDeviceGetFieldValues")
    if fn is None:
        errors["all"] = {"name": "FunctionNotFound", "message": "not in this nvidia-ml-py"}
        return out
    values = _call(errors, "all", fn, h, [fid for fid, _ in COUNTER_FIELDS])
    if values is None:
        return out
    for (fid, name), v in zip(COUNTER_FIELDS, values):
        ret = getattr(v, "nvmlReturn", 0)
        if ret:
            err = _err_name(nv.NVMLError(ret)) if hasattr(nv, "NVMLError") else "NVMLError(%s)" % ret
            errors[name] = {"name": err, "message": "field %d" % fid}
            continue
        member = _VALUE_MEMBERS.get(getattr(v, "valueType", 3), "ullVal")
        value = getattr(getattr(v, "value", None), member, None)
        out["us"][name] = int(value) if value is not None else None
    if not errors:
        del out["errors"]
    return out


def _all_counters(nv, handles):
    return [_counters(nv, i, h) for i, h in handles]


def _sample(nv, handles, t0, lost):
    """One reading of every GPU. A GPU that answered GpuIsLost is not asked
    again (it cannot come back without a reset); later samples carry a
    ``lost`` placeholder for it, so the series says when it went."""
    out = {"t": round(_time.monotonic() - t0, 4), "gpus": []}
    reasons = _fn(nv, *_REASONS_FN)
    for i, h in handles:
        if i in lost:
            out["gpus"].append({"index": i, "lost": True})
            continue
        errors = {}
        s = {"index": i, "errors": errors}
        s["temperature_c"] = _call(errors, "temperature_c", nv.nvmlDeviceGetTemperature, h, getattr(nv, "NVML_TEMPERATURE_GPU", 0))
        s["power_usage_mw"] = _call(errors, "power_usage_mw", nv.nvmlDeviceGetPowerUsage, h)
        s["clock_sm_mhz"] = _call(errors, "clock_sm_mhz", nv.nvmlDeviceGetClockInfo, h, getattr(nv, "NVML_CLOCK_SM", 1))
        s["clock_event_reasons"] = _call(errors, "clock_event_reasons", reasons, h) if reasons else None
        margin = _fn(nv, "nvmlDeviceGetMarginTemperature")
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
    """NVML compute and graphics processes of every GPU (for G6's list during a
    long test). A pid's command line is sent the first time it is seen only."""
    procs = []
    for i, h in handles:
        if i in lost:
            continue
        for kind, names in (
            ("compute", ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses")),
            ("graphics", ("nvmlDeviceGetGraphicsRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses")),
        ):
            for p in _procs(nv, {}, kind, h, *names) or []:
                p["gpu"] = i
                p["type"] = kind
                if p["pid"] not in seen_cmd:
                    seen_cmd.add(p["pid"])
                    p["cmd"] = _cmdline(p["pid"])
                procs.append(p)
    return procs


def _handles(nv, count):
    handles = []
    for i in range(count):
        h = _call({}, "handle", nv.nvmlDeviceGetHandleByIndex, i)
        if h is not None:
            handles.append((i, h))
    return handles


def _stdin_closed(timeout):
    """Wait up to ``timeout`` s; True once the parent closed our stdin (stop)."""
    import select as _select

    try:
        ready, _, _ = _select.select([_sys.stdin], [], [], timeout)
    except (OSError, ValueError):
        _time.sleep(timeout)
        return False
    if not ready:
        return False
    try:
        return _sys.stdin.buffer.read1(65536) == b""
    except (OSError, ValueError):
        return True


def _run_sample(nv, cfg, count):
    seconds = float(cfg.get("seconds", 1.0))
    interval = max(float(cfg.get("interval", 0.1)), 0.01)
    handles = _handles(nv, count)
    data(sample_devices=[_sample_static(nv, i, h) for i, h in handles])
    begin("counters before")
    data(counters_before=_all_counters(nv, handles))
    begin("sampling", scale=1)
    lost = set()
    t0 = _time.monotonic()
    n = 0
    while True:
        event(_sample(nv, handles, t0, lost))
        n += 1
        if _time.monotonic() - t0 >= seconds or len(lost) == len(handles):
            break
        _time.sleep(interval)
    seconds_taken = round(_time.monotonic() - t0, 4)
    begin("counters after")
    data(counters_after=_all_counters(nv, [(i, h) for i, h in handles if i not in lost]))
    data(samples=n, seconds=seconds_taken)


def _run_stream(nv, cfg, count):
    """Sample until the parent closes stdin (the background sampler's stop),
    or ``max_seconds`` pass, whichever comes first."""
    interval = max(float(cfg.get("interval", 1.0)), 0.01)
    procs_every = float(cfg.get("procs_every", 5.0))
    max_seconds = float(cfg.get("max_seconds", 86400.0))
    handles = _handles(nv, count)
    data(sample_devices=[_sample_static(nv, i, h) for i, h in handles])
    data(counters_before=_all_counters(nv, handles))
    begin("streaming", scale=1)
    lost = set()
    seen_cmd = set()
    t0 = _time.monotonic()
    next_procs = 0.0
    n = 0
    while True:
        s = _sample(nv, handles, t0, lost)
        if procs_every >= 0 and s["t"] >= next_procs:
            s["procs"] = _gpu_procs(nv, handles, lost, seen_cmd)
            next_procs = s["t"] + procs_every
        event(s)
        n += 1
        if _time.monotonic() - t0 >= max_seconds or _stdin_closed(interval):
            break
    seconds_taken = round(_time.monotonic() - t0, 4)
    data(counters_after=_all_counters(nv, [(i, h) for i, h in handles if i not in lost]))
    data(samples=n, seconds=seconds_taken)


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
        data(
            driver_version=_call(errors, "driver_version", nv.nvmlSystemGetDriverVersion),
            nvml_version=_call(errors, "nvml_version", nv.nvmlSystemGetNVMLVersion),
            cuda_driver_version=_call(
                errors, "cuda_driver_version",
                _fn(nv, "nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"),
            ),
            device_count=count,
            system_errors=errors,
        )
        if cfg.get("mode") == "sample":
            _run_sample(nv, cfg, count)
        elif cfg.get("mode") == "stream":
            _run_stream(nv, cfg, count)
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
