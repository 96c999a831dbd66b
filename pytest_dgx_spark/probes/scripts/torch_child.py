# torch probe child: torch is imported once per run, here, for G1, G2, G5 and G7. Steps report
# as they go, so a crash in one (a SIGSEGV on the first kernel) leaves the facts gathered before.
import ctypes as _ctypes
import importlib as _importlib
import importlib.util as _util
import re as _re


def _cuda_facts(torch):
    facts = {"cuda_available": False}
    try:
        facts["arch_list"] = list(torch.cuda.get_arch_list())
    except Exception as exc:
        facts["arch_list_error"] = error_text(exc)
    try:
        facts["cuda_available"] = bool(torch.cuda.is_available())
        facts["device_count"] = int(torch.cuda.device_count())
        if facts["cuda_available"] and facts["device_count"]:
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


def _version_without_import():
    """torch's version and CUDA from torch/version.py, without importing torch."""
    spec = _util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return data(torch_import_error="ModuleNotFoundError: No module named 'torch'")
    folder = list(spec.submodule_search_locations)[0]
    try:
        with open(_os.path.join(folder, "version.py"), encoding="utf-8") as fh:
            text = fh.read(65536)
    except OSError as exc:
        return data(torch_import_error="cannot read torch/version.py: " + error_text(exc))
    found = {}
    for key in ("__version__", "cuda"):
        m = _re.search(r"^" + key + r"\s*(?::[^=]*)?=\s*(.+?)\s*$", text, _re.M)
        value = m.group(1).strip() if m else "None"
        found[key] = None if value == "None" else value.strip("'\"")
    data(torch_version=found["__version__"] or "", torch_cuda=found["cuda"], torch_imported=False,
         torch_file=_os.path.join(folder, "__init__.py"), cuda_available=False, device_count=0)


def _import_torch():
    begin("import torch", scale=3)
    try:
        import torch

        return torch, None
    except BaseException as exc:
        return None, exc


def main():
    cfg = config()
    imported = None
    if cfg.get("early"):  # started before the request: import torch (the slow part), then read it
        imported = _import_torch()
        begin("wait for the request")
        cfg = request()
    if cfg.get("import_torch") is False:
        begin("read torch's version")
        _version_without_import()
        return done()
    torch, exc = imported or _import_torch()
    if torch is None:
        data(torch_import_error=error_text(exc))
        return done()
    torch_cuda = getattr(getattr(torch, "version", None), "cuda", None)
    try:
        cudnn = torch.backends.cudnn.version()
    except Exception:
        cudnn = None
    data(torch_version=str(getattr(torch, "__version__", "")), torch_cuda=torch_cuda,
         torch_file=getattr(torch, "__file__", None), cudnn_version=cudnn)
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
    # extension objects last: the likeliest to kill the process (a constructor in a CUDA 12 module)
    if cfg.get("flash_attn"):
        step_flash_attn(torch, cfg["flash_attn"], cuda)
    _load_objects(cfg.get("load") or [], torch_cuda, cuda.get("capability"))
    done()
    # no interpreter teardown: an extension's threads would outlive "done", and a CUDA context
    # torn down on a broken driver can crash after every answer is in
    _sys.stdout.flush()
    _os._exit(0)


def _pick_variant(members, torch_cuda):
    """The build a per-CUDA-version package loads for torch's CUDA (bitsandbytes' ``_cuda130``):
    the exact version, else the newest of the same major not above it, else the newest of it."""
    try:
        major, minor = (int(x) for x in str(torch_cuda).split(".")[:2])
    except ValueError:
        return None
    want = major * 10 + minor
    same = sorted((m for m in members if int(m.get("tag", 0)) // 10 == major), key=lambda m: int(m["tag"]))
    exact = [m for m in same if int(m["tag"]) == want]
    below = [m for m in same if int(m["tag"]) <= want]
    return (exact or below or same or [None])[-1]


def _pick_arch(members, capability):
    """Of builds per GPU arch (``sm90/``, ``sm100/``), the newest not above the GPU's; else the first."""
    try:
        cap = int(capability[0]) * 10 + int(capability[1])
    except (TypeError, ValueError, IndexError):
        cap = None
    fitting = [m for m in members if isinstance(m.get("sm"), int) and (cap is None or m["sm"] <= cap)]
    return max(fitting, key=lambda m: m["sm"]) if cap is not None and fitting else members[0]


def _dlopen(path):
    try:
        _ctypes.CDLL(path, mode=_os.RTLD_NOW | _os.RTLD_LOCAL)
        return {"ok": True}
    except OSError as exc:
        return {"ok": False, "error": str(exc).strip()[:600]}


def _import(name):
    try:
        _importlib.import_module(name)
        return {"ok": True}
    except BaseException as exc:
        return {"ok": False, "error": error_text(exc)}


def _load_objects(entries, torch_cuda, capability=None):
    """G1's dynamic half: ``dlopen(RTLD_NOW | RTLD_LOCAL)`` each CUDA- or libtorch-linked object
    after torch: every DT_NEEDED library and symbol resolves as on import, without the packages'
    Python. Of per-CUDA (or per-arch) builds only the one it would pick is loaded; a failure is
    retried once its package is imported (it may preload a library); a segfault names this step."""
    groups, skip, variants = {}, set(), {}
    for e in entries:
        if e.get("group"):
            groups.setdefault(e["group"], []).append(e)
    for group, members in groups.items():
        tagged = any("tag" in m for m in members)
        chosen = _pick_variant(members, torch_cuda) if tagged else _pick_arch(members, capability)
        variants[group] = (chosen or {}).get("path")
        skip.update(m.get("path") for m in members if m is not chosen)
    data(variants=variants)
    failed, imported, done_count = {}, {}, 0
    for e in entries:
        path = e.get("path")
        if not isinstance(path, str) or path in skip:
            continue
        begin("load " + str(e.get("name") or path), scale=2)
        outcome = _dlopen(path)
        module = e.get("module")
        if not outcome["ok"] and module:
            if module not in imported:
                begin("import " + module, scale=3)
                imported[module] = _import(module)
            outcome["import"] = imported[module]
            if imported[module]["ok"]:
                outcome["retry_ok"] = _dlopen(path)["ok"]
        done_count += 1
        if outcome["ok"]:
            data(loaded=done_count)
        else:
            failed[path] = outcome
            data(loaded=done_count, load_failed=failed)
