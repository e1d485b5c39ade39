"""Demo: SmolLM2-135M-Instruct with and without a OneiroDraft drafter, same text, tokens/s side by side.

Every speedup is taken against greedy decoding on the same kernels: `oneiro-greedy` is plain greedy inside
`oneiro_hf.cpu_kernels`, the kernels a drafter's `generate` runs the target on (what `oneiro-bench` calls
`oneiro-greedy`), so a ratio over it is what speculation buys, not a faster kernel. Stock greedy
(transformers' own kernels) runs too; its ratio is printed beside, labelled "vs stock".

Speed on a shared machine is noisy, so each prompt runs every method in interleaved rounds (greedy,
oneiro-greedy, the chains lookup, latent, hybrid, and the drafter's default, then again), the lines show the median tokens/s with its spread over the
rounds, and the demo says plainly when the spread was too large for the figures to mean anything.

    python examples/demo.py [--rounds 3] [--max-new-tokens 128]
    python examples/demo.py --tiny     # a tiny random model and a fresh drafter: the same code path in seconds
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch

import oneiro_hf
from oneiro_hf.drafting.latency import profile_verification_latency
from oneiro_hf.loading import default_drafter_dir, load_target_and_drafter

TARGET = "smollm2-135m-instruct"
BASELINE = "oneiro-greedy"  # greedy inside oneiro_hf.cpu_kernels: every speedup is over it
DEFAULT = "default"  # `assistant_model=drafter` alone: the shipped drafter's config drafts trees
METHODS = ("greedy", BASELINE, "lookup", "latent", "hybrid", DEFAULT)
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


def generate_once(model, ids, drafter, method: str, max_new_tokens: int) -> torch.Tensor:
    """One greedy call of `method`: stock greedy, greedy inside oneiro_hf.cpu_kernels, a chain of a drafter mode, or
    the drafter's defaults (whose generate enters the same kernels itself)."""
    settings = {"max_new_tokens": max_new_tokens, "do_sample": False}
    if method == "greedy":
        return model.generate(ids, **settings)
    if method == BASELINE:
        with oneiro_hf.cpu_kernels(model):
            return model.generate(ids, **settings)
    if method == DEFAULT:
        return model.generate(ids, assistant_model=drafter, **settings)
    return model.generate(ids, assistant_model=drafter, oneiro_mode=method, oneiro_tree=False, **settings)


def run_rounds(model, ids, drafter, rounds: int, max_new_tokens: int) -> dict[str, dict]:
    """Every method once per round, interleaved; per method its output, tokens/s per round and mean accepted."""
    results: dict[str, dict] = {m: {"tps": [], "tau": [], "tokens": None} for m in METHODS}
    for _ in range(rounds):
        for method in METHODS:
            start = time.perf_counter()
            out = generate_once(model, ids, drafter, method, max_new_tokens)
            elapsed = time.perf_counter() - start
            new = out[0, ids.shape[1]:]
            results[method]["tps"].append(len(new) / elapsed)
            speculative = method not in ("greedy", BASELINE)
            results[method]["tau"].append(drafter.last_stats.mean_accepted_tokens if speculative else 1.0)
            if results[method]["tokens"] is None:
                results[method]["tokens"] = new
    return results


def print_results(results: dict[str, dict]) -> float:
    """One line per method: median tokens/s, its ratio over same-kernel greedy (and over stock greedy), mean
    accepted tokens, identical to stock greedy's text; returns the largest spread over the rounds."""
    greedy = results["greedy"]
    same_kernel = statistics.median(results[BASELINE]["tps"])
    stock = statistics.median(greedy["tps"])
    for method, r in results.items():
        same = torch.equal(r["tokens"], greedy["tokens"])
        tps = statistics.median(r["tps"])
        print(f"{method:>13}: {tps:6.1f} tok/s (spread {spread(r['tps']):4.0%} over {len(r['tps'])} rounds)  "
              f"{tps / same_kernel:4.2f}x same-kernel greedy ({tps / stock:4.2f}x vs stock)  "
              f"mean accepted {statistics.mean(r['tau']):4.2f}  identical to greedy: {same}")
    return max(spread(r["tps"]) for r in results.values())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per prompt (default 3)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--tiny", action="store_true", help="use a tiny random model (seconds, for tests)")
    args = parser.parse_args(argv)
    target = TARGET
    if args.tiny:
        from _tiny import make_tiny_target

        workdir = tempfile.TemporaryDirectory(prefix="oneiro-tiny-")  # removed when the script ends
        target = make_tiny_target(workdir.name)
    model, tokenizer, drafter = load_target_and_drafter(target, None)
    print(f"target: {target}   drafter: {default_drafter_dir(target) or 'fresh, untrained (from the target layers)'}")
    print(f"speedups are over {BASELINE}: plain greedy inside oneiro_hf.cpu_kernels, the kernels every drafter "
          "mode runs the target on, so they measure speculation alone; the ratio over stock greedy (transformers' "
          "own kernels) is beside it")
    # A few seconds of calibration: how much a k-token verification costs on this machine.
    profile = profile_verification_latency(model, ks=(1, 2, 3, 4, 5, 6, 8), repeats=3)
    drafter.use_latency_profile(profile)
    ratios = ", ".join(f"t({k})={r:.2f}" for k, r in profile["ratios"].items())
    print(f"verification latency on {profile['kernels']}: t(1)={profile['t1_s'] * 1000:.1f} ms; {ratios} x t(1)")
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
        print("\n" + "=" * 100 + f"\nPROMPT: {prompt}\n" + "-" * 100)
        print(tokenizer.decode(results["greedy"]["tokens"], skip_special_tokens=True))
        print("-" * 100)
        worst = print_results(results)
        if worst > NOISY_SPREAD:
            noisy_prompts += 1
            print(f"NOTE: one method's speed varied by {worst:.0%} between rounds: the machine was too busy for "
                  "these speed figures to mean anything (the texts and identity checks still hold).")
    if noisy_prompts:
        print(f"\n{noisy_prompts} of {len(PROMPTS)} prompts ran on a noisy machine; rerun `make demo` when it is "
              "idle, or measure with `oneiro-bench` (docs/benchmarks.md).")


if __name__ == "__main__":
    main()
