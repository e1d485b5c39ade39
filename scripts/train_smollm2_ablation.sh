#!/bin/bash
# The SmolLM2 drafter ablation (docs/training.md): each variant changes one thing of the phase-1 recipe
# (scripts/train_smollm2.sh phase1: 708 records, 213 steps, interval 28-30, target-initialised, stage 1+2).
# One thread per run, so it can share this 2-core machine with a benchmark. Usage:
#   scripts/train_smollm2_ablation.sh [variant ...]   (default: all; a finished variant is skipped)
set -euo pipefail
THREADS=1
. "$(dirname "$0")/env.sh"
OUT=${ABLATION_DIR:-runs/ablation}

train() {  # name, then the flags that differ from the recipe
  local name=$1; shift
  if [ -f "$OUT/$name/model.safetensors" ]; then echo "$name: done"; return; fi
  oneiro-train "${RECIPE[@]}" "${SMOLLM2[@]}" --data runs/data/smollm2_subset.jsonl \
    --feature_cache_dir runs/features/smollm2 "${CPU_SIZES[@]}" --stage1_fraction 0.8 --max_steps 213 \
    --save_total_limit 1 --threads 1 \
    --output_dir "$OUT/$name" $(resume_flag "$OUT/$name") "$@"
}

variants=("$@")
[ ${#variants[@]} -eq 0 ] && variants=(random_init stage1_only layers_14_16 layers_24_26)
for v in "${variants[@]}"; do
  case $v in
    random_init)  train random_init --transition_init random ;;
    stage1_only)  train stage1_only --stage 1 ;;
    layers_14_16) train layers_14_16 --interval 14,16 --feature_cache_dir runs/features/smollm2_L14 ;;
    layers_24_26) train layers_24_26 --interval 24,26 --feature_cache_dir runs/features/smollm2_L24 ;;
    # multi-layer input (as EAGLE-3): a low, a middle and the final state; its own cache (format 2)
    multilayer)   train multilayer --input_layers 8,16,30 --feature_cache_dir runs/features/smollm2_ml ;;
    *) echo "unknown variant $v" >&2; exit 2 ;;
  esac
done
