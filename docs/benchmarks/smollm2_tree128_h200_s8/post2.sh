#!/bin/bash
# after the revert: H200-pinned tree run (decisions only) and a CI dry run on a clean clone, side by side
cd /work/main
export OMP_NUM_THREADS=1
Q=/work/shared/data/spec_bench/question.jsonl
.venv/bin/oneiro-bench --target smollm2-135m-instruct --questions $Q --per-category 1 --max-new-tokens 128 \
  --threads 1 --methods greedy,oneiro-hybrid,oneiro-tree,oneiro-tree-fixed-16 --pin-profile h200 --no-plots \
  --out runs/s8/tree128_h200 > runs/s8/tree128_h200.log 2>&1 \
  && .venv/bin/oneiro-bench breakdown --run runs/s8/tree128_h200 --latency-profile h200 >> runs/s8/tree128_h200.log 2>&1 &
rm -rf /tmp/ci8 && git clone -q /work/main /tmp/ci8 && ln -sfn /work/shared /tmp/shared \
  && (cd /tmp/ci8 && CI=true bash .ci/run > /tmp/ci8.log 2>&1; echo "rc=$?" >> /tmp/ci8.log) &
wait
echo done > runs/s8/post2.done
