#!/bin/bash
# The measurements a GPU lease owes the cost model and the H200 model (docs/gpu.md): for each reference target,
# t(k) on oneiro-hf's kernels and on stock ones, one drafter call as a share of t(1) (the H200 model's 0.18 is
# an assumption until this runs), and t(k, B) for batch sizes $BATCH_SIZES (batched drafting's cost model and the
# modelled batch line of `oneiro-bench breakdown`). One command, a few minutes on a GPU:
#   bash scripts/gpu_profiles.sh                 # on the GPU machine: cuda, bfloat16, k up to 32
#   DRY_RUN=1 bash scripts/gpu_profiles.sh       # here: the same commands on the CPU with tiny sizes
# Writes $OUT/<target>.json (oneiro-bench profile's format: top level oneiro kernels, "stock", drafter_step_ratio,
# "batch" and "batch_t1_per_row" on both kernel sets).
set -euo pipefail
cd "$(dirname "$0")/.."
BENCH=${BENCH:-.venv/bin/oneiro-bench}
OUT=${OUT:-runs/gpu_profiles}
TARGETS=${TARGETS:-smollm2-135m-instruct gemma-3-270m qwen2.5-coder-1.5b-instruct}
if [ -n "${DRY_RUN:-}" ]; then
  DEVICE=cpu DTYPE=float32 MAX_K=2 REPEATS=1 CONTEXT=16 TARGETS=${DRY_TARGETS:-smollm2-135m-instruct}
  BATCH_SIZES=1,2
else
  DEVICE=${DEVICE:-cuda} DTYPE=${DTYPE:-bfloat16} MAX_K=${MAX_K:-32} REPEATS=${REPEATS:-15} CONTEXT=${CONTEXT:-512}
  BATCH_SIZES=${BATCH_SIZES:-1,2,4,8,16}
fi
mkdir -p "$OUT"
for target in $TARGETS; do
  drafter=shipped
  [ -d "drafters/$target" ] || drafter=fresh  # no trained drafter yet: the untrained one has the same cost
  "$BENCH" profile --target "$target" --device "$DEVICE" --dtype "$DTYPE" --max-k "$MAX_K" --repeats "$REPEATS" \
    --context-len "$CONTEXT" --drafter "$drafter" --batch-sizes "$BATCH_SIZES" --out "$OUT/$target.json"
done
