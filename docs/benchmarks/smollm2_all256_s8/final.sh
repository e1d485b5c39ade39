#!/bin/bash
# session 8 final: profile alone, then 65 Spec-Bench questions in two one-thread lanes (nothing else running)
cd /work/main
Q=/work/shared/data/spec_bench/question.jsonl
P=runs/s8/profile_smollm2.json
export OMP_NUM_THREADS=1
.venv/bin/oneiro-bench profile --target smollm2-135m-instruct --threads 1 --out $P > runs/s8/profile.log 2>&1
M=greedy,hf-lookup,oneiro-lookup,oneiro-latent,oneiro-hybrid,oneiro-tree
common="--target smollm2-135m-instruct --questions $Q --per-category 5 --max-new-tokens 256 --threads 1 --methods $M --latency-profile $P --no-plots"
.venv/bin/oneiro-bench $common --categories writing,roleplay,reasoning,math,translation,summarization,qa \
  --out runs/s8/laneA > runs/s8/laneA.log 2>&1 &
.venv/bin/oneiro-bench $common --categories coding,extraction,stem,humanities,math_reasoning,rag \
  --out runs/s8/laneB > runs/s8/laneB.log 2>&1 &
wait
.venv/bin/oneiro-bench merge runs/s8/laneA runs/s8/laneB --into runs/s8/merged > runs/s8/merge.log 2>&1
.venv/bin/oneiro-bench breakdown --run runs/s8/merged >> runs/s8/merge.log 2>&1
.venv/bin/oneiro-bench breakdown --run runs/s8/merged --latency-profile h200 >> runs/s8/merge.log 2>&1
echo done > runs/s8/final.done
