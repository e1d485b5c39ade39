"""Per-question speedup and tau of the chain hybrid and the tree, per lane (quick A/B reading)."""
import json, sys
def load(run, m):
    return {r["question_id"]: r for r in map(json.loads, open(f"{run}/answers/{m}.jsonl"))}
for run in sys.argv[1:]:
    g, h, t = (load(run, m) for m in ("greedy", "oneiro-hybrid", "oneiro-tree"))
    tot = {"g": 0, "h": 0, "t": 0}; calls = {"h": 0, "t": 0}; steps = {"h": 0, "t": 0}
    print("run", run)
    for q in g:
        w = {k: sum(r[q]["choices"][0]["wall_time"]) for k, r in (("g", g), ("h", h), ("t", t))}
        for k in w: tot[k] += w[k]
        tau = {k: sum(r[q]["choices"][0]["new_tokens"]) / sum(r[q]["choices"][0]["decoding_steps"]) for k, r in (("h", h), ("t", t))}
        for k, r in (("h", h), ("t", t)):
            st = r[q]["oneiro_stats"]; st = st if isinstance(st, list) else [st]
            calls[k] += sum(s["drafter_calls"] for s in st); steps[k] += sum(r[q]["choices"][0]["decoding_steps"])
        print(f'{g[q]["category"]:15s} hyb {w["g"]/w["h"]:.2f} tau {tau["h"]:.2f} | tree {w["g"]/w["t"]:.2f} tau {tau["t"]:.2f}')
    print(f'overall hyb {tot["g"]/tot["h"]:.3f} tree {tot["g"]/tot["t"]:.3f} tree/chain {tot["h"]/tot["t"]:.3f} '
          f'calls/step hyb {calls["h"]/steps["h"]:.2f} tree {calls["t"]/steps["t"]:.2f}')
