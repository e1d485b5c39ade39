"""Tree verification through `generate`: lossless against plain decoding, for every supported architecture.

Hypothesis draws a tiny target (sliding windows of 3-4 tokens, shorter than the contexts, all-sliding or
mixed with full layers), a drafter (all layers: exact past the receptive field on all-sliding targets; or
all but the first: often right), a prompt (random, repetitive, or the target's own output, so lookup
matches), a tree shape (single chain, wide, deep, bushy, tiny), the draft sources (lookup only, latent
only, both), the cost model on or off, max_new_tokens, an EOS id that greedy reaches inside a branch, and
a user stopping criterion that fires mid-branch. The output must be plain greedy's, token for token.
Across each architecture's run the tally asserts that drafts were accepted from both sources, that
branches other than the likeliest child were accepted in a share of passes (non-vacuity), and that EOS
and the user's criterion cut inside branches.

The sampling test compares the joint distribution of the first two sampled tokens with the target's own
(temperature and top-k applied) by chi-square.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_lossless_property import _uniform
from tiny import make_model, repeat_prompt
from transformers import LogitsProcessorList, StoppingCriteria, StoppingCriteriaList
from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper

from oneiro_hf import OneiroDrafter

ARCH_EXAMPLES = {"llama": 200, "qwen2": 200, "qwen3": 200, "mistral": 200, "gemma3": 200}
SHAPES = {  # tree_topk, tree_beam, tree_max_depth, tree_max_nodes, tree_lookup_branches
    "chain": (1, 1, 6, 6, 1),
    "wide": (8, 1, 2, 16, 4),
    "deep": (2, 1, 10, 12, 2),
    "bushy": (4, 4, 4, 32, 4),
    "tiny": (3, 2, 3, 2, 2),
}
# non-vacuity: of the passes that accepted a draft, the share whose accepted path left the likeliest child at
# some node (measured 7-25% per architecture with these targets; printed with -s)
MIN_NON_FIRST_BRANCH_SHARE = 0.04


@dataclasses.dataclass(frozen=True)
class Spec:
    arch: str
    layers: int
    window: int
    seed: int


SPECS = {arch: (Spec(arch, 2, 3, 0), Spec(arch, 3, 4, 1)) for arch in ARCH_EXAMPLES}


class Zoo:
    def __init__(self) -> None:
        self.targets: dict[Spec, Any] = {}
        self.drafters: dict[tuple[Spec, str], OneiroDrafter] = {}
        self.tally: dict[str, Counter] = {arch: Counter() for arch in ARCH_EXAMPLES}

    def target(self, spec: Spec):
        if spec not in self.targets:
            model = make_model(spec.arch, layers=spec.layers, window=spec.window, seed=spec.seed, hidden=32, vocab=64)
            self.targets[spec] = model
        return self.targets[spec]

    def drafter(self, spec: Spec, kind: str) -> OneiroDrafter:
        if (spec, kind) not in self.drafters:
            interval = (0, spec.layers) if kind == "full" else (1, spec.layers)
            self.drafters[(spec, kind)] = OneiroDrafter.from_target(self.target(spec), interval=interval)
        return self.drafters[(spec, kind)]


@pytest.fixture(scope="module")
def zoo():
    made = Zoo()
    yield made
    made.targets.clear()
    made.drafters.clear()


class StopAtLength(StoppingCriteria):
    """A user criterion: stop once the sequence has `length` tokens (plain decoding checks it every token)."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __call__(self, input_ids, scores, **kwargs):
        return torch.full((input_ids.shape[0],), input_ids.shape[1] >= self.length, dtype=torch.bool)


@st.composite
def cases(draw: st.DrawFn, arch: str) -> dict[str, Any]:
    token = st.integers(3, 63)
    kind = draw(st.sampled_from(("random", "repeat", "repeat", "own")))
    if kind == "random":
        prompt = draw(st.lists(token, min_size=1, max_size=16))
    elif kind == "repeat":
        prompt = draw(st.lists(token, min_size=1, max_size=4)) * draw(st.integers(2, 5))
    else:
        prompt = draw(st.lists(token, min_size=1, max_size=4))
    new = draw(_uniform(1, 16))
    return {
        "spec": draw(st.sampled_from(SPECS[arch])),
        "drafter": draw(st.sampled_from(("full", "full", "partial"))),
        "kind": kind,
        "prompt": prompt,
        "new": new,
        "shape": draw(st.sampled_from(tuple(SHAPES))),
        "mode": draw(st.sampled_from(("hybrid", "hybrid", "latent", "lookup"))),
        "cost_aware": draw(st.booleans()),
        "stop": draw(st.sampled_from(("none", "none", "eos", "criterion"))),
        "stop_at": draw(st.integers(0, new - 1)),
        "tree_min_ngram": draw(st.sampled_from((1, 1, 2))),
    }


def _greedy(model, ids, new, **kwargs):
    with torch.no_grad():
        # the prompt may hold the pad id (0) as a real token: say so, or generate would mask it
        return model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=new, **kwargs)


def _check(zoo: Zoo, case: dict[str, Any]) -> None:
    spec = case["spec"]
    model = zoo.target(spec)
    drafter = zoo.drafter(spec, case["drafter"])
    ids = torch.tensor([case["prompt"]], dtype=torch.long)
    if case["kind"] == "own":
        ids = _greedy(model, ids, 12)
    new = case["new"]
    plain = _greedy(model, ids, new)
    extra: dict[str, Any] = {}
    if case["stop"] == "eos":  # an id greedy produces at the chosen position (or earlier)
        extra["eos_token_id"] = int(plain[0, ids.shape[1] + case["stop_at"]])
    elif case["stop"] == "criterion":
        extra["stopping_criteria"] = StoppingCriteriaList([StopAtLength(ids.shape[1] + case["stop_at"] + 1)])
    reference = _greedy(model, ids, new, **extra) if extra else plain
    topk, beam, depth, nodes, branches = SHAPES[case["shape"]]
    out = _greedy(
        model, ids, new, assistant_model=drafter, oneiro_tree=True, oneiro_mode=case["mode"],
        oneiro_cost_aware=case["cost_aware"], oneiro_tree_topk=topk, oneiro_tree_beam=beam,
        oneiro_tree_max_depth=depth, oneiro_tree_max_nodes=nodes, oneiro_tree_lookup_branches=branches,
        oneiro_tree_lookup_min_ngram=case["tree_min_ngram"], **extra,
    )
    assert torch.equal(out, reference), (case, out.tolist(), reference.tolist())

    stats = drafter.last_stats
    produced = out.shape[1] - ids.shape[1]
    assert stats.steps == len(stats.accept_lengths) == len(stats.tree_nodes) == len(stats.tree_branch_ranks)
    assert len(stats.tree_drafter_calls) == stats.steps
    if case["mode"] == "lookup":
        assert not any(stats.tree_drafter_calls)
    assert sum(stats.accept_lengths) == produced - 1
    assert stats.accepted_tokens == sum(n - 1 for n in stats.accept_lengths)
    assert all(0 <= n <= nodes for n in stats.tree_nodes)
    assert all(n <= depth + 1 for n in stats.accept_lengths)
    if case["mode"] == "lookup":
        assert stats.drafted_by_source["latent"] == 0
    if case["mode"] == "latent":
        assert stats.drafted_by_source["lookup"] == 0
    tally = zoo.tally[spec.arch]
    tally["cases"] += 1
    tally["passes"] += stats.steps
    tally["passes_with_accepted"] += sum(r >= 0 for r in stats.tree_branch_ranks)
    tally["passes_non_first_branch"] += sum(r > 0 for r in stats.tree_branch_ranks)
    tally["latent_accepted"] += stats.accepted_by_source["latent"]
    tally["lookup_accepted"] += stats.accepted_by_source["lookup"]
    tally[f"shape_{case['shape']}_accepted"] += stats.accepted_tokens
    cut = produced < new
    tally["cut_by_eos"] += cut and case["stop"] == "eos" and stats.steps > 0
    tally["cut_by_criterion"] += cut and case["stop"] == "criterion" and stats.steps > 0


@pytest.mark.parametrize("arch", list(ARCH_EXAMPLES))
def test_tree_greedy_equals_plain_greedy(arch: str, zoo: Zoo) -> None:
    @settings(
        max_examples=ARCH_EXAMPLES[arch], derandomize=True, deadline=None, database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(case=cases(arch))
    def lossless(case: dict[str, Any]) -> None:
        _check(zoo, case)

    lossless()
    tally = zoo.tally[arch]
    share = tally["passes_non_first_branch"] / max(1, tally["passes_with_accepted"])
    print(f"\n{arch}: {dict(tally)}; a non-first branch in {share:.1%} of the passes that accepted drafts")
    assert tally["cases"] >= ARCH_EXAMPLES[arch]
    assert tally["latent_accepted"] > 0 and tally["lookup_accepted"] > 0, dict(tally)
    assert share >= MIN_NON_FIRST_BRANCH_SHARE, dict(tally)
    assert all(tally[f"shape_{shape}_accepted"] > 0 for shape in SHAPES), dict(tally)
    assert tally["cut_by_eos"] > 0 and tally["cut_by_criterion"] > 0, dict(tally)


def test_tree_sampling_matches_the_target_distribution() -> None:
    """First two sampled tokens (temperature 0.8, top-k 12): the second is decided by a tree pass over six sibling
    drafts; their joint distribution must be the target's, by chi-square."""
    model = make_model("gemma3", layers=2, window=3, hidden=32, vocab=24, init=0.6)
    drafter = OneiroDrafter.from_target(model, interval=(0, 2))
    ids = repeat_prompt([5, 9, 14, 7], 3)
    warp = LogitsProcessorList([TemperatureLogitsWarper(0.8), TopKLogitsWarper(12)])
    vocab = model.config.vocab_size
    with torch.no_grad():
        p1 = warp(ids, model(ids).logits[:, -1]).softmax(-1)[0]
        seconds = torch.cat([ids.repeat(vocab, 1), torch.arange(vocab).unsqueeze(1)], dim=1)
        p2 = warp(seconds, model(seconds).logits[:, -1]).softmax(-1)
    expected = (p1.unsqueeze(1) * p2).flatten()
    runs = 400
    counts = torch.zeros(vocab * vocab)
    torch.manual_seed(0)
    accepted = non_first = 0
    for _ in range(runs):
        with torch.no_grad():
            out = model.generate(
                ids, do_sample=True, temperature=0.8, top_k=12, top_p=1.0, max_new_tokens=3, assistant_model=drafter,
                oneiro_tree=True, oneiro_cost_aware=False, oneiro_tree_topk=6, oneiro_tree_max_depth=1,
            )
        x1, x2 = out[0, ids.shape[1] :][:2].tolist()  # x1 from the prefill, x2 from the tree's root: its siblings
        counts[x1 * vocab + x2] += 1
        accepted += drafter.last_stats.accepted_tokens
        non_first += sum(r > 0 for r in drafter.last_stats.tree_branch_ranks)
    assert accepted > runs // 4 and non_first > 0, (accepted, non_first)  # trees really decided the tokens
    from test_tree_core import _chi_square_p_value

    p_value = _chi_square_p_value(counts, runs * expected)
    assert p_value > 1e-3, p_value
