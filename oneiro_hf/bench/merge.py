"""Merges benchmark runs that split one question set between them (`oneiro-bench merge`), and summarises a run
stopped before its last question (`oneiro-bench summarize`).

A long run can be sharded by `--categories` over several processes or machines; each shard interleaves
the same methods per question against its own greedy, so the ratios stay side by side. Merging is only
sound when the shards measured the same thing: the same methods and run settings (target, drafter, dtype,
device, threads, token budget) and disjoint questions. Anything else is refused with what differs.
"""

from __future__ import annotations

import json
from pathlib import Path

from .answers import load_questions, read_run_answers
from .report import make_plots, report_markdown, summarize

# settings that must agree between shards (run_config.json); everything a ratio depends on
_MUST_AGREE = ("target", "dtype", "device", "max_new_tokens", "threads", "drafter", "early_exit_layer",
               "extra_drafters", "assistant", "pin_profile", "drafter_call_ratio")


class MergeError(ValueError):
    """The runs cannot be merged into one; the message says which runs differ and how."""


def _read_run(run: Path) -> tuple[dict, dict[str, list[dict]], dict]:
    config_file, summary_file = run / "run_config.json", run / "summary.json"
    if not config_file.is_file() or not summary_file.is_file():
        raise MergeError(f"{run} is not a finished oneiro-bench run (needs run_config.json and summary.json). "
                         "Fix: pass the --out directories of runs that ended.")
    answers = read_run_answers(run)
    summary = json.loads(summary_file.read_text())
    return json.loads(config_file.read_text()), answers, summary


def merge_runs(runs: list[str | Path], out: str | Path, plots: bool = True,
               questions: str | Path | None = None) -> dict:
    """Write the merged answers, summary.json and report.md (and plots) of `runs` into `out`; return the summary.

    `questions`: the questions file (for references and task scores); default: the one the first run read."""
    runs = [Path(r) for r in runs]
    if len(runs) < 2:
        raise MergeError("merge needs at least two runs. Fix: pass two or more --out directories.")
    out = Path(out)
    if any(out.resolve() == r.resolve() for r in runs):
        raise MergeError(f"--out {out} is one of the runs being merged. Fix: write the merge to a new directory.")
    loaded = [_read_run(r) for r in runs]
    first_config, first_answers, first_summary = loaded[0]
    problems = []
    for run, (config, answers, _) in zip(runs[1:], loaded[1:]):
        for key in _MUST_AGREE:
            if config.get(key) != first_config.get(key):
                problems.append(f"{key}: {runs[0]} has {first_config.get(key)!r}, {run} has {config.get(key)!r}")
        if set(answers) != set(first_answers):
            problems.append(f"methods: {runs[0]} has {sorted(first_answers)}, {run} has {sorted(answers)}")
    owner: dict = {}
    for run, (_, answers, _) in zip(runs, loaded):
        ids = {r["question_id"] for recs in answers.values() for r in recs}
        for qid in sorted(ids & set(owner), key=str):
            problems.append(f"question {qid} is in both {owner[qid]} and {run}")
        owner.update({qid: run for qid in ids})
    if problems:
        raise MergeError("these runs do not split one benchmark: " + "; ".join(problems[:10])
                         + ". Fix: merge shards of one command that differ only in --categories.")
    records = {m: [r for _, answers, _ in loaded for r in answers[m]] for m in first_answers}
    questions_file = questions or (first_summary.get("config") or {}).get("questions")
    if not questions_file or not Path(questions_file).is_file():
        raise MergeError(f"the questions file {questions_file!r} of {runs[0]} is not readable from here (task scores "
                         "need its references). Fix: pass --questions FILE.")
    selected = {q["question_id"]: q for q in load_questions(questions_file) if q["question_id"] in owner}
    summary = summarize(records, selected)
    summary["partial"] = any(s.get("partial") for _, _, s in loaded)
    if first_summary.get("profile") is not None:
        summary["profile"] = first_summary["profile"]
    summary["config"] = {**(first_summary.get("config") or {}), "categories": None,
                         "n_questions": len(owner), "merged_from": [str(r) for r in runs]}
    out.mkdir(parents=True, exist_ok=True)
    (out / "answers").mkdir(exist_ok=True)
    for method, recs in records.items():
        (out / "answers" / f"{method}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (out / "run_config.json").write_text(json.dumps(first_config, indent=2))
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    figures = make_plots(summary, records, out) if plots else {}
    (out / "report.md").write_text(report_markdown(summary, figures))
    return summary


def summarize_partial_run(run: str | Path, questions: str | Path, profile: str | Path | None = None) -> dict:
    """Write summary.json and report.md of `run` from the questions every method answered (a run killed mid-question
    has answers from some methods only), marked "partial"; `profile`: the t(k) JSON the run was given. A run stopped
    with Ctrl-C writes these itself; one stopped otherwise (SIGTERM, a lost machine) is summarised here."""
    run = Path(run)
    if not (run / "run_config.json").is_file():
        raise MergeError(f"{run} is not an oneiro-bench run (no run_config.json). Fix: pass a run's --out directory.")
    records = read_run_answers(run)
    answered = [{r["question_id"] for r in recs} for recs in records.values()]
    complete = set.intersection(*answered) if answered else set()
    if not complete:
        raise MergeError(f"{run}: no question was answered by every method. Fix: let the run finish one question.")
    selected = {q["question_id"]: q for q in load_questions(questions) if q["question_id"] in complete}
    records = {m: [r for r in recs if r["question_id"] in selected] for m, recs in records.items()}
    summary = summarize(records, selected)
    summary["partial"] = True
    if profile is not None:
        summary["profile"] = json.loads(Path(profile).read_text())
    summary["config"] = {**json.loads((run / "run_config.json").read_text()), "questions": str(questions),
                         "n_questions": len(selected), "categories": sorted({q["category"] for q in selected.values()})}
    (run / "summary.json").write_text(json.dumps(summary, indent=2))
    (run / "report.md").write_text(report_markdown(summary, {}))
    return summary
