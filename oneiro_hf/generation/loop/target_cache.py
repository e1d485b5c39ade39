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


def compact_rows(cache: DynamicCache, keep: list[list[int]], tree_size: int, holes: list[int] | None = None) -> list[int]:
    """Per row b, keep the entries of its flattened tree nodes `keep[b]` (root first) out of the last `tree_size`
    ones. Rows may keep different counts; the layer grows by the most any row kept (K). Returns each row's holes.

    Full-attention layers: row b's entries are contiguous and followed by `holes[b]` unused (masked) columns at the
    end of the layer; its kept entries are written right after its last entry (only the tree's slots move, and the
    layer is cut after them: a view, so a long context costs nothing more to compact), so its holes become
    holes[b] + K - len(keep[b]). `realign_rows` closes them when they grow.
    Sliding-window layers hold only about a window of columns: there each row is kept right-aligned (its entries
    end at the last column; a row that kept fewer is shifted right, a gather of the window), so the layer's own
    trimming to `window - 1` columns keeps every row's latest entries.
    """
    holes = [0] * len(keep) if holes is None else list(holes)
    kept = max(len(row) for row in keep)
    shifts = [kept - len(row) for row in keep]
    for layer in cache.layers:
        if not layer.is_initialized:
            continue
        held = layer.keys.shape[-2]
        before = held - tree_size
        if before < 0:
            raise RuntimeError(f"cache layer holds {held} entries, fewer than the {tree_size} tree nodes just fed")
        if isinstance(layer, DynamicSlidingWindowLayer):
            _compact_right_aligned(layer, keep, shifts, before)
            layer.cumulative_length += kept - tree_size
            layer.keys = layer.keys[..., -layer.sliding_window + 1 :, :]
            layer.values = layer.values[..., -layer.sliding_window + 1 :, :]
        else:
            _compact_with_holes(layer, keep, holes, before)
            layer.keys, layer.values = layer.keys[..., : before + kept, :], layer.values[..., : before + kept, :]
    return [hole + shift for hole, shift in zip(holes, shifts)]


def _compact_with_holes(layer, keep: list[list[int]], holes: list[int], before: int) -> None:
    """Write row b's kept tree slots at columns before - holes[b] onwards (right after its last entry)."""
    if not any(holes) and all(row == list(range(len(row))) for row in keep):
        return  # every row's path is its first nodes, right after its entries: nothing moves
    width = max(len(row) for row in keep)
    device = layer.keys.device
    source = torch.tensor([[before + node for node in row] + [before + row[-1]] * (width - len(row)) for row in keep],
                          dtype=torch.long, device=device)  # (B, K); past a row's own count: its hole columns
    target = torch.tensor([[before - hole + i for i in range(width)] for hole in holes], dtype=torch.long,
                          device=device)
    for states in (layer.keys, layer.values):
        states.scatter_(-2, _expand(target, states), _gather_columns(states, source))


def _compact_right_aligned(layer, keep: list[list[int]], shifts: list[int], before: int) -> None:
    """Row b's kept tree slots after the `before` columns, the row shifted right by shifts[b] (a gather)."""
    if any(shifts):
        rows = [[0] * shift + list(range(before)) + [before + node for node in row] for row, shift in zip(keep, shifts)]
        index = torch.tensor(rows, dtype=torch.long, device=layer.keys.device)  # (B, before + K); shifted-in: masked
        layer.keys, layer.values = _gather_columns(layer.keys, index), _gather_columns(layer.values, index)
        return
    kept = len(keep[0])
    if any(row != list(range(kept)) for row in keep):
        tail = before + torch.tensor(keep, dtype=torch.long, device=layer.keys.device)  # (B, K)
        layer.keys[..., before : before + kept, :] = _gather_columns(layer.keys, tail)
        layer.values[..., before : before + kept, :] = _gather_columns(layer.values, tail)
    layer.keys, layer.values = layer.keys[..., : before + kept, :], layer.values[..., : before + kept, :]


def realign_rows(cache: DynamicCache, holes: list[int]) -> None:
    """Close the holes `compact_rows` left at the end of full-attention layers' rows: row b is shifted right by
    holes[b] (one gather of each such layer), so every row ends at the last column again, its left padding grown by
    as many masked columns. Sliding-window layers are right-aligned already."""
    if not any(holes):
        return
    for layer in cache.layers:
        if not layer.is_initialized or isinstance(layer, DynamicSlidingWindowLayer):
            continue
        held = layer.keys.shape[-2]
        index = torch.tensor([[0] * hole + list(range(held - hole)) for hole in holes], dtype=torch.long,
                             device=layer.keys.device)
        layer.keys, layer.values = _gather_columns(layer.keys, index), _gather_columns(layer.values, index)


def drop_leading_columns(cache: DynamicCache, count: int) -> None:
    """Drop the first `count` columns of every layer, padding in every row (after the batch's longest row has
    finished, say): full-attention layers lose them (a view), sliding-window layers count `count` fewer positions
    and hold no more columns than remain."""
    if count <= 0:
        return
    for layer in cache.layers:
        if not layer.is_initialized:
            continue
        if isinstance(layer, DynamicSlidingWindowLayer):
            layer.cumulative_length -= count
            keep = min(layer.keys.shape[-2], layer.cumulative_length)
            layer.keys, layer.values = layer.keys[..., -keep:, :], layer.values[..., -keep:, :]
        else:
            layer.keys, layer.values = layer.keys[..., count:, :], layer.values[..., count:, :]


def _expand(index: torch.LongTensor, states: torch.Tensor) -> torch.LongTensor:
    """index (B, n) -> (B, heads, n, D), to gather or scatter whole key/value columns of states (B, heads, S, D)."""
    return index[:, None, :, None].expand(-1, states.shape[1], -1, states.shape[3])


def _gather_columns(states: torch.Tensor, index: torch.LongTensor) -> torch.Tensor:
    """states (B, heads, S, D), index (B, n) -> (B, heads, n, D): each row's columns `index[b]`."""
    return states.gather(-2, _expand(index, states))


def trim_sliding_layers(cache: DynamicCache) -> None:
    """Shrink sliding layers back to `window - 1` entries (after the prefill, which they recorded in full)."""
    for layer in cache.layers:
        if isinstance(layer, DynamicSlidingWindowLayer) and layer.is_initialized:
            layer.keys = layer.keys[..., -layer.sliding_window + 1 :, :]
            layer.values = layer.values[..., -layer.sliding_window + 1 :, :]
