#!/bin/bash
# session 9 final (recovering back-off, 99e5704): profile alone, then 65 Spec-Bench questions in two one-thread lanes (nothing else running)
cd /work/main
Q=/work/shared/data/spec_bench/question.jsonl
P=runs/s9/profile_smollm2.json
export OMP_NUM_THREADS=1
.venv/bin/oneiro-bench profile --target smollm2-135m-instruct --threads 1 --out $P > runs/s9/profile.log 2>&1
M=greedy,hf-lookup,oneiro-lookup,oneiro-latent,oneiro-hybrid,oneiro-tree
common="--target smollm2-135m-instruct --questions $Q --per-category 5 --max-new-tokens 256 --threads 1 --methods $M --latency-profile $P --no-plots"
.venv/bin/oneiro-bench $common --categories writing,roleplay,reasoning,math,translation,summarization,qa \
  --out runs/s9/laneA > runs/s9/laneA.log 2>&1 &
.venv/bin/oneiro-bench $common --categories coding,extraction,stem,humanities,math_reasoning,rag \
  --out runs/s9/laneB > runs/s9/laneB.log 2>&1 &
wait
.venv/bin/oneiro-bench merge runs/s9/laneA runs/s9/laneB --into runs/s9/merged > runs/s9/merge.log 2>&1
.venv/bin/oneiro-bench breakdown --run runs/s9/merged >> runs/s9/merge.log 2>&1
.venv/bin/oneiro-bench breakdown --run runs/s9/merged --latency-profile h200 >> runs/s9/merge.log 2>&1
echo done > runs/s9/final.done
