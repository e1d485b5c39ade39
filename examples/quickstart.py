"""Quickstart: the same `generate` call with one extra argument, `assistant_model=drafter`.

    python examples/quickstart.py            # SmolLM2-135M-Instruct and its shipped drafter
    python examples/quickstart.py --target MODEL_DIR --drafter DRAFTER_DIR   # your own model and drafter
    python examples/quickstart.py --tiny     # a tiny random model: the same code path in seconds

Prints both wall-clock times and whether the two outputs are token-identical (they must be: greedy
speculative decoding with strict verification is lossless). Exit status 1 if they differ.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

import torch

from oneiro_hf import OneiroDrafter
from oneiro_hf.loading import default_drafter_dir, load_target_and_drafter

PROMPT = (
    "Summarize this in two sentences: The Python standard library contains modules for file I/O, system "
    "calls, sockets, and even interfaces to graphical user interface toolkits. Many of its modules are "
    "written in C for speed, while others are pure Python and easy to read."
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="smollm2-135m-instruct", help="reference model name or model directory")
    parser.add_argument("--drafter", default=None, help="drafter directory (default: the shipped one, else fresh)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--tiny", action="store_true", help="use a tiny random model (seconds, for tests)")
    args = parser.parse_args(argv)

    target = args.target
    if args.tiny:
        from _tiny import make_tiny_target

        workdir = tempfile.TemporaryDirectory(prefix="oneiro-tiny-")  # removed when the script ends
        target = make_tiny_target(workdir.name)
    model, tokenizer, _ = load_target_and_drafter(target, None, needs_drafter=False)

    # The drafter: a trained one if this target has one, else a fresh (untrained) one built from its layers.
    drafter_dir = args.drafter or default_drafter_dir(target)
    if drafter_dir is not None:
        drafter = OneiroDrafter.from_pretrained(drafter_dir, target=model)
    else:
        drafter = OneiroDrafter.from_target(model)
    print(f"target: {target}\ndrafter: {drafter_dir or 'fresh (untrained)'}")

    inputs = tokenizer.apply_chat_template(
        [{"role": "user", "content": PROMPT}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    settings = {"max_new_tokens": args.max_new_tokens, "do_sample": False}
    model.generate(**inputs, max_new_tokens=4)  # warm-up, so neither timing pays for first-call set-up

    start = time.perf_counter()
    plain = model.generate(**inputs, **settings)
    plain_s = time.perf_counter() - start

    start = time.perf_counter()
    fast = model.generate(**inputs, **settings, assistant_model=drafter)  # the one extra argument
    fast_s = time.perf_counter() - start

    prompt_len = inputs["input_ids"].shape[1]
    print("\n" + tokenizer.decode(fast[0, prompt_len:], skip_special_tokens=True) + "\n")
    new_tokens = plain.shape[1] - prompt_len
    print(f"plain generate:       {plain_s:6.2f} s  ({new_tokens / plain_s:5.1f} tokens/s)")
    print(f"with the drafter:     {fast_s:6.2f} s  ({plain_s / fast_s:.2f}x)")
    print(f"tokens per target pass: {drafter.last_stats.mean_accepted_tokens:.2f}")
    identical = torch.equal(plain, fast)
    print(f"identical text: {identical}")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
