"""Long contexts: lossless with prompts filling 1/4, 1/2 and ~7/8 of the position limit in every mode (lookup,
latent, hybrid, tree); the drafter's cache grows up to the call's max_length and no further; the catch-up over a
long prompt is chunked; max_length at the model's limit stops exactly where greedy stops.

Tiny models with max_position_embeddings=192 stand in for SmolLM2's 8192 (2k, 4k, 7k -> 48, 96, 168 tokens);
one real SmolLM2 test runs a ~2k-token prompt.
"""

from __future__ import annotations

import inspect
import json

import pytest
import torch
from tiny import greedy, make_model, random_prompt

import oneiro_hf.drafting.context as context_module
import oneiro_hf.modeling_oneiro as modeling
from oneiro_hf import OneiroDrafter
from oneiro_hf.drafting.kv_cache import DrafterKVCache

LIMIT = 192
MODES = ("lookup", "latent", "hybrid")
LONG_ARCHS = ("llama", "qwen2", "gemma3")  # full attention, half windowed, alternating windows


def long_prompt(length: int, seed: int) -> torch.LongTensor:
    """Random tokens with an early stretch repeated at the end."""
    ids = random_prompt(length, seed)
    ids[:, -6:] = ids[:, 4:10]
    return ids


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(modeling, "TRANSITION_CHUNK", 16)  # exercise the chunked catch-up at tiny scale


@pytest.fixture
def caches(monkeypatch):
    made: list[DrafterKVCache] = []

    class Recording(DrafterKVCache):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(context_module, "DrafterKVCache", Recording)
    return made


@pytest.mark.parametrize("arch", LONG_ARCHS)
def test_long_prompts_every_mode_identical_to_greedy(arch, small_chunks, caches, monkeypatch):
    torch.set_num_threads(1)
    model = make_model(arch, strength="prefix", max_position_embeddings=LIMIT)
    drafter = OneiroDrafter.from_target(model)
    widths: list[int] = []
    forward = drafter._transition

    def spy(bound, states, token_ids, position_ids, cache, mask_fn=None):
        widths.append(token_ids.shape[1])
        return forward(bound, states, token_ids, position_ids, cache, mask_fn)

    monkeypatch.setattr(drafter, "_transition", spy)
    for length in (48, 96, 168):  # SmolLM2's 2k, 4k, 7k of 8k
        ids = long_prompt(length, seed=length)
        ref = greedy(model, ids, 16)
        for mode in MODES:
            caches.clear()
            out = greedy(model, ids, 16, assistant_model=drafter, oneiro_mode=mode, oneiro_cost_aware=False)
            assert torch.equal(out, ref), f"{arch} {mode} at {length} prompt tokens differs from greedy"
            if mode == "lookup":  # lookup alone never runs the drafter: it holds no cache
                assert not caches
                continue
            [cache] = caches
            assert cache.max_capacity == length + 16
            for layer in range(*drafter.config.interval):
                assert cache.capacity(layer) <= length + 16
            assert drafter.last_stats.latent_steps > 0, (arch, mode, length)
            assert cache.seq_length >= length - 1  # the whole prompt went through the drafter
        tree = greedy(model, ids, 16, assistant_model=drafter, oneiro_tree=True)
        assert torch.equal(tree, ref), f"{arch} tree at {length} prompt tokens differs from greedy"
    assert max(widths) == modeling.TRANSITION_CHUNK  # the prompt was fed in chunks, never all at once


@pytest.mark.parametrize("arch", LONG_ARCHS)
def test_max_length_at_the_position_limit_stops_where_greedy_stops(arch):
    torch.set_num_threads(1)
    model = make_model(arch, strength="prefix", max_position_embeddings=LIMIT)
    drafter = OneiroDrafter.from_target(model)
    ids = long_prompt(LIMIT - 12, seed=3)
    with torch.no_grad():
        ref = model.generate(ids, do_sample=False, max_length=LIMIT)
    assert ref.shape[1] == LIMIT
    for mode in MODES:
        with torch.no_grad():
            out = model.generate(ids, do_sample=False, max_length=LIMIT, assistant_model=drafter, oneiro_mode=mode,
                                 oneiro_cost_aware=False)
        assert torch.equal(out, ref), f"{arch} {mode} differs from greedy at max_length={LIMIT}"
        if mode != "lookup":
            assert drafter.last_stats.latent_steps > 0, (arch, mode)
    with torch.no_grad():
        tree = model.generate(ids, do_sample=False, max_length=LIMIT, assistant_model=drafter, oneiro_tree=True)
    assert torch.equal(tree, ref), f"{arch} tree differs from greedy at max_length={LIMIT}"


@pytest.mark.parametrize("arch", LONG_ARCHS)
def test_chunked_transition_equals_one_pass(arch, monkeypatch):
    model = make_model(arch, strength="prefix", max_position_embeddings=LIMIT)
    drafter = OneiroDrafter.from_target(model)
    ids = long_prompt(100, seed=7)
    with torch.no_grad():
        states = model(ids, output_hidden_states=True).hidden_states[-1][:, :-1]
        positions = torch.arange(1, 100).unsqueeze(0)
        whole = drafter.transition(states, ids[:, 1:], positions, DrafterKVCache())
        monkeypatch.setattr(modeling, "TRANSITION_CHUNK", 16)
        cache = DrafterKVCache()
        chunked = drafter.transition(states, ids[:, 1:], positions, cache)
    assert chunked.shape == whole.shape == (1, 99, model.config.hidden_size)
    torch.testing.assert_close(chunked, whole, rtol=1e-5, atol=1e-5)
    assert cache.seq_length == 99


def test_cache_grows_by_doubling_up_to_its_limit_then_refuses():
    cache = DrafterKVCache(initial_capacity=4, max_capacity=10)
    kv = torch.zeros(1, 2, 3, 8)
    cache.update(kv, kv, layer_idx=5)
    assert cache.capacity(5) == 4
    cache.update(kv, kv, layer_idx=5)  # 6 positions: doubled to 8
    assert cache.capacity(5) == 8
    keys, values = cache.update(kv, kv, layer_idx=5)  # 9 positions: 16 capped at 10
    assert cache.capacity(5) == 10 and keys.shape[2] == 9 and values.shape[2] == 9
    with pytest.raises(ValueError, match=r"would need 12 positions, more than its limit of 10.*Fix"):
        cache.update(kv, kv, layer_idx=5)
    unbounded = DrafterKVCache(initial_capacity=4)
    for _ in range(4):
        unbounded.update(kv, kv, layer_idx=0)
    assert unbounded.capacity(0) == 16
    with pytest.raises(ValueError, match="max_capacity must be >= 1"):
        DrafterKVCache(max_capacity=0)


@pytest.mark.real_model
def test_smollm2_two_thousand_token_prompt_identical_to_greedy():
    from oneiro_hf.loading import default_drafter_dir
    from oneiro_hf.storage.reference_models import load_reference_model

    torch.set_num_threads(1)
    model, tokenizer = load_reference_model("smollm2-135m-instruct")
    drafter = OneiroDrafter.from_pretrained(default_drafter_dir("smollm2-135m-instruct"), target=model)
    source = inspect.getsource(json.decoder) + inspect.getsource(json.encoder)
    code = tokenizer.decode(tokenizer(source)["input_ids"][:1960])
    messages = [{"role": "user", "content": "Explain what this code does:\n\n" + code}]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                        return_dict=True)["input_ids"]
    assert 1950 <= ids.shape[1] <= 2100
    with torch.no_grad():
        ref = model.generate(ids, do_sample=False, max_new_tokens=8)
        # hybrid without the cost model drafts latently wherever lookup finds no match: both paths run
        out = model.generate(ids, do_sample=False, max_new_tokens=8, assistant_model=drafter, oneiro_mode="hybrid",
                             oneiro_cost_aware=False, oneiro_tree=False)
    assert torch.equal(out, ref)
    assert drafter.last_stats.latent_steps > 0
