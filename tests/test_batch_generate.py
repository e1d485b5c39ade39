"""Batched speculative decoding: several left-padded prompts in one `generate(..., assistant_model=drafter)` call.

Hypothesis draws, per architecture (llama: full attention; gemma3: alternating sliding and full layers; qwen2:
the upper half sliding), a batch of 1-5 prompts (random or repetitive, so lookup matches, each left-padded by a
random amount), chain or tree settings, the draft source (lookup, latent, hybrid), the cost model on or off,
max_new_tokens and an EOS id taken from plain batched greedy's output of one row (so rows stop at different steps,
and finished rows are padded). The output must be plain batched greedy's `sequences`, byte for byte, padding
included. Across each architecture's run the tally asserts non-vacuity: drafts were accepted from both sources,
and in some batches one row accepted drafted tokens while another rejected some in the same call.

The sampling test compares each row's joint distribution of its first two sampled tokens with the target's, by
chi-square; the second token is decided by a batched tree pass. The error tests check each refusal names its fix.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_lossless_property import _uniform
from test_tree_core import _chi_square_p_value
from test_tree_generate import SPECS, Zoo
from tiny import make_model, random_prompt
from transformers import (
    DynamicCache,
    LogitsProcessorList,
    StoppingCriteria,
    StoppingCriteriaList,
    TextStreamer,
)
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer
from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper

from oneiro_hf import OneiroDrafter, UnsupportedGenerateCall, UnsupportedTransformersVersion
from oneiro_hf.compat import check_tree_supported
from oneiro_hf.drafting.cost import choose_width
from oneiro_hf.drafting.policy import DraftPolicyState
from oneiro_hf.generation.loop.target_cache import compact_rows, drop_leading_columns, realign_rows

ARCH_EXAMPLES = {"llama": 100, "gemma3": 100, "qwen2": 80}
PAD = 0


@pytest.fixture(scope="module")
def zoo():
    made = Zoo()  # the tree test's targets and drafters (by Spec), built once; its tally per architecture
    yield made
    made.targets.clear()
    made.drafters.clear()


def left_padded(prompts: list[list[int]], extra: list[int]) -> tuple[torch.LongTensor, torch.LongTensor]:
    """(B, C) ids and attention mask: each prompt after `extra[b]` + (longest - its length) pad columns."""
    width = max(len(p) + e for p, e in zip(prompts, extra))
    ids = torch.full((len(prompts), width), PAD, dtype=torch.long)
    for b, prompt in enumerate(prompts):
        ids[b, width - len(prompt):] = torch.tensor(prompt)
    mask = torch.zeros_like(ids)
    for b, prompt in enumerate(prompts):
        mask[b, width - len(prompt):] = 1
    return ids, mask


@st.composite
def batches(draw: st.DrawFn, arch: str) -> dict[str, Any]:
    token = st.integers(3, 63)
    rows = draw(_uniform(1, 5))
    prompts = []
    for _ in range(rows):
        if draw(st.booleans()):
            prompts.append(draw(st.lists(token, min_size=1, max_size=12)))
        else:
            prompts.append(draw(st.lists(token, min_size=1, max_size=4)) * draw(st.integers(2, 4)))
    new = draw(_uniform(1, 14))
    return {
        "spec": draw(st.sampled_from(SPECS[arch])),
        "drafter": draw(st.sampled_from(("full", "full", "partial"))),
        "prompts": prompts,
        # one row is never padded beyond the longest prompt; batch size 1 keeps its existing (unpadded) paths
        "extra": [0] + [draw(st.integers(0, 3)) for _ in range(rows - 1)] if rows > 1 else [0],
        "new": new,
        "tree": draw(st.booleans()),
        "mode": draw(st.sampled_from(("hybrid", "hybrid", "latent", "lookup"))),
        "cost_aware": draw(st.sampled_from((False, False, True))),
        "eos": draw(st.sampled_from((False, True))),
        "eos_row": draw(st.integers(0, rows - 1)),
        "eos_at": draw(st.integers(0, new - 1)),
    }


def _generate(model, ids, mask, new, **kwargs):
    with torch.no_grad():
        return model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=new, **kwargs)


def _check(zoo: Zoo, case: dict[str, Any]) -> None:
    spec = case["spec"]
    model, drafter = zoo.target(spec), zoo.drafter(spec, case["drafter"])
    ids, mask = left_padded(case["prompts"], case["extra"])
    new = case["new"]
    extra: dict[str, Any] = {}
    if case["eos"]:  # a token greedy produces in one row: that row (and any other reaching it) stops early
        plain = _generate(model, ids, mask, new)
        extra["eos_token_id"] = int(plain[case["eos_row"], ids.shape[1] + case["eos_at"]])
    reference = _generate(model, ids, mask, new, **extra)
    out = _generate(model, ids, mask, new, assistant_model=drafter, oneiro_tree=case["tree"], oneiro_mode=case["mode"],
                    oneiro_cost_aware=case["cost_aware"], oneiro_tree_max_nodes=8, oneiro_tree_max_depth=4,
                    oneiro_tree_topk=3, oneiro_tree_beam=2, oneiro_max_draft_tokens=4, **extra)
    assert torch.equal(out, reference), (case, out.tolist(), reference.tolist())

    stats = drafter.last_stats
    tally = zoo.tally[spec.arch]
    tally["cases"] += 1
    if len(case["prompts"]) == 1:
        return
    rows = stats.rows
    assert len(rows) == len(case["prompts"])
    assert stats.accepted_tokens == sum(r.accepted_tokens for r in rows)
    assert stats.drafted_tokens == sum(r.drafted_tokens for r in rows)
    assert stats.steps == sum(r.steps for r in rows) and stats.batch_passes >= max(r.steps for r in rows)
    for b, row in enumerate(rows):  # every new token of a row came from one of its rounds, or the prefill
        tokens = out[b, ids.shape[1]:].tolist()
        produced = tokens.index(extra["eos_token_id"]) + 1 if extra.get("eos_token_id") in tokens else new
        assert sum(row.accept_lengths) + 1 == produced, (b, row.accept_lengths, tokens)
    if case["mode"] == "lookup":
        assert stats.drafted_by_source["latent"] == 0
    accepting = [r.accepted_tokens > 0 for r in rows]
    rejecting = [r.drafted_tokens > r.accepted_tokens for r in rows]
    tally["batches"] += 1
    tally["ragged"] += any(a and not r for a, r in zip(accepting, rejecting)) and any(rejecting)
    tally["mixed_rows"] += any(accepting[i] and rejecting[j] for i in range(len(rows)) for j in range(len(rows))
                               if i != j)
    tally["latent_accepted"] += stats.accepted_by_source["latent"]
    tally["lookup_accepted"] += stats.accepted_by_source["lookup"]
    tally["tree_accepted" if case["tree"] else "chain_accepted"] += stats.accepted_tokens
    finished_early = case["eos"] and bool((out[:, -1] == PAD).any())
    tally["padded_finished_rows"] += finished_early


@pytest.mark.parametrize("arch", list(ARCH_EXAMPLES))
def test_batched_greedy_equals_plain_batched_greedy(arch: str, zoo: Zoo) -> None:
    strategy = given(case=batches(arch))(lambda case: _check(zoo, case))
    settings(max_examples=ARCH_EXAMPLES[arch], derandomize=True, deadline=None, database=None,
             suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])(strategy)()
    tally = zoo.tally[arch]
    print(f"\n{arch}: {dict(tally)}")
    assert tally["cases"] >= ARCH_EXAMPLES[arch]
    assert tally["latent_accepted"] > 0 and tally["lookup_accepted"] > 0, dict(tally)
    assert tally["tree_accepted"] > 0 and tally["chain_accepted"] > 0, dict(tally)
    assert tally["mixed_rows"] > 0 and tally["padded_finished_rows"] > 0, dict(tally)


def test_scores_and_logits_per_step_as_batched_generate_shapes_them() -> None:
    """(B, V) per step; each row's entries equal plain batched generate's while the row runs; rows that stop
    early (EOS) are padded in `sequences` and their later score rows are a point mass on the pad id."""
    model = make_model("llama", layers=2, hidden=32, vocab=64, seed=3)
    drafter = OneiroDrafter.from_target(model, interval=(0, 2))
    ids, mask = left_padded([[5, 6, 7, 5, 6, 7, 5, 6], [9, 10, 11], [12, 13, 12, 13, 12]], [0, 1, 0])
    plain = _generate(model, ids, mask, 10)
    eos = int(plain[1, ids.shape[1] + 2])
    kwargs = {"eos_token_id": eos, "return_dict_in_generate": True, "output_scores": True, "output_logits": True}
    reference = _generate(model, ids, mask, 10, **kwargs)
    out = _generate(model, ids, mask, 10, assistant_model=drafter, oneiro_tree=True, oneiro_cost_aware=False, **kwargs)
    assert torch.equal(out.sequences, reference.sequences)
    assert len(out.scores) == len(reference.scores) == len(out.logits) == out.sequences.shape[1] - ids.shape[1]
    assert drafter.last_stats.accepted_tokens > 0
    new = out.sequences[:, ids.shape[1]:]
    for step, (mine, theirs, raw, raw_ref) in enumerate(zip(out.scores, reference.scores, out.logits,
                                                            reference.logits)):
        assert mine.shape == theirs.shape == (3, 64)
        for b in range(3):
            running = step == 0 or not bool((new[b, :step] == eos).any())
            if running:
                torch.testing.assert_close(mine[b], theirs[b], rtol=1e-4, atol=1e-4)
                torch.testing.assert_close(raw[b], raw_ref[b], rtol=1e-4, atol=1e-4)
            else:
                assert int(new[b, step]) == PAD and float(mine[b, PAD]) == 0.0 and bool(mine[b].isinf().sum() == 63)
    assert bool((new == PAD).any())  # some row stopped early and was padded


class StopOnToken(StoppingCriteria):
    """A user criterion with no eos_token_id: a row stops once its last token is `token`."""

    def __init__(self, token: int) -> None:
        self.token = token

    def __call__(self, input_ids, scores, **kwargs):
        return input_ids[:, -1] == self.token


def test_without_an_eos_criterion_rows_run_until_all_have_stopped() -> None:
    """Plain batched decoding pads finished rows only when an EOS criterion is present; with a user criterion alone
    a row that stopped keeps generating until every row has stopped. The batched loop does the same."""
    model = make_model("gemma3", layers=2, window=3, hidden=32, vocab=64, seed=2)
    drafter = OneiroDrafter.from_target(model, interval=(0, 2))
    ids, mask = left_padded([[5, 6, 7, 5, 6, 7, 5, 6], [9, 10, 11], [12, 13, 12, 13, 12]], [0, 2, 0])
    plain = _generate(model, ids, mask, 16)
    for row, at in ((0, 3), (1, 1), (2, 6)):
        criteria = StoppingCriteriaList([StopOnToken(int(plain[row, ids.shape[1] + at]))])
        reference = _generate(model, ids, mask, 16, stopping_criteria=criteria)
        for tree in (False, True):
            out = _generate(model, ids, mask, 16, stopping_criteria=criteria, assistant_model=drafter,
                            oneiro_tree=tree, oneiro_cost_aware=False)
            assert torch.equal(out, reference), (row, tree, out.tolist(), reference.tolist())
    assert drafter.last_stats.accepted_tokens > 0


@pytest.mark.parametrize("tree", [True, False])
def test_sampling_is_exact_per_row(tree: bool) -> None:
    """Each row's first two sampled tokens (temperature 0.8, top-k 12), the second decided by a batched pass over six
    sibling drafts per row (tree settings) or one drafted token (chain settings): their joint distribution must be
    the target's for that row's prompt."""
    model = make_model("gemma3", layers=2, window=3, hidden=32, vocab=24, init=0.6)
    drafter = OneiroDrafter.from_target(model, interval=(0, 2))
    prompts = [[5, 9, 14, 7] * 3, [8, 3, 11] * 2]
    ids, mask = left_padded(prompts, [0, 0])
    warp = LogitsProcessorList([TemperatureLogitsWarper(0.8), TopKLogitsWarper(12)])
    vocab = model.config.vocab_size
    expected = []
    with torch.no_grad():
        for prompt in prompts:
            row = torch.tensor([prompt])
            p1 = warp(row, model(row).logits[:, -1]).softmax(-1)[0]
            seconds = torch.cat([row.repeat(vocab, 1), torch.arange(vocab).unsqueeze(1)], dim=1)
            p2 = warp(seconds, model(seconds).logits[:, -1]).softmax(-1)
            expected.append((p1.unsqueeze(1) * p2).flatten())
    runs = 300
    counts = torch.zeros(2, vocab * vocab)
    torch.manual_seed(0)
    accepted = [0, 0]
    for _ in range(runs):
        with torch.no_grad():
            out = model.generate(
                input_ids=ids, attention_mask=mask, do_sample=True, temperature=0.8, top_k=12, top_p=1.0,
                max_new_tokens=3, assistant_model=drafter, oneiro_tree=tree, oneiro_cost_aware=False,
                oneiro_tree_topk=6, oneiro_tree_max_depth=1, oneiro_max_draft_tokens=1,
            )
        for b in range(2):
            x1, x2 = out[b, ids.shape[1]:][:2].tolist()  # x1 from the prefill, x2 from the row's tree
            counts[b, x1 * vocab + x2] += 1
            accepted[b] += drafter.last_stats.rows[b].accepted_tokens
    assert all(a > runs // 4 for a in accepted), accepted  # the trees really decided the second tokens
    for b in range(2):
        p_value = _chi_square_p_value(counts[b], runs * expected[b])
        assert p_value > 1e-3, (b, p_value)


def test_the_cost_model_prices_a_batch_pass_by_its_batch_size() -> None:
    """t(k, B) comes from the profile's "batch" field where given, else from one row's t of k * B tokens; the
    width maximises the batch's expected tokens per second."""
    policy = DraftPolicyState()
    policy.load_profile({1: 1.0, 2: 1.1, 4: 1.2, 8: 1.5, 16: 3.0}, t1_s=0.01,
                        batch={"4": {"t1_s": 0.02, "ratios": {"1": 1.0, "2": 1.9, "3": 2.8}}, "1": {"t1_s": 9.0,
                                                                                                     "ratios": {}}})
    assert policy.batch_verify_time(2, 4) == pytest.approx(0.038)
    assert policy.batch_verify_time(1, 1) == pytest.approx(0.01)  # one row: the plain profile, not "batch"["1"]
    assert policy.batch_verify_time(2, 8) == pytest.approx(policy.verify_time(16))  # unmeasured: k * B tokens
    # a k not measured at B scales the nearest measured one by one row's t of the total tokens
    assert policy.batch_verify_time(4, 4) == pytest.approx(0.02 * 2.8 * policy.verify_time(16) / policy.verify_time(12))
    policy.observe_verify(2, 0.05, rows=4)
    assert policy.batch_verify_time(2, 4) == pytest.approx(0.85 * 0.038 + 0.15 * 0.05)
    flat = {1: 1.0, 2: 1.05, 3: 1.1}.__getitem__
    linear = {1: 1.0, 2: 2.0, 3: 3.0}.__getitem__
    rows = [[0.9, 0.8], [0.5], []]
    assert choose_width(rows, flat, 8) == 2
    assert choose_width(rows, linear, 8) == 0  # a pass costing as much per token never pays
    assert choose_width(rows, None, 1) == 1


def test_a_batch_whose_passes_cost_linearly_decodes_as_plain_batched_greedy() -> None:
    """Where t(k, B) grows linearly in k * B (a CPU at large batches) nothing is drafted: every pass is one token
    per row, and the tokens are plain batched greedy's. A flat profile (a GPU) drafts at the same batch size."""
    model = make_model("qwen2", layers=2, window=4, hidden=32, vocab=64)
    drafter = OneiroDrafter.from_target(model, interval=(0, 2))
    prompts = [[5, 6, 7] * 3, [8, 9] * 4, [10, 11, 12, 13] * 2, [14, 15] * 3]
    ids, mask = left_padded(prompts, [0, 0, 1, 0])
    plain = _generate(model, ids, mask, 12)
    # decided on the profiles alone (learn=False): measured on a busy machine, t(k, 4) drifts and drafting starts
    linear = {"4": {"t1_s": 0.01, "ratios": {str(k): float(k) for k in range(1, 10)}}}
    one_row = {"t1_s": 0.005, "ratios": {1: 1.0, 2: 1.05, 4: 1.1, 8: 1.2}}
    drafter.use_latency_profile({**one_row, "batch": linear}, learn=False)
    out = _generate(model, ids, mask, 12, assistant_model=drafter, oneiro_tree=True)
    stats = drafter.last_stats
    assert torch.equal(out, plain)
    assert stats.drafted_tokens == 0 and stats.drafter_calls == 0 and all(n == 0 for n in stats.tree_nodes)
    flat = {"4": {"t1_s": 0.01, "ratios": {str(k): 1.0 + 0.01 * k for k in range(1, 10)}}}
    drafter.use_latency_profile({**one_row, "batch": flat}, learn=False)
    out = _generate(model, ids, mask, 12, assistant_model=drafter, oneiro_tree=True)
    assert torch.equal(out, plain)
    assert drafter.last_stats.accepted_tokens > 0


def _labelled(layer, labels: list[list[float]]):
    """Fill a cache layer with (B, 1, S, 1) keys and values whose entries are `labels` (row by row)."""
    states = torch.tensor(labels).unsqueeze(1).unsqueeze(-1)
    layer.lazy_initialization(states, states)
    layer.keys, layer.values = states.clone(), states.clone()
    return layer


def test_compaction_leaves_holes_in_full_layers_and_keeps_sliding_layers_right_aligned() -> None:
    """Two rows after a 3-node tree pass: row 0 keeps its root and node 2, row 1 only its root. A full layer gets a
    hole after row 1 (only tree slots move), which `realign_rows` closes by shifting row 1 right; a sliding layer
    (window 4: 3 columns held) keeps both rows right-aligned. A column of padding in every row can then go."""
    # columns 0-4 cached (row 0: one pad column, -1), columns 5-7 the tree's nodes (100 + node)
    full = _labelled(DynamicLayer(), [[-1, 0, 1, 2, 3, 100, 101, 102], [0, 1, 2, 3, 4, 100, 101, 102]])
    sliding = _labelled(DynamicSlidingWindowLayer(sliding_window=4),
                        [[1, 2, 3, 100, 101, 102], [2, 3, 4, 100, 101, 102]])
    sliding.cumulative_length = 8
    cache = DynamicCache()
    cache.layers = [full, sliding]
    holes = compact_rows(cache, [[0, 2], [0]], tree_size=3, holes=[0, 0])
    assert holes == [0, 1]
    assert full.keys[:, 0, :, 0].tolist()[0] == [-1, 0, 1, 2, 3, 100, 102]
    assert full.keys[:, 0, :6, 0].tolist()[1] == [0, 1, 2, 3, 4, 100]  # then one hole
    assert sliding.keys[:, 0, :, 0].tolist() == [[3, 100, 102], [3, 4, 100]] and sliding.cumulative_length == 7
    assert torch.equal(full.values, full.keys)
    realign_rows(cache, holes)
    assert full.keys[:, 0, :, 0].tolist()[0] == [-1, 0, 1, 2, 3, 100, 102]  # row 0 had no hole: unchanged
    assert full.keys[:, 0, 1:, 0].tolist()[1] == [0, 1, 2, 3, 4, 100]  # row 1 shifted right: its hole now padding
    assert sliding.keys[:, 0, :, 0].tolist() == [[3, 100, 102], [3, 4, 100]]  # right-aligned already
    drop_leading_columns(cache, 1)  # padding in both rows now: gone
    assert full.keys[:, 0, :, 0].tolist() == [[0, 1, 2, 3, 100, 102], [0, 1, 2, 3, 4, 100]]
    assert sliding.cumulative_length == 6 and sliding.keys.shape[-2] == 3


@pytest.fixture
def bound():
    model = make_model("llama", layers=2, hidden=32, vocab=64)
    return model, OneiroDrafter.from_target(model)


def test_right_padding_is_refused_with_the_fix(bound) -> None:
    model, drafter = bound
    ids = torch.tensor([[5, 6, 7, 0], [5, 6, 7, 8]])
    with pytest.raises(UnsupportedGenerateCall, match=r'right padding.*Fix: pad on the left \(tokenizer.padding_side = "left"\)'):
        _generate(model, ids, (ids != 0).long(), 3, assistant_model=drafter)
    inner = torch.tensor([[5, 0, 7, 8], [5, 6, 7, 8]])
    with pytest.raises(UnsupportedGenerateCall, match="inner padding.*Fix: "):
        _generate(model, inner, (inner != 0).long(), 3, assistant_model=drafter)


def test_a_streamer_with_a_batch_is_refused_with_the_fix(bound) -> None:
    model, drafter = bound

    class Tokenizer:
        def decode(self, *args, **kwargs):
            return ""

    ids = torch.cat([random_prompt(4, 0, 64), random_prompt(4, 1, 64)])
    with pytest.raises(ValueError, match="streamer.*Fix: drop streamer="):
        _generate(model, ids, torch.ones_like(ids), 3, assistant_model=drafter, streamer=TextStreamer(Tokenizer()))


def test_other_unsupported_batch_calls_are_refused_with_the_fix(bound) -> None:
    model, drafter = bound
    ids = torch.cat([random_prompt(4, 0, 64), random_prompt(4, 1, 64)])
    ones = torch.ones_like(ids)
    with pytest.raises(ValueError, match="beam search.*Fix: "):
        _generate(model, ids, ones, 3, assistant_model=drafter, num_beams=2)
    with pytest.raises(ValueError, match="lossy.*Fix: drop oneiro_verification"):
        _generate(model, ids, ones, 3, assistant_model=drafter, oneiro_verification="topk")
    with pytest.raises(UnsupportedTransformersVersion, match="a batch of prompts.*Fix: pip install.*once per prompt"):
        check_tree_supported("5.18.0", batch=True)
    filled = DynamicCache(config=model.config)
    with torch.no_grad():
        model(ids[:, :2], cache=filled, use_cache=True)
    with pytest.raises(ValueError, match="empty cache.*Fix: "):
        _generate(model, ids, ones, 3, assistant_model=drafter, cache=filled)
