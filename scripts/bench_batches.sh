#!/bin/bash
# The batched-throughput benchmark of docs/benchmarks.md ("Batches"): SmolLM2-135M-Instruct with its shipped
# drafter, 13 Spec-Bench questions (the first of each category), 128 new tokens. First t(k, B) for the cost model
# (one thread), then two one-thread lanes side by side, one per core: batch sizes 1,2,4 and 8,16. Each lane
# interleaves its methods per batch, so every ratio is taken within one lane.
#   scripts/bench_batches.sh          # OUT (default runs/batches)
set -euo pipefail
. "$(dirname "$0")/env.sh"
BENCH=${BENCH:-oneiro-bench}
OUT=${OUT:-runs/batches}
METHODS=${METHODS:-greedy,oneiro-greedy,oneiro-lookup,oneiro-hybrid,oneiro-tree}
mkdir -p "$OUT"
[ -f "$OUT/profile.json" ] || taskset -c 0 "$BENCH" profile --target smollm2-135m-instruct --threads 1 \
  --batch-sizes 1,2,4,8,16 --drafter shipped --out "$OUT/profile.json"
lane() {  # core, batch sizes, name
  taskset -c "$1" "$BENCH" --target smollm2-135m-instruct --questions "$QUESTIONS" --per-category 1 \
    --max-new-tokens 128 --threads 1 --methods "$METHODS" --batch-size "$2" --latency-profile "$OUT/profile.json" \
    --out "$OUT/$3" > "$OUT/$3.log" 2>&1
}
lane 0 1,2,4 small & lane 1 8,16 large & wait
echo "done: $OUT/small/summary.json $OUT/large/summary.json"
