#!/bin/bash
# The Qwen2.5-Coder-1.5B-Instruct benchmark of docs/benchmarks.md: the profile (this machine's t(k) on both kernel
# sets, the trained drafter's call as a share of t(1), memory), then one interleaved run of 13 Spec-Bench questions
# (the first of each category), 128 new tokens: greedy, oneiro-greedy, the peers a user would pick instead
# (hf-lookup; hf-assistant-kernels, transformers' assisted generation with ASSISTANT, default
# Qwen2.5-Coder-0.5B-Instruct, same tokenizer, on oneiro-hf's kernels), oneiro-lookup and the oneiro methods with
# the trained drafter. One lane with every core: two lanes would hold two float32 copies of the target and their
# prepacked copies (about 13 GiB each) on a 23 GiB machine.
#   scripts/bench_qwen15.sh            # DRAFTER (default runs/train/qwen15), THREADS (default 2), OUT
# EXTRA adds drafters to compare (NAME=PATH ...; each runs as oneiro-hybrid@NAME, `fresh` builds an untrained one),
# e.g. a candidate against the shipped drafter:
#   DRAFTER=drafters/campaign/qwen2.5-coder-1.5b-instruct EXTRA="shipped=drafters/qwen2.5-coder-1.5b-instruct" \
#     scripts/bench_qwen15.sh
# METHODS replaces the method list; PROFILE pins a saved t(k) profile instead of measuring one (e.g. an idle
# machine's, when this one is disturbed). About 100 minutes on the 2-core CPU; an interrupted run goes on from its
# last question (--resume).
set -euo pipefail
THREADS=${THREADS:-2}
. "$(dirname "$0")/env.sh"
BENCH=${BENCH:-oneiro-bench}
DRAFTER=${DRAFTER:-runs/train/qwen15}
OUT=${OUT:-runs/q15}
ASSISTANT=${ASSISTANT:-qwen2.5-coder-0.5b-instruct}
METHODS=${METHODS:-greedy,oneiro-greedy,hf-lookup,hf-assistant-kernels,oneiro-lookup,oneiro-latent,oneiro-hybrid,oneiro-tree}
extra=()
for pair in ${EXTRA:-}; do extra+=(--extra-drafter "$pair"); METHODS+=",oneiro-hybrid@${pair%%=*}"; done
resume=()
[ -d "$OUT/bench" ] && resume=(--resume)
mkdir -p "$OUT"
[ -n "${PROFILE:-}" ] && [ ! -f "$OUT/profile.json" ] && cp "$PROFILE" "$OUT/profile.json"
[ -f "$OUT/profile.json" ] || "$BENCH" profile --target qwen2.5-coder-1.5b-instruct --threads "$THREADS" --max-k 16 --context-len 200 \
  --repeats 5 --drafter "$DRAFTER" --out "$OUT/profile.json"
"$BENCH" --target qwen2.5-coder-1.5b-instruct --drafter "$DRAFTER" --assistant "$ASSISTANT" "${extra[@]}" "${resume[@]}" \
  --questions "$QUESTIONS" --per-category 1 --max-new-tokens 128 --threads "$THREADS" \
  --latency-profile "$OUT/profile.json" --out "$OUT/bench" \
  --methods "$METHODS"
"$BENCH" breakdown --run "$OUT/bench"
