"""Peak memory of the drafter catching up on a long prompt: in chunks (TRANSITION_CHUNK) or all at once.

The drafter's first latent draft feeds every verified position it has not seen (a whole long prompt) through
its copied layers. This measures the process's peak RSS around that one `transition` call on the shipped
SmolLM2 drafter with random states (the target's forward is not needed), per prompt length, chunked and in
one pass, and checks that both give the same states. Linux only (VmHWM, reset through /proc/self/clear_refs).

    python scripts/long_context_memory.py --lengths 2000 4000 7000
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

import oneiro_hf.modeling_oneiro as modeling
from oneiro_hf import OneiroDrafter
from oneiro_hf.kv_cache import DrafterKVCache
from oneiro_hf.loading import default_drafter_dir
from oneiro_hf.reference_models import load_reference_model


def peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status: this script needs Linux.")


def reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="smollm2-135m-instruct")
    parser.add_argument("--lengths", type=int, nargs="+", default=[2000, 4000, 7000])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, _ = load_reference_model(args.target)
    drafter = OneiroDrafter.from_pretrained(default_drafter_dir(args.target), target=model)
    hidden, vocab = model.config.hidden_size, model.config.vocab_size
    chunk = modeling.TRANSITION_CHUNK
    rows = []
    for n in args.lengths:
        gen = torch.Generator().manual_seed(n)
        states = torch.randn(1, n, hidden, generator=gen)
        ids = torch.randint(0, vocab, (1, n), generator=gen)
        positions = torch.arange(1, n + 1).unsqueeze(0)
        out = {}
        for label, size in (("one pass", n + 1), (f"chunks of {chunk}", chunk)):
            modeling.TRANSITION_CHUNK = size
            reset_peak()
            base = peak_rss_mb()
            t0 = time.perf_counter()
            with torch.no_grad():
                out[label] = drafter.transition(states, ids, positions, DrafterKVCache(max_capacity=n + 1))
            rows.append({"positions": n, "mode": label, "peak_rss_delta_mb": round(peak_rss_mb() - base, 1),
                         "seconds": round(time.perf_counter() - t0, 2)})
            print(rows[-1], flush=True)
        modeling.TRANSITION_CHUNK = chunk
        first, second = out.values()
        print(f"{n} positions: max |difference| of the states {float((first - second).abs().max()):.2e}")
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
