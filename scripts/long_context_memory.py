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
import subprocess
import sys
import time
from pathlib import Path

import torch

from oneiro_hf import OneiroDrafter
from oneiro_hf.drafting.kv_cache import DrafterKVCache
from oneiro_hf.loading import default_drafter_dir
from oneiro_hf.modeling_oneiro import TRANSITION_CHUNK
from oneiro_hf.storage.reference_models import load_reference_model


def peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status: this script needs Linux.")


def reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")


def measure(target: str, n: int, one_pass: bool, threads: int) -> dict:
    """One measurement in this (fresh) process: peak RSS above the loaded model, and the states' checksum. One pass:
    `transition` given a causal `mask_fn`, which it never splits (the cache is empty, so the mask is n x n)."""
    torch.set_num_threads(threads)
    model, _ = load_reference_model(target)
    drafter = OneiroDrafter.from_pretrained(default_drafter_dir(target), target=model)
    gen = torch.Generator().manual_seed(n)
    states = torch.randn(1, n, drafter.fuse.in_features - model.config.hidden_size, generator=gen)  # k input states
    ids = torch.randint(0, model.config.vocab_size, (1, n), generator=gen)
    positions = torch.arange(1, n + 1).unsqueeze(0)
    mask_fn = (lambda window: torch.ones(n, n, dtype=torch.bool).tril()[None, None]) if one_pass else None
    reset_peak()
    base = peak_rss_mb()
    t0 = time.perf_counter()
    with torch.no_grad():
        out = drafter.transition(states, ids, positions, DrafterKVCache(max_capacity=n + 1), mask_fn=mask_fn)
    return {"positions": n, "chunk": n if one_pass else TRANSITION_CHUNK, "peak_rss_delta_mb": round(peak_rss_mb() - base, 1),
            "seconds": round(time.perf_counter() - t0, 2), "checksum": float(out.double().sum())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="smollm2-135m-instruct")
    parser.add_argument("--lengths", type=int, nargs="+", default=[2000, 4000, 7000])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--one", nargs=2, type=int, metavar=("LENGTH", "ONE_PASS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:  # a child process: one measurement, printed as JSON
        print(json.dumps(measure(args.target, args.one[0], bool(args.one[1]), args.threads)))
        return 0
    rows = []
    for n in args.lengths:
        for one_pass in (0, 1):  # each in a fresh process: no reused allocator pages
            child = subprocess.run([sys.executable, __file__, "--target", args.target, "--threads", str(args.threads),
                                    "--one", str(n), str(one_pass)], check=True, capture_output=True, text=True)
            row = json.loads(child.stdout.strip().splitlines()[-1])
            row["mode"] = "one pass" if one_pass else f"chunks of {TRANSITION_CHUNK}"
            rows.append(row)
            print(row, flush=True)
        same = rows[-1]["checksum"] == rows[-2]["checksum"]
        print(f"{n} positions: chunked and one-pass states {'identical (checksum)' if same else 'DIFFER'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
