"""Grouped-query attention for verification passes (oneiro_hf/kernels/grouped_attention.py): the same attention as
transformers' sdpa without copying keys and values per query head, used only while a drafter's generate runs."""

from __future__ import annotations

import types

import pytest
import torch
from tiny import ARCHS, make_model
from transformers import LogitsProcessor, LogitsProcessorList
from transformers.integrations import sdpa_attention
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from oneiro_hf import OneiroDrafter
from oneiro_hf.kernels.grouped_attention import ATTENTION_NAME, grouped_attention, grouped_sdpa_attention


def test_grouped_attention_equals_sdpa_and_copies_no_cache(monkeypatch) -> None:
    torch.manual_seed(0)
    module = types.SimpleNamespace(num_key_value_groups=3, is_causal=True, training=False)
    query = torch.randn(1, 9, 5, 16)
    key, value = torch.randn(1, 3, 40, 16), torch.randn(1, 3, 40, 16)
    mask = torch.rand(1, 1, 5, 40) > 0.3  # any pattern: a tree's ancestry, a window
    mask[..., 0] = True
    expected, _ = sdpa_attention_forward(module, query, key, value, mask, scaling=0.25)

    def no_copy(*args, **kwargs):
        raise AssertionError("repeat_kv copied the cache")

    monkeypatch.setattr(sdpa_attention, "repeat_kv", no_copy)
    got, _ = grouped_sdpa_attention(module, query, key, value, mask, scaling=0.25)
    assert got.shape == expected.shape == (1, 5, 9, 16)
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-5)
    additive = torch.where(mask, 0.0, torch.finfo(torch.float32).min)  # an eager-style mask is the same attention
    torch.testing.assert_close(grouped_sdpa_attention(module, query, key, value, additive, scaling=0.25)[0], expected,
                               atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("arch", ARCHS)
def test_a_multi_token_pass_over_the_cache_gives_sdpa_logits(arch: str) -> None:
    """A verification-like pass (q > 1 over a filled cache, with transformers' masks, sliding windows included)."""
    model = make_model(arch, layers=4)
    model.set_attn_implementation("sdpa")
    prompt = torch.randint(3, 120, (1, 20))
    new = torch.randint(3, 120, (1, 5))
    logits = {}
    for implementation in ("sdpa", ATTENTION_NAME):
        model.set_attn_implementation(implementation)
        with torch.no_grad():
            cache = model(prompt, use_cache=True).cache
            logits[implementation] = model(new, cache=cache, use_cache=True).logits
    model.set_attn_implementation("sdpa")
    torch.testing.assert_close(logits[ATTENTION_NAME], logits["sdpa"], atol=1e-5, rtol=1e-5)


class _SeeAttention(LogitsProcessor):
    """Records the target's attention implementation at every generation step."""

    def __init__(self, model) -> None:
        self.model, self.seen = model, set()

    def __call__(self, input_ids, scores):
        self.seen.add(self.model.config._attn_implementation)
        return scores


@pytest.mark.parametrize("tree", [False, True])
def test_generate_with_a_drafter_runs_grouped_attention_then_sets_sdpa_back(tree: bool) -> None:
    model = make_model("qwen2")
    model.set_attn_implementation("sdpa")
    drafter = OneiroDrafter.from_target(model)
    ids = torch.tensor([[5, 6, 7, 8, 5, 6, 7, 8, 5, 6]])
    spy = _SeeAttention(model)
    with torch.no_grad():
        out = model.generate(ids, assistant_model=drafter, do_sample=False, max_new_tokens=12, oneiro_tree=tree,
                             logits_processor=LogitsProcessorList([spy]))
        plain = model.generate(ids, do_sample=False, max_new_tokens=12)
    assert spy.seen == {ATTENTION_NAME}
    assert model.config._attn_implementation == "sdpa"
    assert torch.equal(out, plain)


def test_other_attention_implementations_are_left_alone_and_overlapping_calls_restore_once() -> None:
    eager = make_model("llama")
    eager.set_attn_implementation("eager")
    with grouped_attention(eager):
        assert eager.config._attn_implementation == "eager"
    assert eager.config._attn_implementation == "eager"
    model = make_model("llama")
    model.set_attn_implementation("sdpa")
    first, second = grouped_attention(model), grouped_attention(model)
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)  # the other call still runs: it keeps the grouped attention
    assert model.config._attn_implementation == ATTENTION_NAME
    second.__exit__(None, None, None)
    assert model.config._attn_implementation == "sdpa"
    with pytest.raises(RuntimeError), grouped_attention(model):  # set back when the call fails, too
        raise RuntimeError("generate failed")
    assert model.config._attn_implementation == "sdpa"


def test_any_decoding_can_opt_in_by_name() -> None:
    """Other decoding (here transformers' own prompt lookup, which never runs a drafter) takes the grouped attention
    by its registered name once oneiro_hf is imported, and gives plain greedy's tokens."""
    model = make_model("llama")
    model.set_attn_implementation("sdpa")
    ids = torch.tensor([[5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6]])
    with torch.no_grad():
        plain = model.generate(ids, do_sample=False, max_new_tokens=16)
        model.set_attn_implementation(ATTENTION_NAME)
        spy = _SeeAttention(model)
        looked_up = model.generate(ids, do_sample=False, max_new_tokens=16, prompt_lookup_num_tokens=4,
                                   logits_processor=LogitsProcessorList([spy]))
    model.set_attn_implementation("sdpa")
    assert spy.seen == {ATTENTION_NAME}
    assert torch.equal(looked_up, plain)
