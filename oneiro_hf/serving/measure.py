"""What a drafter does in vLLM and in ``generate``, measured the same way: vLLM's speculative-decoding counters
(read from ``LLM.get_metrics()``, duck-typed: nothing here imports vLLM) and the drafter's fixed-k latent
acceptance in transformers' ``generate`` on the same prompts. The vLLM test lane and the vLLM benchmark both
use these, so their figures agree by construction."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
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


# the vLLM benchmarks' modes (scripts/vllm_bench.py, scripts/vllm_load_bench.py): plain, vLLM's own proposers, and the
# drafter exported as it is, with `--hybrid`, backed off by batch size (`-backoff`), priced per step (`-priced`)
BENCHMARK_MODES = ("plain", "ngram", "suffix", "oneiro", "oneiro-backoff", "oneiro-hybrid", "oneiro-hybrid-backoff",
                   "oneiro-priced", "oneiro-hybrid-priced")


def benchmark_modes(chosen: Sequence[str], drafter: str, target: str, k: int, folders: str | Path,
                    schedule: list[list[int]] | None = None, step_profile: dict | None = None) -> dict[str, Any]:
    """Each chosen mode's speculative config (None: plain), exporting the folders the oneiro modes serve under
    `folders` (a directory): the drafter as it is (`folders/drafter`, always), with lookup (`--hybrid`, the n-gram
    bounds vLLM's `ngram` mode gets too) and with `step_profile` for the `-priced` modes; `-backoff` modes add
    `schedule` (vLLM's `num_speculative_tokens_per_batch_size`). Raises ValueError, naming the fix, for an unknown
    mode or a mode whose schedule or profile is missing."""
    from .vllm_export import export_for_vllm
    from .vllm_lookup import LOOKUP_NGRAMS

    unknown = [mode for mode in chosen if mode not in BENCHMARK_MODES]
    if unknown:
        raise ValueError(f"unknown modes {unknown}. Fix: choose from {', '.join(BENCHMARK_MODES)}.")
    if schedule is None and any(mode.endswith("-backoff") for mode in chosen):
        raise ValueError("the -backoff modes need a k by batch size. Fix: pass --backoff FROM-TO:K,...")
    if step_profile is None and any(mode.endswith("-priced") for mode in chosen):
        raise ValueError("the -priced modes need vLLM's engine steps. Fix: pass --step-profile with the steps.json "
                         "of scripts/vllm_step_profile.py.")
    base = Path(folders)
    exported: dict[tuple[bool, bool], str] = {}

    def folder(hybrid: bool, priced: bool) -> str:
        if (hybrid, priced) not in exported:
            name = "-".join(["drafter", *(["hybrid"] if hybrid else []), *(["priced"] if priced else [])])
            exported[hybrid, priced] = str(export_for_vllm(
                drafter, base / name, target, k, lookup=LOOKUP_NGRAMS if hybrid else None,
                step_profile=step_profile if priced else None))
        return exported[hybrid, priced]

    folder(False, False)
    modes: dict[str, Any] = {}
    for mode in chosen:
        if mode == "plain":
            modes[mode] = None
        elif mode == "ngram":
            modes[mode] = {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": LOOKUP_NGRAMS[0],
                           "prompt_lookup_max": LOOKUP_NGRAMS[1]}
        elif mode == "suffix":
            modes[mode] = {"method": "suffix"}  # vLLM picks k per step (up to its tree depth); needs arctic-inference
        else:
            modes[mode] = {"method": "eagle3", "model": folder("hybrid" in mode, mode.endswith("-priced")),
                           "num_speculative_tokens": k}
            if mode.endswith("-backoff"):
                modes[mode]["num_speculative_tokens_per_batch_size"] = schedule
    return modes
