"""Publish a drafter on the Hub with a generated model card (or, with --dry-run, write what would be sent).

    # the shipped SmolLM2 drafter, card filled from its training summary and a benchmark run
    python examples/publish.py --repo-id your-org/smollm2-135m-oneiro-drafter \\
        --base-model HuggingFaceTB/SmolLM2-135M-Instruct --license apache-2.0 \\
        --bench-summary docs/benchmarks/current/smollm2-135m-instruct/summary.json --hardware "2-core x86_64 CPU"

    # a Qwen2.5-Coder-1.5B drafter stored relative to its target (11 MiB instead of 188 MB)
    python examples/publish.py --target qwen2.5-coder-1.5b-instruct --drafter runs/train/qwen15 \\
        --layer-rank 32 --token-rank 256 \\
        --repo-id your-org/qwen2.5-coder-1.5b-oneiro-drafter --license apache-2.0 --dry-run out/q15

    # offline: write the folder that would be uploaded (README.md included) and stop
    python examples/publish.py --repo-id your-org/smollm2-135m-oneiro-drafter \\
        --base-model HuggingFaceTB/SmolLM2-135M-Instruct --license apache-2.0 --dry-run out/publish

    # seconds, for tests: a tiny random target and a fresh drafter
    python examples/publish.py --tiny --dry-run out/tiny --repo-id your-org/tiny-drafter --license mit

A real publish needs a token with write access (`hf auth login`, or HF_TOKEN in the environment).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from oneiro_hf import DrafterTargetMismatch, OneiroDrafter
from oneiro_hf.storage.hub import ModelCardError, prepare_upload, publish_drafter

TINY_BASE = "your-org/tiny-base"


def _tiny_drafter() -> OneiroDrafter:
    """A 4-layer random Llama posing as the Hub model TINY_BASE, and a fresh drafter for it."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    model.name_or_path = TINY_BASE  # as from_pretrained(TINY_BASE) would leave it
    return OneiroDrafter.from_target(model, draft_vocab_ids=list(range(3, 67)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo-id", required=True, help="where to publish, 'org/name'")
    parser.add_argument("--target", default="smollm2-135m-instruct", help="reference model name or model path")
    parser.add_argument("--drafter", default=None, help="drafter directory (default: the one shipped for --target)")
    parser.add_argument("--base-model", default=None, help="Hub id of the target (default: the drafter's record)")
    parser.add_argument("--license", required=True, help="license id of the base model, e.g. apache-2.0")
    parser.add_argument("--bench-summary", default=None, help="an oneiro-bench summary.json for the speed table")
    parser.add_argument("--training-info", default=None, help="training_summary.json (default: next to the drafter)")
    parser.add_argument("--hardware", default=None, help="what the benchmark ran on, e.g. '1x H200'")
    parser.add_argument("--dtype", default=None, help="write the weights in this dtype, e.g. bfloat16")
    parser.add_argument("--layer-rank", type=int, default=None,
                        help="store the weights relative to the target: each copied matrix as a difference of this "
                        "rank (docs/hub.md, 'Target-relative checkpoints'; default: whole weights)")
    parser.add_argument("--token-rank", type=int, default=None,
                        help="with --layer-rank: the fusion's token block as identity + this rank (default: whole)")
    parser.add_argument("--private", action="store_true", help="create the repo private")
    parser.add_argument("--dry-run", metavar="DIR", default=None, help="write the upload folder to DIR, send nothing")
    parser.add_argument("--tiny", action="store_true", help="a tiny random target and fresh drafter (for tests)")
    args = parser.parse_args(argv)

    if args.tiny:
        drafter = _tiny_drafter()
    else:
        from oneiro_hf.loading import load_target_and_drafter

        _, _, drafter = load_target_and_drafter(args.target, args.drafter)
    if args.token_rank is not None and args.layer_rank is None:
        parser.error("--token-rank needs --layer-rank (the rank of the copied layers' differences)")
    storage = None
    if args.layer_rank is not None:
        from oneiro_hf.storage.target_relative import RelativeStorage

        storage = RelativeStorage(layer_rank=args.layer_rank, token_rank=args.token_rank)
    card = {
        "storage": storage,
        "base_model": args.base_model,
        "license": args.license,
        "bench_summary": args.bench_summary,
        "training_info": args.training_info,
        "hardware": args.hardware,
    }
    try:
        if args.dry_run:
            files = prepare_upload(drafter, args.dry_run, repo_id=args.repo_id, dtype=args.dtype, **card)
            print(f"Dry run: nothing sent. {args.repo_id} would receive, from {Path(args.dry_run)}:")
            for file in files:
                print(f"  {file.name:24s} {file.stat().st_size:>12,d} bytes")
            return 0
        commit = publish_drafter(drafter, args.repo_id, dtype=args.dtype, private=args.private or None, **card)
    except (ModelCardError, DrafterTargetMismatch, FileExistsError) as err:
        print(f"publish.py: {err}", file=sys.stderr)
        return 2
    print(f"Published {args.repo_id}: commit {commit.oid}")
    print(f'Use it: OneiroDrafter.from_pretrained("{args.repo_id}", target=model)')
    return 0


if __name__ == "__main__":
    sys.exit(main())
