# The drafter recipe (docs/training.md): the oneiro-train flags every drafter script shares, sourced by
# scripts/env.sh (and so by scripts/device.sh and the train_*.sh that source it) and by the two Qwen 1.5B scripts.
# A script adds its target, data, sizes and time boxes after these; a flag given twice takes its later value, so a
# script overrides a recipe value by repeating the flag.
RECIPE=(--eval_fraction 0.05 --draft_vocab_size 8192 --max_seq_len 1024 --ridge_init true --stage 1+2
  --rollout_steps 4 --rollout_step_weights 1,0.8,0.6,0.5 --state_loss smooth_l1 --state_loss_weight 1.0
  --token_loss kl --token_loss_weight 0.5 --learning_rate 3e-4 --lr_scheduler_type cosine_with_min_lr
  --weight_decay 0.0 --seed 0 --report_to none --disable_tqdm true --train_sampling_strategy group_by_length
  --save_dtype bfloat16)
# The copied interval of each target: SmolLM2's last two of 30 layers; Gemma's last two of 18 (16: sliding window,
# 17: full attention).
SMOLLM2=(--target smollm2-135m-instruct --interval 28,30)
GEMMA=(--target gemma-3-270m --interval 16,18)
# Qwen2.5-Coder-1.5B-Instruct: its last two of 28 layers (scripts/train_qwen15.sh says why).
QWEN15=(--target qwen2.5-coder-1.5b-instruct --interval 26,28)
# The sizes of the CPU runs on this 2-core machine (phase 1/2, the ablation, Gemma): batch 8, a cosine schedule to
# 30% of the peak rate, a checkpoint every 50 steps.
CPU_SIZES=(--per_device_train_batch_size 8 --lr_scheduler_kwargs '{"min_lr_rate": 0.3}' --warmup_steps 10
  --logging_steps 10 --save_strategy steps --save_steps 50)
