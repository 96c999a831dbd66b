# Sourced by the gpu_*.sh scripts: where the repo and the outputs are, which
# Python, and how to call the preflight (installed, or from the checkout).
REPO=$(cd "$(dirname "${BASH_SOURCE[1]}")/.." && pwd)
OUTDIR=${OUT:-$REPO/.gpu/out}
mkdir -p "$OUTDIR"
PY=${PYTHON:-python3}
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
if command -v spark-preflight >/dev/null 2>&1; then PRE=(spark-preflight); else PRE=("$PY" -m pytest_dgx_spark.cli); fi

# matmul_load SECONDS: a bf16 8192x8192 matmul loop that keeps the GPU busy
# (run it in the background: `matmul_load 60 & BG+=($!)`)
matmul_load() {
  "$PY" - "$1" <<'PYEOF'
import sys, time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn_like(a)
end = time.time() + float(sys.argv[1])
while time.time() < end:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
PYEOF
}

# write_fake_vllm FILE: a script that holds 8 GiB of GPU memory for 120 s;
# run it as `"$PY" FILE serve MODEL --gpu-memory-utilization 0.9 &`, so the
# process table shows vLLM's command line
write_fake_vllm() {
  cat > "$1" <<'PYEOF'
import time, torch
x = torch.empty(8 << 30, dtype=torch.uint8, device="cuda")
x.fill_(1)
torch.cuda.synchronize()
print("fake vllm holds 8 GiB", flush=True)
time.sleep(120)
PYEOF
}
