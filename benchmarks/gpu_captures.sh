#!/usr/bin/env bash
# Four captures of a real NVIDIA GPU machine, for tests/data/captures/ (one GPU is enough):
#   h200-healthy.json.gz  the machine as it is;
#   h200-cu12.json.gz     with a gcc-built extension linked to a stub libcudart.so.12 on PYTHONPATH;
#   h200-vllm.json.gz     with a fake `vllm serve --gpu-memory-utilization 0.9` holding 8 GiB;
#   h200-load.json.gz     while a bf16 matmul loop loads the GPU (G4 sampled for 5 s).
# Each run's ten lines, and each capture replayed right here, go to captures.txt.
#
# Usage, from the repo root:  bash benchmarks/gpu_captures.sh
# Files land in $OUT (or ./.gpu/out). Every background process is killed at the end.
set -uo pipefail

# shellcheck source=benchmarks/_gpu_env.sh
. "$(dirname "$0")/_gpu_env.sh"
BG=()
WORK=$(mktemp -d /tmp/captures.XXXXXX)
cleanup() { for p in "${BG[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap 'cleanup; rm -rf "$WORK"' EXIT
LOG="$OUTDIR/captures.txt"
: > "$LOG"

capture() {  # capture <name> [options...]: run, capture, replay the capture, compare
  local name=$1; shift
  local file="$OUTDIR/$name.json.gz"
  echo "== $name: spark-preflight --offline $*" | tee -a "$LOG"
  "${PRE[@]}" --offline --capture "$file" "$@" > "$WORK/$name.run" 2>&1
  echo "exit $?" >> "$WORK/$name.run"
  cat "$WORK/$name.run" >> "$LOG"
  env -i PATH= PYTHONPATH="$PYTHONPATH" "$(command -v "$PY")" -m pytest_dgx_spark.cli --replay "$file" > "$WORK/$name.replay" 2>&1
  echo "exit $?" >> "$WORK/$name.replay"
  if cmp -s "$WORK/$name.run" "$WORK/$name.replay"; then
    echo "   replay with an empty PATH: the same lines and exit code" | tee -a "$LOG"
  else
    echo "   replay DIFFERS:" | tee -a "$LOG"
    diff "$WORK/$name.run" "$WORK/$name.replay" | tee -a "$LOG"
  fi
}

capture h200-healthy

# a package whose extension module links libcudart.so.12 (what a cu12 wheel ships)
CC=$(command -v gcc || command -v cc)
PYINC=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
EXT=$("$PY" -c 'import importlib.machinery as m; print(m.EXTENSION_SUFFIXES[0])')
mkdir -p "$WORK/stub" "$WORK/site/cu12demo" "$WORK/site/cu12_demo-0.1.dist-info"
echo 'int cudaRuntimeGetVersion(int *v) { *v = 12080; return 0; }' > "$WORK/stub/cudart.c"
"$CC" -shared -fPIC -Wl,-soname,libcudart.so.12 -o "$WORK/stub/libcudart.so.12" "$WORK/stub/cudart.c"
cat > "$WORK/mod.c" <<'EOF'
#include <Python.h>
extern int cudaRuntimeGetVersion(int *);
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "_C", NULL, -1, NULL};
PyMODINIT_FUNC PyInit__C(void) { int v = 0; cudaRuntimeGetVersion(&v); return PyModule_Create(&def); }
EOF
"$CC" -shared -fPIC -I"$PYINC" -o "$WORK/site/cu12demo/_C$EXT" "$WORK/mod.c" -Wl,--no-as-needed \
  -L"$WORK/stub" -l:libcudart.so.12
printf 'from cu12demo import _C\n__version__ = "0.1"\n' > "$WORK/site/cu12demo/__init__.py"
printf 'Metadata-Version: 2.1\nName: cu12-demo\nVersion: 0.1\n' > "$WORK/site/cu12_demo-0.1.dist-info/METADATA"
echo cu12demo > "$WORK/site/cu12_demo-0.1.dist-info/top_level.txt"
printf 'cu12demo/_C%s,,\ncu12demo/__init__.py,,\ncu12_demo-0.1.dist-info/METADATA,,\n' "$EXT" \
  > "$WORK/site/cu12_demo-0.1.dist-info/RECORD"
PYTHONPATH="$WORK/site:$PYTHONPATH" capture h200-cu12

# a fake vLLM server holding 8 GiB, started with vLLM's flags
write_fake_vllm "$WORK/vllm"
"$PY" "$WORK/vllm" serve Qwen/Qwen3-8B --gpu-memory-utilization 0.9 --api-key NOT-A-REAL-KEY-0123 &
BG+=($!)
for _ in $(seq 60); do
  n=$(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | grep -c .)
  [ "$n" -ge 1 ] && break
  sleep 1
done
capture h200-vllm --intrusive
if zcat "$OUTDIR/h200-vllm.json.gz" | grep -q NOT-A-REAL-KEY; then
  echo "   the vLLM's --api-key value IS in the capture" | tee -a "$LOG"
else
  echo "   the vLLM's --api-key value is not in the capture" | tee -a "$LOG"
fi
cleanup; BG=()

# under load: a bf16 matmul loop
matmul_load 60 &
BG+=($!)
sleep 8
capture h200-load --thermal-seconds 5
cleanup; BG=()
