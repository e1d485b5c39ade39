#!/bin/bash
# session 11: profile alone, then 65 Spec-Bench questions in two one-thread lanes (nothing else running).
# Run from the repository root after `make setup`; writes runs/s11.
set -e
Q=${ONEIRO_BENCH_QUESTIONS:-../shared/data/spec_bench/question.jsonl}
P=runs/s11/profile_smollm2.json
export OMP_NUM_THREADS=1
# the A/B arm: the shipped drafter with lookup after latent switched off in its config
mkdir -p runs/s11 && rm -rf runs/s11/drafter_noext && cp -r drafters/smollm2-135m-instruct runs/s11/drafter_noext
.venv/bin/python -c "import json; p='runs/s11/drafter_noext/config.json'; c=json.load(open(p)); c['lookup_after_latent']=False; json.dump(c, open(p, 'w'), indent=2)"
.venv/bin/oneiro-bench profile --target smollm2-135m-instruct --threads 1 --out $P > runs/s11/profile.log 2>&1
M=greedy,hf-lookup,oneiro-lookup,oneiro-latent,oneiro-latent-fixed-3,oneiro-hybrid,oneiro-hybrid@noext,oneiro-tree
common="--target smollm2-135m-instruct --questions $Q --per-category 5 --max-new-tokens 256 --threads 1 --methods $M --latency-profile $P --no-plots --extra-drafter noext=runs/s11/drafter_noext --resume"
.venv/bin/oneiro-bench $common --categories writing,roleplay,reasoning,math,translation,summarization,qa \
  --out runs/s11/laneA > runs/s11/laneA.log 2>&1 &
.venv/bin/oneiro-bench $common --categories coding,extraction,stem,humanities,math_reasoning,rag \
  --out runs/s11/laneB > runs/s11/laneB.log 2>&1 &
wait
.venv/bin/oneiro-bench merge runs/s11/laneA runs/s11/laneB --into runs/s11/merged > runs/s11/merge.log 2>&1
.venv/bin/oneiro-bench breakdown --run runs/s11/merged >> runs/s11/merge.log 2>&1
.venv/bin/oneiro-bench breakdown --run runs/s11/merged --latency-profile h200 >> runs/s11/merge.log 2>&1
