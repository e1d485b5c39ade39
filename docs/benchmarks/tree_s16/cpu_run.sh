#!/usr/bin/env bash
# CPU wall clock, alone on the machine: two one-thread lanes, merged, priced on this CPU and on the H200 profile.
# Run from the repository root (the venv on PATH); writes cpu/ and OUT/ there.
#   cpu_run.sh cpu13 1 greedy,hf-lookup,oneiro-lookup,oneiro-hybrid,oneiro-tree   (measures cpu/profile.json first)
#   cpu_run.sh cpu39 3 greedy,oneiro-lookup,oneiro-latent,oneiro-hybrid,oneiro-tree   (the same profile)
set -euo pipefail
OUT=$1 PER_CATEGORY=$2 M=$3
OB=oneiro-bench
Q=${Q:-../shared/data/spec_bench/question.jsonl}
[ -f cpu/profile.json ] || $OB profile --target smollm2-135m-instruct --threads 1 --out cpu/profile.json
C="--target smollm2-135m-instruct --questions $Q --per-category $PER_CATEGORY --max-new-tokens 256 --threads 1 --no-plots
   --methods $M --latency-profile cpu/profile.json"
$OB $C --categories writing,roleplay,reasoning,math,translation,summarization,qa --out $OUT/laneA > $OUT/laneA.log 2>&1 &
$OB $C --categories coding,extraction,stem,humanities,math_reasoning,rag --out $OUT/laneB > $OUT/laneB.log 2>&1 &
wait
$OB merge $OUT/laneA $OUT/laneB --into $OUT/merged
$OB breakdown --run $OUT/merged > $OUT/merged/breakdown.md
$OB breakdown --run $OUT/merged --latency-profile h200 > $OUT/merged/breakdown_h200.md
python3 docs/benchmarks/smollm2_all256_s11/paired.py $OUT/laneA $OUT/laneB --csv $OUT/per_question.csv > $OUT/paired.txt
