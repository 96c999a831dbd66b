# Triton compile child (G7): compile one trivial @triton.jit kernel for the CUDA target
# capability 121 (GB10) without launching it, so the ptxas Triton would run on a Spark is
# exercised on any machine (another GPU, or none). The caller sets TRITON_CACHE_DIR to a
# temporary folder, so the user's cache is neither read nor polluted. Also reads whether the
# CPython headers Triton's launcher build needs (Python.h) are there.
import sysconfig as _sysconfig

_MAX_ERROR = 2000


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


def _source(triton, compiler, fn):
    """The ASTSource of ``fn``: names as signature keys (Triton >= 3.2), else indices (3.0/3.1)."""
    try:
        return compiler.ASTSource(fn=fn, signature={"x_ptr": "*fp32"}), "names"
    except (TypeError, KeyError, ValueError, AttributeError):
        return compiler.ASTSource(fn=fn, signature={0: "*fp32"}), "indices"


#: the kernel: @triton.jit reads its function's source file, which a `python -c` child has not
_KERNEL = """import triton
import triton.language as tl


@triton.jit
def preflight_store(x_ptr):
    tl.store(x_ptr, 1.0)
"""


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
        done()
        return
    data(version=getattr(triton, "__version__", None), triton_file=getattr(triton, "__file__", None))
    path, version = _ptxas(nvidia, arch)
    data(ptxas=path, ptxas_version=version)

    begin("define the kernel")
    try:
        kernel = _kernel(cfg.get("workdir") or _os.environ.get("TRITON_CACHE_DIR") or ".")
    except Exception as exc:
        data(api_error=error_text(exc))
        done()
        return

    begin("compile for cuda %d" % arch, cfg.get("compile_scale", 3))
    started = _time.monotonic()
    try:
        source, api = _source(triton, triton.compiler, kernel)
    except Exception as exc:
        data(api_error=error_text(exc))
        done()
        return
    try:
        triton.compile(source, target=GPUTarget("cuda", arch, 32))
    except Exception as exc:
        kind = type(exc)
        data(
            ok=False, api=api, seconds=round(_time.monotonic() - started, 3),
            error_type="%s.%s" % (kind.__module__, kind.__qualname__), error=str(exc)[:_MAX_ERROR],
        )
        done()
        return
    data(ok=True, api=api, seconds=round(_time.monotonic() - started, 3))
    done()
