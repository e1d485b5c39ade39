"""Acceptance against prediction, by group, from a tree calibration log (docs/benchmarks/tree_calibration: one JSON line per
tree node the verification tested, with its source, depth, sibling rank, confidence, predicted acceptance and
whether it was accepted).

    python scripts/tree_calibration_tables.py docs/benchmarks/tree_calibration/calib_base.jsonl.gz
"""
import argparse
import collections
import gzip
import json

EDGES = (0.005, 0.01, 0.02, 0.04, 0.07, 0.1)


def table(rows, title, key, keep):
    groups = collections.defaultdict(lambda: [0, 0, 0.0])
    for r in rows:
        if keep(r):
            g = groups[key(r)]
            g[0], g[1], g[2] = g[0] + 1, g[1] + r["accepted"], g[2] + r["pred"]
    print(f"\n{title}\n| group | tested | accepted | predicted |\n|---|---|---|---|")
    for k in sorted(groups):
        n, a, p = groups[k]
        print(f"| {k} | {n} | {a / n:.3f} | {p / n:.3f} |")


parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("log", help="the calibration log (JSONL, or gzipped JSONL)")
path = parser.parse_args().log
with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
    rows = [json.loads(line) for line in f]
latent = lambda r: r["source"] == "latent"
table(rows, "latent nodes by rank among their siblings", lambda r: r["rank"], latent)
table(rows, "latent nodes by readout confidence bin (tree_calibration edges, then 0.1 steps)",
      lambda r: next((i for i, e in enumerate(EDGES) if r["conf"] < e), len(EDGES) - 1 + int(r["conf"] * 10)), latent)
table(rows, "lookup nodes by (n-gram, depth capped at 4)", lambda r: (r["ngram"], min(r["depth"], 4)),
      lambda r: r["source"] == "lookup")
