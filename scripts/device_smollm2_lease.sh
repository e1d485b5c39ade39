#!/bin/bash
# One GPU lease for the SmolLM2 drafter (docs/gpu.md, "Data and drafters in one lease"):
#   1. convert the carried GGUF into the reference-model cache (no package index there),
#   2. the target's greedy answers to the rest of the 12,000-prompt list (resumable JSONL, time-boxed),
#   3. one training file: the committed records and the new ones (exported as the dataset afterwards, here),
#   4. four drafters trained at once on the one GPU: all records with the final state as input, all records with
#      multi-layer input, and 1,000 / 4,000 training records (the learning curve; same held-out records),
#   5. everything worth keeping copied to $OUT as it is made.
# Inputs (carried): $CARRY/w/*.whl (transformers>=5.18, gguf), $CARRY/committed.jsonl.gz (the committed dataset's
# records), the GGUF as
# $CARRY/gguf or as xz parts $PARTS/gguf.xz.part* (carried over several calls: one call carries at most 64 MiB),
# $CARRY/prompts.jsonl.gz. Time boxes and sizes are env variables so that a CPU dry run can use tiny ones.
set -uo pipefail
CARRY=${CARRY:-.devcarry}
OUT=${OUT:-/tmp/lease-out}
WORK=${WORK:-/tmp/lease}
PARTS=${PARTS:-/tmp/parts}
GEN_SECONDS=${GEN_SECONDS:-210}
GEN_BATCH=${GEN_BATCH:-512}
TRAIN_MINUTES=${TRAIN_MINUTES:-2.2}
MAX_STEPS_ALL=${MAX_STEPS_ALL:-700}
BATCH=${BATCH:-32}
FEATURE_TOKENS=${FEATURE_TOKENS:-32768}
PY=${PY:-python3}
mkdir -p "$OUT" "$WORK/gen"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 ONEIRO_HF_CACHE=$WORK/cache
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }

if [ -d "$CARRY/w" ] && [ -z "${NO_WHEELS:-}" ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site" \
    "$CARRY"/w/*.whl || exit 1
  export PYTHONPATH=$WORK/site:$PWD
fi
$PY -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, \
'cuda', torch.cuda.is_available() and torch.cuda.get_device_name())"

# 1. the target, from the carried GGUF
gguf=$CARRY/gguf
if [ ! -f "$gguf" ]; then
  gguf=$WORK/model.gguf
  [ -f "$gguf" ] || cat "$PARTS"/gguf.xz.part* | xz -d -T0 > "$gguf" || exit 1
fi
$PY -m oneiro_hf.reference_models fetch smollm2-135m-instruct --gguf "$gguf" || exit 1
stamp "target ready"

# 2. answers to the prompts the committed dataset does not hold yet (the carried list leaves those out)
zcat "$CARRY/prompts.jsonl.gz" > "$WORK/gen/smollm2.prompts.jsonl"
timeout "$GEN_SECONDS" $PY -m oneiro_hf.training.selfdistill --target smollm2-135m-instruct \
  --out "$WORK/gen/smollm2.jsonl" --prompts-file "$WORK/gen/smollm2.prompts.jsonl" --num-prompts 12000 \
  --max-new-tokens 256 --batch-size "$GEN_BATCH" --device auto --no-progress > "$WORK/gen/gen.log" 2>&1
grep "wrote" "$WORK/gen/gen.log" | awk 'NR % 4 == 1' | cut -c 1-160
stamp "generation stopped: $(wc -l < "$WORK/gen/smollm2.jsonl") new records"
gzip -1 -c "$WORK/gen/smollm2.jsonl" > "$OUT/smollm2_gpu.jsonl.gz"

# 3. one JSONL for training: the committed records (carried as JSONL: no datasets/pyarrow pins needed here)
#    and then the new ones (a line cut by the time box is last, and skipped with a warning)
zcat "$CARRY/committed.jsonl.gz" > "$WORK/train.jsonl"
cat "$WORK/gen/smollm2.jsonl" >> "$WORK/train.jsonl"
stamp "training data: $(wc -l < "$WORK/train.jsonl") records"

# 4. four drafters at once (each its own feature cache); a time box ends each, then it evaluates and saves
train() {  # name, max_steps, extra flags
  local name=$1 steps=$2; shift 2
  $PY -m oneiro_hf.training.cli --target smollm2-135m-instruct --data "$WORK/train.jsonl" --eval_fraction 0.05 \
    --interval 28,30 --draft_vocab_size 8192 --max_seq_len 1024 --feature_cache_dir "$WORK/feat/$name" \
    --ridge_init true --stage 1+2 --stage1_fraction 0.7 --rollout_steps 4 --rollout_step_weights 1,0.8,0.6,0.5 \
    --state_loss smooth_l1 --state_loss_weight 1.0 --token_loss kl --token_loss_weight 0.5 \
    --max_steps "$steps" --per_device_train_batch_size "$BATCH" --learning_rate 3e-4 \
    --lr_scheduler_type cosine_with_min_lr --lr_scheduler_kwargs '{"min_lr_rate": 0.1}' --warmup_steps 20 \
    --weight_decay 0.0 --seed 0 --logging_steps 50 --save_strategy no --report_to none --disable_tqdm true \
    --train_sampling_strategy group_by_length --save_dtype bfloat16 --max_train_minutes "$TRAIN_MINUTES" \
    --feature_batch_tokens "$FEATURE_TOKENS" --tf32 "$TF32" ${MAX_RECORDS:+--max_records $MAX_RECORDS} \
    --output_dir "$WORK/drafters/$name" "$@" > "$WORK/train_$name.log" 2>&1
  local rc=$?
  stamp "$name: exit $rc; $(grep -h "held-out" "$WORK/train_$name.log" | tr '\n' ' ')"
  case $name in all|multilayer)
    # files come back at most 16 MiB each: pieces of 15 MiB (join with cat)
    [ -f "$WORK/drafters/$name/model.safetensors" ] && tar -C "$WORK/drafters" -cf - "$name" \
      | split -b 15M -d -a 1 - "$OUT/drafter_$name.tar.";;
  esac
}
TF32=$($PY -c "import torch; print(str(torch.cuda.is_available()).lower())")
train all "$MAX_STEPS_ALL" &
train multilayer "$MAX_STEPS_ALL" --input_layers 8,16,30 &
train n4000 $(( MAX_STEPS_ALL * 4 / 10 )) --max_train_records 4000 &
train n1000 $(( MAX_STEPS_ALL / 10 + 10 )) --max_train_records 1000 &
wait
stamp "training done"

# 5. what comes back (at most 8 files): the new records, two drafters (above), logs and summaries
tar -C "$WORK" -czf "$OUT/logs.tar.gz" $(cd "$WORK" && ls gen/gen.log train_*.log drafters/*/training_summary.json \
  drafters/*/README.md 2>/dev/null)
grep -h "held-out\|Error\|error" "$WORK"/train_*.log | tail -40
stamp "done"
