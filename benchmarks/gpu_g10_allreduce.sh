#!/usr/bin/env bash
# G10's NCCL all-reduce probe on two GPUs of one host (kind nvidia-h200-x2), under torchrun:
#   1. spark-preflight --only G10 --intrusive, 2 ranks (lines), then again with --json (readings);
#   2. pytest --spark-preflight --spark-only G10 --spark-intrusive, 2 ranks;
#   3. two torchrun agents with --nnodes 2 (one GPU each): the multi-node path and its 20 GB/s floor;
#   4. the probe against an nccl-tests-style loop in the same job (benchmarks/bench_g10_allreduce.py).
#
# Usage, from the repo root:  bash benchmarks/gpu_g10_allreduce.sh
# NVLink multicast stays off (the machine's rules): NCCL_NVLS_ENABLE=0 etc. are exported here.
# Runs in an empty folder, so no config of this repository is found. Files land in $OUT (or ./.gpu/out).
set -uo pipefail

# shellcheck source=benchmarks/_gpu_env.sh
. "$(dirname "$0")/_gpu_env.sh"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NCCL_DEBUG=${NCCL_DEBUG:-WARN} OMP_NUM_THREADS=1
RUN=("$PY" -m torch.distributed.run)
WORK=$(mktemp -d)
cd "$WORK" || exit 1

echo "== 1. torchrun --nproc-per-node 2 -m pytest_dgx_spark.cli --only G10 --intrusive"
echo "   expect on each rank: G10 PASS: rank R of 2: single node (WORLD_SIZE=2, LOCAL_WORLD_SIZE=2), no tensor"
echo "   parallelism set; all-reduce busbw ~300-400 GB/s (nccl, 2 ranks, 512 MiB) within one node (NVLink; PCIe: ~20-50)"
timeout 300 "${RUN[@]}" --nproc-per-node 2 --master-addr 127.0.0.1 --master-port 29533 \
  -m pytest_dgx_spark.cli --only G10 --intrusive 2>"$OUTDIR/g10_torchrun.err" | tee "$OUTDIR/g10_torchrun.txt"
echo "rc=${PIPESTATUS[0]}"
timeout 300 "${RUN[@]}" --nproc-per-node 2 --master-addr 127.0.0.1 --master-port 29534 \
  -m pytest_dgx_spark.cli --only G10 --intrusive --json >"$OUTDIR/g10_torchrun.json" 2>>"$OUTDIR/g10_torchrun.err"
echo "rc=$? (json: $OUTDIR/g10_torchrun.json; readings allreduce_busbw, allreduce_busbw_this_rank, nccl_version)"

echo "== 2. torchrun --nproc-per-node 2 -m pytest --spark-preflight --spark-only G10 --spark-intrusive"
echo "   expect two pytest sessions, each '1 passed' and the same G10 PASS line as in 1 (rank 1's says per-rank detail)"
timeout 300 "${RUN[@]}" --nproc-per-node 2 --master-addr 127.0.0.1 --master-port 29535 \
  -m pytest --spark-preflight --spark-only G10 --spark-intrusive -p no:randomly -p no:cacheprovider -q \
  2>>"$OUTDIR/g10_torchrun.err" | tee "$OUTDIR/g10_pytest_torchrun.txt"

echo "== 3. two agents, --nnodes 2, one GPU each (LOCAL_WORLD_SIZE=1, GROUP_WORLD_SIZE=2): the two-Spark path"
echo "   expect on each rank: '2 nodes (WORLD_SIZE=2, LOCAL_WORLD_SIZE=1)' and a busbw over NCCL's SHM/P2P transport;"
echo "   WARN only if it is below the 20 GB/s floor (then the fix names NCCL_SOCKET_IFNAME)"
for r in 0 1; do
  CUDA_VISIBLE_DEVICES=$r timeout 300 "${RUN[@]}" --nnodes 2 --node-rank $r --nproc-per-node 1 \
    --master-addr 127.0.0.1 --master-port 29536 -m pytest_dgx_spark.cli --only G10 --intrusive \
    >"$OUTDIR/g10_node$r.txt" 2>>"$OUTDIR/g10_torchrun.err" &
done
wait
cat "$OUTDIR/g10_node0.txt" "$OUTDIR/g10_node1.txt"

echo "== 4. probe vs nccl-tests-style loop (same buffer, same job): target ratio >= 0.9"
timeout 300 "${RUN[@]}" --nproc-per-node 2 --master-addr 127.0.0.1 --master-port 29537 \
  "$REPO/benchmarks/bench_g10_allreduce.py" 2>>"$OUTDIR/g10_torchrun.err" | tee "$OUTDIR/g10_bench.txt"

echo "== stderr tail (NCCL warnings, if any)"
tail -n 20 "$OUTDIR/g10_torchrun.err"
rm -rf "$WORK"
