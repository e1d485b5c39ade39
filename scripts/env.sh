# Sourced by the scripts here: the set-up they share. From the repository root whatever the caller's directory, the
# project's venv first on PATH when there is one, THREADS torch threads (default 1: one thread per lane on this
# 2-core machine), no tokenizer threads, unbuffered logs, the Spec-Bench questions (evaluation only) and the drafter
# recipe (scripts/recipe.sh: RECIPE, SMOLLM2, GEMMA, QWEN15, CPU_SIZES).
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
[ -x .venv/bin/python ] && PATH="$PWD/.venv/bin:$PATH"
THREADS=${THREADS:-1}
QUESTIONS=${QUESTIONS:-../shared/data/spec_bench/question.jsonl}
export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
. scripts/recipe.sh
# `resume_flag DIR`: --resume_from_checkpoint last when DIR holds a checkpoint (a training run goes on from it)
resume_flag() { ls -d "$1"/checkpoint-* >/dev/null 2>&1 && echo "--resume_from_checkpoint last"; }
