"""`oneiro-bench paired`, `table` and `summarize`: tables and summaries read back from finished runs, no model."""

from __future__ import annotations

import csv
import json
import statistics

import pytest
from test_bench import _args, make_env

from oneiro_hf.bench import cli as bench_cli

METHODS = ("--methods", "greedy,oneiro-lookup,oneiro-hybrid", "--drafter", "fresh", "--no-plots")


@pytest.fixture(scope="module")
def lanes(tmp_path_factory):
    root = tmp_path_factory.mktemp("tables")
    env = make_env(root / "env")
    a, b = root / "a", root / "b"
    assert bench_cli.main(_args(env, a, *METHODS, "--categories", "writing")) == 0
    assert bench_cli.main(_args(env, b, *METHODS, "--categories", "math_reasoning")) == 0
    return env, a, b


def test_paired_ratios_pair_questions_across_lanes_and_write_what_they_come_from(lanes, tmp_path, capsys):
    from oneiro_hf.bench.tables import paired_ratios

    _, a, b = lanes
    result = paired_ratios([a, b])
    assert result["questions"] == [1, 2, 3, 4]
    assert result["methods"]["greedy"]["speedup_vs_greedy"] == pytest.approx(1.0)
    assert all(e["identical_to_greedy"] == 4 for e in result["methods"].values())  # lossless methods
    out = tmp_path / "rows.csv"
    assert bench_cli.main(["paired", str(a), str(b), "--csv", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("4 questions complete") and "oneiro-hybrid / oneiro-lookup: geo-mean" in printed
    per_token = {}  # read from the answer records directly
    for run in (a, b):
        for path in (run / "answers").glob("*.jsonl"):
            for line in path.read_text().splitlines():
                rec = json.loads(line)
                choice = rec["choices"][0]
                per_token[path.stem, rec["question_id"]] = (sum(choice["wall_time"]), sum(choice["new_tokens"]))
    expected = statistics.geometric_mean([(per_token["oneiro-lookup", q][0] / per_token["oneiro-lookup", q][1])
                                          / (per_token["oneiro-hybrid", q][0] / per_token["oneiro-hybrid", q][1])
                                          for q in (1, 2, 3, 4)])
    pair = next(p for p in result["pairs"] if (p["a"], p["b"]) == ("oneiro-hybrid", "oneiro-lookup"))
    assert pair["geo_mean"] == pytest.approx(expected, rel=1e-9)
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 4 * 4  # 4 questions x greedy, oneiro-greedy, oneiro-lookup, oneiro-hybrid
    for row in rows:
        wall, tokens = per_token[row["method"], int(row["question_id"])]
        assert (row["wall_s"], int(row["new_tokens"])) == (f"{wall:.4f}", tokens)
    assert bench_cli.main(["paired", str(tmp_path)]) == bench_cli.EXIT_BAD_INPUT
    assert "Fix:" in capsys.readouterr().err


def test_table_prints_one_row_per_method_of_the_summary(lanes, capsys):
    _, a, _ = lanes
    assert bench_cli.main(["table", str(a)]) == 0
    lines = capsys.readouterr().out.splitlines()
    summary = json.loads((a / "summary.json").read_text())
    assert len(lines) == 2 + len(summary["methods"])
    greedy = next(line for line in lines if line.startswith("| greedy |"))
    speedup = summary["methods"]["greedy"]["overall"]["speedup_vs_greedy"]
    assert f"| {speedup:.2f}x |" in greedy and "| stock |" in greedy and "| 100% |" in greedy
    assert bench_cli.main(["table", str(a / "missing.json")]) == bench_cli.EXIT_BAD_INPUT


def test_summarize_keeps_the_questions_every_method_answered(lanes, tmp_path, capsys):
    env, _, b = lanes
    run = tmp_path / "stopped"
    (run / "answers").mkdir(parents=True)
    (run / "run_config.json").write_text((b / "run_config.json").read_text())
    for path in (b / "answers").glob("*.jsonl"):  # the last question answered by greedy only
        lines = path.read_text().splitlines(keepends=True)
        (run / "answers" / path.name).write_text("".join(lines if path.stem == "greedy" else lines[:-1]))
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps({"t1_s": 0.01, "ratios": {"1": 1.0, "2": 1.1}}))
    assert bench_cli.main(["summarize", str(run), "--questions", str(env / "questions.jsonl"),
                           "--profile", str(profile)]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["partial"] is True and summary["config"]["n_questions"] == 1
    assert summary["methods"]["greedy"]["overall"]["n_prompts"] == 1 and summary["profile"]["t1_s"] == 0.01
    assert (run / "report.md").is_file()
    assert bench_cli.main(["summarize", str(tmp_path), "--questions", "q.jsonl"]) == bench_cli.EXIT_BAD_INPUT
    assert "Fix:" in capsys.readouterr().err
