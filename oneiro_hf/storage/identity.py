"""Which base model a drafter belongs to, told by the base model's weights rather than by its name or path.

A drafter records `base_model_fingerprint`: `SAMPLES_PER_TENSOR` values per tensor of the base weights it
depends on, at positions that depend only on the tensor's size, stored as bfloat16. Binding takes the same
sample from the target and compares both after rounding to bfloat16, within one bfloat16 step. A base that is
a quantized copy also records each tensor's quantization (and, for K-quants, each sampled value's `cells`), so
the original weights bind too: simple roundings (`REQUANTIZABLE`) are re-quantized with `quantize_dequantize`,
K-quant values must lie in their cell (`lattice_step`, `EDGE_STEPS`). docs/hub.md ("Which targets a drafter
accepts") states the rules and what binds.
"""

from __future__ import annotations

import base64
import json
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

FINGERPRINT_VERSION = 1
SAMPLES_PER_TENSOR = 64
CANONICAL_DTYPE = torch.bfloat16
RELATIVE_TOLERANCE = 2.0**-7  # one bfloat16 step (8 significant bits)
ABSOLUTE_TOLERANCE = 1e-6  # float16 flushes values this small to zero
QUANT_BLOCK = 32  # values per Q8_0 / Q4_1 block, along the last dimension
# GGUF quantization -> (values that share one scale along the last dimension, levels in such a block)
QUANTIZATIONS: dict[str, tuple[int, int]] = {
    "Q8_0": (32, 255),
    "Q4_0": (32, 16),
    "Q4_1": (32, 16),
    "Q5_0": (32, 32),
    "Q5_1": (32, 32),
    "Q2_K": (16, 4),
    "Q3_K": (16, 8),
    "Q4_K": (32, 16),
    "Q5_K": (32, 32),
    "Q6_K": (16, 64),
}
REQUANTIZABLE = ("Q8_0", "Q5_0", "Q4_1")  # simple roundings: originals recognised by re-quantizing them
MAX_QUANTIZED_MISSES = 2  # of SAMPLES_PER_TENSOR: ties at .5 may round to the other step
EDGE_STEPS = 2.0  # a value at its block's lowest or highest level may lie this many steps beyond it
LATTICE_TOLERANCE = 1e-3  # of a step: how far a dequantized value may sit from its level (float32 rounding)
_STRIDE = 2654435761  # a large odd multiplier: spreads the sample over the whole flattened tensor


def sample_indices(numel: int, count: int = SAMPLES_PER_TENSOR) -> torch.Tensor:
    """(count,) int64 indices into a flattened tensor of `numel` values; depends on `numel` only."""
    return torch.tensor([(k * _STRIDE + 97) % numel for k in range(count)], dtype=torch.long)


def fingerprinted_tensors(
    model: nn.Module, decoder: nn.Module, interval: tuple[int, int] | list[int]
) -> dict[str, torch.Tensor]:
    """The base weights a drafter for layers `interval` of `model` depends on, by a name independent of the model.

    decoder: the model's decoder (with `.layers` and `.norm`), found by the caller.
    """
    embedding = model.get_input_embeddings().weight
    tensors: dict[str, torch.Tensor] = {"embed_tokens": embedding}
    start, end = interval
    for i in range(start, end):
        for name, param in decoder.layers[i].named_parameters():
            tensors[f"layers.{i}.{name}"] = param
    for name, param in decoder.norm.named_parameters():
        tensors[f"norm.{name}"] = param
    head = model.get_output_embeddings()
    if head is not None and head.weight is not embedding:
        tensors["lm_head"] = head.weight
    return tensors


def _encode(values: torch.Tensor) -> str:
    return base64.b64encode(values.to(CANONICAL_DTYPE).view(torch.int16).numpy().tobytes()).decode("ascii")


def _decode(text: str) -> torch.Tensor:
    raw = bytearray(base64.b64decode(text.encode("ascii")))
    return torch.frombuffer(raw, dtype=torch.int16).view(CANONICAL_DTYPE).to(torch.float32)


def _sample(tensor: torch.Tensor) -> torch.Tensor | None:
    """The canonical sample of one tensor, or None where its values cannot be read (meta, quantized, sharded)."""
    if tensor.is_meta or not tensor.is_floating_point() or type(tensor) not in (torch.Tensor, nn.Parameter):
        return None
    flat = tensor.detach().reshape(-1)
    values = flat[sample_indices(flat.numel()).to(flat.device)]
    return values.to(device="cpu", dtype=torch.float32).to(CANONICAL_DTYPE)


def _round_half_away(x: torch.Tensor) -> torch.Tensor:
    return torch.sign(x) * torch.floor(x.abs() + 0.5)


def quantize_dequantize(blocks: torch.Tensor, kind: str) -> torch.Tensor:
    """(n, QUANT_BLOCK) float32 blocks -> the same blocks quantized to `kind` and dequantized, like llama.cpp.

    Q8_0: d = max|x| / 127, q = round(x / d) (half away from zero), value = q * fp16(d).
    Q5_0: d = -m / 16 for m the value of largest magnitude, q = min(31, int(x / d + 16.5)), value = (q - 16) * fp16(d).
    Q4_1: d = (max - min) / 15, q = min(15, int((x - min) / d + 0.5)), value = q * fp16(d) + fp16(min).
    """
    x = blocks.to(torch.float32)
    if kind == "Q8_0":
        d = x.abs().amax(dim=1, keepdim=True) / 127
        inverse = torch.where(d > 0, 1.0 / d, torch.zeros_like(d))
        q = _round_half_away(x * inverse)
        return q * d.to(torch.float16).to(torch.float32)
    if kind == "Q5_0":
        peak = x.gather(1, x.abs().argmax(dim=1, keepdim=True))  # the value of largest magnitude, with its sign
        d = peak / -16
        inverse = torch.where(d != 0, 1.0 / d, torch.zeros_like(d))
        q = torch.clamp(torch.trunc(x * inverse + 16.5), max=31)
        return (q - 16) * d.to(torch.float16).to(torch.float32)
    if kind == "Q4_1":
        low, high = x.amin(dim=1, keepdim=True), x.amax(dim=1, keepdim=True)
        d = (high - low) / 15
        inverse = torch.where(d > 0, 1.0 / d, torch.zeros_like(d))
        q = torch.clamp(torch.trunc((x - low) * inverse + 0.5), max=15)
        return q * d.to(torch.float16).to(torch.float32) + low.to(torch.float16).to(torch.float32)
    raise ValueError(
        f"cannot re-quantize to {kind!r}: only {', '.join(REQUANTIZABLE)} are re-quantized; other quantizations are "
        "recognised by their recorded cells. Fix: re-save the drafter with this oneiro-hf while it is bound to the "
        "reference copy it was made from, so that its fingerprint records cells."
    )


def _sampled_blocks(tensor: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The block of `block` values (along the last dimension) around each sampled value.

    Returns (SAMPLES_PER_TENSOR, block) float32 blocks and the (SAMPLES_PER_TENSOR,) position of each sampled value
    in its block.
    """
    flat = tensor.detach().reshape(-1)
    index = sample_indices(flat.numel())
    starts = (index // block) * block
    blocks = flat[(starts[:, None] + torch.arange(block)).to(flat.device)].to("cpu", torch.float32)
    return blocks, index % block


def _quantized_sample(tensor: torch.Tensor, kind: str) -> torch.Tensor | None:
    """(SAMPLES_PER_TENSOR,) float32: the sampled values of `tensor` after quantize-dequantize to `kind`.

    None where the last dimension is not made of whole blocks (such a tensor cannot have been quantized so).
    """
    if tensor.shape[-1] % QUANT_BLOCK:
        return None
    blocks, position = _sampled_blocks(tensor, QUANT_BLOCK)
    return quantize_dequantize(blocks, kind)[torch.arange(position.numel()), position]


def lattice_step(blocks: torch.Tensor, levels: int) -> torch.Tensor:
    """(n, b) dequantized blocks -> (n,) the step between adjacent quantization levels of each block.

    Each block's values lie on levels `low + step * q`, q in 0..levels-1: the step is the largest s such that every
    value's distance from the block's lowest value is a whole number of s (within LATTICE_TOLERANCE of s), found among
    the smallest gap between distinct values divided by 1, 2, ... A block of one value has step 0; a block whose
    values lie on no such lattice has step NaN.
    """
    values = blocks.to(torch.float64).sort(dim=1).values
    offsets = values - values[:, :1]
    span = offsets[:, -1]
    gaps = offsets[:, 1:] - offsets[:, :-1]
    gaps = torch.where(gaps > span[:, None] * 1e-6, gaps, torch.full_like(gaps, float("inf")))
    smallest = gaps.min(dim=1).values
    step = torch.where(span == 0, torch.zeros_like(span), torch.full_like(span, float("nan")))
    open_rows = torch.nonzero(span > 0).flatten()
    for divisor in range(1, levels):
        if open_rows.numel() == 0:
            break
        candidate = smallest[open_rows] / divisor
        position = offsets[open_rows] / candidate[:, None]
        on_lattice = (position - position.round()).abs().amax(dim=1) <= LATTICE_TOLERANCE
        fits = on_lattice & (position[:, -1].round() <= levels - 1)
        step[open_rows[fits]] = candidate[fits]
        open_rows = open_rows[~fits]
    return step.to(torch.float32)


_EDGES = {(False, False): ".", (True, False): "-", (False, True): "+", (True, True): "="}


def quantization_cells(tensor: torch.Tensor, kind: str, name: str = "tensor") -> dict[str, str] | None:
    """The cells of the sampled values of a dequantized quantized tensor: {"step": encoded steps, "edge": "-+=."}.

    edge per sample: "-" the value is its block's lowest level, "+" its highest, "=" both (one level), "." neither.
    None when the values do not lie on the lattice `kind` makes: they are not a dequantized copy (fine-tuned since),
    or were read in a narrower dtype than the copy's float32.
    """
    block, levels = QUANTIZATIONS[kind]
    if tensor.shape[-1] % block:
        raise ValueError(
            f"{name} has a last dimension of {tensor.shape[-1]}, not a multiple of {kind}'s block of {block} values, "
            f"so it cannot have been quantized to {kind}. Fix: correct the quantization record of {name}."
        )
    blocks, position = _sampled_blocks(tensor, block)
    step = lattice_step(blocks, levels)
    if bool(step.isnan().any()):
        return None
    value = blocks[torch.arange(position.numel()), position]
    low, high = value == blocks.amin(dim=1), value == blocks.amax(dim=1)
    edge = "".join(_EDGES[(bool(lo), bool(hi))] for lo, hi in zip(low, high))
    return {"step": _encode(step), "edge": edge}


def _outside_cells(expected: torch.Tensor, actual: torch.Tensor, cells: dict[str, str]) -> torch.Tensor:
    """Per value: whether `actual` lies outside the recorded quantization cell of `expected` (plus one bf16 step)."""
    step = _decode(cells["step"])
    actual = actual.to(CANONICAL_DTYPE).to(torch.float32)
    slack = RELATIVE_TOLERANCE * torch.maximum(expected.abs(), actual.abs()) + ABSOLUTE_TOLERANCE
    half = step * (0.5 + RELATIVE_TOLERANCE)  # the step itself was stored in bfloat16
    below = torch.tensor([edge in "-=" for edge in cells["edge"]])
    above = torch.tensor([edge in "+=" for edge in cells["edge"]])
    lower = torch.where(below, step * EDGE_STEPS, half) + slack
    upper = torch.where(above, step * EDGE_STEPS, half) + slack
    gap = actual - expected
    return (gap > upper) | (-gap > lower)


def _outside_tolerance(expected: torch.Tensor, actual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per value: whether `actual` is more than one bfloat16 step from `expected`, and the relative gap."""
    actual = actual.to(CANONICAL_DTYPE).to(torch.float32)
    scale = torch.maximum(expected.abs(), actual.abs())
    gap = (expected - actual).abs()
    return gap > RELATIVE_TOLERANCE * scale + ABSOLUTE_TOLERANCE, gap / scale.clamp_min(ABSOLUTE_TOLERANCE)


def compute_fingerprint(
    tensors: dict[str, torch.Tensor], source: str | None = None, quantization: dict[str, str] | None = None
) -> dict[str, Any]:
    """The JSON-ready fingerprint of `tensors` (see the module docstring); `source` says what the weights were.

    quantization: tensor name -> the quantization (a key of QUANTIZATIONS) the weights went through when they are a
    dequantized quantized copy; names not in `tensors` are dropped. Each such tensor's cells are recorded too.
    """
    samples = {}
    for name, tensor in tensors.items():
        values = _sample(tensor)
        if values is None:
            raise ValueError(
                f"cannot read the values of {name} ({tensor.dtype}, {tensor.device}) to fingerprint the base model. "
                "Fix: make the drafter from a target whose weights are loaded in memory (not offloaded or quantized)."
            )
        samples[name] = _encode(values)
    fingerprint: dict[str, Any] = {
        "version": FINGERPRINT_VERSION,
        "dtype": str(CANONICAL_DTYPE).replace("torch.", ""),
        "samples_per_tensor": SAMPLES_PER_TENSOR,
        "tensors": samples,
        "shapes": {name: list(tensor.shape) for name, tensor in tensors.items()},
    }
    if source:
        fingerprint["source"] = source
    quantization = {name: kind for name, kind in (quantization or {}).items() if name in tensors}
    for kind in set(quantization.values()) - set(QUANTIZATIONS):
        raise ValueError(f"unknown quantization {kind!r}. Fix: use one of {', '.join(QUANTIZATIONS)} or none.")
    if quantization:
        cells = {name: quantization_cells(tensors[name], kind, name) for name, kind in sorted(quantization.items())}
        off_lattice = sorted(name for name, found in cells.items() if found is None)
        if off_lattice:
            warnings.warn(
                f"{len(off_lattice)} tensors of the base model ({', '.join(off_lattice[:3])}"
                f"{', ...' if len(off_lattice) > 3 else ''}) are recorded as quantized but their values do not lie on "
                "quantization levels: the model was changed since it was dequantized, or loaded in a narrower dtype. "
                "The drafter records their values as they are, so it binds these weights only, not the original model "
                "behind the quantized copy. Fix: to bind the original too, make the drafter from the reference copy "
                "loaded in float32.",
                UserWarning,
                stacklevel=2,
            )
        kept = {name: kind for name, kind in sorted(quantization.items()) if cells[name] is not None}
        if kept:
            fingerprint["quantization"] = kept
        by_cells = {name: cells[name] for name, kind in kept.items() if kind not in REQUANTIZABLE}
        if by_cells:
            fingerprint["cells"] = by_cells
    return fingerprint


@dataclass(frozen=True)
class WeightDifference:
    """How the target's sample of one tensor differs from the recorded one."""

    tensor: str
    differing: int  # sampled values outside the tolerance (-1: the tensor is missing or unreadable)
    sampled: int
    max_relative: float

    def describe(self) -> str:
        if self.differing < 0:
            return f"{self.tensor} (missing, unreadable or of another shape in the target)"
        return f"{self.tensor} ({self.differing} of {self.sampled} values, up to {self.max_relative:.2g} relative)"


def compare_fingerprint(recorded: dict[str, Any], tensors: dict[str, torch.Tensor]) -> list[WeightDifference]:
    """Every fingerprinted tensor whose sample in `tensors` differs from `recorded` beyond the tolerance.

    A tensor recorded with a quantization also matches when the target's values lie in the recorded cells (or, for
    a record without cells, quantize-dequantize to the recorded values), with up to MAX_QUANTIZED_MISSES samples
    missing (see the module docstring).
    """
    if int(recorded.get("version", 0)) != FINGERPRINT_VERSION:
        raise ValueError(
            f"base_model_fingerprint has version {recorded.get('version')!r}; this oneiro-hf reads version "
            f"{FINGERPRINT_VERSION}. Fix: pip install --upgrade oneiro-hf."
        )
    found = []
    for name, text in sorted(recorded["tensors"].items()):
        expected = _decode(text)
        tensor = tensors.get(name)
        actual = _sample(tensor) if tensor is not None and tensor.numel() > 0 else None
        if actual is None:
            found.append(WeightDifference(name, -1, expected.numel(), float("inf")))
            continue
        shape = recorded.get("shapes", {}).get(name)
        if shape is not None and list(tensor.shape) != list(shape):
            found.append(WeightDifference(name, -1, expected.numel(), float("inf")))
            continue
        bad, relative = _outside_tolerance(expected, actual)
        if bool(bad.any()):
            bad = bad & _outside_quantization(recorded, name, tensor, expected, actual)
            if name in recorded.get("quantization", {}) and int(bad.sum()) <= MAX_QUANTIZED_MISSES:
                continue
        if bool(bad.any()):
            found.append(WeightDifference(name, int(bad.sum()), expected.numel(), float(relative.max())))
    return found


def _outside_quantization(
    recorded: dict[str, Any], name: str, tensor: torch.Tensor, expected: torch.Tensor, actual: torch.Tensor
) -> torch.Tensor:
    """Per value: whether it also fails to be the original of the recorded quantized value (all True: not quantized).

    Q8_0, Q5_0, Q4_1 (REQUANTIZABLE): re-quantized like llama.cpp, it differs. Other kinds: outside its recorded cell.
    """
    kind = recorded.get("quantization", {}).get(name)
    everywhere = torch.ones_like(expected, dtype=torch.bool)
    if kind in REQUANTIZABLE:
        requantized = _quantized_sample(tensor, kind)
        return everywhere if requantized is None else _outside_tolerance(expected, requantized)[0]
    cells = recorded.get("cells", {}).get(name)
    return everywhere if kind is None or cells is None else _outside_cells(expected, actual, cells)


_warned_unfingerprinted: set[str] = set()


def warn_unfingerprinted(drafter_name: str | None) -> None:
    """Say once per drafter that an old checkpoint without a fingerprint is bound without a weights check."""
    key = drafter_name or "<unnamed drafter>"
    if key in _warned_unfingerprinted:
        return
    _warned_unfingerprinted.add(key)
    warnings.warn(
        f"The drafter {key} records no base_model_fingerprint (saved by an older oneiro-hf), so only the target's "
        "architecture and shapes are checked, not its weights. Fix: re-save it with drafter.save_pretrained(...) "
        "while it is bound to the model it was trained on; the new checkpoint carries the fingerprint.",
        UserWarning,
        stacklevel=3,
    )


def _reference_spec(model: nn.Module):
    """The `ReferenceModelSpec` of the oneiro-hf reference model `model` was loaded as (by name, or from its
    cache directory), if any."""
    config = getattr(model, "config", None)
    reference = getattr(config, "oneiro_reference", None)  # set by reference_models.load_reference_model
    if not reference:
        name = getattr(model, "name_or_path", None) or getattr(config, "_name_or_path", None)
        marker = Path(str(name)).expanduser() / "oneiro_reference.json" if name else None
        if marker is None or not marker.is_file():
            return None
        try:
            reference = json.loads(marker.read_text())["name"]
        except (ValueError, KeyError, OSError):
            return None
    from .reference_models import get_spec

    return get_spec(str(reference))


def canonical_model_id(model: nn.Module) -> str | None:
    """The base model's Hub id where it can be known, else the name it was loaded by (None if it has none).

    An oneiro-hf reference model, loaded by name or from its cache directory, is named by its Hub id.
    """
    spec = _reference_spec(model)
    if spec is not None:
        return spec.hub_id
    config = getattr(model, "config", None)
    name = getattr(model, "name_or_path", None) or getattr(config, "_name_or_path", None)
    return str(name) if name else None


def weights_quantization(model: nn.Module, names: Iterable[str]) -> dict[str, str] | None:
    """For a reference copy, the quantization each of the tensors `names` went through (else None)."""
    spec = _reference_spec(model)
    return None if spec is None else spec.quantization_of(names)


def weights_source(model: nn.Module) -> str | None:
    """Where the base weights came from, when they are an oneiro-hf reference copy (else None)."""
    spec = _reference_spec(model)
    if spec is None:
        return None
    return (
        f"the oneiro-hf reference copy '{spec.name}' of {spec.hub_id} ({spec.gguf_file} dequantized to float32; "
        f"python -m oneiro_hf.storage.reference_models fetch {spec.name})"
    )
