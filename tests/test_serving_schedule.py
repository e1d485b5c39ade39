"""`oneiro-export vllm-schedule`: vLLM's draft length by batch size, priced by the cost model from a latency
profile and the measured acceptance."""

from __future__ import annotations

import json
from itertools import pairwise

import pytest

from oneiro_hf.serving.cli import main
from oneiro_hf.serving.schedule import ScheduleInputError, k_schedule, step_profile

ACCEPTANCE = [0.8, 0.64, 0.51]  # a drafter whose every token is accepted 80% of the times it is reached


def _profile(per_token: float, drafter_step_ratio: float = 0.05) -> dict:
    """t(k, B) = t1 * (1 + per_token * (k * B - 1)): flat where per_token is 0 (a GPU far from its compute
    bound), linear in the pass's tokens where it is 1 (a CPU at large batches)."""
    ratios = {str(k): 1 + per_token * (k - 1) for k in range(1, 65)}
    batch = {str(rows): {"t1_s": 0.05 * (1 + per_token * (rows - 1)),
                         "ratios": {str(k): (1 + per_token * (k * rows - 1)) / (1 + per_token * (rows - 1))
                                    for k in range(1, 5)}}
             for rows in (2, 4, 8, 16)}
    return {"t1_s": 0.05, "ratios": ratios, "drafter_step_ratio": drafter_step_ratio, "batch": batch}


def test_a_flat_profile_drafts_the_full_length_at_every_batch_size() -> None:
    assert k_schedule(_profile(0.0), ACCEPTANCE, max_k=3, max_batch=16) == [[1, 16, 3]]


def test_a_pass_that_costs_its_tokens_stops_drafting_as_the_batch_grows() -> None:
    schedule = k_schedule(_profile(0.3), ACCEPTANCE, max_k=3, max_batch=64)
    ks = [k for _, _, k in schedule]
    assert ks[0] >= 1 and ks[-1] == 0, schedule  # drafts alone, stops when the batch fills the pass
    assert ks == sorted(ks, reverse=True)  # never more at a larger batch
    assert schedule[0][0] == 1 and schedule[-1][1] == 64
    assert all(a[1] + 1 == b[0] for a, b in pairwise(schedule))  # the ranges tile 1..64


def test_a_dear_drafter_call_shortens_the_draft() -> None:
    cheap = k_schedule(_profile(0.05, drafter_step_ratio=0.02), ACCEPTANCE, max_k=3, max_batch=1)
    dear = k_schedule(_profile(0.05, drafter_step_ratio=0.6), ACCEPTANCE, max_k=3, max_batch=1)
    assert cheap[0][2] > dear[0][2], (cheap, dear)


def test_bad_inputs_name_the_fix() -> None:
    with pytest.raises(ScheduleInputError, match="must not rise.*Fix"):
        k_schedule(_profile(0.0), [0.3, 0.5], max_k=2)
    with pytest.raises(ScheduleInputError, match=r"lacks \['t1_s'\].*Fix"):
        k_schedule({"ratios": {"1": 1.0}}, ACCEPTANCE, max_k=3)
    with pytest.raises(ScheduleInputError, match="probabilities"):
        k_schedule(_profile(0.0), [1.5], max_k=1)


def test_the_command_prints_the_speculative_config_field(tmp_path, capsys) -> None:
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps(_profile(0.0)))
    assert main(["vllm-schedule", "--profile", str(profile), "--acceptance", "0.8,0.64", "--max-k", "2",
                 "--max-batch", "8"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {"num_speculative_tokens": 2, "num_speculative_tokens_per_batch_size": [[1, 8, 2]]}
    assert main(["vllm-schedule", "--profile", str(tmp_path / "none.json"), "--acceptance", "0.5"]) == 2
    assert "Fix: pass a JSON file written by" in capsys.readouterr().err


def test_a_batch_size_between_measured_ones_is_priced_at_the_next_one_up() -> None:
    # drafting pays at 1 and 2 rows, not at 4: batch sizes 3 and 4 must not draft, since 3 was never measured
    profile = step_profile({1: {0: 0.10, 1: 0.11}, 2: {0: 0.12, 1: 0.14}, 4: {0: 0.15, 1: 0.30}})
    assert k_schedule(profile, [0.5], max_k=1, max_batch=4) == [[1, 2, 1], [3, 4, 0]]


def test_engine_steps_price_the_drafter_inside_the_step() -> None:
    # one draft token accepted half the time: a step with it yields 1.5 tokens, so it pays below 1.5x a plain step
    cheap = step_profile({1: {0: 0.10, 1: 0.14}})
    dear = step_profile({1: {0: 0.10, 1: 0.16}})
    assert cheap["drafter_step_ratio"] == 0.0 and cheap["ratios"] == {"1": 1.0, "2": pytest.approx(1.4)}
    assert k_schedule(cheap, [0.5], max_k=1, max_batch=1) == [[1, 1, 1]]
    assert k_schedule(dear, [0.5], max_k=1, max_batch=1) == [[1, 1, 0]]


def test_a_step_profile_without_plain_steps_names_the_fix() -> None:
    with pytest.raises(ScheduleInputError, match="k = 0.*Fix"):
        step_profile({1: {1: 0.2}})
    with pytest.raises(ScheduleInputError, match="batch size 4.*Fix"):
        step_profile({1: {0: 0.1, 1: 0.12}, 4: {1: 0.3}})
