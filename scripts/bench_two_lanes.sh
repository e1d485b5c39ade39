#!/usr/bin/env bash
# CPU wall clock on a 2-core machine, alone: two one-thread lanes (the 13 categories split 7 / 6), each a run
# with every method interleaved per question, merged, then priced on this CPU and on the H200 profile, with
# paired per-question ratios (`oneiro-bench paired`). Writes cpu/ and OUT/ under the repository root.
#   scripts/bench_two_lanes.sh runs/cpu39 3 greedy,oneiro-greedy,oneiro-lookup,oneiro-hybrid,oneiro-tree
# The first call measures cpu/profile.json; later calls reuse it. QUESTIONS: Spec-Bench's question.jsonl;
# MAX_NEW (default 256): new tokens per turn.
set -euo pipefail
OUT=$1 PER_CATEGORY=$2 M=$3
. "$(dirname "$0")/env.sh"
OB=oneiro-bench
Q=$QUESTIONS
mkdir -p cpu "$OUT"
[ -f cpu/profile.json ] || $OB profile --target smollm2-135m-instruct --threads 1 --out cpu/profile.json
C="--target smollm2-135m-instruct --questions $Q --per-category $PER_CATEGORY --max-new-tokens ${MAX_NEW:-256} --threads 1 --no-plots
   --methods $M --latency-profile cpu/profile.json"
$OB $C --categories writing,roleplay,reasoning,math,translation,summarization,qa --out $OUT/laneA > $OUT/laneA.log 2>&1 &
$OB $C --categories coding,extraction,stem,humanities,math_reasoning,rag --out $OUT/laneB > $OUT/laneB.log 2>&1 &
wait
$OB merge $OUT/laneA $OUT/laneB --into $OUT/merged
$OB breakdown --run $OUT/merged > $OUT/merged/breakdown.md
$OB breakdown --run $OUT/merged --latency-profile h200 > $OUT/merged/breakdown_h200.md
$OB paired $OUT/laneA $OUT/laneB --csv $OUT/per_question.csv > $OUT/paired.txt
