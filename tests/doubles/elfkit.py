"""Real ELF shared objects for the CUDA ABI tests, built with gcc.

This machine has no CUDA, so the CUDA libraries are stubs — but real ones: a
``libcudart.so.12`` with that SONAME exporting ``cudaRuntimeGetVersion``, and
Python extension modules linked against it with ``-Wl,--no-as-needed``, so
their ``DT_NEEDED`` says ``libcudart.so.12`` exactly as a cu12 wheel's does,
and importing one without the library fails the way it fails on a Spark
(``libcudart.so.12: cannot open shared object file``).

Everything is built once per test session (``Kit.build``), then copied into
each test's fake site-packages (:func:`install`), which also writes the
``.dist-info`` (METADATA + RECORD) pip would, so the owning distribution is
named.
"""

from __future__ import annotations

import importlib.machinery
import shutil
import subprocess
import sysconfig
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

EXT_SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]

STUB = """
int cudaRuntimeGetVersion(int *v) {{ *v = {version}; return 0; }}
{extra}
"""

MODULE = """
#define PY_SSIZE_T_CLEAN
#include <Python.h>
{decls}
static struct PyModuleDef def = {{PyModuleDef_HEAD_INIT, "{name}", NULL, -1, NULL}};
PyMODINIT_FUNC PyInit_{name}(void) {{
    int v = 0;
    {calls}
    PyObject *m = PyModule_Create(&def);
    if (m) PyModule_AddIntConstant(m, "cuda_runtime", v);
    return m;
}}
"""


def gcc_available() -> bool:
    return shutil.which("gcc") is not None


def python_headers() -> Path | None:
    include = Path(sysconfig.get_paths()["include"])
    return include if (include / "Python.h").exists() else None


def _gcc(args: list[str]) -> None:
    done = subprocess.run(["gcc", *args], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"gcc {' '.join(args)} failed: {done.stderr.strip()[-500:]}")


def stub_library(out: Path, soname: str, version: int = 0, extra: str = "") -> Path:
    """A shared library whose SONAME is ``soname`` (the file carries that name)."""
    out.mkdir(parents=True, exist_ok=True)
    src = out / f"{soname}.c"
    src.write_text(STUB.format(version=version, extra=extra))
    target = out / soname
    _gcc(["-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(target), str(src)])
    src.unlink()
    return target


def extension(
    out: Path,
    name: str,
    libs: Iterable[Path],
    *,
    call: Iterable[str] = ("cudaRuntimeGetVersion",),
    rpath: str | None = None,
) -> Path:
    """A Python extension module ``name`` whose DT_NEEDED lists each of ``libs``
    (by SONAME, via ``-l:file``) and whose init calls ``call`` from them."""
    include = python_headers()
    if include is None:
        raise RuntimeError("Python.h not found")
    out.mkdir(parents=True, exist_ok=True)
    calls = list(call)
    decls = "\n".join(f"extern int {c}(int *);" for c in calls)
    body = "\n    ".join(f"{c}(&v);" for c in calls)
    src = out / f"{name}.c"
    src.write_text(MODULE.format(name=name, decls=decls, calls=body))
    target = out / f"{name}{EXT_SUFFIX}"
    args = ["-shared", "-fPIC", f"-I{include}", "-o", str(target), str(src), "-Wl,--no-as-needed"]
    for lib in libs:
        args += [f"-L{lib.parent}", f"-l:{lib.name}"]
    if rpath:
        args.append(f"-Wl,-rpath,{rpath}")
    _gcc(args)
    src.unlink()
    return target


@dataclass
class Kit:
    """The prebuilt objects (paths into a session-wide folder)."""

    folder: Path
    cudart12: Path
    cudart13: Path
    cublas12: Path
    cublas13: Path
    cufft12: Path
    ext12: Path  # module cu12ext: needs libcudart.so.12, calls it
    ext13: Path  # module cu13ext: needs libcudart.so.13, libcublas.so.13, libcufft.so.12
    ext13_rpath: Path  # module cu13rp: needs libcudart.so.13, RUNPATH $ORIGIN/nvidia/cu13/lib
    ext_symbol: (
        Path  # module symext: needs libcudart.so.13 and calls cudaOnlyIn131 (absent from the plain stub)
    )
    cudart13_sym: Path  # the libcudart.so.13 symext was linked against: it defines cudaOnlyIn131
    plain: Path  # module plainext: links no CUDA library

    @classmethod
    def build(cls, folder: Path) -> Kit:
        folder.mkdir(parents=True, exist_ok=True)
        libs12, libs13, sym = folder / "cu12", folder / "cu13", folder / "cu13sym"
        cudart12 = stub_library(libs12, "libcudart.so.12", 12080)
        cudart13 = stub_library(libs13, "libcudart.so.13", 13000)
        cublas12 = stub_library(libs12, "libcublas.so.12", 12080)
        cublas13 = stub_library(libs13, "libcublas.so.13", 13000)
        cufft12 = stub_library(libs13, "libcufft.so.12", 12000)  # ships inside CUDA 13 with major 12
        cudart13_sym = stub_library(sym, "libcudart.so.13", 13010, "int cudaOnlyIn131(int *v) { return 0; }")
        mods = folder / "modules"
        return cls(
            folder=folder,
            cudart12=cudart12,
            cudart13=cudart13,
            cublas12=cublas12,
            cublas13=cublas13,
            cufft12=cufft12,
            ext12=extension(mods, "cu12ext", [cudart12]),
            ext13=extension(mods, "cu13ext", [cudart13, cublas13, cufft12]),
            ext13_rpath=extension(mods, "cu13rp", [cudart13], rpath="$ORIGIN/nvidia/cu13/lib"),
            ext_symbol=extension(
                mods, "symext", [cudart13_sym], call=["cudaRuntimeGetVersion", "cudaOnlyIn131"]
            ),
            cudart13_sym=cudart13_sym,
            plain=extension(mods, "plainext", [], call=[]),
        )


def install(
    site: Path,
    dist: str,
    version: str,
    files: Mapping[str, Path | bytes | str],
    *,
    top_level: str | None = None,
) -> dict[str, Path]:
    """Install ``files`` (relative path -> a built object to copy, or content)
    into ``site`` as distribution ``dist``, with the dist-info pip writes."""
    site.mkdir(parents=True, exist_ok=True)
    placed: dict[str, Path] = {}
    for rel, source in files.items():
        target = site / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(source, Path):
            shutil.copyfile(source, target)
        elif isinstance(source, bytes):
            target.write_bytes(source)
        else:
            target.write_text(source)
        placed[rel] = target
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "INSTALLER").write_text("pip\n")
    if top_level:
        (info / "top_level.txt").write_text(top_level + "\n")
    record = [f"{rel},sha256=x,1" for rel in files]
    record += [f"{info.name}/{n}," for n in ("METADATA", "INSTALLER", "RECORD")]
    (info / "RECORD").write_text("\n".join(record) + "\n")
    return placed


_BUILT: dict[str, Kit] = {}


def session_kit(base: Path) -> Kit:
    """One build per test process (several test modules share it)."""
    key = str(base)
    if key not in _BUILT:
        _BUILT[key] = Kit.build(base / "elfkit")
    return _BUILT[key]
