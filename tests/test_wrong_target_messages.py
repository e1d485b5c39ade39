"""A drafter given to the wrong model, or a model no drafter fits, gets a message that leads somewhere."""

from __future__ import annotations

import pytest
import torch
from tiny import greedy, make_model, random_prompt
from transformers import GPT2Config, GPT2LMHeadModel, PretrainedConfig
from transformers.generation.utils import GenerationMixin

from oneiro_hf import OneiroDrafter, OneiroDrafterConfig, UnsupportedTarget
from oneiro_hf.configuration_oneiro import DrafterNotBound
from oneiro_hf.generation import guard as assistant_guard


def test_drafter_of_another_vocabulary_in_an_unhooked_generate_names_the_drafter_not_tokenizers():
    drafter = OneiroDrafter.from_target(make_model("llama", name="org/base-a"))
    other = make_model("llama", vocab=160, seed=1)  # never had a drafter bound: transformers' own generate
    with pytest.raises(DrafterNotBound) as info:
        greedy(other, random_prompt(6, seed=1), 4, assistant_model=drafter)
    message = str(info.value)
    assert "not bound to" in message and "'org/base-a'" in message
    assert "drafter.bind(model)" in message and "copy_for(model)" in message
    assert "tokenizer" not in message


def test_the_same_drafter_still_serves_its_own_target_and_saves():
    model = make_model("llama", strength="prefix")
    drafter = OneiroDrafter.from_target(model)
    ids = random_prompt(6, seed=2)
    assert torch.equal(greedy(model, ids, 8, assistant_model=drafter), greedy(model, ids, 8))
    assert drafter.config.get_text_config() is drafter.config  # outside transformers' assistant check: itself


def test_a_drafter_of_the_same_vocabulary_in_an_unhooked_generate_is_refused_before_transformers_checks():
    drafter = OneiroDrafter.from_target(make_model("llama", name="org/base-a"))
    stranger = make_model("llama")  # same sizes, never bound
    with pytest.raises(DrafterNotBound, match="'org/base-a'"):
        greedy(stranger, random_prompt(6, seed=1), 4, assistant_model=drafter)


def test_the_guard_reads_the_assistant_argument_and_leaves_the_config_plain():
    """The refusal comes from the guard around transformers' assistant check, which reads its arguments: the
    drafter's config keeps transformers' own get_text_config, and other assistants pass through unchanged."""
    assert "get_text_config" not in vars(OneiroDrafterConfig)
    assert OneiroDrafterConfig.get_text_config is PretrainedConfig.get_text_config
    model = make_model("llama", strength="prefix")
    drafter = OneiroDrafter.from_target(model)  # bound: the guard is in place
    assert assistant_guard.installed()
    assistant = make_model("llama", seed=3)  # a plain assistant model: transformers' own assisted decoding
    ids = random_prompt(6, seed=2)
    assert torch.equal(greedy(model, ids, 6, assistant_model=assistant), greedy(model, ids, 6))
    drafter.unbind()


def test_the_guard_wraps_transformers_only_while_a_drafter_is_bound():
    """Bound drafters are counted: transformers' own method is back after the last unbind, and only then."""
    while assistant_guard._holders:  # drafters other tests left bound
        next(iter(assistant_guard._holders)).unbind()
    original = GenerationMixin._validate_generation_mode
    assert not assistant_guard.installed()
    first = OneiroDrafter.from_target(make_model("llama", name="org/base-a"))
    guarded = GenerationMixin._validate_generation_mode
    assert guarded is not original and guarded.__wrapped__ is original
    second = OneiroDrafter.from_target(make_model("llama", seed=2))
    second.bind(second.target)  # re-binding the same drafter counts it once
    assert GenerationMixin._validate_generation_mode is guarded  # one wrapper however many drafters
    first.unbind()
    first.unbind()  # unbinding an unbound drafter changes nothing
    assert GenerationMixin._validate_generation_mode is guarded  # `second` is still bound
    with pytest.raises(DrafterNotBound, match="'org/base-a'"):  # and an unbound drafter is still refused
        greedy(make_model("llama", seed=4), random_prompt(6, seed=1), 4, assistant_model=first)
    second.unbind()
    assert GenerationMixin._validate_generation_mode is original
    first.bind(make_model("llama", seed=5), allow_base_model_mismatch=True)
    assert assistant_guard.installed()
    first.unbind()
    assert GenerationMixin._validate_generation_mode is original


def _gpt2():
    return GPT2LMHeadModel(GPT2Config(vocab_size=128, n_embd=64, n_layer=4, n_head=4, n_positions=128)).eval()


def test_binding_a_drafter_to_an_unsupported_architecture_advises_what_works(tmp_path):
    OneiroDrafter.from_target(make_model("llama", name="org/base-a")).save_pretrained(tmp_path / "d")
    gpt2 = _gpt2()
    with pytest.raises(UnsupportedTarget) as info:
        OneiroDrafter.from_pretrained(tmp_path / "d", target=gpt2)
    message = str(info.value)
    assert "'gpt2'" in message and "llama" in message
    assert "from_target" not in message  # it would fail the same way
    assert "prompt_lookup_num_tokens=10" in message
    # the advice works on this model
    ids = random_prompt(12, seed=3)
    with torch.no_grad():
        out = gpt2.generate(ids, max_new_tokens=6, do_sample=False, prompt_lookup_num_tokens=10, pad_token_id=0)
        ref = gpt2.generate(ids, max_new_tokens=6, do_sample=False, pad_token_id=0)
    assert torch.equal(out, ref)
