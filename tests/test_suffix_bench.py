"""oneiro-bench's `oneiro-suffix`: the tree with the suffix memory, kept across a run's questions in file order."""

from __future__ import annotations

import json

from test_bench import _args, _lines, env  # noqa: F401  (env is the module-scoped tiny target on disk)

from oneiro_hf import bench
from oneiro_hf.bench import cli as bench_cli


def test_oneiro_suffix_parses_to_the_tree_with_the_memory() -> None:
    spec = bench.parse_method("oneiro-suffix")
    assert spec.oneiro_settings == {"mode": "hybrid", "tree": True, "suffix_memory": True}
    assert spec.lossless and spec.uses_drafter and spec.kernels == "oneiro"


def test_a_run_of_repeated_tasks_drafts_from_the_earlier_answers(env, tmp_path):  # noqa: F811
    # the same task three times in a row: from the second on, the memory holds the first answer
    questions = tmp_path / "repeated.jsonl"
    task = "w1 w5 w9 w2 w7"
    questions.write_text("".join(json.dumps({"question_id": i, "category": "writing", "turns": [task]}) + "\n"
                                 for i in range(3)))
    out = tmp_path / "run"
    assert bench_cli.main(_args(env, out, "--methods", "oneiro-tree,oneiro-suffix", "--drafter", "fresh",
                                "--no-plots", "--max-new-tokens", "16", "--pin-profile", "h200",
                                questions=questions)) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["lossless_violations"] == []
    assert summary["methods"]["oneiro-suffix"]["overall"]["identical_to_greedy"] == 1.0
    records = {r["question_id"]: r["oneiro_stats"] for r in _lines(out / "answers" / "oneiro-suffix.jsonl")}
    assert records[0]["accepted_by_source"]["memory"] <= records[2]["accepted_by_source"]["memory"]
    assert records[2]["accepted_by_source"]["memory"] > 0
    plain = _lines(out / "answers" / "oneiro-tree.jsonl")
    assert all(r["oneiro_stats"]["drafted_by_source"]["memory"] == 0 for r in plain)  # memory off there
