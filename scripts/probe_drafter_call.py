"""A drafter step's cost against a one-token target pass, on stock kernels and on oneiro-hf's CPU kernels
(`cpu_kernels` for the target, `prepacked_linears` for the drafter's own layers), measured in interleaved rounds:
median wall time of each, and the aten operator count (docs/gpu.md, "Drafter step cost").

    python scripts/probe_drafter_call.py --target qwen2.5-coder-1.5b-instruct --threads 2 --out runs/drafter_call.json

A drafter step is one recurrent transition (its copied layers, one row) plus the readout over the draft vocabulary.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from oneiro_hf import cpu_kernels
from oneiro_hf.drafting.context import DrafterContext
from oneiro_hf.kernels.prepacked_linear import prepacked_linears
from oneiro_hf.loading import load_target_and_drafter


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="smollm2-135m-instruct")
    parser.add_argument("--drafter", default=None, help="drafter directory (default: the shipped one)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cached", type=int, default=512, help="tokens in the target's and drafter's caches")
    parser.add_argument("--rounds", type=int, default=30, help="interleaved rounds; each times every call once")
    parser.add_argument("--table", action="store_true", help="print the profiler's operator table of each call")
    parser.add_argument("--out", default=None, help="write the medians as JSON")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, _, drafter = load_target_and_drafter(args.target, args.drafter)
    ids = torch.randint(100, 20000, (1, args.cached))
    nxt = torch.tensor([[5]])
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True, output_hidden_states=drafter.hidden_states_request)
        cache = out.past_key_values
        ctx = DrafterContext(drafter, max_capacity=args.cached + 64)
        ctx.observe_pass(out.hidden_states, slice(None))
        states = ctx.catch_up(torch.cat([ids, nxt], 1))
        position = torch.tensor([[args.cached]])

        def target_step():
            model(input_ids=nxt, position_ids=position, past_key_values=cache, use_cache=True,
                  output_hidden_states=drafter.hidden_states_request, logits_to_keep=1)
            cache.crop(-1)

        def drafter_step():
            s = drafter.transition(drafter.recurrent_inputs(states), nxt, position + 1, ctx.cache)
            ctx.cache.crop(ctx.teacher_forced)
            return drafter.readout_logits(s[:, -1]).argmax(-1)

        def readout():
            return drafter.readout_logits(states[:, -1]).argmax(-1)

        kernels = {
            "stock": contextlib.nullcontext,
            "oneiro": lambda: _both(cpu_kernels(model), prepacked_linears(drafter)),
        }
        calls = {"target t(1)": target_step, "drafter step": drafter_step, "readout": readout}
        times: dict[str, list[float]] = {f"{c} [{k}]": [] for k in kernels for c in calls}
        for _ in range(3 + args.rounds):  # the first 3 rounds warm up (and make the prepacked copies)
            for kind, block in kernels.items():
                with block():
                    for name, fn in calls.items():
                        start = time.perf_counter()
                        fn()
                        times[f"{name} [{kind}]"].append(time.perf_counter() - start)
        medians = {key: statistics.median(values[3:]) * 1e3 for key, values in times.items()}
        for key, ms in medians.items():
            print(f"{key}: median {ms:.2f} ms")
        for kind in kernels:
            print(f"drafter step / t(1) on {kind} kernels: "
                  f"{medians[f'drafter step [{kind}]'] / medians[f'target t(1) [{kind}]']:.3f}")
        if args.table:
            for name, fn in calls.items():
                with profile(activities=[ProfilerActivity.CPU]) as prof:
                    fn()
                events = prof.key_averages()
                print(f"{name}: aten ops {sum(e.count for e in events if e.key.startswith('aten::'))}")
                print(events.table(sort_by="self_cpu_time_total", row_limit=12))
    if args.out:
        record = {"target": args.target, "threads": args.threads, "cached": args.cached, "rounds": args.rounds,
                  "machine": f"{os.cpu_count()} logical CPUs", "median_ms": {k: round(v, 3) for k, v in medians.items()},
                  "drafter_over_t1": {kind: round(medians[f"drafter step [{kind}]"]
                                                  / medians[f"target t(1) [{kind}]"], 4) for kind in kernels}}
        Path(args.out).write_text(json.dumps(record, indent=1) + "\n")


@contextlib.contextmanager
def _both(first, second):
    with first, second:
        yield


if __name__ == "__main__":
    main()
