"""The hybrid in vLLM without vLLM: `RequestLookup.continuations` and `apply` rewrite a step's draft rows as `generate`'s hybrid
chooses (the lookup continuation where a request's text has an n-gram match, the drafter's chain otherwise), from
the committed tokens and this step's sampled tokens as vLLM's runner holds them; `--hybrid` exports the setting."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from test_vllm_export import _saved

from oneiro_hf.drafting.lookup import NgramIndex
from oneiro_hf.serving import cli
from oneiro_hf.serving.vllm_export import VLLM_CONFIG_KEY, VllmExportRefused, export_for_vllm
from oneiro_hf.serving.vllm_lookup import RequestLookup, kept_rows

K = 3


def _override(lookup: RequestLookup, drafts: torch.Tensor, req_ids, token_ids, counts, sampled) -> torch.Tensor:
    """One draft step as the plugin's hook runs it: find the rows' continuations, then write them over the drafts."""
    found = lookup.continuations(req_ids, token_ids, counts, kept_rows(sampled), int(drafts.shape[1]))
    return lookup.apply(drafts, found)


def _batch(histories: list[list[int]], width: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """vLLM's persistent batch: committed tokens padded to a fixed width, and each row's count."""
    token_ids = np.zeros((len(histories) + 2, width), dtype=np.int32)  # spare rows, as vLLM keeps max_num_reqs
    for i, history in enumerate(histories):
        token_ids[i, : len(history)] = history
    return token_ids, np.array([len(h) for h in histories] + [0, 0], dtype=np.int32)


def test_rows_with_a_match_take_the_lookup_continuation_and_the_others_keep_the_drafters():
    # row 0's committed text ends in 7 and this step kept 8: "7 8" occurred before, followed by 9 10 7
    histories = [[1, 7, 8, 9, 10, 7], [1, 2, 3, 4, 5, 6]]
    token_ids, counts = _batch(histories)
    sampled = torch.tensor([[8, -1, -1, -1], [11, 12, -1, -1]])  # row 0 kept one token, row 1 two
    latent = torch.tensor([[50, 51, 52], [60, 61, 62]], dtype=torch.int32)
    lookup = RequestLookup(min_ngram=2, max_ngram=4)
    drafts = _override(lookup, latent.clone(), ["a", "b"], token_ids, counts, sampled)
    # what generate's lookup proposes for the same text (prompt lookup over the sequence so far)
    index = NgramIndex(2, 4)
    index.extend(histories[0] + [8])
    expected, n = index.lookup(K)
    assert expected == [9, 10, 7] and n == 2
    assert drafts[0].tolist() == expected
    assert drafts[1].tolist() == latent[1].tolist()  # "11 12" never occurred before: the drafter's chain stays
    assert drafts.dtype == torch.int32 and lookup.rows_replaced == 1


def test_a_short_continuation_replaces_only_its_positions():
    histories = [[4, 5, 6, 4]]  # "... 4 5" -> 6, then the history ends
    token_ids, counts = _batch(histories)
    drafts = _override(RequestLookup(2, 4), torch.tensor([[70, 71, 72]]), ["a"], token_ids, counts, [[5]])
    assert drafts.tolist() == [[6, 4, 72]]


def test_indexes_follow_each_request_across_steps_and_drop_finished_ones():
    lookup = RequestLookup(2, 3)
    history = [3, 1, 4, 1, 5, 9, 2, 6]
    token_ids, counts = _batch([history[:5]])
    _override(lookup, torch.zeros(1, K, dtype=torch.long), ["a"], token_ids, counts, [[9]])
    # the next step: vLLM committed the sampled 9 and a further token; the index grows by those only
    token_ids, counts = _batch([history[:6] + [3, 1]])
    drafts = _override(lookup, torch.zeros(1, K, dtype=torch.long), ["a"], token_ids, counts, [[4]])
    assert lookup.indexes["a"].tokens == history[:6] + [3, 1]
    assert drafts.tolist() == [[1, 5, 9]]  # "3 1 4" occurred at the start: 1 5 9 followed it
    # vLLM took tokens back (a preempted request recomputed): the index is rebuilt from the committed tokens
    token_ids, counts = _batch([history[:4]])
    _override(lookup, torch.zeros(1, K, dtype=torch.long), ["a"], token_ids, counts, [[]])
    assert lookup.indexes["a"].tokens == history[:4]
    token_ids, counts = _batch([[1, 2]])
    _override(lookup, torch.zeros(1, K, dtype=torch.long), ["b"], token_ids, counts, [[3]])
    assert set(lookup.indexes) == {"b"}


def test_bad_ngram_bounds_are_refused_with_the_fix():
    with pytest.raises(ValueError, match=r"min_ngram <= max_ngram.*Fix:"):
        RequestLookup(3, 2)
    with pytest.raises(ValueError, match="Fix:"):
        RequestLookup(0, 2)


def test_hybrid_export_writes_the_lookup_bounds_and_refuses_bad_ones(tmp_path, capsys):
    target_dir, drafter_dir, _ = _saved(tmp_path)
    assert cli.main(["vllm", str(drafter_dir), str(tmp_path / "hybrid"), "--target", str(target_dir), "--hybrid",
                     "--lookup-min-ngram", "3", "--lookup-max-ngram", "5"]) == 0
    config = json.loads((tmp_path / "hybrid" / "config.json").read_text())
    assert config[VLLM_CONFIG_KEY]["lookup"] == {"min_ngram": 3, "max_ngram": 5}
    assert "prompt-lookup continuation" in (tmp_path / "hybrid" / "README.md").read_text()
    plain = export_for_vllm(drafter_dir, tmp_path / "plain", str(target_dir))
    assert json.loads((plain / "config.json").read_text())[VLLM_CONFIG_KEY]["lookup"] is None
    with pytest.raises(VllmExportRefused, match="Fix:"):
        export_for_vllm(drafter_dir, tmp_path / "bad", str(target_dir), lookup=(4, 2))
    assert not (tmp_path / "bad").exists()
