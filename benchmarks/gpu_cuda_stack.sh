#!/usr/bin/env bash
# G1, G2, G7 on a real NVIDIA GPU machine, the ELF-scan benchmark over its full
# environment, and real `cuobjdump --list-elf` output for G7's parser.
#
# Usage, from the repo root:  bash benchmarks/gpu_cuda_stack.sh
# Expected on the H200 (torch 2.11.0+cu130, driver CUDA 13.0, no flash-attn/Unsloth):
#   G1 PASS: torch 2.11.0+cu130 (CUDA 13.0), driver supports CUDA 13.0; all N CUDA-linked ...
#   G2 PASS: flash-attn is not installed: attention runs on PyTorch SDPA
#   G7 SKIP: not SM121: NVIDIA H200 has capability (9, 0) (from NVML) ...
# Files land in $OUT (or ./.gpu/out).
set -uo pipefail

# shellcheck source=benchmarks/_gpu_env.sh
. "$(dirname "$0")/_gpu_env.sh"

echo "== 1. spark-preflight --only G1,G2,G7"
START=$(date +%s.%N)
"${PRE[@]}" --only G1,G2,G7 2>&1 | tee "$OUTDIR/g127_lines.txt"
echo "exit code ${PIPESTATUS[0]}; wall $("$PY" -c "import time; print(round(time.time() - $START, 2))") s" | tee -a "$OUTDIR/g127_lines.txt"
"${PRE[@]}" --only G1,G2,G7 --json > "$OUTDIR/g127.json"
"$PY" - "$OUTDIR/g127.json" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
for r in doc["results"]:
    print(f"-- {r['id']} {r['status']} ({r['duration_s']} s)")
    for d in r["details"]:
        print("   ", d)
    for k, v in r["readings"].items():
        print(f"    {k} = {v['value']} {v['unit']}".rstrip())
EOF

echo "== 2. ELF scan benchmark over this environment"
# pyelftools is not installed there: a copy carried in .gpu/pylib (see the report) is used when present
BENCH_PP="$PYTHONPATH"
[ -d "$REPO/.gpu/pylib/elftools" ] && BENCH_PP="$PYTHONPATH:$REPO/.gpu/pylib"
PYTHONPATH="$BENCH_PP" "$PY" "$REPO/benchmarks/bench_elf_scan.py" --files 1000 --repeat 5 --exclude "$REPO/.gpu/pylib" 2>&1 | tee "$OUTDIR/bench_elf_scan.txt"

echo "== 3. cuobjdump --list-elf, real output for G7's parser"
CUOBJDUMP=$(command -v cuobjdump || ls /usr/local/cuda/bin/cuobjdump 2>/dev/null || true)
if [ -z "$CUOBJDUMP" ]; then
  echo "cuobjdump not found" | tee "$OUTDIR/cuobjdump.txt"
else
  "$CUOBJDUMP" --version | tail -2 | tee "$OUTDIR/cuobjdump_version.txt"
  NVCC=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
  if [ -n "$NVCC" ]; then
    # a tiny fatbin with the targets G7 reasons about (sm_121a needs CUDA >= 12.9)
    W=$(mktemp -d /tmp/g7.XXXXXX)
    printf '__global__ void k(float *x) { x[threadIdx.x] *= 2.0f; }\nextern "C" void launch(float *x) { k<<<1, 32>>>(x); }\n' > "$W/k.cu"
    "$NVCC" -shared -Xcompiler -fPIC -o "$W/libg7demo.so" "$W/k.cu" \
      -gencode arch=compute_90a,code=sm_90a -gencode arch=compute_120a,code=sm_120a \
      -gencode arch=compute_121a,code=sm_121a -gencode arch=compute_120f,code=sm_120f \
      -gencode arch=compute_120,code=compute_120 2>&1 | tail -3
    if [ -f "$W/libg7demo.so" ]; then
      "$CUOBJDUMP" --list-elf "$W/libg7demo.so" | tee "$OUTDIR/cuobjdump_list_elf_g7demo.txt"
      "$PY" -c "
import subprocess, sys
from pytest_dgx_spark.checks.g07_nvfp4.check import parse_cuobjdump
out = subprocess.run([sys.argv[1], '--list-elf', sys.argv[2]], capture_output=True, text=True, timeout=60).stdout
print('parsed targets:', parse_cuobjdump(out))
" "$CUOBJDUMP" "$W/libg7demo.so" | tee -a "$OUTDIR/cuobjdump_list_elf_g7demo.txt"
    fi
    rm -rf "$W"
  fi
  # a real library from the environment (the smallest torch/nvidia .so with device code)
  SITE=$("$PY" -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))')
  for lib in $(find "$SITE/torch/lib" "$SITE/nvidia" -name '*.so*' -type f -size -200M 2>/dev/null | xargs ls -S 2>/dev/null | tail -n 20); do
    if timeout 60 "$CUOBJDUMP" --list-elf "$lib" > "$OUTDIR/cuobjdump_real.txt" 2>&1 && grep -q "ELF file" "$OUTDIR/cuobjdump_real.txt"; then
      echo "$lib" | tee "$OUTDIR/cuobjdump_real_lib.txt"
      head -20 "$OUTDIR/cuobjdump_real.txt"
      break
    fi
  done
fi
