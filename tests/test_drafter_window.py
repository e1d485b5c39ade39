"""The drafter's bounded context (`context_window`): the first catch-up feeds only the latest verified positions,
at their absolute positions, in chain and tree decoding alike (oneiro_hf.drafting.context)."""

from __future__ import annotations

import pytest
import torch
from tiny import greedy, make_model, random_prompt

from oneiro_hf import OneiroDrafter
from oneiro_hf.drafting.build import LatentBranches
from oneiro_hf.drafting.context import DrafterContext
from oneiro_hf.drafting.kv_cache import DrafterKVCache
from oneiro_hf.drafting.policy import DraftPolicyState
from oneiro_hf.drafting.tree import TokenTree
from oneiro_hf.settings import DraftingSettings

PROMPT = 40
W = 16  # longer than the tiny sliding window (8): windowed layers mask inside the drafter's context too
ARCHS = ("llama", "gemma3", "mistral")
DECODING = {
    "latent": {"oneiro_mode": "latent"},
    "hybrid": {"oneiro_mode": "hybrid"},
    "tree": {"oneiro_mode": "hybrid", "oneiro_tree": True},
}


def _prompt(decoding: str) -> torch.LongTensor:
    if decoding == "latent":
        return random_prompt(PROMPT, seed=3)
    return torch.cat([random_prompt(8, seed=4)] * (PROMPT // 8), dim=1)  # repeats: lookup drafts too


def _record_catch_ups(monkeypatch) -> list[dict]:
    """Wrap DrafterContext.catch_up: after each call, what the real context and cache hold."""
    calls: list[dict] = []
    original = DrafterContext.catch_up

    def spy(self, input_ids):
        out = original(self, input_ids)
        calls.append({"seq": input_ids.shape[1], "cached": self.cache.seq_length, "offset": self.offset,
                      "true_len": self.true_len, "out": out.detach().clone()})
        return out

    monkeypatch.setattr(DrafterContext, "catch_up", spy)
    return calls


@pytest.mark.parametrize("decoding", sorted(DECODING))
@pytest.mark.parametrize("arch", ARCHS)
def test_windowed_drafting_equals_plain_greedy_and_bounds_the_cache(arch, decoding, monkeypatch):
    model = make_model(arch, strength="prefix")
    drafter = OneiroDrafter.from_target(model)
    ids = _prompt(decoding)
    plain = greedy(model, ids, 20)
    calls = _record_catch_ups(monkeypatch)
    out = greedy(model, ids, 20, assistant_model=drafter, oneiro_context_window=W, oneiro_cost_aware=False,
                 oneiro_max_draft_tokens=4, oneiro_min_draft_confidence=0.0, **DECODING[decoding])
    assert torch.equal(out, plain)
    assert calls, "the drafter was never caught up"
    first = calls[0]
    assert first["offset"] == first["true_len"] - W > 0, "the first catch-up must feed only the last W positions"
    for call in calls:
        assert call["offset"] == first["offset"], "only the first catch-up may drop positions"
        assert call["true_len"] == call["seq"] - 1
        # the real cache: the window plus the positions generated since the prompt, nothing speculative left
        assert call["cached"] == call["true_len"] - call["offset"] <= W + (call["seq"] - PROMPT)
    assert drafter.last_stats.drafted_tokens > 0


@pytest.mark.parametrize("tree", [False, True])
def test_a_window_longer_than_the_prompt_changes_nothing(tree, monkeypatch):
    model = make_model("gemma3", strength="prefix")
    drafter = OneiroDrafter.from_target(model)
    drafter.record_draft_rounds = True
    ids = random_prompt(PROMPT, seed=5)
    calls = _record_catch_ups(monkeypatch)
    runs = []
    for window in (None, PROMPT + 30):
        calls.clear()
        drafter.reset_drafting_policy()
        out = greedy(model, ids, 16, assistant_model=drafter, oneiro_context_window=window, oneiro_tree=tree,
                     oneiro_mode="latent", oneiro_cost_aware=False, oneiro_min_draft_confidence=0.0)
        rounds = None if tree else [(r.start, r.tokens) for r in drafter.last_stats.rounds]
        runs.append((out, rounds, [(c["offset"], c["cached"], c["out"]) for c in calls]))
    (out_a, rounds_a, calls_a), (out_b, rounds_b, calls_b) = runs
    assert torch.equal(out_a, out_b)
    assert rounds_a == rounds_b  # the same draft tokens (chain)
    assert len(calls_a) == len(calls_b) > 0
    for (off_a, cached_a, state_a), (off_b, cached_b, state_b) in zip(calls_a, calls_b):
        assert off_a == off_b == 0 and cached_a == cached_b
        assert torch.equal(state_a, state_b)  # the states every draft starts from (chain and tree)


def _first_step(model, drafter, ids):
    """The sequence at the first draft (prompt + plain greedy's first token) and the prompt's drafter input
    states (1, T, k*H)."""
    with torch.no_grad():
        out = model(ids, output_hidden_states=drafter.hidden_states_request)
    first = out.logits[:, -1].argmax(-1, keepdim=True)
    return torch.cat([ids, first], dim=1), drafter.input_states(out.hidden_states)


@pytest.mark.parametrize("arch", ARCHS)
def test_the_first_draft_is_the_drafters_on_the_last_w_positions_at_absolute_positions(arch):
    """T-token prompt, W = T - k: the first latent draft equals a hand-run drafter fed positions T+1-W..T (the
    states h_{p-1} and tokens x_p there, at those absolute positions), then rolled out at T+1, T+2, ..."""
    model = make_model(arch, strength="prefix")
    drafter = OneiroDrafter.from_target(model)
    drafter.record_draft_rounds = True
    ids = random_prompt(PROMPT, seed=6)
    window, steps = PROMPT - 7, 4
    seq, states = _first_step(model, drafter, ids)
    greedy(model, ids, 8, assistant_model=drafter, oneiro_context_window=window, oneiro_mode="latent",
           oneiro_cost_aware=False, oneiro_min_draft_confidence=0.0, oneiro_max_draft_tokens=steps)
    first = drafter.last_stats.rounds[0]
    assert first.start == PROMPT + 1

    t = PROMPT
    cache = DrafterKVCache()
    vocab_ids = drafter.draft_vocab_ids
    expected = []
    with torch.no_grad():
        positions = torch.arange(t + 1 - window, t + 1).unsqueeze(0)
        state = drafter.transition(states[:, t - window : t], seq[:, t + 1 - window : t + 1], positions, cache)[:, -1:]
        for j in range(steps):
            token = int(vocab_ids[drafter.readout_logits(state[:, -1]).argmax(-1)])
            expected.append(token)
            nxt = torch.tensor([[token]])
            state = drafter.transition(drafter.recurrent_inputs(state), nxt, torch.tensor([[t + 1 + j]]), cache)
    assert first.tokens == expected


@pytest.mark.parametrize("arch", ("gemma3", "mistral"))
def test_a_windowed_tree_equals_the_tree_over_the_windowed_suffix(arch):
    """Attention sees only position differences (RoPE, sliding windows), so a tree grown after a windowed catch-up
    at absolute positions is the tree grown on just the last W positions numbered from 1: a wrong offset in the
    tree mask's key positions would cut the teacher-forced keys out of the sliding windows."""
    model = make_model(arch, strength="prefix")
    drafter = OneiroDrafter.from_target(model)
    ids = random_prompt(PROMPT, seed=7)
    seq, states = _first_step(model, drafter, ids)
    trees = []
    for window, observed, input_ids in ((W, states, seq), (None, states[:, PROMPT - W :], seq[:, PROMPT - W :])):
        builder = LatentBranches(drafter, window=window)
        builder.context.observe(observed)
        tree = TokenTree.with_root(int(seq[0, -1]))
        builder.expand(tree, input_ids, max_depth=4, topk=2, beam=2, min_value=0.0, policy=DraftPolicyState(),
                       eos_ids=set(), max_nodes=32, cost_aware=False)
        assert builder.context.teacher_forced == W
        trees.append([(n.parent, n.token, n.depth) for n in tree.nodes])
    assert len(trees[0]) > 4
    assert trees[0] == trees[1]


def test_context_window_is_a_drafting_setting():
    model = make_model("llama")
    drafter = OneiroDrafter.from_target(model)
    assert DraftingSettings().context_window == drafter.config.context_window == 1024
    assert DraftingSettings.for_call(drafter.config, context_window=None).context_window is None
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="context_window.*Fix"):
            DraftingSettings.for_call(drafter.config, context_window=bad)
    with pytest.raises(ValueError, match="context_window"):
        greedy(model, random_prompt(5, seed=1), 2, assistant_model=drafter, oneiro_context_window=0)
