#!/usr/bin/env bash
# The README's test command on a GPU machine, in the machine image's own
# environment, as a user with a GPU would run it (issue 20):
#
#   bash benchmarks/gpu_suite.sh
#
# The project is installed with `pip install -e ".[test]"` into the image's
# python3; where the machine cannot reach a package index, the wheels it lacks
# are carried in .whl/ (pip then installs with --no-index --find-links .whl).
# Nothing of the image is changed or unset first: its TORCH_CUDA_ARCH_LIST,
# /.dockerenv, other pytest plugins and real libraries are what the suite must
# live with. The log, the JUnit XML and the facts go to $OUT (or .gpu/out).
set -uo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
DEST=${OUT:-$REPO/.gpu/out}
mkdir -p "$DEST"

{
  nvidia-smi -L; uname -r; python3 --version
  python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.is_available())'
  env | grep -E '^(TORCH_CUDA_ARCH_LIST|NVIDIA_|CUDA_VERSION|NCCL_)' | sort
  ls -la /.dockerenv 2>&1
} >"$DEST/facts.txt" 2>&1
cat "$DEST/facts.txt"

find_links=()
if ls .whl/*.whl >/dev/null 2>&1; then find_links=(--no-index --find-links .whl); fi
python3 -m pip install -q "${find_links[@]}" -e ".[test]" >"$DEST/pip_install.txt" 2>&1 \
  || { echo "gpu_suite: pip install failed"; tail -20 "$DEST/pip_install.txt"; exit 1; }
python3 -m pip list 2>/dev/null | grep -i -E '^pytest|^xdist|^hypothesis|^anyio' >>"$DEST/facts.txt"

# --- the README's test command ---------------------------------------------
python3 -m pytest -n auto -rfE --junitxml="$DEST/suite.xml" >"$DEST/suite.log" 2>&1
status=$?
grep -E '^(FAILED|ERROR)' "$DEST/suite.log" | cut -c1-300 | head -80
tail -3 "$DEST/suite.log"
echo "gpu_suite: pytest exit $status"
exit $status
