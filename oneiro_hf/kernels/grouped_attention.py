"""Attention for verification passes: grouped-query attention without copying the target's cache.

transformers' sdpa attention copies each layer's keys and values to every query head (`repeat_kv`) for a pass
of several tokens with a mask, which every verification pass is. `grouped_sdpa_attention` computes the same
attention with each group's query heads stacked along the query axis, (B, H, q, D) -> (B, H_kv, g*q, D) with g
= H / H_kv, and the mask repeated g times along that axis, so SDPA reads every key/value head once; everything
else (one query token, no mask, a per-head mask, position biases, softcap, dropout) goes to transformers' own
sdpa function. `grouped_attention(model)` runs a target that uses "sdpa" with it (registered as
`ATTENTION_NAME`) while a generate call with a drafter runs. docs/design.md ("The cache is read once per
key/value head") says why.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from .attention_switch import AttentionSwitch
from .exact_attention import ATTENTION_NAME as EXACT_ATTENTION_NAME

ATTENTION_NAME = "oneiro_grouped_sdpa"
_switch = AttentionSwitch(ATTENTION_NAME)


def grouped_sdpa_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature. query: (B, H, q, D); key, value: (B, H_kv, k, D); attention_mask:
    (B or 1, 1, q, k) bool (True: attend) or additive. Returns ((B, q, H, D), None) as transformers' sdpa does."""
    groups = getattr(module, "num_key_value_groups", 1)
    q = query.shape[2]
    plain = (
        groups == 1 or q == 1 or attention_mask is None or attention_mask.shape[1] != 1 or dropout != 0.0
        or kwargs.get("position_bias") is not None or kwargs.get("softcap") is not None
    )
    if plain:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    batch, heads, _, dim = query.shape
    stacked = query.reshape(batch, key.shape[1], groups * q, dim)  # head h = kv_head * groups + g: rows g*q + i
    mask = attention_mask.repeat(1, 1, groups, 1)
    out = F.scaled_dot_product_attention(stacked, key, value, attn_mask=mask, scale=scaling)
    return out.reshape(batch, heads, q, value.shape[-1]).transpose(1, 2).contiguous(), None


AttentionInterface.register(ATTENTION_NAME, grouped_sdpa_attention)
AttentionMaskInterface.register(ATTENTION_NAME, sdpa_mask)


def is_sdpa(implementation: str | None) -> bool:
    """Whether an attention implementation takes sdpa's masks (transformers' own, the grouped one here, or
    `exact_attention`'s)."""
    return implementation in ("sdpa", ATTENTION_NAME, EXACT_ATTENTION_NAME)


@contextmanager
def grouped_attention(model) -> Iterator[None]:
    """Run `model` with `grouped_sdpa_attention` inside the block if it uses sdpa; other implementations are left
    alone. Calls may overlap (threads sharing a target): the last one to end sets "sdpa" back."""
    with _switch.held(model, lambda m: m.config._attn_implementation == "sdpa"):
        yield
