"""`oneiro_hf.cpu_kernels`: plain generate on the kernels a drafter's generate runs the target on (grouped attention,
prepacked linears), token-identical to stock greedy, and the model restored on exit, on error, and when entering
fails part-way."""

from __future__ import annotations

import importlib
import re
import warnings

import pytest
import torch
from tiny import ARCHS, greedy, make_model, random_prompt

import oneiro_hf
from oneiro_hf import cpu_kernels
from oneiro_hf.kernels import exact_attention, grouped_attention, half_linear, prepacked_linear
from oneiro_hf.kernels.grouped_attention import ATTENTION_NAME
from oneiro_hf.kernels.native import NativeKernel

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this torch has no oneDNN")


def _linears(model) -> list[torch.nn.Linear]:
    return [m for m in model.modules() if type(m) is torch.nn.Linear]


def _is_stock(model) -> bool:
    """No layer patched, sdpa attention, no prepacking or grouped-attention block open for the model."""
    return (all("forward" not in vars(m) for m in model.modules())
            and model.config._attn_implementation == "sdpa"
            and model not in prepacked_linear._users and not grouped_attention._switch.holds(model)
            and not exact_attention._switch.holds(model))


def _spy_packed_rows(monkeypatch) -> list[int]:
    rows: list[int] = []
    real = prepacked_linear._linear_on_packed
    monkeypatch.setattr(prepacked_linear, "_linear_on_packed",
                        lambda x, packed, bias: rows.append(x.shape[0]) or real(x, packed, bias))
    return rows


@pytest.mark.parametrize("arch", ARCHS)
def test_plain_greedy_on_one_row_prepacked_kernels_gives_stock_greedys_tokens(arch: str, monkeypatch) -> None:
    """Forces the one-row path (threshold 1 for every shape, as measured where oneDNN's GEMV beats MKL's), so every
    decoding step of plain generate runs prepacked: the test cannot pass without running it."""
    model = make_model(arch)
    ids = random_prompt(12, seed=3)
    ref = greedy(model, ids, 40)
    monkeypatch.setattr(prepacked_linear, "measured_min_rows", lambda layer: 1)
    rows = _spy_packed_rows(monkeypatch)
    with cpu_kernels(model) as kernels:
        out = greedy(model, ids, 40)
    assert torch.equal(out, ref)
    # the prefill's 12 rows (its LM head reads the last one only), then 39 one-row steps through every linear layer
    assert rows.count(1) == 39 * len(_linears(model)) + 1 and rows.count(12) == len(_linears(model)) - 1
    assert kernels.grouped_attention and kernels.prepacked == kernels.from_one_row == len(_linears(model))
    assert str(kernels) == (f"grouped attention + prepacked linears ({len(_linears(model))} of "
                            f"{len(_linears(model))} layers; {len(_linears(model))} from one row)")
    assert _is_stock(model)


def test_measured_thresholds_decide_which_layers_run_prepacked(monkeypatch) -> None:
    model = make_model("llama")
    lm_head = model.lm_head
    monkeypatch.setattr(prepacked_linear, "measured_min_rows", lambda layer: 1 if layer is lm_head else
                        prepacked_linear.NEVER)
    rows = _spy_packed_rows(monkeypatch)
    ids = random_prompt(10, seed=4)
    with cpu_kernels(model) as kernels:
        assert [m for m in _linears(model) if "forward" in vars(m)] == [lm_head]
        out = greedy(model, ids, 16)
    assert kernels.prepacked == kernels.from_one_row == 1
    assert len(rows) == 16 and torch.equal(out, greedy(model, ids, 16))  # the prefill and 15 steps, head only
    with cpu_kernels(model, prepack=False) as kernels:
        assert str(kernels) == "grouped attention" and not any("forward" in vars(m) for m in _linears(model))


def test_restored_on_error_and_nothing_left_patched_when_entering_fails(monkeypatch) -> None:
    model = make_model("qwen2")
    monkeypatch.setattr(prepacked_linear, "measured_min_rows", lambda layer: 1)
    with pytest.raises(RuntimeError, match="generate failed"), cpu_kernels(model):
        assert model.config._attn_implementation == ATTENTION_NAME
        raise RuntimeError("generate failed")
    assert _is_stock(model)

    reorders = {"n": 0}
    real = prepacked_linear.packed_weight

    def fails_on_the_fifth(layer):
        reorders["n"] += 1
        if reorders["n"] == 5:
            raise MemoryError("no room for the reordered copy")
        return real(layer)

    monkeypatch.setattr(prepacked_linear, "packed_weight", fails_on_the_fifth)
    fresh = make_model("qwen2")
    with pytest.raises(MemoryError), cpu_kernels(fresh):
        pass
    assert reorders["n"] == 5 and _is_stock(fresh), "a failure part-way leaves no layer patched"


def test_nested_blocks_restore_once_and_bad_input_names_the_fix(monkeypatch) -> None:
    model = make_model("llama")
    monkeypatch.setattr(prepacked_linear, "measured_min_rows", lambda layer: 4)
    with cpu_kernels(model):
        with cpu_kernels(model) as inner:
            assert inner.prepacked == len(_linears(model)) and inner.from_one_row == 0
        assert all("forward" in vars(m) for m in _linears(model)), "the outer block still runs"
    assert _is_stock(model)
    with pytest.raises(TypeError, match="Fix: pass the model itself"), cpu_kernels("smollm2"):
        pass
    assert oneiro_hf.cpu_kernels is cpu_kernels and "cpu_kernels" in oneiro_hf.__all__


@pytest.mark.parametrize("units", [
    pytest.param(True, marks=pytest.mark.skipif(not half_linear.has_units(torch.bfloat16),
                                                reason="oneDNN's bfloat16 linears need a CPU with bfloat16 units")),
    False])
def test_a_bfloat16_target_runs_exact_with_every_linear_from_one_row(units: bool, monkeypatch) -> None:
    """Exact attention, and every linear on one kernel at every row count: oneDNN in bfloat16 where the CPU has
    bfloat16 units, `half_linear` on the stored weights (no copy, nothing said) where it has none."""
    monkeypatch.setattr(half_linear, "has_units", lambda dtype: units or dtype == torch.float32)
    model = make_model("llama", dtype=torch.bfloat16)
    importlib.import_module("oneiro_hf.kernels.cpu")._said.discard(torch.bfloat16)
    calls = _spy_packed_rows(monkeypatch)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with cpu_kernels(model) as kernels, cpu_kernels(model):
            assert kernels.exact and kernels.exact_attention and not kernels.grouped_attention
            assert kernels.prepacked == kernels.from_one_row == len(_linears(model))
            assert kernels.half_linears is not units and ("16-bit linears" in str(kernels)) is not units
            with torch.no_grad():
                model(random_prompt(5, seed=1))
    assert calls and not [w for w in caught if "matrix units" in str(w.message)]
    assert not units or all(m in prepacked_linear._packed for m in _linears(model))
    assert units or not any(m in prepacked_linear._packed for m in _linears(model)), "half_linear keeps no copy"
    with cpu_kernels(model, prepack=False) as kernels:  # 16-bit F.linear gives each row its bits too
        assert kernels.exact and kernels.prepacked == 0
    with cpu_kernels(make_model("llama")) as kernels:  # float32: MKL's one row differs from several
        assert not kernels.exact and not kernels.exact_attention
    assert _is_stock(model)


def test_an_exact_block_whose_linears_round_rows_by_row_count_is_not_exact_and_says_why(monkeypatch) -> None:
    """`exact` is checked, not assumed: where a linear's rows get other bits in a call of three rows or more than
    alone (a stand-in for a kernel chosen by row count), the block reports itself not exact and warns once, naming
    the shapes and the fix; with the real kernels the same block is exact."""
    model = make_model("llama")
    with cpu_kernels(model, exact=True) as kernels:
        assert kernels.exact
    real = prepacked_linear._onednn_linear

    def by_row_count(x, packed, bias):
        out = real(x, packed, bias)
        return out if x.shape[0] < 3 else out * (1 + torch.finfo(out.dtype).eps)

    monkeypatch.setattr(prepacked_linear, "_onednn_linear", by_row_count)
    monkeypatch.setattr(prepacked_linear, "_agree", {})
    importlib.import_module("oneiro_hf.kernels.cpu")._said.discard(("rows", torch.float32))
    shapes = sorted({(m.out_features, m.in_features) for m in _linears(model)})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            with cpu_kernels(model, exact=True) as kernels:
                assert kernels.exact_attention and kernels.from_one_row == len(_linears(model)) and not kernels.exact
    said = [str(w.message) for w in caught if "row count of the call" in str(w.message)]
    assert len(said) == 1 and str(shapes) in said[0] and "Fix:" in said[0]
    assert _is_stock(model)


def test_16_bit_linears_whose_rows_differ_by_row_count_move_to_the_16_bit_kernel_and_stay_exact(monkeypatch) -> None:
    """Where the route a 16-bit linear takes rounds its rows by row count (a stand-in that perturbs calls of three
    rows or more), the exact block moves those layers to `half_linear` on their stored weights, whose rows never
    depend on the count: the block stays exact, says so once, and a pass gives each row a one-token step's bits."""
    model = make_model("llama", dtype=torch.bfloat16)
    real = prepacked_linear._linear_on_packed

    def by_row_count(x, packed, bias):
        out = real(x, packed, bias)
        return out if x.shape[0] < 3 else out * 2

    monkeypatch.setattr(prepacked_linear, "_linear_on_packed", by_row_count)
    monkeypatch.setattr(prepacked_linear, "_agree", {})
    monkeypatch.setattr(prepacked_linear, "_rows_alone", set())
    importlib.import_module("oneiro_hf.kernels.cpu")._said.discard(("alone", torch.bfloat16))
    linears = _linears(model)
    ids = random_prompt(6, seed=3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            with cpu_kernels(model) as kernels, torch.no_grad():
                assert kernels.exact and kernels.rows_alone == len(linears) and "16-bit kernel" in str(kernels)
                assert all(prepacked_linear.rows_agree(m) for m in linears)
                assert not any(m in prepacked_linear._packed for m in linears), "the moved layers keep no copy"
                whole = model(ids).logits[0]
                steps = [model(ids[:, : i + 1]).logits[0, -1] for i in range(ids.shape[1])]
                assert all(torch.equal(step, row) for step, row in zip(steps, whole)), "a pass kept its rows"
    said = [str(w.message) for w in caught if "16-bit kernel over the stored weights" in str(w.message)]
    assert len(said) == 1 and str(sorted({(m.out_features, m.in_features) for m in linears})) in said[0]
    assert "Fix" in said[0]
    with warnings.catch_warnings():  # float32 has no 16-bit kernel to move to: the block is not exact
        warnings.simplefilter("ignore")
        with cpu_kernels(make_model("llama"), exact=True) as kernels:
            assert not kernels.exact and kernels.rows_alone == 0


def test_without_the_16_bit_kernel_a_cpu_without_units_copies_to_float32_and_says_why(monkeypatch) -> None:
    monkeypatch.setattr(half_linear, "has_units", lambda dtype: dtype == torch.float32)
    broken = NativeKernel("half_linear.c", "oneiro_half_linear", [])
    broken._failure = "no C compiler found to build oneiro-hf's 16-bit linear kernel. Fix: install one"
    monkeypatch.setattr(half_linear, "KERNEL", broken)
    importlib.import_module("oneiro_hf.kernels.cpu")._said.discard(torch.bfloat16)
    model = make_model("llama", dtype=torch.bfloat16)
    ids = random_prompt(6, seed=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with cpu_kernels(model) as kernels:
            assert kernels.exact and not kernels.half_linears and "prepacked linears" in str(kernels)
            assert greedy(model, ids, 6).shape[1] == ids.shape[1] + 6
    said = [str(w.message) for w in caught if "matrix units" in str(w.message)]
    assert len(said) == 1 and re.search("no bfloat16 matrix units.*could not be built \\(no C compiler.*Fix:", said[0])
    assert all(prepacked_linear._packed[m][1].dtype == torch.float32 for m in _linears(model))
    assert oneiro_hf.release_cpu_kernels(model) == sum(m.weight.numel() * 4 for m in _linears(model))


def test_release_frees_the_prepacked_copies_and_leaves_the_model_working(monkeypatch) -> None:
    model = make_model("llama")
    ids = random_prompt(10, seed=5)
    with torch.no_grad():
        logits = model(ids).logits
    ref = greedy(model, ids, 12)
    monkeypatch.setattr(prepacked_linear, "measured_min_rows", lambda layer: 1)
    with cpu_kernels(model):
        assert torch.equal(greedy(model, ids, 12), ref)
        with pytest.raises(RuntimeError, match="Fix: call it after"):  # it would make them again
            oneiro_hf.release_cpu_kernels(model)
    held = [m for m in _linears(model) if m in prepacked_linear._packed]
    assert held == _linears(model)  # kept with the model after the block
    weight_bytes = sum(m.weight.numel() * m.weight.element_size() for m in held)
    assert oneiro_hf.release_cpu_kernels(model) == weight_bytes
    assert not any(m in prepacked_linear._packed for m in model.modules()) and _is_stock(model)
    assert oneiro_hf.release_cpu_kernels(model) == 0
    with torch.no_grad():
        assert torch.equal(model(ids).logits, logits)  # stock kernels, the same outputs as before any prepacking
    assert torch.equal(greedy(model, ids, 12), ref)
    with cpu_kernels(model) as kernels:  # a later block makes the copies again
        assert kernels.prepacked == len(_linears(model)) and torch.equal(greedy(model, ids, 12), ref)
    with pytest.raises(TypeError, match="Fix:"):
        oneiro_hf.release_cpu_kernels("model")
