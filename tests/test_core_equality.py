"""Losslessness: generate(assistant_model=drafter) must give exactly what plain generate gives.

Greedy equality is checked token for token on tiny random targets of every supported architecture,
for every drafting mode, with and without the cost-aware policy and for several draft lengths, and
the drafting statistics are checked to show that drafts really were proposed (and, on targets shaped
so the untrained drafter is right, accepted): equality with zero drafts would prove nothing.
"""

from __future__ import annotations

import pytest
import torch
from tiny import ARCHS, FLAT_PROFILE, greedy, make_cyclic_model, make_model, random_prompt, repeat_prompt
from transformers import GenerationConfig
from transformers.generation.streamers import BaseStreamer

from oneiro_hf import OneiroDrafter
from oneiro_hf.generation.candidate_generator import OneiroCandidateGenerator

MODES = ("latent", "lookup", "hybrid")


def target(arch: str, strength: str | None):
    """(model, prompt): for a per-token target the prompt repeats a cycle of its next-token function, so
    greedy decoding keeps repeating it and lookup drafts are right; otherwise a random prompt."""
    if strength == "per_token":
        model, cyc = make_cyclic_model(arch)
        return model, repeat_prompt(cyc, max(2, -(-12 // len(cyc))))
    return make_model(arch, strength=strength), random_prompt(9, seed=5)


def check_stats(drafter, new_tokens: int, context: str) -> None:
    """Invariants of DraftStats that hold for every call, whatever was drafted."""
    s = drafter.last_stats
    assert len(s.accept_lengths) == s.steps, context
    # the prefill produces one token; every later verification pass produces accepted + 1
    assert sum(s.accept_lengths) == new_tokens - 1, (context, s.accept_lengths)
    assert 0 <= s.accepted_tokens <= s.drafted_tokens, context
    assert s.accepted_tokens == sum(n - 1 for n in s.accept_lengths), context
    assert sum(s.drafted_by_source.values()) == s.drafted_tokens, context
    assert sum(s.accepted_by_source.values()) == s.accepted_tokens, context
    if s.accept_lengths:
        assert s.mean_accepted_tokens == pytest.approx(sum(s.accept_lengths) / len(s.accept_lengths))
    assert 0.0 <= s.draft_time_share <= 1.0


# ---------------------------------------------------------------------------------------------- greedy


@pytest.mark.parametrize("strength", [None, "prefix"])
@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_equality_matrix(arch, strength):
    model = make_model(arch, strength=strength)
    drafter = OneiroDrafter.from_target(model)
    seed_prompt = random_prompt(6, seed=11)
    prompts = {
        # the model's own greedy output: random targets loop, so lookup finds matches in it
        "own": greedy(model, seed_prompt, 18),
    }
    if strength is None:
        prompts["len13"] = random_prompt(13, seed=2)  # longer than the sliding window
    else:
        prompts["pattern"] = repeat_prompt([7, 19, 33, 4], 4)
    # (cost_aware, max_draft_tokens): every draft length without the policy, two with it
    settings = ((False, 1), (False, 3), (False, 8), (True, 2), (True, 8))
    new = 16
    for pname, ids in prompts.items():
        ref = greedy(model, ids, new)
        assert ref.shape[1] == ids.shape[1] + new
        for mode in MODES:
            for cost_aware, k in settings:
                ctx = f"{arch}/{strength}/{pname}/{mode}/cost_aware={cost_aware}/k={k}"
                out = greedy(
                    model,
                    ids,
                    new,
                    assistant_model=drafter,
                    oneiro_mode=mode,
                    oneiro_cost_aware=cost_aware,
                    oneiro_max_draft_tokens=k,
                )
                assert torch.equal(out, ref), ctx
                check_stats(drafter, new, ctx)
                stats = drafter.last_stats
                if mode == "latent" and not cost_aware:
                    # without the policy every step drafts, except one with no room left (budget 0)
                    assert stats.empty_steps <= 1, ctx
                    assert stats.drafted_by_source["latent"] >= len(stats.accept_lengths) - 1 > 0, ctx
                if mode == "lookup":
                    assert stats.drafted_by_source["latent"] == 0, ctx
                if mode == "latent":
                    assert stats.drafted_by_source["lookup"] == 0, ctx
                if stats.accept_lengths:
                    assert max(stats.accept_lengths) <= k + 1, ctx


@pytest.mark.parametrize("arch", ARCHS)
def test_latent_drafts_are_accepted_when_drafter_is_exact(arch):
    """On a per-token target the default drafter is exact: every latent draft must be accepted."""
    model = make_model(arch, strength="per_token")
    drafter = OneiroDrafter.from_target(model)
    for seed, length in ((3, 1), (4, 14)):
        ids = random_prompt(length, seed=seed)
        ref = greedy(model, ids, 30)
        for k in (1, 3, 8):
            out = greedy(
                model,
                ids,
                30,
                assistant_model=drafter,
                oneiro_mode="latent",
                oneiro_cost_aware=False,
                oneiro_max_draft_tokens=k,
                oneiro_min_draft_confidence=0.0,
            )
            ctx = f"{arch}/len{length}/k={k}"
            assert torch.equal(out, ref), ctx
            check_stats(drafter, 30, ctx)
            s = drafter.last_stats
            assert s.drafted_tokens > 0, ctx
            assert s.accepted_tokens == s.drafted_tokens, (ctx, s.accept_lengths)
            assert max(s.accept_lengths) == k + 1, ctx
            assert s.empty_steps <= 1, ctx  # only a step with no room left for a draft
            assert s.latent_steps == s.steps - s.empty_steps, ctx


@pytest.mark.parametrize("arch", ARCHS)
def test_partially_right_drafter_exercises_accept_and_reject(arch):
    """A drafter that is right only some of the time: both branches of verification run, output is exact."""
    model = make_model(arch, strength="prefix")
    drafter = OneiroDrafter.from_target(model)
    accepted = rejected = 0
    for seed in range(4):
        ids = random_prompt(10, seed=100 + seed)
        ref = greedy(model, ids, 24)
        out = greedy(
            model,
            ids,
            24,
            assistant_model=drafter,
            oneiro_mode="latent",
            oneiro_cost_aware=False,
            oneiro_max_draft_tokens=4,
            oneiro_min_draft_confidence=0.0,
        )
        assert torch.equal(out, ref), f"{arch}/seed{seed}"
        s = drafter.last_stats
        accepted += s.accepted_tokens
        rejected += s.drafted_tokens - s.accepted_tokens
    assert accepted > 0 and rejected > 0, (accepted, rejected)


@pytest.mark.parametrize("arch", ARCHS)
def test_lookup_drafts_are_proposed_and_accepted_on_repetitive_prompt(arch):
    model, ids = target(arch, "per_token")
    drafter = OneiroDrafter.from_target(model)
    drafter.use_latency_profile(FLAT_PROFILE, learn=False)  # the cost model's picks, not this machine's load
    ref = greedy(model, ids, 24)
    for mode in ("lookup", "hybrid"):
        for cost_aware in (False, True):
            ctx = f"{arch}/{mode}/cost_aware={cost_aware}"
            out = greedy(
                model, ids, 24, assistant_model=drafter, oneiro_mode=mode, oneiro_cost_aware=cost_aware
            )
            assert torch.equal(out, ref), ctx
            check_stats(drafter, 24, ctx)
            s = drafter.last_stats
            assert s.drafted_by_source["lookup"] > 0, ctx
            assert s.accepted_by_source["lookup"] > 0, ctx
            assert s.lookup_steps > 0, ctx


def test_no_draft_is_longer_than_num_drafting_tokens(monkeypatch):
    """transformers >= 5.25 reads `num_drafting_tokens` before the loop to size what its caches record between a
    verification pass and its crop; every draft of a call must fit it (lookup copies long spans here)."""
    model, ids = target("llama", "per_token")
    drafter = OneiroDrafter.from_target(model)
    drafter.use_latency_profile(FLAT_PROFILE, learn=False)  # long lookup drafts pay whatever the machine's load
    seen: list[tuple[int, int]] = []
    propose = OneiroCandidateGenerator._propose

    def recording(self, input_ids):
        out = propose(self, input_ids)
        seen.append((out[0].shape[1] - input_ids.shape[1], self.num_drafting_tokens))
        return out

    monkeypatch.setattr(OneiroCandidateGenerator, "_propose", recording)
    for mode in ("lookup", "hybrid"):
        greedy(model, ids, 24, assistant_model=drafter, oneiro_mode=mode, oneiro_max_draft_tokens=3)
    assert seen and max(length for length, _ in seen) == 3, "lookup drafts fill the budget on this prompt"
    assert all(length <= limit == 3 for length, limit in seen)


def _hybrid_extended_steps(arch: str) -> int:
    """Hybrid calls (greedy and sampling with top_k=1, cost model on and off) on a target the untrained drafter
    partly predicts, each checked equal to greedy; the latent drafts lookup continued, summed."""
    model = make_model(arch, strength="prefix")
    drafter = OneiroDrafter.from_target(model)
    extended = 0
    for seed in range(6):
        ids = random_prompt(12, seed=seed)
        ref = greedy(model, ids, 48)
        for sample, cost_aware in ((False, True), (False, False), (True, True)):
            ctx = f"{arch}/seed{seed}/sample={sample}/cost_aware={cost_aware}"
            drafter.reset_drafting_policy()  # what a timed call learned must not steer the untimed ones
            torch.manual_seed(seed)
            with torch.no_grad():
                out = model.generate(ids, max_new_tokens=48, do_sample=sample, top_k=1, assistant_model=drafter,
                                     oneiro_mode="hybrid", oneiro_cost_aware=cost_aware,
                                     oneiro_max_draft_tokens=8 if cost_aware else 4, oneiro_tree=False)
            assert torch.equal(out, ref), ctx
            check_stats(drafter, 48, ctx)
            extended += drafter.last_stats.extended_steps
    return extended


@pytest.mark.parametrize("arch", ARCHS)
def test_hybrid_chains_keep_greedy_tokens(arch):
    """Hybrid chains, whose latent drafts lookup may continue, give exactly greedy's tokens."""
    _hybrid_extended_steps(arch)


def test_hybrid_continues_latent_drafts_with_lookup():
    """On llama the output cycles, so the drafter's tokens repeat earlier n-grams: lookup must continue some of its
    drafts (on the other tiny targets the drafter's chains fill the budget and there is no room)."""
    assert _hybrid_extended_steps("llama") > 0


@pytest.mark.parametrize("arch", ARCHS)
def test_max_new_tokens_edges(arch):
    """1 and 2 new tokens, and lengths that end inside a draft: exact length, exact tokens."""
    for strength in ("per_token", "prefix"):
        model, ids = target(arch, strength)
        drafter = OneiroDrafter.from_target(model)
        prompts = [random_prompt(9, seed=21), ids if strength == "per_token" else random_prompt(1, 22)]
        for ids in prompts:
            for new in (1, 2, 3, 6, 11):
                ref = greedy(model, ids, new)
                for mode in MODES:
                    ctx = f"{arch}/{strength}/{mode}/new={new}"
                    out = greedy(
                        model,
                        ids,
                        new,
                        assistant_model=drafter,
                        oneiro_mode=mode,
                        oneiro_cost_aware=False,
                        oneiro_max_draft_tokens=8,
                        oneiro_min_draft_confidence=0.0,
                    )
                    assert out.shape[1] == ids.shape[1] + new, ctx
                    assert torch.equal(out, ref), ctx
                    check_stats(drafter, new, ctx)
                    if new == 1:
                        assert drafter.last_stats.drafted_tokens == 0, ctx


def _eos_from_plain_run(model, ids, lo: int = 4, hi: int = 16):
    """A token greedy decoding produces at generated index i (lo <= i < hi) for the first time."""
    gen = greedy(model, ids, hi)[0, ids.shape[1] :].tolist()
    for i in range(lo, hi):
        if gen[i] not in gen[:i]:
            return gen[i], i
    raise AssertionError("test setup: greedy output repeats too early to pick a mid-way EOS")


@pytest.mark.parametrize("arch", ARCHS)
def test_eos_mid_generation(arch):
    for strength in (None, "per_token"):
        model, ids = target(arch, strength)
        drafter = OneiroDrafter.from_target(model)
        lo = 2 if strength == "per_token" else 4
        eos, pos = _eos_from_plain_run(model, ids, lo=lo)
        model.generation_config.eos_token_id = eos
        ref = greedy(model, ids, 30)
        expected_len = ids.shape[1] + pos + 1
        assert ref.shape[1] == expected_len and int(ref[0, -1]) == eos
        for mode in MODES:
            for cost_aware in (False, True):
                ctx = f"{arch}/{strength}/{mode}/cost_aware={cost_aware}"
                out = greedy(
                    model,
                    ids,
                    30,
                    assistant_model=drafter,
                    oneiro_mode=mode,
                    oneiro_cost_aware=cost_aware,
                    oneiro_min_draft_confidence=0.0,
                )
                assert torch.equal(out, ref), ctx
                assert int(out[0, -1]) == eos and eos not in out[0, ids.shape[1] : -1].tolist(), ctx
                check_stats(drafter, pos + 1, ctx)
        # EOS given per call instead of through the generation config
        model.generation_config.eos_token_id = None
        out = greedy(model, ids, 30, assistant_model=drafter, eos_token_id=eos, oneiro_cost_aware=False)
        assert torch.equal(out, ref)


def test_stats_reset_between_calls():
    model = make_model("llama", strength="per_token")
    drafter = OneiroDrafter.from_target(model)
    ids = random_prompt(5, seed=1)
    greedy(model, ids, 30, assistant_model=drafter, oneiro_mode="latent", oneiro_cost_aware=False)
    first = drafter.last_stats
    greedy(model, ids, 6, assistant_model=drafter, oneiro_mode="latent", oneiro_cost_aware=False)
    assert drafter.last_stats is not first
    check_stats(drafter, 6, "second call")


def test_custom_interval_and_reduced_draft_vocab_keep_equality(monkeypatch):
    model = make_model("gemma3", strength="prefix")
    vocab_ids = list(range(0, 128, 2))  # even tokens only
    drafter = OneiroDrafter.from_target(model, interval=(1, 3), draft_vocab_ids=vocab_ids)
    drafted: list[int] = []
    original = OneiroCandidateGenerator.get_candidates

    def spy(self, input_ids, *args, **kwargs):
        cand, logits = original(self, input_ids, *args, **kwargs)
        drafted.extend(cand[0, input_ids.shape[1] :].tolist())
        return cand, logits

    monkeypatch.setattr(OneiroCandidateGenerator, "get_candidates", spy)
    for seed in range(3):
        ids = random_prompt(12, seed=seed)
        ref = greedy(model, ids, 16)
        out = greedy(model, ids, 16, assistant_model=drafter, oneiro_mode="latent", oneiro_cost_aware=False)
        assert torch.equal(out, ref)
    assert drafted, "nothing was drafted"
    assert set(drafted) <= set(vocab_ids), sorted(set(drafted) - set(vocab_ids))


def test_bfloat16_target_smoke():
    model = make_model("llama", strength="per_token", dtype=torch.bfloat16)
    drafter = OneiroDrafter.from_target(model)
    assert all(p.dtype == torch.bfloat16 for p in drafter.parameters())
    ids = random_prompt(6, seed=2)
    out = greedy(model, ids, 12, assistant_model=drafter, oneiro_mode="hybrid", oneiro_cost_aware=False)
    assert out.shape == (1, 18)
    assert drafter.last_stats.drafted_tokens > 0


def test_target_cast_after_binding():
    model = make_model("llama", strength="per_token")
    drafter = OneiroDrafter.from_target(model)
    model.to(torch.float64)  # float64 keeps assisted and plain greedy bit-comparable
    ids = random_prompt(6, seed=2)
    ref = greedy(model, ids, 10)
    try:
        out = greedy(model, ids, 10, assistant_model=drafter, oneiro_mode="latent", oneiro_cost_aware=False)
    except (RuntimeError, ValueError) as err:
        assert "bind" in str(err), f"unclear error: {err}"
    else:
        assert torch.equal(out, ref)


# ------------------------------------------------------------------------------- generate features


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_return_dict_scores_logits_and_hidden_states(arch):
    model = make_model(arch, strength="prefix")
    drafter = OneiroDrafter.from_target(model)
    ids = random_prompt(10, seed=3)
    kw = {
        "return_dict_in_generate": True,
        "output_scores": True,
        "output_logits": True,
        "output_hidden_states": True,
    }
    ref = greedy(model, ids, 12, **kw)
    for mode in MODES:
        out = greedy(
            model,
            ids,
            12,
            assistant_model=drafter,
            oneiro_mode=mode,
            oneiro_cost_aware=False,
            oneiro_min_draft_confidence=0.0,
            **kw,
        )
        assert torch.equal(out.sequences, ref.sequences), mode
        assert len(out.scores) == len(ref.scores) == 12
        assert len(out.logits) == 12
        for a, b in zip(out.scores, ref.scores):
            assert a.shape == b.shape == (1, 128)
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
        for a, b in zip(out.logits, ref.logits):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
        assert len(out.hidden_states) == len(ref.hidden_states)
        for step_a, step_b in zip(out.hidden_states, ref.hidden_states):
            assert len(step_a) == len(step_b) == model.config.num_hidden_layers + 1
            for a, b in zip(step_a, step_b):
                assert a.shape == b.shape
                torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
        if mode == "latent":
            assert drafter.last_stats.accepted_tokens > 0  # the hidden states of accepted drafts were split


def test_output_hidden_states_without_return_dict_keeps_drafting():
    model = make_model("llama", strength="per_token")
    drafter = OneiroDrafter.from_target(model)
    ids = random_prompt(7, seed=4)
    ref = greedy(model, ids, 15)
    out = greedy(
        model,
        ids,
        15,
        assistant_model=drafter,
        output_hidden_states=True,
        oneiro_mode="latent",
        oneiro_cost_aware=False,
        oneiro_min_draft_confidence=0.0,
    )
    assert torch.equal(out, ref)
    s = drafter.last_stats
    assert s.accepted_tokens == s.drafted_tokens > 0


class _Collect(BaseStreamer):
    def __init__(self):
        self.chunks: list[list[int]] = []
        self.ended = 0

    def put(self, value):
        self.chunks.append(value.flatten().tolist())

    def end(self):
        self.ended += 1


@pytest.mark.parametrize("mode", MODES)
def test_streamer_receives_exactly_the_output(mode):
    model, ids = target("qwen2", "per_token")
    drafter = OneiroDrafter.from_target(model)
    streamer = _Collect()
    out = greedy(
        model, ids, 20, assistant_model=drafter, streamer=streamer, oneiro_mode=mode, oneiro_cost_aware=False
    )
    assert torch.equal(out, greedy(model, ids, 20))
    assert streamer.ended == 1
    assert streamer.chunks[0] == ids[0].tolist()  # the prompt comes first
    streamed = [t for chunk in streamer.chunks[1:] for t in chunk]
    assert streamed == out[0, ids.shape[1] :].tolist()
    assert any(len(c) > 1 for c in streamer.chunks[1:])  # accepted drafts arrive several at a time


@pytest.mark.parametrize(
    "processors",
    [
        {"repetition_penalty": 1.5},
        {"no_repeat_ngram_size": 2},
        {"repetition_penalty": 1.2, "no_repeat_ngram_size": 3},
        {"min_new_tokens": 10},
    ],
    ids=["repetition_penalty", "no_repeat_ngram", "both", "min_new_tokens"],
)
@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_logits_processors_keep_equality(arch, processors):
    for strength in ("per_token", "prefix"):
        model, ids = target(arch, strength)
        drafter = OneiroDrafter.from_target(model)
        kw = dict(processors)
        if "min_new_tokens" in kw:
            eos, _ = _eos_from_plain_run(model, ids, lo=1)
            model.generation_config.eos_token_id = eos
        ref = greedy(model, ids, 18, **kw)
        for mode in MODES:
            out = greedy(
                model,
                ids,
                18,
                assistant_model=drafter,
                oneiro_mode=mode,
                oneiro_cost_aware=False,
                oneiro_min_draft_confidence=0.0,
                **kw,
            )
            assert torch.equal(out, ref), f"{strength}/{mode}"


def test_generation_config_object_is_honoured():
    model = make_model("mistral", strength="per_token")
    drafter = OneiroDrafter.from_target(model)
    ids = random_prompt(8, seed=6)
    config = GenerationConfig(max_new_tokens=9, do_sample=False, pad_token_id=0)
    ref = model.generate(ids, generation_config=config)
    out = model.generate(ids, generation_config=config, assistant_model=drafter, oneiro_cost_aware=False)
    assert out.shape[1] == ids.shape[1] + 9
    assert torch.equal(out, ref)


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_left_padded_prompt_with_attention_mask_and_max_length(arch):
    model = make_model(arch, strength="prefix")
    drafter = OneiroDrafter.from_target(model)
    ids = torch.cat([torch.zeros(1, 4, dtype=torch.long), random_prompt(9, seed=3)], dim=1)  # 0 is padding
    mask = (ids != 0).long()
    with torch.no_grad():
        ref = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=16, do_sample=False)
        for mode in MODES:
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=16,
                do_sample=False,
                assistant_model=drafter,
                oneiro_mode=mode,
                oneiro_cost_aware=False,
                oneiro_min_draft_confidence=0.0,
            )
            assert torch.equal(out, ref), mode
        assert drafter.last_stats.drafted_tokens > 0
        # max_length instead of max_new_tokens bounds the drafts too
        plain = model.generate(ids[:, 4:], max_length=20, do_sample=False)
        out = model.generate(
            ids[:, 4:],
            max_length=20,
            do_sample=False,
            assistant_model=drafter,
            oneiro_cost_aware=False,
            oneiro_max_draft_tokens=8,
        )
    assert out.shape == (1, 20)
    assert torch.equal(out, plain)


def test_other_assistants_still_work_on_a_hooked_target():
    model = make_model("llama", strength="prefix")
    drafter = OneiroDrafter.from_target(model)  # installs the instance hook
    ids = torch.cat([random_prompt(6, seed=7), random_prompt(6, seed=7), random_prompt(3, seed=8)], dim=1)
    ref = greedy(model, ids, 16)
    # transformers' own prompt lookup
    assert torch.equal(greedy(model, ids, 16, prompt_lookup_num_tokens=5), ref)
    # a plain small assistant model with the same vocabulary
    small = make_model("llama", layers=1, seed=3)
    assert torch.equal(greedy(model, ids, 16, assistant_model=small), ref)
    # and the drafter afterwards, then a plain call
    assert torch.equal(greedy(model, ids, 16, assistant_model=drafter, oneiro_cost_aware=False), ref)
    assert torch.equal(greedy(model, ids, 16), ref)
    # batched plain generation still works on the hooked instance (only assisted decoding needs batch 1)
    batch = torch.cat([ids, ids], dim=0)
    assert torch.equal(greedy(model, batch, 4)[0], greedy(model, ids, 4)[0])


def test_hook_is_per_instance(tiny_llama):
    hooked = tiny_llama
    OneiroDrafter.from_target(hooked)
    other = make_model("llama")
    assert "generate" in vars(hooked)
    assert "generate" not in vars(other)
    assert other.generate.__func__ is type(other).generate  # the class itself was never patched
    assert hooked.generate.__func__ is not type(hooked).generate


# ---------------------------------------------------------------------------------------------- sampling


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_sampling_with_top_k_1_equals_greedy(arch):
    """top_k=1 makes sampling deterministic: speculative sampling must then reproduce greedy exactly."""
    for strength in ("per_token", "prefix"):
        model, ids = target(arch, strength)
        drafter = OneiroDrafter.from_target(model)
        ref = greedy(model, ids, 20)
        for mode in MODES:
            torch.manual_seed(0)
            with torch.no_grad():
                out = model.generate(
                    ids,
                    do_sample=True,
                    top_k=1,
                    max_new_tokens=20,
                    assistant_model=drafter,
                    oneiro_mode=mode,
                    oneiro_cost_aware=False,
                    oneiro_min_draft_confidence=0.0,
                )
            assert torch.equal(out, ref), f"{strength}/{mode}"
            if strength == "per_token":
                s = drafter.last_stats
                assert s.accepted_tokens > 0, mode


def test_sampling_proposes_draft_vocabulary_tokens_without_logits(monkeypatch):
    """Sampling drafts proposals, not samples: the generator hands the loop no drafting logits (its token-matching
    acceptance is exact for point masses), the drafter's tokens come from its draft vocabulary, and one seed gives
    one sample from one drafting state (what the policy learned changes the drafts, and so which draws are made)."""
    model = make_model("llama", strength="prefix")
    drafter = OneiroDrafter.from_target(model, draft_vocab_ids=list(range(64)))
    seen: list[tuple[torch.Tensor, torch.Tensor | None, int]] = []
    original = OneiroCandidateGenerator.get_candidates

    def spy(self, input_ids, *args, **kwargs):
        cand, logits = original(self, input_ids, *args, **kwargs)
        seen.append((cand.clone(), logits, input_ids.shape[1]))
        return cand, logits

    monkeypatch.setattr(OneiroCandidateGenerator, "get_candidates", spy)
    ids = random_prompt(8, seed=10)
    outs = []
    for _ in range(2):
        drafter.reset_drafting_policy()
        torch.manual_seed(1234)
        with torch.no_grad():
            outs.append(model.generate(ids, do_sample=True, temperature=0.7, top_k=20, max_new_tokens=20,
                                       assistant_model=drafter, oneiro_mode="latent", oneiro_cost_aware=False))
    assert torch.equal(outs[0], outs[1]), "same seed must give the same sample"
    assert outs[0].shape == (1, 28)
    assert drafter.last_stats.drafted_tokens > 0
    assert all(logits is None for _, logits, _ in seen)
    drafted = torch.cat([cand[0, n:] for cand, _, n in seen])
    assert drafted.numel() > 0 and int(drafted.max()) < 64, "latent tokens come from the draft vocabulary"


@pytest.mark.parametrize("mode", ["latent", "lookup"])
def test_speculative_sampling_matches_the_target_distribution(mode):
    """The (t1, t2) joint under assisted sampling matches the target's exact joint (t2 is drafted).

    latent: a partly right drafter, so drafts are sometimes accepted and the residual is sampled otherwise;
    lookup: a cycle prompt, so the copied draft is the target's favourite but not certain (q is a point mass).
    """
    if mode == "latent":
        model = make_model("llama", strength="prefix")
        ids = random_prompt(6, seed=12)
    else:
        model, cyc = make_cyclic_model("llama")
        ids = repeat_prompt(cyc, 2)
    drafter = OneiroDrafter.from_target(model)
    top_k = 4
    with torch.no_grad():
        first = model(ids).logits[0, -1]
        p1 = torch.zeros(128)
        top1 = first.topk(top_k)
        p1[top1.indices] = top1.values.softmax(-1)
        exact: dict[tuple[int, int], float] = {}
        for t1 in top1.indices.tolist():
            nxt = model(torch.cat([ids, torch.tensor([[t1]])], dim=1)).logits[0, -1]
            top2 = nxt.topk(top_k)
            for t2, p in zip(top2.indices.tolist(), top2.values.softmax(-1).tolist()):
                exact[(t1, t2)] = float(p1[t1]) * p
    torch.manual_seed(2024)
    counts: dict[tuple[int, int], int] = {}
    n = 240
    drafted = 0
    for _ in range(n):
        with torch.no_grad():
            out = model.generate(
                ids,
                do_sample=True,
                top_k=top_k,
                max_new_tokens=3,
                assistant_model=drafter,
                oneiro_mode=mode,
                oneiro_cost_aware=False,
            )
        key = tuple(out[0, ids.shape[1] : ids.shape[1] + 2].tolist())
        counts[key] = counts.get(key, 0) + 1
        drafted += drafter.last_stats.drafted_tokens
    assert drafted > n // 5, "the second token must often come from a draft"
    assert set(counts) <= set(exact), "sampled a pair the target gives zero probability"
    keys = list(exact)
    probs = torch.tensor([exact[k] for k in keys])
    tv = 0.5 * sum(abs(counts.get(k, 0) / n - exact[k]) for k in keys)
    # what exact sampling would give with n draws: the observed distance must be within its 99.9% range
    gen = torch.Generator().manual_seed(0)
    null = torch.stack(
        [
            0.5
            * (
                torch.multinomial(probs, n, replacement=True, generator=gen).bincount(minlength=len(keys)) / n
                - probs
            )
            .abs()
            .sum()
            for _ in range(2000)
        ]
    )
    assert tv <= float(null.quantile(0.999)), (tv, counts, exact)
