#!/bin/bash
# A/B of the tree's cost model: lane new (43e0c5e) vs lane old (123c9ac), same 13 questions, run at once
Q=/work/shared/data/spec_bench/question.jsonl
P=/work/main/runs/s7/profile_smollm2.json
M=greedy,oneiro-hybrid,oneiro-tree
for lane in new old; do
  dir=/work/wt/treecost; [ $lane = old ] && dir=/work/wt/old
  (cd $dir && OMP_NUM_THREADS=1 /work/main/.venv/bin/python -m oneiro_hf.bench.cli --target smollm2-135m-instruct \
     --questions $Q --per-category 1 --max-new-tokens 128 --threads 1 --methods $M --latency-profile $P \
     --no-plots --out /work/main/runs/s8/ab_$lane > /work/main/runs/s8/ab_$lane.log 2>&1) &
done
wait
echo done > /work/main/runs/s8/ab.done
