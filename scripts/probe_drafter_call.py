"""A drafter step's cost against a one-token target pass (SmolLM2, 512 cached tokens, one CPU thread): median
wall time and aten operator count of each (docs/gpu.md, "Drafter step cost"). python scripts/probe_drafter_call.py"""
import sys, time, statistics, torch
from torch.profiler import profile, ProfilerActivity
torch.set_num_threads(1)
from oneiro_hf.loading import load_target_and_drafter
from oneiro_hf.drafter_context import DrafterContext

model, tok, drafter = load_target_and_drafter("smollm2-135m-instruct", None)
drafter.bind(model)
ids = torch.randint(100, 20000, (1, 512))
with torch.no_grad():
    out = model(input_ids=ids, use_cache=True, output_hidden_states=drafter.hidden_states_request)
    cache = out.past_key_values
    ctx = DrafterContext(drafter, max_capacity=2048)
    ctx.observe_pass(out.hidden_states, slice(None))
    nxt = torch.tensor([[5]])
    ids2 = torch.cat([ids, nxt], 1)
    st = ctx.catch_up(ids2)

    def target_step():
        m = model(input_ids=nxt, position_ids=torch.tensor([[512]]), cache=cache, use_cache=True,
                  output_hidden_states=drafter.hidden_states_request, logits_to_keep=1)
        cache.crop(-1)
        return m
    def drafter_step():
        s = drafter.transition(drafter.recurrent_inputs(st), nxt, torch.tensor([[513]]), ctx.cache)
        ctx.cache.crop(ctx.teacher_forced)
        p = drafter.readout_logits(s[:, -1]).float().softmax(-1).topk(4)
        return p.indices.tolist()
    def readout():
        return drafter.readout_logits(st[:, -1]).float().softmax(-1).topk(4).indices.tolist()
    for name, fn in [("target t(1)", target_step), ("drafter step+readout", drafter_step), ("readout", readout)]:
        for _ in range(5): fn()
        ts = []
        for _ in range(40):
            t0 = time.perf_counter(); fn(); ts.append(time.perf_counter() - t0)
        print(f"{name}: median {statistics.median(ts)*1e3:.2f} ms")
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            fn()
        evs = prof.key_averages()
        n = sum(e.count for e in evs if e.key.startswith("aten::") and e.cpu_time_total >= 0)
        print(f"  aten ops: {n}")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))
