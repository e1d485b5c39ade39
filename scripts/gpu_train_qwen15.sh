#!/bin/bash
# The Qwen2.5-Coder-1.5B-Instruct campaign's step in one 15-minute GPU lease: more self-distillation answers, then
# the campaign's recipe (recipes/qwen2.5-coder-1.5b-instruct.json) at GPU sizes on all of them, stopped at one
# wall-clock deadline. Phases:
#   scripts/gpu_train_qwen15.sh prepare    # here: GGUF, wheels, records and prompts in call-sized pieces beside a
#                                          # lean tree (scripts/carry.sh); prints the device calls
#   scripts/gpu_train_qwen15.sh lease      # on the GPU machine: the last device call
#   scripts/carry.sh full                  # here, after the lease
#   DRY_RUN=1 scripts/gpu_train_qwen15.sh lease   # here: every step of the lease on the CPU with tiny sizes
# What limits the lease is the carry: the Q4_K_M GGUF is 1.07 GiB and hardly compresses, the machine reaches no
# index, and a call carries 64 MiB with the travelling tree: 2 MiB lean (scripts/carry.sh), so 19 pieces of 59
# MiB, one call each, the last riding with the lease call. The lease call (10 minutes at most) converts the GGUF,
# answers unanswered prompts of the campaign's mix for GEN_SECONDS (the 0.13B target answered 12,600 tokens/s on an
# H200 at batch 512; a tenth of that is assumed for the 1.5B, not measured), then trains on the committed records
# and the new ones until DEADLINE less EVAL_MARGIN, evaluates on the campaign's held-out split and saves. The
# drafter (about 11 MiB, the format of drafters/) and the new answers (gzip) come back with the lease call itself.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/carry.sh
PHASE=${1:-lease}
PIECES=${PIECES:-.devcarry/q15}
WORK=${WORK:-/tmp/q15}
OUT=${OUT:-/tmp/q15-out}
PARTS=${PARTS:-/tmp/parts}
COMMITTED=${COMMITTED:-data/selfdistill/qwen2.5-coder-1.5b-instruct}
RECIPE_JSON=recipes/qwen2.5-coder-1.5b-instruct.json
SOURCES=sharegpt:5,sharegpt_code:2,arena_hard:1.5,ifeval:1,stdlib:0.5  # the CPU campaign's mix (docs/training.md)
QUESTIONS=${QUESTIONS:-../shared/data/spec_bench/question.jsonl}  # evaluation only: excluded from every prompt
if [ -n "${DRY_RUN:-}" ]; then  # the CPU, the cached model, tiny sizes
  PY=${PY:-.venv/bin/python} DEVICE=cpu DTYPE=float32 GEN_SECONDS=${GEN_SECONDS:-60} GEN_BATCH=2 GEN_PROMPTS=4
  DEADLINE=${DEADLINE:-420} EVAL_MARGIN=${EVAL_MARGIN:-120} BATCH=2 MAX_STEPS=4 FEATURE_TOKENS=1024 MAX_RECORDS=40
  MAX_NEW=32 THREADS=${THREADS:-2} SEQ=384 WARMUP=1 RIDGE=4096 SPLIT=(--eval_fraction 0.1)
else
  PY=${PY:-python3} DEVICE=cuda DTYPE=bfloat16 GEN_SECONDS=${GEN_SECONDS:-150} GEN_BATCH=${GEN_BATCH:-256}
  GEN_PROMPTS=${GEN_PROMPTS:-12000} DEADLINE=${DEADLINE:-570} EVAL_MARGIN=${EVAL_MARGIN:-60} BATCH=${BATCH:-32}
  MAX_STEPS=${MAX_STEPS:-4000} FEATURE_TOKENS=${FEATURE_TOKENS:-32768} MAX_RECORDS=0 MAX_NEW=256
  THREADS=${THREADS:-8} SEQ=1024 WARMUP=50 RIDGE=20000 SPLIT=()  # the recipe's: the campaign's held-out split
fi
records_jsonl() {  # the committed records as JSONL on stdout
  $PY -c "import json, sys; from oneiro_hf.training.records import load_records
sys.stdout.writelines(json.dumps(r) + '\n' for r in load_records('$COMMITTED'))"
}
unanswered_prompts() {  # FILE: GEN_PROMPTS prompts of the campaign's mix the committed records lack, Spec-Bench out
  $PY - "$1" "$COMMITTED" "$GEN_PROMPTS" "$SOURCES" "$QUESTIONS" <<'PYEOF'
import json, sys
from oneiro_hf.training.prompts.mix import iter_prompts
from oneiro_hf.training.records import dataset_ids

out, committed, wanted, sources, questions = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
done = dataset_ids(committed)
left = [p for p in iter_prompts(sources, limit=len(done) + wanted, exclude=[questions]) if str(p["id"]) not in done]
with open(out, "w") as fh:
    fh.writelines(json.dumps(p) + "\n" for p in left[:wanted])
print(f"{min(len(left), wanted)} prompts to answer, {len(done)} answered in {committed}", file=sys.stderr)
PYEOF
}

if [ "$PHASE" = prepare ]; then
  set -e
  grep -qx "/.devcarry/" .gitignore
  tmp=$(mktemp -d)
  mkdir -p "$tmp/s/w"
  $PY -m oneiro_hf.storage.reference_models gguf qwen2.5-coder-1.5b-instruct --out "$tmp/s/qwen15.gguf"  # sha256 checked
  $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d "$tmp/s/w" transformers==5.24.0 gguf==0.19.0
  records_jsonl | gzip > "$tmp/s/committed.jsonl.gz"
  unanswered_prompts "$tmp/s/prompts.jsonl"  # the machine has no prompt packages
  carry_pieces "$tmp/s" "$PIECES"
  rm -rf "$tmp"
  echo "  run(carry=[\"$PIECES/c\"], timeout_s=600, command=\"bash scripts/gpu_train_qwen15.sh lease 2>&1 | cut -c 1-400\")"
  echo "Then, here: scripts/carry.sh full"
  exit 0
fi

export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 OMP_NUM_THREADS=$THREADS
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
mkdir -p "$OUT" "$WORK"
if [ -z "${DRY_RUN:-}" ]; then
  export ONEIRO_HF_CACHE=$WORK/cache
  carry_unpack "$PARTS" "$PIECES/c" "$WORK" \
    || { stamp "the carried pieces do not unpack (are all of them in $PARTS?)"; exit 1; }
  $PY -m pip install -q --no-index --no-deps --no-compile --target "$WORK/site" "$WORK"/w/*.whl || exit 1
  export PYTHONPATH=$WORK/site:$PWD
  $PY -m oneiro_hf.storage.reference_models fetch qwen2.5-coder-1.5b-instruct --gguf "$WORK/qwen15.gguf" 2>&1 \
    | grep -v "it/s" || exit 1
  gzip -dc "$WORK/committed.jsonl.gz" > "$WORK/answers.jsonl"
else  # the committed records and the unanswered prompts of the mix, made here as prepare makes them
  records_jsonl > "$WORK/answers.jsonl" && unanswered_prompts "$WORK/prompts.jsonl" || exit 1
fi
stamp "target ready; answering $(wc -l < "$WORK/prompts.jsonl") prompts for ${GEN_SECONDS}s"
timeout "$GEN_SECONDS" $PY -m oneiro_hf.training.selfdistill --target qwen2.5-coder-1.5b-instruct \
  --out "$WORK/answers.jsonl" --prompts-file "$WORK/prompts.jsonl" --num-prompts "$GEN_PROMPTS" \
  --max-new-tokens "$MAX_NEW" --batch-size "$GEN_BATCH" --device "$DEVICE" --dtype "$DTYPE" --no-progress \
  > "$OUT/gen.log" 2>&1
stamp "$(wc -l < "$WORK/answers.jsonl") records; training until $(( DEADLINE - EVAL_MARGIN ))s"
gzip -c "$WORK/answers.jsonl" > "$OUT/answers.jsonl.gz"
mapfile -t recipe < <($PY -c "from oneiro_hf.training.campaign import recipe_flags
print('\n'.join(recipe_flags('$RECIPE_JSON')))") || exit 1
limit=()
[ "$MAX_RECORDS" -gt 0 ] && limit=(--max_records "$MAX_RECORDS")
# the recipe, then the lease's sizes (a flag given twice takes its later value): the whole set's features computed
# once into the lease's own cache (nothing streamed, so nothing kept), the target in $DTYPE, one deadline, no
# checkpoints
$PY -m oneiro_hf.training.cli --target qwen2.5-coder-1.5b-instruct --data "$WORK/answers.jsonl" "${recipe[@]}" \
  --target_dtype "$DTYPE" --per_device_train_batch_size "$BATCH" --max_steps "$MAX_STEPS" --warmup_steps "$WARMUP" \
  --feature_batch_tokens "$FEATURE_TOKENS" --feature_cache_dir "$WORK/features" --stream_features false \
  --feature_cache_max_gb 0 --ridge_positions "$RIDGE" --save_strategy no --logging_steps 50 --max_seq_len "$SEQ" \
  --train_until $(( t0 + DEADLINE - EVAL_MARGIN )) --output_dir "$WORK/drafter" "${limit[@]}" "${SPLIT[@]}" \
  > "$OUT/train.log" 2>&1 || { stamp "training failed"; tail -20 "$OUT/train.log"; exit 1; }
cp "$WORK/drafter/training_summary.json" "$OUT/"
# the drafter as shipped: trained relative to the target (about 11 MiB), back with the lease call itself
cp -r "$WORK/drafter" "$OUT/drafter_relative" && rm -rf "$OUT"/drafter_relative/checkpoint-*
stamp "done: $(ls "$OUT")"
