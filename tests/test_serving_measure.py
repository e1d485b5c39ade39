"""The measurements the vLLM lane and benchmark share (oneiro_hf.serving.measure), checked without vLLM."""

from __future__ import annotations

from tiny import greedy, make_model, random_prompt

from oneiro_hf import OneiroDrafter
from oneiro_hf.serving.measure import counter_difference, fixed_k_acceptance


def test_counter_difference_per_counter_and_per_position() -> None:
    before = {"drafts": 3, "accepted": 5, "accepted_per_position": [3, 2, 0]}
    after = {"drafts": 7, "accepted": 9, "accepted_per_position": [6, 4, 1], "draft_tokens": 12}
    assert counter_difference(after, before) == {"drafts": 4, "accepted": 4, "accepted_per_position": [3, 2, 1],
                                                 "draft_tokens": 12}


def test_fixed_k_acceptance_counts_every_accepted_draft_token_by_position() -> None:
    model = make_model("llama", strength="prefix")
    drafter = OneiroDrafter.from_target(model)
    prompts = [random_prompt(12, seed).tolist()[0] for seed in (1, 2)]
    out = fixed_k_acceptance(model, drafter, prompts, k=3, max_new_tokens=16)
    assert out["tokens"] == [greedy(model, random_prompt(12, seed), 16)[0, 12:].tolist() for seed in (1, 2)]
    assert out["accepted"] == sum(out["accepted_per_position"]) == sum(out["accepted_per_prompt"]) > 0
    positions = out["accepted_per_position"]
    assert len(positions) == 3 and positions[0] >= positions[1] >= positions[2]  # a draft's j-th needs its j-1 first
    assert out["rounds"] >= positions[0] and drafter.record_draft_rounds is False
