"""Exact verified context (`verified_context="exact"`): at verified positions the copied layers attend to keys and
values made from the target's own inputs to those layers, not from the drafter's catch-up over its fused inputs.

The parity of drafting and training's rollout for this mode is in test_train_inference_parity.py; here: the
entries are what the target itself holds (an untrained drafter's projections are the target's), the drafts change
and stay lossless (chain and tree), the features and their cache, and oneiro-train end to end.
"""

from __future__ import annotations

import json

import pytest
import torch
from test_multilayer_training import _argv, sample_records, saved_target_and_data
from tiny import make_model, random_prompt, tiny_config
from transformers import DynamicCache, LlamaForCausalLM

from oneiro_hf import OneiroDrafter, modeling_oneiro
from oneiro_hf.compat import cache_keyword
from oneiro_hf.configuration_oneiro import OneiroDrafterConfig
from oneiro_hf.drafting.context import DrafterContext
from oneiro_hf.storage.hub import build_model_card
from oneiro_hf.training import feature_store as store
from oneiro_hf.training import features as feat
from oneiro_hf.training.cli import main as cli_main


def _target_pass(model, drafter, ids):
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        out = model(ids, use_cache=True, output_hidden_states=drafter.hidden_states_request,
                    **{cache_keyword(type(model)): cache})
    return out, cache


@pytest.mark.parametrize("arch", ["llama", "qwen3", "gemma3"])
@pytest.mark.parametrize("window", [None, 5])
@pytest.mark.parametrize("chunk", [1024, 2])
def test_exact_entries_are_the_targets_own_keys_and_values(arch, window, chunk, monkeypatch) -> None:
    """A drafter copied from the target and not trained has the target's projections (and q/k norms, rotary): its
    exact entries must equal the target's own cache for the copied layers at every verified position, and only
    the bonus token's entry is the drafter's own. A long prompt's entries are written in chunks (here of 2)."""
    monkeypatch.setattr(modeling_oneiro, "TRANSITION_CHUNK", chunk)
    model = make_model(arch)
    drafter = OneiroDrafter.from_target(model, verified_context="exact")
    assert drafter.context_layers == tuple(range(*drafter.config.interval))
    prompt = random_prompt(7, seed=1)  # within gemma3's sliding window (8), so the target keeps every key
    out, cache = _target_pass(model, drafter, prompt)
    t = prompt.shape[1]
    context = DrafterContext(drafter, window=window)
    context.observe_pass(out.hidden_states, slice(0, t))
    bonus = out.logits[:, -1:].argmax(-1)
    with torch.no_grad():
        context.catch_up(torch.cat([prompt, bonus], dim=1))
    first = 1 if window is None else t + 1 - window  # the first position the drafter holds
    assert context.exact_len == t - 1 and context.true_len == t and context.offset == first - 1
    for layer_idx in range(*drafter.config.interval):
        keys, values = context.cache._keys[layer_idx], context.cache._values[layer_idx]
        exact = slice(first, t)  # positions first..t-1; the entry after them is the bonus token's (t)
        n = t - first
        torch.testing.assert_close(keys[:, :, :n], cache.layers[layer_idx].keys[:, :, exact], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(values[:, :, :n], cache.layers[layer_idx].values[:, :, exact], rtol=1e-5,
                                   atol=1e-5)
        assert context.cache.seq_length == n + 1


def _decode(model, drafter, prompt, tree: bool):
    drafter.record_draft_rounds = True
    try:
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), assistant_model=drafter,
                             do_sample=False, max_new_tokens=24, oneiro_mode="latent", oneiro_max_draft_tokens=3,
                             oneiro_cost_aware=False, oneiro_min_draft_confidence=0.0, oneiro_tree=tree)
    finally:
        drafter.record_draft_rounds = False
    return out, drafter.last_stats


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_exact_context_changes_the_drafts_and_stays_lossless(arch) -> None:
    model = make_model(arch, strength="prefix")
    prompt = random_prompt(14, seed=3)  # longer than gemma3's sliding window (8)
    plain = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False, max_new_tokens=24)
    drafts = {}
    for mode in ("own", "exact"):
        drafter = OneiroDrafter.from_target(model, verified_context=mode)
        for tree in (False, True):
            out, stats = _decode(model, drafter, prompt, tree)
            assert torch.equal(out, plain), f"{mode} context, tree={tree}: not greedy's tokens"
            assert stats.drafted_tokens > 0
        _, stats = _decode(model, drafter, prompt, tree=False)
        drafts[mode] = [(r.start, tuple(r.tokens)) for r in stats.rounds]
    # non-vacuous: the context the copied layers see changes what they draft
    assert drafts["own"] != drafts["exact"]


def test_verified_context_is_checked_and_saved(tmp_path) -> None:
    with pytest.raises(ValueError, match=r"verified_context must be one of .*Fix: pass verified_context='own'"):
        OneiroDrafterConfig(verified_context="target")
    model = make_model("llama")
    drafter = OneiroDrafter.from_target(model, verified_context="exact")
    drafter.save_pretrained(tmp_path / "d")
    assert json.loads((tmp_path / "d" / "config.json").read_text())["verified_context"] == "exact"
    loaded = OneiroDrafter.from_pretrained(str(tmp_path / "d"), target=model)
    assert loaded.context_layers == drafter.context_layers
    # a drafter saved before the setting existed keeps its own context
    assert OneiroDrafter.from_target(model).context_layers == ()
    # the model card says which context the drafter was trained for
    card = str(build_model_card(loaded, license="apache-2.0", for_hub=False))
    assert "verified context | exact" in card
    assert "verified context" not in str(build_model_card(OneiroDrafter.from_target(model), license="apache-2.0",
                                                           for_hub=False))


@pytest.fixture(scope="module")
def tiny_target():
    torch.manual_seed(0)
    cfg = tiny_config("llama", vocab=96, hidden=32, max_position_embeddings=256, tie_word_embeddings=True,
                      eos_token_id=2)
    return LlamaForCausalLM(cfg).eval()


def test_feature_cache_stores_the_copied_layers_inputs(tiny_target, tmp_path) -> None:
    records = sample_records(tiny_target)[:6]
    layers = (2, 3)
    cache = store.FeatureCache(tmp_path / "c", tiny_target, 64, context_layers=layers)
    cache.build(records, progress=False)
    assert json.loads((tmp_path / "c" / "meta.json").read_text())["context_layers"] == list(layers)
    item = store.CachedFeatureDataset(cache, records)[0]
    with torch.no_grad():
        hidden = tiny_target(item["input_ids"][None], output_hidden_states=True).hidden_states
    expected = torch.stack([hidden[i][0] for i in layers], dim=1)  # (T, c, D), then unit RMS per position
    expected = expected / expected.pow(2).mean(-1, keepdim=True).sqrt()
    assert item["context"].dtype == torch.float16 and item["context"].shape == expected.shape
    torch.testing.assert_close(item["context"].float(), expected, rtol=2e-3, atol=2e-3)
    batch = feat.collate([item, store.CachedFeatureDataset(cache, records)[1]])
    assert batch["context"].shape[:2] == batch["input_ids"].shape
    with pytest.raises(store.FeatureCacheMismatch, match=r"context_layers=\[2, 3\], float32\).*Fix: pass another"):
        store.FeatureCache(tmp_path / "c", tiny_target, 64)  # an own-context run on an exact-context cache


def test_cli_trains_an_exact_context_drafter_end_to_end(tiny_target, tmp_path, capsys) -> None:
    root = saved_target_and_data(tiny_target, sample_records(tiny_target), tmp_path)
    out = tmp_path / "drafter"
    argv = _argv(root, out, "--verified_context", "exact", "--feature_cache_dir", str(tmp_path / "cache"))
    assert cli_main(argv) == 0
    assert json.loads((out / "config.json").read_text())["verified_context"] == "exact"
    assert json.loads((tmp_path / "cache" / "meta.json").read_text())["context_layers"] == [2, 3]
    capsys.readouterr()
    model = LlamaForCausalLM.from_pretrained(root / "model").eval()
    drafter = OneiroDrafter.from_pretrained(str(out), target=model)
    prompt = torch.tensor([[5, 9, 17, 33, 40]])
    kwargs = {"max_new_tokens": 12, "do_sample": False, "eos_token_id": None, "pad_token_id": 0}
    plain = model.generate(prompt, **kwargs)
    spec = model.generate(prompt, assistant_model=drafter, oneiro_mode="latent", oneiro_cost_aware=False, **kwargs)
    assert torch.equal(plain, spec) and drafter.last_stats.drafted_tokens > 0
    assert cli_main(_argv(root, tmp_path / "bad", "--verified_context", "target")) == 2
    assert "--verified_context target" in capsys.readouterr().err
