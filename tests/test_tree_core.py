"""Tree verification's parts on their own: the tree and its masks, cache compaction, the verdicts (greedy and
the exact sampling walk, by chi-square) and the cost model's tree size (on this CPU's and the H200's t(k))."""

from __future__ import annotations

import pytest
import torch
from tiny import ARCHS, make_model, random_prompt
from transformers import DynamicCache

from oneiro_hf import OneiroDrafter
from oneiro_hf.bench.breakdown import ratio_at
from oneiro_hf.bench.profile import H200_RATIOS
from oneiro_hf.drafting.build import (
    LOOKUP_RANK_DECAY,
    LatentBranches,
    add_lookup_after_latent,
    add_lookup_branches,
)
from oneiro_hf.drafting.cost import (
    choose_nodes,
    drafting_pays,
    latent_levels_below,
    latent_levels_below_root,
)
from oneiro_hf.drafting.draft import Draft, Verdict
from oneiro_hf.drafting.engine import SequenceEngine
from oneiro_hf.drafting.engine import calibrate as _calibrate
from oneiro_hf.drafting.kv_cache import DrafterKVCache
from oneiro_hf.drafting.lookup import NgramIndex
from oneiro_hf.drafting.policy import PROFIT_EMA, DraftPolicyState
from oneiro_hf.drafting.stats import DraftStats
from oneiro_hf.drafting.tree import TokenTree
from oneiro_hf.drafting.view import EngineView
from oneiro_hf.generation.loop.judge import greedy_walk, sampling_walk
from oneiro_hf.generation.loop.target_cache import (
    UnsupportedTreeCache,
    compact_rows,
    prepare_cache,
    trim_sliding_layers,
)
from oneiro_hf.generation.loop.tree_mask import target_masks, tree_allowed
from oneiro_hf.settings import DraftingSettings


def _sample_tree() -> tuple[TokenTree, dict[str, int]]:
    """root -> a(5) -> h(12); root -> b(6) -> d(8) -> e(9) -> f(10) -> g(11); root -> c(7)."""
    tree = TokenTree.with_root(3)
    n = {}
    n["a"] = tree.add(0, 5, 0.9, "latent", confidence=0.9)
    n["b"] = tree.add(0, 6, 0.5, "latent", confidence=0.5)
    n["c"] = tree.add(0, 7, 0.2, "lookup", ngram=2)
    n["d"] = tree.add(n["b"], 8, 0.4, "latent")
    n["e"] = tree.add(n["d"], 9, 0.3, "latent")
    n["f"] = tree.add(n["e"], 10, 0.2, "latent")
    n["g"] = tree.add(n["f"], 11, 0.1, "latent")
    n["h"] = tree.add(n["a"], 12, 0.5, "latent")
    return tree, n


def test_tree_merges_repeated_tokens_and_caps_values_by_the_parent() -> None:
    tree = TokenTree.with_root(1)
    a = tree.add(0, 5, 0.3, "latent")
    assert tree.add(0, 5, 0.6, "lookup", ngram=3) == a  # the same token under the same parent: one node
    assert tree.nodes[a].value == pytest.approx(0.6) and tree.nodes[a].source == "lookup"
    child = tree.add(a, 7, 0.9, "latent")
    assert tree.nodes[child].value == pytest.approx(0.6)  # never likelier than its parent
    assert tree.add_path(a, [7, 8], [0.5, 0.4], "lookup")[0] == child


def test_flattening_positions_ancestors_and_keep() -> None:
    tree, n = _sample_tree()
    assert tree.tokens().tolist() == [[3, 5, 6, 7, 8, 9, 10, 11, 12]]
    assert tree.position_ids(10).tolist() == [[10, 11, 11, 11, 12, 13, 14, 15, 12]]
    anc = tree.ancestors()
    assert anc[n["g"]].nonzero().flatten().tolist() == [0, n["b"], n["d"], n["e"], n["f"], n["g"]]
    assert anc[n["h"]].nonzero().flatten().tolist() == [0, n["a"], n["h"]]
    assert tree.path_to(n["e"]) == [n["b"], n["d"], n["e"]]
    small = tree.keep([n["b"], n["d"], n["a"]])
    assert [node.token for node in small.nodes] == [3, 5, 6, 8]
    assert small.children[0] == {5: 1, 6: 2} and small.children[2] == {8: 3}
    with pytest.raises(ValueError, match="without its parent"):
        tree.keep([n["e"]])


def _position_coded_cache(length: int, window: int) -> DynamicCache:
    """A full and a sliding layer (window `window`) that have seen `length` tokens, each entry its position."""
    from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

    cache = DynamicCache()
    cache.layers = [DynamicLayer(), DynamicSlidingWindowLayer(sliding_window=window)]
    prepare_cache(cache)
    past = torch.arange(float(length)).view(1, 1, length, 1)
    for layer in cache.layers:
        layer.update(past, past)
    trim_sliding_layers(cache)
    return cache


def test_tree_mask_respects_ancestry_and_the_window() -> None:
    tree, n = _sample_tree()
    positions = tree.position_ids(10)  # (1, n): the root at position 10, after 10 cached tokens
    full, sliding = _position_coded_cache(10, window=4).layers  # the sliding layer holds positions 7..9
    allowed = tree_allowed(10, torch.tensor([10]), torch.tensor([0]), tree.ancestors()[None], positions)
    mask = allowed(sliding, 4)[0, 0]
    assert mask.shape == (len(tree), 3 + len(tree))
    # the root (position 10) sees cached 7..9 and itself
    assert mask[0].tolist() == [True, True, True, True] + [False] * (len(tree) - 1)
    # g (position 15) sees only keys at positions > 11: its ancestors d (12), e (13), f (14) and itself
    row = mask[n["g"]]
    assert not row[:3].any()
    assert row[3:].nonzero().flatten().tolist() == [n["d"], n["e"], n["f"], n["g"]]
    # without a window every ancestor and every cached key is visible
    whole = allowed(full, None)[0, 0]
    assert whole.shape == (len(tree), 10 + len(tree)) and whole[n["g"]].sum() == 10 + 6
    assert whole[n["h"], 10:].nonzero().flatten().tolist() == [0, n["a"], n["h"]]


@pytest.mark.parametrize("arch", ARCHS)
def test_tree_pass_and_compaction_equal_plain_forward_passes(arch: str) -> None:
    """Each node's logits equal a plain forward over prefix + its path; after compaction the cache continues as
    if only the path had been fed (window 4, so the deepest branch outgrows the window)."""
    torch.manual_seed(0)
    model = make_model(arch, window=4, seed=1)
    prompt = torch.randint(3, 128, (1, 11))
    cache = DynamicCache(config=model.config)
    prepare_cache(cache)
    with torch.no_grad():
        model(prompt[:, :-1], cache=cache, use_cache=True)
    trim_sliding_layers(cache)
    tree, n = _sample_tree()
    tree.nodes[0].token = int(prompt[0, -1])
    context = prompt.shape[1] - 1
    positions = tree.position_ids(context)
    allowed = tree_allowed(context, torch.tensor([context]), torch.tensor([0]), tree.ancestors()[None], positions)
    mask = target_masks(model, cache, allowed)
    assert isinstance(mask, dict) == (arch in ("qwen2", "qwen3", "gemma3"))
    with torch.no_grad():
        out = model(tree.tokens(), position_ids=positions, attention_mask=mask, cache=cache, use_cache=True)
        for i in range(len(tree)):
            path = [tree.nodes[j].token for j in tree.path_to(i)]
            plain = model(torch.cat([prompt, torch.tensor([path], dtype=torch.long)], dim=1)).logits[0, -1]
            torch.testing.assert_close(out.logits[0, i], plain, atol=1e-4, rtol=1e-4)
        keep = [0, n["b"], n["d"], n["e"]]
        assert compact_rows(cache, [keep], len(tree)) == [0]  # one row: no holes
        assert cache.get_seq_length() == prompt.shape[1] - 1 + len(keep)
        for layer in cache.layers:  # each layer's own invariants hold again
            if getattr(layer, "is_sliding", False):
                assert layer.keys.shape[-2] == layer.sliding_window - 1
            else:
                assert layer.keys.shape[-2] == cache.get_seq_length()
        nxt = model(torch.tensor([[10]]), cache=cache, use_cache=True).logits[0, -1]
        plain = model(torch.cat([prompt, torch.tensor([[6, 8, 9, 10]])], dim=1)).logits[0, -1]
    torch.testing.assert_close(nxt, plain, atol=1e-4, rtol=1e-4)


def test_compaction_keeps_exactly_the_chosen_entries() -> None:
    """Unit level: a full and a sliding layer filled with position-coded keys; compaction keeps the old entries
    and the kept nodes in path order, and the sliding layer's cumulative length counts kept positions only."""
    cache = _position_coded_cache(6, window=4)
    full, sliding = cache.layers
    tree_entries = (100 + torch.arange(5.0)).view(1, 1, 5, 1)
    for layer in cache.layers:
        layer.update(tree_entries, tree_entries)
    compact_rows(cache, [[0, 3, 4]], tree_size=5)
    assert full.keys.flatten().tolist() == [0, 1, 2, 3, 4, 5, 100, 103, 104]
    assert sliding.keys.flatten().tolist() == [100, 103, 104]  # window - 1 newest
    assert sliding.values.flatten().tolist() == [100, 103, 104]
    assert sliding.get_seq_length() == 9 and full.get_seq_length() == 9
    # the next pass accepts its first nodes in order: nothing moves, the layers are only cut after them
    more = (200 + torch.arange(4.0)).view(1, 1, 4, 1)
    for layer in cache.layers:
        layer.update(more, more)
    compact_rows(cache, [[0, 1]], tree_size=4)
    assert full.keys.flatten().tolist() == [0, 1, 2, 3, 4, 5, 100, 103, 104, 200, 201]
    assert sliding.keys.flatten().tolist() == [104, 200, 201]
    assert sliding.get_seq_length() == 11 and full.get_seq_length() == 11


def test_static_cache_is_refused_with_the_fix() -> None:
    from transformers import StaticCache

    model = make_model("llama")
    with pytest.raises(UnsupportedTreeCache, match="Fix: let generate make its default cache"):
        prepare_cache(StaticCache(config=model.config, max_cache_len=16))


def _rows(table: dict[int, list[float]]):
    """scores(node) from fixed per-node distributions (log-probabilities as scores)."""
    return lambda node: torch.tensor(table[node]).log().unsqueeze(0)


def test_greedy_walk_follows_the_targets_argmax_through_any_branch() -> None:
    tree, n = _sample_tree()
    vocab = 13
    table = {i: [1.0] * vocab for i in range(len(tree))}
    table[0][6] = 5.0  # the target picks b (the second child), then d, then 4 (not in the tree)
    table[n["b"]][8] = 5.0
    table[n["d"]][4] = 5.0
    verdict = greedy_walk(tree, _rows({k: [x / sum(v) for x in v] for k, v in table.items()}))
    assert verdict.path == [n["b"], n["d"]]
    assert verdict.tokens == [6, 8, 4]


def _chi_square_p_value(counts: torch.Tensor, expected: torch.Tensor) -> float:
    """P(chi-square >= observed) with cells of expected count < 5 pooled."""
    small = expected < 5
    counts = torch.cat([counts[~small], counts[small].sum().unsqueeze(0)])
    expected = torch.cat([expected[~small], expected[small].sum().unsqueeze(0)])
    keep = expected > 0
    counts, expected = counts[keep], expected[keep]
    stat = ((counts - expected) ** 2 / expected).sum()
    df = torch.tensor(float(len(counts) - 1))
    return float(torch.special.gammaincc(df / 2, stat / 2))


def test_sampling_walk_is_exactly_the_target_distribution() -> None:
    """The first two tokens of a sampled walk over a tree whose children cover likely and unlikely tokens:
    their joint distribution must be the target's own, p(x1) * p(x2 | x1)."""
    vocab = 6
    gen = torch.Generator().manual_seed(0)
    tree = TokenTree.with_root(0)
    a = tree.add(0, 2, 0.5, "latent")  # likely under the target
    b = tree.add(0, 4, 0.3, "lookup")  # unlikely
    c = tree.add(0, 1, 0.2, "latent")  # forbidden (probability 0)
    tree.add(a, 3, 0.4, "latent")
    tree.add(a, 5, 0.2, "latent")
    tree.add(b, 0, 0.2, "lookup")
    dists = {
        0: [0.1, 0.0, 0.45, 0.15, 0.05, 0.25],
        a: [0.2, 0.2, 0.1, 0.3, 0.1, 0.1],
        b: [0.5, 0.1, 0.1, 0.1, 0.1, 0.1],
        c: [1 / 6] * 6,
    }
    for node in range(len(tree)):
        dists.setdefault(node, [1 / 6] * 6)
    scores = _rows(dists)
    runs = 8000
    counts = torch.zeros(vocab, vocab + 1)  # second index vocab = "the walk stopped after x1"
    for _ in range(runs):
        verdict = sampling_walk(tree, scores, generator=gen)
        x1 = verdict.tokens[0]
        counts[x1, verdict.tokens[1] if len(verdict.tokens) > 1 else vocab] += 1
    expected = torch.zeros(vocab, vocab + 1)
    p0 = torch.tensor(dists[0])
    for x1 in range(vocab):
        child = tree.children[0].get(x1)
        if child is None:
            expected[x1, vocab] = p0[x1]
        else:
            expected[x1, :vocab] = p0[x1] * torch.tensor(dists[child])
    assert counts[1].sum() == 0  # a forbidden token is never emitted, even when drafted
    p_value = _chi_square_p_value(counts.flatten(), runs * expected.flatten())
    assert p_value > 1e-3, p_value


def test_cost_model_picks_small_trees_on_a_jumpy_cpu_and_large_ones_on_a_flat_gpu() -> None:
    tree = TokenTree.with_root(0)
    parent = 0
    for depth in range(6):  # a chain of likely tokens with two weaker siblings per level
        for rank, value in enumerate((0.8 ** (depth + 1), 0.1, 0.05)):
            node = tree.add(parent, 10 * depth + rank + 1, value, "latent")
            if rank == 0:
                nxt = node
        parent = nxt
    def cpu(k: int) -> float:  # t(k)/t(1) jumps at 2 and 4, then grows by half a token per token
        return 1.0 + 0.9 * (k >= 2) + 0.1 * (k >= 3) + 1.5 * (k >= 4) + 0.5 * max(0, k - 4)

    chosen_cpu = choose_nodes(tree, cpu, max_nodes=32)
    chosen_gpu = choose_nodes(tree, lambda k: ratio_at(H200_RATIOS, k), max_nodes=32)
    assert len(chosen_cpu) == 2  # (1 + 0.8 + 0.64) / t(3) beats one token per t(1); more nodes do not
    assert len(chosen_gpu) >= 12
    assert chosen_gpu[: len(chosen_cpu)] == chosen_cpu  # the likeliest nodes first, ancestors before children
    assert len(choose_nodes(tree, None, max_nodes=5)) == 5  # cost model off: the limit
    # a pass costing k times one token never pays for drafts that are all rejected
    hopeless = TokenTree.with_root(0)
    hopeless.add(0, 1, 0.01, "latent")
    assert choose_nodes(hopeless, lambda k: float(k), max_nodes=8) == []


def _jumpy_cpu(k: int) -> float:
    """t(k)/t(1) of this project's CPU profile: 1.59, 1.90, 1.44, 1.66 for k = 2..5, then +0.1 per token."""
    return {1: 1.0, 2: 1.59, 3: 1.90, 4: 1.44, 5: 1.66}.get(k, 1.66 + 0.1 * (k - 5))


def test_a_latent_branch_is_drafted_only_where_it_pays_beside_lookup() -> None:
    gpu = lambda k: ratio_at(H200_RATIOS, k)
    bare = TokenTree.with_root(0)
    confident = TokenTree.with_root(0)
    confident.add_path(0, [5, 6, 7], [0.8, 0.64, 0.51], "lookup", ngram=3)
    values = [n.value for n in confident.nodes[1:]]
    # what a latent branch adds below the root: lead rate times the share the root's children leave open
    assert latent_levels_below_root(bare, 0.6, 3) == [pytest.approx([v]) for v in (0.6, 0.36, 0.216)]
    assert latent_levels_below_root(confident, 0.6, 2) == [pytest.approx([0.2 * 0.6]), pytest.approx([0.2 * 0.36])]
    # nothing from lookup: 3 latent tokens verified in t(4) = 1.44 beat a plain step, calls at 0.1 t(1) each
    assert drafting_pays([], latent_levels_below_root(bare, 0.6, 3), _jumpy_cpu, 0.1, 0, 32)
    # only the look-ahead sees it: one level alone (t(2) = 1.59 for 1.6 tokens) does not pay on this CPU
    assert not drafting_pays([], latent_levels_below_root(bare, 0.6, 1), _jumpy_cpu, 0.1, 0, 32)
    # a confident lookup branch: on the CPU the latent branch costs more than its 0.12 tokens bring ...
    assert not drafting_pays(values, latent_levels_below_root(confident, 0.6, 3), _jumpy_cpu, 0.1, 0, 32)
    # ... on a flat GPU profile with cheap calls it still pays; with calls as dear as a pass it does not
    assert drafting_pays(values, latent_levels_below_root(confident, 0.6, 3), gpu, 0.02, 0, 32)
    assert not drafting_pays(values, latent_levels_below_root(confident, 0.6, 3), gpu, 1.0, 0, 32)
    # no room left to verify another node: nothing pays
    assert not drafting_pays(values, latent_levels_below_root(confident, 0.6, 3), gpu, 0.02, 0, 3)


def test_expanding_a_level_assumes_children_as_likely_as_their_parent() -> None:
    tree = TokenTree.with_root(0)
    a = tree.add(0, 1, 0.8, "latent")
    c = tree.add(0, 9, 0.8, "latent")
    b = tree.add(c, 2, 0.4, "latent")  # accepted half as often as its parent
    assert latent_levels_below(tree, [a, b], 2, 0.5) == [pytest.approx([0.64, 0.2]), pytest.approx([0.512, 0.1])]
    values = [n.value for n in tree.nodes[1:]]
    gpu = lambda k: ratio_at(H200_RATIOS, k)
    assert drafting_pays(values, latent_levels_below(tree, [a, b], 2, 0.5), gpu, 0.05, 2, 32)
    # calls already made are charged to both choices: a dear call still does not pay for 0.8 more tokens
    assert not drafting_pays(values, latent_levels_below(tree, [b], 2, 0.5), gpu, 0.5, 2, 32)


def test_expanding_a_lookup_node_counts_only_where_its_branch_breaks_off() -> None:
    tree = TokenTree.with_root(0)
    a = tree.add(0, 1, 0.8, "lookup", ngram=3)
    tree.add(a, 2, 0.6, "lookup", ngram=3)  # the branch goes on below a: 3/4 of a's mass is taken
    bare = tree.add(0, 3, 0.1, "lookup", ngram=3)  # a branch's last token: nothing taken below it
    # the drafter's lead rate 0.5, not the lookup rate, per level: 0.8 * 0.25 * 0.5, then * 0.5 again
    assert latent_levels_below(tree, [a, bare], 2, 0.5) == [pytest.approx([0.1, 0.05]), pytest.approx([0.05, 0.025])]
    # a latent node whose children already cover it adds nothing
    full = tree.add(0, 4, 0.05, "latent")
    tree.add(full, 5, 0.05, "lookup", ngram=2)
    assert latent_levels_below(tree, [full], 1, 0.5) == [pytest.approx([0.0])]


@pytest.mark.parametrize("arch", ("llama", "gemma3"))
def test_the_drafter_guesses_below_lookup_nodes_from_their_own_path(arch) -> None:
    """A lookup branch in the beam is expanded like a latent one: the drafter's top-k below each of its nodes is
    what a drafter fed that node's path token by token predicts (tree mask, positions and states in order)."""
    model = make_model(arch, strength="prefix")
    drafter = OneiroDrafter.from_target(model)
    ids = random_prompt(12, seed=5)  # longer than gemma3's sliding window (8)
    with torch.no_grad():
        out = model(ids, output_hidden_states=drafter.hidden_states_request)
    seq = torch.cat([ids, out.logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    states = drafter.input_states(out.hidden_states)
    builder = LatentBranches(drafter)
    builder.context.observe(states)
    tree = TokenTree.with_root(int(seq[0, -1]))
    branch = tree.add_path(0, [7, 9, 11], [0.9, 0.85, 0.8], "lookup", ngram=3)  # likelier than any latent node
    builder.expand(tree, seq, max_depth=4, topk=2, beam=2, min_value=0.0, policy=DraftPolicyState(), eos_ids=set(),
                   max_nodes=64, cost_aware=False)

    vocab_ids, cache, t = drafter.draft_vocab_ids, DrafterKVCache(), ids.shape[1]
    with torch.no_grad():
        state = drafter.transition(states, seq[:, 1:], torch.arange(1, t + 1).unsqueeze(0), cache)[:, -1:]
        for depth, (node, token) in enumerate(zip(branch, [7, 9, 11]), start=1):
            state = drafter.transition(drafter.recurrent_inputs(state), torch.tensor([[token]]),
                                       torch.tensor([[t + depth]]), cache)
            expected = vocab_ids[drafter.readout_logits(state[0, -1]).topk(2).indices].tolist()
            below = {tree.nodes[c].token: tree.nodes[c].source for c in tree.children[node].values()}
            assert set(expected) <= set(below), (depth, expected, below)
            assert "latent" in below.values()
            if depth == 3:  # the branch's last node, at the depth limit: its children end the tree
                assert all(not tree.children[c] for c in tree.children[node].values())



def test_lookup_continues_the_likeliest_latent_leaves_from_their_own_path() -> None:
    policy = DraftPolicyState()
    for _ in range(8):  # a copy that held once is likelier to hold again: the second position learned higher
        policy.lookup_rate(2, 2).add(True)
    index = NgramIndex(2, 3)
    index.extend([20, 21, 22, 23, 2, 24, 25, 30])  # 20 21 -> 22 23 2(EOS); 24 25 -> 30
    tree = TokenTree.with_root(30)
    a = tree.add(0, 20, 0.8, "latent", confidence=0.8)
    ab = tree.add(a, 21, 0.6, "latent", confidence=0.7)  # path 20 21: continued
    c = tree.add(0, 24, 0.3, "latent", confidence=0.3)
    cd = tree.add(c, 25, 0.2, "latent", confidence=0.6)  # path 24 25: third likeliest leaf, beyond `leaves`
    e = tree.add(0, 26, 0.25, "latent", confidence=0.25)  # a leaf whose path matches nothing
    lookup = tree.add(0, 40, 0.9, "lookup", ngram=3)  # not latent: never continued
    add_lookup_after_latent(tree, index, max_depth=4, leaves=2, min_ngram=2, policy=policy, eos_ids={2})
    first, second = policy.lookup_rate(2, 1).value, policy.lookup_rate(2, 2).value
    below = [(n.token, n.parent, n.source, n.ngram, n.copied) for n in tree.nodes[7:]]
    assert below == [(22, ab, "lookup", 2, 1), (23, 7, "lookup", 2, 2)], "cut at the depth limit (4), no EOS"
    assert [n.value for n in tree.nodes[7:]] == pytest.approx([0.6 * first, 0.6 * first * second])
    assert not tree.children[cd] and not tree.children[e] and not tree.children[lookup]
    deeper = TokenTree.with_root(30)
    tip = deeper.add(0, 20, 0.8, "latent", confidence=0.8)
    tip = deeper.add(tip, 21, 0.6, "latent", confidence=0.7)
    add_lookup_after_latent(deeper, index, max_depth=8, leaves=1, min_ngram=2, policy=policy, eos_ids={2})
    assert [n.token for n in deeper.nodes[3:]] == [22, 23, 2], "the copy ends with the EOS it reaches"


def test_a_pass_calibrates_each_tested_node_by_its_own_key() -> None:
    # a lookup branch of three copied tokens (3-gram) beside two drafter siblings of very low confidence; the
    # target accepts the first two copied tokens, then picks a token no node holds
    policy = DraftPolicyState()
    tree = TokenTree.with_root(1)
    branch = tree.add_path(0, [7, 8, 9], [0.6, 0.4, 0.3], "lookup", ngram=3)
    faint = tree.add(0, 11, 0.02, "latent", confidence=0.005)
    weak = tree.add(0, 12, 0.05, "latent", confidence=0.08)
    before = {key: (rate.accepted, rate.seen) for key, rate in
              [((3, 1), policy.lookup_rate(3, 1)), ((3, 2), policy.lookup_rate(3, 2)), ((3, 3), policy.lookup_rate(3, 3))]}
    faint_bin, weak_bin = policy.latent_rate(0.005), policy.latent_rate(0.08)
    assert faint_bin is not weak_bin
    faint_seen, weak_seen = faint_bin.seen, weak_bin.seen
    _calibrate(tree, Verdict(branch[:2], [7, 8, 5], []), kept=3, policy=policy)
    assert (policy.lookup_rate(3, 1).accepted, policy.lookup_rate(3, 1).seen) == (before[3, 1][0] + 1, before[3, 1][1] + 1)
    assert (policy.lookup_rate(3, 2).accepted, policy.lookup_rate(3, 2).seen) == (before[3, 2][0] + 1, before[3, 2][1] + 1)
    assert (policy.lookup_rate(3, 3).accepted, policy.lookup_rate(3, 3).seen) == (before[3, 3][0], before[3, 3][1] + 1)
    assert (faint_bin.seen, weak_bin.seen) == (faint_seen + 1, weak_seen + 1)  # both tested at the root, rejected
    assert tree.nodes[faint].source == tree.nodes[weak].source == "latent"


def test_one_token_matches_become_branches_priced_by_their_own_rate() -> None:
    """tree_lookup_min_ngram=1: where no 2-gram recurs, what followed earlier occurrences of the last token still
    becomes branches (most recent first), each priced by the 1-gram rates; at 2 the tree has no lookup branch."""
    policy = DraftPolicyState()
    for _ in range(12):
        policy.lookup_rate(1, 1).add(False)  # learned: a copy after a 1-gram rarely holds
    index = NgramIndex(1, 3, keep_occurrences=4)
    index.extend([5, 9, 10, 6, 9, 11, 12, 9])  # 9 recurs, "x 9" never does
    strict = TokenTree.with_root(9)
    add_lookup_branches(strict, index.continuations(2, 4), min_ngram=2, policy=policy, eos_ids=set())
    assert len(strict) == 1
    tree = TokenTree.with_root(9)
    add_lookup_branches(tree, index.continuations(2, 4), min_ngram=1, policy=policy, eos_ids=set())
    paths = [[tree.nodes[i].token for i in tree.path_to(leaf)] for leaf in range(1, len(tree)) if not tree.children[leaf]]
    assert paths == [[11, 12], [10, 6]]
    assert {node.ngram for node in tree.nodes[1:]} == {1}
    assert tree.nodes[1].value == pytest.approx(policy.lookup_rate(1, 1).value)
    assert policy.lookup_rate(1, 1).value < policy.lookup_rate(2, 1).value
    # the drafter's turn comes between: matches of 2 or more first, then the shorter ones only (max_ngram), whose
    # rank counts the longer continuations before them
    index = NgramIndex(1, 3, keep_occurrences=4)
    index.extend([4, 9, 10, 6, 4, 9, 11, 7, 9, 12, 3, 4, 9])  # "4 9" -> 11 7, 10 6; "9" alone also -> 12 3
    longer = TokenTree.with_root(9)
    add_lookup_branches(longer, index.continuations(2, 4), min_ngram=2, policy=policy, eos_ids=set())
    assert [n.token for n in longer.nodes[1:]] == [11, 7, 10, 6]
    add_lookup_branches(longer, index.continuations(2, 4), min_ngram=1, max_ngram=1, policy=policy,
                        eos_ids=set())
    assert [(n.token, n.ngram) for n in longer.nodes[5:]] == [(12, 1), (3, 1)]
    assert longer.nodes[5].value == pytest.approx(policy.lookup_rate(1, 1).value * LOOKUP_RANK_DECAY**2)


def test_ngram_index_offers_several_occurrences() -> None:
    index = NgramIndex(1, 2, keep_occurrences=3)
    index.extend([1, 2, 7, 1, 2, 8, 1, 2, 9, 5, 1, 2])
    conts = index.continuations(max_tokens=2, max_count=5)
    assert conts[:3] == [([9, 5], 2), ([8, 1], 2), ([7, 1], 2)]  # most recent occurrence first
    assert all(n >= 1 for _, n in conts)
    assert index.lookup(2) == ([9, 5], 2)  # the chain's lookup is the first continuation
    with pytest.raises(ValueError, match="keep_occurrences"):
        NgramIndex(1, 2).continuations(2, 2)


def test_the_back_off_credits_the_drafter_with_what_its_own_nodes_won() -> None:
    """Beside lookup (or memory) branches the back-off learns what the drafter's call added: the tokens won from
    its first accepted node on (less the bonus token the pass would have yielded there anyway), minus the width its
    nodes added to the pass and the call; drafted alone, that is the whole round against a one-token step."""
    model = make_model("llama", layers=2, hidden=32, vocab=64)
    drafter = OneiroDrafter.from_target(model)
    settings = EngineView.from_drafting_settings(DraftingSettings.from_config(drafter.config))

    def saved(tree: TokenTree, drafter_nodes: set[int], path: list[int]) -> float:
        """The back-off's profit after one round accepting `path` (all drafted tokens, then a bonus)."""
        policy = DraftPolicyState()
        policy.pin_profile({1: 1.0, 2: 1.2, 3: 1.3, 4: 1.4}, 1.0, 0.1)  # one call: 0.1 t(1)
        engine = SequenceEngine(drafter, settings, policy, DraftStats(), set(), max_length=32)
        tokens = [tree.nodes[i].token for i in path] + [9]
        draft = Draft(tree, calls=1, seconds=0.1, lead_token=6, drafter_nodes=tree.below(drafter_nodes))
        engine.learn(draft, Verdict(path, tokens, [torch.zeros(1, 64)] * len(tokens)), len(tokens),
                     policy.verify_time)
        return policy.backoff.profit_s / PROFIT_EMA

    both = TokenTree.with_root(5)
    both.add_path(0, [6, 7], [0.9, 0.8], "lookup", ngram=3)  # nodes 1, 2
    both.add(0, 8, 0.5, "latent", confidence=0.5)  # node 3, the drafter's
    # lookup's path won: the drafter's node widened the pass from 3 to 4 tokens (0.1 t(1)) and its call cost 0.1
    assert saved(both, {3}, [1, 2]) == pytest.approx(-0.2)
    below = TokenTree.with_root(5)
    below.add(0, 6, 0.9, "lookup", ngram=3)  # node 1
    below.add(1, 7, 0.5, "latent", confidence=0.5)  # node 2: the drafter's guess where lookup's branch ends
    below.add(2, 8, 0.5, "lookup", ngram=3)  # node 3: lookup continuing it, which exists only because of it
    assert below.below({2}) == {2, 3}
    # 4 tokens where lookup alone would have yielded 2 (its token, then the target's): 2 won for 2 nodes of width
    # (t(4) - t(2) = 0.2) and a call (0.1)
    assert saved(below, {2}, [1, 2, 3]) == pytest.approx(2 - 0.3)
    latent = TokenTree.with_root(5)
    latent.add(0, 6, 0.9, "latent", confidence=0.9)
    latent.add(1, 7, 0.8, "latent", confidence=0.8)
    # alone: 3 tokens for a 3-node pass (1.3 t(1)) and one call (0.1 t(1)): 1.6 t(1) saved
    assert saved(latent, {1, 2}, [1, 2]) == pytest.approx(1.6)
    assert saved(latent, {1, 2}, []) == pytest.approx(-0.3 - 0.1)  # nothing accepted: its width and call lost


def test_a_draft_marks_the_nodes_the_drafter_added_through_the_cost_models_cut() -> None:
    """`Draft.drafter_nodes` holds, in the tree as verified (after the cut renumbers it), the nodes the drafter's
    turn added and those below them: all of a latent draft, none of a lookup draft, and in a hybrid draft none
    of the lookup branches hung before the drafter's turn."""
    model = make_model("llama", layers=2, hidden=32, vocab=64)
    drafter = OneiroDrafter.from_target(model)
    ids = torch.tensor([[3, 4, 5, 6, 7, 3, 4, 5, 6, 7, 3, 4]])  # "3 4" was followed by "5 6 7" twice
    with torch.no_grad():
        out = model(ids[:, :-1], output_hidden_states=drafter.hidden_states_request)
    drafts = {}
    drafter.config.cost_aware, drafter.config.min_draft_confidence = False, 0.0  # a random drafter's nodes kept
    for mode in ("latent", "lookup", "hybrid"):
        drafter.config.draft_mode = mode
        settings = EngineView.from_drafting_settings(DraftingSettings.from_config(drafter.config))
        engine = SequenceEngine(drafter, settings, DraftPolicyState(), DraftStats(), set(), max_length=32)
        engine.observe(out.hidden_states, slice(None))
        drafts[mode] = draft = engine.draft(ids, DraftPolicyState().verify_time)
        assert draft.size > 0, mode
        assert draft.tree.below(draft.drafter_nodes) == draft.drafter_nodes
    assert drafts["latent"].calls and drafts["latent"].drafter_nodes == frozenset(range(1, len(drafts["latent"].tree)))
    assert not drafts["lookup"].calls and drafts["lookup"].drafter_nodes == frozenset()
    hybrid = drafts["hybrid"]
    copied = [i for i in hybrid.tree.children[0].values() if hybrid.tree.nodes[i].source == "lookup"]
    assert copied and not set(copied) & hybrid.drafter_nodes
