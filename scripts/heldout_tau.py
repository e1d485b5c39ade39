"""Held-out acceptance of several drafters of one target on the same held-out records: the split oneiro-train
makes of --data (by id hash, so records held out once stay held out as the data grows), measured as oneiro-train
measures it (parallel rollouts of --steps draft tokens, tau = expected tokens per target pass).

    python scripts/heldout_tau.py --target qwen2.5-coder-1.5b-instruct \
        --data data/selfdistill/qwen2.5-coder-1.5b-instruct --recipe recipes/qwen2.5-coder-1.5b-instruct.json \
        --feature_cache_dir runs/features/qwen15 whole=runs/train/qwen15 relative=runs/train/qwen15-relative fresh=fresh

The split is the one the drafters were trained with: --recipe reads its --eval_fraction and --split_seed (or pass
them); a larger fraction than the training run held out would score records the drafters trained on.

A drafter is NAME=PATH (a saved drafter, either storage) or NAME=fresh (copies of the last two layers, untrained).
Prints one line per drafter and writes them as JSON with --out.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from oneiro_hf import OneiroDrafter
from oneiro_hf.training import feature_store as store
from oneiro_hf.training import pipeline
from oneiro_hf.training.campaign import recipe_split
from oneiro_hf.training.cli import parse_args
from oneiro_hf.training.trainer import evaluate_drafter


def held_out_split(parser: argparse.ArgumentParser, own: argparse.Namespace) -> tuple[str, str]:
    """(eval_fraction, split_seed) as flag text: given ones win over the recipe's split, which wins over none."""
    if own.recipe:
        split = recipe_split(own.recipe)
        return str(own.eval_fraction or split.eval_fraction), str(own.split_seed or split.seed)
    if own.eval_fraction is None:
        parser.error("the held-out split is unknown, and a larger one than training used scores records the drafters "
                     "trained on. Fix: pass --recipe (the drafters' oneiro-train recipe) or --eval_fraction.")
    return own.eval_fraction, own.split_seed or "0"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--feature_cache_dir", required=True)
    parser.add_argument("--feature_dtype", default="float32", choices=["float32", "bfloat16"],
                        help="what the target's layers compute the held-out features in (oneiro-train's flag)")
    parser.add_argument("--recipe", help="the drafters' oneiro-train recipe (JSON): its held-out split is used")
    parser.add_argument("--eval_fraction", help="the held-out share the drafters were trained with (or --recipe)")
    parser.add_argument("--split_seed", help="the split seed the drafters were trained with (or --recipe)")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out")
    parser.add_argument("drafters", nargs="+", help="NAME=PATH or NAME=fresh")
    own = parser.parse_args()
    eval_fraction, split_seed = held_out_split(parser, own)
    torch.set_num_threads(own.threads)
    model_args, data_args, args = parse_args([
        "--target", own.target, "--data", own.data, "--feature_cache_dir", own.feature_cache_dir,
        "--eval_fraction", eval_fraction, "--split_seed", split_seed, "--output_dir", "/tmp/heldout_tau",
        "--report_to", "none", "--feature_batch_tokens", "2048"])
    target, tokenizer = pipeline.load_target(model_args)
    data = pipeline.prepare_data(model_args, data_args, args, target, tokenizer, pipeline.Timer())
    cache = store.FeatureCache(own.feature_cache_dir, target, args.max_seq_len,
                              compute_dtype=getattr(torch, own.feature_dtype))
    cache.build(data.eval, batch_tokens=2048, with_resid=False)
    held_out = store.CachedFeatureDataset(cache, data.eval)
    results = {}
    for spec in own.drafters:
        name, path = spec.split("=", 1)
        if path == "fresh":
            drafter = OneiroDrafter.from_target(target).bind(target)
        else:  # evaluated in float32, as oneiro-train evaluates the drafter it trains
            drafter = OneiroDrafter.from_pretrained(path, target=target).float()
        start = time.perf_counter()
        m = evaluate_drafter(drafter, held_out, target, own.steps, None, 2048)
        results[name] = {"path": path, **{k: m[k] for k in m if k.startswith(("eval_tau", "eval_accept"))}}
        print(f"{name}: tau {m['eval_tau']:.3f}, first token accepted {m['eval_accept_1']:.3f} "
              f"({m['eval_positions']:.0f} positions of {len(data.eval)} held-out records, "
              f"{time.perf_counter() - start:.0f} s)", flush=True)
    if own.out:
        with open(own.out, "w") as fh:
            json.dump({"held_out_records": len(data.eval), "eval_fraction": float(eval_fraction), "steps": own.steps,
                       "feature_dtype": own.feature_dtype, "drafters": results}, fh, indent=1)


if __name__ == "__main__":
    main()
