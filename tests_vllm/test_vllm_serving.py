"""The exported SmolLM2 drafter inside vLLM (CPU build): lossless, really used, and drafting what it drafts in
transformers' generate."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from conftest import DRAFTER, MAX_TOKENS, TARGET_NAME, K, run_vllm

GREEDY = {"temperature": 0.0, "max_tokens": MAX_TOKENS}
SAMPLING = {"temperature": 0.8, "top_p": 0.95, "max_tokens": MAX_TOKENS, "seed": 7}


@pytest.fixture(scope="module")
def plain(tmp_path_factory, target_dir, prompt_ids):
    return run_vllm(tmp_path_factory.mktemp("plain"), target_dir, None, prompt_ids, [GREEDY])


@pytest.fixture(scope="module")
def speculative(tmp_path_factory, target_dir, exported, prompt_ids):
    greedy, sampled = run_vllm(tmp_path_factory.mktemp("spec"), target_dir, exported, prompt_ids, [GREEDY, SAMPLING])
    return {"greedy": greedy, "sampling": sampled}


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory, target_dir, exported_hybrid, prompt_ids):
    return run_vllm(tmp_path_factory.mktemp("hybrid"), target_dir, exported_hybrid, prompt_ids, [GREEDY])[0]


@pytest.fixture(scope="module")
def priced(tmp_path_factory, target_dir, exported_priced, prompt_ids):
    greedy, sampled = run_vllm(tmp_path_factory.mktemp("priced"), target_dir, exported_priced, prompt_ids,
                               [GREEDY, SAMPLING])
    return {"greedy": greedy, "sampling": sampled}


@pytest.fixture(scope="module")
def generate_fixed_k(prompt_ids):
    """Accepted drafts by position when the same drafter drafts fixed chains of K latent tokens in generate."""
    from oneiro_hf import OneiroDrafter
    from oneiro_hf.loading import load_target
    from oneiro_hf.serving.measure import fixed_k_acceptance

    torch.set_num_threads(2)
    model, _ = load_target(TARGET_NAME, "float32")
    return fixed_k_acceptance(model, OneiroDrafter.from_pretrained(DRAFTER, target=model), prompt_ids, K, MAX_TOKENS)


def test_greedy_with_the_drafter_is_token_identical_to_plain_greedy(plain, speculative):
    assert all(len(t) == MAX_TOKENS for t in plain[0]["tokens"])  # the prompts run the whole budget
    assert speculative["greedy"]["tokens"] == plain[0]["tokens"]


def test_vllm_really_drafts_with_it(speculative):
    spec = speculative["greedy"]["spec"]
    assert spec["drafts"] > 0 and spec["draft_tokens"] == K * spec["drafts"]
    assert spec["accepted"] > 0
    assert sum(spec["accepted_per_position"]) == spec["accepted"]


def test_acceptance_in_vllm_is_the_drafters_acceptance_in_generate(speculative, generate_fixed_k):
    spec = speculative["greedy"]["spec"]
    vllm_positions, hf_positions = spec["accepted_per_position"], generate_fixed_k["accepted_per_position"]
    print(f"accepted by position: vLLM {vllm_positions} over {spec['drafts']} drafts, generate "
          f"{hf_positions} over {generate_fixed_k['rounds']} rounds")
    # the same function on the same greedy sequences: equal counts, up to a rare argmax tie broken differently by
    # the two attention kernels' rounding (one flip moves a count by one or two)
    for ours, theirs in zip(vllm_positions, hf_positions):
        assert abs(ours - theirs) <= max(2, 0.05 * theirs), (vllm_positions, hf_positions)
    assert abs(spec["drafts"] - generate_fixed_k["rounds"]) <= 2


def test_the_hybrid_drafts_from_lookup_in_vllm_and_is_token_identical_to_plain_greedy(plain, speculative, hybrid):
    assert hybrid["tokens"] == plain[0]["tokens"]
    latent, ours = speculative["greedy"]["spec"], hybrid["spec"]
    print(f"accepted by position: latent {latent['accepted_per_position']} over {latent['drafts']} drafts, hybrid "
          f"{ours['accepted_per_position']} over {ours['drafts']} drafts, {hybrid['lookup_rows_replaced']} from "
          "lookup")
    # the runner's draft step went through the hook: some steps drafted from lookup, and not every step did
    assert 0 < hybrid["lookup_rows_replaced"] < ours["drafts"]
    assert "lookup_rows_replaced" not in speculative["greedy"]  # a folder without lookup leaves the drafts alone


def test_the_priced_draft_length_verifies_drafts_of_their_own_length_and_is_token_identical(plain, priced):
    greedy = priced["greedy"]
    assert greedy["tokens"] == plain[0]["tokens"]
    spec = greedy["spec"]
    print(f"priced: {spec['draft_tokens']} draft tokens in {spec['drafts']} drafts (k = {K}), accepted by position "
          f"{spec['accepted_per_position']}; {greedy['drafts_cut']} cut, {greedy['calls_skipped']} drafter calls "
          "skipped")
    # the cut reached vLLM's scheduler: fewer tokens verified than k per draft, and the pricer both cut and skipped
    assert 0 < spec["draft_tokens"] < K * spec["drafts"]
    assert greedy["drafts_cut"] > 0 and greedy["calls_skipped"] > 0
    assert spec["accepted"] > 0
    sampled = priced["sampling"]
    assert all(0 < len(t) <= MAX_TOKENS for t in sampled["tokens"]) and sampled["spec"]["drafts"] > 0


def test_sampling_with_the_drafter_runs(speculative):
    run = speculative["sampling"]
    assert all(0 < len(t) <= MAX_TOKENS for t in run["tokens"])
    assert all(0 <= token < 49152 for t in run["tokens"] for token in t)
    assert run["spec"]["drafts"] > 0 and run["spec"]["accepted"] >= 0


def test_a_drafter_vllm_cannot_run_is_refused_with_its_reason(tmp_path):
    gemma = DRAFTER.parent / "gemma-3-270m"
    done = subprocess.run([sys.executable, "-m", "oneiro_hf.serving.cli", "vllm", str(gemma), str(tmp_path / "out"),
                           "--target", "gemma-3-270m"], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 2
    assert "refused" in done.stderr and "gemma3_text" in done.stderr and "Fix:" in done.stderr
    assert not (tmp_path / "out").exists()
