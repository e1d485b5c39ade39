"""What drafting learns and prices with: t(k), calibrated acceptance, the back-off, and the one cost formula.

Kept on the drafter across generate calls (fixed size, so memory stays flat): the target's verification latency
t(k) for k new tokens on this hardware (t(k, B) for batches; seeded from a measured profile when one is given), a
drafter call's time, and calibrated acceptance probabilities (per readout-confidence bin for latent tokens, per
matched n-gram length and position in the copied span for lookup tokens, per share of the counts and the matched context
length for suffix-memory tokens). Chains, trees and batches are all
priced by `pass_rates`: a pass verifying n candidates per row yields 1 + the sum of their values (each value the
probability that the candidate is on the accepted path) and costs t(n + 1) plus the drafter calls made for it;
n = 0 (a plain one-token step) is always a candidate, which is what keeps a weak drafter from making generation
slower than greedy. `cost.py` picks nodes, paths and when to call the drafter with it.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

# Upper edges of the readout-confidence bins (the last bin runs to 1). Dense below 0.1, where most of a tree's
# siblings fall and acceptance still rises from next to nothing to a useful share: one bin for all of [0, 0.1)
# would price a rank-8 sibling like a rank-2 one.
CONFIDENCE_EDGES = (0.01, 0.02, 0.04, 0.07, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
CONFIDENCE_BINS = len(CONFIDENCE_EDGES) + 1
# Lookup acceptance is learned per position in the copied span up to this one (later positions share it): a copy
# that has held so far tends to go on, so acceptance rises with the position in the span.
LOOKUP_POSITIONS = 4
# Suffix-memory acceptance is learned per matched context length up to this one (longer ones share it).
MEMORY_CONTEXT = 4
EMA = 0.15
# The drafter's profit is averaged over about 50 attempts: single rounds swing between a lost pass and several
# free tokens, and a quick average (0.15) switches a paying drafter off after two misses in a row (replayed on
# held-out answers, docs/benchmarks/backoff_accounting: the slow average decoded faster; the floor for a drafter that never
# helps is the same either way).
PROFIT_EMA = 0.02
# A length's first measured t(k) is kept at most this many times what its measured neighbours predict: a stall in
# that one pass (a lazy weight reorder inside it makes it look several times slower) would otherwise price the
# length out for good, since a length the cost model never picks is never measured again. Too low a first value is
# harmless (the length gets picked, measured and averaged up), which is also what happens to a genuine jump between
# neighbouring lengths (where MKL starts repacking weights: at 2 rows on some CPUs, at 4 on others).
FIRST_CLIP = 1.5


def _learned(old: float | None, seconds: float, predicted: float | None) -> float:
    """A latency's next estimate: the first measurement clipped at FIRST_CLIP x what its measured neighbours
    predict (`predicted`, None when nothing is measured yet); later ones an EMA with stalls clipped at 3x."""
    if old is None:
        return seconds if predicted is None else min(seconds, FIRST_CLIP * predicted)
    return (1 - EMA) * old + EMA * min(seconds, 3 * old)


def confidence_bin(confidence: float) -> int:
    """The bin (0..CONFIDENCE_BINS - 1) of a readout confidence; 1.0 falls in the top bin."""
    return bisect.bisect_right(CONFIDENCE_EDGES, float(confidence))


def _bin_prior(bin_index: int, scale: float) -> Rate:
    """A confidence bin's prior: `scale` times the bin's midpoint, worth 4 observations."""
    edges = (0.0, *CONFIDENCE_EDGES, 1.0)
    return Rate(scale * (edges[bin_index] + edges[bin_index + 1]) / 2 * 4, 4.0)


def _default_latency_ratio(k: int) -> float:
    """Optimistic prior for t(k)/t(1): unexplored lengths look cheap, get tried, then get measured."""
    return 1.0 + 0.08 * (k - 1)


@dataclass
class Rate:
    """A Beta-style running acceptance rate with a prior mean and strength."""

    accepted: float
    seen: float

    @property
    def value(self) -> float:
        return self.accepted / self.seen

    def add(self, accepted: bool) -> None:
        self.accepted += float(accepted)
        self.seen += 1.0


@dataclass
class Backoff:
    """Whether calling the drafter pays, judged by what its attempts saved (seconds; negative: time lost).

    An attempt is every drafter call a step makes, an empty draft included (its call was spent for nothing).
    While on, attempts feed an average of weight `weight`; when it turns negative the drafter is off and is
    retried every `explore_every` steps. A retry is judged on its own: one that saved time switches the drafter
    back on, the average starting afresh from it (so the next loss can switch it off again); one that lost
    doubles the retry interval, up to 128 steps. Judged by the slow average instead, retries could not switch a
    drafter back on once a stretch of text where it loses had driven the average down: at one retry per 128
    steps that takes longer than most answers.
    """

    weight: float = PROFIT_EMA
    profit_s: float = 0.0
    steps_since_try: int = 0
    explore_every: int = 8  # doubles (up to 128) while retries keep losing, back to 8 once one pays

    def worth_trying(self) -> bool:
        """On, or off long enough that a retry is due."""
        return self.profit_s >= 0 or self.steps_since_try >= self.explore_every

    def admit(self, cost_aware: bool, pays: Callable[[], bool] | None = None) -> bool:
        """Whether the drafter is called this step, counting the steps it sits out (what a retry waits for).

        Cost model off: always. On: the drafter must not be losing time overall, or a retry is due; `pays` (the
        tree's pricing of a latent branch beside lookup's) may veto a call that is not a retry."""
        called = not cost_aware or (self.worth_trying() and (
            pays is None or self.steps_since_try >= self.explore_every or pays()))
        self.steps_since_try = 0 if called else self.steps_since_try + 1
        return called

    def observe(self, seconds_saved: float) -> None:
        if self.profit_s < 0:  # off: this attempt was a retry
            if seconds_saved > 0:
                self.profit_s, self.explore_every = self.weight * seconds_saved, 8
            else:
                self.explore_every = min(2 * self.explore_every, 128)  # retries cost time too: back off
            return
        self.profit_s = (1 - self.weight) * self.profit_s + self.weight * seconds_saved
        if self.profit_s < 0:
            self.explore_every = min(2 * self.explore_every, 128)


@dataclass
class DraftPolicyState:
    """What the drafting policy has learned; one per drafter, shared by its generate calls."""

    verify_s: dict[int, float] = field(default_factory=dict)  # k -> EMA seconds of a k-token verification
    # batches: rows B (>= 2) -> k -> EMA seconds of a pass verifying k tokens in each of B rows (t(k, B))
    verify_batch_s: dict[int, dict[int, float]] = field(default_factory=dict)
    draft_step_s: float | None = None
    latent_bins: list[Rate] = field(
        default_factory=lambda: [_bin_prior(b, 0.7) for b in range(CONFIDENCE_BINS)])
    # (matched n-gram length, position in the copied span, capped at LOOKUP_POSITIONS) -> acceptance there
    lookup_by_ngram: dict[tuple[int, int], Rate] = field(default_factory=dict)
    # suffix memory: (bin of the continuation's estimated share, matched context length capped at MEMORY_CONTEXT)
    # -> acceptance
    memory_by_share: dict[tuple[int, int], Rate] = field(default_factory=dict)
    # how often the drafter's likeliest first token is the target's next one, before any readout is seen (trees
    # price a latent branch with it before calling the drafter)
    latent_lead: Rate = field(default_factory=lambda: Rate(0.6 * 4, 4.0))
    backoff: Backoff = field(default_factory=Backoff)  # the drafter's worth over many calls (slow)
    pinned: bool = False  # latencies fixed by `pin_profile` (another machine's), not learned from this one

    # -------------------------------------------------------------- latency
    def load_profile(self, ratios: dict[int, float], t1_s: float, draft_step_ratio: float | None = None,
                     batch: dict | None = None) -> None:
        """Seed t(k) from a measured profile: ratios[k] = t(k)/t(1), t1_s = seconds for k=1; where the profile
        measured it (`latency.profile_drafter_step`), a drafter call at draft_step_ratio x t(1); and, where it
        measured batches (`oneiro-bench profile --batch-sizes`), t(k, B) from its `"batch"` field:
        `{"<B>": {"t1_s": <seconds of a 1-token-per-row pass of B rows>, "ratios": {"<k>": t(k, B) / t(1, B)}}}`."""
        for k, r in ratios.items():
            self.verify_s[int(k)] = float(r) * t1_s
        if draft_step_ratio is not None:
            self.draft_step_s = float(draft_step_ratio) * float(t1_s)
        for rows, entry in (batch or {}).items():
            if int(rows) == 1:  # one row is the plain profile
                continue
            table = self.verify_batch_s.setdefault(int(rows), {})
            table.update({int(k): float(r) * float(entry["t1_s"]) for k, r in entry["ratios"].items()})

    def pin_profile(self, ratios: dict[int, float], t1_s: float, draft_step_ratio: float | None,
                    batch: dict | None = None) -> None:
        """Decide as on the machine a profile was measured on: t(k), t(k, B) (`batch`, as in `load_profile`) and the
        drafter step cost (draft_step_ratio x t(1); None: the unmeasured default, 0.1 x t(1)) stay as given; no
        measured time enters a decision (drafting's cost is its drafter calls at that price).

        Used to make a run's cost decisions those of other hardware (e.g. the H200 profile of docs/gpu.md), whose
        speedup is then modelled from the run's acceptance (oneiro-bench --pin-profile), and to make them the same
        on every run whatever the machine's load (`drafter.use_latency_profile(profile, learn=False)`).
        """
        self.verify_s, self.verify_batch_s, self.draft_step_s = {}, {}, None
        self.load_profile(ratios, t1_s, draft_step_ratio, batch=batch)
        self.pinned = True

    def verify_time(self, k: int) -> float:
        if k in self.verify_s:
            return self.verify_s[k]
        if not self.verify_s:
            return _default_latency_ratio(k)  # unitless until the first measurement arrives
        base_k = min(self.verify_s, key=lambda m: abs(m - k))
        base = self.verify_s[base_k] / _default_latency_ratio(base_k)
        return base * _default_latency_ratio(k)

    def batch_verify_time(self, k: int, rows: int) -> float:
        """t(k, B): a pass verifying k tokens in each of `rows` rows. One row: t(k). Measured (or profiled) at this
        row count: as measured; a k not measured at B scales the nearest measured one by what one row's t gives for
        the passes' total tokens; nothing at B: one row's t of all k * B tokens (a pass costs about what its tokens
        cost, which stops drafting where t grows linearly in k * B, as on a CPU at large batches)."""
        if rows <= 1:
            return self.verify_time(k)
        table = self.verify_batch_s.get(rows)
        if not table:
            return self.verify_time(k * rows)
        if k in table:
            return table[k]
        base_k = min(table, key=lambda m: abs(m - k))
        return table[base_k] * self.verify_time(k * rows) / self.verify_time(base_k * rows)

    def observe_verify(self, k: int, seconds: float, rows: int = 1) -> None:
        """Learn the time of a pass verifying k tokens in each of `rows` rows (pinned: ignored)."""
        if self.pinned:
            return
        if rows <= 1:
            self.verify_s[k] = _learned(self.verify_s.get(k), seconds, self.verify_time(k) if self.verify_s else None)
            return
        table = self.verify_batch_s.setdefault(rows, {})
        table[k] = _learned(table.get(k), seconds, self.batch_verify_time(k, rows) if table else None)

    def observe_draft_step(self, seconds: float) -> None:
        if not self.pinned:
            self.draft_step_s = _learned(self.draft_step_s, seconds, None)

    def drafting_cost(self, measured_s: float, drafter_calls: int) -> float:
        """Seconds a draft cost: as measured, or (pinned to another machine's profile) as that machine's steps."""
        return drafter_calls * self.draft_step_time() if self.pinned else measured_s

    def draft_step_time(self) -> float:
        if self.draft_step_s is not None:
            return self.draft_step_s
        return 0.1 * self.verify_time(1)

    # -------------------------------------------------------------- acceptance
    def latent_rate(self, confidence: float) -> Rate:
        return self.latent_bins[confidence_bin(confidence)]

    def lookup_rate(self, ngram: int, position: int) -> Rate:
        """P(the `position`-th copied token, 1-based, is accepted | the tokens before it were) after an `ngram` match."""
        key = (int(ngram), min(max(int(position), 1), LOOKUP_POSITIONS))
        if key not in self.lookup_by_ngram:
            prior = 0.6 if ngram >= 3 else 0.4
            self.lookup_by_ngram[key] = Rate(prior * 4, 4.0)
        return self.lookup_by_ngram[key]

    def lookup_probs(self, ngram: int, count: int) -> list[float]:
        """The acceptance of each of the first `count` tokens of a span copied after an `ngram` match."""
        return [self.lookup_rate(ngram, 1 + j).value for j in range(count)]

    def memory_rate(self, share: float, context: int) -> Rate:
        """P(a continuation the suffix memory proposes is accepted | its parent was), per its estimated share of what
        followed the matched context (count / (total + 1), so a continuation seen once is worth 1/2; confidence
        bins) and that context's length (1, 2, 3, 4+ tokens: a one-token context is a weak guess). Prior: half the
        share, worth 4 observations."""
        key = (confidence_bin(share), min(max(int(context), 1), MEMORY_CONTEXT))
        if key not in self.memory_by_share:
            self.memory_by_share[key] = _bin_prior(key[0], 0.5)
        return self.memory_by_share[key]

    # -------------------------------------------------------------- the back-off's evidence
    def observe_drafter(self, gained: int, pass_tokens: int, drafter_tokens: int, seconds: float, calls: int,
                        verify_time: Callable[[int], float]) -> None:
        """Teach the back-off what one drafter call saved in a verified round: the `gained` tokens its nodes won
        (`Draft.drafter_gain`) at t(1) each, minus the width its `drafter_tokens` nodes added to a pass of
        `pass_tokens` tokens and its drafting (`drafting_cost`). Where the drafter drafted alone this is the
        round's tokens at t(1) each minus the whole pass and the drafting. verify_time: t(k), or a batch row's
        share of t(k, B)."""
        width = verify_time(pass_tokens) - verify_time(pass_tokens - drafter_tokens)
        spent = width + self.drafting_cost(seconds, calls)
        self.backoff.observe(gained * verify_time(1) - spent)


def pass_rates(rows: Sequence[Sequence[float]], verify_time: Callable[[int], float],
               fixed: Callable[[int], float]) -> list[float]:
    """The one cost formula of chains, trees and batches: expected tokens per unit time of a pass verifying the
    first n of each row's values beside its root, n = 0..the longest row.

    A value is P(that token is on the accepted path) (a chain's j-th token: the product of the first j
    acceptances); a pass yields per row 1 + the sum of its first n values and costs verify_time(n + 1) + fixed(n)
    (drafter calls; a row with fewer values verifies what it has, padded to the pass's width)."""
    width = max((len(values) for values in rows), default=0)
    rates, expected = [len(rows) / (verify_time(1) + fixed(0))], float(len(rows))
    for n in range(1, width + 1):
        expected += sum(values[n - 1] for values in rows if len(values) >= n)
        rates.append(expected / (verify_time(n + 1) + fixed(n)))
    return rates
