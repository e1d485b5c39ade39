"""oneiro-bench's tree methods: parsed settings, a run next to the chain hybrid, and the H200-modelled breakdown."""

from __future__ import annotations

import json

import pytest
from test_bench import _args, _lines, env  # noqa: F401  (env is the module-scoped tiny target on disk)

from oneiro_hf import bench
from oneiro_hf.bench import cli as bench_cli
from oneiro_hf.bench.breakdown import modelled_speedup, ratio_at
from oneiro_hf.bench.profile import H200_RATIOS


def test_tree_methods_parse_to_tree_settings() -> None:
    assert bench.parse_method("oneiro-tree").oneiro_settings == {"mode": "hybrid", "tree": True}
    # chain methods say so: the shipped drafters' configs default to trees
    assert bench.parse_method("oneiro-hybrid").oneiro_settings == {"mode": "hybrid", "tree": False}
    spec = bench.parse_method("oneiro-tree-8")
    assert spec.oneiro_settings == {"mode": "hybrid", "tree": True, "tree_max_nodes": 8}
    assert spec.lossless and not spec.relaxed
    fixed = bench.parse_method("oneiro-tree-fixed-16")
    assert fixed.oneiro_settings == {"mode": "hybrid", "tree": True, "tree_max_nodes": 16, "cost_aware": False}
    assert fixed.lossless
    for bad in ("oneiro-tree-0", "oneiro-tree-x", "oneiro-tree-", "oneiro-tree-fixed-0", "oneiro-tree-fixed-"):
        with pytest.raises(bench.BenchInputError, match="N must be an integer"):
            bench.parse_method(bad)


def test_modelled_speedup_by_hand() -> None:
    # 10 tokens in 4 passes of sizes 1, 5, 8, 20 on the H200 profile: cost 1 + 1.159 + 1.169 + 1.169
    assert modelled_speedup(10, [1, 5, 8, 20]) == pytest.approx(10 / 4.497)
    assert ratio_at({1: 1.0, 4: 2.0}, 3) == 1.0 and ratio_at({2: 1.5, 4: 2.0}, 1) == 1.5
    assert modelled_speedup(5, [1] * 5, {1: 1.0}) == pytest.approx(1.0)
    # drafting priced: 3 drafter calls at 0.5 t(1) each add 1.5 to the cost
    assert modelled_speedup(10, [1, 5, 8, 20], drafter_calls=3, drafter_call_ratio=0.5) == pytest.approx(10 / 5.997)


def test_tree_run_next_to_the_chain_and_its_h200_breakdown(env, tmp_path):  # noqa: F811
    out = tmp_path / "run"
    methods = "greedy,oneiro-hybrid,oneiro-tree,oneiro-tree-4,oneiro-tree-fixed-6"
    # Pinned to the H200 profile: tree sizes then follow from fixed t(k), not from this machine's timings,
    # so the size variant's non-empty trees below do not depend on how busy the machine is.
    assert bench_cli.main(_args(env, out, "--methods", methods, "--drafter", "fresh", "--no-plots",
                            "--max-new-tokens", "16", "--pin-profile", "h200")) == 0
    summary = json.loads((out / "summary.json").read_text())["methods"]
    for method in ("oneiro-tree", "oneiro-tree-4", "oneiro-tree-fixed-6"):
        assert summary[method]["overall"]["identical_to_greedy"] == 1.0
    assert 0 < summary["oneiro-tree-4"]["overall"]["tree_nodes_per_pass"] <= 4
    assert "tree_nodes_per_pass" not in summary["oneiro-hybrid"]["overall"]  # chains have no trees
    share = summary["oneiro-tree-fixed-6"]["overall"]["tree_non_first_branch_share"]
    assert share is None or 0.0 <= share <= 1.0
    fixed = [d for r in _lines(out / "answers" / "oneiro-tree-fixed-6.jsonl") for c in r["choices"] for d in c["draft_lengths"]]
    assert max(fixed) == 6  # the cost model is off: full-size trees wherever the budget allows
    small = [d for r in _lines(out / "answers" / "oneiro-tree-4.jsonl") for c in r["choices"] for d in c["draft_lengths"]]
    assert small and max(small) <= 4  # nodes per pass, within the size limit
    lines = _lines(out / "answers" / "oneiro-tree.jsonl")
    for record in lines:
        choice = record["choices"][0]
        assert sum(choice["accept_lengths"]) == sum(choice["new_tokens"])  # the prefill's token included
        turns = len(choice["new_tokens"])  # each turn's prefill is logged as a pass without drafts
        assert len(record["oneiro_stats"]["tree_branch_ranks"]) == len(choice["draft_lengths"]) - turns

    assert bench_cli.main(["breakdown", "--run", str(out), "--latency-profile", "h200"]) == 0
    assert "Modelled on the H200" in (out / "breakdown_h200.md").read_text()
    row = json.loads((out / "breakdown_h200.json").read_text())["methods"]["oneiro-tree"]["overall"]
    tokens = sum(sum(c["new_tokens"]) for r in lines for c in r["choices"])
    passes = [d + 1 for r in lines for c in r["choices"] for d in c["draft_lengths"]]
    assert row["modelled_speedup"] == pytest.approx(modelled_speedup(tokens, passes, H200_RATIOS))


def test_pinned_profile_decides_as_on_the_h200_and_never_relearns(env, tmp_path):  # noqa: F811
    from oneiro_hf.bench.profile import H200_PROFILE
    from oneiro_hf.drafting.policy import DraftPolicyState

    state = DraftPolicyState()
    state.pin_profile(H200_PROFILE["ratios"], H200_PROFILE["t1_s"], H200_PROFILE["drafter_step_ratio"])
    before = dict(state.verify_s)
    state.observe_verify(4, 5.0)  # this machine's seconds are not the H200's: ignored
    state.observe_draft_step(5.0)
    assert state.verify_s == before and state.verify_time(16) / state.verify_time(1) == pytest.approx(1.169)
    assert state.drafting_cost(measured_s=9.0, drafter_calls=3) == pytest.approx(3 * 0.18 * H200_PROFILE["t1_s"])
    assert DraftPolicyState().drafting_cost(measured_s=9.0, drafter_calls=3) == 9.0  # unpinned: as measured

    out = tmp_path / "run"
    assert bench_cli.main(_args(env, out, "--methods", "greedy,oneiro-hybrid,oneiro-tree", "--drafter", "fresh",
                            "--no-plots", "--max-new-tokens", "12", "--pin-profile", "h200")) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["pin_profile"] == "h200"
    assert summary["methods"]["oneiro-tree"]["overall"]["identical_to_greedy"] == 1.0
    assert bench_cli.main(_args(env, tmp_path / "bad", "--pin-profile", "a100")) == bench_cli.EXIT_BAD_INPUT


def test_a_cheaper_drafter_call_is_a_pinned_what_if(env, tmp_path):  # noqa: F811
    out = tmp_path / "run"
    common = ("--methods", "greedy,oneiro-hybrid", "--drafter", "fresh", "--no-plots", "--max-new-tokens", "12")
    assert bench_cli.main(_args(env, out, *common, "--pin-profile", "h200", "--drafter-call-ratio", "0")) == 0
    assert json.loads((out / "summary.json").read_text())["config"]["drafter_call_ratio"] == 0.0
    assert json.loads((out / "run_config.json").read_text())["drafter_call_ratio"] == 0.0
    # resuming with another call cost would mix two what-ifs in one run
    assert bench_cli.main(_args(env, out, *common, "--pin-profile", "h200", "--resume")) == bench_cli.EXIT_BAD_INPUT

    assert bench_cli.main(["breakdown", "--run", str(out), "--latency-profile", "h200", "--drafter-call-ratio", "0"]) == 0
    free = json.loads((out / "breakdown_h200_call0.json").read_text())["methods"]["oneiro-hybrid"]["overall"]
    assert "What-if" in (out / "breakdown_h200_call0.md").read_text()
    assert free["drafter_calls_per_pass"] > 0  # free calls: the drafter drafted
    assert free["modelled_with_drafting"] == pytest.approx(free["modelled_speedup"])
    assert bench_cli.main(["breakdown", "--run", str(out), "--latency-profile", "h200", "--drafter-call-ratio", "1"]) == 0
    dear = json.loads((out / "breakdown_h200_call1.json").read_text())["methods"]["oneiro-hybrid"]["overall"]
    assert dear["modelled_with_drafting"] < free["modelled_with_drafting"]

    assert bench_cli.main(_args(env, tmp_path / "a", *common, "--drafter-call-ratio", "0.05")) == bench_cli.EXIT_BAD_INPUT
    assert bench_cli.main(_args(env, tmp_path / "b", *common, "--pin-profile", "h200",
                            "--drafter-call-ratio", "-1")) == bench_cli.EXIT_BAD_INPUT
    assert bench_cli.main(["breakdown", "--run", str(out), "--drafter-call-ratio", "-1"]) != 0
