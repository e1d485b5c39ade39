"""A drafter call's cost as a share of t(1) for drafter shapes of one target, before training any of them: the
copied interval and the draft vocabulary decide it (a trained drafter of the same shape costs the same).

    python scripts/drafter_step_variants.py --target qwen2.5-coder-1.5b-instruct --threads 1 --out FILE.json
"""

from __future__ import annotations

import argparse
import json

import torch

from oneiro_hf import OneiroDrafter
from oneiro_hf.drafting.latency import profile_drafter_step
from oneiro_hf.storage.reference_models import load_reference_model

# (name, interval counted from the end, draft vocabulary size, multi-layer input)
VARIANTS = (("last2-vocab16k", 2, 16384, False), ("last2-vocab16k-multilayer", 2, 16384, True),
            ("last1-vocab16k", 1, 16384, False), ("last2-vocab32k", 2, 32768, False))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", required=True)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--context-len", type=int, default=200)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, _ = load_reference_model(args.target)
    layers = model.config.num_hidden_layers
    results = {}
    for name, depth, vocab, multi in VARIANTS:
        inputs = (layers // 4, layers // 2, -1) if multi else None  # the shipped SmolLM2 drafter's pattern
        drafter = OneiroDrafter.from_target(model, interval=(layers - depth, layers),
                                            draft_vocab_ids=torch.arange(vocab), input_layers=inputs)
        results[name] = profile_drafter_step(drafter, args.context_len)
        print(name, json.dumps(results[name]), flush=True)
        del drafter
    with open(args.out, "w") as fh:
        json.dump({"target": args.target, "threads": args.threads, "context_len": args.context_len,
                   "variants": results}, fh, indent=2)


if __name__ == "__main__":
    main()
