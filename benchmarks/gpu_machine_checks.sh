#!/usr/bin/env bash
# G4, G5, G6 and the background sampler on a real NVIDIA GPU (one GPU is enough):
#   1. spark-preflight --only G4,G5,G6 --intrusive --thermal-seconds 5 on an idle GPU;
#   2. G4 and the sampler while a torch bf16 matmul loop loads the GPU, and the raw
#      NVML samples (idle and loaded) saved as test fixtures;
#   3. G5 + G6 with real second processes holding GPU memory: one whose argv is
#      `vllm serve ... --gpu-memory-utilization 0.9`, one plain CUDA process;
#   4. the G5 copy benchmark (our probe vs torch's best copy) and the real check.
#
# Usage, from the repo root:  bash benchmarks/gpu_machine_checks.sh
# Expected on the H200 (driver 580, torch 2.11+cu130) — see the lines echoed below.
# Files land in $OUT (or ./.gpu/out). Every background process is killed at the end.
set -uo pipefail

# shellcheck source=benchmarks/_gpu_env.sh
. "$(dirname "$0")/_gpu_env.sh"
BG=()
cleanup() { for p in "${BG[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT

record() {  # record <file> <what>: one NVML snapshot + a 10 s series, as G4 reads them
  "$PY" - "$1" "$2" <<'EOF'
import json, sys
from pytest_dgx_spark.probes.machine import Machine
m = Machine(timeout=10)
doc = {"what": sys.argv[2], "nvml": m.nvml(), "sample": m.nvml_sample(10.0, 0.1)}
json.dump(doc, open(sys.argv[1], "w"), indent=1, default=str)
print(f"recorded {len(doc['sample'].get('samples') or [])} samples to {sys.argv[1]}")
EOF
}

echo "== 1. idle: spark-preflight --only G4,G5,G6 --intrusive --thermal-seconds 5"
echo "   expect G4 INFO: GPU 0 NVIDIA H200: ~38 C, ~75-120 W (limit 700 W), SM ...; reasons: GpuIdle (idle); ~51 samples over 5.0 s (nvml)"
echo "   expect G5 INFO: measured ~4200 GB/s copy (read+write, 2 x 1024 MiB, median of 7) = ~88% of the 4814 GB/s theoretical peak; 3370 GB/s budget (peak 4814 GB/s, NVML 6016-bit x 3201 MHz x 2)"
echo "   expect G6 PASS: no other GPU process [NVML; N processes scanned]"
"${PRE[@]}" --only G4,G5,G6 --intrusive --thermal-seconds 5 2>&1 | tee "$OUTDIR/g456_idle.txt"
"${PRE[@]}" --only G4,G5,G6 --intrusive --thermal-seconds 5 --json > "$OUTDIR/g456_idle.json" 2>/dev/null
"${PRE[@]}" --only G5 --planned-bandwidth 4000 --workload-gb 80 2>&1 | tee -a "$OUTDIR/g456_idle.txt"
echo "   (expect G5 WARN: planned 4000 GB/s > the 3370 GB/s budget ...: a step that touches the declared 80 GiB once takes >= 0.0255 s ...)"
record "$OUTDIR/nvml_sample_idle.json" "H200 idle"

echo "== 2. under load: a bf16 matmul loop, then G4 and the sampler"
matmul_load 45 &
BG+=($!)
sleep 8
echo "   expect G4 INFO (or WARN if a thermal/brake reason fires): power several hundred W, SwPowerCap possibly named as 'at its power limit'"
"${PRE[@]}" --only G4 --thermal-seconds 10 2>&1 | tee "$OUTDIR/g4_load.txt"
record "$OUTDIR/nvml_sample_load.json" "H200 under a bf16 8192x8192 matmul loop"
"$PY" - <<'EOF' 2>&1 | tee "$OUTDIR/sampler_load.txt"
import time
from pytest_dgx_spark.sampler import GpuSampler
with GpuSampler(interval=0.25, procs_every=2.0) as s:
    time.sleep(8)
text = s.report_text()
print("\n".join(text.splitlines()[:12]))
print("...", len(text.splitlines()), "lines in all; stop:", s.summary()["stopped"])
EOF
cleanup; BG=()

echo "== 3. G5 + G6 with real processes holding GPU memory"
FAKE=$(mktemp -d)
write_fake_vllm "$FAKE/vllm"
"$PY" "$FAKE/vllm" serve Qwen/Qwen3-8B --gpu-memory-utilization 0.9 &
BG+=($!)
"$PY" -c "import time, torch; x = torch.empty(4 << 30, dtype=torch.uint8, device='cuda'); x.fill_(1); torch.cuda.synchronize(); print('plain CUDA process holds 4 GiB', flush=True); time.sleep(120)" &
BG+=($!)
for _ in $(seq 60); do
  n=$(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | grep -c .)
  [ "$n" -ge 2 ] && break
  sleep 1
done
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv | tee "$OUTDIR/query_apps_busy.csv"
echo "   expect G5 SKIP: copy probe refused: G6 sees other GPU work (pid <vllm> vLLM (cap 0.9, 8.x GiB NVML); ...)"
echo "   expect G6 FAIL: 1 other GPU process uncapped or above 0.5: pid <vllm> vLLM (cap 0.9, 8.x GiB NVML) (+1 capped or small) [NVML; ...]"
echo "   (inside a container NVML may list host pids: those show as 'GPU process (... not visible from here)' next to the vLLM found by its command line)"
"${PRE[@]}" --only G5,G6 --intrusive 2>&1 | tee "$OUTDIR/g56_busy.txt"
"${PRE[@]}" --only G5,G6 --intrusive --json > "$OUTDIR/g56_busy.json" 2>/dev/null
cleanup; BG=()
rm -rf "$FAKE"

echo "== 4. G5 copy benchmark: our probe vs the best torch copy, and the real check"
echo "   expect: ratio probe / best >= 0.9 (MET), probe GPU time ~200 ms (MET); engine: G5 INFO: measured ..."
"$PY" "$REPO/benchmarks/bench_g5_bandwidth.py" --engine 2>&1 | tee "$OUTDIR/bench_g5_bandwidth.txt"
