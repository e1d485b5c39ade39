"""The evaluate metric modules shipped in oneiro_hf/metrics: loaded by path offline, the bench's numbers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from oneiro_hf import metrics
from oneiro_hf.bench.report import TASK_METRICS, summarize, task_score

ROOT = Path(__file__).resolve().parents[1]


def test_modules_load_by_path_offline_in_a_fresh_process():
    code = (
        "import evaluate, oneiro_hf.metrics as M\n"
        "for name in M.METRICS:\n"
        "    cfg = 'rag' if name == 'spec_task_score' else None\n"
        "    m = evaluate.load(M.path(name), cfg) if cfg else evaluate.load(M.path(name))\n"
        "    print(name, type(m).__name__)\n"
        "print(evaluate.load(M.path('spec_fidelity')).compute(predictions=['x y'], references=['x y']))\n"
    )
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_EVALUATE_OFFLINE="1",
               OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], check=False, cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "spec_fidelity SpecFidelity" in out.stdout and "token_identity TokenIdentity" in out.stdout
    assert "spec_task_score SpecTaskScore" in out.stdout
    assert "{'rouge_l': 1.0, 'exact_match': 1.0}" in out.stdout


def test_spec_fidelity_rouge_l_and_exact_match():
    m = metrics.load("spec_fidelity")
    # "the cat sat" vs "the cat sat down": LCS 3 words, precision 3/3, recall 3/4 -> F1 = 6/7
    got = m.compute(predictions=["the cat sat", "Same text.", ""], references=["the cat sat down", "Same text.", ""],
                    per_example=True)
    assert got["rouge_l_per_example"] == pytest.approx([6 / 7, 1.0, 1.0])
    assert got["exact_match_per_example"] == [0.0, 1.0, 1.0]
    assert got["rouge_l"] == pytest.approx((6 / 7 + 2) / 3) and got["exact_match"] == pytest.approx(2 / 3)
    # disjoint words score 0; case is ignored by rouge_score's tokenizer, not by exact match
    got = m.compute(predictions=["alpha beta", "HELLO world"], references=["gamma delta", "hello world"])
    assert got == {"rouge_l": pytest.approx(0.5), "exact_match": 0.0}


def test_token_identity():
    m = metrics.load("token_identity")
    got = m.compute(predictions=[[1, 2, 3], [1, 2, 9, 4], [], [5]], references=[[1, 2, 3], [1, 2, 3, 4], [], [6, 7]],
                    per_example=True)
    assert got["identical_per_example"] == [True, False, True, False]
    assert got["common_prefix_per_example"] == [3, 2, 0, 0]
    assert got["token_identity"] == 0.5
    assert got["common_prefix_ratio"] == pytest.approx((1 + 0.5 + 1 + 0) / 4)


def test_spec_task_scores_per_category():
    assert metrics.load("spec_task_score", "math_reasoning").compute(
        predictions=["so the total is $1,000.", "it is 999", "42"], references=["... #### 1000", "#### 1000", "none"],
        per_example=True) == {"metric": "answer_accuracy", "score": 0.5, "n": 2, "scores": [1.0, 0.0, None]}
    assert metrics.load("spec_task_score", "rag").compute(
        predictions=["It was George Harrison, I think.", "Nobody knows."],
        references=[["James Ray", "George Harrison"], ["The Beatles"]]) == {
        "metric": "contains_answer", "score": 0.5, "n": 2}
    got = metrics.load("spec_task_score", "summarization").compute(
        predictions=["the cat sat"], references=["the cat sat down"])
    assert got == {"metric": "rouge_l_vs_reference", "score": pytest.approx(6 / 7), "n": 1}
    for category, name in TASK_METRICS.items():  # the bench's report names what the module computes
        assert metrics.load("spec_task_score", category).compute(predictions=["a"], references=[
            ["a"] if category == "rag" else "a #### 1"])["metric"] == name
    # the bench's task_score goes through the module
    assert task_score("translation", ["All tickets remain valid"], ["All tickets remain valid ."]) == 1.0
    assert task_score("math_reasoning", ["it is 1000"], [["#### 1000"]]) is None  # not a solution text
    assert task_score("writing", ["anything"], ["hint"]) is None


def test_bad_names_and_a_missing_rouge_score_name_the_fix(monkeypatch):
    with pytest.raises(ValueError, match="Unknown oneiro-hf metric 'rouge'. Fix: use one of spec_fidelity"):
        metrics.path("rouge")
    with pytest.raises(KeyError, match="no configuration 'writing'. Fix: pass a Spec-Bench category"):
        metrics.load("spec_task_score", "writing")
    m = metrics.load("spec_fidelity")
    monkeypatch.setitem(sys.modules, "rouge_score", None)  # as if it were not installed
    assert m.compute(predictions=["same"], references=["same"])["rouge_l"] == 1.0  # identical: no scorer needed
    with pytest.raises(ImportError, match=r"rouge_score.*Fix: pip install 'oneiro-hf\[bench\]'"):
        m.compute(predictions=["a b"], references=["a c"])


def _answer(qid: str, category: str, turns: list[str], ids: list[list[int]]) -> dict:
    return {"question_id": qid, "category": category,
            "choices": [{"turns": turns, "output_ids": ids, "new_tokens": [len(t) for t in ids],
                         "wall_time": [1.0] * len(ids), "accept_lengths": [1] * sum(map(len, ids))}]}


def test_bench_summary_uses_the_modules():
    greedy = [_answer("q1", "writing", ["the cat sat down", "ok"], [[1, 2, 3, 4], [5]]),
              _answer("q2", "math_reasoning", ["total 12"], [[7, 8]])]
    lossy = [_answer("q1", "writing", ["the cat sat", "ok"], [[1, 2, 3], [5]]),
             _answer("q2", "math_reasoning", ["total 12"], [[7, 8]])]
    questions = {"q1": {"category": "writing"}, "q2": {"category": "math_reasoning", "reference": ["#### 12"]}}
    summary = summarize({"greedy": greedy, "oneiro-lookup": lossy}, questions)
    overall = summary["methods"]["oneiro-lookup"]["overall"]
    assert overall["rouge_l_vs_greedy"] == pytest.approx(((6 / 7 + 1) / 2 + 1) / 2)
    assert overall["exact_match_vs_greedy"] == pytest.approx(2 / 3)
    assert overall["identical_to_greedy"] == 0.5
    assert summary["lossless_violations"] == ["oneiro-lookup"]
    assert summary["lossless_violation_questions"] == {"oneiro-lookup": ["q1"]}
    task = summary["methods"]["oneiro-lookup"]["categories"]["math_reasoning"]["task_score"]
    assert task == {"metric": "answer_accuracy", "score": 1.0, "n": 1}
