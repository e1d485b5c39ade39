"""Training-time rollouts: K draft steps at every position in one pass, exactly as drafting runs them.

`parallel_rollout` runs the drafter's own transition (`OneiroDrafter.run_layers`) with `rollout_mask`, so
step k at index i equals the k-th draft step of the chain started from the true state at index i - k + 1
(tests check this against sequential `transition` calls on every supported architecture).
"""

from __future__ import annotations

from typing import Any

import torch


class _RolloutCache:
    """Stands in for the KV cache in parallel rollouts: each step's keys/values are appended along the
    sequence axis, so step k attends over [step 1 | step 2 | ... | step k] keys under ``rollout_mask``."""

    def __init__(self) -> None:
        self.keys: dict[int, list[torch.Tensor]] = {}
        self.values: dict[int, list[torch.Tensor]] = {}

    def update(self, key_states, value_states, layer_idx, *args: Any, **kwargs: Any):
        ks = self.keys.setdefault(layer_idx, [])
        vs = self.values.setdefault(layer_idx, [])
        ks.append(key_states)
        vs.append(value_states)
        if len(ks) == 1:
            return key_states, value_states
        return torch.cat(ks, dim=2), torch.cat(vs, dim=2)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0


def rollout_mask(
    length: int, step: int, window: int | None, device: torch.device, first: int = 0, exact: bool = False
) -> torch.Tensor:
    """Boolean (1, 1, Q, Kv) mask for the queries of rollout step ``step`` (1-based).

    Query index i belongs to the chain started at index s = i - step + 1. It sees step-1 keys at indices
    <= s (the teacher-forced prefix) and, for j = 2..step, the step-j key at index s + j - 1. Step 1 covers
    all ``length`` indices; later steps only the suffix ``[first, length)`` (Q = length - first), so the keys
    are [step 1: length | step 2..step: length - first each].

    ``exact`` (exact verified context): the keys start with one more block of ``length``, the exact keys of
    every index (``OneiroDrafter.attend_context``); a chain sees those at indices < s and only its own step-1
    key at s, as drafting does (the bonus token's entry is the drafter's own, the ones before it exact).
    """
    first = first if step > 1 else 0
    rows = torch.arange(first, length, device=device).unsqueeze(1)  # query indices
    full = torch.arange(length, device=device).unsqueeze(0)
    suffix = torch.arange(first, length, device=device).unsqueeze(0)
    start = rows - step + 1  # each query's chain start
    blocks = [full < start, full == start] if exact else [full <= start]
    prefix_blocks = len(blocks)
    for j in range(2, step + 1):
        blocks.append(suffix == rows - step + j)
    if window is not None:
        for j in range(len(blocks)):
            blocks[j] = blocks[j] & ((full if j < prefix_blocks else suffix) > rows - window)
    return torch.cat(blocks, dim=1)[None, None]


def parallel_rollout(
    drafter: Any,
    states: torch.Tensor,
    token_ids: torch.LongTensor,
    position_ids: torch.LongTensor,
    steps: int,
    first_index: int = 0,
    context: torch.Tensor | None = None,
) -> list[torch.Tensor]:
    """Run ``steps`` draft steps at every position at once; returns each step's predicted states (B, L, D).

    ``states[:, i]`` is the true input state (B, L, k*D; ``OneiroDrafter.input_states``) before token
    ``token_ids[:, i]``. Output k (0-based) at index i is the
    (k+1)-th step of the chain started from the true state at index i - k. Runs the drafter's own transition
    (``OneiroDrafter.run_layers``, as drafting does) with the rollout's masks.

    Step 1 runs over all indices (its keys are the teacher-forced context every chain attends to); steps >= 2
    only over ``[first_index, L)``, which is exact for every chain started at or after ``first_index`` (use
    ``first_index = first loss index - (steps - 1)`` to skip work on prompt positions). Outputs of steps >= 2
    before ``first_index`` are zeros.

    ``context`` (B, L, c, D): for a drafter with exact verified context, the copied layers' true inputs at the
    position of each token (``OneiroDrafter.context_inputs``); their keys come first and each chain attends to
    them before its start (``rollout_mask(exact=True)``).
    """
    bound = drafter.require_bound()
    emb = bound.embed_tokens(token_ids)
    length = token_ids.shape[1]
    first = min(max(int(first_index), 0), length - 1)
    cache = _RolloutCache()
    exact = context is not None
    if exact:
        drafter.attend_context(context, position_ids, cache)
    rotary = drafter.rotary_embeddings(emb, position_ids)
    suffix_rotary = {t: tuple(r[:, first:] for r in cs) for t, cs in rotary.items()}
    masks: dict[tuple[int, Any], torch.Tensor] = {}
    outputs: list[torch.Tensor] = []
    for k in range(1, steps + 1):
        if k == 1:
            current, tok, pos, rot = states, emb, position_ids, rotary
        else:
            prev = outputs[-1][:, first:]  # step k-1 on the suffix
            # index i takes step k-1's output at i-1; the first suffix index has none (never used by a loss)
            # speculative positions: the predicted state fills every input slot, as in drafting
            current = torch.cat([states[:, first : first + 1], drafter.recurrent_inputs(prev[:, :-1])], dim=1)
            tok, pos, rot = emb[:, first:], position_ids[:, first:], suffix_rotary

        def mask_for_window(window: int | None, k: int = k) -> torch.Tensor:
            if (k, window) not in masks:
                masks[(k, window)] = rollout_mask(length, k, window, emb.device, first, exact)
            return masks[(k, window)]

        x = drafter.run_layers(drafter.fuse_inputs(current, tok), rot, pos, mask_for_window, cache)
        if k > 1 and first > 0:
            x = torch.cat([x.new_zeros(x.shape[0], first, x.shape[2]), x], dim=1)
        outputs.append(x)
    return outputs


def rollout_start(mask: torch.Tensor, steps: int) -> int:
    """The ``first_index`` for ``parallel_rollout``: chains of ``steps`` steps ending at any loss position
    start at or after it."""
    rows = mask.any(-1)
    if not bool(rows.any()):
        return 0
    first_loss = int(mask[rows].float().argmax(-1).min())
    return max(0, first_loss - (steps - 1))
