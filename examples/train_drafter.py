"""Train a drafter for your model: self-distillation prompts -> `oneiro-train` -> use the drafter.

    python examples/train_drafter.py                       # SmolLM2-135M-Instruct, 32 prompts (minutes on a CPU)
    python examples/train_drafter.py --target DIR --interval 20,22 --draft-vocab-size 8192
    python examples/train_drafter.py --tiny                # a tiny random model: the same code path in seconds

1. Prompts from offline sources (templated tasks built from the Python standard library and synthetic
   writing/math/reasoning tasks). Never use your evaluation set (e.g. Spec-Bench) as training prompts.
2. `oneiro-train --prompts ...` lets the target answer them with greedy decoding (the self-distillation
   data), picks the draft vocabulary, fits the fusion in closed form and trains; it saves the drafter.
3. The saved drafter is loaded onto the target and must give the same tokens as plain greedy decoding.

A handful of prompts only shows the pipeline: a useful drafter needs thousands (docs/training.md).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

from oneiro_hf import OneiroDrafter
from oneiro_hf.loading import load_target_and_drafter
from oneiro_hf.training.cli import main as oneiro_train
from oneiro_hf.training.prompts import iter_prompts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="smollm2-135m-instruct", help="reference model name or model directory")
    parser.add_argument("--out", default="runs/example_drafter", help="where the drafter is saved")
    parser.add_argument("--num-prompts", type=int, default=32)
    parser.add_argument("--max-steps", type=int, default=60, help="optimiser steps")
    parser.add_argument("--interval", default=None, help="target layers to copy, 'start,end' (default: last two)")
    parser.add_argument("--draft-vocab-size", type=int, default=8192)
    parser.add_argument("--tiny", action="store_true", help="use a tiny random model (seconds, for tests)")
    args = parser.parse_args(argv)

    workdir = tempfile.TemporaryDirectory(prefix="oneiro-train-example-")  # removed when the script ends
    target, answer_tokens = args.target, 96
    if args.tiny:
        from _tiny import make_tiny_target

        target, answer_tokens = make_tiny_target(Path(workdir.name) / "target"), 16
        args.draft_vocab_size = min(args.draft_vocab_size, 64)

    # 1. Prompts, one JSON object per line: {"id", "source", "prompt"} (your own: {"prompt": ...} is enough).
    prompts_file = Path(workdir.name) / "prompts.jsonl"
    prompts = iter_prompts("stdlib,synthetic", limit=args.num_prompts, seed=0)
    prompts_file.write_text("".join(json.dumps(prompt) + "\n" for prompt in prompts), encoding="utf-8")

    # 2. The same as running `oneiro-train ARGS...` in a shell. Any TrainingArguments field works too.
    train_args = [
        "--target", target, "--prompts", str(prompts_file), "--output_dir", args.out,
        "--gen_max_new_tokens", str(answer_tokens), "--gen_batch_size", "8",
        "--draft_vocab_size", str(args.draft_vocab_size), "--max_seq_len", "512",
        "--stage", "1+2", "--rollout_steps", "3", "--max_steps", str(args.max_steps),
        "--per_device_train_batch_size", "4", "--learning_rate", "3e-4", "--eval_fraction", "0.1",
        "--save_strategy", "no", "--report_to", "none", "--disable_tqdm", "true",
        "--overwrite_output_dir", "true",  # re-running the example replaces its drafter
    ]
    if args.interval:
        train_args += ["--interval", args.interval]
    code = oneiro_train(train_args)
    if code != 0:
        return code

    # 3. Use it: one extra argument to generate, and the output is exactly plain greedy's.
    model, tokenizer, drafter = load_target_and_drafter(target, args.out)
    assert isinstance(drafter, OneiroDrafter)
    inputs = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Write a Python function that reverses a list."}],
        add_generation_prompt=True, return_tensors="pt", return_dict=True,
    )
    plain = model.generate(**inputs, max_new_tokens=48, do_sample=False)
    fast = model.generate(**inputs, max_new_tokens=48, do_sample=False, assistant_model=drafter)
    stats = drafter.last_stats
    print(f"drafter: layers {tuple(drafter.config.interval)}, draft vocabulary {drafter.draft_vocab_ids.numel()} tokens")
    print(f"tokens per target pass: {stats.mean_accepted_tokens:.2f} "
          f"(latent drafts accepted: {stats.accepted_by_source['latent']} of {stats.drafted_by_source['latent']})")
    identical = torch.equal(plain, fast)
    print(f"identical to plain greedy: {identical}")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
