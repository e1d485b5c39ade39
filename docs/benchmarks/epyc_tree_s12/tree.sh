#!/bin/bash
# session 12, AMD EPYC: the tree against the chain hybrid on a profile flat from 4 to 8 tokens (prepacked, thresholds
# measured: t(4..8) = 1.40-1.58 t(1)); 13 Spec-Bench questions (1 per category), 256 new tokens, two one-thread lanes,
# t(k) learned online (--no-profile, as the A/B in ../epyc_ab_s12). Run from the repository root.
set -e
Q=${ONEIRO_BENCH_QUESTIONS:-../shared/data/spec_bench/question.jsonl}
O=runs/s12tree
export OMP_NUM_THREADS=1
mkdir -p $O
M=greedy,oneiro-hybrid,oneiro-tree
common="--target smollm2-135m-instruct --questions $Q --per-category 1 --max-new-tokens 256 --threads 1 --methods $M --no-profile --no-plots --resume"
.venv/bin/oneiro-bench $common --categories writing,roleplay,reasoning,math,translation,summarization,qa \
  --out $O/laneA > $O/laneA.log 2>&1 &
.venv/bin/oneiro-bench $common --categories coding,extraction,stem,humanities,math_reasoning,rag \
  --out $O/laneB > $O/laneB.log 2>&1 &
wait
.venv/bin/oneiro-bench merge $O/laneA $O/laneB --into $O/merged > $O/merge.log 2>&1
