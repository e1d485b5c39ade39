#!/bin/bash
# Spec-Bench comparison of the ablation drafters (scripts/train_smollm2_ablation.sh), interleaved in one run:
# for each drafter its acceptance with latent drafts at every step (oneiro-latent-fixed-3) and its hybrid speedup.
# One thread; 1 question per category (all 13), 96 new tokens. Pass --resume to continue an interrupted run.
set -euo pipefail
THREADS=1
. "$(dirname "$0")/env.sh"
A=${ABLATION_DIR:-runs/ablation}
methods=greedy
for d in target random stage1 layers14; do methods+=",oneiro-latent-fixed-3@$d,oneiro-hybrid@$d"; done
exec oneiro-bench --target smollm2-135m-instruct --threads 1 --per-category 1 --max-new-tokens 96 \
  --latency-profile runs/latency_smollm2_1thread.json \
  --extra-drafter target=runs/train/smollm2_phase1_backup --extra-drafter random="$A/random_init" \
  --extra-drafter stage1="$A/stage1_only" --extra-drafter layers14="$A/layers_14_16" \
  --methods "$methods" --out runs/bench_ablation "$@"
