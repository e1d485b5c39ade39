"""Target-relative checkpoints (oneiro_hf.storage.target_relative): only the differences from the target are stored,
the drafter is rebuilt from the bound target, and a target it was not made from is refused before rebuilding."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from safetensors import safe_open
from tiny import make_model, random_prompt

from oneiro_hf import DrafterTargetMismatch, OneiroDrafter
from oneiro_hf.configuration_oneiro import FORMAT_VERSION
from oneiro_hf.storage.checkpoint import CorruptCheckpoint
from oneiro_hf.storage.target_relative import (
    RebuiltOnOtherWeights,
    RelativeDrafterOnOtherBase,
    RelativeStorage,
    save_target_relative,
    stored_size,
)

HIDDEN = 64


def _trained_like(arch: str = "qwen2", delta_rank: int = 2, seed: int = 0):
    """A target and a drafter whose copied matrices differ from the target's by exactly rank `delta_rank`, whose
    fusion's token block differs from the identity by rank `delta_rank` and whose state block and norms are
    dense, as after training."""
    model = make_model(arch, name="org/base")
    drafter = OneiroDrafter.from_target(model, draft_vocab_ids=list(range(3, 99)))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in drafter.named_parameters():
            if p.dim() == 2 and name.startswith("layers."):
                a = torch.randn(p.shape[0], delta_rank, generator=gen)
                b = torch.randn(delta_rank, p.shape[1], generator=gen)
                p.add_(0.02 * a @ b)
            elif name == "fuse.weight":
                p[:, :HIDDEN].copy_(0.1 * torch.randn(HIDDEN, HIDDEN, generator=gen))
                a = torch.randn(HIDDEN, delta_rank, generator=gen)
                p[:, HIDDEN:].add_(0.05 * a @ torch.randn(delta_rank, HIDDEN, generator=gen))
            else:
                p.add_(0.01 * torch.randn(p.shape, generator=gen))
    return model, drafter


def _state(drafter) -> dict[str, torch.Tensor]:
    return {k: v.detach().float().clone() for k, v in drafter.state_dict().items()}


def test_exact_rank_round_trip_is_lossless_and_small(tmp_path):
    model, drafter = _trained_like(delta_rank=2)
    before = _state(drafter)
    errors = save_target_relative(drafter, tmp_path / "rel", RelativeStorage(layer_rank=2, token_rank=2),
                                  dtype=torch.float32)
    drafter.save_pretrained(tmp_path / "whole")
    assert max(errors.values()) < 1e-4  # every stored difference had rank 2
    config = json.loads((tmp_path / "rel" / "config.json").read_text())
    assert config["weights_storage"] == {"kind": "target_relative", "layer_rank": 2, "token_rank": 2}
    assert config["format_version"] == FORMAT_VERSION == 2 and config["oneiro_version"] == "2"
    with safe_open(str(tmp_path / "rel" / "model.safetensors"), "pt") as fh:
        names = set(fh.keys())
        tensor_bytes = sum(fh.get_tensor(k).numel() * fh.get_tensor(k).element_size() for k in names)
    assert "layers.0.mlp.down_proj.weight.delta_a" in names and "layers.0.mlp.down_proj.weight" not in names
    assert {"fuse.weight.states", "fuse.weight.token.delta_a", "draft_vocab_ids"} <= names
    whole = (tmp_path / "whole" / "model.safetensors").stat().st_size
    written = (tmp_path / "rel" / "model.safetensors").stat().st_size
    assert written < 0.6 * whole
    storage = RelativeStorage(layer_rank=2, token_rank=2)
    assert stored_size(drafter, storage, torch.float32) == tensor_bytes

    loaded = OneiroDrafter.from_pretrained(tmp_path / "rel", target=model)
    after = _state(loaded)
    assert after.keys() == before.keys()
    for key, value in before.items():
        torch.testing.assert_close(after[key], value, atol=1e-5, rtol=1e-5, msg=key)
    assert loaded.target is model
    # in memory the weights are whole again: save_pretrained writes a whole (format 1) checkpoint of them
    loaded.save_pretrained(tmp_path / "again")
    assert json.loads((tmp_path / "again" / "config.json").read_text())["format_version"] == 1
    again = OneiroDrafter.from_pretrained(tmp_path / "again", target=model)
    torch.testing.assert_close(_state(again), after)


def test_truncation_keeps_the_best_low_rank_difference(tmp_path):
    model, drafter = _trained_like(delta_rank=6)
    before = _state(drafter)
    errors = save_target_relative(drafter, tmp_path / "rel", RelativeStorage(layer_rank=3), dtype=torch.float32)
    loaded = OneiroDrafter.from_pretrained(tmp_path / "rel", target=model)
    layer = model.model.layers[drafter.config.interval[0]].mlp.down_proj.weight.detach()
    key = "layers.0.mlp.down_proj.weight"
    delta = before[key] - layer
    kept = _state(loaded)[key] - layer
    s = torch.linalg.svdvals(delta)
    # Eckart-Young: the kept difference is the best rank-3 one, and the reported error is its relative residual
    assert torch.linalg.matrix_rank(kept, atol=1e-4) == 3
    expected = float(s[3:].square().sum().sqrt() / s.square().sum().sqrt())
    assert errors[key] == pytest.approx(expected, rel=1e-3)
    assert float((delta - kept).norm() / delta.norm()) == pytest.approx(expected, rel=1e-3)
    # token_rank None: the fusion is stored whole, exactly
    torch.testing.assert_close(_state(loaded)["fuse.weight"], before["fuse.weight"])


def test_loaded_drafter_generates_the_targets_greedy_output(tmp_path):
    model, drafter = _trained_like(arch="llama", delta_rank=2)
    save_target_relative(drafter, tmp_path / "rel", RelativeStorage(layer_rank=1, token_rank=1))
    prompt = random_prompt(12, seed=3)
    drafter.unbind()
    greedy = model.generate(prompt, max_new_tokens=24, do_sample=False)
    loaded = OneiroDrafter.from_pretrained(tmp_path / "rel", target=model)
    out = model.generate(prompt, max_new_tokens=24, do_sample=False, assistant_model=loaded, oneiro_cost_aware=False)
    assert torch.equal(out, greedy)
    assert loaded.last_stats.drafted_by_source["latent"] > 0  # its rebuilt layers drafted


def test_another_target_is_refused_before_rebuilding(tmp_path):
    _, drafter = _trained_like()
    save_target_relative(drafter, tmp_path / "rel", RelativeStorage(layer_rank=2, token_rank=2))
    other = make_model("qwen2", seed=1, name="org/base")  # same architecture and name, other weights
    with pytest.raises(DrafterTargetMismatch):
        OneiroDrafter.from_pretrained(tmp_path / "rel", target=other)


def test_another_base_is_refused_even_when_mismatches_are_allowed_and_names_the_rebuild_argument(tmp_path):
    """Before: allow_base_model_mismatch=True silently rebuilt the drafter on the other weights."""
    _, drafter = _trained_like()
    save_target_relative(drafter, tmp_path / "rel", RelativeStorage(layer_rank=2, token_rank=2))
    finetune = make_model("qwen2", seed=1, name="org/base")  # same name and shapes, other weights
    for allow in (False, True):
        with pytest.raises(RelativeDrafterOnOtherBase) as info:
            OneiroDrafter.from_pretrained(tmp_path / "rel", target=finetune, allow_base_model_mismatch=allow)
        message = str(info.value)
        assert "base weights" in message and "another drafter" in message
        assert "Fix: load it with the model it was made from; or pass rebuild_on_mismatched_base=True" in message
        assert [d.field for d in info.value.differences] == ["base_weights"]
    assert isinstance(info.value, DrafterTargetMismatch)


def test_rebuilding_on_another_base_on_purpose_warns_that_the_drafter_changed(tmp_path):
    model, drafter = _trained_like()
    save_target_relative(drafter, tmp_path / "rel", RelativeStorage(layer_rank=2, token_rank=2))
    finetune = make_model("qwen2", seed=1, name="org/finetune")
    with pytest.warns(RebuiltOnOtherWeights, match="was rebuilt on other weights.*org/base.*org/finetune"):
        rebuilt = OneiroDrafter.from_pretrained(tmp_path / "rel", target=finetune, rebuild_on_mismatched_base=True)
    assert rebuilt.target is finetune
    # the differences now sit on the fine-tune's matrix
    name, target_name = "layers.0.mlp.up_proj.weight", f"model.layers.{drafter.config.interval[0]}.mlp.up_proj.weight"
    on_base = drafter.get_parameter(name) - model.get_parameter(target_name)
    on_finetune = rebuilt.get_parameter(name) - finetune.get_parameter(target_name)
    torch.testing.assert_close(on_finetune, on_base, atol=1e-5, rtol=0)
    ids = random_prompt(10, seed=4)  # still lossless on the target it was rebuilt on
    out = finetune.generate(ids, max_new_tokens=12, do_sample=False, assistant_model=rebuilt)
    assert torch.equal(out, finetune.generate(ids, max_new_tokens=12, do_sample=False))
    with warnings.catch_warnings():  # on its own base: no warning, and the argument changes nothing
        warnings.simplefilter("error")
        OneiroDrafter.from_pretrained(tmp_path / "rel", target=model, rebuild_on_mismatched_base=True)
    drafter.save_pretrained(tmp_path / "whole")
    with pytest.raises(TypeError, match="stores its weights whole.*Fix: drop it"):
        OneiroDrafter.from_pretrained(tmp_path / "whole", target=model, rebuild_on_mismatched_base=True)


def test_damaged_file_and_unsupported_arguments_are_named(tmp_path):
    from safetensors.torch import load_file, save_file

    model, drafter = _trained_like()
    save_target_relative(drafter, tmp_path / "rel", RelativeStorage(layer_rank=2, token_rank=2))
    with pytest.raises(TypeError, match="stored relative to its target"):
        OneiroDrafter.from_pretrained(tmp_path / "rel", target=model, dtype=torch.float16)
    config_path = tmp_path / "rel" / "config.json"
    config = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**config, "weights_storage": {"kind": "int4_relative", "layer_rank": 2}}))
    with pytest.raises(CorruptCheckpoint, match="int4_relative.*not one this oneiro-hf reads"):
        OneiroDrafter.from_pretrained(tmp_path / "rel", target=model)
    config_path.write_text(json.dumps(config))
    path = tmp_path / "rel" / "model.safetensors"
    tensors = load_file(str(path))
    del tensors["layers.1.self_attn.q_proj.weight.delta_b"]
    save_file(tensors, str(path))
    with pytest.raises(CorruptCheckpoint, match=r"lacks 1 tensor\(s\).*q_proj"):
        OneiroDrafter.from_pretrained(tmp_path / "rel", target=model)


@pytest.mark.parametrize("bad", [{"layer_rank": 0}, {"layer_rank": 2, "token_rank": 0}, {"layer_rank": True}])
def test_storage_ranks_are_checked(bad):
    with pytest.raises(ValueError, match="integer >= 1"):
        RelativeStorage(**bad)


def test_publish_folder_stores_differences_and_says_so(tmp_path):
    from oneiro_hf.storage.hub import prepare_upload

    model, drafter = _trained_like(delta_rank=2)
    storage = RelativeStorage(layer_rank=2, token_rank=2)
    files = prepare_upload(drafter, tmp_path / "up", repo_id="org/drafter", dtype="bfloat16", license="mit",
                           storage=storage)
    assert {f.name for f in files} == {"README.md", "config.json", "model.safetensors"}
    card = (tmp_path / "up" / "README.md").read_text()
    assert "relative to the target: each copied matrix as a rank-2 difference" in card
    assert "checkpoint format 2" in card
    config = json.loads((tmp_path / "up" / "config.json").read_text())
    assert config["dtype"] == "bfloat16" and config["weights_storage"]["layer_rank"] == 2
    loaded = OneiroDrafter.from_pretrained(tmp_path / "up", target=model)
    for key, value in _state(drafter).items():  # bfloat16 rounding is all that differs
        torch.testing.assert_close(_state(loaded)[key], value, atol=2e-2, rtol=1e-2, msg=key)
