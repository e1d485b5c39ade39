"""Bulk self-distillation data on a GPU: the target's own greedy answers to the training prompts.

Usage: python scripts/device_selfdistill.py GGUF_FILE PROMPTS.jsonl.gz OUT_DIR [max_new_tokens] [batch]
Writes OUT_DIR/data_NN.jsonl.gz shards in the record format of oneiro_hf.training.selfdistill. Greedy in
float32, so the answers are the ones the CPU target gives (up to kernel rounding).
"""

from __future__ import annotations

import gzip
import json
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from oneiro_hf.training.prompts import stop_token_ids
from oneiro_hf.training.selfdistill import encode_prompt, generate_batch

gguf, prompts_path, out_dir = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
max_new = int(sys.argv[4]) if len(sys.argv) > 4 else 256
batch = int(sys.argv[5]) if len(sys.argv) > 5 else 256
budget_s = float(sys.argv[6]) if len(sys.argv) > 6 else 420
out_dir.mkdir(parents=True, exist_ok=True)
device = "cuda" if torch.cuda.is_available() else "cpu"
t0 = time.time()
tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32).to(device).eval()
print(f"loaded in {time.time() - t0:.1f}s", flush=True)
stops = stop_token_ids(tokenizer, model)
pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stops[0]
with gzip.open(prompts_path, "rt") as fh:
    prompts = [json.loads(line) for line in fh]
encoded = [(p, encode_prompt(tokenizer, p["prompt"])) for p in prompts]
encoded = [(p, ids) for p, ids in encoded if len(ids) <= 1024]
encoded.sort(key=lambda x: len(x[1]))
shard, written, tokens, rows = 0, 0, 0, []
start = time.time()
for i in range(0, len(encoded), batch):
    chunk = encoded[i : i + batch]
    with torch.no_grad():
        results = generate_batch(model, [ids for _, ids in chunk], max_new, stops, pad)
    for (p, ids), (out, stopped) in zip(chunk, results):
        rows.append({"id": p["id"], "source": p["source"], "prompt": p["prompt"], "input_ids": ids,
                     "output_ids": out, "stopped": stopped})
        tokens += len(out)
    if len(rows) >= 3000 or i + batch >= len(encoded):
        with gzip.open(out_dir / f"data_{shard:02d}.jsonl.gz", "wt") as fh:
            fh.writelines(json.dumps(r) + "\n" for r in rows)
        written += len(rows)
        shard, rows = shard + 1, []
    elapsed = time.time() - start
    print(f"{i + len(chunk)}/{len(encoded)} prompts, {tokens} tokens, {tokens / elapsed:.0f} tok/s", flush=True)
    if elapsed > budget_s:
        break
if rows:
    with gzip.open(out_dir / f"data_{shard:02d}.jsonl.gz", "wt") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)
    written += len(rows)
print(f"done: {written} records, {tokens} response tokens in {time.time() - start:.0f}s", flush=True)
