"""16-bit linear layers on CPUs without 16-bit matrix units, on the weights as they are stored.

A bfloat16 (or float16) checkpoint is what transformers 5 loads, and most CPUs have no bfloat16 dot product
(avx512_bf16 / AMX; AVX2 machines and most AMD server parts before Zen 4): torch's 16-bit linears there cost more
the more rows a pass has (SmolLM2 in bfloat16 on an AVX2 CPU: 8 tokens cost 4.5 times one), and a float32 copy of the
weights costs twice their memory (6.17 GB more for Qwen2.5-Coder-1.5B) and reads twice the bytes a one-token step
needs. `half_linear(x, weight, bias)` runs a small C kernel (`kernels/half_linear.c`) that widens each stored weight
to float32 in registers as it streams past, accumulates in float32 and rounds each output once: a one-token step
reads the 16-bit bytes once, the rows of a pass share each widened weight, and no copy is kept.

Exact by construction: each output element is one accumulation in a fixed order that depends on nothing but the
layer's width (the C source states it), so a row gives the same bits alone, in a verification pass, a token tree,
a batch or a prompt, whatever the thread count. `prepacked_linear` routes 16-bit layers here where `applies`.
"""

from __future__ import annotations

import ctypes
import functools

import torch

from .native import NativeKernel

DTYPES = {torch.bfloat16: 1, torch.float16: 2}

KERNEL = NativeKernel("half_linear.c", "oneiro_half_linear",
                      [ctypes.c_void_p] * 4 + [ctypes.c_long] * 4 + [ctypes.c_int] * 2, name="16-bit linear kernel")


@functools.cache
def has_units(dtype: torch.dtype) -> bool:
    """Whether this CPU has matrix units for `dtype` that oneDNN uses (avx512_bf16/AMX for bfloat16,
    avx512_fp16/AMX-FP16 for float16); float32 always counts as having them."""
    if dtype == torch.bfloat16:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    if dtype == torch.float16:
        return bool(torch.ops.mkldnn._is_mkldnn_fp16_supported())
    return True


def applies(dtype: torch.dtype) -> bool:
    """Whether a CPU linear layer of `dtype` runs on `half_linear`: a 16-bit dtype this CPU has no matrix units
    for, and the kernel builds here."""
    return dtype in DTYPES and not has_units(dtype) and KERNEL.available()


def half_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x (..., in) @ weight.T + bias for bfloat16 or float16 CPU tensors of one dtype, weight (out, in), bias (out,)
    or None: (..., out) in that dtype, accumulated in float32 and rounded once, every row with the bits it has
    alone (module docstring). ValueError for other dtypes or devices; KernelUnavailable (with the fix) when the
    kernel cannot be built here."""
    if (x.dtype not in DTYPES or x.dtype != weight.dtype or (bias is not None and bias.dtype != x.dtype)
            or x.device.type != "cpu" or weight.device.type != "cpu"):
        raise ValueError(f"half_linear runs bfloat16 or float16 CPU tensors of one dtype, got x {x.dtype} on "
                         f"{x.device} and weight {weight.dtype} on {weight.device}. Fix: use F.linear for other "
                         "dtypes or devices.")
    out_features, in_features = weight.shape
    if x.shape[-1] != in_features:
        raise ValueError(f"half_linear: x has {x.shape[-1]} features, the weight takes {in_features}. Fix: pass the "
                         "layer's own input.")
    rows = x.numel() // in_features if in_features else 0
    flat = x.reshape(rows, in_features)
    if flat.stride(-1) != 1 or (rows > 1 and flat.stride(0) < in_features):
        flat = flat.contiguous()
    weight = weight if weight.is_contiguous() else weight.contiguous()
    bias = None if bias is None else bias.contiguous()
    out = torch.empty((rows, out_features), dtype=x.dtype)
    if rows and out_features:
        status = KERNEL.function()(flat.data_ptr(), weight.data_ptr(), None if bias is None else bias.data_ptr(),
                                   out.data_ptr(), rows, in_features, out_features, flat.stride(0) if rows else 0,
                                   DTYPES[x.dtype], torch.get_num_threads())
        if status != 0:
            raise MemoryError(f"half_linear could not allocate a float32 copy of {rows} x {in_features} inputs. "
                              "Fix: pass fewer tokens at once (a shorter prompt chunk or a smaller batch).")
    return out.reshape(*x.shape[:-1], out_features)
