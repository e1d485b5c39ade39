#!/bin/bash
# The first SmolLM2 drafter's phase1 (CPU, 2 threads): the recipe (scripts/recipe.sh) at CPU
# sizes. Resume after a kill: append --resume_from_checkpoint last
cd /work/main
. .venv/bin/activate
export OMP_NUM_THREADS=2 TOKENIZERS_PARALLELISM=false
. scripts/recipe.sh
exec oneiro-train "${RECIPE[@]}" "${SMOLLM2[@]}" --data runs/data/smollm2_subset.jsonl --feature_cache_dir runs/features/smollm2 \
  "${CPU_SIZES[@]}" --stage1_fraction 0.8 --max_steps 213 --save_total_limit 2 --threads 2 --output_dir runs/train/smollm2 "$@"
