"""Misuse must fail early with an error whose message names the problem (and, where possible, the fix)."""

from __future__ import annotations

import json
import shutil
import threading

import pytest
import torch
from safetensors.torch import load_file, save_file
from tiny import greedy, make_model, random_prompt
from transformers import GenerationConfig, GPT2Config, GPT2LMHeadModel

import oneiro_hf
from oneiro_hf import (
    DrafterTargetMismatch,
    OneiroDrafter,
    UnsupportedGenerateCall,
    UnsupportedTarget,
)
from oneiro_hf.storage.checkpoint import CorruptCheckpoint

# ------------------------------------------------------------------------------- drafter vs target


@pytest.fixture
def saved_llama(tmp_path):
    model = make_model("llama", name="org/base-a")
    OneiroDrafter.from_target(model).save_pretrained(tmp_path / "drafter")
    return model, tmp_path / "drafter"


@pytest.mark.parametrize(
    ("other", "field"),
    [
        ({"hidden": 96}, "hidden_size"),
        ({"vocab": 160}, "vocab_size"),
        ({"layers": 6}, "num_hidden_layers"),
    ],
)
def test_drafter_for_another_target_shape(saved_llama, other, field):
    model, path = saved_llama
    target = make_model("llama", name="org/base-a", **other)
    with pytest.raises(DrafterTargetMismatch, match=field) as info:
        OneiroDrafter.from_pretrained(path, target=target)
    assert "drafter expects" in str(info.value)
    # bind() on a live drafter checks the same way
    drafter = OneiroDrafter.from_target(model)
    with pytest.raises(DrafterTargetMismatch, match=field):
        drafter.bind(target)


def test_mismatch_lists_every_problem(saved_llama):
    _, path = saved_llama
    target = make_model("llama", name="org/base-a", hidden=96, vocab=160)
    with pytest.raises(DrafterTargetMismatch) as info:
        OneiroDrafter.from_pretrained(path, target=target)
    assert "hidden_size" in str(info.value) and "vocab_size" in str(info.value)


def test_drafter_for_another_architecture(saved_llama):
    _, path = saved_llama
    target = make_model("mistral", name="org/base-a")  # same shapes, different family
    with pytest.raises(DrafterTargetMismatch, match="model_type") as info:
        OneiroDrafter.from_pretrained(path, target=target)
    assert "MistralForCausalLM" in str(info.value)


def test_drafter_for_another_base_model(saved_llama):
    _, path = saved_llama
    finetune = make_model("llama", seed=1, name="org/base-a")  # same name and shapes, other weights
    with pytest.raises(DrafterTargetMismatch, match="base weights") as info:
        OneiroDrafter.from_pretrained(path, target=finetune)
    assert "org/base-a" in str(info.value)
    assert "allow_base_model_mismatch" in str(info.value)
    # opting in binds it
    drafter = OneiroDrafter.from_pretrained(path, target=finetune, allow_base_model_mismatch=True)
    assert drafter.target is finetune


def test_drafter_bound_to_another_instance():
    first = make_model("llama")
    second = make_model("llama")
    drafter = OneiroDrafter.from_target(first)
    OneiroDrafter.from_target(second)  # second is hooked too, through its own drafter
    ids = random_prompt(5, seed=0)
    with pytest.raises(ValueError, match="different target instance"):
        second.generate(ids, assistant_model=drafter, max_new_tokens=4)
    drafter.bind(second)  # re-binding moves it: now the first target is the wrong one
    with pytest.raises(ValueError, match="different target instance"):
        first.generate(ids, assistant_model=drafter, max_new_tokens=4)
    assert torch.equal(greedy(second, ids, 6, assistant_model=drafter), greedy(second, ids, 6))


def test_drafter_used_with_a_never_bound_target():
    bound = make_model("llama")
    drafter = OneiroDrafter.from_target(bound)
    stranger = make_model("llama")  # same class and config, never bound: no hook on this instance
    with pytest.raises((ValueError, RuntimeError), match="bind|bound|different target"):
        stranger.generate(random_prompt(5, seed=0), assistant_model=drafter, max_new_tokens=4)


# ---------------------------------------------------------------------------- generate arguments


@pytest.fixture
def hooked():
    model = make_model("llama")
    return model, OneiroDrafter.from_target(model)


def test_batch_size_above_one_runs_batched(hooked):
    """Several prompts, however they are passed, run the batched loop and give plain batched greedy's tokens."""
    model, drafter = hooked
    batch = torch.cat([random_prompt(5, 0), random_prompt(5, 1)], dim=0)
    plain = model.generate(batch, attention_mask=torch.ones_like(batch), max_new_tokens=3)
    for call in ({"args": (batch,)}, {"input_ids": batch}, {"inputs": batch}):
        args = call.pop("args", ())
        out = model.generate(*args, **call, attention_mask=torch.ones_like(batch), assistant_model=drafter,
                             max_new_tokens=3)
        assert torch.equal(out, plain)
        assert len(drafter.last_stats.rows) == 2


@pytest.mark.parametrize("where", ["kwarg", "generation_config", "model_default"])
def test_beam_search(hooked, where):
    model, drafter = hooked
    ids = random_prompt(5, 0)
    kwargs = {"assistant_model": drafter, "max_new_tokens": 3}
    if where == "kwarg":
        kwargs["num_beams"] = 2
    elif where == "generation_config":
        kwargs["generation_config"] = GenerationConfig(num_beams=2, max_new_tokens=3)
    else:
        model.generation_config.num_beams = 2
    with pytest.raises(ValueError, match="beam search") as info:
        model.generate(ids, **kwargs)
    assert "num_beams=2" in str(info.value)


def test_unknown_mode_and_settings(hooked):
    model, drafter = hooked
    ids = random_prompt(5, 0)
    with pytest.raises(ValueError, match="unknown draft mode 'beam'") as info:
        model.generate(ids, assistant_model=drafter, max_new_tokens=3, oneiro_mode="beam")
    assert "latent" in str(info.value) and "hybrid" in str(info.value)
    with pytest.raises(TypeError, match="unknown oneiro setting 'draft_len'"):
        model.generate(ids, assistant_model=drafter, max_new_tokens=3, oneiro_draft_len=4)
    with pytest.raises(ValueError, match="max_draft_tokens"):
        model.generate(ids, assistant_model=drafter, max_new_tokens=3, oneiro_max_draft_tokens=0)
    with pytest.raises(ValueError, match="lookup_min_ngram"):
        model.generate(
            ids,
            assistant_model=drafter,
            max_new_tokens=3,
            oneiro_lookup_min_ngram=5,
            oneiro_lookup_max_ngram=2,
        )
    with pytest.raises(ValueError, match="tree_lookup_min_ngram") as info:
        model.generate(ids, assistant_model=drafter, max_new_tokens=3, oneiro_tree=True, oneiro_tree_lookup_min_ngram=0)
    assert "oneiro_tree_lookup_min_ngram=1" in str(info.value)
    # and nothing was left half-configured: a correct call still works
    assert torch.equal(greedy(model, ids, 5, assistant_model=drafter), greedy(model, ids, 5))


def test_oneiro_settings_without_a_drafter(hooked):
    model, _ = hooked
    ids = random_prompt(5, 0)
    with pytest.raises(TypeError, match="without a OneiroDrafter"):
        model.generate(ids, max_new_tokens=3, oneiro_mode="latent")
    with pytest.raises(TypeError, match="without a OneiroDrafter"):
        model.generate(ids, max_new_tokens=3, prompt_lookup_num_tokens=3, oneiro_max_draft_tokens=2)


def test_lock_is_released_after_a_failed_call_and_guards_concurrent_use(hooked):
    model, drafter = hooked
    ids = random_prompt(5, 0)
    with pytest.raises(ValueError, match="foo_bar"):  # transformers rejects the unknown kwarg inside the lock
        model.generate(ids, assistant_model=drafter, max_new_tokens=3, foo_bar=1)
    assert torch.equal(greedy(model, ids, 4, assistant_model=drafter), greedy(model, ids, 4))
    # a call while another thread holds this drafter is refused, not interleaved
    holder_ready, release = threading.Event(), threading.Event()

    def hold():
        with drafter._generate_lock:
            holder_ready.set()
            release.wait(10)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert holder_ready.wait(10)
        with pytest.raises(RuntimeError, match="already generating"):
            model.generate(ids, assistant_model=drafter, max_new_tokens=3)
    finally:
        release.set()
        thread.join()


# ------------------------------------------------------------------------------- construction


@pytest.mark.parametrize("interval", [(0, 99), (3, 2), (-1, 2), (2, 2), (4, 5)])
def test_interval_outside_the_layers(interval, tiny_qwen2):
    model = tiny_qwen2
    with pytest.raises(ValueError, match="outside the target's 4 decoder layers") as info:
        OneiroDrafter.from_target(model, interval=interval)
    assert str(tuple(interval)) in str(info.value)


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        ([0, 5, 128], "vocab size 128"),
        ([], "non-empty"),
        ([3, 4, 3], "duplicates"),
    ],
)
def test_bad_draft_vocab_ids(ids, message):
    model = make_model("llama")
    with pytest.raises(ValueError, match=message):
        OneiroDrafter.from_target(model, draft_vocab_ids=ids)


def test_negative_draft_vocab_ids():
    model = make_model("llama")
    with pytest.raises(ValueError, match="draft_vocab_ids"):
        OneiroDrafter.from_target(model, draft_vocab_ids=[-1, 4, 5])


def test_unknown_drafter_setting():
    with pytest.raises(TypeError, match="max_drafts"):
        OneiroDrafter.from_target(make_model("llama"), max_drafts=4)


def test_unsupported_architecture():
    config = GPT2Config(vocab_size=128, n_embd=64, n_layer=2, n_head=4, n_positions=128)
    gpt2 = GPT2LMHeadModel(config).eval()
    with pytest.raises(UnsupportedTarget, match="gpt2") as info:
        OneiroDrafter.from_target(gpt2)
    assert "llama" in str(info.value)  # names what is supported


def test_from_pretrained_without_target(saved_llama):
    _, path = saved_llama
    with pytest.raises(ValueError, match="target=model"):
        OneiroDrafter.from_pretrained(path)


def test_config_without_target_config():
    with pytest.raises(ValueError, match="from_target"):
        OneiroDrafter(oneiro_hf.OneiroDrafterConfig())


def test_unbound_drafter_says_how_to_bind(saved_llama):
    model, _ = saved_llama
    drafter = OneiroDrafter(OneiroDrafter.from_target(model).config)  # built from a config only: not bound
    with pytest.raises(RuntimeError, match="not bound"):
        drafter.readout_logits(torch.zeros(1, 1, 64))


# ------------------------------------------------------------------------------- corrupt checkpoints


def _copy(path, tmp_path, name):
    dst = tmp_path / name
    shutil.copytree(path, dst)
    return dst


def test_missing_config(saved_llama, tmp_path):
    model, path = saved_llama
    broken = _copy(path, tmp_path, "no_config")
    (broken / "config.json").unlink()
    with pytest.raises(CorruptCheckpoint, match="no config.json"):
        OneiroDrafter.from_pretrained(broken, target=model)


def test_config_with_bad_json(saved_llama, tmp_path):
    model, path = saved_llama
    broken = _copy(path, tmp_path, "bad_json")
    (broken / "config.json").write_text('{"model_type": "oneiro_drafter", "interval": [2,')
    with pytest.raises(CorruptCheckpoint, match="not valid JSON"):
        OneiroDrafter.from_pretrained(broken, target=model)


def test_config_of_another_model_type(saved_llama, tmp_path):
    model, path = saved_llama
    broken = _copy(path, tmp_path, "llama_config")
    (broken / "config.json").write_text(json.dumps(model.config.to_dict()))
    with pytest.raises(CorruptCheckpoint, match="not a OneiroDrafter"):
        OneiroDrafter.from_pretrained(broken, target=model)


def test_missing_weights(saved_llama, tmp_path):
    model, path = saved_llama
    broken = _copy(path, tmp_path, "no_weights")
    for file in broken.glob("*.safetensors"):
        file.unlink()
    with pytest.raises(CorruptCheckpoint, match="no .safetensors"):
        OneiroDrafter.from_pretrained(broken, target=model)


@pytest.mark.parametrize("keep", [0.5, 0.99, 0.02])
def test_truncated_weights(saved_llama, tmp_path, keep):
    model, path = saved_llama
    broken = _copy(path, tmp_path, "truncated")
    weights = broken / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(CorruptCheckpoint, match="corrupt or truncated"):
        OneiroDrafter.from_pretrained(broken, target=model)


def test_checkpoint_from_a_newer_format(saved_llama, tmp_path):
    model, path = saved_llama
    broken = _copy(path, tmp_path, "newer")
    data = json.loads((broken / "config.json").read_text())
    data["oneiro_version"] = "99"
    (broken / "config.json").write_text(json.dumps(data))
    with pytest.raises(CorruptCheckpoint, match="newer oneiro-hf") as info:
        OneiroDrafter.from_pretrained(broken, target=model)
    assert "99" in str(info.value) and "upgrade" in str(info.value)


def test_checkpoint_with_garbage_version(saved_llama, tmp_path):
    model, path = saved_llama
    broken = _copy(path, tmp_path, "garbage_version")
    data = json.loads((broken / "config.json").read_text())
    data["oneiro_version"] = "abc"
    (broken / "config.json").write_text(json.dumps(data))
    with pytest.raises(CorruptCheckpoint, match="oneiro_version"):
        OneiroDrafter.from_pretrained(broken, target=model)


def test_config_json_that_is_not_an_object(saved_llama, tmp_path):
    model, path = saved_llama
    broken = _copy(path, tmp_path, "list_config")
    (broken / "config.json").write_text("[]")
    with pytest.raises(CorruptCheckpoint, match="config.json"):
        OneiroDrafter.from_pretrained(broken, target=model)


def test_weights_missing_a_tensor(saved_llama, tmp_path):
    model, path = saved_llama
    broken = _copy(path, tmp_path, "missing_tensor")
    weights = broken / "model.safetensors"
    state = load_file(str(weights))
    del state["layers.0.self_attn.q_proj.weight"]
    save_file(state, str(weights), metadata={"format": "pt"})
    with pytest.raises((CorruptCheckpoint, ValueError, RuntimeError), match="q_proj"):
        OneiroDrafter.from_pretrained(broken, target=model)


# ------------------------------------------------------------------- target-relative checkpoints


@pytest.fixture
def relative_llama(tmp_path):
    from oneiro_hf.storage.target_relative import RelativeStorage, save_target_relative

    model = make_model("llama", name="org/base-a")
    drafter = OneiroDrafter.from_target(model)
    with torch.no_grad():  # a trained-like difference from the target in every copied layer
        for name, p in drafter.named_parameters():
            if name.startswith("layers.") and p.dim() == 2:
                p.add_(0.01 * torch.randn(p.shape, generator=torch.Generator().manual_seed(0)))
    save_target_relative(drafter, tmp_path / "rel", RelativeStorage(layer_rank=2, token_rank=2))
    return model, tmp_path / "rel"


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ("rank", "difference factors of layers.0.self_attn.q_proj.weight"),  # a (out, 3) against b (2, in)
        ("rows", "difference factors of layers.0.self_attn.q_proj.weight"),  # a (out - 1, 2): another matrix
        ("whole", "layers.0.input_layernorm.weight has shape"),  # a tensor stored whole, of another shape
        ("states", "fuse.weight.states has shape"),
    ],
)
def test_target_relative_factors_of_the_wrong_shape_are_named(relative_llama, change, named):
    """Before: a raw torch error (a matmul, broadcast or load_state_dict size mismatch) naming no tensor and no fix."""
    model, path = relative_llama
    weights = path / "model.safetensors"
    tensors = load_file(str(weights))
    a = "layers.0.self_attn.q_proj.weight.delta_a"
    if change == "rank":
        tensors[a] = torch.cat([tensors[a], tensors[a][:, :1]], dim=1)
    elif change == "rows":
        tensors[a] = tensors[a][:-1].contiguous()
    elif change == "whole":
        tensors["layers.0.input_layernorm.weight"] = tensors["layers.0.input_layernorm.weight"][:-1].contiguous()
    else:
        tensors["fuse.weight.states"] = tensors["fuse.weight.states"][:, :-1].contiguous()
    save_file(tensors, str(weights), metadata={"format": "pt"})
    with pytest.raises(CorruptCheckpoint, match=named) as info:
        OneiroDrafter.from_pretrained(path, target=model)
    assert "Fix: download the drafter again, or save it again with save_target_relative" in str(info.value)


# ------------------------------------------------------------------------------ generate inputs


def test_a_row_of_padding_only_is_refused_with_the_fix(hooked):
    """Before: a batch got a plain ValueError; one prompt of padding only decoded from nothing, silently."""
    model, drafter = hooked
    batch = torch.tensor([[5, 6, 7, 8], [0, 0, 0, 0]])
    with pytest.raises(UnsupportedGenerateCall, match="row 1 of the input is padding only.*Fix: drop that row"):
        model.generate(batch, attention_mask=(batch != 0).long(), assistant_model=drafter, max_new_tokens=3)
    one = torch.tensor([[0, 0, 0]])
    for tree in (False, True):
        with pytest.raises(UnsupportedGenerateCall, match="row 0 of the input is padding only"):
            model.generate(one, attention_mask=torch.zeros_like(one), assistant_model=drafter, max_new_tokens=3,
                           oneiro_tree=tree)
    with pytest.raises(UnsupportedGenerateCall, match="padding only"):  # the mask generate makes from pad tokens
        model.generate(one, pad_token_id=0, eos_token_id=2, assistant_model=drafter, max_new_tokens=3)
    # one prompt with the pad id inside it: generate's mask has a hole, which its own loop takes as plain generate does
    holed = torch.tensor([[5, 0, 7, 8, 9]])
    kwargs = {"pad_token_id": 0, "eos_token_id": 2, "max_new_tokens": 4, "do_sample": False}
    assert torch.equal(model.generate(holed, assistant_model=drafter, **kwargs), model.generate(holed, **kwargs))


def test_right_padding_without_an_attention_mask_is_refused_with_the_fix(hooked):
    """Without a mask, a batch whose rows end with the pad token cannot be told from right padding. Before: where
    the pad id is the EOS id (so generate cannot make a mask from it), the pad tokens were decoded as text."""
    model, drafter = hooked
    right = torch.tensor([[5, 6, 7, 2], [5, 6, 7, 8]])
    fix = r'Fix: pad on the left \(tokenizer.padding_side = "left"\) and pass the tokenizer\'s attention_mask'
    for pad in ({"pad_token_id": 2, "eos_token_id": 2}, {"pad_token_id": 2, "eos_token_id": 1}):
        with pytest.raises(UnsupportedGenerateCall, match=rf"row 0 of the batch ends with the pad token \(id 2\).*{fix}"):
            model.generate(right, assistant_model=drafter, max_new_tokens=3, **pad)
    # the same batch with its mask is right padding, named as such; left padding with its mask decodes
    with pytest.raises(UnsupportedGenerateCall, match=f"row 0 of the input has right padding.*{fix}"):
        model.generate(right, attention_mask=(right != 2).long(), assistant_model=drafter, max_new_tokens=3)
    left = torch.tensor([[2, 5, 6, 7], [5, 6, 7, 8]])
    mask = (left != 2).long()
    plain = model.generate(left, attention_mask=mask, pad_token_id=2, max_new_tokens=3, do_sample=False)
    out = model.generate(left, attention_mask=mask, pad_token_id=2, max_new_tokens=3, do_sample=False,
                         assistant_model=drafter)
    assert torch.equal(out, plain)


@pytest.mark.parametrize("rows", [1, 2])
@pytest.mark.parametrize("tree", [False, True])
def test_custom_generate_with_a_drafter_is_refused_with_the_fix(hooked, rows, tree):
    """Before: with one prompt and chain settings the caller's loop ran and the drafter was silently never called;
    with a batch, a plain ValueError."""
    model, drafter = hooked
    ids = torch.cat([random_prompt(5, seed) for seed in range(rows)])
    ran = []

    def custom(model, input_ids, *args, **kwargs):
        ran.append(input_ids.shape)
        return input_ids

    with pytest.raises(UnsupportedGenerateCall, match="custom_generate replaces.*Fix: drop custom_generate") as info:
        model.generate(ids, attention_mask=torch.ones_like(ids), assistant_model=drafter, max_new_tokens=3,
                       custom_generate=custom, oneiro_tree=tree)
    assert ran == []
    assert ("never be called" if rows == 1 else "batch of 2 prompts") in str(info.value)
