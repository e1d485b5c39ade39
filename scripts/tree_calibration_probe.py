"""Records every tree node the verification tested (a child of the root or of a kept accepted node): its source,
depth, rank among its latent siblings by readout confidence, confidence, the value the cost model gave it against
its parent's (its predicted acceptance), and whether it was accepted. Runs `oneiro-bench` with the same flags;
CALIBRATION_LOG names the JSONL written; scripts/tree_calibration_tables.py reads it (docs/benchmarks/tree_s15).

    CALIBRATION_LOG=calib.jsonl python scripts/tree_calibration_probe.py --methods greedy,oneiro-tree ... --out DIR
"""
import json
import os
import sys

from oneiro_hf.tree import loop

_original = loop._calibrate
_log = open(os.environ.get("CALIBRATION_LOG", "calibration.jsonl"), "a")  # noqa: SIM115 (open for the whole run)


def _recording(tree, verdict, kept, policy):
    path = set(verdict.path)
    for parent in [0, *verdict.path[: kept - 1]]:
        kids = [tree.nodes[c] for c in tree.children[parent].values()]
        latent = sorted((n.confidence for n in kids if n.source == "latent"), reverse=True)
        for child in tree.children[parent].values():
            node = tree.nodes[child]
            pv = tree.nodes[parent].value
            _log.write(json.dumps({
                "source": node.source, "depth": node.depth, "ngram": node.ngram,
                "rank": latent.index(node.confidence) if node.source == "latent" else -1,
                "conf": round(node.confidence, 5), "pred": round(node.value / pv, 5) if pv > 0 else 0.0,
                "lookup_sibling": any(n.source == "lookup" for n in kids),
                "accepted": child in path,
            }) + "\n")
    _original(tree, verdict, kept, policy)


loop._calibrate = _recording
from oneiro_hf.bench.cli import main

sys.exit(main())
