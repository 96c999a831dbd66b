#!/usr/bin/env bash
# Make G1 fail for real on a CUDA 13 machine (the H200: torch 2.11.0+cu130, driver CUDA 13.0).
#
# Nothing is downloaded: gcc builds everything here.
#   1. a stub libcudart.so.12 (SONAME libcudart.so.12) — what a cu12 wheel expects;
#   2. a package "cu12-demo" whose extension module links it (-Wl,--no-as-needed),
#      installed with a .dist-info/RECORD into a --target style folder on PYTHONPATH;
#   3. the same stub installed as "nvidia-cuda-runtime-cu12" (nvidia/cuda_runtime/lib/).
# Then three runs of `spark-preflight --only G1`:
#   A. the module alone         -> FAIL naming cu12-demo and libcudart.so.12, and the import
#                                  failing with "libcudart.so.12: cannot open shared object file";
#   B. module + runtime wheel   -> FAIL (mixed majors), the import now loads the stub;
#   C. runtime wheel alone      -> WARN: a leftover libcudart.so.12 linked by nothing.
# Outputs (lines and JSON) go to $OUT (or ./.gpu/out) so they come back.
#
# Usage, from the repo root:  bash benchmarks/gpu_g1_fail_demo.sh
set -uo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
OUTDIR=${OUT:-$REPO/.gpu/out}
mkdir -p "$OUTDIR"
WORK=$(mktemp -d /tmp/g1demo.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
PY=${PYTHON:-python3}
CC=$(command -v gcc || command -v cc || true)
if [ -z "$CC" ]; then echo "no C compiler here: cannot build the demo" | tee "$OUTDIR/g1_demo.txt"; exit 2; fi

# the preflight: installed (spark-preflight on PATH) or straight from the checkout
if command -v spark-preflight >/dev/null 2>&1; then PRE=(spark-preflight); else PRE=("$PY" -m pytest_dgx_spark.cli); fi
export PYTHONPATH_BASE="$REPO${PYTHONPATH:+:$PYTHONPATH}"

EXT_SUFFIX=$("$PY" -c 'import importlib.machinery as m; print(m.EXTENSION_SUFFIXES[0])')
PYINC=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')

# 1. the stub CUDA 12 runtime
mkdir -p "$WORK/stub"
echo 'int cudaRuntimeGetVersion(int *v) { *v = 12080; return 0; }' > "$WORK/stub/cudart.c"
"$CC" -shared -fPIC -Wl,-soname,libcudart.so.12 -o "$WORK/stub/libcudart.so.12" "$WORK/stub/cudart.c" || exit 2

# 2. the cu12 package: a real extension module when Python.h exists, else a
#    ctypes-loaded library (what bitsandbytes does) — both link libcudart.so.12
make_pkg() {  # $1 = target folder
  local T=$1
  mkdir -p "$T/cu12demo"
  if [ -f "$PYINC/Python.h" ]; then
    cat > "$WORK/mod.c" <<'EOF'
#include <Python.h>
extern int cudaRuntimeGetVersion(int *);
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "_C", NULL, -1, NULL};
PyMODINIT_FUNC PyInit__C(void) { int v = 0; cudaRuntimeGetVersion(&v); return PyModule_Create(&def); }
EOF
    SO="cu12demo/_C$EXT_SUFFIX"
    "$CC" -shared -fPIC -I"$PYINC" -o "$T/$SO" "$WORK/mod.c" -Wl,--no-as-needed -L"$WORK/stub" -l:libcudart.so.12 \
      -Wl,-rpath,'$ORIGIN/../nvidia/cuda_runtime/lib' || exit 2
    printf 'from cu12demo import _C\n__version__ = "0.1"\n' > "$T/cu12demo/__init__.py"
  else
    echo 'extern int cudaRuntimeGetVersion(int *); int cu12demo_version(void) { int v = 0; cudaRuntimeGetVersion(&v); return v; }' > "$WORK/lib.c"
    SO="cu12demo/libcu12demo.so"
    "$CC" -shared -fPIC -o "$T/$SO" "$WORK/lib.c" -Wl,--no-as-needed -L"$WORK/stub" -l:libcudart.so.12 \
      -Wl,-rpath,'$ORIGIN/../nvidia/cuda_runtime/lib' || exit 2
    printf 'import ctypes, os\n_lib = ctypes.CDLL(os.path.join(os.path.dirname(__file__), "libcu12demo.so"))\n__version__ = "0.1"\n' > "$T/cu12demo/__init__.py"
  fi
  local DI="$T/cu12_demo-0.1.dist-info"
  mkdir -p "$DI"
  printf 'Metadata-Version: 2.1\nName: cu12-demo\nVersion: 0.1\n' > "$DI/METADATA"
  echo cu12demo > "$DI/top_level.txt"
  printf '%s,,\ncu12demo/__init__.py,,\n%s/METADATA,,\n%s/RECORD,,\n' "$SO" "$(basename "$DI")" "$(basename "$DI")" > "$DI/RECORD"
}

make_runtime() {  # $1 = target folder
  local T=$1 L="nvidia/cuda_runtime/lib/libcudart.so.12"
  mkdir -p "$T/nvidia/cuda_runtime/lib"
  cp "$WORK/stub/libcudart.so.12" "$T/$L"
  local DI="$T/nvidia_cuda_runtime_cu12-12.8.90.dist-info"
  mkdir -p "$DI"
  printf 'Metadata-Version: 2.1\nName: nvidia-cuda-runtime-cu12\nVersion: 12.8.90\n' > "$DI/METADATA"
  printf '%s,,\n%s/METADATA,,\n%s/RECORD,,\n' "$L" "$(basename "$DI")" "$(basename "$DI")" > "$DI/RECORD"
}

run_case() {  # $1 = name, $2 = target folder
  local name=$1 T=$2
  echo "== case $name: PYTHONPATH=$T"
  PYTHONPATH="$T:$PYTHONPATH_BASE" "${PRE[@]}" --only G1 | tee "$OUTDIR/g1_demo_$name.txt"
  echo "exit code: ${PIPESTATUS[0]}"
  PYTHONPATH="$T:$PYTHONPATH_BASE" "${PRE[@]}" --only G1 --json > "$OUTDIR/g1_demo_$name.json"
  "$PY" - "$OUTDIR/g1_demo_$name.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))["results"][0]
for d in r["details"]:
    print("   ", d)
for k, v in r["readings"].items():
    print(f"    {k} = {v['value']} {v['unit']}".rstrip())
EOF
}

A="$WORK/caseA"; make_pkg "$A"
B="$WORK/caseB"; make_pkg "$B"; make_runtime "$B"
C="$WORK/caseC"; make_runtime "$C"
{
  run_case A "$A"
  run_case B "$B"
  run_case C "$C"
} 2>&1 | tee "$OUTDIR/g1_demo.txt"
