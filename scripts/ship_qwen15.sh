#!/bin/bash
# Ship the Qwen2.5-Coder-1.5B-Instruct drafter: the training output (scripts/train_qwen15.sh) stored relative to its
# target in drafters/qwen2.5-coder-1.5b-instruct (11 MiB: each copied matrix as a rank-32 difference from the
# target's, the fusion's token block as identity + rank 256; docs/hub.md says why), with its card, and the Hub card
# rendered into model_cards/drafters/ (tests/test_packaging.py's SHIPPED_CARDS checks it). A drafter trained in that
# parametrisation (the default of train_qwen15.sh) ships its files as they are; a whole one is truncated to it.
# Benchmark a candidate first: DST=runs/ship scripts/ship_qwen15.sh
#   scripts/ship_qwen15.sh     # SRC (default runs/train/qwen15-relative), BENCH_SUMMARY (the benchmark behind the cards),
#                              # HARDWARE (the machine that benchmark ran on, as the cards name it)
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=${SRC:-runs/train/qwen15-relative}
DST=${DST:-drafters/qwen2.5-coder-1.5b-instruct}
BENCH_SUMMARY=${BENCH_SUMMARY:-docs/benchmarks/current/qwen2.5-coder-1.5b-instruct/xeon-run/summary.json}
HARDWARE=${HARDWARE:-"2-core Intel Xeon CPU (AMX), one 2-thread lane"}
export OMP_NUM_THREADS=${THREADS:-2}
rm -rf "$DST.new" && mkdir -p "$DST.new"
.venv/bin/python - "$SRC" "$DST.new" "$BENCH_SUMMARY" "$HARDWARE" <<'PY'
import shutil
import sys

import torch

from oneiro_hf import OneiroDrafter, OneiroDrafterConfig
from oneiro_hf.storage.cards import write_model_card
from oneiro_hf.loading import load_target
from oneiro_hf.storage.target_relative import RelativeStorage, save_target_relative

src, dst, summary, hardware = sys.argv[1:]
target, _ = load_target("qwen2.5-coder-1.5b-instruct", "float32", device="cpu")
drafter = OneiroDrafter.from_pretrained(src, target=target)
storage = RelativeStorage.from_config(OneiroDrafterConfig.from_pretrained(src))
if storage is not None:  # trained as differences from the target: its files are what ships
    for name in ("config.json", "model.safetensors"):
        shutil.copy(f"{src}/{name}", dst)
    print(f"trained relative to the target ({storage}): files copied as they are")
else:
    storage = RelativeStorage(layer_rank=32, token_rank=256)
    errors = save_target_relative(drafter, dst, storage, dtype=torch.bfloat16)
    print(f"stored relative to the target; relative truncation error per matrix {min(errors.values()):.2f}.."
          f"{max(errors.values()):.2f}")
shutil.copy(f"{src}/training_summary.json", dst)
write_model_card(drafter, dst, repo_id=dst.removesuffix(".new"), for_hub=False, dtype=torch.bfloat16,
                 bench_summary=summary, hardware=hardware, storage=storage)
PY
rm -rf "$DST" && mv "$DST.new" "$DST"
rm -rf runs/ship_qwen15_card
.venv/bin/python examples/publish.py --target qwen2.5-coder-1.5b-instruct --drafter "$DST" --layer-rank 32 --token-rank 256 \
  --repo-id your-org/qwen2.5-coder-1.5b-oneiro-drafter --base-model Qwen/Qwen2.5-Coder-1.5B-Instruct \
  --license apache-2.0 --bench-summary "$BENCH_SUMMARY" --hardware "$HARDWARE" --dry-run runs/ship_qwen15_card
cp runs/ship_qwen15_card/README.md model_cards/drafters/qwen2.5-coder-1.5b-instruct.md
ls -la "$DST"
