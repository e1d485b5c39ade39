"""How a supported target takes the tree attention mask in transformers 5.24.

transformers' mask helpers (`masking_utils._preprocess_mask_arguments`) return a 4-D mask unchanged, so a
tree mask passes straight to the attention functions, which add it to (eager) or pass it as `attn_mask` of
(sdpa) the scores: its last dimension must equal the number of keys each layer sees, i.e. the entries that
layer holds plus the tree's nodes. That number differs between full and sliding-window layers, and a
custom mask also bypasses transformers' own window logic, so the window is applied here, per layer type:

* Qwen2, Qwen3, Gemma 3 accept a dict `{layer_type: mask}` (their forward only builds masks when
  `attention_mask` is not a dict) and pick `mask[config.layer_types[i]]` for layer i: one mask per type.
* Llama and Mistral take a single tensor for every layer: all of their layers are of one kind (full, or all
  sliding with `config.sliding_window`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from transformers.cache_utils import DynamicSlidingWindowLayer

from ...drafting.tree import window_mask
from ...kernels.grouped_attention import is_sdpa
from ...targets import text_config

DICT_MASK_MODEL_TYPES = ("qwen2", "qwen3", "gemma3_text")
SINGLE_MASK_MODEL_TYPES = ("llama", "mistral")


def layer_types(text_config) -> list[str]:
    """The attention kind of each decoder layer: "full_attention" or "sliding_attention"."""
    types = getattr(text_config, "layer_types", None)
    if types is None:
        kind = "sliding_attention" if getattr(text_config, "sliding_window", None) is not None else "full_attention"
        types = [kind] * text_config.num_hidden_layers
    unknown = sorted(set(types) - {"full_attention", "sliding_attention"})
    if unknown:
        raise ValueError(
            f"tree verification knows full and sliding-window attention layers, not {unknown}. "
            "Fix: call generate with oneiro_tree=False for this target."
        )
    return list(types)


def _as_attention_mask(allowed: torch.BoolTensor, implementation: str, dtype: torch.dtype) -> torch.Tensor:
    if is_sdpa(implementation):
        return allowed
    if implementation == "eager":  # eager adds the mask to the scores
        zeros = torch.zeros((), dtype=dtype, device=allowed.device)
        return torch.where(allowed, zeros, torch.finfo(dtype).min)
    raise ValueError(
        f"tree verification needs attention that takes a 4-D mask (sdpa or eager), the target uses "
        f"{implementation!r}. Fix: load the target with attn_implementation='sdpa', or use oneiro_tree=False."
    )


def tree_allowed(columns: int, roots: torch.LongTensor, holes: torch.LongTensor, ancestors: torch.BoolTensor,
                 positions: torch.LongTensor):
    """`allowed(layer, window)` for `target_masks` in a pass over B flattened trees of W nodes each: (B, 1, W, m + W),
    row b's nodes see its own cached entries and their own ancestors (ancestors: (B, W, W)), within the window by
    position (positions: (B, W)). The layer holds the last m of `columns`; row b's roots[b] entries (positions
    0..roots[b]-1) end `holes[b]` columns before the last in a full-attention layer, at the last one in a
    sliding-window layer (`cache.compact_rows`)."""

    def allowed(layer, window: int | None) -> torch.BoolTensor:
        held = layer.keys.shape[-2] if layer.is_initialized and layer.keys is not None else 0
        cols = torch.arange(columns - held, columns, device=positions.device)
        end = columns - (0 if isinstance(layer, DynamicSlidingWindowLayer) else holes)  # (B,) or int: after the last
        key_positions = cols.unsqueeze(0) - (end - roots).unsqueeze(1)  # (B, m); outside 0..roots-1: padding, hole
        valid = (key_positions >= 0) & (key_positions < roots.unsqueeze(1))
        mask = torch.cat([valid.unsqueeze(1).expand(-1, positions.shape[1], -1), ancestors], dim=-1)
        return window_mask(mask, positions, torch.cat([key_positions, positions], dim=-1), window)

    return allowed


def target_masks(model, cache, allowed: Callable[[Any, int | None], torch.BoolTensor]):
    """The `attention_mask` argument of a target pass from `allowed(cache_layer, window)`, the (B, 1, q, keys) bool
    mask of a layer (window: its sliding window, None for full attention), asked once per layer type: one tensor or
    a dict of them by layer type, in the form (bool for sdpa, additive for eager) the target's forward takes."""
    config = text_config(model)
    types = layer_types(config)
    implementation = config._attn_implementation
    dtype = model.dtype
    masks: dict[str, torch.Tensor] = {}
    for i, kind in enumerate(types):
        if kind in masks:
            continue
        window = config.sliding_window if kind == "sliding_attention" else None
        masks[kind] = _as_attention_mask(allowed(cache.layers[i], window), implementation, dtype)
    if config.model_type in DICT_MASK_MODEL_TYPES:
        return masks
    if config.model_type in SINGLE_MASK_MODEL_TYPES:
        if len(masks) != 1:
            raise ValueError(
                f"{config.model_type} takes one mask for every layer but its layers mix {sorted(masks)}. "
                "Fix: call generate with oneiro_tree=False for this target."
            )
        return next(iter(masks.values()))
    raise ValueError(
        f"tree verification does not know how {config.model_type} takes a 4-D mask. Fix: use a supported "
        f"target ({', '.join(DICT_MASK_MODEL_TYPES + SINGLE_MASK_MODEL_TYPES)}) or oneiro_tree=False."
    )
