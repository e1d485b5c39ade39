#!/bin/bash
# A/B of the tree's root rule: lane new2 (2fb69cc) vs lane new1 (43e0c5e), same 13 questions, run at once
Q=/work/shared/data/spec_bench/question.jsonl
P=/work/main/runs/s7/profile_smollm2.json
M=greedy,oneiro-hybrid,oneiro-tree
for lane in new2 new1; do
  dir=/work/wt/treecost2; [ $lane = new1 ] && dir=/work/wt/treecost
  (cd $dir && OMP_NUM_THREADS=1 /work/main/.venv/bin/python -m oneiro_hf.bench.cli --target smollm2-135m-instruct \
     --questions $Q --per-category 1 --max-new-tokens 128 --threads 1 --methods $M --latency-profile $P \
     --no-plots --out /work/main/runs/s8/ab2_$lane > /work/main/runs/s8/ab2_$lane.log 2>&1) &
done
wait
echo done > /work/main/runs/s8/ab2.done
