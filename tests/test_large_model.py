"""The real-size reference target, Qwen2.5-Coder-1.5B-Instruct (7 GB in float32): loads in float32 and bfloat16, and
every drafting mode gives plain greedy's tokens on it.

Too big for CI's budget (a 1.1 GB fetch, 7 GB of float32 weights, minutes per test on two cores): marked
`large_model`, deselected by `make test` and `make test-fast`, run by `make test-large`.
"""

from __future__ import annotations

import pytest
import torch
from same_kernels import assert_identical_on_same_kernels

from oneiro_hf import OneiroDrafter, cpu_kernels
from oneiro_hf.chat import encode_prompt
from oneiro_hf.storage.reference_models import load_reference_model

# every linear prepacked from one row on (tests/conftest.py): kernels decided, not timed
pytestmark = [pytest.mark.large_model, pytest.mark.real_model, pytest.mark.slow,
              pytest.mark.usefixtures("prepacked_from_one_row")]

NAME = "qwen2.5-coder-1.5b-instruct"
PROMPTS = [
    "Write a Python function that returns the n-th Fibonacci number iteratively, with a docstring.",
    ("Rename the variable `count` to `total` in this code and return the whole code:\n"
    "def tally(items):\n    count = 0\n    for item in items:\n        count += item\n    return count\n"),
]


def _ids(tokenizer, prompt: str) -> torch.Tensor:
    return torch.tensor([encode_prompt(tokenizer, prompt)])


def test_bfloat16_chain_tree_and_batch_give_greedys_tokens_on_the_same_kernels():
    """Runs first, before the float32 fixture loads: the two copies together would need about 24 GB. bfloat16, as
    the original checkpoint loads, with the shipped drafter: the chain, the tree and a batch of both prompts give
    plain greedy's tokens on the same kernels (`cpu_kernels`: exact for bfloat16), each batch row its prompt's own."""
    from oneiro_hf.loading import default_drafter_dir

    torch.set_num_threads(2)
    model, tokenizer = load_reference_model(NAME, dtype=torch.bfloat16)
    assert next(model.parameters()).dtype == torch.bfloat16
    drafter = OneiroDrafter.from_pretrained(default_drafter_dir(NAME), target=model)
    assert next(drafter.parameters()).dtype == torch.bfloat16
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    prompts = [encode_prompt(tokenizer, prompt) for prompt in PROMPTS]
    assert_identical_on_same_kernels(model, drafter, prompts, pad, 32)


def test_gemma_bfloat16_chain_tree_and_batch_give_greedys_tokens_on_the_same_kernels():
    """Gemma-3-270M (sliding-window layers, a 262k vocabulary) in bfloat16 with its shipped drafter: the same."""
    from oneiro_hf.loading import default_drafter_dir

    torch.set_num_threads(2)
    model, tokenizer = load_reference_model("gemma-3-270m", dtype=torch.bfloat16)
    drafter = OneiroDrafter.from_pretrained(default_drafter_dir("gemma-3-270m"), target=model)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    prompts = [encode_prompt(tokenizer, prompt) for prompt in PROMPTS]
    assert_identical_on_same_kernels(model, drafter, prompts, pad, 48)


@pytest.fixture(scope="module")
def qwen15():
    torch.set_num_threads(2)
    model, tokenizer = load_reference_model(NAME)
    return model, tokenizer


def test_loads_in_float32_with_its_stored_parameters(qwen15):
    model, _ = qwen15
    config = model.config
    assert (config.num_hidden_layers, config.hidden_size, config.vocab_size) == (28, 1536, 151936)
    stored = sum(p.numel() for p in model.parameters())
    assert 1.7e9 < stored < 1.85e9  # untied LM head: 1.78B stored parameters, 7.1 GB in float32
    assert next(model.parameters()).dtype == torch.float32


def test_every_mode_and_cpu_kernels_give_greedys_tokens(qwen15):
    model, tokenizer = qwen15
    drafter = OneiroDrafter.from_target(model, draft_vocab_ids=torch.arange(32768))  # a cheap readout for the test
    accepted = 0
    for prompt in PROMPTS:
        ids = _ids(tokenizer, prompt)
        ref = model.generate(ids, max_new_tokens=32, do_sample=False)
        with cpu_kernels(model):
            assert torch.equal(model.generate(ids, max_new_tokens=32, do_sample=False), ref)
        for kwargs in ({"oneiro_mode": "lookup"}, {"oneiro_mode": "latent", "oneiro_cost_aware": False},
                       {"oneiro_mode": "hybrid"}, {"oneiro_tree": True}):
            out = model.generate(ids, max_new_tokens=32, do_sample=False, assistant_model=drafter, **kwargs)
            assert torch.equal(out, ref), f"{kwargs} differs from greedy on {prompt!r}"
            accepted += drafter.last_stats.accepted_tokens
    assert accepted > 0  # the rewrite prompt copies its input: drafts are accepted, not only made


def test_shipped_drafter_loads_relative_to_its_target_and_its_drafts_are_accepted(qwen15):
    """drafters/qwen2.5-coder-1.5b-instruct is stored as differences from this target (11 MiB): it is rebuilt from
    the target, its latent drafts are accepted (a fresh drafter's almost never are), and every mode stays greedy."""
    from oneiro_hf.loading import default_drafter_dir

    model, tokenizer = qwen15
    path = default_drafter_dir(NAME)
    assert path is not None, "drafters/qwen2.5-coder-1.5b-instruct is missing (scripts/ship_qwen15.sh writes it)"
    drafter = OneiroDrafter.from_pretrained(path, target=model)
    ids = _ids(tokenizer, PROMPTS[0])
    ref = model.generate(ids, max_new_tokens=32, do_sample=False)
    latent = model.generate(ids, max_new_tokens=32, do_sample=False, assistant_model=drafter, oneiro_mode="latent",
                            oneiro_cost_aware=False, oneiro_tree=False)
    assert torch.equal(latent, ref)
    assert drafter.last_stats.accepted_tokens > 0
    for kwargs in ({"oneiro_mode": "hybrid", "oneiro_tree": False}, {}):  # {}: its config's default, the tree
        out = model.generate(ids, max_new_tokens=32, do_sample=False, assistant_model=drafter, **kwargs)
        assert torch.equal(out, ref), f"{kwargs} differs from greedy"
