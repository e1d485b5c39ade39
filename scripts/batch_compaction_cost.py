"""What keeping a batch's cache right-aligned costs, next to the pass it follows, and what the per-row drafter costs.

A SmolLM2-135M-shaped Llama target with random weights (no download), float32 on the CPU, a B-row cache of
`--context` columns. Timed (median of `--repeats`): one batched tree pass of W tokens per row; `compact_rows` after
it when every row kept as many tokens and when rows kept different counts (holes left after the short rows: only
tree-sized slots move); `realign_rows`, closing such holes (every full-attention layer gathered once: what keeping
rows right-aligned after every ragged pass would cost each time); one drafter step for one row (the batched loop
calls the drafter once per drafting row). Prints one JSON object.

    python scripts/batch_compaction_cost.py --rows 4 --context 512 --width 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

from oneiro_hf import OneiroDrafter
from oneiro_hf.generation.loop.target_cache import compact_rows, realign_rows


def _median(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def smollm2_shaped_target() -> LlamaForCausalLM:
    """A SmolLM2-135M-shaped Llama (576 hidden, 30 layers, 9 query / 3 key-value heads) with random weights (seed 0),
    float32, in eval mode, pad id 0 and no EOS (generation runs to the limit)."""
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                         num_key_value_heads=3, vocab_size=49152, max_position_embeddings=4096, tie_word_embeddings=True,
                         pad_token_id=0)
    model = LlamaForCausalLM(config).eval()
    model.generation_config.pad_token_id, model.generation_config.eos_token_id = 0, None
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--width", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    model = smollm2_shaped_target()
    config = model.config
    rows, context, width = args.rows, args.context, args.width
    ids = torch.randint(3, 1000, (rows, context))

    def filled() -> DynamicCache:
        cache = DynamicCache(config=config)
        with torch.no_grad():
            model(ids, cache=cache, use_cache=True, logits_to_keep=1)
        return cache

    base = filled()
    tree_tokens = torch.randint(3, 1000, (rows, width))
    positions = torch.arange(context, context + width).expand(rows, -1)

    def copy_of_base() -> DynamicCache:
        cache = DynamicCache(config=config)
        for layer, source in zip(cache.layers, base.layers):
            layer.lazy_initialization(source.keys, source.values)
            layer.keys, layer.values = source.keys.clone(), source.values.clone()
        return cache

    copies = [copy_of_base() for _ in range(args.repeats)]

    def tree_pass() -> None:
        cache = copies.pop()
        with torch.no_grad():
            model(tree_tokens, position_ids=positions, cache=cache, use_cache=True)
        state["cache"] = cache

    state: dict = {}
    t_pass = _median(tree_pass, args.repeats)
    snapshot = [(layer.keys.clone(), layer.values.clone()) for layer in state["cache"].layers]

    def compact(keep: list[list[int]]):
        def run() -> None:
            for layer, (keys, values) in zip(state["cache"].layers, snapshot):
                layer.keys, layer.values = keys, values
            compact_rows(state["cache"], keep, width)
        return run

    even = [[0, 1, 2]] * rows
    ragged = [[0, 1, 2, 3][: 1 + b % 4] for b in range(rows)]
    t_even = _median(compact(even), args.repeats)
    t_ragged = _median(compact(ragged), args.repeats)

    def realign() -> None:
        for layer, (keys, values) in zip(state["cache"].layers, snapshot):
            layer.keys, layer.values = keys[..., : context + 4, :], values[..., : context + 4, :]
        realign_rows(state["cache"], [4 - len(row) for row in ragged])

    t_realign = _median(realign, args.repeats)
    drafter = OneiroDrafter.from_target(model)
    from oneiro_hf.drafting.kv_cache import DrafterKVCache

    dcache = DrafterKVCache()
    states = torch.randn(1, context, config.hidden_size)
    with torch.no_grad():
        drafter.transition(states, ids[:1], torch.arange(context).unsqueeze(0), dcache)

        def drafter_step() -> None:
            dcache.crop(context)
            drafter.transition(states[:, :1], ids[:1, :1], torch.tensor([[context]]), dcache)

        t_step = _median(drafter_step, args.repeats)
    print(json.dumps({
        "rows": rows, "context": context, "width": width, "threads": torch.get_num_threads(),
        "pass_s": t_pass, "compact_even_s": t_even, "compact_ragged_s": t_ragged,
        "compact_ragged_over_pass": t_ragged / t_pass, "realign_s": t_realign, "realign_over_pass": t_realign / t_pass,
        "drafter_step_one_row_s": t_step,
        "drafter_steps_all_rows_over_pass": rows * t_step / t_pass,
    }, indent=2))


if __name__ == "__main__":
    main()
