"""`assert_identical_on_same_kernels`: a target with its drafter gives plain greedy's tokens on the same kernels,
for the chain, the tree and a left-padded batch of the prompts, and each batch row its prompt's own tokens (the
real-model bfloat16 tests of tests/test_real_models.py and tests/test_large_model.py)."""

from __future__ import annotations

import torch

from oneiro_hf import cpu_kernels


def assert_identical_on_same_kernels(model, drafter, prompts: list[list[int]], pad_token_id: int,
                                     max_new_tokens: int) -> int:
    """Each prompt (token ids) alone, chain and tree, then all of them as one left-padded batch with the drafter's
    defaults, against greedy inside `cpu_kernels` (which must be exact); returns the latent and lookup tokens
    accepted, so a caller can check that drafts were really accepted."""
    singles, accepted = [], 0
    for prompt in prompts:
        ids = torch.tensor([prompt])
        with cpu_kernels(model) as kernels:
            ref = model.generate(ids, max_new_tokens=max_new_tokens, do_sample=False)
        assert kernels.exact, kernels
        singles.append(ref[0, ids.shape[1]:])
        for tree in (False, True):
            out = model.generate(ids, max_new_tokens=max_new_tokens, do_sample=False, assistant_model=drafter,
                                 oneiro_tree=tree)
            kind = "tree" if tree else "chain"
            assert torch.equal(out, ref), f"{kind} differs from greedy on prompt {prompts.index(prompt)}"
            accepted += drafter.last_stats.accepted_tokens
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad_token_id] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    with cpu_kernels(model):
        ref = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=False)
    for tree in (False, True):
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=False,
                             assistant_model=drafter, oneiro_tree=tree)
        assert torch.equal(out, ref), f"the batch ({'tree' if tree else 'chain'}) differs from batched greedy"
    for row, single in enumerate(singles):  # padding and the other rows change no bits of a row
        assert torch.equal(ref[row, width:width + len(single)], single), f"batch row {row} differs from its prompt"
    return accepted
