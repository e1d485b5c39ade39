#!/bin/bash
# session 13: every drafting decision as on the H200 (--pin-profile h200: its t(k) and drafter step cost), on this
# CPU, 13 Spec-Bench questions (the first of each category), 256 new tokens, one thread; tau and the modelled
# speedups do not depend on this machine's timings (the measured column does, and is not meaningful here: the run
# shared the CPU with training jobs). Run from the repository root; ran at c73ddf7.
set -e
Q=${ONEIRO_BENCH_QUESTIONS:-../shared/data/spec_bench/question.jsonl}
O=runs/s13/pinned256
OMP_NUM_THREADS=1 .venv/bin/oneiro-bench --target smollm2-135m-instruct --questions $Q --per-category 1 \
  --max-new-tokens 256 --threads 1 --methods greedy,oneiro-lookup,oneiro-hybrid,oneiro-tree --pin-profile h200 \
  --no-plots --resume --out $O
.venv/bin/oneiro-bench breakdown --run $O --latency-profile h200
