"""`half_linear`: 16-bit linears on the stored weights for CPUs without 16-bit units. Every row gets the bits it has
alone, whatever rows, strides and threads come with it; each output is the float32 sum rounded once; and a target
run on it gives a verification pass the one-token steps' logits."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny import ARCHS, make_model, pass_and_steps, random_prompt

from oneiro_hf import cpu_kernels
from oneiro_hf.kernels import half_linear
from oneiro_hf.kernels.half_linear import half_linear as linear

pytestmark = pytest.mark.skipif(not half_linear.KERNEL.available(),
                                reason=f"the 16-bit kernel does not build here: {half_linear.KERNEL.unavailable_reason()}")

DTYPES = (torch.bfloat16, torch.float16)


def _case(rows: int, width: int, outputs: int, dtype: torch.dtype, seed: int, bias: bool):
    gen = torch.Generator().manual_seed(seed)
    wide = torch.randn(rows, width + 5, generator=gen).to(dtype)  # x is a strided view of a wider tensor
    weight = (torch.randn(outputs, width, generator=gen) / width ** 0.5).to(dtype)
    b = torch.randn(outputs, generator=gen).to(dtype) if bias else None
    return wide[:, 2:2 + width], weight, b


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 20), width=st.integers(1, 70), outputs=st.integers(1, 21), bias=st.booleans(),
       dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2 ** 16))
def test_every_row_has_the_bits_it_has_alone(rows, width, outputs, bias, dtype, seed) -> None:
    """Widths below, at and past multiples of the 8 lanes; output counts across the 8-wide blocks; row counts across
    the 3-row tiles."""
    x, weight, b = _case(rows, width, outputs, dtype, seed, bias)
    full = linear(x, weight, b)
    assert full.shape == (rows, outputs) and full.dtype == dtype
    for i in range(rows):
        assert torch.equal(linear(x[i:i + 1], weight, b)[0], full[i]), f"row {i} alone differs"
    start = rows // 3
    assert torch.equal(linear(x[start:], weight, b), full[start:])
    assert torch.equal(linear(x.reshape(1, rows, width), weight, b)[0], full)  # (batch, tokens, in) too


@pytest.mark.parametrize("dtype", DTYPES)
def test_rows_do_not_depend_on_threads_or_chunks(dtype: torch.dtype) -> None:
    """More rows than one cached chunk (48) and threads splitting the outputs."""
    x, weight, b = _case(100, 136, 43, dtype, seed=1, bias=True)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = linear(x, weight, b)
        torch.set_num_threads(2)
        two = linear(x, weight, b)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one, two)
    assert torch.equal(linear(x[47:52], weight, b), one[47:52])


@pytest.mark.parametrize("dtype", DTYPES)
def test_each_output_is_the_float32_sum_rounded_once(dtype: torch.dtype) -> None:
    """Against a float64 reference: the float32 sum's error is far below a 16-bit step, so the result is the exact
    sum rounded to the dtype, or its neighbour where the sum falls near a rounding boundary."""
    x, weight, b = _case(9, 300, 40, dtype, seed=2, bias=True)
    out = linear(x, weight, b).double()
    exact = x.double() @ weight.double().T + b.double()
    rounded = exact.to(dtype).double()
    step = (rounded.abs() * (2 ** -7 if dtype == torch.bfloat16 else 2 ** -10)).clamp_min(1e-30)
    assert ((out - rounded).abs() <= step).all()
    assert (out == rounded).float().mean() > 0.95


def test_nan_and_infinity_pass_through() -> None:
    x = torch.ones(2, 16, dtype=torch.bfloat16)
    weight = torch.ones(3, 16, dtype=torch.bfloat16)
    x[0, 3] = float("nan")
    weight[1, 15] = float("inf")
    out = linear(x, weight)
    assert out[0].isnan().all() and out[1, 1] == float("inf") and out[1, 0] == 16 and out[1, 2] == 16


def test_bad_input_names_the_fix() -> None:
    weight = torch.ones(3, 16, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="bfloat16 or float16.*Fix: use F.linear"):
        linear(torch.ones(2, 16), weight)
    with pytest.raises(ValueError, match="bfloat16 or float16.*Fix"):
        linear(torch.ones(2, 16, dtype=torch.float16), weight)
    with pytest.raises(ValueError, match="12 features, the weight takes 16.*Fix"):
        linear(torch.ones(2, 12, dtype=torch.bfloat16), weight)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("arch", ARCHS)
def test_a_target_on_it_gives_a_pass_the_one_token_steps_logits(arch: str, dtype: torch.dtype, monkeypatch) -> None:
    """As on a CPU without 16-bit units (where every linear runs on the kernel), on any CPU."""
    monkeypatch.setattr(half_linear, "has_units", lambda d: d == torch.float32)
    calls = []
    real = half_linear.half_linear
    monkeypatch.setattr(half_linear, "half_linear", lambda *a: calls.append(a[0].shape) or real(*a))
    model = make_model(arch, dtype=dtype)
    ids = random_prompt(24, seed=7)
    with cpu_kernels(model) as kernels:
        assert kernels.exact and kernels.half_linears and kernels.prepacked == kernels.linears
        multi, steps = pass_and_steps(model, ids, 15)
    assert torch.equal(multi, steps)
    assert any(shape[0] == 9 for shape in calls) and any(shape[0] == 1 for shape in calls)
