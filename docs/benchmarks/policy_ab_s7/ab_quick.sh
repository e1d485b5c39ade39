#!/bin/bash
# quick A/B of the stop rule: lane new (main) vs lane old (74bd78e), same 13 questions, run at once
Q=/work/shared/data/spec_bench/question.jsonl
P=/work/main/runs/s6/bench/profile_smollm2.json
M=greedy,oneiro-lookup,oneiro-latent,oneiro-hybrid
for lane in new old; do
  dir=/work/main; [ $lane = old ] && dir=/work/wt/old
  (cd $dir && OMP_NUM_THREADS=1 /work/main/.venv/bin/python -m oneiro_hf.bench.cli --target smollm2-135m-instruct \
     --questions $Q --per-category 1 --max-new-tokens 128 --threads 1 --methods $M --latency-profile $P \
     --no-plots --out /work/main/runs/s7/ab_$lane > /work/main/runs/s7/ab_$lane.log 2>&1) &
done
wait
