# torch probe child: torch is imported once per run, here, for G1, G2, G5 and G7.
# Steps report as they go, so a crash in one (a SIGSEGV on the first kernel,
# an `undefined symbol` in an extension) still leaves the facts gathered before it.
import importlib as _importlib


def _cuda_facts(torch):
    facts = {"cuda_available": False}
    try:
        facts["arch_list"] = list(torch.cuda.get_arch_list())
    except Exception as exc:
        facts["arch_list_error"] = error_text(exc)
    try:
        facts["cuda_available"] = bool(torch.cuda.is_available())
        facts["device_count"] = int(torch.cuda.device_count())
    except Exception as exc:
        facts["cuda_error"] = error_text(exc)
        return facts
    if facts["cuda_available"] and facts["device_count"]:
        try:
            facts["capability"] = list(torch.cuda.get_device_capability(0))
            facts["device_name"] = torch.cuda.get_device_name(0)
            props = torch.cuda.get_device_properties(0)
            facts["is_integrated"] = bool(getattr(props, "is_integrated", False))
            facts["total_memory"] = int(getattr(props, "total_memory", 0))
        except Exception as exc:
            facts["cuda_error"] = error_text(exc)
    return facts


def _tiny_kernel(torch):
    x = torch.arange(8, device="cuda", dtype=torch.float32)
    total = float((x * 2).sum().item())
    torch.cuda.synchronize()
    return {"ok": total == 56.0, "value": total}


def main():
    cfg = config()
    begin("import torch", scale=3)
    try:
        import torch
    except BaseException as exc:
        data(torch_import_error=error_text(exc))
        done()
        return
    facts = {
        "torch_version": str(getattr(torch, "__version__", "")),
        "torch_cuda": getattr(getattr(torch, "version", None), "cuda", None),
        "torch_file": getattr(torch, "__file__", None),
    }
    try:
        facts["cudnn_version"] = torch.backends.cudnn.version()
    except Exception:
        facts["cudnn_version"] = None
    data(**facts)
    begin("cuda init", scale=2)
    cuda = _cuda_facts(torch)
    data(**cuda)
    if cuda.get("cuda_available") and cfg.get("kernel", True):
        begin("tiny kernel", scale=2)
        try:
            data(kernel=_tiny_kernel(torch))
        except Exception as exc:
            data(kernel={"ok": False, "error": error_text(exc)})
    if cfg.get("bandwidth"):
        step_bandwidth(torch, cfg["bandwidth"], cuda)
    # Extension imports come last: they are the likeliest to kill the process
    # (a SIGSEGV in a CUDA 12 module), and facts gathered before survive.
    extensions = {}
    if cfg.get("flash_attn"):
        outcome = step_flash_attn(torch, cfg["flash_attn"], cuda)
        if outcome is not None:
            extensions["flash_attn"] = outcome
            data(extensions=extensions)
    _import_extensions(cfg.get("extensions", []), extensions)
    done()
    # Skip interpreter teardown: threads an extension started would keep the
    # child alive past "done", and a CUDA context torn down on a broken driver
    # can crash after every answer is in.
    _sys.stdout.flush()
    _os._exit(0)


def _import_extensions(names, extensions):
    """G1's dynamic half: import each installed CUDA extension package.

    An ``undefined symbol`` or a missing ``libcudart.so.12`` is an exception
    (recorded); a segfault kills the child, and the parent names this step.
    """
    for name in names:
        if name in extensions or not isinstance(name, str):
            continue
        begin("import " + name, scale=3)
        try:
            mod = _importlib.import_module(name)
            extensions[name] = {
                "ok": True,
                "version": str(getattr(mod, "__version__", "") or ""),
                "file": str(getattr(mod, "__file__", "") or ""),
            }
        except BaseException as exc:
            extensions[name] = {"ok": False, "error": error_text(exc), "type": type(exc).__name__}
        data(extensions=extensions)
