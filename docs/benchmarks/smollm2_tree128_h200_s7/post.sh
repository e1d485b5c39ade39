#!/bin/bash
# after the final run: H200-pinned tree run, the policy replay, and a CI dry run (no timing matters here)
cd /work/main
while [ ! -f runs/s7/final.done ]; do sleep 15; done
export OMP_NUM_THREADS=1
Q=/work/shared/data/spec_bench/question.jsonl
.venv/bin/oneiro-bench --target smollm2-135m-instruct --questions $Q --per-category 1 --max-new-tokens 128 \
  --threads 1 --methods greedy,oneiro-hybrid,oneiro-tree,oneiro-tree-fixed-16 --pin-profile h200 --no-plots \
  --out runs/s7/tree128_h200_new > runs/s7/tree128_h200_new.log 2>&1 \
  && .venv/bin/oneiro-bench breakdown --run runs/s7/tree128_h200_new --latency-profile h200 >> runs/s7/tree128_h200_new.log 2>&1 &
.venv/bin/python scripts/draft_policy_sim.py --records 40 --profile runs/s7/profile_smollm2.json:0.094 --profile h200 \
  > runs/s7/sim_final.log 2>&1 &
wait
echo done > runs/s7/post.done
