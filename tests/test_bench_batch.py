"""oneiro-bench's batched side: t(k, B) in the profile, the throughput mode (`--batch-size`), its token accounting
and row-by-row identity check, and the modelled batch line of `oneiro-bench breakdown`. Tiny models, no timing."""

from __future__ import annotations

import json
import shutil

import pytest
from test_bench import _lines, make_env
from tiny import make_model

from oneiro_hf import bench
from oneiro_hf.bench import batched, runner
from oneiro_hf.bench import cli as bench_cli
from oneiro_hf.bench.breakdown import BATCH_MODEL_ASSUMPTIONS, breakdown_markdown, time_breakdown
from oneiro_hf.bench.plan import parse_batch_sizes
from oneiro_hf.bench.throughput import (
    BATCHED,
    UNSUPPORTED,
    LaneResult,
    row_mismatches,
    summarize_throughput,
    throughput_lines,
)
from oneiro_hf.drafting.draft import cut_at_eos
from oneiro_hf.drafting.latency import load_profile


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return make_env(tmp_path_factory.mktemp("bench_batch"))

# ------------------------------------------------------------------------------------------- profile
def test_profile_batch_sizes_write_t_k_b_on_both_kernel_sets(env, tmp_path, capsys):
    out = tmp_path / "profile.json"
    assert bench_cli.main(["profile", "--target", str(env / "target"), "--max-k", "3", "--context-len", "8",
                           "--repeats", "1", "--threads", "1", "--batch-sizes", "4,1,2", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    raw = json.loads(out.read_text())
    for part in (raw, raw["stock"]):
        assert set(part["batch"]) == {"1", "2", "4"}  # sorted, de-duplicated; JSON keys are strings
        for b, entry in part["batch"].items():
            assert entry["t1_s"] > 0
            assert set(entry["ratios"]) == {"1", "2", "3"} and entry["ratios"]["1"] == pytest.approx(1.0)
            assert all(v > 0 for v in entry["ratios"].values())
            assert part["batch_t1_per_row"][b] == pytest.approx(entry["t1_s"] / int(b))
    assert set(raw["ratios"]) == {"1", "2", "3"}  # the single-row profile is still there, unchanged in shape
    loaded = load_profile(out)  # ints in memory, as the top-level ratios are
    assert set(loaded["batch"]) == {1, 2, 4} and set(loaded["batch"][2]["ratios"]) == {1, 2, 3}
    assert set(loaded["stock"]["batch"]) == {1, 2, 4} and loaded["batch_t1_per_row"][4] > 0
    assert "t(k, B)" in printed and "| 4 |" in printed

    plain = tmp_path / "plain.json"
    assert bench_cli.main(["profile", "--target", str(env / "target"), "--max-k", "2", "--context-len", "8",
                           "--repeats", "1", "--threads", "1", "--out", str(plain)]) == 0
    assert "batch" not in json.loads(plain.read_text())  # without --batch-sizes: the profile as before
    assert "batch" not in json.loads(plain.read_text())["stock"]


@pytest.mark.parametrize("value", ["0", "2,x", ",", "-1"])
def test_profile_refuses_bad_batch_sizes(env, value, capsys):
    assert bench_cli.main(["profile", "--target", str(env / "target"), "--batch-sizes", value]) == 2
    assert "batch sizes are integers >= 1. Fix:" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------- throughput mode
def _run_args(env, out, *extra):
    return ["--target", str(env / "target"), "--questions", str(env / "questions.jsonl"), "--out", str(out),
            "--max-new-tokens", "6", "--per-category", "0", "--no-profile", "--threads", "1",
            "--drafter", str(env / "drafter"), *extra]


def _lanes(out):
    return [LaneResult(**{k: v for k, v in rec.items() if k not in ("new_tokens", "wall_time")},
                       wall_s=rec["wall_time"]) for rec in _records(out)]


def _records(out):
    return _lines(out / "batches.jsonl")


@pytest.fixture(scope="module")
def throughput_run(env, tmp_path_factory):
    out = tmp_path_factory.mktemp("throughput") / "run"
    rc = bench_cli.main(_run_args(env, out, "--methods", "greedy,hf-lookup,oneiro-hybrid", "--batch-size", "1,2",
                                  "--batch-size", "4", "--no-plots"))
    return rc, out


def test_throughput_run_measures_every_method_and_batch_size(throughput_run):
    rc, out = throughput_run
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["batch_sizes"] == [1, 2, 4] and summary["lossless_violations"] == []
    assert list(summary["throughput"]) == ["greedy", "oneiro-greedy", "hf-lookup", "oneiro-hybrid"]
    records = _records(out)
    for method in ("greedy", "oneiro-greedy"):  # plain batched generate runs at every size
        for b in ("1", "2", "4"):
            block = summary["throughput"][method][b]
            assert block["supported"] and block["n_rows"] == 4 and block["n_batches"] == -(-4 // int(b))
            assert block["new_tokens"] == 4 * 6  # no EOS in the tiny model: every row makes all 6 tokens
            assert block["tokens_per_s"] == pytest.approx(block["new_tokens"] / block["wall_s"])
            assert block["identical_rows_to_batched_greedy"] == 1.0 and block["separate_calls"] is None
    assert summary["throughput"]["greedy"]["2"]["speedup_vs_batched_greedy"] == pytest.approx(1.0)
    assert summary["throughput"]["oneiro-greedy"]["4"]["speedup_vs_batched_oneiro_greedy"] == pytest.approx(1.0)
    # batched greedy's rows are what one row alone gives (the left padding is masked)
    alone = {tuple(r["question_ids"]): r["rows"][0] for r in records
             if r["method"] == "greedy" and r["batch_size"] == 1}
    for rec in (r for r in records if r["method"] == "greedy" and r["batch_size"] == 4):
        assert rec["rows"] == [alone[(q,)] for q in rec["question_ids"]]
    for method, why in (("hf-lookup", "not supported by transformers"), ("oneiro-hybrid", UNSUPPORTED)):
        single = summary["throughput"][method]["1"]  # B = 1: a batch of one, no separate calls
        assert single["supported"] and single["identical_rows_to_batched_greedy"] == 1.0
        assert single["speedup_vs_separate_calls"] is None
        for b in ("2", "4"):
            block = summary["throughput"][method][b]
            separate = block["separate_calls"]  # B single-prompt calls of the method, every row
            assert separate["n_rows"] == 4 and separate["new_tokens"] == 24
            if block["supported"]:  # batched drafting landed: measured against batched greedy, row by row
                assert block["identical_rows_to_batched_greedy"] == 1.0 and block["speedup_vs_separate_calls"]
            else:  # generate refused the batch: reported, not a crash, and not called again at that size
                assert block["unsupported"] == why and "batch" in block["refusal"].lower()
                refused = [r for r in records if r["method"] == method and r["batch_size"] == int(b)
                           and r["mode"] == "batched"]
                assert len(refused) == 1 and refused[0]["unsupported"] and refused[0]["rows"] == []
    report = (out / "report.md").read_text()
    assert "## Batched throughput" in report and "| greedy | 4 |" in report
    assert ("| oneiro-hybrid | 2 | " + UNSUPPORTED) in report or summary["throughput"]["oneiro-hybrid"]["2"]["supported"]


def test_drafting_lanes_record_how_their_tokens_came(throughput_run):
    """A throughput ratio splits into tau and pass cost: every drafting lane keeps its rounds, passes and accepted
    drafts by source, and each round gives its accepted drafts plus the target's token (the prefill the first)."""
    _, out = throughput_run
    summary = json.loads((out / "summary.json").read_text())
    for method in ("greedy", "oneiro-greedy", "hf-lookup"):  # no oneiro drafter: nothing to split
        assert all("rounds" not in block for block in summary["throughput"][method].values())
    checked = 0
    for b, block in summary["throughput"]["oneiro-hybrid"].items():
        for part in (block, block["separate_calls"]):
            if not part or "new_tokens" not in part:  # a refused batch has no batched totals
                continue
            accepted = sum(part["accepted_by_source"].values())
            assert set(part["accepted_by_source"]) <= {"latent", "lookup", "memory"}
            assert accepted + part["rounds"] == part["new_tokens"] - part["n_rows"]
            assert part["tokens_per_round"] == pytest.approx((accepted + part["rounds"]) / part["rounds"])
            rows_per_call = 1 if part is block["separate_calls"] else int(b)
            assert 1 <= part["rows_per_pass"] <= rows_per_call
            checked += 1
    assert checked >= 2
    assert "tokens per round" in (out / "report.md").read_text()


def _plant(lanes, method: str, batch_size: int):
    """One token off in the last row of `method`'s first batched lane of that size; the lane."""
    planted = next(lane for lane in lanes if lane.method == method and lane.batch_size == batch_size
                   and lane.mode == "batched")
    planted.rows[-1] = planted.rows[-1][:-1] + [(planted.rows[-1][-1] + 1) % 128]
    return planted


def test_row_identity_check_catches_a_planted_mismatch(throughput_run):
    _, out = throughput_run
    lanes = _lanes(out)
    assert summarize_throughput(lanes, (1, 2, 4))["lossless_violations"] == []
    planted = _plant(lanes, "oneiro-hybrid", 2)
    summary = summarize_throughput(lanes, (1, 2, 4))
    assert summary["lossless_violations"] == ["oneiro-hybrid@B2"]
    assert summary["lossless_violation_questions"] == {"oneiro-hybrid@B2": [planted.question_ids[-1]]}
    block = summary["throughput"]["oneiro-hybrid"]["2"]
    assert block["identical_rows_to_same_kernel_greedy"] == pytest.approx(0.75)
    assert "**VIOLATION**" in "\n".join(throughput_lines(summary))
    assert row_mismatches(planted, planted) == []


def test_rows_are_held_to_greedy_on_their_own_kernels(throughput_run):
    """A speculative method on oneiro-hf's kernels answers to batched oneiro-greedy, a stock one to batched
    greedy: kernels that round differently (bfloat16) may part at a near-tie without breaking the promise."""
    _, out = throughput_run
    lanes = _lanes(out)
    _plant(lanes, "greedy", 1)  # stock greedy parts from the oneiro kernels' greedy on one of the four rows
    summary = summarize_throughput(lanes, (1, 2, 4))
    assert summary["lossless_violations"] == ["hf-lookup@B1"]  # the stock method, not oneiro-hybrid
    hybrid = summary["throughput"]["oneiro-hybrid"]["1"]
    assert hybrid["identical_rows_to_same_kernel_greedy"] == 1.0
    assert hybrid["identical_rows_to_batched_greedy"] == pytest.approx(0.75)
    assert summary["throughput"]["oneiro-greedy"]["1"]["identical_rows_to_same_kernel_greedy"] is None
    assert summary["throughput"]["oneiro-hybrid"]["2"]["identical_separate_rows_to_same_kernel_greedy"] == 1.0
    separate = next(lane for lane in lanes if lane.method == "oneiro-hybrid" and lane.batch_size == 2
                    and lane.mode == "separate")
    separate.rows[0] = separate.rows[0][:-1] + [(separate.rows[0][-1] + 1) % 128]  # one prompt alone parts
    block = summarize_throughput(lanes, (1, 2, 4))["throughput"]["oneiro-hybrid"]["2"]
    assert block["identical_separate_rows_to_same_kernel_greedy"] == pytest.approx(0.75)
    lanes = _lanes(out)
    _plant(lanes, "oneiro-greedy", 2)  # the oneiro kernels' own greedy moves: oneiro-hybrid no longer matches it
    assert summarize_throughput(lanes, (1, 2, 4))["lossless_violations"] == ["oneiro-hybrid@B2"]


def test_tokens_after_eos_are_not_counted(env):
    """A row that reaches EOS early is padded while the others go on: only its tokens up to EOS count."""
    model = make_model("llama", strength="prefix")
    spec = bench.parse_method("greedy")
    ctx = runner.BenchContext(model, None, None, None, {"greedy": spec}, runner.StepRecorder())
    prompts = [[5, 9, 17, 33, 5, 9], [40, 41, 42]]
    free = batched.run_lane(ctx, "greedy", BATCHED, 2, 0, [1, 2], prompts, 8)
    assert [len(r) for r in free.rows] == [8, 8] and free.new_tokens == 16
    # row 0's first token that row 1 never makes becomes EOS: row 0 stops there, row 1 runs on
    first = next(i for i, t in enumerate(free.rows[0][:6]) if t not in free.rows[1] and t not in free.rows[0][:i])
    model.generation_config.eos_token_id = free.rows[0][first]
    stopped = batched.run_lane(ctx, "greedy", BATCHED, 2, 0, [1, 2], prompts, 8)
    assert stopped.rows[0] == free.rows[0][: first + 1]  # up to and including EOS; the pad after it dropped
    assert stopped.rows[1] == free.rows[1] and stopped.new_tokens == first + 1 + 8
    assert cut_at_eos([7, 3, 0, 0], {3}) == [7, 3] and cut_at_eos([7, 8], {3}) == [7, 8]  # a row cut at its stop


def test_left_pad_aligns_rows_right():
    ids, mask = batched.left_pad([[5, 6, 7], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]] and mask.tolist() == [[1, 1, 1], [0, 0, 1]]


@pytest.mark.parametrize(("extra", "message"), [
    (["--batch-size", "0"], "batch sizes are integers >= 1. Fix:"),
    (["--batch-size", "2,two"], "batch sizes are integers >= 1. Fix:"),
    (["--batch-size", "2", "--resume"], "a throughput run (--batch-size) runs whole. Fix:"),
])
def test_batch_size_flag_bad_values_fail_before_loading(env, tmp_path, monkeypatch, capsys, extra, message):
    monkeypatch.setattr(runner, "load_models", lambda *a: pytest.fail("a model was loaded"))
    assert bench_cli.main(_run_args(env, tmp_path / "run", "--no-plots", *extra)) == 2
    assert message in capsys.readouterr().err


def test_batch_size_flag_takes_lists_and_repeats():
    assert parse_batch_sizes(["8,1", "2", "16, 4", "2"], "--batch-size") == (1, 2, 4, 8, 16)
    assert parse_batch_sizes(None, "--batch-size") == ()
    args = bench_cli._run_parser().parse_args(["--batch-size", "1,2", "--batch-size", "4"])
    assert args.batch_size == ["1,2", "4"]


# ------------------------------------------------------------------------------------------- modelled batch line
def test_breakdown_models_batched_throughput_from_t_k_b(env, tmp_path):
    out = tmp_path / "run"
    # drafting decided as on the H200 (its t(k), never re-learned): learned here, a busy machine drafts nothing
    assert bench_cli.main(_run_args(env, out, "--methods", "greedy,oneiro-hybrid", "--no-plots", "--pin-profile",
                                    "h200")) == 0
    flat = {k: 1.0 for k in range(1, 17)}
    steep = {k: 1.0 + 0.5 * (k - 1) for k in range(1, 17)}
    profile = {"t1_s": 0.01, "ratios": flat, "batch": {1: {"t1_s": 0.01, "ratios": flat},
                                                       8: {"t1_s": 0.02, "ratios": steep}}}
    result = time_breakdown(out, profile)
    greedy = result["methods"]["greedy"]["modelled_batch"]
    assert greedy[1]["speedup_vs_batched_greedy"] == pytest.approx(1.0)
    assert greedy[8]["batched_greedy_tokens_per_s"] == pytest.approx(8 / 0.02)  # B rows per t(1, B)
    hybrid = result["methods"]["oneiro-hybrid"]
    tau = hybrid["overall"]["tau"]
    assert tau > 1
    per_b = hybrid["modelled_batch"]
    assert per_b[1]["speedup_vs_batched_greedy"] == pytest.approx(tau)  # flat t(k, 1): a pass costs one step
    passes = [d for rec in _lines(out / "answers" / "oneiro-hybrid.jsonl")
              for d in rec["choices"][0]["draft_lengths"]]
    tokens = sum(sum(rec["choices"][0]["new_tokens"]) for rec in _lines(out / "answers" / "oneiro-hybrid.jsonl"))
    assert per_b[8]["speedup_vs_batched_greedy"] == pytest.approx(tokens / sum(steep[d + 1] for d in passes))
    assert per_b[8]["tokens_per_s"] == pytest.approx(per_b[8]["speedup_vs_batched_greedy"] * 8 / 0.02)
    text = breakdown_markdown(result)
    assert "Modelled batched throughput" in text and "| oneiro-hybrid |" in text and "B=8" in text
    assert all(a in text for a in BATCH_MODEL_ASSUMPTIONS)
    del profile["batch"]
    plain = time_breakdown(out, profile)
    assert "modelled_batch" not in plain["methods"]["oneiro-hybrid"]
    assert "Modelled batched" not in breakdown_markdown(plain)


def test_summarize_rewrites_a_throughput_run_from_its_lanes(throughput_run, tmp_path, capsys):
    _, out = throughput_run
    again = tmp_path / "again"
    shutil.copytree(out, again)
    first = json.loads((again / "summary.json").read_text())
    (again / "summary.json").write_text(json.dumps({**first, "throughput": {}}))  # as an older oneiro-hf wrote it
    assert bench_cli.main(["summarize", str(again)]) == 0
    rewritten = json.loads((again / "summary.json").read_text())
    assert rewritten["throughput"] == first["throughput"] and rewritten["config"] == first["config"]
    assert (again / "report.md").read_text() == (out / "report.md").read_text()
    (again / "summary.json").unlink()  # a run killed before it wrote one
    assert bench_cli.main(["summarize", str(again)]) == 2
    assert "no summary.json" in capsys.readouterr().err


def test_throughput_lanes_never_draft_from_each_others_answers(env, tmp_path, monkeypatch):
    # the batched and separate lanes answer the same prompts, and every batch size answers them again: a suffix
    # memory shared between them would draft one lane's answers into the next (a replay, not a measurement)
    calls = []  # (method, mode, batch size, batch index, the memory the call drafts from, and the tokens it kept)
    lane_of = {}
    run_lane, generate_once = batched.run_lane, batched.generate_once

    def spy_lane(ctx, method, mode, batch_size, index, *args, **kwargs):
        lane_of["now"] = (method, mode, batch_size, index)
        return run_lane(ctx, method, mode, batch_size, index, *args, **kwargs)

    def spy_generate(ctx, method, *args, memory_key=None, **kwargs):
        memory = ctx.memories.get(memory_key or method)
        calls.append((*lane_of["now"], memory, 0 if memory is None else memory.kept))
        return generate_once(ctx, method, *args, memory_key=memory_key, **kwargs)

    monkeypatch.setattr(batched, "run_lane", spy_lane)
    monkeypatch.setattr(batched, "generate_once", spy_generate)
    out = tmp_path / "run"
    assert bench_cli.main(_run_args(env, out, "--methods", "oneiro-suffix", "--batch-size", "1,2", "--no-plots")) == 0
    assert json.loads((out / "summary.json").read_text())["lossless_violations"] == []
    measured = [c for c in calls if c[0] == "oneiro-suffix" and c[3] >= 0]  # not the warm-up (batch index -1)
    for b in (1, 2):
        for mode in ("batched", "separate") if b > 1 else ("batched",):
            lane = [c for c in measured if c[1:3] == (mode, b)]
            assert lane and lane[0][4] is None  # starts empty: nothing of the warm-up or of a smaller size
            assert any(c[5] > 0 for c in lane[1:])  # and keeps its own answers from one call to the next
    held = {mode: [c[4] for c in measured if c[1] == mode and c[4] is not None] for mode in ("batched", "separate")}
    assert held["batched"] and held["separate"]
    assert not any(a is b for a in held["batched"] for b in held["separate"])
