"""save_pretrained / from_pretrained: only the drafter's own weights are written, the config records the
target it belongs to, and a reloaded drafter drafts exactly like the one that was saved."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open
from tiny import greedy, make_model, random_prompt
from transformers import AutoConfig, AutoModel

from oneiro_hf import OneiroDrafter, OneiroDrafterConfig


def _perturbed_drafter(model, seed=0, **kwargs):
    """A drafter whose weights differ from what from_target would build, so loading must really load."""
    drafter = OneiroDrafter.from_target(model, **kwargs)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in drafter.parameters():
            p.add_(0.02 * torch.randn(p.shape, generator=gen))
    return drafter


def _keys(directory) -> set[str]:
    keys: set[str] = set()
    for file in directory.glob("*.safetensors"):
        with safe_open(str(file), framework="pt") as handle:
            keys |= set(handle.keys())
    return keys


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_checkpoint_holds_only_drafter_weights(arch, tmp_path):
    model = make_model(arch, name="org/tiny-base")
    drafter = OneiroDrafter.from_target(model, interval=(1, 3))
    drafter.save_pretrained(tmp_path)
    files = {p.name for p in tmp_path.iterdir()}
    assert "config.json" in files
    assert any(f.endswith(".safetensors") for f in files)
    assert files <= {"config.json", "model.safetensors", "generation_config.json"}, files
    keys = _keys(tmp_path)
    assert keys, "no tensors saved"
    for key in keys:
        assert key.startswith(("layers.", "fuse.")) or key == "draft_vocab_ids", key
    # the target's embedding, final norm, rotary embedding and head are borrowed, never saved
    assert not [k for k in keys if k.startswith(("embed_tokens", "lm_head", "norm", "rotary", "model."))]
    assert not [k for k in keys if "embed_tokens" in k or "lm_head" in k]
    # exactly the two copied layers (0 and 1 in the drafter = target layers 1 and 2), the fusion, the vocab
    assert {k.split(".")[1] for k in keys if k.startswith("layers.")} == {"0", "1"}
    assert {"fuse.weight", "fuse.bias", "draft_vocab_ids"} <= keys
    expected = {
        f"layers.{i}.{name}" for i in range(2) for name, _ in model.model.layers[0].named_parameters()
    }
    assert expected <= keys


def test_config_records_the_target(tmp_path):
    model = make_model("qwen2", name="org/tiny-qwen2", layers=3)
    vocab_ids = list(range(10, 74))
    drafter = OneiroDrafter.from_target(model, interval=(1, 3), draft_vocab_ids=vocab_ids)
    drafter.save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text())
    assert data["model_type"] == "oneiro_drafter"
    assert data["base_model_name_or_path"] == "org/tiny-qwen2"
    assert data["target_architecture"] == "Qwen2ForCausalLM"
    assert data["hidden_size"] == 64
    assert data["vocab_size"] == 128
    assert data["num_target_layers"] == 3
    assert data["interval"] == [1, 3]
    assert data["draft_vocab_size"] == 64
    assert data["target_config"]["model_type"] == "qwen2"
    assert data["oneiro_version"] == "1"


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_reload_gives_identical_parameters_and_generation(arch, tmp_path):
    model = make_model(arch, strength="prefix", name="org/tiny")
    drafter = _perturbed_drafter(model)
    drafter.save_pretrained(tmp_path)
    loaded = OneiroDrafter.from_pretrained(tmp_path, target=model)
    assert loaded.target is model
    saved_state, loaded_state = drafter.state_dict(), loaded.state_dict()
    assert saved_state.keys() == loaded_state.keys()
    for key, value in saved_state.items():
        assert torch.equal(value, loaded_state[key]), key
    # a fresh from_target drafter differs, so equal parameters above mean the checkpoint was read
    fresh = OneiroDrafter.from_target(model)
    assert not torch.equal(fresh.fuse.weight, loaded.fuse.weight)
    for seed in range(2):
        ids = random_prompt(10, seed=seed)
        ref = greedy(model, ids, 16)
        runs = []
        for d in (drafter, loaded):
            out = greedy(
                model,
                ids,
                16,
                assistant_model=d,
                oneiro_mode="latent",
                oneiro_cost_aware=False,
                oneiro_min_draft_confidence=0.0,
            )
            assert torch.equal(out, ref)
            runs.append((d.last_stats.drafted_tokens, list(d.last_stats.accept_lengths)))
        assert runs[0] == runs[1], "the reloaded drafter must draft exactly like the saved one"


def test_reduced_draft_vocab_round_trip(tmp_path):
    model = make_model("llama", strength="prefix")
    gen = torch.Generator().manual_seed(0)
    vocab_ids = torch.randperm(128, generator=gen)[:40]  # unsorted on purpose
    drafter = OneiroDrafter.from_target(model, draft_vocab_ids=vocab_ids)
    drafter.save_pretrained(tmp_path)
    loaded = OneiroDrafter.from_pretrained(tmp_path, target=model)
    assert loaded.config.draft_vocab_size == 40
    assert torch.equal(loaded.draft_vocab_ids.cpu(), vocab_ids)
    state = torch.randn(1, 3, 64)
    torch.testing.assert_close(loaded.readout_logits(state), drafter.readout_logits(state))
    with torch.no_grad():
        full = model.lm_head(state)
    torch.testing.assert_close(loaded.readout_logits(state), full[..., vocab_ids])
    ids = random_prompt(8, seed=3)
    out = greedy(model, ids, 12, assistant_model=loaded, oneiro_mode="latent", oneiro_cost_aware=False)
    assert torch.equal(out, greedy(model, ids, 12))


def test_auto_classes(tmp_path, tiny_gemma3):
    model = tiny_gemma3
    OneiroDrafter.from_target(model).save_pretrained(tmp_path)
    config = AutoConfig.from_pretrained(tmp_path)
    assert isinstance(config, OneiroDrafterConfig)
    assert config.interval == [2, 4]
    # AutoModel needs the target too, and says so ...
    with pytest.raises(ValueError, match="target"):
        AutoModel.from_pretrained(tmp_path)
    # ... and with it, returns a bound drafter
    loaded = AutoModel.from_pretrained(tmp_path, target=model)
    assert isinstance(loaded, OneiroDrafter)
    assert loaded.target is model


def test_save_after_reload_is_stable(tmp_path):
    model = make_model("mistral")
    drafter = _perturbed_drafter(model, seed=4)
    first, second = tmp_path / "a", tmp_path / "b"
    drafter.save_pretrained(first)
    OneiroDrafter.from_pretrained(first, target=model).save_pretrained(second)
    assert _keys(first) == _keys(second)
    with (
        safe_open(str(first / "model.safetensors"), "pt") as a,
        safe_open(str(second / "model.safetensors"), "pt") as b,
    ):
        for key in sorted(_keys(first)):
            assert torch.equal(a.get_tensor(key), b.get_tensor(key)), key
    cfg_a = json.loads((first / "config.json").read_text())
    cfg_b = json.loads((second / "config.json").read_text())
    for field in (
        "interval",
        "base_model_name_or_path",
        "hidden_size",
        "vocab_size",
        "num_target_layers",
        "draft_vocab_size",
        "target_config",
    ):
        assert cfg_a[field] == cfg_b[field], field


def test_reload_binds_to_a_local_copy_of_the_same_base(tmp_path):
    model = make_model("llama", name="org/base-a")
    OneiroDrafter.from_target(model).save_pretrained(tmp_path)
    local = make_model("llama", name="/data/models/org/base-a/")
    loaded = OneiroDrafter.from_pretrained(tmp_path, target=local)
    assert loaded.target is local


def test_reload_follows_the_targets_dtype(tmp_path):
    model = make_model("llama")
    OneiroDrafter.from_target(model).save_pretrained(tmp_path)
    half = make_model("llama", dtype=torch.bfloat16)
    loaded = OneiroDrafter.from_pretrained(tmp_path, target=half)
    assert {p.dtype for p in loaded.parameters()} == {torch.bfloat16}
    assert loaded.draft_vocab_ids.dtype == torch.long
