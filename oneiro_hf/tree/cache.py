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
    compact_rows(cache, [keep.tolist()], tree_size)


def compact_rows(cache: DynamicCache, keep: list[list[int]], tree_size: int) -> list[int]:
    """Per row b, keep the entries of its flattened tree nodes `keep[b]` (root first) out of the last `tree_size`
    ones, and keep the rows right-aligned: every row ends at the same column, a row that kept fewer entries than the
    most any row kept (K) is shifted right by the difference, its left padding growing by as many (masked) columns.

    Returns those shifts (one per row: K - len(keep[b])). Called right after a batched tree pass; with one row (or
    rows that kept as many entries) only the tree's slots move, as `compact_cache` describes. A shift copies the
    layer's entries once (a gather of the whole layer), which costs about what one pass reading the cache costs.
    """
    kept = max(len(row) for row in keep)
    shifts = [kept - len(row) for row in keep]
    in_place = all(row == list(range(kept)) for row in keep)  # every row kept its first nodes: nothing moves
    for layer in cache.layers:
        if not layer.is_initialized:
            continue
        held = layer.keys.shape[-2]
        before = held - tree_size
        if before < 0:
            raise RuntimeError(f"cache layer holds {held} entries, fewer than the {tree_size} tree nodes just fed")
        if any(shifts):
            index = _row_sources(keep, shifts, before, layer.keys.device)  # (B, before + kept)
            layer.keys, layer.values = _gather_columns(layer.keys, index), _gather_columns(layer.values, index)
        else:
            if not in_place:
                tail = before + torch.tensor(keep, dtype=torch.long, device=layer.keys.device)  # (B, kept)
                layer.keys[..., before : before + kept, :] = _gather_columns(layer.keys, tail)
                layer.values[..., before : before + kept, :] = _gather_columns(layer.values, tail)
            layer.keys, layer.values = layer.keys[..., : before + kept, :], layer.values[..., : before + kept, :]
        if isinstance(layer, DynamicSlidingWindowLayer):
            layer.cumulative_length += kept - tree_size
            layer.keys = layer.keys[..., -layer.sliding_window + 1 :, :]
            layer.values = layer.values[..., -layer.sliding_window + 1 :, :]
    return shifts


def _row_sources(keep: list[list[int]], shifts: list[int], before: int, device: torch.device) -> torch.LongTensor:
    """(B, before + K) source column of every column of the compacted rows: `shift` padding columns (any source:
    they are masked), the `before` columns cached ahead of the pass, then the kept tree slots."""
    rows = [[0] * shift + list(range(before)) + [before + node for node in row] for row, shift in zip(keep, shifts)]
    return torch.tensor(rows, dtype=torch.long, device=device)


def _gather_columns(states: torch.Tensor, index: torch.LongTensor) -> torch.Tensor:
    """states (B, heads, S, D), index (B, n) -> (B, heads, n, D): each row's columns `index[b]`."""
    expanded = index[:, None, :, None].expand(-1, states.shape[1], -1, states.shape[3])
    return states.gather(-2, expanded)


def trim_sliding_layers(cache: DynamicCache) -> None:
    """Shrink sliding layers back to `window - 1` entries (after the prefill, which they recorded in full)."""
    for layer in cache.layers:
        if isinstance(layer, DynamicSlidingWindowLayer) and layer.is_initialized:
            layer.keys = layer.keys[..., -layer.sliding_window + 1 :, :]
            layer.values = layer.values[..., -layer.sliding_window + 1 :, :]
