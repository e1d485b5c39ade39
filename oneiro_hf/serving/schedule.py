"""The draft length a serving engine runs at each batch size, priced by the cost model `generate` drafts with.

vLLM drafts a fixed k per step, or k by batch size (`num_speculative_tokens_per_batch_size`: inclusive ranges of
batch sizes -> k); it has no per-step choice. `k_schedule` fills that schedule from what oneiro-hf measures: t(k, B)
from a latency profile (`oneiro-bench profile --batch-sizes`), the drafter step's price (the profile's
`drafter_step_ratio`), and the drafter's acceptance by draft position in the engine. For each batch size B it keeps
the k in 0..max_k whose step yields the most tokens per second by `drafting.policy.pass_rates` (the one formula of
chains, trees and batches), B identical rows of a chain; k = 0 turns speculation off where no draft pays. A larger
batch never drafts more than a smaller one (each verified token costs more the more rows share a pass), and a batch
size the profile did not measure is priced at the next measured one above it, so a profile measured at a few batch
sizes cannot make k flap between them nor draft more than a measurement supports.

The profile is either oneiro-hf's own (`generate`'s kernels, the drafter priced apart) or one measured inside the
engine (`step_profile`: whole engine steps with k drafts, drafter included; `scripts/vllm_step_profile.py` writes
it), which prices what the engine really pays per step.

    oneiro-export vllm-schedule --profile profile.json --acceptance 0.44,0.17,0.06 --max-k 3
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import pairwise

from ..drafting.policy import DraftPolicyState, pass_rates


class ScheduleInputError(ValueError):
    """A profile or acceptance list the schedule cannot be priced from."""


def pinned_policy(profile: dict) -> DraftPolicyState:
    """A policy that prices as the profile says (`DraftPolicyState.pin_profile`), its t(k, B) included."""
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


def step_profile(step_seconds: Mapping[int, Mapping[int, float]]) -> dict:
    """A latency profile from whole engine steps measured inside the engine: `step_seconds[B][k]` = seconds of one
    step of B running requests with k draft tokens each (k = 0: speculation off), the drafter's own work included.

    Written in `oneiro-bench profile`'s format, a step with k drafts standing for t(k + 1, B), so `k_schedule` and
    the cost model read it unchanged; `drafter_step_ratio` is 0 because each step's time already holds the
    drafter's."""
    if 1 not in step_seconds or 0 not in step_seconds[1]:
        raise ScheduleInputError("a step profile needs the plain step (k = 0) at batch size 1. Fix: measure batch "
                                 "size 1 with speculation off beside the drafting runs.")
    tables = {}
    for rows, steps in sorted(step_seconds.items()):
        if 0 not in steps or any(seconds <= 0 for seconds in steps.values()):
            raise ScheduleInputError(f"the steps at batch size {rows} lack a positive plain (k = 0) time ({steps}). "
                                     "Fix: measure every batch size with speculation off too.")
        tables[str(rows)] = {"t1_s": steps[0], "ratios": {str(k + 1): seconds / steps[0]
                                                          for k, seconds in sorted(steps.items())}}
    return {"engine_steps": True, "t1_s": tables["1"]["t1_s"], "ratios": tables["1"]["ratios"],
            "drafter_step_ratio": 0.0, "batch": tables}


def measured_batch(profile: dict, rows: int) -> int:
    """The smallest batch size >= rows the profile measured (rows itself beyond the largest measured)."""
    measured = sorted({1, *(int(b) for b in profile.get("batch") or {})})
    return next((size for size in measured if size >= rows), rows)


def k_schedule(profile: dict, acceptance: Sequence[float], max_k: int, max_batch: int = 256) -> list[list[int]]:
    """`num_speculative_tokens_per_batch_size` for vLLM: `[[first, last, k], ...]` covering batch sizes
    1..max_batch, consecutive sizes with the same best k in one range."""
    policy, values = pinned_policy(profile), _check_acceptance(acceptance, max_k)
    if max_batch < 1:
        raise ScheduleInputError(f"max_batch must be >= 1 (got {max_batch}). Fix: pass vLLM's --max-num-seqs.")
    schedule: list[list[int]] = []
    for rows in range(1, max_batch + 1):
        k = best_k(policy, values, measured_batch(profile, rows))
        if schedule:
            k = min(k, schedule[-1][2])
        if schedule and schedule[-1][2] == k:
            schedule[-1][1] = rows
        else:
            schedule.append([rows, rows, k])
    return schedule
