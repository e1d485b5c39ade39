"""What a drafter does in vLLM and in ``generate``, measured the same way: vLLM's speculative-decoding counters
(read from ``LLM.get_metrics()``, duck-typed: nothing here imports vLLM) and the drafter's fixed-k latent
acceptance in transformers' ``generate`` on the same prompts. The vLLM test lane and the vLLM benchmark both
use these, so their figures agree by construction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# vLLM's metric name -> our counter name
SPEC_COUNTERS = {"vllm:spec_decode_num_drafts": "drafts", "vllm:spec_decode_num_draft_tokens": "draft_tokens",
                 "vllm:spec_decode_num_accepted_tokens": "accepted"}
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"


def spec_counters(llm: Any) -> dict[str, Any]:
    """vLLM's cumulative speculative-decoding counters: drafts, draft_tokens, accepted, accepted_per_position."""
    found: dict[str, Any] = {}
    for metric in llm.get_metrics():
        if metric.name in SPEC_COUNTERS:
            found[SPEC_COUNTERS[metric.name]] = int(metric.value)
        elif metric.name == PER_POSITION:
            found["accepted_per_position"] = [int(v) for v in metric.values]
    return found


def counter_difference(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    """What the counters gained between two readings (per position for list counters)."""
    out: dict[str, Any] = {}
    for key, value in after.items():
        if isinstance(value, list):
            old = before.get(key) or [0] * len(value)
            out[key] = [a - b for a, b in zip(value, old)]
        else:
            out[key] = value - before.get(key, 0)
    return out


def fixed_k_acceptance(model: Any, drafter: Any, prompts: Sequence[Sequence[int]], k: int,
                       max_new_tokens: int) -> dict[str, Any]:
    """Greedy ``generate`` with chains of exactly ``k`` latent tokens (cost model and confidence stop off: vLLM's
    way of drafting), one prompt at a time. Returns ``rounds``, ``accepted_per_position`` (drafts whose j-th token
    was accepted), ``accepted``, the output ``tokens``, ``accepted_per_prompt``, and
    ``short_drafts_fully_accepted`` per prompt: drafts cut short by the token budget at the end of an answer that
    the target accepted whole, where vLLM, which drafts k tokens every step, can count more."""
    import torch

    record = drafter.record_draft_rounds
    drafter.record_draft_rounds = True
    per_position, rounds, tokens, per_prompt, short_full = [0] * k, 0, [], [], []
    try:
        for ids in prompts:
            out = model.generate(torch.tensor([list(ids)], device=model.device), assistant_model=drafter,
                                 max_new_tokens=max_new_tokens, do_sample=False, oneiro_mode="latent",
                                 oneiro_max_draft_tokens=k, oneiro_cost_aware=False, oneiro_min_draft_confidence=0.0,
                                 oneiro_tree=False)  # chains of k, as vLLM drafts
            tokens.append(out[0, len(ids):].tolist())
            stats = drafter.last_stats
            for gained in stats.accept_lengths:
                rounds += 1
                for position in range(gained - 1):
                    per_position[position] += 1
            per_prompt.append(stats.accepted_tokens)
            short_full.append(sum(1 for r in stats.rounds if len(r.tokens) < k and r.accepted == len(r.tokens)))
    finally:
        drafter.record_draft_rounds = record
    return {"rounds": rounds, "accepted_per_position": per_position, "accepted": sum(per_position),
            "tokens": tokens, "accepted_per_prompt": per_prompt, "short_drafts_fully_accepted": short_full}
