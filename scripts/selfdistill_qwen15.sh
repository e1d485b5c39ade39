#!/bin/bash
# Self-distillation data for Qwen2.5-Coder-1.5B-Instruct: its own greedy answers to the shipped drafters' prompt
# mix (ShareGPT, Arena-Hard, IFEval, stdlib, synthetic; Spec-Bench and MT-bench prompts left out), batched and
# resumable: re-running the same command skips the ids already answered, and a line cut by an interrupt is
# regenerated. On a CPU it is slow (one thread: tens of tokens per second); a GPU answers the whole list in minutes
# (DEVICE=cuda, BATCH=256). Export the JSONL as a dataset with its card once done:
#   python -m oneiro_hf.training.distill_dataset --target qwen2.5-coder-1.5b-instruct \
#       --jsonl runs/data/qwen15/answers.jsonl --out data/selfdistill/qwen2.5-coder-1.5b-instruct \
#       --log <this job's log> --sources sharegpt:7,arena_hard:1,ifeval:1,stdlib:1,synthetic:1 \
#       --max-new-tokens 256 --batch-size $BATCH --threads $THREADS --exclude ../shared/data/spec_bench/question.jsonl
# (incremental: re-run it as generation proceeds). On a machine without the JSONL, resume generation from the
# committed dataset with --skip-dataset data/selfdistill/qwen2.5-coder-1.5b-instruct (SKIP=... below).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-runs/data/qwen15/answers.jsonl}
PROMPTS=${PROMPTS:-8000}
BATCH=${BATCH:-16}
THREADS=${THREADS:-1}
DEVICE=${DEVICE:-cpu}
QUESTIONS=${QUESTIONS:-../shared/data/spec_bench/question.jsonl}
mkdir -p "$(dirname "$OUT")"
exec "$PY" -m oneiro_hf.training.selfdistill --target qwen2.5-coder-1.5b-instruct --out "$OUT" \
  --num-prompts "$PROMPTS" --sources sharegpt:7,arena_hard:1,ifeval:1,stdlib:1,synthetic:1 \
  --exclude "$QUESTIONS" --max-new-tokens 256 --batch-size "$BATCH" --threads "$THREADS" --device "$DEVICE" \
  --no-progress ${SKIP:+--skip-dataset "$SKIP"}
