"""Demo: SmolLM2-135M-Instruct with and without a OneiroDraft drafter, same text, tokens/s side by side."""

from __future__ import annotations

import time

import torch

from oneiro_hf.latency import profile_verification_latency
from oneiro_hf.loading import default_drafter_dir, load_target_and_drafter

TARGET = "smollm2-135m-instruct"
PROMPTS = [
    (
        "Summarize this in two sentences: The Python standard library contains modules for file I/O, "
        "system calls, sockets, and even interfaces to graphical user interface toolkits. Many of its "
        "modules are written in C for speed, while others are pure Python and easy to read."
    ),
    "Write a Python function that returns the n-th Fibonacci number, with a docstring.",
    "What are three tips for staying focused while studying?",
]


def main() -> None:
    model, tokenizer, drafter = load_target_and_drafter(TARGET, None)
    shipped = default_drafter_dir(TARGET)
    print(f"target: {TARGET}   drafter: {shipped or 'fresh, untrained (from the target layers)'}")
    # A few seconds of calibration: how much a k-token verification costs on this machine.
    profile = profile_verification_latency(model, ks=(1, 2, 3, 4, 5, 6, 8), repeats=3)
    drafter.use_latency_profile(profile)
    ratios = ", ".join(f"t({k})={r:.2f}" for k, r in profile["ratios"].items())
    print(f"verification latency: t(1)={profile['t1_s'] * 1000:.1f} ms; {ratios} x t(1)")
    for prompt in PROMPTS:
        enc = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                            return_tensors="pt", return_dict=True)
        ids = enc["input_ids"]
        model.generate(ids, max_new_tokens=4)  # warm-up
        results = {}
        for method in ("greedy", "lookup", "latent", "hybrid"):
            extra = {} if method == "greedy" else {"assistant_model": drafter, "oneiro_mode": method}
            start = time.perf_counter()
            out = model.generate(ids, max_new_tokens=128, do_sample=False, **extra)
            elapsed = time.perf_counter() - start
            new = out[0, ids.shape[1]:]
            tau = drafter.last_stats.mean_accepted_tokens if method != "greedy" else 1.0
            results[method] = (new, len(new) / elapsed, tau)
        print("\n" + "=" * 100 + f"\nPROMPT: {prompt}\n" + "-" * 100)
        print(tokenizer.decode(results["greedy"][0], skip_special_tokens=True))
        print("-" * 100)
        for method, (tokens, tps, tau) in results.items():
            same = torch.equal(tokens, results["greedy"][0])
            speed = tps / results["greedy"][1]
            print(f"{method:>7}: {tps:6.1f} tok/s  {speed:4.2f}x  mean accepted {tau:4.2f}  identical to greedy: {same}")


if __name__ == "__main__":
    main()
