"""Multi-layer input (`input_layers`): the drafter fuses several of the target's states, as EAGLE-3 does.

Checked on tiny targets of every architecture: generation stays lossless in chain and tree modes, the states
the drafter is fed during generate are exactly the selected layers of a full target pass (normalised by the
target's final norm), the default stays the original drafter, and a save/load round trip keeps it.
"""

from __future__ import annotations

import pytest
import torch
from tiny import ARCHS, greedy, make_model, random_prompt

from oneiro_hf import OneiroDrafter
from oneiro_hf.modeling_oneiro import resolve_input_layers
from oneiro_hf.targets import base_model

LAYERS = (1, 2, -1)  # of a 4-layer tiny target: outputs of decoder layers 0 and 1, and the final-normed last


def multilayer_drafter(model, seed: int = 0, **settings) -> OneiroDrafter:
    """A multi-layer drafter whose state slots carry small random weights, so every slot changes its drafts."""
    drafter = OneiroDrafter.from_target(model, input_layers=LAYERS, **settings)
    hidden = drafter.config.hidden_size
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        drafter.fuse.weight[:, : 3 * hidden].copy_(0.05 * torch.randn(hidden, 3 * hidden, generator=gen))
    return drafter


def test_input_layers_resolution_and_errors() -> None:
    assert resolve_input_layers(None, 4) is None
    assert resolve_input_layers((-1,), 4) is None  # the default, stored as such
    assert resolve_input_layers((4,), 4) is None
    assert resolve_input_layers((1, 2, -1), 4) == [1, 2, 4]
    for bad in ((), (5,), (1, 1), (-6,)):
        with pytest.raises(ValueError, match="input_layers .* Fix: e.g. input_layers="):
            resolve_input_layers(bad, 4)


def test_default_drafter_is_unchanged() -> None:
    model = make_model("llama")
    plain = OneiroDrafter.from_target(model)
    explicit = OneiroDrafter.from_target(model, input_layers=(-1,))
    assert plain.config.input_layers is None and explicit.config.input_layers is None
    assert plain.fuse.weight.shape == (64, 128) and plain.hidden_states_request == -1
    assert set(plain.state_dict()) == set(explicit.state_dict())


@pytest.mark.parametrize("arch", ARCHS)
def test_multilayer_chain_and_tree_are_lossless(arch: str) -> None:
    model = make_model(arch, strength="prefix")
    drafter = multilayer_drafter(model)
    assert drafter.fuse.weight.shape == (64, 4 * 64)
    assert drafter.hidden_states_request == [1, 2, 4]
    for seed in (1, 2):
        ids = random_prompt(10, seed=seed)
        ref = greedy(model, ids, 24)
        for mode in ("latent", "hybrid"):
            kwargs = {"oneiro_mode": mode, "oneiro_cost_aware": False, "oneiro_min_draft_confidence": 0.0}
            chain = greedy(model, ids, 24, assistant_model=drafter, **kwargs)
            assert torch.equal(chain, ref), (arch, seed, mode, "chain")
            assert drafter.last_stats.drafted_tokens > 0
            tree = greedy(model, ids, 24, assistant_model=drafter, oneiro_tree=True, **kwargs)
            assert torch.equal(tree, ref), (arch, seed, mode, "tree")
            assert drafter.last_stats.drafted_tokens > 0


def test_multilayer_drafts_are_accepted_when_exact() -> None:
    """On a per-token target a drafter with zero state weights is exact whatever its input width: every latent
    draft is accepted, so the recurrent steps (predicted state in every slot) run and their outputs are used."""
    model = make_model("qwen2", strength="per_token")
    drafter = OneiroDrafter.from_target(model, input_layers=LAYERS)
    ids = random_prompt(6, seed=3)
    ref = greedy(model, ids, 20)
    out = greedy(model, ids, 20, assistant_model=drafter, oneiro_mode="latent", oneiro_cost_aware=False,
                 oneiro_max_draft_tokens=4, oneiro_min_draft_confidence=0.0)
    assert torch.equal(out, ref)
    stats = drafter.last_stats
    assert stats.drafted_tokens > 0 and stats.accepted_tokens == stats.drafted_tokens


@pytest.mark.parametrize("tree", [False, True])
def test_drafter_is_fed_the_selected_layers_of_the_verification_pass(tree: bool, monkeypatch) -> None:
    """Every teacher-forced input the drafter gets during generate equals the selected states of one full target
    pass over the final sequence (no extra target forward: they come from the verification passes). The target
    is per-token and the drafter exact, so drafts are accepted and the kept part of each pass matters."""
    model = make_model("llama", strength="per_token")
    drafter = OneiroDrafter.from_target(model, input_layers=LAYERS)
    fed: dict[int, torch.Tensor] = {}
    speculative: list[torch.Tensor] = []  # inputs made by recurrent_inputs (the drafter's own predictions)
    original, original_recurrent = type(drafter).transition, type(drafter).recurrent_inputs

    def recurrent(self, predicted):
        speculative.append(original_recurrent(self, predicted))
        return speculative[-1]

    def recording(self, states, token_ids, position_ids, cache=None, mask_fn=None):
        if not any(states is s for s in speculative):  # teacher-forced: the catch-up of accepted positions
            for j, pos in enumerate(position_ids[0].tolist()):
                fed[pos] = states[0, j].detach().clone()
        return original(self, states, token_ids, position_ids, cache, mask_fn)

    monkeypatch.setattr(type(drafter), "transition", recording)
    monkeypatch.setattr(type(drafter), "recurrent_inputs", recurrent)
    ids = random_prompt(9, seed=4)
    out = greedy(model, ids, 20, assistant_model=drafter, oneiro_mode="latent", oneiro_cost_aware=False,
                 oneiro_min_draft_confidence=0.0, oneiro_tree=tree)
    assert drafter.last_stats.accepted_tokens > 0
    with torch.no_grad():
        full = model(out, output_hidden_states=True).hidden_states
        norm = base_model(model).norm
        expected = torch.cat([norm(full[1]), norm(full[2]), full[4]], dim=-1)[0]
    assert len(speculative) > 0 and len(fed) > ids.shape[1]
    for pos, state in fed.items():  # drafter position p is fed the state at p - 1
        torch.testing.assert_close(state, expected[pos - 1], rtol=1e-4, atol=1e-4)


def test_multilayer_save_load_round_trip(tmp_path) -> None:
    model = make_model("gemma3", strength="prefix")
    drafter = multilayer_drafter(model, seed=7)
    drafter.save_pretrained(tmp_path)
    loaded = OneiroDrafter.from_pretrained(tmp_path, target=model)
    assert loaded.config.input_layers == [1, 2, 4]
    torch.testing.assert_close(loaded.fuse.weight, drafter.fuse.weight, rtol=0, atol=0)
    ids = random_prompt(8, seed=2)
    kwargs = {"oneiro_mode": "latent", "oneiro_cost_aware": False, "oneiro_min_draft_confidence": 0.0}
    a = greedy(model, ids, 16, assistant_model=drafter, **kwargs)
    drafted = drafter.last_stats.drafted_tokens
    b = greedy(model, ids, 16, assistant_model=loaded, **kwargs)
    assert torch.equal(a, b) and torch.equal(a, greedy(model, ids, 16))
    assert loaded.last_stats.drafted_tokens == drafted
