#!/bin/bash
# The Gemma-3-270M drafter (docs/training.md, "Gemma-3-270M"): the recipe (scripts/recipe.sh) on the second
# architecture, sized for this CPU.
# One command, resumable: run it again after an interruption and it goes on from its last checkpoint (the
# feature cache keeps the target's pass too); a finished drafter is not retrained.
#   scripts/train_gemma.sh [extra oneiro-train flags]
# Environment: GEMMA_DATA (default: the committed dataset data/selfdistill/gemma-3-270m; refresh it from the
# generation job first, see docs/training.md), GEMMA_OUT (default runs/train/gemma), THREADS (default 1).
# The last two layers (16: sliding window, 17: full attention) are copied: 2 x 11.1 MB in bf16, plus the fusion,
# 22.9 MB in all (< 30 MB). Gemma's vocabulary is 262,144 tokens; the draft vocabulary keeps the 8,192 most
# frequent answer tokens, about 93% of answer tokens (16,384: 96%, at twice the readout cost per draft step;
# the training log reports the held-out label coverage).
set -euo pipefail
. "$(dirname "$0")/env.sh"
DATA=${GEMMA_DATA:-data/selfdistill/gemma-3-270m}
OUT=${GEMMA_OUT:-runs/train/gemma}

if [ -f "$OUT/config.json" ]; then echo "$OUT: done (a trained drafter is there; delete it to retrain)"; exit 0; fi
exec oneiro-train "${RECIPE[@]}" "${GEMMA[@]}" --data "$DATA" --feature_cache_dir runs/features/gemma \
  "${CPU_SIZES[@]}" --stage1_fraction 0.8 --max_steps 1200 --warmup_steps 20 --save_total_limit 2 \
  --threads "$THREADS" --output_dir "$OUT" $(resume_flag "$OUT") "$@"
