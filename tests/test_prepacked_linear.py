"""Prepacked linear layers for CPU verification passes (oneiro_hf/kernels/prepacked_linear.py): the same layer outputs up to
float32 rounding, used only for multi-row inputs while a drafter's generate runs, and put back afterwards."""

from __future__ import annotations

import pytest
import torch
from tiny import ARCHS, greedy, make_model, random_prompt

from oneiro_hf import OneiroDrafter
from oneiro_hf.kernels import half_linear, prepacked_linear
from oneiro_hf.kernels.native import NativeKernel
from oneiro_hf.kernels.prepacked_linear import (
    NEVER,
    ROW_GRID,
    applies,
    choose_min_rows,
    decided_min_rows,
    measured_min_rows,
    measured_saving,
    packed_weight,
    prepacked_forward,
    prepacked_linears,
)

MIN_ROWS = 4  # a threshold the tests fix, so that which call runs does not depend on this machine's timings

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this torch has no oneDNN")


def _count_packed_calls(monkeypatch) -> list[int]:
    """Counts the rows of every call that ran on a prepacked weight."""
    calls: list[int] = []
    real = prepacked_linear._linear_on_packed

    def spy(x, packed, bias):
        calls.append(x.shape[0])
        return real(x, packed, bias)

    monkeypatch.setattr(prepacked_linear, "_linear_on_packed", spy)
    return calls


def test_a_layer_on_its_prepacked_weight_matches_f_linear_and_follows_weight_changes() -> None:
    torch.manual_seed(0)
    layer = torch.nn.Linear(24, 40)
    with torch.no_grad():
        for rows in (1, MIN_ROWS - 1, MIN_ROWS, 9):
            x = torch.randn(2, rows, 24) if rows == 9 else torch.randn(1, rows, 24)
            out = prepacked_forward(layer, x, MIN_ROWS)
            assert out.shape == layer(x).shape
            if x.shape[0] * x.shape[1] < MIN_ROWS:
                assert torch.equal(out, layer(x)), "few rows keep F.linear exactly"
            else:
                torch.testing.assert_close(out, layer(x), atol=1e-5, rtol=1e-5)
        first = packed_weight(layer)
        assert packed_weight(layer) is first, "reordered once, then reused"
        layer.weight.mul_(2.0)  # an in-place change bumps the version: the copy is made again
        assert packed_weight(layer) is not first
        x = torch.randn(1, 6, 24)
        torch.testing.assert_close(prepacked_forward(layer, x, MIN_ROWS), layer(x), atol=1e-5, rtol=1e-5)
    x = torch.randn(1, 6, 24, requires_grad=True)
    assert prepacked_forward(layer, x, MIN_ROWS).requires_grad, "with autograd on, F.linear runs (oneDNN's call has no grad)"


def test_the_threshold_is_the_row_count_that_makes_the_timings_cheapest() -> None:
    # {rows: (F.linear seconds, prepacked seconds)}
    assert choose_min_rows({1: (1.0, 1.2), 2: (2.0, 1.0), 3: (3.0, 1.1), 4: (3.0, 1.2)}) == 2
    assert choose_min_rows({1: (1.0, 0.5), 2: (1.0, 0.5)}) == 1, "gaining at every count: from one row on"
    assert choose_min_rows({1: (1.0, 1.3), 2: (1.0, 1.2), 4: (1.0, 1.01)}) == NEVER, "never gaining: F.linear"
    assert choose_min_rows({1: (1.0, 1.0), 2: (1.0, 0.99)}) == NEVER, "a gain under MIN_GAIN keeps F.linear"
    # one noisy count inside a run of gains does not push the threshold past the run
    assert choose_min_rows({2: (1.0, 0.6), 3: (1.0, 0.6), 4: (1.0, 1.05), 6: (1.0, 0.6), 8: (1.0, 0.6)}) == 2


def test_thresholds_are_measured_once_per_shape_and_only_gaining_layers_are_swapped(monkeypatch) -> None:
    timed: list[tuple[int, int]] = []
    real = prepacked_linear._time_rows

    def spy(layer, *args, **kwargs):
        timed.append((layer.out_features, layer.in_features))
        return real(layer, *args, **kwargs)

    monkeypatch.setattr(prepacked_linear, "_time_rows", spy)
    monkeypatch.setattr(prepacked_linear, "_min_rows", {})
    monkeypatch.setattr(prepacked_linear, "_rule", [])  # timed here, outside the suite's decided kernels
    model = make_model("llama")
    linears = [m for m in model.modules() if type(m) is torch.nn.Linear]
    shapes = {(m.out_features, m.in_features) for m in linears}
    thresholds = {m: measured_min_rows(m) for m in linears}
    assert sorted(timed) == sorted(shapes), "each weight shape timed once, whatever the number of its layers"
    assert all(t == NEVER or t in ROW_GRID for t in thresholds.values())
    with prepacked_linears(model):
        for m in linears:
            assert ("forward" in vars(m)) == (thresholds[m] != NEVER), "a layer that never gains keeps F.linear"
    assert len(timed) == len(shapes), "a generate call reuses what was measured"


def test_a_decided_rule_replaces_the_timing_inside_its_block(monkeypatch) -> None:
    monkeypatch.setattr(prepacked_linear, "_time_rows", lambda *a, **k: pytest.fail("timed inside a decided block"))
    model = make_model("llama")
    linears = [m for m in model.modules() if type(m) is torch.nn.Linear]
    lm_head = model.get_output_embeddings()
    with decided_min_rows(lambda layer: 1 if layer is lm_head else NEVER):
        assert measured_min_rows(lm_head) == 1 and measured_saving(lm_head) > 0
        with decided_min_rows(lambda layer: 4):  # the innermost block's rule applies
            assert {measured_min_rows(m) for m in linears} == {4}
        with prepacked_linears(model):
            assert [m for m in linears if "forward" in vars(m)] == [lm_head]
        assert all(measured_min_rows(m) == NEVER and measured_saving(m) == 0 for m in linears if m is not lm_head)


@pytest.mark.parametrize("arch", ARCHS)
def test_generate_with_a_drafter_runs_prepacked_linears_and_gives_greedy_tokens(arch: str, monkeypatch) -> None:
    model = make_model(arch)
    drafter = OneiroDrafter.from_target(model)
    monkeypatch.setattr(prepacked_linear, "measured_min_rows", lambda layer: MIN_ROWS)
    calls = _count_packed_calls(monkeypatch)
    ids = random_prompt(12, seed=1)
    ref = greedy(model, ids, 32)
    assert calls == [], "plain greedy never runs the prepacked layers"
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=32, do_sample=False, assistant_model=drafter,
                             oneiro_mode="latent", oneiro_cost_aware=False, oneiro_max_draft_tokens=6)
    assert torch.equal(out, ref)
    assert calls and min(calls) >= MIN_ROWS, "verification passes of MIN_ROWS+ tokens (and the prefill) ran prepacked"
    assert all("forward" not in vars(m) for m in [*model.modules(), *drafter.modules()]), \
        "the layers' own forwards are back"
    calls.clear()
    with torch.no_grad():
        off = model.generate(ids, max_new_tokens=32, do_sample=False, assistant_model=drafter,
                             oneiro_mode="latent", oneiro_cost_aware=False, oneiro_max_draft_tokens=6,
                             oneiro_prepack_cpu_weights=False)
    assert torch.equal(off, ref) and calls == []


@pytest.mark.parametrize("arch", ARCHS)
def test_the_drafters_copied_layers_run_prepacked_in_generate_and_release(arch: str, monkeypatch) -> None:
    """Only the drafter's layers gain here (one row: every drafting step), so every prepacked call is the drafter's."""
    import oneiro_hf

    model = make_model(arch)
    drafter = OneiroDrafter.from_target(model)
    own = {m for m in drafter.modules() if type(m) is torch.nn.Linear}
    assert own, "the drafter has linear layers of its own"
    monkeypatch.setattr(prepacked_linear, "measured_min_rows", lambda layer: 1 if layer in own else NEVER)
    calls = _count_packed_calls(monkeypatch)
    ids = random_prompt(12, seed=4)
    ref = greedy(model, ids, 32)
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=32, do_sample=False, assistant_model=drafter,
                             oneiro_mode="latent", oneiro_cost_aware=False, oneiro_max_draft_tokens=4)
    assert torch.equal(out, ref)
    assert calls.count(1) >= len(own), "one-row drafting steps ran on the drafter's prepacked weights"
    assert all("forward" not in vars(m) for m in own)
    held = sum(m.weight.numel() * m.weight.element_size() for m in own)
    assert oneiro_hf.release_cpu_kernels(drafter) == held and oneiro_hf.release_cpu_kernels(model) == 0


def test_the_profiled_drafter_call_runs_on_the_drafters_prepacked_weights_as_generate_does(monkeypatch) -> None:
    """`profile_drafter_step` prices the call generate makes: the drafter's own linears prepacked, not stock."""
    from oneiro_hf.drafting.latency import profile_drafter_step

    model = make_model("llama")
    drafter = OneiroDrafter.from_target(model)
    own = {m for m in drafter.modules() if type(m) is torch.nn.Linear}
    monkeypatch.setattr(prepacked_linear, "measured_min_rows", lambda layer: 1 if layer in own else NEVER)
    calls = _count_packed_calls(monkeypatch)
    step = profile_drafter_step(drafter, context_len=8, repeats=2)
    assert step["drafter_step_s"] > 0 and step["t1_s"] > 0
    assert calls.count(1) >= 4 * len(own), "every timed drafter call ran on the drafter's prepacked weights"
    assert all("forward" not in vars(m) for m in own)  # put back after the block


def test_a_layer_that_never_gains_keeps_f_linear_in_generate(monkeypatch) -> None:
    model = make_model("llama")
    drafter = OneiroDrafter.from_target(model)
    monkeypatch.setattr(prepacked_linear, "measured_min_rows", lambda layer: NEVER)
    calls = _count_packed_calls(monkeypatch)
    ids = random_prompt(12, seed=2)
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=24, do_sample=False, assistant_model=drafter,
                             oneiro_mode="latent", oneiro_cost_aware=False, oneiro_max_draft_tokens=6)
    assert torch.equal(out, greedy(model, ids, 24)) and calls == []


def test_cpu_targets_take_it_and_overlapping_calls_restore_once(monkeypatch) -> None:
    monkeypatch.setattr(prepacked_linear, "measured_min_rows", lambda layer: MIN_ROWS)
    model = make_model("llama")
    assert applies(model) and applies(make_model("llama").to(torch.bfloat16))
    assert not applies(make_model("llama").to(torch.float64))
    linears = [m for m in model.modules() if type(m) is torch.nn.Linear]
    first, second = prepacked_linears(model), prepacked_linears(model)
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)  # the other call still runs: its layers stay prepacked
    assert all("forward" in vars(m) for m in linears)
    second.__exit__(None, None, None)
    assert all("forward" not in vars(m) for m in linears)
    with pytest.raises(RuntimeError), prepacked_linears(model):  # put back when the call fails, too
        raise RuntimeError("generate failed")
    assert all("forward" not in vars(m) for m in linears)
    with prepacked_linears(model, enabled=False):
        assert all("forward" not in vars(m) for m in linears)


def test_a_memory_cap_copies_the_layers_that_save_most_per_byte_and_stays_within_it(monkeypatch) -> None:
    model = make_model("llama")
    drafter = OneiroDrafter.from_target(model)
    linears = [m for m in model.modules() if type(m) is torch.nn.Linear]
    # every shape gains from MIN_ROWS rows; the timings say the MLP's layers save twice as much per byte
    def saving(m):  # the drafter's layers too, when generate runs them
        return (2.0 if m.out_features == m.in_features else 4.0) * prepacked_linear.copy_bytes(m)

    monkeypatch.setattr(prepacked_linear, "measured_min_rows", lambda layer: MIN_ROWS)
    monkeypatch.setattr(prepacked_linear, "measured_saving", saving)
    total = prepacked_linear.parameter_bytes(model)
    cap = 0.3
    with prepacked_linears(model, max_memory=cap):
        copied = prepacked_linear.prepacked_layers(model)
        assert all(layer in prepacked_linear._packed for layer in copied)
        assert not any(layer in prepacked_linear._packed for layer in linears if layer not in copied), \
            "a layer left out by the cap holds no copy"
    used = sum(prepacked_linear.copy_bytes(m) for m in copied)
    assert 0 < used <= cap * total
    left_out = [m for m in linears if m not in copied]
    assert left_out, "the cap left some layers out (else the test proves nothing)"
    fits = [m for m in left_out if prepacked_linear.copy_bytes(m) <= cap * total - used]
    assert not fits, "a layer that still fits under the cap was left out"
    ranked = sorted(linears, key=lambda m: saving(m) / prepacked_linear.copy_bytes(m), reverse=True)
    assert ranked[0] in copied, "the best saving per byte is copied first"
    with prepacked_linears(model, max_memory=0):
        assert prepacked_linear.prepacked_layers(model) == {}, "a cap of 0 copies nothing"
    ids = random_prompt(12, seed=2)
    ref = greedy(model, ids, 24)
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=24, do_sample=False, assistant_model=drafter, oneiro_mode="latent",
                             oneiro_cost_aware=False, oneiro_max_draft_tokens=6, oneiro_prepack_max_memory=cap)
    assert torch.equal(out, ref)
    with pytest.raises(ValueError, match="Fix:"):
        model.generate(ids, max_new_tokens=4, assistant_model=drafter, oneiro_prepack_max_memory=-1)


@pytest.mark.parametrize("kernel", ["half_linear", "float32 copy"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_16_bit_layer_without_units_rounds_once_and_keeps_each_rows_bits(dtype, kernel, monkeypatch) -> None:
    """Where the CPU has no 16-bit units a layer runs `half_linear` on its own weight (no copy), or, where that kernel
    cannot be built, a float32 copy (`packed_dtype`); either way the output is the float32 product of the same 16-bit
    values rounded once to the layer's dtype, and each row's bits whatever the row count."""
    monkeypatch.setattr(half_linear, "has_units", lambda d: d == torch.float32)
    if kernel == "float32 copy":
        broken = NativeKernel("half_linear.c", "oneiro_half_linear", [])
        broken._failure = "no C compiler (this test)"
        monkeypatch.setattr(half_linear, "KERNEL", broken)
    elif not half_linear.KERNEL.available():
        pytest.skip(f"the 16-bit kernel does not build here: {half_linear.KERNEL.unavailable_reason()}")
    torch.manual_seed(0)
    layer = torch.nn.Linear(96, 40).to(dtype)
    x = torch.randn(9, 96).to(dtype)
    packed = prepacked_linear.packed_weight(layer)
    if kernel == "half_linear":
        assert packed.data_ptr() == layer.weight.data_ptr() and prepacked_linear.copy_bytes(layer) == 0
        assert layer not in prepacked_linear._packed
    else:
        assert packed.dtype == prepacked_linear.packed_dtype(dtype) == torch.float32
        assert prepacked_linear.copy_bytes(layer) == layer.weight.numel() * 4
    out = prepacked_linear.prepacked_forward(layer, x, 1)
    assert out.dtype == dtype
    ref = torch.nn.functional.linear(x.float(), layer.weight.float(), layer.bias.float())
    assert torch.allclose(out.float(), ref, atol=2e-2, rtol=2e-2)
    rows = torch.cat([prepacked_linear.prepacked_forward(layer, x[i:i + 1], 1) for i in range(9)])
    assert torch.equal(rows, out)


def test_one_row_on_onednn_has_the_bits_it_has_inside_a_pass() -> None:
    """oneDNN computes a single row on its matrix-vector kernel, which sums in another order than its kernel for
    several rows (seen on an AVX-512 EPYC in float32 and bfloat16, these shapes included): a one-row call runs as two,
    so a one-token step gives a row the bits a verification pass gives it, and `rows_agree` finds every probed row
    count in agreement. bfloat16 runs oneDNN only where the CPU has bfloat16 units (elsewhere `half_linear`)."""
    dtypes = [torch.float32] + [d for d in (torch.bfloat16,) if half_linear.has_units(d)]
    for dtype in dtypes:
        for in_features, out_features in ((576, 1536), (1536, 576)):
            torch.manual_seed(0)
            model = torch.nn.Sequential(torch.nn.Linear(in_features, out_features)).to(dtype)
            layer = model[0]
            x = torch.randn(33, in_features).to(dtype)
            with torch.no_grad(), decided_min_rows(lambda layer: 1), prepacked_linears(model):
                assert "forward" in vars(layer), "the layer runs prepacked from one row"
                whole = layer(x)
                alone = torch.cat([layer(x[i:i + 1]) for i in range(x.shape[0])])
                assert torch.equal(alone, whole), (dtype, in_features, out_features)
                assert prepacked_linear.rows_agree(layer)
