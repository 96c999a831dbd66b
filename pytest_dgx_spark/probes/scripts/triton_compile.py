# Triton compile child (G7): compile one trivial @triton.jit kernel for capability 121 (GB10)
# without launching it, so the ptxas Triton would run on a Spark is exercised on any machine. The
# caller points TRITON_CACHE_DIR at a temporary folder (the user's cache is neither read nor
# polluted). Also reads whether the Python.h Triton's launcher build needs is there.
import sysconfig as _sysconfig

_MAX_ERROR = 2000
#: the kernel: @triton.jit reads its function's source file, which a `python -c` child has not
_KERNEL = """import triton
import triton.language as tl


@triton.jit
def preflight_store(x_ptr):
    tl.store(x_ptr, 1.0)
"""


def _ptxas(compiler, arch):
    """(path, version) of the ptxas this Triton picks for ``arch``, across 3.2-3.6."""
    for name, args in (("get_ptxas", (arch,)), ("get_ptxas", ()), ("_path_to_binary", ("ptxas",))):
        fn = getattr(compiler, name, None)
        if fn is None:
            continue
        try:
            found = fn(*args)
        except TypeError:
            continue
        except Exception as exc:
            return None, "unknown (%s)" % error_text(exc)
        if isinstance(found, tuple) and len(found) >= 2:
            return str(found[0]), str(found[1])
        path, version = getattr(found, "path", None), getattr(found, "version", None)
        if path is not None:
            return str(path), None if version is None else str(version)
    return None, None


def _headers():
    """Where ``#include <Python.h>`` resolves when Triton builds its launcher: the interpreter's
    include folder (Triton's ``-I``), else a folder of gcc's ``CPATH`` / ``C_INCLUDE_PATH``."""
    try:
        include = _sysconfig.get_paths().get("include")
    except Exception:
        include = None
    folders = [include] + [
        p for name in ("CPATH", "C_INCLUDE_PATH") for p in (_os.environ.get(name) or "").split(_os.pathsep)
    ]
    found = next((f for f in folders if f and _os.path.isfile(_os.path.join(f, "Python.h"))), None)
    data(python_include=include, python_h=found is not None, python_h_dir=found)


def _source(compiler, fn):
    """The ASTSource of ``fn``: names as signature keys (Triton >= 3.2), else indices (3.0/3.1)."""
    try:
        return compiler.ASTSource(fn=fn, signature={"x_ptr": "*fp32"}), "names"
    except (TypeError, KeyError, ValueError, AttributeError):
        return compiler.ASTSource(fn=fn, signature={0: "*fp32"}), "indices"


def _kernel(folder):
    """``preflight_store``, imported from a file written to ``folder``."""
    import importlib.util

    path = _os.path.join(folder, "spark_preflight_kernel.py")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(_KERNEL)
    spec = importlib.util.spec_from_file_location("spark_preflight_kernel", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.preflight_store


def main():
    cfg = config()
    arch = int(cfg.get("capability", 121))
    _headers()
    begin("import triton", 3)
    try:
        import triton
        import triton.language  # noqa: F401 - the kernel's module imports it too
        from triton.backends.compiler import GPUTarget
        from triton.backends.nvidia import compiler as nvidia
    except Exception as exc:
        data(import_error=error_text(exc))
        return done()
    data(version=getattr(triton, "__version__", None), triton_file=getattr(triton, "__file__", None))
    path, version = _ptxas(nvidia, arch)
    data(ptxas=path, ptxas_version=version)
    try:
        begin("define the kernel")
        kernel = _kernel(cfg.get("workdir") or _os.environ.get("TRITON_CACHE_DIR") or ".")
        begin("compile for cuda %d" % arch, cfg.get("compile_scale", 3))
        started = _time.monotonic()
        source, api = _source(triton.compiler, kernel)
    except Exception as exc:
        data(api_error=error_text(exc))
        return done()
    try:
        triton.compile(source, target=GPUTarget("cuda", arch, 32))
        outcome = {"ok": True}
    except Exception as exc:
        kind = "%s.%s" % (type(exc).__module__, type(exc).__qualname__)
        outcome = {"ok": False, "error_type": kind, "error": str(exc)[:_MAX_ERROR]}
    data(api=api, seconds=round(_time.monotonic() - started, 3), **outcome)
    done()
