"""Attention that gives a query the same bits in a one-token step and in a verification pass (CPU).

A verification pass runs the target over several tokens at once; plain greedy runs it one token at a time.
For speculation to return greedy's text *by construction*, each row of the pass must be computed exactly as the
one-token step computes it. torch's attention kernels do not promise that: `scaled_dot_product_attention` for the
last query alone differs from the same query inside a 4-query call, in bfloat16 and float32 alike
(docs/verification.md). `exact_attention_forward` is transformers' attention-function signature over a small C
kernel (`kernels/exact_attention.c`) that walks each query's visible keys in column order, one key at a time, with
float32 accumulation: the order of every addition depends only on which keys the query sees, never on how many
queries, masked columns (padding, a tree's other branches, a batch's holes) or threads share the call. So a chain,
a token tree and a batch all give each query the one-token step's bits, in float32, bfloat16 and float16.

The kernel is compiled once per machine (`kernels/native.py`); `available()` says whether that worked and
`unavailable_reason()` why not.
`exact_attention(model)` runs a CPU target on it inside a block (registered as `ATTENTION_NAME`, with sdpa's
boolean masks); `oneiro_hf.cpu_kernels` enters it for every pass, one-token steps included.
"""

from __future__ import annotations

import ctypes
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from .attention_switch import AttentionSwitch
from .native import NativeKernel

ATTENTION_NAME = "oneiro_exact"
DTYPES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
# targets whose attention implementation this replaces inside `exact_attention` (both take 4-D boolean masks here)
REPLACED = ("sdpa", "eager", "oneiro_grouped_sdpa")

KERNEL = NativeKernel("exact_attention.c", "oneiro_exact_attention",
                      [ctypes.c_void_p] * 5 + [ctypes.c_long] * 17 + [ctypes.c_float] * 2 + [ctypes.c_int] * 2,
                      name="exact attention kernel")
_switch = AttentionSwitch(ATTENTION_NAME)


def available() -> bool:
    """Whether the exact kernel builds and loads here (the first call may compile it: about a second)."""
    return KERNEL.available()


def unavailable_reason() -> str | None:
    """Why the kernel is not available (None when it is, or before anything tried to load it)."""
    return KERNEL.unavailable_reason()


def _mask_argument(attention_mask: torch.Tensor | None, batch: int, queries: int, keys: int):
    """(uint8 mask tensor or None, batch stride, query stride) for the kernel, from transformers' boolean mask."""
    if attention_mask is None:
        return None, 0, 0
    if attention_mask.dtype != torch.bool:
        raise ValueError(
            f"exact attention takes boolean masks (sdpa's), got {attention_mask.dtype}. Fix: build the mask with "
            "transformers' sdpa_mask (the target's attention implementation is registered with it).")
    mask = attention_mask[..., :keys]
    if mask.dim() != 4 or mask.shape[1] != 1 or mask.shape[0] not in (1, batch) or mask.shape[2] != queries:
        raise ValueError(f"exact attention takes a (batch or 1, 1, {queries}, keys) mask, got {tuple(mask.shape)}. "
                         "Fix: pass one mask for all heads (sdpa's layout).")
    if mask.stride(-1) != 1:
        mask = mask.contiguous()
    return mask, (mask.stride(0) if mask.shape[0] == batch and batch > 1 else 0), mask.stride(2)


def exact_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                            attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                            softcap: float | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature. query: (B, H, q, D); key, value: (B, H_kv, k, D), H a multiple of
    H_kv; attention_mask: (B or 1, 1, q, >= k) bool (True: attend), or None for causal attention aligned to the last
    key. Returns ((B, q, H, D), None), each query row computed as a one-token call computes it (module docstring)."""
    if dropout != 0.0 or (torch.is_grad_enabled() and query.requires_grad):
        raise ValueError("exact attention is an inference kernel (no dropout, no gradient). Fix: train outside "
                         "oneiro_hf.cpu_kernels, or run the forward under torch.no_grad().")
    for name in ("position_bias", "s_aux", "sinks"):
        if kwargs.get(name) is not None:
            raise ValueError(f"exact attention does not take `{name}`. Fix: use a supported target "
                             "(docs/bring_your_own_target.md) or run outside oneiro_hf.cpu_kernels.")
    if query.device.type != "cpu" or query.dtype not in DTYPES or not (query.dtype == key.dtype == value.dtype):
        raise ValueError(f"exact attention runs on CPU float32/bfloat16/float16 tensors of one dtype, got "
                         f"{query.dtype}/{key.dtype}/{value.dtype} on {query.device}. Fix: run the target on a CPU "
                         "in one of those dtypes, or outside oneiro_hf.cpu_kernels.")
    batch, heads, queries, dim = query.shape
    kv_heads, keys = key.shape[1], key.shape[2]
    query, key, value = (t if t.stride(-1) == 1 else t.contiguous() for t in (query, key, value))
    mask, m_sb, m_sq = _mask_argument(attention_mask, batch, queries, keys)
    out = torch.empty((batch, queries, heads, dim), dtype=query.dtype)
    k_sb = key.stride(0) if batch > 1 else 0
    v_sb = value.stride(0) if batch > 1 else 0
    status = KERNEL.function()(
        query.data_ptr(), key.data_ptr(), value.data_ptr(), mask.data_ptr() if mask is not None else None,
        out.data_ptr(), batch, heads, kv_heads, queries, keys, dim, query.stride(0), query.stride(1),
        query.stride(2), k_sb, key.stride(1), key.stride(2), v_sb, value.stride(1), value.stride(2), m_sb, m_sq,
        float(scaling if scaling is not None else dim ** -0.5), float(softcap or 0.0), DTYPES[query.dtype],
        torch.get_num_threads())
    if status != 0:
        raise RuntimeError(f"exact attention failed (head dimension {dim}, {heads} heads on {kv_heads} key/value "
                           "heads): query heads must be a multiple of key/value heads. Fix: run this target "
                           "outside oneiro_hf.cpu_kernels.")
    return out, None


AttentionInterface.register(ATTENTION_NAME, exact_attention_forward)
AttentionMaskInterface.register(ATTENTION_NAME, sdpa_mask)


def applies(model: torch.nn.Module) -> bool:
    """Whether `exact_attention(model)` would run `model` on the exact kernel: a CPU target in float32, bfloat16 or
    float16 whose attention is sdpa or eager (or already the exact one), and the kernel builds here."""
    param = next(model.parameters(), None)
    implementation = getattr(model.config, "_attn_implementation", None)
    if not (param is not None and param.device.type == "cpu" and param.dtype in DTYPES
            and implementation in (*REPLACED, ATTENTION_NAME)):
        return False
    if not available():
        _say_unavailable()
        return False
    return True


_said_unavailable = False


def _say_unavailable() -> None:
    """Once per process: the kernel did not build, so passes run torch's attention (and can round unlike steps)."""
    global _said_unavailable
    if not _said_unavailable:
        _said_unavailable = True
        warnings.warn(f"oneiro-hf runs torch's attention instead of its exact kernel: {unavailable_reason()}",
                      RuntimeWarning, stacklevel=4)


@contextmanager
def exact_attention(model: torch.nn.Module) -> Iterator[bool]:
    """Run `model` on the exact attention kernel inside the block where it `applies`; yields whether it does. Blocks
    may nest and overlap across threads: the last one to end sets the model's own implementation back."""
    with _switch.held(model, applies) as active:
        yield active
