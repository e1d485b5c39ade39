"""The drafter's teacher-forced context in one generate call: its KV cache, kept in step with the accepted sequence.

Drafter position p takes (h_{p-1}, x_p): the target's state before a token and the token. Positions
`first..true_len` are **teacher-forced** (the target's real states and accepted tokens) and fill the cache's
first `true_len - offset` entries, `offset = first - 1`; speculative entries (chain drafts, tree nodes) sit
after them and are cropped at the next catch-up. Newly accepted states wait in `pending` until a latent draft
is wanted, then go through the drafter in one batched causal pass (`catch_up`); `step` feeds the drafter's own
predictions. `window` bounds the first catch-up to the latest positions; with exact verified context the
catch-up writes the target's own keys and values for positions it has run (`exact_len`). docs/design.md
("Which cache", and "Exact verified context") says why.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .kv_cache import DrafterKVCache


class DrafterContext:
    """Teacher-forced drafter context of one sequence in a generate call (a batch of prompts holds one per row)."""

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
        self.exact = bool(drafter.context_layers)
        self.exact_len = 0  # exact context: absolute positions first..exact_len hold exact entries
        self.pending_inputs: list[torch.Tensor] = []  # exact context: (1, n, c, H) the copied layers' true inputs

    def observe(self, states: torch.Tensor, layer_inputs: torch.Tensor | None = None) -> None:
        """states: (1, n, k*H) the drafter's input states (`OneiroDrafter.input_states`) at the next n accepted
        positions (after the prefill: every prompt position but the last); layer_inputs: (1, n, c, H) the copied
        layers' inputs at the same positions (`OneiroDrafter.context_inputs`), which an exact-context drafter needs."""
        if self.exact:
            if layer_inputs is None:
                raise RuntimeError(
                    "this drafter attends to exact context but was given no layer inputs. Fix: report this as a bug "
                    "(observe must get OneiroDrafter.context_inputs of the same pass)."
                )
            self.pending_inputs.append(layer_inputs)
        self.pending.append(states)

    def observe_pass(self, hidden_states: tuple, keep: slice | list[int]) -> None:
        """Observe the accepted positions `keep` (a slice or indices along T) of a target pass's `hidden_states`
        (L+1 entries (1, T, H), None where not requested): the drafter's input states and, for exact context, the
        copied layers' inputs."""
        inputs = self.drafter.context_inputs(hidden_states)
        self.observe(self.drafter.input_states(hidden_states)[:, keep], None if inputs is None else inputs[:, keep])

    @property
    def teacher_forced(self) -> int:
        """How many cache entries are teacher-forced (the first ones)."""
        return self.true_len - self.offset

    def key_positions(self) -> torch.Tensor:
        """(teacher_forced,) absolute positions of the teacher-forced cache entries."""
        return torch.arange(self.offset + 1, self.true_len + 1)

    def catch_up(self, input_ids: torch.LongTensor) -> torch.Tensor:
        """input_ids (1, T) the accepted sequence -> (1, 1, H) the predicted state at position T-1.

        Drops speculative entries and feeds the pending states for positions true_len+1..T-1 (the first time,
        only the last `window` of them). `transition` feeds a long catch-up in chunks (TRANSITION_CHUNK)."""
        # speculative entries go; with exact context the last bonus token's entry too (it was the drafter's own)
        self.cache.crop(self.exact_len - self.offset if self.exact else self.teacher_forced)
        start, end = self.true_len + 1, input_ids.shape[1]  # positions start..end-1
        states = _take(self.pending, end - start)
        # exact context: the copied layers' inputs at positions start-1..end-2 (what the target ran since)
        inputs = _take(self.pending_inputs, end - start) if self.exact else None
        first_input = start - 1
        if self.true_len == 0 and self.window is not None and end - start > self.window:
            states = states[:, -self.window :]
            start = end - self.window
            self.offset = start - 1
        if self.exact:
            return self._catch_up_exact(states, inputs, first_input, input_ids)
        positions = torch.arange(start, end, device=input_ids.device).unsqueeze(0)
        out = self.drafter.transition(states, input_ids[:, start:end], positions, self.cache)
        self.true_len = end - 1
        return out[:, -1:]

    def step(
        self,
        predicted: torch.Tensor,
        tokens: torch.LongTensor,
        positions: torch.LongTensor | None = None,
        mask_fn: Callable[[int | None], torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """One step of the latent rollout: predicted (1, n, H) the drafter's final-normed states at the positions
        before `tokens` (1, n) -> (1, n, H) its predicted states at the tokens, appended as speculative entries.

        positions (1, n): the tokens' absolute positions; by default the n positions after the cache's last entry
        (a chain, one token after the other). mask_fn: each layer's mask over the cache and the new entries
        (`OneiroDrafter.transition`; a tree's siblings side by side), None for causal. The predicted states fill
        every input slot (`OneiroDrafter.recurrent_inputs`), as in training's rollout."""
        if positions is None:
            first = self.offset + self.cache.seq_length + 1
            positions = torch.arange(first, first + tokens.shape[1], device=tokens.device).unsqueeze(0)
        inputs = self.drafter.recurrent_inputs(predicted)
        return self.drafter.transition(inputs, tokens, positions, self.cache, mask_fn=mask_fn)

    def _catch_up_exact(self, states: torch.Tensor, inputs: torch.Tensor, first_input: int,
                        input_ids: torch.LongTensor) -> torch.Tensor:
        """Exact entries for the positions the target has run (inputs: (1, n, c, H) from position `first_input`
        on), then the full transition at the bonus token (T-1), from states[:, -1] (the target's state at T-2)."""
        end = input_ids.shape[1]
        lo = max(self.exact_len + 1, self.offset + 1)  # first position without an exact entry
        if lo < end - 1:
            positions = torch.arange(lo, end - 1, device=input_ids.device).unsqueeze(0)
            self.drafter.write_context(inputs[:, lo - first_input : end - 1 - first_input], positions, self.cache)
        position = torch.tensor([[end - 1]], device=input_ids.device)
        out = self.drafter.transition(states[:, -1:], input_ids[:, end - 1 : end], position, self.cache)
        self.true_len, self.exact_len = end - 1, end - 2
        return out


def _take(pending: list[torch.Tensor], expected: int) -> torch.Tensor:
    """The pending tensors as one (concatenated along positions), emptying the list; checks their count."""
    joined = torch.cat(pending, dim=1) if len(pending) > 1 else pending[0]
    if joined.shape[1] != expected:
        raise RuntimeError(
            f"drafter lost sync: {joined.shape[1]} states for {expected} positions. "
            "Fix: report this as a bug (each accepted position must be observed once)."
        )
    pending.clear()
    return joined
