"""Paired per-question ratios of finished oneiro-bench runs (one run, or lanes of one run), and with --csv PATH
one row per question and method. Each method's ratio to another is the geometric mean over questions of their
seconds-per-token ratio, which a few long answers cannot dominate.

    python scripts/paired_ratios.py runs/bench/laneA runs/bench/laneB --csv per_question.csv

Pairs printed: the hybrid over oneiro-lookup, the tree over the hybrid, every method over oneiro-greedy (the
same-kernel baseline, where the run has it) and each method over its --extra-drafter arms.
"""
import csv, json, glob, statistics, sys, collections
args = sys.argv[1:]
csv_path = args.pop(args.index("--csv") + 1) if "--csv" in args else None
args = [a for a in args if a != "--csv"]
if not args:
    sys.exit(__doc__)
lanes = args
data = collections.defaultdict(dict)  # method -> qid -> (tokens, wall, steps, cat)
for lane in lanes:
    for f in glob.glob(f"{lane}/answers/*.jsonl"):
        for line in open(f):
            d = json.loads(line); c = d["choices"][0]
            data[d["model_id"]][d["question_id"]] = (sum(c["new_tokens"]), sum(c["wall_time"]), sum(c["decoding_steps"]), d["category"], c["turns"])
g = data["greedy"]
qs = [q for q in g if all(q in data[m] for m in data)]
print(len(qs), "questions complete")
for m in sorted(data):
    tok = sum(data[m][q][0] for q in qs); wall = sum(data[m][q][1] for q in qs); st = sum(data[m][q][2] for q in qs)
    gw = sum(g[q][1] for q in qs); gt = sum(g[q][0] for q in qs)
    same = sum(data[m][q][4] == g[q][4] for q in qs)
    print(f"{m:26s} speedup {(tok/wall)/(gt/gw):.3f}  tau {tok/st:.2f}  identical {same}/{len(qs)}")
def ratio(a, b):
    return [ (data[b][q][1]/data[b][q][0]) / (data[a][q][1]/data[a][q][0]) for q in qs]
pairs = [("oneiro-hybrid", "oneiro-lookup"), ("oneiro-tree", "oneiro-hybrid")]
pairs += [(m, "oneiro-greedy") for m in sorted(data) if m not in ("greedy", "oneiro-greedy")]
pairs += [(m.split("@")[0], m) for m in sorted(data) if "@" in m]  # each method against its --extra-drafter arm
for a, b in pairs:
    if a in data and b in data:
        r = ratio(a, b); print(f"{a} / {b}: geo-mean per question {statistics.geometric_mean(r):.3f}, median {statistics.median(r):.3f}")
if csv_path:  # one row per question and method: what every ratio above is computed from
    with open(csv_path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["question_id", "category", "method", "new_tokens", "wall_s", "target_passes", "identical_to_greedy"])
        for q in sorted(qs):
            for m in sorted(data):
                tok, wall, st, cat, turns = data[m][q]
                w.writerow([q, cat, m, tok, f"{wall:.4f}", st, turns == g[q][4]])
