"""The suffix memory (`oneiro_suffix_memory=True`): what a drafter wrote in earlier calls, drafted again.

Its counts stay exactly those of the tokens it keeps (eviction takes back what the evicted tokens counted), it is
bounded, it is the drafter's own (reset, copies, other drafters), a memory built in one call drafts in the next,
and a batch's rows write to it; every output equals plain greedy's.
"""

from __future__ import annotations

import random

import pytest
import torch
from tiny import FLAT_PROFILE, greedy, make_model, random_prompt

from oneiro_hf import OneiroDrafter
from oneiro_hf.drafting.build import MEMORY_MIN_CONTEXT, add_memory_branches
from oneiro_hf.drafting.engine import SequenceEngine
from oneiro_hf.drafting.memory import MAX_CONTEXT, SuffixMemory
from oneiro_hf.drafting.policy import DraftPolicyState
from oneiro_hf.drafting.sources import MEMORY_DEPTH, LatentSource
from oneiro_hf.drafting.stats import DraftStats
from oneiro_hf.drafting.tree import TokenTree
from oneiro_hf.drafting.view import EngineView
from oneiro_hf.settings import DraftingSettings


def _table(memory: SuffixMemory) -> dict:
    return {key: dict(counts) for key, counts in memory._next.items()}


def _rebuilt(memory: SuffixMemory) -> dict:
    """The table a memory holding only `memory`'s kept tokens would have."""
    fresh = SuffixMemory(10**9, max_context=memory.max_context)
    for document in memory._documents:
        learned = max(document.learn_from - document.start, 0)
        tokens = list(document.tokens)
        copy = fresh.open([], learn_prompt=True)
        copy.learn_from = learned
        fresh.extend(copy, tokens)
    return _table(fresh)


def test_contexts_longer_than_max_context_are_neither_counted_nor_matched() -> None:
    memory = SuffixMemory(1000, max_context=2)
    memory.extend(memory.open([1, 2, 3], learn_prompt=True), [4, 1, 2, 3, 5])
    assert max(len(key) for key in _table(memory)) == 2
    assert memory.continuations([1, 2, 3]) == ({4: 1, 5: 1}, 2)  # "2 3" only: the 3-token context is not kept
    with pytest.raises(ValueError, match="Fix"):
        SuffixMemory(10, max_context=0)


def test_counts_continuations_of_the_longest_matching_context() -> None:
    memory = SuffixMemory(1000)
    document = memory.open([1, 2], learn_prompt=False)
    memory.extend(document, [5, 6, 7, 5, 6, 8, 5, 6, 7])
    counts, n = memory.continuations([9, 5, 6])
    assert n == 2 and counts == {7: 2, 8: 1}
    counts, n = memory.continuations([7, 5, 6])
    assert n == 3 and counts == {8: 1}
    counts, n = memory.continuations([1, 2])  # the prompt's end is the context of the first output token
    assert n == 2 and counts == {5: 1}
    assert memory.continuations([42]) == ({}, 0)
    assert (2,) in memory._next and (1,) not in memory._next  # prompt tokens are context, not continuations


def test_prompts_are_learned_only_when_asked() -> None:
    memory = SuffixMemory(1000)
    memory.open([3, 4, 3, 4], learn_prompt=True)
    assert memory.continuations([3]) == ({4: 2}, 1)


@pytest.mark.parametrize("max_context", [2, MAX_CONTEXT])
@pytest.mark.parametrize("budget", [1, 7, 40])
def test_eviction_keeps_the_bound_and_exactly_the_kept_tokens_counts(budget: int, max_context: int) -> None:
    rng = random.Random(budget)
    memory = SuffixMemory(budget, max_context=max_context)
    documents = [memory.open([rng.randrange(6) for _ in range(rng.randrange(1, 12))]) for _ in range(3)]
    for step in range(300):
        memory.extend(rng.choice(documents), [rng.randrange(6) for _ in range(rng.randrange(1, 5))])
        assert memory.kept <= budget
        assert memory.kept == sum(len(d.tokens) for d in memory._documents)
        assert memory.entries <= max_context * memory.kept
        if step % 25 == 0:
            assert _table(memory) == _rebuilt(memory)
    assert _table(memory) == _rebuilt(memory)
    memory.resize(3)
    assert memory.kept <= 3 and _table(memory) == _rebuilt(memory)


def test_memory_branches_are_the_most_frequent_continuations() -> None:
    memory = SuffixMemory(1000)
    document = memory.open([1])
    memory.extend(document, [10, 11, 12, 1, 10, 11, 12, 1, 10, 13])
    tree = TokenTree.with_root(1)
    added = add_memory_branches(tree, memory, [1], max_depth=3, max_nodes=8, min_value=0.0,
                                policy=DraftPolicyState(), eos_ids=set(), min_context=1)
    assert added == len(tree) - 1 > 0
    first = {tree.nodes[i].token: tree.nodes[i] for i in tree.children[0].values()}
    assert set(first) == {10}  # after 1 only 10 was ever seen
    below = {tree.nodes[i].token: tree.nodes[i] for i in tree.children[tree.children[0][10]].values()}
    assert below[11].value > below[13].value  # 11 followed 1, 10 twice, 13 once
    assert all(node.source == "memory" for node in tree.nodes[1:])
    assert max(node.depth for node in tree.nodes) <= 3


def test_a_context_shorter_than_the_minimum_drafts_nothing() -> None:
    memory = SuffixMemory(1000)
    memory.extend(memory.open([1]), [10, 11, 12, 1, 10, 11, 12])
    policy = DraftPolicyState()

    def drafted(tail: list[int]) -> int:
        return add_memory_branches(TokenTree.with_root(tail[-1]), memory, tail, max_depth=3, max_nodes=8,
                                   min_value=0.0, policy=policy, eos_ids=set())

    assert MEMORY_MIN_CONTEXT == 2
    assert drafted([7, 1]) == 0  # only the one-token context "1" is in the memory
    assert drafted([12, 1]) > 0  # "12 1" was seen, followed by 10


def _pinned(model) -> OneiroDrafter:
    drafter = OneiroDrafter.from_target(model)
    drafter.use_latency_profile(FLAT_PROFILE, learn=False)
    return drafter


@pytest.mark.parametrize("tree", [True, False])
def test_a_memory_built_in_one_call_drafts_in_the_next(tree: bool) -> None:
    model = make_model("llama")
    drafter = _pinned(model)
    prompt = random_prompt(12, 0)
    reference = greedy(model, prompt, 30)
    kwargs = {"assistant_model": drafter, "oneiro_tree": tree, "oneiro_mode": "lookup", "oneiro_suffix_memory": True}
    first = greedy(model, prompt, 30, **kwargs)
    cold = drafter.last_stats
    assert drafter.suffix_memory is not None and drafter.suffix_memory.kept > 30
    second = greedy(model, prompt, 30, **kwargs)
    warm = drafter.last_stats
    assert torch.equal(first, reference) and torch.equal(second, reference)
    assert warm.accepted_by_source["memory"] > cold.accepted_by_source["memory"]
    assert warm.memory_steps > 0 and warm.steps < cold.steps


def test_a_trees_memory_branches_may_run_past_its_depth_and_stay_greedy() -> None:
    model = make_model("llama")
    drafter = _pinned(model)
    prompt = random_prompt(12, 0)
    reference = greedy(model, prompt, 30)
    kwargs = {"assistant_model": drafter, "oneiro_tree": True, "oneiro_mode": "lookup", "oneiro_suffix_memory": True,
              "oneiro_tree_max_depth": 2}
    for _ in range(3):  # the first call fills the memory, the next ones learn its acceptance and draft from it
        assert torch.equal(greedy(model, prompt, 30, **kwargs), reference)
    stats = drafter.last_stats
    assert stats.accepted_by_source["memory"] > 0
    assert max(stats.accept_lengths) > 2 + 1  # more than tree_max_depth drafted tokens (and the target's) in a pass
    assert MEMORY_DEPTH == 2


@pytest.mark.parametrize("confident", [True, False])
def test_confident_memory_branches_can_save_the_drafters_call(confident: bool) -> None:
    """Memory nodes at least MEMORY_EARLY_VALUE likely go in before the drafter's turn, which is then priced beside
    them; doubtful ones come after it and never talk it out of a call."""
    model = make_model("llama", layers=2, hidden=32, vocab=64)
    drafter = OneiroDrafter.from_target(model)
    settings = EngineView.from_drafting_settings(DraftingSettings.from_config(drafter.config))
    policy = DraftPolicyState()
    policy.pin_profile({1: 1.0, 2: 1.05, 4: 1.1, 8: 1.2, 16: 1.4}, 1.0, 0.3)
    memory = SuffixMemory(1000)
    memory.extend(memory.open([1, 2, 3]), list(range(20, 40)))  # what another sequence wrote
    for context in range(1, 5):  # a continuation seen once (share 1/2) after its context: learned right, or wrong
        rate = policy.memory_rate(0.5, context)
        for _ in range(200):
            rate.add(confident)
    drafting = SequenceEngine(drafter, settings, policy, DraftStats(), set(), max_length=64, memory=memory)
    latent = next(source for source in drafting.sources if isinstance(source, LatentSource))
    latent.branches.expand = lambda tree, *args, **kwargs: (1, 6)  # the drafter's turn: one call, nothing hung
    draft = drafting.draft(torch.tensor([[5, 6, 20, 21, 22]]), policy.verify_time)
    memory_nodes = [node for node in draft.tree.nodes if node.source == "memory"]
    if confident:
        assert draft.calls == 0 and len(memory_nodes) >= 8  # 23, 24, ... hold: the drafter's call would not pay
        assert [node.token for node in memory_nodes[:3]] == [23, 24, 25]
    else:
        assert draft.calls > 0 and not memory_nodes


def test_reset_memory_forgets_and_the_memory_is_off_by_default() -> None:
    model = make_model("llama")
    drafter = _pinned(model)
    prompt = random_prompt(12, 1)
    greedy(model, prompt, 20, assistant_model=drafter, oneiro_tree=True)
    assert drafter.suffix_memory is None and drafter.last_stats.drafted_by_source["memory"] == 0
    greedy(model, prompt, 20, assistant_model=drafter, oneiro_tree=True, oneiro_suffix_memory=True)
    assert drafter.suffix_memory.kept > 0
    drafter.reset_memory()
    assert drafter.suffix_memory is None
    out = greedy(model, prompt, 20, assistant_model=drafter, oneiro_tree=True, oneiro_suffix_memory=True,
                 oneiro_mode="lookup")
    assert torch.equal(out, greedy(model, prompt, 20))
    first_round = drafter.last_stats.steps  # a cold memory: the first step drafts nothing from it
    assert first_round > 0 and drafter.suffix_memory.kept == 20 + MAX_CONTEXT


def test_memory_is_never_shared_between_drafters() -> None:
    model = make_model("llama")
    one, other = _pinned(model), _pinned(model)
    prompt = random_prompt(12, 2)
    greedy(model, prompt, 20, assistant_model=one, oneiro_tree=True, oneiro_suffix_memory=True)
    assert one.suffix_memory is not None and other.suffix_memory is None
    twin = one.copy_for()
    assert twin.suffix_memory is None
    greedy(model, prompt, 20, assistant_model=other, oneiro_tree=True, oneiro_suffix_memory=True)
    assert other.suffix_memory is not one.suffix_memory
    with pytest.raises(TypeError, match="Fix: assign"):
        one.suffix_memory = {}


def test_the_size_setting_bounds_the_memory_across_calls() -> None:
    model = make_model("llama")
    drafter = _pinned(model)
    for seed in range(3):
        out = greedy(model, random_prompt(10, seed), 16, assistant_model=drafter, oneiro_tree=True,
                     oneiro_suffix_memory=True, oneiro_suffix_memory_tokens=20)
        assert torch.equal(out, greedy(model, random_prompt(10, seed), 16))
        assert drafter.suffix_memory.kept <= 20
    greedy(model, random_prompt(10, 0), 4, assistant_model=drafter, oneiro_tree=True, oneiro_suffix_memory=True,
           oneiro_suffix_memory_tokens=5)
    assert drafter.suffix_memory.kept <= 5 and drafter.suffix_memory.max_tokens == 5


@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_a_bad_size_is_refused_with_the_fix(bad) -> None:
    model = make_model("llama")
    drafter = _pinned(model)
    with pytest.raises(ValueError, match="suffix_memory_tokens must be a whole number >= 1.*Fix: pass"):
        greedy(model, random_prompt(6, 0), 4, assistant_model=drafter, oneiro_suffix_memory=True,
               oneiro_suffix_memory_tokens=bad)


def test_a_batch_writes_every_row_and_stays_greedy() -> None:
    model = make_model("llama")
    drafter = _pinned(model)
    a, b = random_prompt(9, 3)[0].tolist(), random_prompt(12, 4)[0].tolist()
    width = max(len(a), len(b))
    ids = torch.tensor([[0] * (width - len(a)) + a, [0] * (width - len(b)) + b])
    mask = (torch.arange(width).unsqueeze(0) >= torch.tensor([[width - len(a)], [width - len(b)]])).long()
    reference = greedy(model, ids, 18, attention_mask=mask)
    for _ in range(2):  # cold, then warm from the first call's two rows
        out = greedy(model, ids, 18, attention_mask=mask, assistant_model=drafter, oneiro_suffix_memory=True,
                     oneiro_mode="lookup")
        assert torch.equal(out, reference)
    assert len([d for d in drafter.suffix_memory._documents if d.tokens]) == 4
    assert drafter.last_stats.accepted_by_source["memory"] > 0


def test_a_sequence_drafts_others_tokens_from_the_memory_not_its_own() -> None:
    memory = SuffixMemory(1000)
    own: dict = {}
    mine = memory.open([1], own=own)
    memory.extend(mine, [5, 6, 7, 5, 6], own)
    assert memory.continuations([5, 6]) == ({7: 1}, 2)
    assert memory.continuations([5, 6], exclude=own) == ({}, 0)  # prompt lookup's to draft
    other = memory.open([2])
    memory.extend(other, [5, 6, 9])
    assert memory.continuations([5, 6], exclude=own) == ({9: 1}, 2)
