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


def _sample(nv, handles, t0):
    out = {"t": round(_time.monotonic() - t0, 4), "gpus": []}
    for i, h in handles:
        errors = {}
        s = {"index": i, "errors": errors}
        s["temperature_c"] = _call(errors, "temperature_c", nv.nvmlDeviceGetTemperature, h, getattr(nv, "NVML_TEMPERATURE_GPU", 0))
        s["power_usage_mw"] = _call(errors, "power_usage_mw", nv.nvmlDeviceGetPowerUsage, h)
        s["clock_sm_mhz"] = _call(errors, "clock_sm_mhz", nv.nvmlDeviceGetClockInfo, h, getattr(nv, "NVML_CLOCK_SM", 1))
        reasons = _fn(nv, "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")
        s["clock_event_reasons"] = _call(errors, "clock_event_reasons", reasons, h) if reasons else None
        if not errors:
            del s["errors"]
        out["gpus"].append(s)
    return out


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
            seconds = float(cfg.get("seconds", 1.0))
            interval = max(float(cfg.get("interval", 0.1)), 0.01)
            handles = []
            for i in range(count):
                h = _call({}, "handle", nv.nvmlDeviceGetHandleByIndex, i)
                if h is not None:
                    handles.append((i, h))
            begin("sampling", scale=1)
            t0 = _time.monotonic()
            n = 0
            while True:
                event(_sample(nv, handles, t0))
                n += 1
                if _time.monotonic() - t0 >= seconds:
                    break
                _time.sleep(interval)
            data(samples=n, seconds=round(_time.monotonic() - t0, 4))
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
