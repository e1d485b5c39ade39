#!/bin/bash
# 4k-token prompts, A/B of the grouped attention: lane old (main 4fb263d, transformers' sdpa) vs lane new (gqa branch),
# one thread each, at once; each lane profiles t(k) at 4k with its own attention first
Q=/work/main/runs/long/questions_4k.jsonl
M=greedy,hf-lookup,oneiro-lookup,oneiro-latent,oneiro-hybrid,oneiro-tree
for lane in old new; do
  dir=/work/wt/s9old; [ $lane = new ] && dir=/work/wt/gqa
  (cd $dir && export OMP_NUM_THREADS=1 && P=/work/main/runs/s9/long_$lane/profile_4k.json && mkdir -p /work/main/runs/s9/long_$lane && \
   /work/main/.venv/bin/python -m oneiro_hf.bench profile --target smollm2-135m-instruct --threads 1 --max-k 16 --context-len 4096 --out $P \
     > /work/main/runs/s9/long_$lane.log 2>&1 && \
   /work/main/.venv/bin/python -m oneiro_hf.bench --target smollm2-135m-instruct --questions $Q --per-category 0 \
     --max-new-tokens 256 --threads 1 --methods $M --latency-profile $P --no-plots --out /work/main/runs/s9/long_$lane/run \
     >> /work/main/runs/s9/long_$lane.log 2>&1) &
done
wait
echo done > /work/main/runs/s9/ab_long.done
