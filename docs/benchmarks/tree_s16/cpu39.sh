#!/usr/bin/env bash
# 39 questions (3 per category), CPU wall clock, alone: two one-thread lanes on the profile measured at 14:19
set -euo pipefail
cd /work/runs16
OB=/work/main/.venv/bin/oneiro-bench
Q=/work/shared/data/spec_bench/question.jsonl
M=greedy,oneiro-lookup,oneiro-latent,oneiro-hybrid,oneiro-tree
C="--target smollm2-135m-instruct --questions $Q --per-category 3 --max-new-tokens 256 --threads 1 --no-plots --methods $M --latency-profile cpu/profile.json"
$OB $C --categories writing,roleplay,reasoning,math,translation,summarization,qa --out cpu39/laneA > cpu39/laneA.log 2>&1 &
$OB $C --categories coding,extraction,stem,humanities,math_reasoning,rag --out cpu39/laneB > cpu39/laneB.log 2>&1 &
wait
$OB merge cpu39/laneA cpu39/laneB --into cpu39/merged
$OB breakdown --run cpu39/merged > cpu39/merged/breakdown.md
$OB breakdown --run cpu39/merged --latency-profile h200 > cpu39/merged/breakdown_h200.md
python3 /work/main/docs/benchmarks/smollm2_all256_s11/paired.py cpu39/laneA cpu39/laneB --csv cpu39/per_question.csv > cpu39/paired.txt
echo done
