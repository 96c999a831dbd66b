#!/usr/bin/env bash
# Verification on a real NVIDIA GPU machine, in one go (the device time is scarce).
#
#   bash benchmarks/gpu_verify.sh [quick|full|final]
#
# quick: the preflight through pytest, the CLI, xdist and --intrusive;
# full:  quick + G1/G2/G7 and G4/G5/G6 deep dives, the G1 fail demo and the
#        test suite;
# final: quick + the test suite.
# Every mode runs the speed benchmark (benchmarks/bench_speed.py: issue 10's
# targets in one table); its comparison with the seed's preflight.sh runs when
# .gpu/seed/preflight.sh is there (FRESH=1: the machine was started for this
# run; COLD=1: also with the page cache dropped before each run; SKIP_BENCH=1:
# not at all). G10's NCCL all-reduce runs when the machine has two GPUs or more.
#
# Expects python3 with torch (+CUDA), pytest, nvidia-ml-py and psutil. Test-only
# wheels the machine lacks may be carried in .whl/ (installed into /tmp/site).
# Every step has its own time limit; everything it writes is packed into
# $OUT/gpu_verify.tar.gz (or ./.gpu/out when $OUT is unset), with session.log.
set -uo pipefail

MODE=${1:-full}
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
DEST=${OUT:-$REPO/.gpu/out}
R=$(mktemp -d /tmp/gpu_verify.XXXXXX)
mkdir -p "$DEST"
exec > >(tee "$R/session.log") 2>&1
START=$(date +%s)

if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$R/pip_install.txt" 2>&1 || echo "editable install failed: see pip_install.txt"
export PATH="$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

step() {  # step <name> <seconds> <command...>: run with a limit, log rc and wall time
  local name=$1 limit=$2; shift 2
  local t0; t0=$(date +%s.%N)
  echo; echo "=================== $name (limit ${limit}s, at +$(( $(date +%s) - START ))s)"
  mkdir -p "$R/$name"
  OUT="$R/$name" timeout -k 5 "$limit" "$@"
  local rc=$?
  echo "--- $name: rc=$rc wall=$(python3 -c "import time; print(round(time.time() - $t0, 2))") s"
  tar czf "$DEST/gpu_verify.tar.gz" -C "$R" . 2>/dev/null  # after every step: an outer kill loses nothing
}

step facts 60 bash -c 'nvidia-smi; nvidia-smi -L; uname -a; python3 -c "import sys, torch, pytest, pynvml, psutil; print(sys.version); print(\"torch\", torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0)); print(\"pytest\", pytest.__version__)"; spark-preflight --version'

EMPTY=$(mktemp -d /tmp/empty.XXXXXX)
step preflight_pytest 180 bash -c "cd $EMPTY && python3 -m pytest --spark-preflight -p no:randomly -rA --junitxml=\$OUT/preflight.xml -o junit_logging=system-out --spark-report=\$OUT/env-report.json > \$OUT/pytest.txt 2>&1; echo pytest exit \$? >> \$OUT/pytest.txt; tail -30 \$OUT/pytest.txt"
step preflight_cli 120 bash -c "cd $EMPTY && { time spark-preflight; } > \$OUT/cli.txt 2>&1; echo exit \$? >> \$OUT/cli.txt; cat \$OUT/cli.txt; spark-preflight --json > \$OUT/cli.json 2>\$OUT/cli.json.err"
step preflight_xdist 180 bash -c "cd $EMPTY && python3 -m pytest --spark-preflight -n 4 -p no:randomly --junitxml=\$OUT/xdist.xml > \$OUT/xdist.txt 2>&1; echo exit \$? >> \$OUT/xdist.txt; tail -16 \$OUT/xdist.txt"
step preflight_intrusive 180 bash -c "cd $EMPTY && spark-preflight --intrusive --thermal-seconds 5 --planned-bandwidth 4000 --workload-gb 80 > \$OUT/cli_intrusive.txt 2>&1; echo exit \$? >> \$OUT/cli_intrusive.txt; cat \$OUT/cli_intrusive.txt"

SEED=$(ls "$REPO"/.gpu/seed/preflight.sh 2>/dev/null)
if [ -z "${SKIP_BENCH:-}" ]; then  # SKIP_BENCH=1: the benchmark ran on its own (first, on a fresh machine)
  step bench_speed 420 python3 benchmarks/bench_speed.py --runs ${BENCH_RUNS:-5} --plain-runs ${PLAIN_RUNS:-15} \
    ${SEED:+--seed "$SEED"} ${FRESH:+--fresh} ${COLD:+--cold}
fi
if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 2 ] && [ -f benchmarks/gpu_g10_allreduce.sh ]; then
  step g10_allreduce 240 bash benchmarks/gpu_g10_allreduce.sh
fi

if [ "$MODE" = full ]; then
  step cuda_stack 240 bash benchmarks/gpu_cuda_stack.sh
  step g1_fail_demo 180 bash benchmarks/gpu_g1_fail_demo.sh
  step machine_checks 300 bash benchmarks/gpu_machine_checks.sh
fi
if [ "$MODE" = full ] || [ "$MODE" = final ]; then
  step suite 300 bash -c 'python3 -m pytest -q -n 8 -p no:randomly -rs --timeout=120 tests > $OUT/suite.txt 2>&1; echo exit $? >> $OUT/suite.txt; tail -40 $OUT/suite.txt'
fi
echo; echo "total wall $(( $(date +%s) - START )) s"
tar czf "$DEST/gpu_verify.tar.gz" -C "$R" . && ls -la "$DEST"
