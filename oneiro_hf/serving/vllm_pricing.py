"""Each step's draft length per request in vLLM, priced as `generate` prices its drafts.

vLLM verifies k draft tokens for every request each step (k fixed, or k by batch size). `generate` verifies, each
round, the part of its draft that promises the most tokens per second: every token valued by the acceptance
calibrated for it (the drafter's readout confidence, `DraftPolicyState.latent_rate`; a lookup token by its n-gram
and place in the copy, `lookup_rate`), the pass priced from the machine's t(k) by `drafting.policy.pass_rates`. A
folder exported with an engine step profile (`oneiro-export vllm --step-profile`) does the same in vLLM, through the
runner's draft step that the plugin wraps (`vllm_model.install_draft_hook`):

* `begin`: the step's requests, in the batch's row order. What each was sent to verify last step meets its verdict
  (this step's sampled tokens: how many drafts were accepted), which calibrates the rates; the hybrid's lookup rows
  arrive with their continuations and are valued by lookup's rates.
* `record`: after each drafter call, the readout's confidence in each row's token (the model's `compute_logits`).
* `wants_call`: before each further drafter call, whether any row's chain is still among the tokens worth
  verifying. If none is, the model skips the call: no row verifies what it would draft, and the next step's first
  pass rewrites the drafter's cache at every position the target verified, so nothing it needs is lost.
* `cut`: each request's drafts cut to the batch's best set by value: the tokens of every row, likeliest first (a
  row's values fall along its chain, so every prefix of that order is a prefix of each row), and the step of B
  requests verifying E draft tokens in all priced at t(1 + E/B, B) of the profile, interpolated between whole
  draft lengths. That is `cost.choose_nodes` with the batch as one tree whose rows hang below a shared root.

The profile is one of whole engine steps (`serving.schedule.step_profile`, written by `scripts/vllm_step_profile.py`):
t(k + 1, B) is a step of B requests with k drafts each, the
drafter's k calls included. Nothing here imports vLLM: rows come in as tensors and lists (unit-tested in the main
lane).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from operator import mul

import torch

from ..drafting.policy import DraftPolicyState, Rate, pass_rates
from .schedule import ScheduleInputError, measured_batch, pinned_policy


def profile_problem(profile: object) -> str | None:
    """Why `profile` cannot price vLLM's steps (naming the fix), or None."""
    try:
        pinned_policy(profile if isinstance(profile, dict) else {})
    except ScheduleInputError as error:
        return str(error)
    if not profile.get("engine_steps"):
        return ("the step profile was not measured inside vLLM (no `engine_steps`), so it would price the drafter's "
                "calls at nothing. Fix: pass the `steps.json` of `scripts/vllm_step_profile.py` (whole engine steps).")
    return None


@dataclass
class StepDraft:
    """One row's draft this step: the rates its tokens are valued with, and their values (P(accepted) of each)."""

    rates: list[Rate] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    latent: bool = True  # drafted by the drafter (False: a lookup continuation, which needs no drafter call)


@dataclass
class DraftPricer:
    """Per step and request, the draft length that promises the most tokens per second (`begin`, `record`,
    `wants_call`, `cut`); calibrated online from vLLM's verdicts."""

    profile: dict
    policy: DraftPolicyState = field(init=False)
    sent: dict[str, list[Rate]] = field(default_factory=dict)  # request -> the rates of the drafts it was sent
    rows: list[StepDraft] = field(default_factory=list)  # this step's rows, in the batch's order
    req_ids: list[str] = field(default_factory=list)
    calls: int = 0  # drafter forwards asked for this step (the first, over the verified positions, always runs)
    recorded: int = 0  # draft positions whose confidences were recorded this step
    skipping: bool = False  # the current drafter call was skipped (its logits are not read)
    active: bool = False  # between `begin` and `finish`: calls outside a draft step (vLLM's warm-up) always run
    drafts_cut: int = 0  # draft tokens not verified, all steps
    calls_skipped: int = 0  # drafter calls skipped, all steps

    def __post_init__(self) -> None:
        problem = profile_problem(self.profile)
        if problem is not None:
            raise ValueError(problem)
        self.policy = pinned_policy(self.profile)

    # -------------------------------------------------------------- a step
    def begin(self, req_ids: Sequence[str], kept: Sequence[Sequence[int]],
              lookup: Mapping[int, tuple[list[int], int]] | None = None) -> None:
        """A draft step of the requests `req_ids` (the batch's rows). kept[i]: this step's sampled tokens of row i,
        -1 where rejected (the verdict on what request i was sent last step); lookup: row -> (continuation, matched
        n-gram) for the hybrid's rows with a match."""
        for i, req_id in enumerate(req_ids):
            rates = self.sent.pop(req_id, None)
            if rates:
                accepted = sum(1 for token in kept[i] if token >= 0) - 1
                for j, rate in enumerate(rates[: max(0, min(accepted + 1, len(kept[i]) - 1))]):
                    rate.add(j < accepted)  # the drafts after the first rejected one were not tested
        live = set(req_ids)
        self.sent = {r: rates for r, rates in self.sent.items() if r in live}
        self.req_ids, self.rows = list(req_ids), []
        for i in range(len(req_ids)):
            if lookup and i in lookup:
                tokens, ngram = lookup[i]
                rates = [self.policy.lookup_rate(ngram, 1 + j) for j in range(len(tokens))]
                self.rows.append(StepDraft(rates, list(accumulate((r.value for r in rates), mul)), latent=False))
            else:
                self.rows.append(StepDraft())
        self.calls, self.recorded, self.skipping, self.active = 0, 0, False, True

    def wants_call(self) -> bool:
        """Whether the drafter's next forward is worth making (counted either way): the first always is; a further one
        only while some drafter row keeps every token it has (its next token could be worth verifying). Where vLLM
        replays the draft model's forward from a CUDA graph, no forward reaches Python and every call runs."""
        self.calls += 1
        if not self.active or self.calls == 1:
            self.skipping = False
            return True
        lengths = self._best_lengths()
        depth = self.recorded  # tokens each drafter row has so far
        self.skipping = not any(row.latent and len(row.values) == depth and lengths[i] == depth
                                for i, row in enumerate(self.rows))
        self.calls_skipped += self.skipping
        return not self.skipping

    def record(self, confidences: torch.Tensor) -> None:
        """The readout's confidence (probability of its likeliest draft token) per row for the next draft position,
        after a drafter call that ran; rows past the step's requests (padding) are ignored."""
        if not self.active or self.skipping:
            return
        for row, confidence in zip(self.rows, confidences[: len(self.rows)].tolist()):
            if row.latent and len(row.values) == self.recorded:
                rate = self.policy.latent_rate(confidence)
                row.rates.append(rate)
                row.values.append((row.values[-1] if row.values else 1.0) * rate.value)
        self.recorded += 1

    def cut(self, drafts: Sequence[Sequence[int]]) -> list[list[int]]:
        """Each row's drafts (the step's (B, k) tokens, lookup rows already written in) cut to the priced best;
        what is kept is remembered to learn from its verdict next step."""
        lengths = self._best_lengths(width=min((len(d) for d in drafts), default=0))
        out = []
        for i, (req_id, row, tokens) in enumerate(zip(self.req_ids, self.rows, drafts)):
            n = lengths[i]
            out.append([int(t) for t in tokens[:n]])
            self.drafts_cut += len(tokens) - n
            if n:
                self.sent[req_id] = row.rates[:n]
        return out

    def finish(self) -> None:
        """The step is over: drafter calls from now until the next `begin` (vLLM's warm-up) run unpriced."""
        self.active = False

    # -------------------------------------------------------------- pricing
    def step_time(self, drafted: int, rows: int) -> float:
        """Seconds of an engine step of `rows` requests verifying `drafted` draft tokens in all: t(1 + drafted/rows,
        B) of the profile at the measured batch size at or above `rows`, linear between whole draft lengths."""
        size = measured_batch(self.profile, rows)
        per_row = 1 + drafted / rows
        low, high = math.floor(per_row), math.ceil(per_row)
        t_low = self.policy.batch_verify_time(low, size)
        if high == low:
            return t_low
        return t_low + (per_row - low) * (self.policy.batch_verify_time(high, size) - t_low)

    def _best_lengths(self, width: int | None = None) -> list[int]:
        """How many of its tokens each row verifies: the best prefix of all rows' tokens by value (at most `width`
        a row)."""
        batch = len(self.rows)
        if not batch:
            return []
        order = sorted(((value, j, i) for i, row in enumerate(self.rows)
                        for j, value in enumerate(row.values[:width])), key=lambda c: (-c[0], c[1], c[2]))
        values = [value for value, _, _ in order]
        # one list of values beside B roots: expected tokens B + the sum of the n best, at the step verifying n
        rates = pass_rates([values] + [[]] * (batch - 1), lambda m: self.step_time(m - 1, batch), lambda _: 0.0)
        n = max(range(len(rates)), key=rates.__getitem__)
        lengths = [0] * batch
        for _, j, i in order[:n]:
            lengths[i] = max(lengths[i], j + 1)
        return lengths
