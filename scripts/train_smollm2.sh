#!/bin/bash
# The CPU runs behind the SmolLM2-135M-Instruct drafters (docs/training.md), the recipe (scripts/recipe.sh) at CPU
# sizes; append --resume_from_checkpoint last to go on after a kill.
#   scripts/train_smollm2.sh phase1   # the first drafter: 708 records, 213 steps, 2 threads (runs/train/smollm2)
#   scripts/train_smollm2.sh phase2   # the same run resumed with more data: 383 steps in all
#   scripts/train_smollm2.sh stage3   # on-policy refinement of the shipped drafter: 1 thread, niced
# (runs/data/smollm2_subset*.jsonl and runs/data/smollm2.jsonl are slices of the self-distillation records.)
set -uo pipefail
PHASE=${1:?phase1, phase2 or stage3}; shift
[ "$PHASE" = stage3 ] && THREADS=${THREADS:-1} || THREADS=${THREADS:-2}
. "$(dirname "$0")/env.sh"
cpu() {  # data, stage-1 fraction, steps, then extra flags
  local data=$1 fraction=$2 steps=$3; shift 3
  oneiro-train "${RECIPE[@]}" "${SMOLLM2[@]}" --data "$data" --feature_cache_dir runs/features/smollm2 \
    "${CPU_SIZES[@]}" --stage1_fraction "$fraction" --max_steps "$steps" --save_total_limit 2 --threads "$THREADS" \
    --output_dir runs/train/smollm2 "$@"
}
case $PHASE in
  phase1) cpu runs/data/smollm2_subset.jsonl 0.8 213 "$@" ;;
  phase2) cpu runs/data/smollm2_subset2.jsonl 0.8695 383 "$@" ;;
  stage3)
    # prompts: records after index 1,200 (the shipped drafter trained on the first 1,108); held out: its own 29
    # held-out records (same file, same id-hash split)
    start=$(date +%s)
    nice -n 5 oneiro-train --target smollm2-135m-instruct --stage 3 --init_drafter drafters/smollm2-135m-instruct \
      --data runs/data/smollm2_subset2.jsonl --eval_fraction 0.05 --feature_cache_dir runs/features/smollm2 \
      --max_seq_len 1024 --onpolicy_prompts runs/data/smollm2.jsonl --onpolicy_prompt_offset 1200 \
      --onpolicy_rounds 2 --onpolicy_prompts_per_round 40 --onpolicy_max_new_tokens 128 --onpolicy_draft_tokens 5 \
      --onpolicy_steps_per_round 30 --onpolicy_mix_ratio 0.7 --onpolicy_error_weight 2 \
      --onpolicy_buffer_size 120 --onpolicy_buffer_policy fifo \
      --rollout_step_weights 1,0.8,0.6,0.5 --state_loss smooth_l1 --state_loss_weight 1.0 --token_loss kl \
      --token_loss_weight 0.5 --eval_rollout_steps 5 \
      --per_device_train_batch_size 4 --learning_rate 1e-4 --lr_scheduler_type constant_with_warmup --warmup_steps 5 \
      --weight_decay 0.0 --seed 0 --logging_steps 10 --save_strategy steps --save_steps 10 --save_total_limit 2 \
      --report_to none --disable_tqdm true --threads "$THREADS" --output_dir runs/train/smollm2_stage3 \
      --save_dtype bfloat16 "$@"
    rc=$?
    echo "wall time: $(( $(date +%s) - start )) s (exit $rc)"
    exit $rc ;;
  *) echo "unknown phase $PHASE: phase1, phase2 or stage3" >&2; exit 2 ;;
esac
