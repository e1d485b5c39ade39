#!/bin/bash
# session 12 A/B on an AMD EPYC (avx2, no AMX; t(2) = 1.5-1.7 t(1) with MKL's F.linear): prepacked CPU linears with
# per-shape thresholds measured on this machine (default) against torch's own F.linear (a drafter copy with
# prepack_cpu_weights false), plus transformers' prompt lookup and latent alone; 13 Spec-Bench questions
# (1 per category), 256 new tokens, two one-thread lanes. Both arms learn t(k) online (--no-profile): one profile
# cannot describe both. Run from the repository root.
set -e
Q=${ONEIRO_BENCH_QUESTIONS:-../shared/data/spec_bench/question.jsonl}
O=runs/s12ab
export OMP_NUM_THREADS=1
mkdir -p $O && rm -rf $O/drafter_stock && cp -r drafters/smollm2-135m-instruct $O/drafter_stock
.venv/bin/python -c "import json; p='$O/drafter_stock/config.json'; c=json.load(open(p)); c['prepack_cpu_weights']=False; json.dump(c, open(p, 'w'), indent=2)"
M=greedy,hf-lookup,oneiro-lookup,oneiro-latent,oneiro-hybrid,oneiro-hybrid@stock
common="--target smollm2-135m-instruct --questions $Q --per-category 1 --max-new-tokens 256 --threads 1 --methods $M --no-profile --no-plots --extra-drafter stock=$O/drafter_stock --resume"
.venv/bin/oneiro-bench $common --categories writing,roleplay,reasoning,math,translation,summarization,qa \
  --out $O/laneA > $O/laneA.log 2>&1 &
.venv/bin/oneiro-bench $common --categories coding,extraction,stem,humanities,math_reasoning,rag \
  --out $O/laneB > $O/laneB.log 2>&1 &
wait
.venv/bin/oneiro-bench merge $O/laneA $O/laneB --into $O/merged > $O/merge.log 2>&1
