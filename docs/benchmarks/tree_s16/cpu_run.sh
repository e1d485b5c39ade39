#!/usr/bin/env bash
# CPU wall clock, alone on the machine: profile (one thread), then two one-thread lanes, merged
set -euo pipefail
cd /work/runs16
OB=/work/main/.venv/bin/oneiro-bench
Q=/work/shared/data/spec_bench/question.jsonl
$OB profile --target smollm2-135m-instruct --threads 1 --out cpu/profile.json
M=greedy,hf-lookup,oneiro-lookup,oneiro-hybrid,oneiro-tree
C="--target smollm2-135m-instruct --questions $Q --per-category 1 --max-new-tokens 256 --threads 1 --no-plots --methods $M --latency-profile cpu/profile.json"
$OB $C --categories writing,roleplay,reasoning,math,translation,summarization,qa --out cpu/laneA > cpu/laneA.log 2>&1 &
$OB $C --categories coding,extraction,stem,humanities,math_reasoning,rag --out cpu/laneB > cpu/laneB.log 2>&1 &
wait
$OB merge cpu/laneA cpu/laneB --into cpu/merged
$OB breakdown --run cpu/merged > cpu/merged/breakdown.md
$OB breakdown --run cpu/merged --latency-profile h200 > cpu/merged/breakdown_h200.md
echo done
