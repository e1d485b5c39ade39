"""The drafter's teacher-forced context in one generate call: its KV cache, kept in step with the accepted sequence.

Drafter position p takes (h_{p-1}, x_p): the target's state before a token and the token. Positions
`first..true_len` are **teacher-forced** (built from the target's real states and accepted tokens); they fill
the cache's first `true_len - offset` entries, where `offset = first - 1`. Speculative entries (chain drafts,
tree nodes) sit after them and are cropped at the next catch-up. Target states of newly accepted positions
wait in `pending` until a latent draft is wanted, then go through the drafter in one batched causal pass.

`window` bounds the first catch-up: a prompt with more than `window` teacher-forceable positions feeds only
its last `window` ones, at their absolute positions (RoPE and sliding windows see the true distances), so the
catch-up's cost stops growing with the prompt. Drafters are trained on sequences of `--max_seq_len` tokens, so
attending further back is outside what they learned. Later catch-ups feed every new position (the cache then
holds at most `window` + generated positions). `window=None` feeds the whole prompt.

The chain generator (`OneiroCandidateGenerator`) and the tree builder (`LatentTreeDrafter`) both hold one.
"""

from __future__ import annotations

import torch

from .kv_cache import DrafterKVCache


class DrafterContext:
    """Teacher-forced drafter context of one generate call (batch size 1)."""

    def __init__(self, drafter, max_capacity: int | None = None, window: int | None = None) -> None:
        if window is not None and window < 1:
            raise ValueError(
                f"the drafter's context window must be >= 1 position or None (got {window}). "
                "Fix: pass oneiro_context_window=1024, or None for no bound."
            )
        self.drafter = drafter
        self.cache = DrafterKVCache(max_capacity=max_capacity)
        self.window = window
        self.true_len = 0  # absolute positions first..true_len hold teacher-forced entries
        self.offset = 0  # absolute position of cache entry i is offset + 1 + i
        self.pending: list[torch.Tensor] = []  # (1, n, k*H) target states not yet fed to the drafter

    def observe(self, states: torch.Tensor) -> None:
        """states: (1, n, k*H) the drafter's input states (`OneiroDrafter.input_states`) at the next n accepted
        positions (after the prefill: every prompt position but the last)."""
        self.pending.append(states)

    @property
    def teacher_forced(self) -> int:
        """How many cache entries are teacher-forced (the first ones)."""
        return self.true_len - self.offset

    def next_position(self) -> int:
        """The absolute position of the next entry appended to the cache."""
        return self.offset + self.cache.seq_length + 1

    def key_positions(self) -> torch.Tensor:
        """(teacher_forced,) absolute positions of the teacher-forced cache entries."""
        return torch.arange(self.offset + 1, self.true_len + 1)

    def catch_up(self, input_ids: torch.LongTensor) -> torch.Tensor:
        """input_ids (1, T) the accepted sequence -> (1, 1, H) the predicted state at position T-1.

        Drops speculative entries and feeds the pending states for positions true_len+1..T-1 (the first time,
        only the last `window` of them). `transition` feeds a long catch-up in chunks (TRANSITION_CHUNK)."""
        self.cache.crop(self.teacher_forced)
        start, end = self.true_len + 1, input_ids.shape[1]  # positions start..end-1
        states = torch.cat(self.pending, dim=1) if len(self.pending) > 1 else self.pending[0]
        if states.shape[1] != end - start:
            raise RuntimeError(
                f"drafter lost sync: {states.shape[1]} states for {end - start} positions. "
                "Fix: report this as a bug (each accepted position must be observed once)."
            )
        self.pending = []
        if self.true_len == 0 and self.window is not None and end - start > self.window:
            states = states[:, -self.window :]
            start = end - self.window
            self.offset = start - 1
        positions = torch.arange(start, end, device=input_ids.device).unsqueeze(0)
        out = self.drafter.transition(states, input_ids[:, start:end], positions, self.cache)
        self.true_len = end - 1
        return out[:, -1:]
