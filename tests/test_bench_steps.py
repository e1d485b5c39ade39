"""The benchmark's per-step draft log: oneiro methods read it from the call's DraftStats, never by wrapping
OneiroDraft's candidate generator; transformers' own generators (hf-*) are still wrapped."""

from __future__ import annotations

import pytest
from tiny import make_model, repeat_prompt

from oneiro_hf import OneiroDrafter, bench
from oneiro_hf.bench import runner


class _NotOurs:
    """Stands in for OneiroCandidateGenerator so that the recorder wraps every generator (the old way)."""


def _context(method: str):
    model = make_model("llama", strength="prefix")
    drafter = OneiroDrafter.from_target(model, cost_aware=False, min_draft_confidence=0.0)  # drafts every step
    spec = bench.parse_method(method)
    recorder = runner.StepRecorder()
    recorder.install(model)
    return runner.BenchContext(model, None, drafter, None, {spec.name: spec}, recorder), spec


@pytest.mark.parametrize("method", ["oneiro-hybrid", "oneiro-latent"])
def test_oneiro_steps_come_from_stats_and_match_what_a_wrapper_sees(method, monkeypatch):
    prompt = repeat_prompt([5, 9, 17, 33], 4)
    ctx, spec = _context(method)
    result = runner.generate_once(ctx, spec.name, prompt, 24)
    assert ctx.recorder.draft_lengths == [] and ctx.recorder.accepted == []  # our generator was not wrapped
    assert len(result["draft_lengths"]) == len(result["accepted"]) > 1 and sum(result["draft_lengths"]) > 0
    stats = ctx.drafter.last_stats
    assert sum(result["draft_lengths"]) == stats.drafted_tokens and sum(result["accepted"]) == stats.accepted_tokens

    # our generator wrapped as transformers' are: in that call the wrapper logs what the stats say (draft
    # lengths depend on measured timings under cost-aware drafting, so compare within one call)
    monkeypatch.setattr(runner, "OneiroCandidateGenerator", _NotOurs)
    ctx, spec = _context(method)
    wrapped = runner.generate_once(ctx, spec.name, prompt, 24)
    assert wrapped["tokens"] == result["tokens"]
    assert ctx.recorder.draft_lengths == wrapped["draft_lengths"] and sum(wrapped["draft_lengths"]) > 0
    assert ctx.recorder.accepted == wrapped["accepted"]


def test_hf_lookup_is_still_recorded_by_the_wrapper():
    ctx, _ = _context("oneiro-hybrid")
    spec = bench.parse_method("hf-lookup")
    ctx.specs[spec.name] = spec
    result = runner.generate_once(ctx, spec.name, repeat_prompt([5, 9, 17, 33], 4), 16)
    assert result["draft_lengths"] == ctx.recorder.draft_lengths and len(result["draft_lengths"]) > 1
    assert result["oneiro_stats"] is None


@pytest.mark.parametrize("method", ["hf-assistant", "hf-early-exit"])
def test_transformers_assistant_generators_pass_one_generation_config(method, monkeypatch):
    """transformers 5.25 warns when generate gets a generation config together with generation arguments; its
    assistant generators did that on every draft, so oneiro-bench hands them one config (same tokens)."""
    from transformers.generation import utils as generation_utils

    warned: list[str] = []
    original = generation_utils.logger.warning_once
    monkeypatch.setattr(generation_utils.logger, "warning_once",
                        lambda msg, *a, **k: (warned.append(str(msg)), original(msg, *a, **k)))
    prompt = repeat_prompt([5, 9, 17, 33], 4)
    ctx, _ = _context("oneiro-hybrid")
    ctx.assistant = make_model("llama", seed=1)
    for name in ("greedy", method):
        ctx.specs[name] = bench.parse_method(name, early_exit_layer=1)
    greedy = runner.generate_once(ctx, "greedy", prompt, 12)
    result = runner.generate_once(ctx, method, prompt, 12)
    assert result["tokens"] == greedy["tokens"] and sum(ctx.recorder.draft_lengths) > 0
    assert not [m for m in warned if "Passing `generation_config` together" in m]
