"""The draft length a serving engine runs at each batch size, priced by the cost model `generate` drafts with.

vLLM drafts a fixed k per step, or k by batch size (`num_speculative_tokens_per_batch_size`: inclusive ranges of
batch sizes -> k); it has no per-step choice. `k_schedule` fills that schedule from what oneiro-hf measures: t(k, B)
from a latency profile (`oneiro-bench profile --batch-sizes`), the drafter step's price (the profile's
`drafter_step_ratio`), and the drafter's acceptance by draft position in the engine. For each batch size B it keeps
the k in 0..max_k whose step yields the most tokens per second by `drafting.policy.pass_rates` (the one formula of
chains, trees and batches), B identical rows of a chain; k = 0 turns speculation off where no draft pays. A larger
batch never drafts more than a smaller one (each verified token costs more the more rows share a pass), so a profile
measured at a few batch sizes cannot make k flap between them.

    oneiro-export vllm-schedule --profile profile.json --acceptance 0.44,0.17,0.06 --max-k 3
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from ..drafting.policy import DraftPolicyState, pass_rates


class ScheduleInputError(ValueError):
    """A profile or acceptance list the schedule cannot be priced from."""


def _policy(profile: dict) -> DraftPolicyState:
    missing = [key for key in ("ratios", "t1_s") if key not in profile]
    if missing:
        raise ScheduleInputError(f"the latency profile lacks {missing}. Fix: pass a profile written by "
                                 "`oneiro-bench profile --batch-sizes 1,4,16 --drafter DIR`.")
    policy = DraftPolicyState()
    policy.pin_profile(profile["ratios"], profile["t1_s"], profile.get("drafter_step_ratio"), batch=profile.get("batch"))
    return policy


def _check_acceptance(acceptance: Sequence[float], max_k: int) -> list[float]:
    values = [float(a) for a in acceptance]
    if not values or any(not 0.0 <= a <= 1.0 for a in values):
        raise ScheduleInputError(f"acceptance by position must be probabilities in [0, 1] (got {list(acceptance)}). "
                                 "Fix: pass the engine's measured rates, e.g. --acceptance 0.44,0.17,0.06.")
    if any(later > earlier + 1e-9 for earlier, later in pairwise(values)):
        raise ScheduleInputError(
            f"acceptance by position must not rise ({values}): position j is accepted only if 1..j-1 are. Fix: pass "
            "the share of drafts whose j-th token was accepted (vLLM's per-position acceptance), not a conditional "
            "rate.")
    if max_k < 1:
        raise ScheduleInputError(f"max_k must be >= 1 (got {max_k}). Fix: pass the k the engine was started with.")
    return values[:max_k]


def best_k(policy: DraftPolicyState, values: Sequence[float], rows: int) -> int:
    """The k (0..len(values)) whose step of `rows` rows yields the most tokens per second: each row verifies its
    first k values, at t(k + 1, rows), plus k drafter steps, each priced as one-token passes scale with the rows."""
    step = policy.draft_step_time() * policy.batch_verify_time(1, rows) / policy.verify_time(1)
    rates = pass_rates([list(values)] * rows, lambda n: policy.batch_verify_time(n, rows), lambda n: n * step)
    return max(range(len(rates)), key=lambda n: (rates[n], -n))


def k_schedule(profile: dict, acceptance: Sequence[float], max_k: int, max_batch: int = 256) -> list[list[int]]:
    """`num_speculative_tokens_per_batch_size` for vLLM: `[[first, last, k], ...]` covering batch sizes
    1..max_batch, consecutive sizes with the same best k in one range."""
    policy, values = _policy(profile), _check_acceptance(acceptance, max_k)
    if max_batch < 1:
        raise ScheduleInputError(f"max_batch must be >= 1 (got {max_batch}). Fix: pass vLLM's --max-num-seqs.")
    schedule: list[list[int]] = []
    for rows in range(1, max_batch + 1):
        k = best_k(policy, values, rows)
        if schedule:
            k = min(k, schedule[-1][2])
        if schedule and schedule[-1][2] == k:
            schedule[-1][1] = rows
        else:
            schedule.append([rows, rows, k])
    return schedule
