"""The priced draft length in vLLM without vLLM: `DraftPricer` keeps, per step and request, the drafts that promise
the most tokens per second from vLLM's engine step profile and the calibrated confidence of each token, skips drafter
calls no request would verify, learns from vLLM's verdicts, and `--step-profile` exports the setting."""

from __future__ import annotations

import itertools
import json
from itertools import accumulate
from operator import mul
from pathlib import Path

import pytest
import torch
from test_vllm_export import _saved

from oneiro_hf.serving import cli
from oneiro_hf.serving.schedule import step_profile
from oneiro_hf.serving.vllm_export import VLLM_CONFIG_KEY, VllmExportRefused, export_for_vllm
from oneiro_hf.serving.vllm_pricing import DraftPricer

K = 3
# engine steps (seconds) by batch size and draft length: a CPU whose step grows fast with the drafts
STEEP = step_profile({1: {0: 0.050, 1: 0.052, 2: 0.066, 3: 0.090}, 4: {0: 0.060, 1: 0.080, 2: 0.110, 3: 0.150}})
FLAT = step_profile({1: {0: 0.050, 1: 0.050, 2: 0.050, 3: 0.050}})


def _step(pricer: DraftPricer, confidences: list[list[float]], lookup=None, req_ids=None) -> list[list[int]]:
    """One draft step as vLLM's EAGLE path runs it with the model's hooks: a call per draft position while the
    pricer wants it (a skipped call records nothing), then the cut of the (B, k) draft tokens."""
    rows = len(confidences)
    req_ids = req_ids or [f"r{i}" for i in range(rows)]
    pricer.begin(req_ids, [[1]] * rows, lookup)
    for position in range(K):
        if pricer.wants_call():
            pricer.record(torch.tensor([c[position] for c in confidences]))
    drafts = [[100 * i + j for j in range(K)] for i in range(rows)]
    out = pricer.cut(drafts)
    pricer.finish()
    return out


def _rate(pricer: DraftPricer, lengths: tuple[int, ...], values: list[list[float]]) -> float:
    rows = len(values)
    expected = rows + sum(sum(v[:n]) for v, n in zip(values, lengths))
    return expected / pricer.step_time(sum(lengths), rows)


def test_a_confident_row_drafts_more_than_a_doubtful_one_and_the_cut_is_the_best_choice():
    pricer = DraftPricer(STEEP)
    confidences = [[0.97, 0.95, 0.93], [0.15, 0.1, 0.1]]
    out = _step(pricer, confidences)
    lengths = tuple(len(row) for row in out)
    assert lengths[0] > lengths[1]
    # every combination of lengths, priced the same way: none promises more tokens per second
    values = [list(accumulate((pricer.policy.latent_rate(c).value for c in row), mul)) for row in confidences]
    best = max(itertools.product(range(K + 1), repeat=2), key=lambda n: _rate(pricer, n, values))
    assert _rate(pricer, lengths, values) == pytest.approx(_rate(pricer, best, values))
    assert out[0] == [0, 1, 2][: lengths[0]] and pricer.drafts_cut == 2 * K - sum(lengths)


def test_the_profile_decides_how_much_is_verified():
    confidences = [[0.6, 0.5, 0.4]]
    assert [len(r) for r in _step(DraftPricer(FLAT), confidences)] == [K]  # verifying costs nothing: keep all
    steep = step_profile({1: {0: 0.05, 1: 0.1, 2: 0.15, 3: 0.2}})  # every draft doubles the step
    assert _step(DraftPricer(steep), confidences) == [[]]


def test_drafter_calls_no_row_would_verify_are_skipped_and_calls_outside_a_step_run():
    pricer = DraftPricer(STEEP)
    _step(pricer, [[0.02, 0.9, 0.9], [0.03, 0.9, 0.9]])  # no first token worth verifying: no further call
    assert pricer.calls == K and pricer.calls_skipped == K - 1
    assert pricer.wants_call() and not pricer.skipping  # after `finish` (vLLM's warm-up): unpriced, always run
    flat = DraftPricer(FLAT)
    assert _step(flat, [[0.99, 0.99, 0.99]]) == [[0, 1, 2]]
    assert flat.calls_skipped == 0  # a row keeping all its tokens at every call: every call made


def test_forwards_replayed_from_a_cuda_graph_never_reach_python_and_the_logits_still_price_the_step():
    eager, graph = DraftPricer(STEEP), DraftPricer(STEEP)
    confidences = [[0.97, 0.95, 0.93], [0.15, 0.1, 0.1]]
    graph.begin(["r0", "r1"], [[1], [1]])
    for position in range(K):  # no `wants_call`: vLLM replays the forward; compute_logits runs in Python
        graph.record(torch.tensor([c[position] for c in confidences]))
    drafts = [[100 * i + j for j in range(K)] for i in range(2)]
    assert graph.cut(drafts) == _step(eager, confidences)
    assert graph.calls_skipped == 0


def test_lookup_rows_are_valued_by_lookups_rates_and_need_no_drafter_call():
    pricer = DraftPricer(FLAT)
    out = _step(pricer, [[0.01, 0.01, 0.01]], lookup={0: ([7, 8], 3)})
    assert out == [[0, 1]]  # the lookup continuation's two positions (written into the row by the lookup)
    assert pricer.calls_skipped == K - 1
    assert pricer.rows[0].values == pytest.approx(
        list(accumulate(pricer.policy.lookup_probs(3, 2), mul)))


def test_the_verdict_on_what_was_sent_calibrates_the_rates_it_was_valued_with():
    pricer = DraftPricer(FLAT)
    _step(pricer, [[0.95, 0.95, 0.95]], req_ids=["a"])
    rate = pricer.policy.latent_rate(0.95)
    before = (rate.accepted, rate.seen)
    pricer.begin(["a"], [[5, 6, -1, -1]])  # one draft accepted, the second rejected, the third never tested
    pricer.finish()
    assert (rate.accepted - before[0], rate.seen - before[1]) == (1.0, 2.0)
    assert "a" not in pricer.sent
    pricer.begin(["b"], [[1]])  # requests that left the batch are forgotten
    assert pricer.sent == {}


def test_profiles_that_cannot_price_vllms_steps_are_refused_with_the_fix():
    with pytest.raises(ValueError, match="engine_steps.*Fix"):
        DraftPricer({"ratios": {"1": 1.0}, "t1_s": 0.05})  # oneiro-bench's own profile: the drafter priced apart
    with pytest.raises(ValueError, match="lacks.*Fix"):
        DraftPricer({"engine_steps": True})


def test_export_writes_the_step_profile_and_refuses_what_cannot_price(tmp_path, capsys):
    target_dir, drafter_dir, _ = _saved(tmp_path)
    profile = tmp_path / "steps.json"
    profile.write_text(json.dumps(STEEP))
    assert cli.main(["vllm", str(drafter_dir), str(tmp_path / "priced"), "--target", str(target_dir),
                     "--step-profile", str(profile)]) == 0
    config = json.loads((tmp_path / "priced" / "config.json").read_text())
    assert config[VLLM_CONFIG_KEY]["step_profile"] == STEEP
    assert "priced length" in (tmp_path / "priced" / "README.md").read_text()
    assert cli.main(["vllm", str(drafter_dir), str(tmp_path / "missing"), "--target", str(target_dir),
                     "--step-profile", str(tmp_path / "none.json")]) == 2
    assert "cannot read the profile" in capsys.readouterr().err
    with pytest.raises(VllmExportRefused, match="engine_steps.*Fix"):
        export_for_vllm(drafter_dir, tmp_path / "bad", str(target_dir), step_profile={"ratios": {"1": 1}, "t1_s": 1})
    assert not (tmp_path / "bad").exists()


def test_the_benchmarks_modes_serve_folders_exported_once_each_with_their_settings(tmp_path):
    from oneiro_hf.serving.measure import benchmark_modes
    from oneiro_hf.serving.vllm_lookup import LOOKUP_NGRAMS

    target_dir, drafter_dir, _ = _saved(tmp_path)
    chosen = ["plain", "ngram", "oneiro", "oneiro-backoff", "oneiro-hybrid", "oneiro-priced", "oneiro-hybrid-priced"]
    modes = benchmark_modes(chosen, drafter_dir, str(target_dir), K, tmp_path / "folders", schedule=[[1, 8, 1]],
                            step_profile=STEEP)
    assert list(modes) == chosen and modes["plain"] is None
    assert (modes["ngram"]["prompt_lookup_min"], modes["ngram"]["prompt_lookup_max"]) == LOOKUP_NGRAMS
    assert modes["oneiro-backoff"] == {**modes["oneiro"], "num_speculative_tokens_per_batch_size": [[1, 8, 1]]}
    sections = {mode: json.loads((Path(spec["model"]) / "config.json").read_text())[VLLM_CONFIG_KEY]
                for mode, spec in modes.items() if spec and spec["method"] == "eagle3"}
    assert len({modes[m]["model"] for m in sections}) == 4  # backoff serves the plain folder
    for mode, section in sections.items():
        assert (section["lookup"] is not None) == ("hybrid" in mode)
        assert section["step_profile"] == (STEEP if mode.endswith("-priced") else None)
    with pytest.raises(ValueError, match="unknown modes.*Fix"):
        benchmark_modes(["eagle"], drafter_dir, str(target_dir), K, tmp_path / "x")
    with pytest.raises(ValueError, match="step-profile"):
        benchmark_modes(["oneiro-priced"], drafter_dir, str(target_dir), K, tmp_path / "y")
    with pytest.raises(ValueError, match="backoff"):
        benchmark_modes(["oneiro-backoff"], drafter_dir, str(target_dir), K, tmp_path / "z")
