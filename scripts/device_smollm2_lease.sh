#!/bin/bash
# One GPU lease for the SmolLM2 drafter (docs/gpu.md, "Data and drafters in one lease"). Prepare the carry here
# with scripts/device_prepare_carry.sh, which prints the device calls. On the GPU machine this:
#   1. converts the carried GGUF into the reference-model cache (nothing can be downloaded there),
#   2. answers the prompts the committed dataset lacks, if any are carried (resumable JSONL, time-boxed),
#   3. writes one training file: the committed records (carried as JSONL) and the new ones,
#   4. trains the drafters of $VARIANTS at once on the one GPU, each time-boxed, each evaluated on the same
#      held-out records: all = the recipe on every record; multilayer = with multi-layer input (8,16,30);
#      n1000 / n4000 = 1,000 / 4,000 training records (the learning curve); rollout6 = 6-step joint rollouts;
#      vocab16k = a 16,384-token draft vocabulary,
#   5. copies to $OUT what is worth keeping as soon as it exists: new records, drafters (15 MiB pieces: a file
#      comes back only up to 16 MiB; join with cat), logs and training summaries (at most 8 files in all).
# Time boxes and sizes are environment variables, so a CPU dry run can use tiny ones (docs/gpu.md).
set -uo pipefail
CARRY=${CARRY:-.devcarry/c}
OUT=${OUT:-/tmp/lease-out}
WORK=${WORK:-/tmp/lease}
PARTS=${PARTS:-/tmp/parts}
GEN_SECONDS=${GEN_SECONDS:-210}
GEN_BATCH=${GEN_BATCH:-512}
TRAIN_MINUTES=${TRAIN_MINUTES:-4}
MAX_STEPS=${MAX_STEPS:-4000}
BATCH=${BATCH:-32}
FEATURE_TOKENS=${FEATURE_TOKENS:-32768}
VARIANTS=${VARIANTS:-all multilayer n1000 n4000}
RETURN=${RETURN:-all multilayer}
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

# 1. the target, from the carried GGUF (xz parts, carried over several calls: one call carries at most 64 MiB)
gguf=$WORK/model.gguf
[ -f "$gguf" ] || cat "$PARTS"/gguf.xz.part* "$CARRY"/gguf.xz.part* 2>/dev/null | xz -d -T0 > "$gguf" || exit 1
$PY -m oneiro_hf.reference_models fetch smollm2-135m-instruct --gguf "$gguf" 2>&1 | grep -v "it/s" || exit 1
stamp "target ready"

# 2. answers to the prompts the committed dataset lacks (the carried list leaves those out)
touch "$WORK/gen/smollm2.jsonl"
if [ -s "$CARRY/prompts.jsonl.gz" ]; then
  zcat "$CARRY/prompts.jsonl.gz" > "$WORK/gen/smollm2.prompts.jsonl"
  timeout "$GEN_SECONDS" $PY -m oneiro_hf.training.selfdistill --target smollm2-135m-instruct \
    --out "$WORK/gen/smollm2.jsonl" --prompts-file "$WORK/gen/smollm2.prompts.jsonl" --num-prompts 100000 \
    --max-new-tokens 256 --batch-size "$GEN_BATCH" --device auto --no-progress > "$WORK/gen/gen.log" 2>&1
  grep "wrote" "$WORK/gen/gen.log" | awk 'NR % 4 == 1' | cut -c 1-160
  stamp "generation stopped: $(wc -l < "$WORK/gen/smollm2.jsonl") new records"
  gzip -1 -c "$WORK/gen/smollm2.jsonl" > "$OUT/smollm2_gpu.jsonl.gz"
fi

# 3. one JSONL for training: the committed records, then the new ones (a line cut by the time box comes last,
#    and is skipped with a warning)
zcat "$CARRY/committed.jsonl.gz" > "$WORK/train.jsonl"
cat "$WORK/gen/smollm2.jsonl" >> "$WORK/train.jsonl"
stamp "training data: $(wc -l < "$WORK/train.jsonl") records"

# 4. the drafters, at once; a time box ends each one's training, then it evaluates and saves as usual
TF32=$($PY -c "import torch; print(str(torch.cuda.is_available()).lower())")
train() {  # name, then the flags that differ from the recipe
  local name=$1; shift
  $PY -m oneiro_hf.training.cli --target smollm2-135m-instruct --data "$WORK/train.jsonl" --eval_fraction 0.05 \
    --interval 28,30 --draft_vocab_size 8192 --max_seq_len 1024 --feature_cache_dir "$WORK/feat/$name" \
    --ridge_init true --stage 1+2 --stage1_fraction 0.6 --rollout_steps 4 --rollout_step_weights 1,0.8,0.6,0.5 \
    --state_loss smooth_l1 --state_loss_weight 1.0 --token_loss kl --token_loss_weight 0.5 \
    --max_steps "$MAX_STEPS" --per_device_train_batch_size "$BATCH" --learning_rate 3e-4 \
    --lr_scheduler_type cosine_with_min_lr --lr_scheduler_kwargs '{"min_lr_rate": 0.1}' --warmup_steps 50 \
    --weight_decay 0.0 --seed 0 --logging_steps 250 --save_strategy no --report_to none --disable_tqdm true \
    --train_sampling_strategy group_by_length --save_dtype bfloat16 --max_train_minutes "$TRAIN_MINUTES" \
    --feature_batch_tokens "$FEATURE_TOKENS" --tf32 "$TF32" --eval_at_stage_switch false \
    ${MAX_RECORDS:+--max_records $MAX_RECORDS} --output_dir "$WORK/drafters/$name" "$@" \
    > "$WORK/train_$name.log" 2>&1
  local rc=$?
  stamp "$name: exit $rc; $(grep -h "^held-out" "$WORK/train_$name.log" | tail -n 1)"
  if [[ " $RETURN " == *" $name "* && -f "$WORK/drafters/$name/model.safetensors" ]]; then
    tar -C "$WORK/drafters" -cf - "$name" | split -b 15M -d -a 1 - "$OUT/drafter_$name.tar."
  fi
}
for v in $VARIANTS; do
  case $v in
    all)         train all & ;;
    multilayer)  train multilayer --input_layers 8,16,30 & ;;
    n1000)       train n1000 --max_train_records 1000 --max_steps $(( MAX_STEPS / 10 )) & ;;
    n4000)       train n4000 --max_train_records 4000 --max_steps $(( MAX_STEPS * 4 / 10 )) & ;;
    rollout6)    train rollout6 --rollout_steps 6 --rollout_step_weights 1,0.8,0.6,0.5,0.4,0.3 & ;;
    vocab16k)    train vocab16k --draft_vocab_size 16384 & ;;
    *) echo "unknown variant $v" >&2 ;;
  esac
done
wait
stamp "training done"

# 5. logs and summaries of every variant
tar -C "$WORK" -czf "$OUT/logs.tar.gz" $(cd "$WORK" && ls gen/gen.log train_*.log drafters/*/training_summary.json \
  drafters/*/README.md 2>/dev/null)
stamp "done"
