"""Unit tests of the pieces behind the candidate generator: the drafter's KV cache, the n-gram index,
the cost-aware length policy, the drafter's transition (incremental vs teacher-forced, and against the
target's own layers), and the hidden states the generator is fed during generate."""

from __future__ import annotations

import itertools
import operator
import random

import pytest
import torch
from tiny import ARCHS, WINDOW, greedy, make_model, random_prompt

from oneiro_hf import OneiroDrafter
from oneiro_hf.drafting.context import DrafterContext
from oneiro_hf.drafting.cost import choose_path
from oneiro_hf.drafting.kv_cache import DrafterKVCache
from oneiro_hf.drafting.lookup import NgramIndex
from oneiro_hf.drafting.policy import FIRST_CLIP, LOOKUP_POSITIONS, PROFIT_EMA, Backoff, DraftPolicyState
from oneiro_hf.drafting.tree import TokenTree

# ------------------------------------------------------------------------------------------ KV cache


def _kv(n: int, fill: float | None = None, heads: int = 2, dim: int = 4):
    if fill is None:
        return torch.randn(1, heads, n, dim), torch.randn(1, heads, n, dim)
    return torch.full((1, heads, n, dim), fill), torch.full((1, heads, n, dim), -fill)


def test_kv_cache_update_returns_everything_written_so_far():
    cache = DrafterKVCache(initial_capacity=4)
    k1, v1 = _kv(3)
    k, v = cache.update(k1, v1, layer_idx=5)
    torch.testing.assert_close(k, k1)
    torch.testing.assert_close(v, v1)
    k2, v2 = _kv(1)
    k, v = cache.update(k2, v2, layer_idx=5)
    assert k.shape == (1, 2, 4, 4)
    torch.testing.assert_close(k, torch.cat([k1, k2], dim=2))
    torch.testing.assert_close(v, torch.cat([v1, v2], dim=2))
    assert cache.seq_length == 0  # nothing is committed until the forward completes
    cache.commit()
    assert cache.seq_length == 4 and cache.get_seq_length() == 4


def test_kv_cache_grows_past_its_capacity_and_keeps_contents():
    cache = DrafterKVCache(initial_capacity=2)
    written_k, written_v = [], []
    for n in (1, 2, 3, 1, 7):
        k_new, v_new = _kv(n)
        written_k.append(k_new)
        written_v.append(v_new)
        k, v = cache.update(k_new, v_new, layer_idx=0)
        torch.testing.assert_close(k, torch.cat(written_k, dim=2))
        torch.testing.assert_close(v, torch.cat(written_v, dim=2))
    cache.commit()
    assert cache.seq_length == 14


def test_kv_cache_layers_are_independent_and_commit_checks_they_agree():
    cache = DrafterKVCache(initial_capacity=4)
    ka, va = _kv(3, fill=1.0)
    kb, vb = _kv(3, fill=2.0)
    cache.update(ka, va, layer_idx=2)
    k, _ = cache.update(kb, vb, layer_idx=3)
    torch.testing.assert_close(k, kb)
    cache.commit()
    assert cache.seq_length == 3
    cache.update(*_kv(1), layer_idx=2)  # only one layer advanced: a broken forward
    with pytest.raises(RuntimeError, match="disagree"):
        cache.commit()


def test_kv_cache_crop_then_overwrite():
    cache = DrafterKVCache(initial_capacity=16)
    k1, v1 = _kv(6)
    for layer in (0, 1):
        cache.update(k1, v1, layer_idx=layer)
    cache.commit()
    cache.crop(4)
    assert cache.seq_length == 4 and cache.get_seq_length() == 4
    k2, v2 = _kv(3)
    for layer in (0, 1):
        k, v = cache.update(k2, v2, layer_idx=layer)
        assert k.shape[2] == 7
        torch.testing.assert_close(k, torch.cat([k1[:, :, :4], k2], dim=2))
        torch.testing.assert_close(v, torch.cat([v1[:, :, :4], v2], dim=2))
    cache.commit()
    assert cache.seq_length == 7
    cache.crop(7)  # cropping to the current length is a no-op
    assert cache.seq_length == 7
    cache.crop(0)
    k, _ = cache.update(k2[:, :, :1], v2[:, :, :1], layer_idx=0)
    assert k.shape[2] == 1


def test_kv_cache_crop_then_grow_keeps_only_the_kept_prefix():
    cache = DrafterKVCache(initial_capacity=4)
    k1, v1 = _kv(4)
    cache.update(k1, v1, layer_idx=0)
    cache.commit()
    cache.crop(2)
    k2, v2 = _kv(5)  # needs a bigger buffer: the copy must take the 2 kept entries, not the 4 written
    k, v = cache.update(k2, v2, layer_idx=0)
    torch.testing.assert_close(k, torch.cat([k1[:, :, :2], k2], dim=2))
    torch.testing.assert_close(v, torch.cat([v1[:, :, :2], v2], dim=2))


def test_kv_cache_rejects_bad_crops_and_resets():
    cache = DrafterKVCache()
    cache.update(*_kv(3), layer_idx=0)
    cache.commit()
    for bad in (-1, 4):
        with pytest.raises(ValueError, match="crop"):
            cache.crop(bad)
    cache.reset()
    assert cache.seq_length == 0
    k, _ = cache.update(*_kv(2), layer_idx=0)
    assert k.shape[2] == 2


# ---------------------------------------------------------------------------------------- n-gram index


def _index(tokens, min_n=1, max_n=3) -> NgramIndex:
    index = NgramIndex(min_n, max_n)
    index.extend(list(tokens))
    return index


def test_entries_count_the_distinct_ngrams_indexed_so_far():
    index = _index([1, 2, 3, 1, 2, 3])
    assert index.entries == 0 and index  # indexing is lazy: the first lookup indexes
    index.lookup(3)
    assert index.entries == 9  # 1..3-grams followed by a token: {1, 2, 3}, {12, 23, 31}, {123, 231, 312}
    index.extend([4, 5])
    index.lookup(3)
    assert index.entries == 12  # 3, 23, 123 seen again (no new key); 4, 34, 234 new; 5 ends the text, unfollowed


def test_lookup_longest_suffix_wins():
    # suffix [1, 2, 3] occurred once (followed by 9); its shorter suffix [2, 3] occurred later (followed by 7)
    index = _index([1, 2, 3, 9, 5, 2, 3, 7, 1, 2, 3])
    tokens, n = index.lookup(3)
    assert n == 3
    assert tokens == [9, 5, 2]


def test_lookup_after_drafted_tokens_matches_the_suffix_they_end():
    # the indexed tokens end in 4, which never occurred before; with the drafted [2, 3] after it the suffix
    # [4, 2, 3] is unseen but [2, 3] was followed by 9 and then 5: copied from the indexed tokens only
    index = _index([1, 2, 3, 9, 5, 4])
    assert index.lookup(3) == ([], 0)
    assert index.lookup(3, after=[2, 3]) == ([9, 5, 4], 2)
    assert index.lookup(3, after=[3, 9]) == ([5, 4], 2)  # the continuation stops at the last indexed token
    assert index.lookup(3, after=[4, 1, 2]) == ([3, 9, 5], 2)  # [4, 1, 2] is unseen: the longest seen suffix
    assert index.tokens == [1, 2, 3, 9, 5, 4], "drafted tokens are never indexed"
    assert _index([7, 8], min_n=2, max_n=3).lookup(2, after=[9]) == ([], 0)


def test_lookup_most_recent_occurrence_wins():
    index = _index([1, 2, 8, 1, 2, 9, 4, 1, 2], min_n=2, max_n=2)
    assert index.lookup(2) == ([9, 4], 2)


def test_lookup_never_matches_itself():
    assert _index([5, 6, 7, 8]).lookup(4) == ([], 0)
    # a single token: its only "occurrence" is itself
    assert _index([5]).lookup(4) == ([], 0)
    # [4, 4] at the end: the earlier [4, 4] (positions 0-1) is followed by the final 4
    assert _index([4, 4, 4], min_n=2, max_n=2).lookup(5) == ([4], 2)


def test_lookup_continuation_is_clipped():
    index = _index([1, 2, 3, 1, 2], min_n=2, max_n=2)
    assert index.lookup(10) == ([3, 1, 2], 2)  # only what exists after the match
    assert index.lookup(1) == ([3], 2)  # and at most max_tokens


def test_lookup_respects_min_ngram():
    index = _index([1, 2, 3, 9, 3], min_n=2, max_n=4)  # only the unigram [3] repeats
    assert index.lookup(3) == ([], 0)
    assert _index([1, 2, 3, 9, 3], min_n=1, max_n=4).lookup(3) == ([9, 3], 1)


def _brute_force_lookup(tokens, min_n, max_n, max_tokens):
    length = len(tokens)
    for n in range(min(max_n, length - 1), min_n - 1, -1):
        suffix = tokens[length - n :]
        # latest earlier occurrence whose continuation starts before the end
        for end in range(length - 1, n - 1, -1):
            if tokens[end - n : end] == suffix:
                return tokens[end : min(end + max_tokens, length)], n
    return [], 0


def test_lookup_incremental_matches_brute_force():
    rng = random.Random(0)
    for trial in range(60):
        min_n = rng.randint(1, 3)
        max_n = rng.randint(min_n, 5)
        index = NgramIndex(min_n, max_n)
        tokens: list[int] = []
        for _ in range(rng.randint(1, 12)):
            chunk = [rng.randint(0, 3) for _ in range(rng.randint(1, 6))]
            index.extend(chunk)
            tokens += chunk
            max_tokens = rng.randint(1, 8)
            assert index.lookup(max_tokens) == _brute_force_lookup(tokens, min_n, max_n, max_tokens), (
                trial,
                tokens,
            )


# -------------------------------------------------------------------------------------------- policy


def _flat_profile(policy: DraftPolicyState, costs: dict[int, float]) -> None:
    policy.load_profile({k: c for k, c in costs.items()}, t1_s=1.0)


def _chain_tree(*branches: tuple[list[int], list[float], str]) -> TokenTree:
    """A tree of branches below root token 0: each (tokens, per-token acceptance, source)."""
    tree = TokenTree.with_root(0)
    for tokens, probs, source in branches:
        tree.add_path(0, tokens, list(itertools.accumulate(probs, operator.mul)), source)
    return tree


def _tokens(tree: TokenTree, nodes: list[int]) -> list[int]:
    return [tree.nodes[i].token for i in nodes]


def test_a_chain_drafts_nothing_hopeless_and_everything_when_verification_is_free():
    policy = DraftPolicyState()
    _flat_profile(policy, {k: 1.0 + 0.1 * (k - 1) for k in range(1, 12)})
    assert choose_path(_chain_tree(([1] * 6, [0.01] * 6, "latent")), policy.verify_time, 8) == []
    assert choose_path(TokenTree.with_root(0), policy.verify_time, 8) == []
    free = DraftPolicyState()
    _flat_profile(free, {k: 1.0 for k in range(1, 12)})
    tree = _chain_tree(([1, 2, 3, 4, 5, 6, 7, 8], [0.95] * 8, "latent"))
    assert _tokens(tree, choose_path(tree, free.verify_time, 8)) == [1, 2, 3, 4, 5, 6, 7, 8]
    assert _tokens(tree, choose_path(tree, free.verify_time, 3)) == [1, 2, 3]  # at most max_nodes
    assert _tokens(tree, choose_path(tree, None, 8)) == [1, 2, 3, 4, 5, 6, 7, 8]  # cost model off: uncut


def test_a_chain_stops_before_a_hopeless_token():
    policy = DraftPolicyState()
    _flat_profile(policy, {k: 1.0 + 0.01 * k for k in range(1, 12)})
    # the third token is almost surely rejected, so verifying past it only costs time
    tree = _chain_tree(([1, 2, 3, 4], [0.95, 0.95, 0.001, 0.95], "latent"))
    assert _tokens(tree, choose_path(tree, policy.verify_time, 8)) == [1, 2]


def test_a_chain_follows_a_measured_non_monotonic_latency_profile():
    """t(3) is expensive, t(4) is cheap: 3 drafts (k=4 tokens verified) beat 2 drafts (k=3)."""
    policy = DraftPolicyState()
    _flat_profile(policy, {1: 1.0, 2: 1.1, 3: 5.0, 4: 1.2, 5: 20.0, 6: 20.0})
    tree = _chain_tree(([1, 2, 3, 4, 5], [0.9] * 5, "latent"))
    assert len(choose_path(tree, policy.verify_time, 8)) == 3
    flat = DraftPolicyState()  # the same acceptance on a monotonic profile: longer drafts win
    _flat_profile(flat, {k: 1.0 + 0.05 * (k - 1) for k in range(1, 7)})
    assert len(choose_path(tree, flat.verify_time, 8)) == 5


def test_a_chain_is_the_branch_that_pays_best():
    """Lookup and the drafter disagree below the root: the chain is one of the two, the one promising more tokens per
    second (cost model on) or more tokens (off), never a mix."""
    policy = DraftPolicyState()
    _flat_profile(policy, {k: 1.0 + 0.1 * (k - 1) for k in range(1, 12)})
    tree = _chain_tree(([1, 2, 3], [0.5, 0.9, 0.9], "lookup"), ([7, 8, 9, 10], [0.45, 0.95, 0.95, 0.95], "latent"))
    assert _tokens(tree, choose_path(tree, policy.verify_time, 8)) == [7, 8, 9, 10]
    assert _tokens(tree, choose_path(tree, policy.verify_time, 3)) == [1, 2, 3]  # cut to 3, lookup's is likelier
    assert _tokens(tree, choose_path(tree, None, 8)) == [7, 8, 9, 10]


def test_verify_time_estimates_and_clipping():
    policy = DraftPolicyState()
    assert policy.verify_time(3) > policy.verify_time(1)  # unitless prior before any measurement
    policy.observe_verify(1, 0.010)
    assert policy.verify_time(1) == pytest.approx(0.010)
    # unmeasured lengths are scaled from the nearest measured one with the prior shape
    assert policy.verify_time(4) == pytest.approx(0.010 * (1 + 0.08 * 3))
    policy.observe_verify(1, 10.0)  # a stall is clipped to 3x the current estimate before averaging
    assert policy.verify_time(1) == pytest.approx(0.85 * 0.010 + 0.15 * 0.030)


def test_a_stall_in_a_lengths_first_pass_does_not_price_it_out():
    policy = DraftPolicyState()
    policy.observe_verify(1, 0.010)
    predicted = policy.verify_time(4)
    policy.observe_verify(4, 0.045)  # 4.5x t(1): a stall, the first time this length is measured
    assert policy.verify_time(4) == pytest.approx(FIRST_CLIP * predicted) and FIRST_CLIP * predicted < 0.02
    policy.observe_verify(4, 0.012)  # measured again: averaged from the clipped value, not from the stall
    assert policy.verify_time(4) == pytest.approx(0.85 * FIRST_CLIP * predicted + 0.15 * 0.012)
    policy.observe_verify(2, 0.0155)  # a real jump under the clip is kept as measured
    assert policy.verify_time(2) == pytest.approx(0.0155)
    fresh = DraftPolicyState()
    fresh.observe_verify(3, 0.5)  # nothing to compare the very first measurement with: kept
    assert fresh.verify_time(3) == pytest.approx(0.5)


def test_latent_policy_backs_off_and_retries():
    backoff = DraftPolicyState().backoff
    assert backoff.worth_trying() and backoff.weight == PROFIT_EMA
    for _ in range(5):
        backoff.observe(-1.0)
    assert backoff.profit_s < 0
    assert not backoff.worth_trying()
    # the round that switched it off and four losing retries doubled the interval from 8 to 128 (its cap)
    assert backoff.explore_every == 128
    backoff.steps_since_try = 64
    assert not backoff.worth_trying()
    backoff.steps_since_try = 128
    assert backoff.worth_trying()


def test_a_retry_that_pays_switches_the_drafter_back_on_after_a_long_losing_stretch():
    backoff = Backoff()
    for _ in range(200):  # a long stretch of text where drafting loses drives the slow average far down
        backoff.observe(-1.0)
    assert not backoff.worth_trying() and backoff.explore_every == 128
    backoff.observe(+0.5)  # one retry that saved time is enough: it is judged on its own
    assert backoff.worth_trying() and backoff.explore_every == 8
    assert backoff.profit_s == pytest.approx(PROFIT_EMA * 0.5)
    for _ in range(40):  # back on, the slow average decides again: paying rounds keep the drafter on
        backoff.observe(+1.0)
        assert backoff.worth_trying()
    backoff = Backoff()
    for _ in range(200):
        backoff.observe(-1.0)
    backoff.observe(+0.5)
    backoff.observe(-1.0)  # ... and a lucky retry buys little: the next loss switches it off again
    assert not backoff.worth_trying() and backoff.explore_every == 16


def test_acceptance_rates_are_binned_and_learned():
    policy = DraftPolicyState()
    low, high = policy.latent_rate(0.01), policy.latent_rate(0.99)
    assert low is not high and low.value < high.value
    assert policy.latent_rate(1.0) is high  # confidence 1.0 falls in the top bin
    before = high.value
    for _ in range(20):
        high.add(False)
    assert high.value < before
    # below 0.1 the bins are fine: a sibling at 0.005 and one at 0.08 are priced apart
    assert policy.latent_rate(0.005) is not policy.latent_rate(0.08)
    assert policy.latent_rate(0.005).value < policy.latent_rate(0.08).value < policy.latent_rate(0.15).value
    assert policy.lookup_rate(3, 1).value > policy.lookup_rate(2, 1).value
    assert policy.lookup_rate(3, 2) is policy.lookup_rate(3, 2)
    # lookup is learned per position in the copied span; positions past LOOKUP_POSITIONS share the last rate
    first, later = policy.lookup_rate(2, 1), policy.lookup_rate(2, 3)
    assert first is not later
    assert policy.lookup_rate(2, LOOKUP_POSITIONS + 5) is policy.lookup_rate(2, LOOKUP_POSITIONS)
    for _ in range(20):
        later.add(True)
        first.add(False)
    assert policy.lookup_probs(2, 3) == [first.value, policy.lookup_rate(2, 2).value, later.value]
    assert policy.lookup_probs(2, 6)[3:] == [policy.lookup_rate(2, LOOKUP_POSITIONS).value] * 3


# ------------------------------------------------------------------------------- drafter transition


def _random_drafter(model, interval, seed=0):
    drafter = OneiroDrafter.from_target(model, interval=interval)
    torch.manual_seed(seed)
    with torch.no_grad():  # make the fusion read the state too, so the state path is exercised
        torch.nn.init.normal_(drafter.fuse.weight, std=0.1)
        torch.nn.init.normal_(drafter.fuse.bias, std=0.1)
    return drafter


@pytest.mark.parametrize("arch", ARCHS)
def test_transition_incremental_equals_teacher_forced(arch):
    model = make_model(arch)
    drafter = _random_drafter(model, interval=(0, 4))  # gemma3: both sliding and full layers
    length = 3 * WINDOW
    torch.manual_seed(1)
    states = torch.randn(1, length, 64)
    tokens = random_prompt(length, seed=2)
    positions = torch.arange(1, length + 1).unsqueeze(0)
    with torch.no_grad():
        full = drafter.transition(states, tokens, positions)
        # one position at a time
        cache = DrafterKVCache(initial_capacity=4)
        steps = [
            drafter.transition(states[:, i : i + 1], tokens[:, i : i + 1], positions[:, i : i + 1], cache)
            for i in range(length)
        ]
        assert cache.seq_length == length
        torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
        # uneven chunks, as catch-up after accepted drafts produces
        cache = DrafterKVCache(initial_capacity=4)
        outs, start = [], 0
        for size in (5, 1, 3, 9, 1, 5):
            outs.append(
                drafter.transition(
                    states[:, start : start + size],
                    tokens[:, start : start + size],
                    positions[:, start : start + size],
                    cache,
                )
            )
            start += size
        assert start == length
        torch.testing.assert_close(torch.cat(outs, dim=1), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_transition_after_crop_equals_teacher_forced_on_the_new_sequence(arch):
    model = make_model(arch)
    drafter = _random_drafter(model, interval=(1, 3))
    length = 2 * WINDOW + 3
    torch.manual_seed(3)
    states = torch.randn(1, length, 64)
    tokens = random_prompt(length, seed=4)
    positions = torch.arange(1, length + 1).unsqueeze(0)
    keep = WINDOW + 2
    wrong_states = torch.randn(1, length - keep, 64)
    wrong_tokens = random_prompt(length - keep, seed=5)
    with torch.no_grad():
        full = drafter.transition(states, tokens, positions)
        cache = DrafterKVCache()
        drafter.transition(states[:, :keep], tokens[:, :keep], positions[:, :keep], cache)
        drafter.transition(wrong_states, wrong_tokens, positions[:, keep:], cache)  # a rejected speculation
        cache.crop(keep)
        tail = drafter.transition(states[:, keep:], tokens[:, keep:], positions[:, keep:], cache)
    torch.testing.assert_close(tail, full[:, keep:], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "arch",
    [
        a for a in ARCHS
    ],
)
def test_drafter_layers_compute_exactly_what_the_target_layers_compute(arch):
    """With all layers copied and the default fusion (embedding only), the drafter IS the target's decoder
    run on tokens[1:] at positions 1..: this pins rotary, masks and sliding windows to the target's."""
    model = make_model(arch)
    drafter = OneiroDrafter.from_target(model, interval=(0, 4))
    length = 3 * WINDOW
    tokens = random_prompt(length + 1, seed=6)[:, 1:]
    positions = torch.arange(1, length + 1).unsqueeze(0)
    with torch.no_grad():
        ref = model.model(tokens, position_ids=positions).last_hidden_state
        got = drafter.transition(torch.randn(1, length, 64), tokens, positions)
        cache = DrafterKVCache()
        stepwise = torch.cat(
            [
                drafter.transition(
                    torch.zeros(1, 1, 64), tokens[:, i : i + 1], positions[:, i : i + 1], cache
                )
                for i in range(length)
            ],
            dim=1,
        )
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(stepwise, ref, atol=1e-5, rtol=1e-5)


def test_target_hidden_state_handed_to_the_drafter_is_final_normed(tiny_model):
    model = tiny_model  # every supported architecture
    ids = random_prompt(12, seed=7)
    with torch.no_grad():
        last = model.model(ids).last_hidden_state
        only_last = model(ids, output_hidden_states=-1).hidden_states
        everything = model(ids, output_hidden_states=True).hidden_states
        logits = model(ids).logits
    torch.testing.assert_close(only_last[-1], last)
    torch.testing.assert_close(
        everything[-1], last
    )  # the state the generator reads when the user asks for all
    # and the drafter's readout of that state is exactly the target's head (incl. gemma3's softcapping)
    drafter = OneiroDrafter.from_target(model)
    torch.testing.assert_close(drafter.readout_logits(last), logits, atol=1e-5, rtol=1e-5)
    subset = torch.tensor([3, 17, 64, 90, 127])
    reduced = OneiroDrafter.from_target(model, draft_vocab_ids=subset)
    torch.testing.assert_close(reduced.readout_logits(last), logits[..., subset], atol=1e-5, rtol=1e-5)


def test_full_size_permuted_draft_vocab_reads_the_right_rows():
    model = make_model("llama", strength="per_token")
    perm = torch.randperm(128, generator=torch.Generator().manual_seed(0))
    drafter = OneiroDrafter.from_target(model, draft_vocab_ids=perm)
    state = torch.randn(1, 2, 64)
    with torch.no_grad():
        torch.testing.assert_close(drafter.readout_logits(state), model.lm_head(state)[..., perm])
    # the exact drafter of a per-token target must keep being exact whatever the order of its vocabulary
    ids = random_prompt(6, seed=1)
    greedy(
        model,
        ids,
        12,
        assistant_model=drafter,
        oneiro_mode="latent",
        oneiro_cost_aware=False,
        oneiro_min_draft_confidence=0.0,
    )
    assert drafter.last_stats.accepted_tokens == drafter.last_stats.drafted_tokens > 0


@pytest.mark.parametrize("mode", ["latent", "hybrid"])
@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_generator_feeds_the_drafter_the_targets_true_states(arch, mode, monkeypatch):
    """Every catch-up hands the drafter, for positions true_len+1.., the target's final-normed state of the
    position before each token: checked against one full target forward over the final sequence."""
    model = make_model(arch, strength="prefix")
    drafter = OneiroDrafter.from_target(model)
    calls: list[tuple[torch.Tensor, int, int]] = []
    original = DrafterContext.catch_up

    def spy(self, input_ids):
        states = torch.cat(self.pending, dim=1)
        calls.append((states.clone(), self.true_len, input_ids.shape[1]))
        return original(self, input_ids)

    monkeypatch.setattr(DrafterContext, "catch_up", spy)
    for length, cost_aware in ((1, False), (11, False), (11, True)):
        calls.clear()
        drafter.reset_drafting_policy()  # what earlier calls learned must not stop this one from drafting
        ids = (
            random_prompt(length, seed=8) if mode == "latent" else torch.cat([random_prompt(5, 9)] * 3, dim=1)
        )
        out = greedy(
            model,
            ids,
            24,
            assistant_model=drafter,
            oneiro_mode=mode,
            oneiro_cost_aware=cost_aware,
            oneiro_max_draft_tokens=4,
            oneiro_min_draft_confidence=0.0,
        )
        assert calls, "the drafter was never caught up"
        with torch.no_grad():
            truth = model.model(out).last_hidden_state
        covered = 0
        for states, true_len, end in calls:
            assert true_len == covered, "catch-up must start right after the last teacher-forced position"
            assert states.shape[1] == end - 1 - true_len
            torch.testing.assert_close(states, truth[:, true_len : end - 1], atol=1e-4, rtol=1e-4)
            covered = end - 1
        if not cost_aware:  # (the policy may stop drafting for this weak drafter)
            stats = drafter.last_stats
            assert 0 < stats.accepted_tokens < stats.drafted_tokens  # both accepted and rejected drafts


# ------------------------------------------------------------------------------------ transition init
@pytest.mark.parametrize("arch", ARCHS)
def test_random_transition_init_uses_the_target_classes_own_initialisation(arch):
    """The init ablation's baseline: no weight is copied, linears follow initializer_range, norms are reset."""
    model = make_model(arch)
    with torch.no_grad():  # move every target weight away from any init value, so a copy would be visible
        for param in model.model.layers.parameters():
            param.add_(0.5)
    copied = OneiroDrafter.from_target(model, interval=(2, 4))
    fresh = OneiroDrafter.from_target(model, interval=(2, 4), transition_init="random")
    reference = type(model)(model.config)  # what the target's class gives a new model
    std = model.config.initializer_range
    for name, param in fresh.layers.named_parameters():
        target_param = dict(model.model.layers.named_parameters())[f"{2 + int(name[0])}{name[1:]}"]
        assert torch.equal(dict(copied.layers.named_parameters())[name], target_param)
        assert not torch.equal(param, target_param), name
        if param.dim() == 2:
            assert abs(param.std().item() - std) < 0.25 * std, name
        else:  # norms: the class's init value (ones for llama-style, zeros for Gemma's 1 + w)
            ref = dict(reference.model.layers.named_parameters())[f"{2 + int(name[0])}{name[1:]}"]
            assert torch.equal(param, ref), name


def test_unknown_transition_init_is_refused():
    with pytest.raises(ValueError, match="transition_init must be one of target, random"):
        OneiroDrafter.from_target(make_model(), transition_init="zeros")
