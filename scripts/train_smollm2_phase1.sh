#!/bin/bash
# Real drafter for smollm2-135m-instruct (CPU, 2 threads). Resume after a kill: append --resume_from_checkpoint last
cd /work/main
. .venv/bin/activate
export OMP_NUM_THREADS=2 TOKENIZERS_PARALLELISM=false
exec oneiro-train --target smollm2-135m-instruct --data runs/data/smollm2_subset.jsonl --eval_fraction 0.05 \
  --interval 28,30 --draft_vocab_size 8192 --max_seq_len 1024 --feature_cache_dir runs/features/smollm2 \
  --ridge_init true --stage 1+2 --stage1_fraction 0.8 --rollout_steps 4 --rollout_step_weights 1,0.8,0.6,0.5 \
  --state_loss smooth_l1 --state_loss_weight 1.0 --token_loss kl --token_loss_weight 0.5 \
  --max_steps 213 --per_device_train_batch_size 8 --learning_rate 3e-4 --lr_scheduler_type cosine_with_min_lr \
  --lr_scheduler_kwargs '{"min_lr_rate": 0.3}' --warmup_steps 10 --weight_decay 0.0 --seed 0 \
  --logging_steps 10 --save_strategy steps --save_steps 50 --save_total_limit 2 --report_to none --disable_tqdm true \
  --threads 2 --train_sampling_strategy group_by_length --output_dir runs/train/smollm2 --save_dtype bfloat16 "$@"
