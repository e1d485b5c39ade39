"""Nothing a drafter (or its target's hook) keeps between generate calls may grow with the number of calls.

scripts/bench_memory.py measures process memory over 500 calls (docs/reliability.md); these tests pin the
cause-level invariants by object sizes and counts, not by timing: the learned policy is bounded by the draft
settings, per-call state (KV cache, n-gram index, candidate generator) is freed after each call, and
binding again adds nothing to the drafter or the target.
"""

from __future__ import annotations

import gc
import sys
from typing import Any

import torch
from tiny import greedy, make_model, random_prompt

from oneiro_hf import OneiroDrafter
from oneiro_hf.drafting.kv_cache import DrafterKVCache
from oneiro_hf.drafting.lookup import NgramIndex
from oneiro_hf.drafting.policy import LOOKUP_POSITIONS
from oneiro_hf.generation.candidate_generator import OneiroCandidateGenerator

MAX_DRAFT = 6
MAX_NGRAM = 4


def _deep_size(obj: Any, seen: set[int] | None = None) -> int:
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    size = sys.getsizeof(obj)
    if isinstance(obj, dict):
        size += sum(_deep_size(k, seen) + _deep_size(v, seen) for k, v in obj.items())
    elif isinstance(obj, (list, tuple, set)):
        size += sum(_deep_size(v, seen) for v in obj)
    elif hasattr(obj, "__dict__"):
        size += _deep_size(vars(obj), seen)
    return size


def _live(cls: type) -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o) is cls)


def _call(model, drafter, i: int) -> torch.LongTensor:
    """Call i of a varied series: prompt length, output length, mode, cost-aware policy and draft length."""
    ids = random_prompt(2 + (i * 5) % 30, seed=i) if i % 4 else torch.tensor([[5, 9, 12, 7] * (2 + i % 5)])
    return greedy(
        model,
        ids,
        4 + (i * 7) % 20,
        assistant_model=drafter,
        oneiro_mode=("hybrid", "latent", "lookup")[i % 3],
        oneiro_cost_aware=i % 2 == 0,
        oneiro_max_draft_tokens=1 + i % MAX_DRAFT,
        oneiro_min_draft_confidence=0.0,
    )


def _state(model, drafter) -> dict[str, int]:
    policy = drafter.policy_state
    return {
        "verify_entries": len(policy.verify_s),
        "lookup_entries": len(policy.lookup_by_ngram),
        "latent_bins": len(policy.latent_bins),
        "drafter_attributes": len(vars(drafter)),
        "target_attributes": len(vars(model)),
        "target_hooks": len(model._forward_hooks) + len(model._forward_pre_hooks),
        "drafter_buffers": len(list(drafter.buffers())),
    }


def test_drafter_state_stays_bounded_over_many_calls():
    model = make_model("llama", strength="prefix", seed=3)
    drafter = OneiroDrafter.from_target(model, lookup_max_ngram=MAX_NGRAM)
    per_call_types = (OneiroCandidateGenerator, DrafterKVCache, NgramIndex)
    before = {cls: _live(cls) for cls in per_call_types}  # (other tests in this process may hold some)
    for i in range(12):
        _call(model, drafter, i)
    warm = _state(model, drafter)
    warm_policy_size = _deep_size(drafter.policy_state)
    drafted = 0
    for i in range(12, 90):
        _call(model, drafter, i)
        drafted += drafter.last_stats.drafted_tokens
        # the statistics describe the last call only: at most one entry per produced token
        assert len(drafter.last_stats.accept_lengths) <= 4 + 19
        assert getattr(drafter.last_stats, "rounds", None) is None  # per-round records are opt-in
    assert drafted > 0, "the series must actually draft, or it proves nothing"
    late = _state(model, drafter)
    # the policy's tables are keyed by draft length (k + 1) and n-gram length: bounded by the settings
    assert late["verify_entries"] <= MAX_DRAFT + 1
    assert late["lookup_entries"] <= MAX_NGRAM * LOOKUP_POSITIONS  # one rate per (n-gram length, span position)
    for key in ("latent_bins", "drafter_attributes", "target_attributes", "target_hooks", "drafter_buffers"):
        assert late[key] == warm[key], (key, warm, late)
    # a few new table entries may appear after warm-up (a draft length seen for the first time); nothing more
    grown = _deep_size(drafter.policy_state) - warm_policy_size
    assert grown <= 8 * 200, grown
    # per-call objects do not outlive their call
    for cls in per_call_types:
        assert _live(cls) == before[cls], cls.__name__


def test_binding_again_adds_nothing_to_drafter_or_target():
    model = make_model("qwen2")
    drafter = OneiroDrafter.from_target(model)
    ids = random_prompt(6, seed=1)
    greedy(model, ids, 6, assistant_model=drafter)
    warm = _state(model, drafter)
    for _ in range(25):
        drafter.bind(model)
        drafter.refresh_readout()
        drafter.follow_target()
    greedy(model, ids, 6, assistant_model=drafter)
    assert _state(model, drafter) == warm
    # copies are independent objects: making them leaves the original and the target as they were
    copies = [drafter.copy_for() for _ in range(3)]
    assert _state(model, drafter) == warm
    del copies
