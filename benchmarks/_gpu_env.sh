# Sourced by the gpu_*.sh scripts: where the repo and the outputs are, which
# Python, and how to call the preflight (installed, or from the checkout).
REPO=$(cd "$(dirname "${BASH_SOURCE[1]}")/.." && pwd)
OUTDIR=${OUT:-$REPO/.gpu/out}
mkdir -p "$OUTDIR"
PY=${PYTHON:-python3}
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
if command -v spark-preflight >/dev/null 2>&1; then PRE=(spark-preflight); else PRE=("$PY" -m pytest_spark.cli); fi
