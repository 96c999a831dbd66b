#!/usr/bin/env bash
# The ten-check CLI of this checkout against an earlier release's, interleaved in
# one run (warm, --offline), with the seed's preflight.sh as the common baseline:
#
#   bash benchmarks/bench_against_release.sh REF [SEED] [ROUNDS]
#
# REF is a git ref of this repository (e.g. 321eeea, the 0.3.0 tree); its
# package (pytest_spark before the rename, pytest_dgx_spark after) is unpacked
# into a scratch folder. SEED is the seed's preflight.sh (optional). Prints each
# command's median, min and max and the ratios; writes the raw times to $OUT
# (or .gpu/out) as against_release.txt.
set -euo pipefail
REF=${1:?usage: bench_against_release.sh REF [SEED] [ROUNDS]}
SEED=${2:-}
ROUNDS=${3:-9}
REPO=$(cd "$(dirname "$0")/.." && pwd)
DEST=${OUT:-$REPO/.gpu/out}
mkdir -p "$DEST"
OLD=$(mktemp -d)
EMPTY=$(mktemp -d)
trap 'rm -rf "$OLD" "$EMPTY"' EXIT
git -C "$REPO" archive "$REF" | tar -x -C "$OLD" --wildcards 'pytest_spark*' 'pytest_dgx_spark*' 2>/dev/null || true
if [ -d "$OLD/pytest_dgx_spark" ]; then OLD_MOD=pytest_dgx_spark; else OLD_MOD=pytest_spark; fi
[ -d "$OLD/$OLD_MOD" ] || { echo "no package at $REF"; exit 2; }
PY=${PYTHON:-python3}
cd "$EMPTY"
commands=(old new)
[ -n "$SEED" ] && commands+=(seed)
raw="$DEST/against_release.txt"
: >"$raw"
for _ in $(seq 1 "$ROUNDS"); do
  for which in "${commands[@]}"; do
    start=$(date +%s%N)
    case $which in
      old) PYTHONPATH="$OLD" "$PY" -m "$OLD_MOD.cli" --offline >/dev/null 2>&1 || true ;;
      new) PYTHONPATH="$REPO" "$PY" -m pytest_dgx_spark.cli --offline >/dev/null 2>&1 || true ;;
      seed) bash "$SEED" >/dev/null 2>&1 || true ;;
    esac
    end=$(date +%s%N)
    echo "$which $(( (end - start) / 1000000 ))" >>"$raw"
  done
done
"$PY" - "$raw" "$REF" <<'PY'
import collections, statistics, sys
times = collections.defaultdict(list)
for line in open(sys.argv[1]):
    which, ms = line.split()
    times[which].append(int(ms) / 1000)
med = {w: statistics.median(v) for w, v in times.items()}
for w, v in times.items():
    print(f"{w:5s} median {med[w]:.3f} s  min {min(v):.3f}  max {max(v):.3f}  n={len(v)}")
print(f"new / old ({sys.argv[2]}): {med['new'] / med['old']:.2f}x")
if "seed" in med:
    print(f"old / seed {med['old'] / med['seed']:.2f}x, new / seed {med['new'] / med['seed']:.2f}x")
PY
