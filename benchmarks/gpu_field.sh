#!/usr/bin/env bash
# Issues 22 and 23 on a real NVIDIA GPU machine, in one call (device time is scarce):
#
#   bash benchmarks/gpu_field.sh
#
# the suite as a GPU user runs it (gpu_suite.sh), the preflight live with the new
# readings (kernel log, buddyinfo, cgroup, driver stack, the image's CUDA floor,
# G7's Triton compile for sm_121a), a capture of it, diagnose on this machine,
# G7's Triton recording and the speed benchmark (.gpu/seed/preflight.sh: the seed).
# Everything goes to $OUT (or .gpu/out).
set -uo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
DEST=${OUT:-$REPO/.gpu/out}
mkdir -p "$DEST"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
START=$(date +%s)
step() {  # step <name> <seconds> <command...>
  local name=$1 limit=$2; shift 2
  echo; echo "=== $name (limit ${limit}s, at +$(( $(date +%s) - START ))s)"
  timeout -k 5 "$limit" "$@"; echo "--- $name: rc=$?"
}
step suite 300 bash benchmarks/gpu_suite.sh
export PATH="$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH"
EMPTY=$(mktemp -d /tmp/field.XXXXXX)
step cli 90 bash -c "cd $EMPTY && spark-preflight -v --offline --report $DEST/env-report.json --capture $DEST/h200-field.json.gz > $DEST/cli_v.txt 2>&1; echo exit \$? >> $DEST/cli_v.txt; grep -E '^G[0-9]+ |^verdict|kernel|Xid|buddy|blocks|cgroup|triton|ptxas|image|module|cma|shm|oom|low-power|util' $DEST/cli_v.txt | cut -c1-240 | head -80"
step pytest 90 bash -c "cd $EMPTY && python3 -m pytest -p no:randomly --spark-preflight spark_preflight --spark-offline -rA --junitxml=$DEST/junit.xml > $DEST/pytest.txt 2>&1; echo exit \$? >> $DEST/pytest.txt; tail -16 $DEST/pytest.txt"
step intrusive 120 bash -c "cd $EMPTY && spark-preflight --offline --intrusive --thermal-seconds 5 --only G4,G5 -v > $DEST/intrusive.txt 2>&1; echo exit \$? >> $DEST/intrusive.txt; grep -E '^G4|^G5|util|low-power|clock|verdict' $DEST/intrusive.txt | cut -c1-240 | head -20"
step kernel_log 30 python3 -c "
from pytest_dgx_spark.probes.machine import Machine
from pytest_dgx_spark.probes import kernel_log as k
log = Machine().kernel_log(); recs = k.records(log)
print('source', log.get('source'), 'records', len(recs), 'cut', log.get('cut'), 'problems', log.get('problems'), 'denied', log.get('denied'), 'seconds', log.get('seconds'))
print('xids', len(k.xids(recs)), 'oom kills', len(k.oom_kills(recs)))
for r in recs[-5:]: print(' ', r.seq, r.seconds, r.text[:150])"
step triton 120 bash -c "python3 tests/data/triton/record.py python3 > $DEST/compile_sm121_h200.json; head -c 1500 $DEST/compile_sm121_h200.json; echo; python3 -m pytest -p no:randomly -s -q tests/test_g07_triton_fp8.py -k real_triton 2>&1 | tail -8"
step diagnose 90 bash -c "cd $EMPTY && spark-preflight diagnose --offline -v $REPO/tests/data/gb10/error_cuda12_abi_1.txt > $DEST/diagnose.txt 2>&1; echo exit \$? >> $DEST/diagnose.txt; cut -c1-200 $DEST/diagnose.txt | tail -25"
if [ -f .gpu/seed/preflight.sh ] && [ $(( $(date +%s) - START )) -lt 330 ]; then
  step bench 200 python3 benchmarks/bench_speed.py --seed .gpu/seed/preflight.sh --runs 5 --plain-runs 9 --offline
fi
echo "gpu_field: done at +$(( $(date +%s) - START ))s"
