#!/usr/bin/env bash
# spark-preflight watch on a GPU (issue 32): a 3-minute bf16 matmul loop under
# `spark-preflight watch --interval 1 --timeline t.jsonl`, a second CUDA process started at
# minute 1 (it holds 2 GiB for 60 s and computes nothing, so it does not slow the loop): the
# watcher must print a G6 new-process event at that time, and its cleared event a minute later.
# The loop's median step time with the watcher is compared with the same loop without it, run
# before and after (60 s each, bracketing any thermal drift): the ratio should be <= 1.01.
# Prints the events, the timeline's size and the ratio; the timeline, the watcher's stderr and
# the numbers go to $OUT (or ./.gpu/out). About 5-6 minutes of wall time.
#
# Usage, from the repo root:  bash benchmarks/gpu_watch.sh
set -uo pipefail
source "$(dirname "$0")/_gpu_env.sh"
WORK=$(mktemp -d /tmp/gpuwatch.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
WATCH_S=${WATCH_S:-180}
BASE_S=${BASE_S:-60}
SECOND_AT=${SECOND_AT:-60}

cat > "$WORK/loop.py" <<'PYEOF'
# a bf16 matmul loop: each step 10 matmuls of 8192x8192 and a sync; the median step time (ms)
# of the steps after a 5 s warm-up, as one JSON line at the end
import json, statistics, sys, time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn_like(a)
begin = time.perf_counter()
end, steps = begin + float(sys.argv[1]), []
while (now := time.perf_counter()) < end:
    for _ in range(10):
        c = a @ b
    torch.cuda.synchronize()
    if now - begin > 5:
        steps.append(time.perf_counter() - now)
print(json.dumps({"median_ms": 1000 * statistics.median(steps), "steps": len(steps)}), flush=True)
PYEOF
cat > "$WORK/second.py" <<'PYEOF'
import time, torch
x = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
x.fill_(1)
torch.cuda.synchronize()
time.sleep(60)
PYEOF

median() { "$PY" -c 'import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])["median_ms"])'; }

echo "== baseline 1: the loop alone, ${BASE_S} s"
B1=$("$PY" "$WORK/loop.py" "$BASE_S" | median)
echo "median step ${B1} ms"

echo "== watched: the loop under spark-preflight watch --interval 1, ${WATCH_S} s; a second CUDA process at ${SECOND_AT} s"
START=$(date +%s.%N)
"${PRE[@]}" watch --interval 1 --timeline "$WORK/t.jsonl" -- "$PY" "$WORK/loop.py" "$WATCH_S" \
  > "$WORK/watched.out" 2> "$WORK/watched.err" &
WATCHER=$!
sleep "$SECOND_AT"
SECOND_T=$("$PY" -c "import sys; print(round(float(sys.argv[1]) - float(sys.argv[2]), 1))" "$(date +%s.%N)" "$START")
"$PY" "$WORK/second.py" &
SECOND=$!
wait "$SECOND"
wait "$WATCHER"
RC=$?
W=$(median < "$WORK/watched.out")
echo "watcher exit code $RC; median step ${W} ms; the second process started ${SECOND_T} s after the watcher"

echo "== baseline 2: the loop alone, ${BASE_S} s"
B2=$("$PY" "$WORK/loop.py" "$BASE_S" | median)
echo "median step ${B2} ms"

echo "== the watcher's events"
grep -E '\[G[0-9]+\.' "$WORK/watched.err" || echo "(no event)"
grep -E 'the job |timeline:' "$WORK/watched.err"
SIZE=$(stat -c %s "$WORK/t.jsonl")
RATIO=$("$PY" -c "import sys; w,b1,b2=map(float,sys.argv[1:]); print(f'{w / ((b1 + b2) / 2):.4f}')" "$W" "$B1" "$B2")
G6=$("$PY" - "$WORK/t.jsonl" <<'PYEOF'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if '"G6.new-process"' in l]
print("; ".join(f"{e['state']} at {e['t']:.1f} s: {e['text'][:90]}" for e in ev if e.get("type") == "event") or "none")
PYEOF
)
{
  echo "second CUDA process started at: ${SECOND_T} s"
  echo "G6 new-process events: ${G6}"
  echo "timeline: ${SIZE} bytes, $(grep -c '"type":"sample"' "$WORK/t.jsonl") samples"
  echo "median step: without ${B1} / ${B2} ms, with the watcher ${W} ms; ratio ${RATIO} (want <= 1.01)"
} | tee "$OUTDIR/gpu_watch.txt"
cp "$WORK/t.jsonl" "$OUTDIR/gpu_watch_timeline.jsonl"
cp "$WORK/watched.err" "$OUTDIR/gpu_watch_stderr.txt"
