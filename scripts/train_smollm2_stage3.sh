#!/bin/bash
# Stage 3 (on-policy refinement) of the shipped smollm2-135m-instruct drafter. CPU, 1 thread, niced (shares the
# machine). Prompts: records after index 1,200 of the self-distillation data (the shipped drafter trained on the first
# 1,108); held-out evaluation: the shipped drafter's own 29 held-out records (same file, same id-hash split).
# Resume after a kill: append --resume_from_checkpoint last
cd /work/main || exit 1
. .venv/bin/activate
export OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
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
  --report_to none --disable_tqdm true --threads 1 --output_dir runs/train/smollm2_stage3 --save_dtype bfloat16 "$@"
rc=$?
echo "wall time: $(( $(date +%s) - start )) s (exit $rc)"
exit $rc
