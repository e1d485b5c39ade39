"""A drafter knows its base model by the base weights (a fingerprint), never by a name or a path."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from tiny import make_model
from transformers import AutoModelForCausalLM

from oneiro_hf import DrafterTargetMismatch, OneiroDrafter
from oneiro_hf.loading import default_drafter_dir
from oneiro_hf.storage.identity import (
    RELATIVE_TOLERANCE,
    SAMPLES_PER_TENSOR,
    canonical_model_id,
    compare_fingerprint,
    compute_fingerprint,
    fingerprinted_tensors,
    sample_indices,
)
from oneiro_hf.storage.reference_models import MARKER_FILE, get_spec, load_reference_model


@pytest.fixture
def saved(tmp_path):
    model = make_model("llama", name="org/base-a")
    OneiroDrafter.from_target(model).save_pretrained(tmp_path / "drafter")
    return model, tmp_path / "drafter"


def test_config_records_canonical_name_and_fingerprint(saved):
    _, path = saved
    config = json.loads((path / "config.json").read_text())
    assert config["base_model_name_or_path"] == "org/base-a"
    fingerprint = config["base_model_fingerprint"]
    assert fingerprint["samples_per_tensor"] == SAMPLES_PER_TENSOR and fingerprint["dtype"] == "bfloat16"
    # the embedding, every parameter of the copied layers (2, 3), the final norm and the untied head
    names = set(fingerprint["tensors"])
    assert {"embed_tokens", "norm.weight", "lm_head"} <= names
    assert {n.split(".")[1] for n in names if n.startswith("layers.")} == {"2", "3"}
    assert fingerprint["shapes"]["embed_tokens"] == [128, 64]


def test_sample_is_spread_and_deterministic():
    first = sample_indices(128 * 64)
    assert torch.equal(first, sample_indices(128 * 64))
    assert first.unique().numel() == SAMPLES_PER_TENSOR and int(first.max()) < 128 * 64
    assert int(first.max()) - int(first.min()) > 128 * 64 // 2  # not bunched at the start


def test_same_weights_under_any_name_or_path_bind(saved, tmp_path):
    _, path = saved
    for name in ("/mnt/models/whatever", "someone/else", None):
        OneiroDrafter.from_pretrained(path, target=make_model("llama", name=name))
    # saved with save_pretrained to a directory of another name and loaded from there
    make_model("llama").save_pretrained(tmp_path / "my-local-copy")
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "my-local-copy")
    drafter = OneiroDrafter.from_pretrained(path, target=reloaded)
    assert drafter.target is reloaded


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_cast_copy_of_the_same_weights_binds(saved, dtype):
    _, path = saved
    target = make_model("llama", name="org/base-a").to(dtype)
    drafter = OneiroDrafter.from_pretrained(path, target=target)
    assert next(drafter.parameters()).dtype == dtype


def test_a_modified_copy_under_the_right_name_is_refused(saved):
    _, path = saved
    target = make_model("llama", name="org/base-a")
    with torch.no_grad():  # a small change to one copied layer: more than a bfloat16 step, far less than training
        target.model.layers[3].mlp.up_proj.weight.mul_(1 + 2 * RELATIVE_TOLERANCE)
    with pytest.raises(DrafterTargetMismatch) as info:
        OneiroDrafter.from_pretrained(path, target=target)
    (difference,) = info.value.differences
    assert difference.field == "base_weights"
    message = str(info.value)
    assert "layers.3.mlp.up_proj.weight" in message and "64 of 64 values" in message
    assert "1 of 21 sampled tensors" in message and "org/base-a" in message
    assert "allow_base_model_mismatch=True" in message
    OneiroDrafter.from_pretrained(path, target=target, allow_base_model_mismatch=True)


def test_a_modified_embedding_is_refused(saved):
    _, path = saved
    target = make_model("llama", name="org/base-a")
    with torch.no_grad():
        target.model.embed_tokens.weight.add_(0.01 * torch.randn_like(target.model.embed_tokens.weight))
    with pytest.raises(DrafterTargetMismatch, match="embed_tokens"):
        OneiroDrafter.from_pretrained(path, target=target)


def test_differences_below_bfloat16_precision_count_as_the_same_weights(saved):
    _, path = saved
    target = make_model("llama", name="org/base-a")
    with torch.no_grad():
        target.model.layers[2].self_attn.q_proj.weight.mul_(1 + RELATIVE_TOLERANCE / 8)
    OneiroDrafter.from_pretrained(path, target=target)


def test_a_fine_tune_of_other_weights_lists_every_differing_tensor(saved):
    model, path = saved
    other = make_model("llama", seed=5, name="org/base-a")
    differing = compare_fingerprint(
        json.loads((path / "config.json").read_text())["base_model_fingerprint"],
        fingerprinted_tensors(other, other.model, (2, 4)),
    )
    names = {d.tensor for d in differing}
    assert "embed_tokens" in names and "lm_head" in names
    assert all(d.differing > 0 and d.max_relative > RELATIVE_TOLERANCE for d in differing)
    assert compare_fingerprint(
        compute_fingerprint(fingerprinted_tensors(model, model.model, (2, 4))),
        fingerprinted_tensors(model, model.model, (2, 4)),
    ) == []


def test_shape_mismatch_is_reported_without_comparing_weights(saved):
    _, path = saved
    with pytest.raises(DrafterTargetMismatch) as info:
        OneiroDrafter.from_pretrained(path, target=make_model("llama", hidden=96, name="org/base-a"))
    assert {d.field for d in info.value.differences} == {"hidden_size"}


def test_old_drafter_without_fingerprint_loads_and_says_so_once(saved, tmp_path):
    model, path = saved
    config = json.loads((path / "config.json").read_text())
    del config["base_model_fingerprint"]
    config["base_model_name_or_path"] = "/old/machine/path/hf"  # as 0.1.0 recorded it
    (path / "config.json").write_text(json.dumps(config))
    other_weights = make_model("llama", seed=7, name="elsewhere")
    with pytest.warns(UserWarning, match="no base_model_fingerprint") as record:
        OneiroDrafter.from_pretrained(path, target=other_weights)
    assert "re-save" in str(record[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        OneiroDrafter.from_pretrained(path, target=model)  # said once for this drafter


def test_canonical_id_of_a_reference_copy_comes_from_its_marker(tmp_path):
    model = make_model("llama", name=str(tmp_path))
    assert canonical_model_id(model) == str(tmp_path)
    (tmp_path / MARKER_FILE).write_text(json.dumps({"name": "smollm2-135m-instruct"}))
    assert canonical_model_id(model) == "HuggingFaceTB/SmolLM2-135M-Instruct"
    # random weights marked as the reference copy are not its dequantized values: recorded as they are, and said so
    with pytest.warns(UserWarning, match="do not lie on quantization levels"):
        drafter = OneiroDrafter.from_target(model)
    assert drafter.config.base_model_name_or_path == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert "reference copy 'smollm2-135m-instruct'" in drafter.config.base_model_fingerprint["source"]
    assert "quantization" not in drafter.config.base_model_fingerprint


@pytest.mark.real_model
def test_shipped_drafter_loads_onto_smollm2_saved_anywhere_and_refuses_a_modified_copy(tmp_path):
    torch.set_num_threads(1)
    model, _ = load_reference_model("smollm2-135m-instruct")
    assert model.name_or_path == get_spec("smollm2-135m-instruct").hub_id
    shipped = default_drafter_dir("smollm2-135m-instruct")
    config = json.loads((shipped / "config.json").read_text())
    assert config["base_model_name_or_path"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert config["base_model_fingerprint"]["tensors"]
    # the same weights, saved in bfloat16 under a directory of another name, loaded from there
    copy_dir = tmp_path / "downloads" / "my-smollm"
    model.to(torch.bfloat16).save_pretrained(copy_dir)
    copy = AutoModelForCausalLM.from_pretrained(copy_dir, dtype=torch.float32)
    assert copy.name_or_path == str(copy_dir)
    drafter = OneiroDrafter.from_pretrained(shipped, target=copy)
    assert drafter.target is copy
    # a modified copy saved under the Hub id's name is refused, and the message says what differs
    with torch.no_grad():
        copy.model.layers[29].mlp.down_proj.weight.mul_(1.05)
    named_dir = tmp_path / "HuggingFaceTB" / "SmolLM2-135M-Instruct"
    copy.save_pretrained(named_dir)
    modified = AutoModelForCausalLM.from_pretrained(named_dir, dtype=torch.float32)
    with pytest.raises(DrafterTargetMismatch) as info:
        OneiroDrafter.from_pretrained(shipped, target=modified)
    message = str(info.value)
    assert "layers.29.mlp.down_proj.weight" in message and "allow_base_model_mismatch=True" in message
    assert "reference copy" in message  # says which weights the drafter was trained on
