"""`oneiro_hf.kernels.exact_attention`: every query row of a pass has, bit for bit, the value a one-token call over the same
visible keys gives it (chains, token trees, padded batches with holes; float32, bfloat16, float16), close to sdpa's
attention; and every supported architecture's k-token pass gives each row the logits of k one-token steps inside
`cpu_kernels(exact=True)`."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny import ARCHS, make_model, pass_and_steps, random_prompt

from oneiro_hf import cpu_kernels
from oneiro_hf.kernels import exact_attention, half_linear, native
from oneiro_hf.kernels.exact_attention import ATTENTION_NAME, exact_attention_forward
from oneiro_hf.kernels.native import NativeKernel

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 2e-3}


class _Module:
    """What the attention function reads of a layer: nothing but the signature's arguments here."""


def _one_query(query, key, value, mask_row, b, i, scaling):
    """Query i of batch row b alone over its visible keys only, packed in column order: the one-token call."""
    keep = torch.nonzero(mask_row).flatten()
    out, _ = exact_attention_forward(_Module(), query[b:b + 1, :, i:i + 1], key[b:b + 1, :, keep],
                                     value[b:b + 1, :, keep], None, scaling=scaling)
    return out[0, 0]


@settings(max_examples=40, deadline=None)
@given(batch=st.integers(1, 3), kv_heads=st.integers(1, 3), groups=st.integers(1, 3),
       dim=st.sampled_from([8, 24, 64, 80]), cached=st.integers(0, 70), width=st.integers(1, 12),
       dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**16))
def test_each_row_is_the_one_token_calls_bits(batch, kv_heads, groups, dim, cached, width, dtype, seed) -> None:
    """Cached columns with random padding and holes, then `width` tree nodes, each seeing random ancestors and
    itself: every row equals its one-query call over its visible keys (bitwise) and sdpa within rounding."""
    gen = torch.Generator().manual_seed(seed)
    heads, keys = kv_heads * groups, cached + width
    query = torch.randn(batch, heads, width, dim, generator=gen).to(dtype)
    key = torch.randn(batch, kv_heads, keys, dim, generator=gen).to(dtype)
    value = torch.randn(batch, kv_heads, keys, dim, generator=gen).to(dtype)
    seen = torch.rand(batch, 1, 1, cached, generator=gen) > 0.2  # padding and holes in the cache
    ancestors = (torch.rand(batch, 1, width, width, generator=gen) < 0.4).tril(-1) | torch.eye(width, dtype=torch.bool)
    mask = torch.cat([seen.expand(-1, -1, width, -1), ancestors], dim=-1)
    out, _ = exact_attention_forward(_Module(), query, key, value, mask, scaling=0.3)
    assert out.shape == (batch, width, heads, dim) and out.dtype == dtype
    for b in range(batch):
        for i in range(width):
            assert torch.equal(out[b, i], _one_query(query, key, value, mask[b, 0, i], b, i, 0.3)), (b, i)
    ref = F.scaled_dot_product_attention(query.float(), key.float().repeat_interleave(groups, 1),
                                         value.float().repeat_interleave(groups, 1), attn_mask=mask, scale=0.3)
    assert torch.allclose(out.float(), ref.transpose(1, 2), atol=TOLERANCE[dtype], rtol=TOLERANCE[dtype])


def test_no_mask_is_causal_to_the_last_key_and_threads_do_not_change_bits() -> None:
    torch.manual_seed(0)
    query, key, value = torch.randn(2, 4, 5, 32), torch.randn(2, 2, 40, 32), torch.randn(2, 2, 40, 32)
    causal = torch.ones(5, 40, dtype=torch.bool).tril(35)[None, None]
    plain, _ = exact_attention_forward(_Module(), query, key, value, None)
    masked, _ = exact_attention_forward(_Module(), query, key, value, causal.expand(2, -1, -1, -1))
    assert torch.equal(plain, masked)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        single, _ = exact_attention_forward(_Module(), query, key, value, causal)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(single, masked)


def test_bad_inputs_name_the_fix() -> None:
    query, key = torch.randn(1, 2, 3, 8), torch.randn(1, 1, 6, 8)
    with pytest.raises(ValueError, match="boolean masks.*Fix"):
        exact_attention_forward(_Module(), query, key, key, torch.zeros(1, 1, 3, 6))
    with pytest.raises(ValueError, match="one mask for all heads"):
        exact_attention_forward(_Module(), query, key, key, torch.ones(1, 2, 3, 6, dtype=torch.bool))
    with pytest.raises(ValueError, match="inference kernel.*Fix"):
        exact_attention_forward(_Module(), query.requires_grad_(), key, key, None)
    with pytest.raises(ValueError, match="one dtype.*Fix"):
        exact_attention_forward(_Module(), torch.randn(1, 2, 3, 8), key.double(), key.double(), None)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("arch", ARCHS)
def test_a_pass_gives_every_row_the_one_token_steps_logits(arch: str, dtype: torch.dtype) -> None:
    """Past the sliding window of the windowed architectures; float32 with its linears prepacked from one row."""
    model = make_model(arch, dtype=dtype)
    ids = random_prompt(24, seed=7)
    with cpu_kernels(model, exact=True) as kernels:
        assert kernels.exact_attention and model.config._attn_implementation == ATTENTION_NAME
        if dtype == torch.float32:
            assert kernels.prepacked == kernels.linears == kernels.from_one_row
        multi, steps = pass_and_steps(model, ids, 15)
    assert torch.equal(multi, steps)
    assert model.config._attn_implementation == "sdpa" and not exact_attention._switch.holds(model)


def test_bfloat16_targets_run_exact_by_default_and_the_label_says_so() -> None:
    model = make_model("qwen2", dtype=torch.bfloat16)
    with cpu_kernels(model) as kernels:
        assert kernels.exact and not kernels.grouped_attention
        linears = "16-bit" if half_linear.applies(torch.bfloat16) else "prepacked"  # no units: stored weights
        assert str(kernels) == f"exact attention + {linears} linears ({kernels.linears} of {kernels.linears} " \
                               f"layers; {kernels.linears} from one row)"
    with cpu_kernels(model, prepack=False) as kernels:
        assert str(kernels) == "exact attention"
    with cpu_kernels(make_model("qwen2")) as kernels:  # float32: grouped attention unless asked
        assert not kernels.exact_attention and kernels.grouped_attention


@pytest.mark.parametrize("arch", ARCHS)
def test_bfloat16_drafting_gives_same_kernel_greedy_for_chains_trees_and_batches(arch: str) -> None:
    """Tiny bfloat16 targets (random weights: near-ties everywhere) with a drafter that always drafts: the chain, the
    tree and a left-padded batch return greedy's tokens on the same kernels, and each batch row its prompt's own."""
    from tiny import FLAT_PROFILE

    from oneiro_hf import OneiroDrafter

    model = make_model(arch, dtype=torch.bfloat16, strength="prefix")
    drafter = OneiroDrafter.from_target(model)
    drafter.use_latency_profile(FLAT_PROFILE, learn=False)
    prompts = [random_prompt(n, seed=n) for n in (14, 9, 11)]
    singles, drafted = [], 0
    for ids in prompts:
        with cpu_kernels(model) as kernels:
            ref = model.generate(ids, max_new_tokens=20, do_sample=False)
        assert kernels.exact
        singles.append(ref[0, ids.shape[1]:])
        for tree in (False, True):
            out = model.generate(ids, max_new_tokens=20, do_sample=False, assistant_model=drafter, oneiro_tree=tree,
                                 oneiro_mode="latent")
            assert torch.equal(out, ref), f"{arch} {'tree' if tree else 'chain'}"
            drafted += drafter.last_stats.drafted_tokens
    width = max(p.shape[1] for p in prompts)
    ids = torch.stack([torch.cat([torch.zeros(width - p.shape[1], dtype=torch.long), p[0]]) for p in prompts])
    mask = torch.stack([torch.cat([torch.zeros(width - p.shape[1], dtype=torch.long), torch.ones(p.shape[1],
                                   dtype=torch.long)]) for p in prompts])
    with cpu_kernels(model):
        batch_ref = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=20, do_sample=False)
    for tree in (False, True):
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=20, do_sample=False,
                             assistant_model=drafter, oneiro_tree=tree, oneiro_mode="latent")
        assert torch.equal(out, batch_ref), f"{arch} batch {'tree' if tree else 'chain'}"
    for row, single in enumerate(singles):
        assert torch.equal(batch_ref[row, width:], single), f"{arch}: batch row {row} differs from its prompt alone"
    assert drafted > 0


def test_without_a_compiler_torchs_attention_runs_and_says_why_once(monkeypatch) -> None:
    monkeypatch.setattr(exact_attention, "KERNEL", NativeKernel("exact_attention.c", "oneiro_exact_attention", []))
    monkeypatch.setattr(exact_attention, "_said_unavailable", False)
    monkeypatch.setattr(native, "cpu_flags", lambda: "flags: a machine whose kernel is not cached")
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setattr(native.shutil, "which", lambda name: None)
    model = make_model("llama", dtype=torch.bfloat16)
    with pytest.warns(RuntimeWarning, match="instead of its exact kernel: no C compiler.*Fix"), \
            cpu_kernels(model, prepack=False) as kernels:
        assert not kernels.exact_attention and not kernels.exact and kernels.grouped_attention
    assert not exact_attention.available() and "Fix" in exact_attention.unavailable_reason()
    exact_attention.KERNEL.forget()
    monkeypatch.setenv("CC", "/nonexistent/cc")
    with pytest.raises(native.KernelUnavailable, match="could not run.*Fix"):
        exact_attention.KERNEL.function()
