"""Training in the target-relative parametrisation (oneiro_hf.training.low_rank, --relative_layer_rank): the
drafter starts as it was, trains only what a target-relative checkpoint stores, resumes exactly, refuses a
checkpoint of other ranks, and oneiro-train saves it relative to the target without truncation loss."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open
from test_multilayer_training import _argv, saved_target_and_data
from test_training import _StopAt, build, make_args, make_records, tiny_target
from tiny import make_model
from transformers import LlamaForCausalLM

from oneiro_hf import OneiroDrafter
from oneiro_hf.storage.target_relative import RelativeStorage
from oneiro_hf.training.cli import main as cli_main
from oneiro_hf.training.low_rank import is_parametrised, merge, parametrise, rebuilt_originals
from oneiro_hf.training.trainer import CheckpointMismatch, OneiroTrainer

HIDDEN = 32


@pytest.fixture(scope="module")
def target():
    torch.set_num_threads(1)
    return tiny_target()


@pytest.fixture(scope="module")
def records(target):
    return make_records(target, 48)


def _singular_values(matrix: torch.Tensor) -> torch.Tensor:
    return torch.linalg.svdvals(matrix.detach().double())


def _target_matrix(target, drafter, key: str) -> torch.Tensor:
    layer = int(key.split(".")[1]) + drafter.config.interval[0]
    return dict(target.model.layers[layer].named_parameters())[key.split(".", 2)[2]]


def test_parametrised_drafter_starts_as_it_was_and_trains_only_factors() -> None:
    model = make_model("qwen2", hidden=HIDDEN, seed=0)
    drafter = OneiroDrafter.from_target(model).bind(model)
    states = torch.randn(1, 6, HIDDEN, generator=torch.Generator().manual_seed(1))
    ids = torch.randint(3, 100, (1, 6), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        before = drafter(states, ids)[1]
    names = parametrise(drafter, RelativeStorage(layer_rank=2, token_rank=4))
    assert "fuse.weight" in names and "layers.0.mlp.down_proj.weight" in names
    with torch.no_grad():
        torch.testing.assert_close(drafter(states, ids)[1], before, rtol=1e-5, atol=1e-5)
    trainable = {n for n, p in drafter.named_parameters() if p.requires_grad}
    assert "layers.0.mlp.down_proj.parametrizations.weight.0.a" in trainable
    assert not any(n.endswith(".original") for n in trainable)  # the target's matrices stay frozen
    assert "layers.1.input_layernorm.weight" in trainable and "fuse.bias" in trainable  # the rest trains whole
    with pytest.raises(ValueError, match="parametrised already"):
        parametrise(drafter, RelativeStorage(layer_rank=2))


def test_training_moves_only_low_rank_differences(target, records, tmp_path) -> None:
    """After training and merging, each copied matrix differs from the target's by rank <= r and the fusion's
    token block from the identity by rank <= t; the fusion's state block trained whole."""
    args = make_args(tmp_path, max_steps=6, stage="1+2", relative_layer_rank=2, relative_token_rank=3)
    drafter, train_ds, _, mean, std = build(target, records, args, ridge=False)
    parametrise(drafter, args.relative_storage())
    OneiroTrainer(drafter, target, args, train_ds, state_mean=mean, state_std=std).train()
    merge(drafter)
    assert not is_parametrised(drafter)
    for key, value in drafter.state_dict().items():
        if key.startswith("layers.") and value.dim() == 2:
            s = _singular_values(value - _target_matrix(target, drafter, key))
            assert s[0] > 0 and s[2] < 1e-5 * s[0], key  # moved, within rank 2
    fuse = drafter.fuse.weight.detach()
    s = _singular_values(fuse[:, HIDDEN:] - torch.eye(HIDDEN))
    assert s[0] > 0 and s[3] < 1e-5 * s[0]
    assert int(torch.linalg.matrix_rank(fuse[:, :HIDDEN].double())) > 3


def test_parametrised_run_resumes_exactly_and_refuses_other_ranks(target, records, tmp_path) -> None:
    def fresh(out, rank=2):
        args = make_args(tmp_path, output_dir=str(out), stage="1+2", max_steps=8, save_strategy="steps",
                         save_steps=4, logging_steps=4, relative_layer_rank=rank, overwrite_output_dir=True)
        drafter, train_ds, _, mean, std = build(target, records, args, cache_dir=tmp_path / "cache")
        parametrise(drafter, args.relative_storage())
        return OneiroTrainer(drafter, target, args, train_ds, None, state_mean=mean, state_std=std)

    straight = fresh(tmp_path / "a")
    straight.train()
    interrupted = fresh(tmp_path / "b")
    interrupted.add_callback(_StopAt(6))  # "killed" after step 6; the last checkpoint is step 4
    interrupted.train()
    from safetensors import safe_open

    with safe_open(str(tmp_path / "b" / "checkpoint-4" / "model.safetensors"), framework="pt") as fh:
        stored = set(fh.keys())
    assert any(k.endswith(".a") for k in stored)  # the factors are stored; the target's matrices are not
    assert not [k for k in stored if k.endswith(".original")]
    resumed = fresh(tmp_path / "b")
    resumed.train(resume_from_checkpoint=str(tmp_path / "b" / "checkpoint-4"))
    assert resumed.state.global_step == 8
    for key, value in straight.drafter.state_dict().items():
        torch.testing.assert_close(resumed.drafter.state_dict()[key], value, atol=1e-6, rtol=1e-5)
    with pytest.raises(CheckpointMismatch, match="relative_layer_rank"):
        fresh(tmp_path / "c", rank=3).train(resume_from_checkpoint=str(tmp_path / "b" / "checkpoint-4"))
    other = fresh(tmp_path / "d")  # a drafter whose copied matrix is not the target's cannot rebuild the unstored
    with torch.no_grad():
        other.drafter.layers[0].mlp.up_proj.parametrizations.weight.original.add_(0.01)
    with pytest.raises(CheckpointMismatch, match="missing"):
        other.train(resume_from_checkpoint=str(tmp_path / "b" / "checkpoint-4"))


def test_cli_saves_the_trained_differences_relative_to_the_target(target, records, tmp_path, monkeypatch) -> None:
    published = []
    monkeypatch.setattr("oneiro_hf.storage.hub.publish_drafter", lambda drafter, repo_id, **kw: published.append(kw) or "ok")
    root = saved_target_and_data(target, records, tmp_path)
    out = tmp_path / "drafter"
    argv = _argv(root, out, "--relative_layer_rank", "2", "--relative_token_rank", "3", "--save_dtype", "float32",
                 "--push_to_hub", "true", "--hub_model_id", "me/tiny-drafter", "--license", "apache-2.0",
                 "--target_hub_id", "org/tiny-target")
    assert cli_main(argv) == 0
    assert published[0]["storage"] == RelativeStorage(layer_rank=2, token_rank=3)  # published as it was saved
    config = json.loads((out / "config.json").read_text())
    assert config["weights_storage"] == {"kind": "target_relative", "layer_rank": 2, "token_rank": 3}
    with safe_open(str(out / "model.safetensors"), "pt") as fh:
        names = set(fh.keys())
    assert "layers.0.self_attn.q_proj.weight.delta_a" in names and "fuse.weight.states" in names
    summary = json.loads((out / "training_summary.json").read_text())
    assert summary["weights_storage"]["layer_rank"] == 2
    assert "rank-2 difference" in (out / "README.md").read_text()
    # the saved drafter is the trained one (nothing truncated away), and it decodes losslessly
    model = LlamaForCausalLM.from_pretrained(root / "model").eval()
    drafter = OneiroDrafter.from_pretrained(str(out), target=model)
    prompt = torch.tensor([[5, 9, 17, 33, 40]])
    kwargs = {"max_new_tokens": 12, "do_sample": False, "eos_token_id": None, "pad_token_id": 0}
    spec = model.generate(prompt, assistant_model=drafter, oneiro_mode="latent", oneiro_cost_aware=False, **kwargs)
    assert torch.equal(spec, model.generate(prompt, **kwargs))
    for key, value in drafter.state_dict().items():
        if key.startswith("layers.") and value.dim() == 2:
            s = _singular_values(value - _target_matrix(model, drafter, key))
            assert s[0] > 0 and s[2] < 1e-4 * s[0], key


def test_bad_relative_ranks_are_refused_by_name(tmp_path) -> None:
    with pytest.raises(ValueError, match="--relative_token_rank needs --relative_layer_rank"):
        make_args(tmp_path, relative_token_rank=8)
    with pytest.raises(ValueError, match="layer_rank must be an integer >= 1"):
        make_args(tmp_path, relative_layer_rank=0)
    with pytest.raises(ValueError, match="stage 3 refines a drafter as it is"):
        make_args(tmp_path, relative_layer_rank=4, stage="3")


def test_rebased_parametrisation_keeps_a_trained_drafter_as_target_plus_rank_r() -> None:
    """--init_drafter: a trained drafter (target + rank-r differences) parametrised with rebase=True starts as it
    was, with the target's matrices as the frozen originals (not stored) and its differences as the factors; a
    difference of higher rank is cut to rank r with a warning."""
    model = make_model("qwen2", hidden=HIDDEN, seed=0)
    drafter = OneiroDrafter.from_target(model).bind(model)
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():  # a trained drafter: each copied matrix = the target's + a rank-2 difference
        for key, value in drafter.state_dict().items():
            if key.startswith("layers.") and value.dim() == 2:
                value += torch.randn(value.shape[0], 2, generator=gen) @ torch.randn(2, value.shape[1], generator=gen)
    states = torch.randn(1, 6, HIDDEN, generator=gen)
    ids = torch.randint(3, 100, (1, 6), generator=gen)
    with torch.no_grad():
        before = drafter(states, ids)[1]
    names = parametrise(drafter, RelativeStorage(layer_rank=2), rebase=True)
    with torch.no_grad():
        torch.testing.assert_close(drafter(states, ids)[1], before, rtol=1e-4, atol=1e-4)
    key = "layers.0.mlp.down_proj.weight"
    assert key in names
    module = drafter.layers[0].mlp.down_proj
    assert torch.equal(module.parametrizations.weight.original, _target_matrix(model, drafter, key))
    assert f"{key[:-len('.weight')]}.parametrizations.weight.original" in rebuilt_originals(drafter, model)
    assert not torch.equal(module.parametrizations.weight.original, module.weight)  # the factors carry the rest


def test_a_difference_above_the_rank_is_cut_with_a_warning(caplog) -> None:
    model = make_model("qwen2", hidden=HIDDEN, seed=0)
    drafter = OneiroDrafter.from_target(model).bind(model)
    with torch.no_grad():
        drafter.layers[0].mlp.down_proj.weight += 0.1 * torch.randn_like(drafter.layers[0].mlp.down_proj.weight)
    wanted = drafter.layers[0].mlp.down_proj.weight.detach().clone()
    parametrise(drafter, RelativeStorage(layer_rank=2), rebase=True)
    assert "differ from the target's by more than rank 2" in caplog.text and "layers.0.mlp.down_proj" in caplog.text
    cut = drafter.layers[0].mlp.down_proj.weight.detach()
    s = _singular_values(cut - _target_matrix(model, drafter, "layers.0.mlp.down_proj.weight"))
    assert s[2] < 1e-5 * s[0]  # rank 2 now
    best = _singular_values(wanted - _target_matrix(model, drafter, "layers.0.mlp.down_proj.weight"))
    torch.testing.assert_close(s[:2], best[:2], rtol=1e-4, atol=1e-6)  # the best rank-2 approximation
