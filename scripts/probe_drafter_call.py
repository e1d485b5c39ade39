"""A drafter step's cost against a one-token target pass (SmolLM2, 512 cached tokens, one CPU thread): median
wall time and aten operator count of each, with the profiler's table (docs/gpu.md, "Drafter step cost").

    python scripts/probe_drafter_call.py
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile

from oneiro_hf.drafter_context import DrafterContext
from oneiro_hf.loading import load_target_and_drafter


def main() -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    torch.set_num_threads(1)
    model, _, drafter = load_target_and_drafter("smollm2-135m-instruct", None)
    ids = torch.randint(100, 20000, (1, 512))
    nxt = torch.tensor([[5]])
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True, output_hidden_states=drafter.hidden_states_request)
        cache = out.past_key_values
        ctx = DrafterContext(drafter, max_capacity=2048)
        ctx.observe_pass(out.hidden_states, slice(None))
        states = ctx.catch_up(torch.cat([ids, nxt], 1))

        def target_step():
            model(input_ids=nxt, position_ids=torch.tensor([[512]]), past_key_values=cache, use_cache=True,
                  output_hidden_states=drafter.hidden_states_request, logits_to_keep=1)
            cache.crop(-1)

        def drafter_step():
            s = drafter.transition(drafter.recurrent_inputs(states), nxt, torch.tensor([[513]]), ctx.cache)
            ctx.cache.crop(ctx.teacher_forced)
            return drafter.readout_logits(s[:, -1]).float().softmax(-1).topk(4).indices.tolist()

        def readout():
            return drafter.readout_logits(states[:, -1]).float().softmax(-1).topk(4).indices.tolist()

        for name, fn in (("target t(1)", target_step), ("drafter step+readout", drafter_step), ("readout", readout)):
            for _ in range(5):
                fn()
            times = []
            for _ in range(40):
                start = time.perf_counter()
                fn()
                times.append(time.perf_counter() - start)
            print(f"{name}: median {statistics.median(times) * 1e3:.2f} ms")
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                fn()
            events = prof.key_averages()
            print(f"  aten ops: {sum(e.count for e in events if e.key.startswith('aten::'))}")
            print(events.table(sort_by="self_cpu_time_total", row_limit=12))


if __name__ == "__main__":
    main()
