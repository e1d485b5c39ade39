"""Demo: SmolLM2-135M-Instruct with and without a OneiroDraft drafter, same text, tokens/s side by side.

Speed on a shared machine is noisy, so each prompt runs every method in interleaved rounds (greedy, lookup,
latent, hybrid, then again), the lines show the median tokens/s with its spread over the rounds, and the demo
says plainly when the spread was too large for the figures to mean anything.

    python examples/demo.py [--rounds 3] [--max-new-tokens 128]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from oneiro_hf.latency import profile_verification_latency
from oneiro_hf.loading import default_drafter_dir, load_target_and_drafter

TARGET = "smollm2-135m-instruct"
METHODS = ("greedy", "lookup", "latent", "hybrid")
PROMPTS = [
    (
        "Summarize this in two sentences: The Python standard library contains modules for file I/O, "
        "system calls, sockets, and even interfaces to graphical user interface toolkits. Many of its "
        "modules are written in C for speed, while others are pure Python and easy to read."
    ),
    "Write a Python function that returns the n-th Fibonacci number, with a docstring.",
    "What are three tips for staying focused while studying?",
]
NOISY_SPREAD = 0.25  # any method's tokens/s varying by more than this (max/min - 1) over the rounds: too noisy


def spread(values: list[float]) -> float:
    """max/min - 1 of a list of positive numbers (0.0 for a single value)."""
    return max(values) / min(values) - 1.0 if len(values) > 1 else 0.0


def noisy_profile(ratios: dict[int, float]) -> list[int]:
    """The k whose verification cost more than k single passes: impossible on a quiet machine."""
    return [k for k, ratio in ratios.items() if k > 1 and ratio > k]


def run_rounds(model, ids, drafter, rounds: int, max_new_tokens: int) -> dict[str, dict]:
    """Every method once per round, interleaved; per method its output, tokens/s per round and mean accepted."""
    results: dict[str, dict] = {m: {"tps": [], "tau": [], "tokens": None} for m in METHODS}
    for _ in range(rounds):
        for method in METHODS:
            extra = {} if method == "greedy" else {"assistant_model": drafter, "oneiro_mode": method}
            start = time.perf_counter()
            out = model.generate(ids, max_new_tokens=max_new_tokens, do_sample=False, **extra)
            elapsed = time.perf_counter() - start
            new = out[0, ids.shape[1]:]
            results[method]["tps"].append(len(new) / elapsed)
            results[method]["tau"].append(1.0 if method == "greedy" else drafter.last_stats.mean_accepted_tokens)
            if results[method]["tokens"] is None:
                results[method]["tokens"] = new
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per prompt (default 3)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    args = parser.parse_args(argv)
    model, tokenizer, drafter = load_target_and_drafter(TARGET, None)
    shipped = default_drafter_dir(TARGET)
    print(f"target: {TARGET}   drafter: {shipped or 'fresh, untrained (from the target layers)'}")
    # A few seconds of calibration: how much a k-token verification costs on this machine.
    profile = profile_verification_latency(model, ks=(1, 2, 3, 4, 5, 6, 8), repeats=3)
    drafter.use_latency_profile(profile)
    ratios = ", ".join(f"t({k})={r:.2f}" for k, r in profile["ratios"].items())
    print(f"verification latency: t(1)={profile['t1_s'] * 1000:.1f} ms; {ratios} x t(1)")
    if bad := noisy_profile(profile["ratios"]):
        print(f"NOTE: verifying {bad} tokens took longer than that many single passes: another process was "
              "competing for the CPU, so this profile (and the speeds below) are distorted.")
    noisy_prompts = 0
    for prompt in PROMPTS:
        enc = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                            return_tensors="pt", return_dict=True)
        ids = enc["input_ids"]
        model.generate(ids, max_new_tokens=4)  # warm-up
        results = run_rounds(model, ids, drafter, args.rounds, args.max_new_tokens)
        greedy = results["greedy"]
        print("\n" + "=" * 100 + f"\nPROMPT: {prompt}\n" + "-" * 100)
        print(tokenizer.decode(greedy["tokens"], skip_special_tokens=True))
        print("-" * 100)
        base = statistics.median(greedy["tps"])
        for method, r in results.items():
            same = torch.equal(r["tokens"], greedy["tokens"])
            tps = statistics.median(r["tps"])
            print(f"{method:>7}: {tps:6.1f} tok/s (spread {spread(r['tps']):4.0%} over {len(r['tps'])} rounds)  "
                  f"{tps / base:4.2f}x  mean accepted {statistics.mean(r['tau']):4.2f}  identical to greedy: {same}")
        worst = max(spread(r["tps"]) for r in results.values())
        if worst > NOISY_SPREAD:
            noisy_prompts += 1
            print(f"NOTE: one method's speed varied by {worst:.0%} between rounds: the machine was too busy for "
                  "these speed figures to mean anything (the texts and identity checks still hold).")
    if noisy_prompts:
        print(f"\n{noisy_prompts} of {len(PROMPTS)} prompts ran on a noisy machine; rerun `make demo` when it is "
              "idle, or measure with `oneiro-bench` (docs/benchmarks.md).")


if __name__ == "__main__":
    main()
