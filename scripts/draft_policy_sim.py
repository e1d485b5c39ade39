"""Replay drafting policies on the target's own greedy answers, priced with a measured t(k) profile.

Every chain the drafter would start at every position of an answer is computed once, in one parallel rollout
(training's `parallel_rollout`, which tests show equals what `generate` drafts). A policy is then replayed as
decoding would run it: at position p it drafts L tokens, the target accepts the longest prefix that equals the
answer, and decoding moves to p + accepted + 1, charged t(L + 1) for the pass and one drafter step per drafted
token. The cost-aware policies are the real `DraftPolicyState`, pinned to the profile and learning acceptance
as it goes, so a change to the cost model is judged here in seconds before an interleaved benchmark.

    python scripts/draft_policy_sim.py --records 40 --profile runs/profile.json:0.1 --profile h200

`--answers RUN/answers/greedy.jsonl ...` replays a benchmark run's greedy answers instead, one file per lane in
run order (what a policy learns carries from question to question, as in the benchmark): evaluation only.

Prints tokens per pass (tau) and modelled speedup over greedy per policy, for latent drafts alone, lookup alone
and the hybrid; an "oracle" knows which drafts will be accepted (the ceiling any stop rule or choice of source
can reach with this drafter and profile).
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import operator
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial

import torch

from oneiro_hf import OneiroDrafter
from oneiro_hf.bench.answers import load_questions, questions_file
from oneiro_hf.bench.profile import H200_PROFILE
from oneiro_hf.chat import encode_prompt
from oneiro_hf.draft_policy import Backoff, DraftPolicyState, Rate, confidence_bin, pass_rates
from oneiro_hf.lookup import NgramIndex
from oneiro_hf.reference_models import load_reference_model
from oneiro_hf.training.features import is_eval_record
from oneiro_hf.training.records import load_dataset_records
from oneiro_hf.training.rollout import parallel_rollout

DEPTH = 8


@dataclass
class Chains:
    """At each answer position p (0-based in the answer): what each source would draft there, judged."""

    correct: list[list[bool]]  # correct[p][k]: step k+1 of the latent chain started before answer token p is right
    conf: list[list[float]]  # the readout's probability of each latent step's token
    lookup: list[tuple[list[bool], int]]  # the lookup draft's correctness per token and its n-gram length


@torch.no_grad()
def chains_for(model, drafter, prompt: list[int], answer: list[int]) -> Chains:
    ids = torch.tensor([prompt + answer])
    out = model(ids, output_hidden_states=drafter.hidden_states_request)
    states = drafter.input_states(out.hidden_states)
    positions = torch.arange(1, ids.shape[1]).unsqueeze(0)
    first = len(prompt) - 2  # drafter index whose step-1 output predicts answer[0]
    context = drafter.context_inputs(out.hidden_states)  # an exact-context drafter's copied-layer inputs, else None
    outs = parallel_rollout(drafter, states[:, :-1], ids[:, 1:], positions, DEPTH, first_index=first,
                            context=None if context is None else context[:, 1:])
    vocab = drafter.draft_vocab_ids
    correct, conf, lookup = [], [], []
    n = len(answer)
    index = NgramIndex(2, 4)  # the default lookup_min_ngram / lookup_max_ngram
    index.extend(prompt)
    for p in range(n):
        tokens, ngram = index.lookup(min(DEPTH, n - p))
        lookup.append(([t == answer[p + j] for j, t in enumerate(tokens)], ngram))
        index.extend([answer[p]])
        row_ok, row_conf = [], []
        for k in range(min(DEPTH, n - p)):
            probs = drafter.readout_logits(outs[k][0, first + p + k]).float().softmax(-1)
            c, i = probs.max(-1)
            row_ok.append(int(vocab[i]) == answer[p + k])
            row_conf.append(float(c))
        correct.append(row_ok)
        conf.append(row_conf)
    return Chains(correct, conf, lookup)


def ordered(chains: list[Chains], order: str) -> list[Chains]:
    """The replay order. 'regimes': the answers sorted by how often the drafter's first token is right, replayed
    as half of the better two thirds, the worst third, then the other half: a back-off that switched the drafter
    off in the bad stretch must switch it back on."""
    if order == "records":
        return chains
    def first_right(ch: Chains) -> float:
        return sum(row[0] for row in ch.correct if row) / max(1, len(ch.correct))
    ranked = sorted(chains, key=first_right, reverse=True)
    good, bad = ranked[: len(ranked) - len(ranked) // 3], ranked[len(ranked) - len(ranked) // 3:]
    return good[0::2] + bad + good[1::2]


def accepted(ok: list[bool], length: int) -> int:
    a = 0
    while a < length and ok[a]:
        a += 1
    return a


def replay(lanes: list[list[Chains]], make_policy: Callable[[], Policy], profile: dict,
           step_ratio: float) -> tuple[float, float]:
    """(tau, modelled speedup over greedy) of a policy replayed over every answer. Each lane is replayed in order
    by one policy (what it learns carries from answer to answer, as in a benchmark lane), made fresh per lane. At
    each pass `policy.choose(chains, p)` returns the draft's correctness flags, its length and its drafter steps;
    the drafter's catch-up over accepted tokens and the loop's own overhead are not priced."""
    timing = DraftPolicyState()
    timing.pin_profile(profile["ratios"], 1.0, step_ratio)
    tokens = passes = 0
    cost = 0.0
    for lane in lanes:
        policy = make_policy()
        for ch in lane:
            policy.begin()
            p = 0
            while p < len(ch.correct):
                ok, length, steps = policy.choose(ch, p)
                a = accepted(ok, length)
                policy.observe(ch, p, a, length)
                p += a + 1
                tokens += a + 1
                passes += 1
                cost += timing.verify_time(length + 1) + steps * step_ratio
    return tokens / passes, tokens / cost


class Policy:
    def begin(self) -> None:
        """A new answer (a new generate call) starts: per-call state is made afresh."""

    def choose(self, ch: Chains, p: int) -> tuple[list[bool], int, int]:
        raise NotImplementedError

    def observe(self, ch: Chains, p: int, accepted: int, length: int) -> None:
        """Learn from a verified draft (the cost model does; fixed rules and the oracle need not)."""


class Fixed(Policy):
    def __init__(self, n: int):
        self.n = n

    def choose(self, ch, p):
        n = min(self.n, len(ch.conf[p]))
        return ch.correct[p], n, n


class Oracle(Policy):
    """Knows the acceptance: drafts exactly the accepted tokens of the best source when that beats a plain step."""

    def __init__(self, profile: dict, step_ratio: float, sources: tuple[str, ...]):
        self.timing, self.step, self.sources = DraftPolicyState(), step_ratio, sources
        self.timing.pin_profile(profile["ratios"], 1.0, step_ratio)

    def choose(self, ch, p):
        best, best_rate = ([], 0, 0), 1.0
        for source in self.sources:
            ok = ch.correct[p] if source == "latent" else ch.lookup[p][0]
            per_step = self.step if source == "latent" else 0.0
            for length in range(1, len(ok) + 1):
                rate = (accepted(ok, length) + 1) / (self.timing.verify_time(length + 1) + length * per_step)
                if rate > best_rate:
                    best, best_rate = (ok, length, length if source == "latent" else 0), rate
        return best


class StickyBackoff(Backoff):
    """The back-off of sessions 7-8: retries fed the slow average, so a drafter switched off by a stretch of text
    where it lost was switched back on only after many paying retries at up to 128 steps apart."""

    def observe(self, seconds_saved: float) -> None:
        self.profit_s = (1 - self.weight) * self.profit_s + self.weight * seconds_saved
        self.explore_every = min(2 * self.explore_every, 128) if self.profit_s < 0 else 8


def quick_backoff() -> StickyBackoff:
    """The back-off before session 7: the same, with profit averaged with weight 0.15 (the last few attempts)."""
    return StickyBackoff(weight=0.15)


def _rates(policy: DraftPolicyState, probs: list[float], sunk_steps: int) -> list[float]:
    """Expected tokens per second of verifying the first L of a draft's tokens, L = 0..len(probs) (probs: each
    token's acceptance given the ones before), with `sunk_steps` drafter steps charged to every L."""
    survive = list(itertools.accumulate(probs, operator.mul))  # P(the first j drafts all accepted)
    step = policy.draft_step_time()
    return pass_rates([survive], policy.verify_time, lambda _: sunk_steps * step)


class CostModel(Policy):
    """The shipped cost model (`DraftPolicyState`), deciding as `OneiroCandidateGenerator._draft` does.

    mode: "latent", "lookup" or "hybrid" (a lookup draft where one pays, else latent); rule: "lookahead" (the
    shipped `worth_extending`), "myopic" (the rule before: stop at the first token that does not pay by itself)
    or "cut" (draft the whole budget, then cut); backoff: the drafter's back-off over all answers (None: none);
    charge_empty: an attempt that drafted nothing feeds the back-off its drafter steps as lost time (not shipped);
    call_backoff: a second back-off made afresh per answer (not shipped); extend: a latent draft is continued by
    lookup from its own last tokens (shipped in hybrid); compare_below: where lookup's first-token acceptance is
    below this, the drafter drafts too and the source promising more tokens per second wins (not shipped);
    step_bins: latent calibration bins per draft step (1, 2, 3+ with 3; shipped: 1); optimism: latent acceptance
    estimates scaled by this (shipped: 1)."""

    def __init__(self, profile: dict, step_ratio: float, rule: str = "lookahead", mode: str = "latent",
                 budget: int = DEPTH, backoff: Callable[[], Backoff] | None = Backoff, charge_empty: bool = False,
                 call_backoff: Callable[[], Backoff] | None = None, extend: bool = False,
                 compare_below: float = 0.0, step_bins: int = 1, optimism: float = 1.0):
        self.policy = DraftPolicyState()
        self.policy.pin_profile(profile["ratios"], 1.0, step_ratio)
        if backoff is not None:
            self.policy.backoff = backoff()
        self.rule, self.mode, self.budget = rule, mode, budget
        self.backoffs, self.charge_empty = [self.policy.backoff] if backoff else [], charge_empty
        self.call_backoff, self.extend, self.compare_below = call_backoff, extend, compare_below
        self.optimism = optimism
        self.bins = [self.policy.latent_bins] + [copy.deepcopy(self.policy.latent_bins) for _ in range(step_bins - 1)]
        self.source, self.drafted, self.split = "none", 0, 0

    def rate(self, confidence: float, step: int) -> Rate:
        """The calibrated acceptance of a latent token of this readout confidence at this draft step."""
        bins = self.bins[min(step, len(self.bins) - 1)]
        return bins[confidence_bin(confidence)]

    def begin(self):
        if self.call_backoff is not None:
            self.backoffs = [self.policy.backoff, self.call_backoff()]

    def choose(self, ch, p):
        pol = self.policy
        self.source, self.drafted = "none", 0
        ok, ngram = ch.lookup[p]
        lookup_best = None
        if self.mode != "latent" and ok:
            lookup_probs = pol.lookup_probs(ngram, len(ok))
            length = pol.best_length(lookup_probs, [0] * len(ok))
            if length and lookup_probs[0] >= self.compare_below:
                self.source = "lookup"
                return ok, length, 0
            if length:
                lookup_best = (ok, length, max(_rates(pol, lookup_probs, 0)))
        if self.mode == "lookup" or not all(b.worth_trying() for b in self.backoffs):
            for b in self.backoffs:
                b.steps_since_try += 1
            return [], 0, 0
        for b in self.backoffs:
            b.steps_since_try = 0
        conf, probs = ch.conf[p], []
        budget = min(self.budget, len(conf))
        for j in range(budget):
            probs.append(min(0.98, self.optimism * self.rate(conf[j], j).value))
            if conf[j] < 0.05 or j + 1 == budget:
                break
            if self.rule == "myopic":
                if pol.best_length(probs, list(range(1, len(probs) + 1))) < len(probs) and probs[-1] < 0.5:
                    break
            elif self.rule == "lookahead" and not pol.worth_extending(probs, budget):
                break
        if self.rule == "myopic":
            length = pol.best_length(probs, list(range(1, len(probs) + 1)))
        else:
            length = pol.latent_length(probs)
        self.source, self.drafted, self.split = "latent", len(probs), length
        if lookup_best is not None:  # both: the source that promises more tokens per second, the latent steps sunk
            latent_rate = max(_rates(pol, probs, len(probs)))
            lookup_rate_sunk = lookup_best[2] * pol.verify_time(lookup_best[1] + 1) / (
                pol.verify_time(lookup_best[1] + 1) + len(probs) * pol.draft_step_time())
            if lookup_rate_sunk >= latent_rate:
                self.source = "lookup"
                return lookup_best[0], lookup_best[1], len(probs)
        ok = ch.correct[p]
        if self.extend and length and p + length < len(ch.lookup):
            # the lookup continuation of the context with the latent tokens appended: what it drafts only counts
            # where every latent token was right, and then it is the lookup draft at p + length
            more, ngram = ch.lookup[p + length]
            more = more[: self.budget - length]
            if more:
                ok = ok[:length] + more
                full = pol.best_length(probs[:length] + pol.lookup_probs(ngram, len(more)), [0] * (length + len(more)),
                                       sunk_steps=len(probs))
                length, self.ngram = max(length, full), ngram
        return ok, length, len(probs)

    def observe(self, ch, p, a, length):
        pol = self.policy
        if not length:
            if self.source == "latent" and self.charge_empty:
                for b in self.backoffs:
                    b.observe(-self.drafted * pol.draft_step_time())
            return
        if self.source == "lookup":
            for j in range(min(a + 1, length)):
                pol.lookup_rate(ch.lookup[p][1], j + 1).add(j < a)
            return
        for j in range(min(a + 1, self.split)):
            self.rate(ch.conf[p][j], j).add(j < a)
        if length > self.split and a >= self.split:  # the lookup extension was judged
            for j in range(self.split, min(a + 1, length)):
                pol.lookup_rate(self.ngram, j - self.split + 1).add(j < a)
        spent = pol.verify_time(length + 1) + self.drafted * pol.draft_step_time()
        for b in self.backoffs:
            b.observe((a + 1) * pol.verify_time(1) - spent)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="smollm2-135m-instruct")
    ap.add_argument("--drafter", default="drafters/smollm2-135m-instruct")
    ap.add_argument("--data", default="data/selfdistill/smollm2-135m-instruct")
    ap.add_argument("--fresh", action="store_true", help="an untrained drafter (the floor: drafting must not lose)")
    ap.add_argument("--records", type=int, default=40, help="held-out records to replay")
    ap.add_argument("--max-answer", type=int, default=256)
    ap.add_argument("--profile", action="append", required=True,
                    help="PROFILE[:STEP]: a t(k) JSON from oneiro-bench profile, or h200, and the drafter step cost "
                         "as a share of t(1) (default: the profile's own, else 0.1); repeatable")
    ap.add_argument("--chains", help="cache file for the computed chains (read when it exists, else written)")
    ap.add_argument("--answers", nargs="+",
                    help="replay a benchmark's greedy answers instead (RUN/answers/greedy.jsonl, one file per lane, "
                         "each in run order): evaluation only, nothing here trains")
    ap.add_argument("--questions", help="the benchmark's questions file (default: $ONEIRO_BENCH_QUESTIONS)")
    ap.add_argument("--order", choices=("records", "regimes"), default="records",
                    help="replay order: as stored, or 'regimes' (thirds by the drafter's accuracy: best, worst, "
                         "the rest), the order in which a back-off must recover")
    args = ap.parse_args()
    torch.set_num_threads(1)
    model, tokenizer = load_reference_model(args.target)
    drafter = (OneiroDrafter.from_target(model) if args.fresh
               else OneiroDrafter.from_pretrained(args.drafter, target=model))
    drafter.eval()
    if args.answers:
        lanes = [cached(args.chains, i, partial(answer_chains, model, tokenizer, drafter, path, args.questions))
                 for i, path in enumerate(args.answers)]
        print(f"{len(args.answers)} benchmark lanes (evaluation only), {sum(map(len, lanes))} answers, "
              f"{sum(len(c.correct) for lane in lanes for c in lane)} answer tokens")
    else:
        lanes = [ordered(cached(args.chains, 0, partial(heldout_chains, model, drafter, args)), args.order)]
        print(f"{len(lanes[0])} held-out records, {sum(len(c.correct) for c in lanes[0])} answer tokens")
    for entry in args.profile:
        name, _, step_text = entry.partition(":")
        if name == "h200":
            profile = H200_PROFILE
        else:
            with open(name) as f:
                profile = json.load(f)
        step = float(step_text) if step_text else float(profile.get("drafter_step_ratio", 0.1))
        print(f"profile {name}, drafter step {step:.3f} t(1)")
        for label, make_policy in policies(profile, step).items():
            tau, speed = replay(lanes, make_policy, profile, step)
            print(f"  {label:46s} tau {tau:.2f}  modelled {speed:.3f}x greedy")


def policies(profile: dict, step: float) -> dict[str, Callable[[], Policy]]:
    """Each compared policy, as a maker of fresh ones (one per lane)."""
    return {
        "latent fixed-3": lambda: Fixed(3),
        "latent fixed-4": lambda: Fixed(4),
        "latent, draft 8 then cut": lambda: CostModel(profile, step, "cut", backoff=None),
        "latent before: myopic, quick back-off": lambda: CostModel(profile, step, "myopic", backoff=quick_backoff),
        "latent look-ahead, no back-off": lambda: CostModel(profile, step, backoff=None),
        "latent look-ahead, sticky back-off": lambda: CostModel(profile, step, backoff=StickyBackoff),
        "latent shipped: look-ahead, slow back-off": lambda: CostModel(profile, step),
        "latent, empty attempts charged": lambda: CostModel(profile, step, charge_empty=True),
        "latent, bins per step (1, 2, 3+)": lambda: CostModel(profile, step, step_bins=3),
        "latent oracle": lambda: Oracle(profile, step, ("latent",)),
        "lookup (oneiro-lookup)": lambda: CostModel(profile, step, mode="lookup"),
        "lookup oracle": lambda: Oracle(profile, step, ("lookup",)),
        "hybrid before": lambda: CostModel(profile, step, "myopic", mode="hybrid", backoff=quick_backoff),
        "hybrid, sticky back-off": lambda: CostModel(profile, step, mode="hybrid", backoff=StickyBackoff),
        "hybrid s10: no lookup after latent": lambda: CostModel(profile, step, mode="hybrid"),
        "hybrid shipped: lookup after latent": lambda: CostModel(profile, step, mode="hybrid", extend=True),
        "hybrid, empty attempts charged": lambda: CostModel(profile, step, mode="hybrid", extend=True,
                                                            charge_empty=True),
        "hybrid, per-call back-off 0.1 too": lambda: CostModel(profile, step, mode="hybrid", extend=True,
                                                               call_backoff=lambda: Backoff(0.1)),
        "hybrid, bins per step (1, 2, 3+)": lambda: CostModel(profile, step, mode="hybrid", extend=True,
                                                              step_bins=3),
        "hybrid, latent optimism 1.15": lambda: CostModel(profile, step, mode="hybrid", extend=True,
                                                          optimism=1.15),
        "hybrid, both sources below 0.5": lambda: CostModel(profile, step, mode="hybrid", extend=True,
                                                            compare_below=0.5),
        "hybrid oracle (best source, best length)": lambda: Oracle(profile, step, ("latent", "lookup")),
    }


def heldout_chains(model, drafter, args) -> list[Chains]:
    records = [r for r in load_dataset_records(args.data) if is_eval_record(str(r["id"]), 0.05)][: args.records]
    return [chains_for(model, drafter, list(r["input_ids"]), list(r["output_ids"])[: args.max_answer])
            for r in records]


def answer_chains(model, tokenizer, drafter, answers: str, questions: str | None) -> list[Chains]:
    """Chains of a benchmark run's greedy answers (`answers/greedy.jsonl`), every turn in run order, each turn's
    prompt rebuilt as the benchmark built it (the chat so far, the earlier turns answered by greedy)."""
    by_id = {q["question_id"]: q for q in load_questions(questions_file(questions))}
    chains = []
    with open(answers) as f:
        for line in f:
            record = json.loads(line)
            choice, messages = record["choices"][0], []
            for turn, text, ids in zip(by_id[record["question_id"]]["turns"], choice["turns"], choice["output_ids"]):
                messages.append({"role": "user", "content": turn})
                chains.append(chains_for(model, drafter, encode_prompt(tokenizer, messages), list(ids)))
                messages.append({"role": "assistant", "content": text})
    return chains


def cached(path: str | None, index: int, compute: Callable[[], list[Chains]]) -> list[Chains]:
    """Chains from `path` (suffixed with the lane index past the first) when it exists, else computed and saved."""
    if path and index:
        path = f"{path}.{index}"
    if path and os.path.exists(path):
        return [Chains(**fields) for fields in torch.load(path)]
    chains = compute()
    if path:
        torch.save([asdict(c) for c in chains], path)
    return chains


if __name__ == "__main__":
    main()
