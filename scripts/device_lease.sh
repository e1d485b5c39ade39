#!/bin/bash
# One GPU lease for both shipped drafters (docs/gpu.md, "Data and drafters in one lease"). Prepare the carry here
# with scripts/device_prepare_carry.sh, which prints the device calls. On the GPU machine this runs two branches
# at once, each writing to $OUT what is worth keeping as soon as it exists:
#   SmolLM2-135M-Instruct: convert the carried GGUF, answer the carried prompts its dataset lacks (if any:
#     SMOLLM2_MORE=1 in the prepare script; time-boxed by SMOLLM2_GEN_UNTIL), then train the variants of $VARIANTS on
#     the one GPU, each evaluated on the same held-out records: all = the recipe (scripts/recipe.sh) on every record;
#     multilayer = multi-layer input (8,16,30); n1000 / n4000 = 1,000 / 4,000 training records (the learning
#     curve); rollout6 = 6-step joint rollouts; vocab16k = a 16,384-token draft vocabulary; tokenloss = token loss
#     weighted over state loss (1.0 vs 0.1); combo = multilayer + 6-step rollouts; ml16k = multilayer + the 16,384
#     vocabulary; exact / ml16k_exact = multilayer / ml16k with exact verified context (--verified_context exact).
#     Back come `all` (or, when it was not trained, `multilayer`) and the variant
#     with the best held-out tau (a file comes back only up to 16 MiB: drafters come in 15 MiB tar pieces, join
#     with cat);
#   Gemma-3-270M: convert the carried GGUF, answer the carried prompts the committed dataset lacks (time-boxed,
#     resumable JSONL), then train its drafter on the committed and the new records.
# Every training run stops at one wall-clock deadline (--train_until), so the call ends on time whatever the
# feature pass and the init took. Sizes and time boxes are environment variables, so a CPU dry run can use tiny
# ones (docs/gpu.md).
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/recipe.sh
CARRY=${CARRY:-.devcarry/c}
OUT=${OUT:-/tmp/lease-out}
WORK=${WORK:-/tmp/lease}
PARTS=${PARTS:-/tmp/parts}
DEADLINE=${DEADLINE:-550}          # seconds after the start by which everything is saved and packed
EVAL_MARGIN=${EVAL_MARGIN:-55}     # seconds kept after training for evaluation, saving and packing
GEN_UNTIL=${GEN_UNTIL:-300}        # Gemma's generation stops this many seconds after the start
SMOLLM2_GEN_UNTIL=${SMOLLM2_GEN_UNTIL:-200}  # and SmolLM2's (before its training starts)
GEN_BATCH=${GEN_BATCH:-512}
MAX_STEPS=${MAX_STEPS:-4000}
BATCH=${BATCH:-32}
FEATURE_TOKENS=${FEATURE_TOKENS:-32768}
VARIANTS=${VARIANTS:-all multilayer n1000 n4000 rollout6 vocab16k tokenloss combo}
GEMMA_BRANCH=${GEMMA_BRANCH:-1}
PY=${PY:-python3}
mkdir -p "$OUT" "$WORK/gen"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 ONEIRO_HF_CACHE=${ONEIRO_HF_CACHE:-$WORK/cache}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
# Nine processes share one GPU: the first lease's "combo" ran out of its 139 GiB (Gemma's generation held 28 GiB
# while eight SmolLM2 runs held about 7 GiB each); expandable segments waste less of it.
export PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}
t0=$(date +%s)
TRAIN_UNTIL=$(( t0 + DEADLINE - EVAL_MARGIN ))
stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }

unpack() {  # everything carried travels in one tar stream, in pieces over several calls: unpacked once into $WORK
  [ -f "$WORK/carry.done" ] && return 0
  local f
  for f in "$PARTS"/carry.tar.part* "$CARRY"/carry.tar.part*; do [ -f "$f" ] && echo "${f##*/} $f"; done | sort \
    | cut -d" " -f2 | xargs cat | tar -C "$WORK" -x && touch "$WORK/carry.done"
}
unpack || { stamp "the carried pieces do not unpack (are all of them in $PARTS?)"; exit 1; }

if [ -d "$WORK/w" ] && [ -z "${NO_WHEELS:-}" ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site" \
    "$WORK"/w/*.whl || exit 1
  export PYTHONPATH=$WORK/site:$PWD
fi
$PY -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, \
'cuda', torch.cuda.is_available() and torch.cuda.get_device_name())"
TF32=$($PY -c "import torch; print(str(torch.cuda.is_available()).lower())")

target_ready() {  # reference name, GGUF name in the stream: decompress, check against the pinned sha256, convert
  local name=$1 gguf=$WORK/$2.gguf
  if [ -n "${SKIP_CONVERT:-}" ]; then return 0; fi
  [ -f "$gguf" ] || xz -d -T0 -c "$WORK/$2.gguf.xz" > "$gguf" || return 1
  $PY -m oneiro_hf.reference_models fetch "$name" --gguf "$gguf" 2>&1 | grep -v "it/s"
}

train() {  # data, name, then the target's flags and those that differ from the recipe
  local data=$1 name=$2; shift 2
  $PY -m oneiro_hf.training.cli "${RECIPE[@]}" --data "$data" --stage1_fraction 0.6 --max_steps "$MAX_STEPS" \
    --per_device_train_batch_size "$BATCH" --lr_scheduler_kwargs '{"min_lr_rate": 0.1}' --warmup_steps 50 \
    --logging_steps 250 --save_strategy no --train_until "$TRAIN_UNTIL" --feature_batch_tokens "$FEATURE_TOKENS" \
    --tf32 "$TF32" --eval_at_stage_switch false ${MAX_RECORDS:+--max_records $MAX_RECORDS} \
    --output_dir "$WORK/drafters/$name" "$@" > "$WORK/train_$name.log" 2>&1
  stamp "$name: exit $?; $(grep -h "^held-out" "$WORK/train_$name.log" | tail -n 1)"
}

send() {  # drafter name: its folder as 15 MiB tar pieces in $OUT
  [ -f "$WORK/drafters/$1/model.safetensors" ] && tar -C "$WORK/drafters" -cf - "$1" | split -b 15M -d -a 1 - "$OUT/drafter_$1.tar."
}

smollm2() {
  target_ready smollm2-135m-instruct smollm2 || { stamp "smollm2: no target"; return 1; }
  stamp "smollm2 target ready"
  local data=$WORK/smollm2.jsonl base=$WORK/feat/smollm2 ml=$WORK/feat/smollm2_ml mlx=$WORK/feat/smollm2_ml_exact
  zcat "$WORK/smollm2_committed.jsonl.gz" > "$data"
  if [ -s "$WORK/smollm2_prompts.jsonl.gz" ]; then  # the new answers train every variant: generated first
    touch "$WORK/gen/smollm2.jsonl"
    zcat "$WORK/smollm2_prompts.jsonl.gz" > "$WORK/gen/smollm2.prompts.jsonl"
    timeout $(( t0 + SMOLLM2_GEN_UNTIL - $(date +%s) )) $PY -m oneiro_hf.training.selfdistill \
      --target smollm2-135m-instruct --out "$WORK/gen/smollm2.jsonl" --prompts-file "$WORK/gen/smollm2.prompts.jsonl" \
      --num-prompts 100000 --max-new-tokens 256 --batch-size "$GEN_BATCH" --device auto --no-progress \
      > "$WORK/gen/smollm2.log" 2>&1
    grep "wrote" "$WORK/gen/smollm2.log" | awk 'NR % 4 == 1' | cut -c 1-160
    stamp "smollm2 generation stopped: $(wc -l < "$WORK/gen/smollm2.jsonl") new records"
    gzip -1 -c "$WORK/gen/smollm2.jsonl" > "$OUT/smollm2_gpu.jsonl.gz"
    cat "$WORK/gen/smollm2.jsonl" >> "$data"
  fi
  for v in $VARIANTS; do  # variants with the same input share one feature cache (its lock serialises the build)
    case $v in
      all)        train "$data" all "${SMOLLM2[@]}" --feature_cache_dir "$base" & ;;
      multilayer) train "$data" multilayer "${SMOLLM2[@]}" --feature_cache_dir "$ml" --input_layers 8,16,30 & ;;
      n1000)      train "$data" n1000 "${SMOLLM2[@]}" --feature_cache_dir "$base" --max_train_records 1000 \
                    --max_steps $(( MAX_STEPS / 10 )) & ;;
      n4000)      train "$data" n4000 "${SMOLLM2[@]}" --feature_cache_dir "$base" --max_train_records 4000 \
                    --max_steps $(( MAX_STEPS * 4 / 10 )) & ;;
      rollout6)   train "$data" rollout6 "${SMOLLM2[@]}" --feature_cache_dir "$base" --rollout_steps 6 \
                    --rollout_step_weights 1,0.8,0.6,0.5,0.4,0.3 & ;;
      vocab16k)   train "$data" vocab16k "${SMOLLM2[@]}" --feature_cache_dir "$base" --draft_vocab_size 16384 & ;;
      tokenloss)  train "$data" tokenloss "${SMOLLM2[@]}" --feature_cache_dir "$base" --state_loss_weight 0.1 \
                    --token_loss_weight 1.0 & ;;
      combo)      train "$data" combo "${SMOLLM2[@]}" --feature_cache_dir "$ml" --input_layers 8,16,30 \
                    --rollout_steps 6 --rollout_step_weights 1,0.8,0.6,0.5,0.4,0.3 & ;;
      ml16k)      train "$data" ml16k "${SMOLLM2[@]}" --feature_cache_dir "$ml" --input_layers 8,16,30 \
                    --draft_vocab_size 16384 & ;;
      exact)      train "$data" exact "${SMOLLM2[@]}" --feature_cache_dir "$mlx" --input_layers 8,16,30 \
                    --verified_context exact & ;;
      ml16k_exact) train "$data" ml16k_exact "${SMOLLM2[@]}" --feature_cache_dir "$mlx" --input_layers 8,16,30 \
                    --draft_vocab_size 16384 --verified_context exact & ;;
      *) echo "unknown variant $v" >&2 ;;
    esac
  done
  wait
  local best
  # the best of the recipe changes; the learning-curve runs are not candidates. The Gemma drafter sits in the same
  # folder: naming the candidates keeps it out (the first lease returned it as SmolLM2's "best").
  local candidates=" $VARIANTS "
  for v in all n1000 n4000; do candidates=${candidates/ $v / }; done
  best=$($PY scripts/lease_best.py "$WORK/drafters" --among $candidates)
  stamp "smollm2 trained; best variant besides all: ${best:-none}"
  if [ -f "$WORK/drafters/all/model.safetensors" ]; then send all; else send multilayer; fi
  [ -n "$best" ] && send "$best"
}

gemma() {
  target_ready gemma-3-270m gemma || { stamp "gemma: no target"; return 1; }
  stamp "gemma target ready"
  local data=$WORK/gemma.jsonl
  touch "$WORK/gen/gemma.jsonl"
  if [ -s "$WORK/gemma_prompts.jsonl.gz" ]; then
    zcat "$WORK/gemma_prompts.jsonl.gz" > "$WORK/gen/gemma.prompts.jsonl"
    timeout $(( t0 + GEN_UNTIL - $(date +%s) )) $PY -m oneiro_hf.training.selfdistill --target gemma-3-270m \
      --out "$WORK/gen/gemma.jsonl" --prompts-file "$WORK/gen/gemma.prompts.jsonl" --num-prompts 100000 \
      --max-new-tokens 192 --batch-size "$GEN_BATCH" --device auto --no-progress > "$WORK/gen/gemma.log" 2>&1
    grep "wrote" "$WORK/gen/gemma.log" | awk 'NR % 4 == 1' | cut -c 1-160
    stamp "gemma generation stopped: $(wc -l < "$WORK/gen/gemma.jsonl") new records"
    gzip -1 -c "$WORK/gen/gemma.jsonl" > "$OUT/gemma_gpu.jsonl.gz"
  fi
  # the committed records, then the new ones (a line cut by the time box comes last and is skipped with a warning)
  zcat "$WORK/gemma_committed.jsonl.gz" > "$data"
  cat "$WORK/gen/gemma.jsonl" >> "$data"
  stamp "gemma training data: $(wc -l < "$data") records"
  train "$data" gemma "${GEMMA[@]}" --feature_cache_dir "$WORK/feat/gemma"
  send gemma
}

smollm2 &
[ "$GEMMA_BRANCH" = 1 ] && gemma &
wait
tar -C "$WORK" -czf "$OUT/logs.tar.gz" $(cd "$WORK" && ls gen/*.log train_*.log drafters/*/training_summary.json \
  drafters/*/README.md 2>/dev/null)
ls -la "$OUT"
stamp "done"
