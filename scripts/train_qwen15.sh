#!/bin/bash
# The Qwen2.5-Coder-1.5B-Instruct drafter (docs/bring_your_own_target.md walks it): the recipe (scripts/recipe.sh)
# on a 1.5B target, time-boxed for a 2-core CPU.
# One command, resumable: run it again after an interruption and it goes on from its last checkpoint (the feature
# cache keeps the target's pass); a finished drafter is not retrained.
#   scripts/train_qwen15.sh [extra oneiro-train flags]
# Environment: QWEN15_DATA (default: the committed dataset data/selfdistill/qwen2.5-coder-1.5b-instruct),
# QWEN15_OUT (default runs/train/qwen15-relative), THREADS (default 2), MINUTES (training time box, default 55),
# LAYER_RANK / TOKEN_RANK (default 32 / 256; LAYER_RANK=whole trains and stores every copied weight).
# The drafter trains in the target-relative parametrisation (oneiro_hf/training/low_rank.py): only rank-32
# differences of the copied layers from the target's and the fusion's token block as identity + rank 256, so the
# saved drafter is 11 MiB instead of 188 MB and loses nothing to truncation; on 28k answer tokens whole training
# over-fitted (train agreement 0.81 at step 128, held-out 0.29).
# Shape (measured in docs/benchmarks/current/qwen2.5-coder-1.5b-instruct/drafter_step_variants.json, one thread,
# 200 cached tokens): the last two of 28 layers with a 16,384-token readout cost 0.083 t(1), one layer 0.053,
# a 32,768-token readout 0.100; 12,288 tokens keep two layers under 0.08 t(1) and cover 87% of held-out answer
# tokens of the first 104 answers (8,192: 82%, 16,384: 90%). Multi-layer input added 0.004 t(1) and is not used:
# it has not paid on the smaller targets (docs/training.md, "Multi-layer input").
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
THREADS=${THREADS:-2}
MINUTES=${MINUTES:-55}
LAYER_RANK=${LAYER_RANK:-32}
TOKEN_RANK=${TOKEN_RANK:-256}
export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS TOKENIZERS_PARALLELISM=false
DATA=${QWEN15_DATA:-data/selfdistill/qwen2.5-coder-1.5b-instruct}
OUT=${QWEN15_OUT:-runs/train/qwen15-relative}
relative=(--relative_layer_rank "$LAYER_RANK" --relative_token_rank "$TOKEN_RANK")
[ "$LAYER_RANK" = whole ] && relative=()

if [ -f "$OUT/config.json" ]; then echo "$OUT: done (a trained drafter is there; delete it to retrain)"; exit 0; fi
resume=()
ls -d "$OUT"/checkpoint-* >/dev/null 2>&1 && resume=(--resume_from_checkpoint last)
. scripts/recipe.sh
exec oneiro-train "${RECIPE[@]}" "${QWEN15[@]}" --data "$DATA" --feature_cache_dir runs/features/qwen15 \
  "${CPU_SIZES[@]}" --draft_vocab_size 12288 --stage1_fraction 0.6 --max_steps 2000 --max_train_minutes "$MINUTES" \
  --save_total_limit 2 --feature_batch_tokens 2048 --threads "$THREADS" --output_dir "$OUT" "${relative[@]}" "${resume[@]}" "$@"
