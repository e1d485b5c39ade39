"""The drafter's own KV cache: preallocated, croppable, and cheap to extend one position at a time.

The drafter's copied decoder layers call `cache.update(key, value, layer_idx, ...)` exactly as they
would inside the target; this class answers that call with views into growing buffers, so drafting a
token costs no concatenation and rejecting drafts is a pointer move (`crop`).

Buffers grow by doubling, but never past `max_capacity` (the generate call's `max_length`: the drafter
never holds a position the sequence cannot reach), so a long context costs at most one buffer of
`max_length` positions per copied layer; a write beyond it is refused with a ValueError.
"""

from __future__ import annotations

from typing import Any

import torch


class DrafterKVCache:
    """Per-layer key/value buffers indexed by the (target) layer index of each copied layer."""

    def __init__(self, initial_capacity: int = 256, max_capacity: int | None = None) -> None:
        if max_capacity is not None and max_capacity < 1:
            raise ValueError(f"max_capacity must be >= 1 or None (got {max_capacity}).")
        self._keys: dict[int, torch.Tensor] = {}
        self._values: dict[int, torch.Tensor] = {}
        self._length: dict[int, int] = {}
        self._initial_capacity = initial_capacity
        self.max_capacity = max_capacity
        self.seq_length = 0  # positions committed by the last completed forward

    def capacity(self, layer_idx: int) -> int:
        """Positions the buffers of `layer_idx` can hold without growing (0 before the first write)."""
        buf = self._keys.get(layer_idx)
        return 0 if buf is None else buf.shape[2]

    def _ensure_capacity(self, layer_idx: int, like: torch.Tensor, needed: int) -> None:
        buf = self._keys.get(layer_idx)
        if buf is not None and buf.shape[2] >= needed:
            return
        if self.max_capacity is not None and needed > self.max_capacity:
            raise ValueError(
                f"The drafter's KV cache would need {needed} positions, more than its limit of {self.max_capacity} "
                "(the generate call's max_length). Fix: raise max_length / max_new_tokens, or reset the drafter's "
                "cache before reusing it for a longer sequence."
            )
        capacity = max(needed, self._initial_capacity, 2 * (buf.shape[2] if buf is not None else 0))
        if self.max_capacity is not None:
            capacity = min(capacity, self.max_capacity)
        shape = (like.shape[0], like.shape[1], capacity, like.shape[3])
        new_k = like.new_empty(shape)
        new_v = like.new_empty(shape)
        if buf is not None:
            n = self._length[layer_idx]
            new_k[:, :, :n] = buf[:, :, :n]
            new_v[:, :, :n] = self._values[layer_idx][:, :, :n]
        self._keys[layer_idx] = new_k
        self._values[layer_idx] = new_v

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        start = self._length.get(layer_idx, 0)
        end = start + key_states.shape[2]
        self._ensure_capacity(layer_idx, key_states, end)
        self._keys[layer_idx][:, :, start:end] = key_states
        self._values[layer_idx][:, :, start:end] = value_states
        self._length[layer_idx] = end
        return self._keys[layer_idx][:, :, :end], self._values[layer_idx][:, :, :end]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.seq_length

    def commit(self) -> None:
        """Record that every layer now holds the same number of positions (called after a forward)."""
        lengths = set(self._length.values())
        if len(lengths) > 1:
            raise RuntimeError(f"drafter cache layers disagree on length: {sorted(lengths)}")
        self.seq_length = lengths.pop() if lengths else 0

    def crop(self, length: int) -> None:
        """Keep only the first `length` positions (drop rejected or speculative entries)."""
        if length < 0 or length > self.seq_length:
            raise ValueError(f"cannot crop drafter cache of length {self.seq_length} to {length}")
        for layer_idx in self._length:
            self._length[layer_idx] = length
        self.seq_length = length

    def reset(self) -> None:
        self._keys.clear()
        self._values.clear()
        self._length.clear()
        self.seq_length = 0
