"""Compacting the target's cache to the accepted root-to-leaf path after a tree pass.

A tree pass appends the key/value of every flattened node to each cache layer; only the root and the
accepted nodes belong to the sequence. Compaction keeps, per layer, the entries that were cached before
the pass plus those of the kept nodes (in path order), drops the rest, and restores the layer's own
invariants: a sliding-window layer holds at most `window - 1` entries again and its `cumulative_length`
counts only the kept positions.

Supported layer classes are those of `DynamicCache`, which `generate` makes for every supported
architecture: `DynamicLayer` (full attention) and `DynamicSlidingWindowLayer` (sliding window: Mistral,
Qwen2/3 with `use_sliding_window`, Gemma 3's local layers). Sliding layers must record their past
(`activate_past_recording`, as transformers' own assisted loop does), otherwise the pass itself would
already have dropped entries the accepted path needs.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer, DynamicSlidingWindowLayer


class UnsupportedTreeCache(TypeError):
    """The cache passed to a tree generate call cannot be compacted to the accepted path."""


def prepare_cache(cache) -> None:
    """Check that `cache` can be compacted and make its sliding layers keep their past until compaction."""
    if not isinstance(cache, DynamicCache):
        raise UnsupportedTreeCache(
            f"tree verification compacts a DynamicCache, got {type(cache).__name__}. Fix: let generate make its "
            "default cache (no cache_implementation, no cache=...), or call generate with oneiro_tree=False."
        )
    for i, layer in enumerate(cache.layers):
        if type(layer) not in (DynamicLayer, DynamicSlidingWindowLayer):
            raise UnsupportedTreeCache(
                f"cache layer {i} is a {type(layer).__name__}; tree verification compacts DynamicLayer and "
                "DynamicSlidingWindowLayer. Fix: use the default dynamic cache, or oneiro_tree=False."
            )
    cache.activate_past_recording()


def cached_positions(layer, device: torch.device | None = None) -> torch.LongTensor:
    """(m,) absolute positions of the entries a cache layer holds (a sliding layer holds only the newest)."""
    total = layer.get_seq_length()
    held = layer.keys.shape[-2] if layer.is_initialized and layer.keys is not None else 0
    return torch.arange(total - held, total, device=device)


def compact_cache(cache: DynamicCache, keep: torch.LongTensor, tree_size: int) -> None:
    """Keep the entries of flattened tree nodes `keep` (node indices, root first) out of the last `tree_size` ones.

    Called right after a tree pass over `tree_size` nodes. Afterwards every layer reads as if only the kept
    nodes had been fed, one after another. Only the tree's own entries move: the kept ones are copied to the
    front of the tree's slots and the layer is cut after them (a view, no copy of the context), so a pass over
    a long prompt costs no more to compact than one over a short prompt.
    """
    keep = keep.to(torch.long)
    kept = keep.numel()
    in_place = keep.tolist() == list(range(kept))  # the accepted path is the first nodes, in order: nothing moves
    for layer in cache.layers:
        if not layer.is_initialized:
            continue
        held = layer.keys.shape[-2]
        before = held - tree_size
        if before < 0:
            raise RuntimeError(f"cache layer holds {held} entries, fewer than the {tree_size} tree nodes just fed")
        if not in_place:
            tail = before + keep.to(layer.keys.device)
            layer.keys[..., before : before + kept, :] = layer.keys.index_select(-2, tail)
            layer.values[..., before : before + kept, :] = layer.values.index_select(-2, tail)
        keys, values = layer.keys[..., : before + kept, :], layer.values[..., : before + kept, :]
        if isinstance(layer, DynamicSlidingWindowLayer):
            layer.cumulative_length += kept - tree_size
            keys = keys[..., -layer.sliding_window + 1 :, :]
            values = values[..., -layer.sliding_window + 1 :, :]
        layer.keys, layer.values = keys, values


def trim_sliding_layers(cache: DynamicCache) -> None:
    """Shrink sliding layers back to `window - 1` entries (after the prefill, which they recorded in full)."""
    for layer in cache.layers:
        if isinstance(layer, DynamicSlidingWindowLayer) and layer.is_initialized:
            layer.keys = layer.keys[..., -layer.sliding_window + 1 :, :]
            layer.values = layer.values[..., -layer.sliding_window + 1 :, :]
