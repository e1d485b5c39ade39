#!/bin/bash
# Own vs exact verified context through oneiro-train, from the same ridge fit at equal budget, on the
# first 600 committed SmolLM2 records (5% held out), multi-layer input as shipped; one thread per arm.
THREADS=1  # one per arm
. "$(dirname "$0")/env.sh"  # writes to runs/s13/exact_ab
O=runs/s13/exact_ab
mkdir -p $O
arm() {
  local name=$1; shift
  oneiro-train "${RECIPE[@]}" "${SMOLLM2[@]}" --data data/selfdistill/smollm2-135m-instruct --max_records 600 \
    --max_seq_len 512 --input_layers 8,16,30 "${CPU_SIZES[@]}" --stage1_fraction 0.6 --max_steps 240 \
    --save_total_limit 1 --threads 1 --output_dir "$O/$name" $(resume_flag "$O/$name") "$@" > "$O/$name.log" 2>&1
}
arm own --feature_cache_dir $O/feat_own &
arm exact --verified_context exact --feature_cache_dir $O/feat_exact &
wait
# then, in real decoding (6 Spec-Bench questions, evaluation only; 64 new tokens; fixed 3-token latent drafts):
# oneiro-bench --target smollm2-135m-instruct --questions ../shared/data/spec_bench/question.jsonl \
#   --per-category 1 --categories writing,coding,math,qa,reasoning,extraction --max-new-tokens 64 --threads 1 \
#   --methods greedy,oneiro-latent-fixed-3@own,oneiro-latent-fixed-3@exact --extra-drafter own=runs/s13/exact_ab/own \
#   --extra-drafter exact=runs/s13/exact_ab/exact --no-profile --no-plots --out runs/s13/exact_decode
