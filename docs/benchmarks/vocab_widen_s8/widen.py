"""Copies of the shipped SmolLM2 drafter with a wider draft vocabulary (same trained weights; the readout is
the target's LM head rows, so only the id list changes): the 8,192 ids + the next most frequent answer tokens
of the self-distillation dataset (never Spec-Bench), and the whole vocabulary."""
import collections, glob, sys
import pyarrow.parquet as pq, torch
from oneiro_hf.loading import load_target_and_drafter
model, tok, drafter = load_target_and_drafter("smollm2-135m-instruct", None)
base = drafter.draft_vocab_ids.tolist()
counts = collections.Counter()
for shard in sorted(glob.glob("data/selfdistill/smollm2-135m-instruct/data/*.parquet")):
    for ids in pq.read_table(shard, columns=["output_ids"]).column("output_ids").to_pylist():
        counts.update(ids)
have = set(base)
extra = [t for t, _ in counts.most_common() if t not in have]
V = model.config.vocab_size
for name, size in (("v16k", 16384), ("full", V)):
    ids = base + extra[: size - len(base)]
    if size == V:
        ids = base + [t for t in range(V) if t not in have]
    ids = torch.tensor(ids[:size], dtype=torch.long)
    drafter.config.draft_vocab_size = int(ids.numel())
    drafter.draft_vocab_ids = ids
    drafter.bind(model)
    drafter.save_pretrained(f"runs/s8/drafters/{name}")
    print(name, ids.numel(), "answer-token coverage", sum(counts[t] for t in ids.tolist()) / sum(counts.values()))
